//! The hub: what turns committed rows into woken long-polls.
//!
//! It owns this replica's [`Waiters`], the [`Notifier`] that tells other replicas, the handling
//! of what the LISTEN connection hears, the safety-net re-check, and the long-poll loops
//! themselves (lease, job wait: `long_poll.rs`). Invariant: every wake is an optimisation. A
//! waiter always re-checks the database before answering, and registers before it checks, so
//! nothing is missed between check and wait; a lost notification delays a job by at most
//! `recheck_interval` (see docs/wake.md).
//!
//! It is also all the API reaches of the store: the hub's operations name what they do
//! (`transitions.rs` for the calls that change a job, `jobs.rs`, `runners.rs`, `secrets.rs` and
//! `artifacts.rs` for the rest), and the store and the configuration stay private to it.

mod artifacts;
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

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

pub use long_poll::{LeaseAnswer, Leased};
pub use notifier::Notifier;
pub use waiters::{Key, Waiters};

use crate::config::Config;
use crate::domain::state::JobState;
use crate::store::listener::ListenerEvent;
use crate::store::queues::ParkedQueue;
use crate::store::records::{LeaseIdentity, Moved, Queue};
use crate::store::Store;
use crate::telemetry::metrics::{Metrics, Snapshot};

pub struct Hub {
    /// Private: the API reaches the database through the hub's operations, never the store.
    store: Store,
    /// Private: what the API applies of it is on its own state (`api::Limits`).
    config: Config,
    pub waiters: Waiters,
    pub notifier: Notifier,
    /// Identifies this replica's own notifications, which it has already acted on locally.
    pub origin: String,
    /// The LISTEN connection is up.
    pub listening: AtomicBool,
    pub metrics: Metrics,
    /// Runner identities by token hash (never the token), bounded (see [`long_poll`]).
    identities: parking_lot::Mutex<std::collections::HashMap<Vec<u8>, LeaseIdentity>>,
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
            waiters: self.waiters.len() as u64,
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

    /// The safety net, once per interval (paced: [`pace`]): one query finds which waited-on
    /// queues have parked jobs, and one waiter per such queue re-checks. Also keeps
    /// long-polling runners `online`.
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
                    let started = std::time::Instant::now();
                    let parked = self.store.parked_queues(&waited).await;
                    pace::pace(&mut recheck, started.elapsed());
                    match parked {
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
}
