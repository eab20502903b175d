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
mod transitions;
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
use crate::domain::state::JobState;
use crate::store::lease::{Advertised, Probe};
use crate::store::listener::ListenerEvent;
use crate::store::queues::ParkedQueue;
use crate::store::records::{Claimed, LeaseIdentity, Moved, Queue};
use crate::store::{Result, Store};
use crate::telemetry::metrics::{self, Metrics};
use crate::telemetry::traces;

/// Runner identities a replica remembers (token hash → id, workspace, owner); past this many it
/// forgets them all and relearns (one extra round trip each).
const MAX_KNOWN_RUNNERS: usize = 100_000;

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
    /// Runner identities by token hash (never the token), see [`MAX_KNOWN_RUNNERS`].
    identities: parking_lot::Mutex<std::collections::HashMap<Vec<u8>, LeaseIdentity>>,
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
            identities: parking_lot::Mutex::default(),
        }
    }

    /// A job was parked (dispatch, release, re-delivery, revoke): wake one local waiter that
    /// can take it now; only when this replica has none, tell the other replicas (a local
    /// waiter that then cannot take it passes the wake on, and tells them itself).
    pub fn job_parked(&self, queue: &Queue) {
        let keys = Key::for_queue(queue);
        if keys.iter().any(|k| self.waiters.wake_one(k, 0, true)) {
            self.metrics.wakes.inc();
            return;
        }
        for key in keys {
            self.notifier.send(key);
        }
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
                self.job_parked(&m.queue);
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
                    Some(k) if self.waiters.wake_one(&k, 0, false) => {
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
                    let waited = self.waiters.waited_queues();
                    if waited.is_empty() {
                        continue;
                    }
                    self.metrics.rechecks.inc();
                    match self.store.parked_queues(&waited).await {
                        Ok(queues) => {
                            for q in queues {
                                let key = match q {
                                    ParkedQueue::Pool { workspace, owner } => Key::Pool(workspace, owner),
                                    ParkedQueue::Any { workspace } => Key::Any(workspace),
                                    ParkedQueue::Runner(id) => Key::Runner(id),
                                };
                                self.waiters.wake_one(&key, 0, false);
                            }
                        }
                        Err(e) => {
                            self.metrics.background_failure("recheck");
                            tracing::warn!(error = %e, "re-check of waited-on queues failed; the next interval retries");
                        }
                    }
                }
                _ = presence.tick() => {
                    let runners = self.waiters.waited_queues().runners;
                    if let Err(e) = self.store.touch_runners(&runners).await {
                        self.metrics.background_failure("touch");
                        tracing::warn!(error = %e, runners = runners.len(),
                            "refreshing long-polling runners' presence failed; they may show dormant until the next refresh");
                    }
                }
            }
        }
    }

    /// Who the runner with this token hash is, if this replica has seen it lease before.
    pub fn known_runner(&self, token_hash: &[u8]) -> Option<LeaseIdentity> {
        self.identities.lock().get(token_hash).cloned()
    }

    fn remember_runner(&self, token_hash: &[u8], me: Option<&LeaseIdentity>) {
        let mut known = self.identities.lock();
        match me {
            Some(me) => {
                if known.len() >= MAX_KNOWN_RUNNERS {
                    known.clear();
                }
                known.insert(token_hash.to_vec(), me.clone());
            }
            None => {
                known.remove(token_hash);
            }
        }
    }

    /// A runner's lease long-poll, authenticated by its token hash: claim at once; with nothing
    /// there and a free slot, wait (holding no connection) until woken, then claim again; when
    /// the wait ends, re-check once. A waiter registers *before* it looks, so a job parked
    /// between the look and the wait is never missed; a runner this replica has not seen
    /// before looks once to learn who it is, then registers and looks again.
    ///
    /// # Errors
    /// The database failed.
    pub async fn lease(
        &self,
        token_hash: &[u8],
        advertised: Advertised,
        max_jobs: i64,
        wait: Duration,
        shutdown: &CancellationToken,
    ) -> Result<LeaseAnswer> {
        let deadline = Instant::now() + wait;
        let ttl = self.config.lease_ttl_ms as i64;
        let mut advertised = Some(advertised);
        let mut known = self.known_runner(token_hash);
        let mut woken_by: Option<waiters::Wake> = None;
        let mut last_look = wait.is_zero();
        loop {
            let registration = match &known {
                Some(me) if !last_look => Some(self.waiters.register(Key::for_runner(me))),
                _ => None,
            };
            // The last look, at the deadline of a wait nothing ended, is usually empty: a
            // read-only probe decides whether the lease transaction is worth running. (Not the
            // first look: a busy runner's next call usually finds work, and would pay a round
            // trip more. What a call advertises was recorded by its first look.)
            if let (Some(me), None, true) = (&known, &woken_by, last_look && !wait.is_zero()) {
                match Box::pin(self.store.lease_probe(token_hash, me)).await? {
                    Probe::Gone => {
                        self.remember_runner(token_hash, None);
                        return Ok(LeaseAnswer::RunnerGone);
                    }
                    Probe::Nothing => return Ok(LeaseAnswer::Jobs(Vec::new())),
                    Probe::Worth => {}
                }
            }
            // Boxed: the database call's large state lives on the heap only while it runs, so a
            // parked long-poll stays small (10,000 of them are held at once).
            let out = Box::pin(traces::statement(
                || "lease transaction",
                self.store.lease(
                    token_hash,
                    advertised.as_ref().unwrap_or(&Advertised::default()),
                    known.as_ref(),
                    max_jobs,
                    ttl,
                    woken_by.is_some(),
                ),
            ))
            .await?;
            // Advertised capabilities are stored by the first attempt.
            advertised = None;
            let Some(me) = out.runner else {
                self.remember_runner(token_hash, None);
                return Ok(LeaseAnswer::RunnerGone);
            };
            if known.as_ref() != Some(&me) {
                // First sight of this runner: if it must wait, the next turn registers and
                // looks again.
                self.remember_runner(token_hash, Some(&me));
                known = Some(me);
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
            // Pool jobs we did not take are still parked: pass the wake on to the next waiter
            // here, or (for a job this replica parked) to the other replicas.
            if let Some(wake) = woken_by.take() {
                if !out.claimed.is_empty() {
                    self.metrics
                        .wake_latency
                        .observe(wake.at.elapsed().as_secs_f64());
                }
                if out.more
                    && !self.waiters.wake_one(&wake.key, wake.hops + 1, wake.local)
                    && wake.local
                {
                    self.notifier.send(wake.key);
                }
            }
            if !out.claimed.is_empty() || out.free <= 0 || last_look || shutdown.is_cancelled() {
                return Ok(LeaseAnswer::Jobs(out.claimed));
            }
            let Some(registration) = registration else {
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
