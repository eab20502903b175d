//! The long-poll loops: a runner's lease call ([`Hub::lease`]) and a wait on a job
//! ([`Hub::wait_on_job`]), and the runner identities the lease call remembers.
//!
//! Invariant: a lease call's first look is a claim (the dispatcher's tick for a new waiter), and
//! a wait on a job registers *before* it looks, so a job parked or changed between the look and
//! the wait is never missed; a parked long-poll holds no connection, and every wait ends by its
//! deadline or at shutdown.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::dispatcher::Applied;
use super::handover::Handover;
use super::Hub;
use crate::store::claim::DoneReport;
use crate::store::jobs::Fenced;
use crate::store::records::{Claimed, LeaseIdentity};
use crate::store::Result;
use crate::telemetry::{metrics, traces};

/// Runner identities a replica remembers (token hash → who the runner is and what it
/// advertises); past this many it forgets them all and relearns (one statement more each).
const MAX_KNOWN_RUNNERS: usize = 100_000;

/// The end of a lease long-poll.
pub enum LeaseAnswer {
    /// The jobs, guarded by their hand-over until the answer is written.
    Jobs(Vec<Claimed>, Handover),
    /// The runner was revoked while it waited.
    RunnerGone,
}

/// What a lease long-poll answers: its end, and what each of the call's reports did (in their
/// order), applied in its first tick.
pub struct Leased {
    pub answer: LeaseAnswer,
    pub done: Vec<Fenced<Applied>>,
}

/// What a lease call advertises; `None` keeps what is recorded.
#[derive(Debug, Default, Clone)]
pub struct Advertised {
    pub capabilities: Option<Vec<String>>,
    pub exclusive: Option<Vec<String>>,
}

impl Hub {
    /// Who the runner with this token hash is, if this replica has seen it lease before.
    pub fn known_runner(&self, token_hash: &[u8]) -> Option<Arc<LeaseIdentity>> {
        self.identities.lock().get(token_hash).cloned()
    }

    fn remember_runner(&self, token_hash: &[u8], me: &Arc<LeaseIdentity>) {
        let mut known = self.identities.lock();
        if let Some(k) = known.get_mut(token_hash) {
            *k = me.clone();
            return;
        }
        if known.len() >= MAX_KNOWN_RUNNERS {
            known.clear();
        }
        known.insert(token_hash.to_vec(), me.clone());
    }

    /// Forget a runner that is gone (revoked, spent).
    pub(super) fn forget_runner(&self, id: Uuid) {
        self.identities.lock().retain(|_, me| me.id != id);
        self.marked_seen.lock().remove(&id);
    }

    /// Remember that these runners were marked seen now.
    pub(super) fn marked(&self, ids: &[Uuid]) {
        let now = std::time::Instant::now();
        let mut marked = self.marked_seen.lock();
        if marked.len() >= MAX_KNOWN_RUNNERS {
            marked.clear();
        }
        for id in ids {
            marked.insert(*id, now);
        }
    }

    /// Any authenticated runner call counts as seen (PROTOCOL.md, Objects): a lease call marks
    /// its runner seen unless this replica did so within a third of the presence window (the
    /// presence refresh keeps a waiting runner seen from then on). One statement a runner per
    /// third of the window, none on the hot path in between.
    async fn mark_seen(&self, id: Uuid) -> Result<()> {
        let fresh = self
            .marked_seen
            .lock()
            .get(&id)
            .is_some_and(|at| at.elapsed() < self.config.presence_refresh());
        if !fresh {
            Box::pin(self.store.touch_runners(&[id])).await?;
            self.marked(&[id]);
        }
        Ok(())
    }

    /// Who the runner with this token is: remembered, or read (its first call here); what the
    /// call advertises recorded when it changes what the runner advertised. `None`: no live
    /// runner has this token.
    async fn lease_identity(
        &self,
        token_hash: &[u8],
        advertised: &Advertised,
    ) -> Result<Option<Arc<LeaseIdentity>>> {
        let mut me = match self.known_runner(token_hash) {
            Some(me) => me,
            None => match Box::pin(self.store.runner_for_lease(token_hash)).await? {
                Some(me) => Arc::new(me),
                None => return Ok(None),
            },
        };
        if advertised.capabilities.is_some() || advertised.exclusive.is_some() {
            // Recorded as runner_heartbeat.sql records them: an exclusive name is also a
            // capability, and the set is sorted.
            let exclusive = advertised.exclusive.clone().unwrap_or(me.exclusive.clone());
            let mut capabilities = advertised
                .capabilities
                .clone()
                .unwrap_or(me.capabilities.clone());
            capabilities.extend(exclusive.iter().cloned());
            capabilities.sort();
            capabilities.dedup();
            if capabilities != me.capabilities || exclusive != me.exclusive {
                let Some(runner) = Box::pin(self.store.runner_heartbeat(
                    me.id,
                    None,
                    advertised.capabilities.as_deref(),
                    advertised.exclusive.as_deref(),
                    None,
                    false,
                ))
                .await?
                else {
                    return Ok(None);
                };
                let me = Arc::make_mut(&mut me);
                me.capabilities = runner.capabilities;
                me.exclusive = runner.exclusive;
            }
        }
        self.remember_runner(token_hash, &me);
        Ok(Some(me))
    }

    /// A runner's lease long-poll, authenticated by its token hash: its first look is the
    /// dispatcher's next tick (which applies `done` first); with nothing there and a free slot,
    /// it waits (holding no connection) until a tick finds it jobs, its wait ends or shutdown
    /// begins.
    ///
    /// # Errors
    /// The database failed (its reports were not applied).
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
        // Boxed, like every database call before the wait: the future of a parked long-poll
        // holds none of their state (10,000 of them are held at once: docs/perf.md).
        let Some(me) = Box::pin(self.lease_identity(token_hash, &advertised)).await? else {
            return Ok(Leased {
                answer: LeaseAnswer::RunnerGone,
                done: Vec::new(),
            });
        };
        Box::pin(self.mark_seen(me.id)).await?;
        let want = i32::try_from(max_jobs).unwrap_or(i32::MAX);
        let once = wait.is_zero() || shutdown.is_cancelled();
        let done_reports = done;
        let mut ticket =
            self.dispatcher
                .register(me, token_hash.to_vec(), want, done.to_vec(), once);
        // Counted in `leasehold_long_polls` by the dispatcher, from the end of its first look.
        let answer = tokio::select! {
            answer = ticket.answer() => answer,
            _ = tokio::time::sleep_until(deadline) => Box::pin(ticket.withdraw()).await,
            _ = shutdown.cancelled() => Box::pin(ticket.withdraw()).await,
        }?;
        if let Some(me) = &answer.me {
            self.remember_runner(token_hash, me);
        }
        let mut done = answer.done;
        // Why a report missed, asked as its own call asks: after the commit.
        for (fenced, report) in done.iter_mut().zip(done_reports) {
            if let Err(miss) = fenced {
                *miss = Box::pin(self.store.fence_miss(report.id, token_hash)).await?;
            }
        }
        if answer.gone {
            return Ok(Leased {
                answer: LeaseAnswer::RunnerGone,
                done,
            });
        }
        for job in &answer.claimed {
            traces::job_step("lease", job.id, job.epoch, job.traceparent.as_deref());
        }
        self.metrics.leases.inc_by(answer.claimed.len() as u64);
        for job in answer.claimed.iter().filter(|j| j.attempt == 1) {
            if let Some(age) = metrics::age_of_v7(&job.id) {
                self.metrics.lease_wait.observe(age);
            }
        }
        Ok(Leased {
            answer: LeaseAnswer::Jobs(answer.claimed, answer.handover),
            done,
        })
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
            let registration = self.waiters.register(job_id);
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
