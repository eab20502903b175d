//! The hub: what turns committed rows into woken long-polls.
//!
//! It owns this replica's [`Dispatcher`] (where lease calls wait, and which claims for them),
//! its [`Waiters`] (reads waiting on a job), the [`Notifier`] that tells other replicas, the
//! handling of what the LISTEN connection hears, the safety-net re-check, and the long-poll
//! loops themselves (lease, job wait: `long_poll.rs`). Invariant: every wake is an
//! optimisation. A new lease call always claims once, and a read registers before it looks, so
//! nothing is missed between look and wait; a lost notification delays a job by at most
//! `recheck_interval` (see docs/wake.md).
//!
//! It is also all the API reaches of the store: the hub's operations name what they do
//! (`transitions.rs` for the calls that change a job, `jobs.rs`, `runners.rs`, `secrets.rs` and
//! `artifacts.rs` for the rest), and the store and the configuration stay private to it.

mod artifacts;
pub mod dispatcher;
pub mod feed;
pub mod handover;
mod jobs;
mod long_poll;
pub mod notifier;
pub mod pace;
pub mod retention;
mod runners;
mod secrets;
pub mod sweeper;
mod transitions;
pub mod vacuum;
pub mod waiters;
pub mod wake_stages;
pub mod webhooks;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

pub use dispatcher::Dispatcher;
pub use long_poll::{Advertised, LeaseAnswer, Leased};
pub use notifier::{Notice, Notifier};
pub use waiters::Waiters;

use crate::config::Config;
use crate::domain::state::JobState;
use crate::store::claim::Lane;
use crate::store::listener::ListenerEvent;
pub use crate::store::placement::GiveBack;
use crate::store::records::{LeaseIdentity, Moved, Queue};
use crate::store::Store;
use crate::telemetry::metrics::{Metrics, Snapshot};

pub struct Hub {
    /// Private: the API reaches the database through the hub's operations, never the store.
    store: Store,
    /// Private: what the API applies of it is on its own state (`api::Limits`).
    config: Config,
    /// Where lease calls wait, and what claims for them.
    pub dispatcher: Arc<Dispatcher>,
    /// Reads waiting on a job.
    pub waiters: Waiters,
    /// Bumped by every change this replica makes or hears of: feed reads and the webhook
    /// deliverer look again (`feed.rs`).
    feed: tokio::sync::watch::Sender<u64>,
    pub notifier: Notifier,
    /// Identifies this replica's own notifications, which it has already acted on locally.
    pub origin: String,
    /// The LISTEN connection is up.
    pub listening: AtomicBool,
    pub metrics: Metrics,
    /// Runner identities by token hash (never the token), bounded (see [`long_poll`]).
    identities: parking_lot::Mutex<std::collections::HashMap<Vec<u8>, Arc<LeaseIdentity>>>,
    /// When this replica last marked each runner seen (see [`long_poll`]), bounded likewise.
    marked_seen: parking_lot::Mutex<std::collections::HashMap<Uuid, std::time::Instant>>,
}

impl Hub {
    pub fn new(
        store: Store,
        config: Config,
        notifier: Notifier,
        origin: String,
        metrics: Metrics,
    ) -> Arc<Self> {
        Arc::new_cyclic(|hub| {
            let dispatcher = Dispatcher::new(
                store.clone(),
                notifier.clone(),
                hub.clone(),
                config.lease_ttl_ms as i64,
                config.claim_full_walk(),
                (
                    metrics.wake_latency.clone(),
                    metrics.wakes.clone(),
                    metrics.ticks.clone(),
                    metrics.ticks_failed.clone(),
                    metrics.long_polls.clone(),
                ),
                config.fault_fail_ticks,
            );
            Self {
                store,
                config,
                dispatcher,
                waiters: Waiters::default(),
                feed: tokio::sync::watch::Sender::new(0),
                notifier,
                origin,
                listening: AtomicBool::new(false),
                metrics,
                identities: parking_lot::Mutex::default(),
                marked_seen: parking_lot::Mutex::default(),
            }
        })
    }

    /// A job was parked (dispatch, release, re-delivery, revoke, retry): the dispatcher claims
    /// for the runners here that read its lane, or, when none does, the other replicas are told.
    pub fn job_parked(&self, id: Uuid, queue: &Queue) {
        self.dispatcher.parked(queue, id, true);
        self.feed_pulse();
    }

    /// Something happened to a job (state change, events): wake its readers everywhere.
    pub fn job_changed(&self, id: Uuid) {
        self.waiters.wake_all(id);
        self.notifier.send(Notice::Job(id));
        self.feed_pulse();
    }

    /// Wake-ups for jobs a sweep or revocation moved.
    pub fn after_moves(&self, moved: &[Moved]) {
        for m in moved {
            if m.state == JobState::Parked {
                self.job_parked(m.id, &m.queue);
            }
            self.job_changed(m.id);
        }
    }

    /// What a dispatcher's tick owes: the readers of every job it settled, leased or rejected,
    /// and the jobs leased for calls that went away given back.
    async fn after_tick(&self, after: dispatcher::Aftermath) {
        for job in &after.settled {
            self.settled_or_retried(job);
        }
        for id in &after.leased {
            self.job_changed(*id);
        }
        for runner in &after.gone {
            self.forget_runner(*runner);
        }
        for id in &after.rejected {
            self.job_changed(*id);
        }
        // Given back per runner, all its jobs in one statement: a failed tick's many at once.
        type Leases = Vec<(Uuid, i64)>;
        let mut orphans: Vec<(Vec<u8>, Leases)> = Vec::new();
        for (token_hash, id, epoch) in after.orphans {
            match orphans.iter_mut().find(|(t, _)| *t == token_hash) {
                Some((_, jobs)) => jobs.push((id, epoch)),
                None => orphans.push((token_hash, vec![(id, epoch)])),
            }
        }
        for (token_hash, jobs) in &orphans {
            self.metrics.caller_gone.inc_by(jobs.len() as u64);
            match self
                .store
                .give_back(jobs, token_hash, GiveBack::CallerGone)
                .await
            {
                Ok(moved) => self.after_moves(&moved),
                Err(e) => {
                    self.metrics.background_failure("give_back");
                    tracing::warn!(error = %e, jobs = jobs.len(), "giving back jobs leased for a call that went away failed; they are re-delivered when their leases lapse");
                }
            }
        }
    }

    /// Ready: the LISTEN connection is up and the pool reaches the database within 2 s.
    pub async fn ready(&self) -> bool {
        if !self.listening.load(Ordering::Acquire) {
            return false;
        }
        let ping = tokio::time::timeout(std::time::Duration::from_secs(2), self.store.ping()).await;
        matches!(ping, Ok(Ok(())))
    }

    /// This replica's metrics as Prometheus text, with the gauges read now.
    pub fn metrics_text(&self) -> String {
        let pool = self.store.pool_status();
        let now = Snapshot {
            waiters: (self.waiters.len() + self.dispatcher.len()) as u64,
            listening: self.listening.load(Ordering::Relaxed),
            pool_size: pool.size as u64,
            pool_idle: pool.available as u64,
            pool_waiting: pool.waiting as u64,
            db_statements: self.store.statements(),
            notifications_sent: self.notifier.sent.load(Ordering::Relaxed),
        };
        self.metrics.encode(&now)
    }

    /// Act on what the LISTEN connection reports.
    pub fn on_listener_event(&self, event: ListenerEvent) {
        match event {
            ListenerEvent::Up => {
                self.listening.store(true, Ordering::Release);
                // Notifications sent while we were not listening are gone: everyone looks again.
                self.waiters.wake_everyone();
                self.dispatcher.everyone_looks();
                self.feed_pulse();
            }
            ListenerEvent::Down => self.listening.store(false, Ordering::Release),
            ListenerEvent::Notification(payload) => {
                self.metrics.notifications_heard.inc();
                let Some((origin, notice)) = payload.split_once('|') else {
                    return;
                };
                if origin == self.origin {
                    return;
                }
                self.feed_pulse();
                match Notice::decode(notice) {
                    Some(Notice::Job(id)) => {
                        self.waiters.wake_all(id);
                    }
                    Some(Notice::Parked {
                        workspace,
                        lane,
                        place,
                    }) => self.dispatcher.parked_in(&workspace, lane, place, false),
                    None => {}
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

    /// The safety net, once per interval (paced: [`pace`]): one query finds which lanes this
    /// replica's runners wait on have a parked job, and the dispatcher claims for them. Also
    /// keeps the runners that wait here `online`.
    pub async fn recheck_loop(self: Arc<Self>, cancel: CancellationToken) {
        let mut recheck = tokio::time::interval(self.config.recheck_interval());
        let mut presence = tokio::time::interval(self.config.presence_refresh());
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = recheck.tick() => {
                    self.dispatcher.forget_old_places();
                    let waited = self.dispatcher.waited_lanes();
                    if waited.is_empty() {
                        continue;
                    }
                    self.metrics.rechecks.inc();
                    let started = std::time::Instant::now();
                    let lanes: Vec<Lane> = waited.iter().map(|(_, l)| l.clone()).collect();
                    let parked = self.store.parked_lanes(&lanes).await;
                    pace::pace(&mut recheck, started.elapsed());
                    match parked {
                        Ok(parked) => {
                            // With where each lane's first job stands: a place-less park would
                            // send every place back to the head (under an old horizon, a walk of
                            // every dead entry per claim).
                            for (workspace, lane) in waited {
                                if let Some((_, place)) = parked.iter().find(|(l, _)| *l == lane) {
                                    self.dispatcher.parked_in(&workspace, lane, Some(*place), false);
                                }
                            }
                        }
                        Err(e) => {
                            self.metrics.background_failure("recheck");
                            tracing::warn!(error = %e, "re-check of waited-on lanes failed; the next interval retries");
                        }
                    }
                }
                _ = presence.tick() => {
                    let runners = self.dispatcher.waiting_runners();
                    if runners.is_empty() {
                        continue;
                    }
                    self.marked(&runners);
                    if let Err(e) = self.store.touch_runners(&runners).await {
                        self.metrics.background_failure("touch");
                        tracing::warn!(error = %e, runners = runners.len(),
                            "refreshing long-polling runners' presence failed; they may show dormant until the next refresh");
                    }
                }
            }
        }
    }
}
