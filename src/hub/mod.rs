//! The hub: what turns committed rows into woken long-polls.
//!
//! It owns this replica's [`Waiters`], the [`Notifier`] that tells other replicas, the handling
//! of what the LISTEN connection hears, the safety-net re-check, and the long-poll loops
//! themselves (lease, job wait). Invariant: every wake is an optimisation. A waiter always
//! re-checks the database before answering, and registers before it checks, so nothing is
//! missed between check and wait; a lost notification delays a job by at most
//! `recheck_interval` (see docs/wake.md).

pub mod notifier;
pub mod sweeper;
pub mod waiters;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

pub use notifier::Notifier;
pub use waiters::{Key, Waiters};

use crate::config::Config;
use crate::domain::records::{Claimed, Moved};
use crate::domain::state::JobState;
use crate::store::listener::ListenerEvent;
use crate::store::{Result, Store};
use crate::telemetry::metrics::{self, Metrics};
use crate::telemetry::traces;

pub struct Hub {
    pub store: Store,
    pub config: Config,
    pub waiters: Waiters,
    pub notifier: Notifier,
    /// Identifies this replica's own notifications, which it has already acted on locally.
    pub origin: String,
    /// The LISTEN connection is up.
    pub listening: AtomicBool,
    pub metrics: Metrics,
}

/// The end of a lease long-poll.
pub enum LeaseAnswer {
    Jobs(Vec<Claimed>),
    /// The runner was revoked while it waited.
    RunnerGone,
}

impl Hub {
    pub fn new(store: Store, config: Config, notifier: Notifier, origin: String) -> Self {
        Self {
            store,
            config,
            waiters: Waiters::default(),
            notifier,
            origin,
            listening: AtomicBool::new(false),
            metrics: Metrics::new(),
        }
    }

    /// A job was parked (dispatch, release, re-delivery, revoke): wake one local waiter on its
    /// queue now and tell the other replicas.
    pub fn job_parked(&self, owner: &str, runner_id: Option<Uuid>) {
        let key = Key::queue(owner, runner_id);
        if self.waiters.wake_one(&key, 0) {
            self.metrics.wakes.inc();
        }
        self.notifier.send(key);
    }

    /// Something happened to a job (state change, events): wake its readers everywhere.
    pub fn job_changed(&self, id: Uuid) {
        let key = Key::Job(id);
        self.waiters.wake_all(&key);
        self.notifier.send(key);
    }

    /// Wake-ups for jobs a sweep or revocation moved.
    pub fn after_moves(&self, moved: &[Moved]) {
        for m in moved {
            if m.state == JobState::Parked {
                self.job_parked(&m.owner, m.runner_id);
            }
            self.job_changed(m.id);
        }
    }

    /// Act on what the LISTEN connection reports.
    pub fn on_listener_event(&self, event: ListenerEvent) {
        match event {
            ListenerEvent::Up => {
                self.listening.store(true, Ordering::Release);
                // Notifications sent while we were not listening are gone: everyone re-checks.
                self.waiters.wake_everyone();
            }
            ListenerEvent::Down => self.listening.store(false, Ordering::Release),
            ListenerEvent::Notification(payload) => {
                self.metrics.notifications_heard.inc();
                let Some((origin, key)) = payload.split_once('|') else {
                    return;
                };
                if origin == self.origin {
                    return;
                }
                match Key::decode(key) {
                    Some(k @ Key::Job(_)) => {
                        self.waiters.wake_all(&k);
                    }
                    Some(k) if self.waiters.wake_one(&k, 0) => {
                        self.metrics.wakes.inc();
                    }
                    _ => {}
                }
            }
        }
    }

    /// Feed listener events into the hub until the channel closes.
    pub async fn consume_listener(self: Arc<Self>, mut rx: mpsc::UnboundedReceiver<ListenerEvent>) {
        while let Some(event) = rx.recv().await {
            self.on_listener_event(event);
        }
    }

    /// The safety net, once per interval: one query finds which waited-on queues have parked
    /// jobs, and one waiter per such queue re-checks. Also keeps long-polling runners `online`.
    pub async fn recheck_loop(self: Arc<Self>, cancel: CancellationToken) {
        let mut recheck = tokio::time::interval(self.config.recheck_interval());
        let mut presence = tokio::time::interval(self.config.presence_refresh());
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = recheck.tick() => {
                    let (owners, runners) = self.waiters.queue_keys();
                    if owners.is_empty() && runners.is_empty() {
                        continue;
                    }
                    self.metrics.rechecks.inc();
                    match self.store.parked_queues(&owners, &runners).await {
                        Ok(queues) => {
                            for (owner, runner_id) in queues {
                                self.waiters.wake_one(&Key::queue(&owner, runner_id), 0);
                            }
                        }
                        Err(_) => self.metrics.background_failure("recheck"),
                    }
                }
                _ = presence.tick() => {
                    let (_, runners) = self.waiters.queue_keys();
                    if self.store.touch_runners(&runners).await.is_err() {
                        self.metrics.background_failure("touch");
                    }
                }
            }
        }
    }

    /// A runner's lease long-poll, authenticated by its token hash: claim at once; with nothing
    /// there and a free slot, wait (holding no connection) until woken, then claim again; when
    /// the wait ends, re-check once. The first look learns who the runner is; if it finds
    /// nothing, the waiter registers and looks once more before it waits, so a job parked in
    /// between is never missed.
    ///
    /// # Errors
    /// The database failed.
    pub async fn lease(
        &self,
        token_hash: &[u8],
        capabilities: Option<Vec<String>>,
        max_jobs: i64,
        wait: Duration,
        shutdown: &CancellationToken,
    ) -> Result<LeaseAnswer> {
        let deadline = Instant::now() + wait;
        let ttl = self.config.lease_ttl_ms as i64;
        let mut capabilities = capabilities;
        let mut keys: Option<Vec<Key>> = None;
        let mut woken_by = None;
        let mut last_look = wait.is_zero();
        loop {
            let registration = keys.clone().map(|k| self.waiters.register(k));
            // Boxed: the database call's large state lives on the heap only while it runs, so a
            // parked long-poll stays small (10,000 of them are held at once).
            let out = Box::pin(traces::statement(
                || "lease transaction",
                self.store
                    .lease(token_hash, capabilities.as_deref(), max_jobs, ttl),
            ))
            .await?;
            // Advertised capabilities are stored by the first attempt.
            capabilities = None;
            if out.runner_gone {
                return Ok(LeaseAnswer::RunnerGone);
            }
            for id in &out.rejected {
                self.job_changed(*id);
            }
            for job in &out.claimed {
                self.job_changed(job.id);
                traces::job_step("lease", job.id, job.epoch, job.traceparent.as_deref());
            }
            self.metrics.leases.inc_by(out.claimed.len() as u64);
            for job in out.claimed.iter().filter(|j| j.attempt == 1) {
                if let Some(age) = metrics::age_of_v7(&job.id) {
                    self.metrics.lease_wait.observe(age);
                }
            }
            // Pool jobs we did not take are still parked: pass the wake on to the next waiter.
            if let Some(waiters::Wake { key, hops, at }) = woken_by.take() {
                if !out.claimed.is_empty() {
                    self.metrics
                        .wake_latency
                        .observe(at.elapsed().as_secs_f64());
                }
                if out.more {
                    self.waiters.wake_one(&key, hops + 1);
                }
            }
            if !out.claimed.is_empty() || out.free <= 0 || last_look || shutdown.is_cancelled() {
                return Ok(LeaseAnswer::Jobs(out.claimed));
            }
            let Some(registration) = registration else {
                keys = Some(vec![Key::Runner(out.runner_id), Key::Pool(out.owner)]);
                continue;
            };
            let _open = self.metrics.long_poll();
            tokio::select! {
                wake = registration.woken() => woken_by = Some(wake),
                _ = tokio::time::sleep_until(deadline) => last_look = true,
                _ = shutdown.cancelled() => return Ok(LeaseAnswer::Jobs(Vec::new())),
            }
        }
    }

    /// Wait on a job until `done` says the answer is ready, the wait ends or shutdown begins;
    /// `look` reads the current answer. Registers before each look, so no change is missed.
    ///
    /// # Errors
    /// The database failed.
    pub async fn wait_on_job<T, F, Fut>(
        &self,
        job_id: Uuid,
        wait: Duration,
        shutdown: &CancellationToken,
        mut look: F,
        done: impl Fn(&T) -> bool,
    ) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T>>,
    {
        let deadline = Instant::now() + wait;
        loop {
            let registration = self.waiters.register(vec![Key::Job(job_id)]);
            let answer = Box::pin(look()).await?;
            if done(&answer) || Instant::now() >= deadline || shutdown.is_cancelled() {
                return Ok(answer);
            }
            tokio::select! {
                _ = registration.woken() => {}
                _ = tokio::time::sleep_until(deadline) => {}
                _ = shutdown.cancelled() => {}
            }
        }
    }
}
