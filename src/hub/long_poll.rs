//! The long-poll loops: a runner's lease call ([`Hub::lease`]) and a wait on a job
//! ([`Hub::wait_on_job`]), and the runner identities the lease call remembers.
//!
//! Invariant: a waiter registers *before* it looks, so a job parked or changed between the
//! look and the wait is never missed; a parked long-poll holds no connection, and every wait
//! ends by its deadline or at shutdown.

use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::waiters::{self, Key};
use super::Hub;
use crate::store::jobs::Fenced;
use crate::store::lease::{Advertised, DoneReport, Probe};
use crate::store::records::{Claimed, Job, LeaseIdentity};
use crate::store::Result;
use crate::telemetry::{metrics, traces};

/// Runner identities a replica remembers (token hash → id, workspace, owner); past this many it
/// forgets them all and relearns (one extra round trip each).
const MAX_KNOWN_RUNNERS: usize = 100_000;

/// The end of a lease long-poll.
pub enum LeaseAnswer {
    Jobs(Vec<Claimed>),
    /// The runner was revoked while it waited.
    RunnerGone,
}

/// What a lease long-poll answers: its end, and what each of the call's reports did (in their
/// order), applied in its first lease transaction.
pub struct Leased {
    pub answer: LeaseAnswer,
    pub done: Vec<Fenced<Job>>,
}

impl Hub {
    /// Who the runner with this token hash is, if this replica has seen it lease before.
    pub fn known_runner(&self, token_hash: &[u8]) -> Option<LeaseIdentity> {
        self.identities.lock().get(token_hash).cloned()
    }

    fn remember_runner(&self, token_hash: &[u8], me: Option<&LeaseIdentity>) {
        let mut known = self.identities.lock();
        match me {
            Some(me) => {
                // A runner already known only has its hints refreshed, in place (every claim
                // moves where its leases start).
                if let Some(k) = known.get_mut(token_hash).filter(|k| k.same_runner(me)) {
                    k.plain = me.plain;
                    k.leases_since = me.leases_since;
                    return;
                }
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
        done: &[DoneReport],
        shutdown: &CancellationToken,
    ) -> Result<Leased> {
        let deadline = Instant::now() + wait;
        // The reports go with the first lease transaction, and what they did is kept.
        let mut reports = Some(done);
        let mut reported = Vec::new();
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
                        return Ok(Leased {
                            answer: LeaseAnswer::RunnerGone,
                            done: reported,
                        });
                    }
                    Probe::Nothing => {
                        return Ok(Leased {
                            answer: LeaseAnswer::Jobs(Vec::new()),
                            done: reported,
                        })
                    }
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
                    reports.take().unwrap_or_default(),
                ),
            ))
            .await?;
            // Advertised capabilities are stored by the first attempt.
            advertised = None;
            if !out.done.is_empty() {
                // Committed: readers of the jobs the reports settled hear it now, not when
                // this call's wait ends.
                for job in out.done.iter().flatten() {
                    self.settled_or_retried(job);
                }
                reported = out.done;
            }
            let Some(me) = out.runner else {
                self.remember_runner(token_hash, None);
                return Ok(Leased {
                    answer: LeaseAnswer::RunnerGone,
                    done: reported,
                });
            };
            if known.as_ref() != Some(&me) {
                // First sight of this runner (if it must wait, the next turn registers and looks
                // again), or its hints moved.
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
                return Ok(Leased {
                    answer: LeaseAnswer::Jobs(out.claimed),
                    done: reported,
                });
            }
            let Some(registration) = registration else {
                continue;
            };
            let _open = self.metrics.long_poll();
            tokio::select! {
                wake = registration.woken() => woken_by = Some(wake),
                _ = tokio::time::sleep_until(deadline) => last_look = true,
                _ = shutdown.cancelled() => {
                    return Ok(Leased { answer: LeaseAnswer::Jobs(Vec::new()), done: reported })
                }
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
