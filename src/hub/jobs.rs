//! What the API reads of jobs: one job, a page of a workspace's jobs, a job's events, the job
//! an idempotency key first parked or retried. Reads wake no one; every call that changes a job
//! is in `transitions.rs`.

use uuid::Uuid;

use super::Hub;
use crate::store::records::{Event, Job};
use crate::store::{JobFilter, Result};

impl Hub {
    /// A job of `workspace`.
    ///
    /// # Errors
    /// The database failed. `Ok(None)`: no such job in the workspace.
    pub async fn job(&self, id: Uuid, workspace: &str) -> Result<Option<Job>> {
        self.store.job(id, workspace).await
    }

    /// A page of `workspace`'s jobs (see [`crate::store::Store::jobs`]): the jobs, and whether
    /// the byte `budget` cut the page short.
    ///
    /// # Errors
    /// The database failed.
    pub async fn jobs(
        &self,
        workspace: &str,
        filter: JobFilter<'_>,
        after: Option<Uuid>,
        limit: i64,
        descending: bool,
        budget: usize,
    ) -> Result<(Vec<Job>, bool)> {
        self.store
            .jobs(workspace, filter, after, limit, descending, budget)
            .await
    }

    /// A job's events after `after`, at most `limit` and about `budget` bytes of data.
    ///
    /// # Errors
    /// The database failed.
    pub async fn events(
        &self,
        id: Uuid,
        after: i32,
        limit: i64,
        budget: usize,
    ) -> Result<Vec<Event>> {
        self.store.events(id, after, limit, budget).await
    }

    /// The job an idempotency key of `workspace` parked first.
    ///
    /// # Errors
    /// The database failed. `Ok(None)`: the key parked nothing yet.
    pub async fn job_by_idempotency_key(&self, workspace: &str, key: &str) -> Result<Option<Job>> {
        self.store.job_by_idempotency_key(workspace, key).await
    }

    /// The job as it is now when `key` already retried it (a repeated retry call).
    ///
    /// # Errors
    /// The database failed. `Ok(None)`: the key did not retry this job.
    pub async fn job_retried_with_key(
        &self,
        id: Uuid,
        key: &str,
        workspace: &str,
    ) -> Result<Option<Job>> {
        self.store.job_retried_with_key(id, key, workspace).await
    }
}
