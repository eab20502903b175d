//! Job transitions with the wake each one owes, in one place.
//!
//! Invariant: every store call that parks a job or changes one is made through a method here,
//! which wakes after it commits (a heartbeat, which only extends a lease, wakes no one): [`Hub::job_parked`] for a job parked (dispatch, release,
//! give-back, revocation), [`Hub::job_changed`] for a job whose state or events changed. A
//! handler cannot forget the wake, and a forgotten one no longer makes a waiting
//! `GET /v1/jobs/{id}?wait_ms` sleep to its deadline. A call that changed nothing (a fence
//! miss, a refused insert) wakes no one. The store's own methods stay wake-free: they are the
//! statements, this is what a committed statement means to the waiters.

use std::future::Future;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::Hub;
use crate::store::jobs::Fenced;
use crate::store::placement::GiveBack;
use crate::store::records::{ApiKey, Job, Moved};
use crate::store::{Dispatched, NewJob, Report, Result};

impl Hub {
    /// Park one job; wakes a runner that can take it.
    ///
    /// # Errors
    /// The database failed. `Ok(None)`: nothing was parked (see [`crate::store::Store::park`]).
    pub async fn park(&self, job: NewJob) -> Result<Option<Dispatched>> {
        let parked = self.store.park(job).await?;
        if let Some(p) = &parked {
            self.job_parked(p.job.id, &p.job.queue());
        }
        Ok(parked)
    }

    /// Park a batch in one transaction (one statement per key: see
    /// [`crate::store::Store::insert_jobs`]); wakes a runner for each job parked.
    ///
    /// # Errors
    /// The database failed. `None` items were not parked (see
    /// [`crate::store::Store::insert_jobs`]).
    pub async fn park_many(&self, jobs: &[NewJob]) -> Result<Vec<Option<Dispatched>>> {
        let parked = self.store.insert_jobs(jobs).await?;
        for p in parked.iter().flatten() {
            self.job_parked(p.job.id, &p.job.queue());
        }
        Ok(parked)
    }

    /// Extend a leased job's lease by the configured TTL (fenced): the runner's heartbeat. Wakes
    /// no one (a lease's expiry is no reader's business). The store's own future, so the call
    /// costs the hot path no await of its own.
    ///
    /// # Errors
    /// The database failed; a fence miss is the inner `Err`.
    pub fn extend_lease<'a>(
        &'a self,
        id: Uuid,
        epoch: i64,
        token_hash: &'a [u8],
    ) -> impl Future<Output = Result<Fenced<DateTime<Utc>>>> + 'a {
        let ttl = self.config.lease_ttl_ms as i64;
        self.store.heartbeat_job(id, epoch, token_hash, ttl)
    }

    /// Append a leased job's events (fenced); wakes its readers.
    ///
    /// # Errors
    /// The database failed; a fence miss is the inner `Err`.
    pub async fn append_events(
        &self,
        id: Uuid,
        epoch: i64,
        token_hash: &[u8],
        kinds: &[String],
        data: &[serde_json::Value],
    ) -> Result<Fenced<i32>> {
        let answer = self
            .store
            .append_events(id, epoch, token_hash, kinds, data)
            .await?;
        if answer.is_ok() {
            self.job_changed(id);
        }
        Ok(answer)
    }

    /// Complete a leased job (fenced); wakes its readers, and a runner when its retry policy
    /// parked it again instead (v1.2).
    ///
    /// # Errors
    /// The database failed; a fence miss is the inner `Err`.
    pub async fn complete(&self, report: Report) -> Result<Fenced<Job>> {
        let answer = self.store.complete_job(report).await?;
        if let Ok(job) = &answer {
            self.settled_or_retried(job);
        }
        Ok(answer)
    }

    /// Fail a leased job (fenced); wakes its readers, and a runner when its retry policy parked
    /// it again instead (v1.2).
    ///
    /// # Errors
    /// The database failed; a fence miss is the inner `Err`.
    pub async fn fail(
        &self,
        id: Uuid,
        epoch: i64,
        token_hash: &[u8],
        message: &str,
    ) -> Result<Fenced<Job>> {
        let answer = self.store.fail_job(id, epoch, token_hash, message).await?;
        if let Ok(job) = &answer {
            self.settled_or_retried(job);
        }
        Ok(answer)
    }

    /// Give a leased job back (fenced): parked again, it wakes a runner, and its readers.
    ///
    /// # Errors
    /// The database failed; a fence miss is the inner `Err`.
    pub async fn release(&self, id: Uuid, epoch: i64, token_hash: &[u8]) -> Result<Fenced<Job>> {
        let answer = self.store.release_job(id, epoch, token_hash).await?;
        if let Ok(job) = &answer {
            self.job_parked(job.id, &job.queue());
            self.job_changed(id);
        }
        Ok(answer)
    }

    /// `POST /v1/jobs/{id}/retry` (v1.2): park a settled or leased job of the caller's
    /// workspace again (a leased one's holder is superseded), the caller its dispatcher now
    /// (v1.3); wakes a runner, and its readers.
    ///
    /// # Errors
    /// The database failed. `Ok(None)`: unknown, or parked already.
    pub async fn retry(&self, id: Uuid, by: &ApiKey, key: Option<&str>) -> Result<Option<Job>> {
        let retried = self.store.retry_job(id, by, key).await?;
        if let Some(job) = &retried {
            self.job_parked(job.id, &job.queue());
            self.job_changed(id);
        }
        Ok(retried)
    }

    /// The wakes a runner's terminal report owes: its readers always; a runner too when the
    /// job's retry policy parked it again (a delayed retry is woken by the sweeper instead,
    /// once its delay has passed: sweep_retry_due.sql).
    pub(super) fn settled_or_retried(&self, job: &Job) {
        if job.state == crate::domain::state::JobState::Parked && job.not_before.is_none() {
            self.job_parked(job.id, &job.queue());
        }
        self.job_changed(job.id);
    }

    /// Cancel a job of `workspace`; wakes its readers (and its runner, at its next heartbeat).
    ///
    /// # Errors
    /// The database failed. `Ok(None)`: unknown, or already terminal.
    pub async fn cancel(&self, id: Uuid, workspace: &str, by: &str) -> Result<Option<Job>> {
        let cancelled = self.store.cancel_job(id, workspace, by).await?;
        if cancelled.is_some() {
            self.job_changed(id);
        }
        Ok(cancelled)
    }

    /// Revoke a runner; the jobs it held or was named for move, and wake as they do.
    ///
    /// # Errors
    /// The database failed. `Ok(None)`: no such runner of this owner.
    pub async fn revoke_runner(
        &self,
        id: Uuid,
        owner: &str,
        workspace: &str,
    ) -> Result<Option<Vec<Moved>>> {
        let moved = self.store.revoke_runner(id, owner, workspace).await?;
        if let Some(moved) = &moved {
            self.after_moves(moved);
        }
        Ok(moved)
    }

    /// Park again the jobs a lease call took, attempts given back (the lease could not be
    /// handed over).
    ///
    /// # Errors
    /// The database failed.
    pub async fn give_back(
        &self,
        jobs: &[(Uuid, i64)],
        token_hash: &[u8],
        why: GiveBack,
    ) -> Result<Vec<Moved>> {
        let moved = self.store.give_back(jobs, token_hash, why).await?;
        self.after_moves(&moved);
        Ok(moved)
    }

    /// Reject a just-leased job for one of its named secrets: `reason` `secret_missing` (gone,
    /// or not for this runner) or `secret_forbidden` (its dispatcher may no longer name it).
    ///
    /// # Errors
    /// The database failed.
    pub async fn reject_for_secret(
        &self,
        id: Uuid,
        epoch: i64,
        token_hash: &[u8],
        reason: &str,
        message: &str,
    ) -> Result<Vec<Moved>> {
        let moved = self
            .store
            .reject_for_secret(id, epoch, token_hash, reason, message)
            .await?;
        self.after_moves(&moved);
        Ok(moved)
    }
}
