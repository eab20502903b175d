//! Maintenance statements: lapsed leases, no-runner and queue-timeout rejections, dead join
//! codes, stale ephemeral runners (runners past the dormancy ceiling: [`super::placement`]).
//! Each works on a batch with `FOR UPDATE SKIP LOCKED`, so any
//! number of replicas may run them at once; each returns the jobs it moved, for wake-ups.

use super::{rows, sql, Params, Result, Store};
use crate::store::records::Moved;

impl Store {
    async fn sweep(&self, sql: &'static str, params: &Params<'_>) -> Result<Vec<Moved>> {
        self.query(sql, params)
            .await?
            .iter()
            .map(rows::moved)
            .collect()
    }

    /// Judge up to `batch` leases whose check is due, of those that fell due in the last
    /// `lookback_ms` (`None`: all of them). Every lease judged is returned: one still
    /// [`JobState::Leased`](crate::domain::state::JobState) only had its check moved.
    pub async fn sweep_lapsed_leases(
        &self,
        batch: i64,
        lookback_ms: Option<i64>,
    ) -> Result<Vec<Moved>> {
        self.sweep(sql::SWEEP_LAPSED_LEASES, &[&batch, &lookback_ms])
            .await
    }

    /// Judge up to `batch` parked jobs whose no-runner check is due, of those that fell due in
    /// the last `lookback_ms` (`None`: all of them). Every job judged is returned: one still
    /// [`JobState::Parked`](crate::domain::state::JobState) only had its check moved.
    pub async fn sweep_no_runner(
        &self,
        batch: i64,
        lookback_ms: Option<i64>,
    ) -> Result<Vec<Moved>> {
        self.sweep(
            sql::SWEEP_NO_RUNNER,
            &[&batch, &self.presence_window_ms, &lookback_ms],
        )
        .await
    }

    pub async fn sweep_queue_timeout(&self, batch: i64) -> Result<Vec<Moved>> {
        self.sweep(sql::SWEEP_QUEUE_TIMEOUT, &[&batch]).await
    }

    /// Clear the delay of up to `batch` parked retries whose `not_before` has passed; they
    /// are returned so that a runner is woken for each.
    pub async fn sweep_retry_due(&self, batch: i64) -> Result<Vec<Moved>> {
        self.sweep(sql::SWEEP_RETRY_DUE, &[&batch]).await
    }

    pub async fn sweep_join_codes(&self, batch: i64) -> Result<u64> {
        self.execute(sql::SWEEP_JOIN_CODES, &[&batch]).await
    }

    /// Purge ephemeral runners unseen for `unseen_ms`, re-parking or rejecting their jobs.
    pub async fn sweep_ephemeral_runners(&self, batch: i64, unseen_ms: i64) -> Result<Vec<Moved>> {
        self.reap_runners(sql::SWEEP_EPHEMERAL_RUNNERS, batch, unseen_ms)
            .await
    }

    /// Delete up to `batch` jobs settled more than `older_than_ms` ago, with their events and
    /// artifacts (`sweep_retention.sql`); answers how many.
    pub async fn sweep_retention(&self, batch: i64, older_than_ms: i64) -> Result<i64> {
        let row = self
            .query_opt(sql::SWEEP_RETENTION, &[&batch, &older_than_ms])
            .await?;
        Ok(row.map_or(0, |r| r.get("deleted")))
    }
}
