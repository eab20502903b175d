//! Maintenance statements: lapsed leases, no-runner and queue-timeout rejections, dead join
//! codes, stale ephemeral runners. Each works on a batch with `FOR UPDATE SKIP LOCKED`, so any
//! number of replicas may run them at once; each returns the jobs it moved, for wake-ups.

use uuid::Uuid;

use super::{rows, sql, At, Params, Result, Store};
use crate::domain::records::Moved;

impl Store {
    async fn sweep(&self, sql: &'static str, params: &Params<'_>) -> Result<Vec<Moved>> {
        self.query(sql, params)
            .await?
            .iter()
            .map(rows::moved)
            .collect()
    }

    pub async fn sweep_lapsed_leases(&self, batch: i64) -> Result<Vec<Moved>> {
        self.sweep(sql::SWEEP_LAPSED_LEASES, &[&batch]).await
    }

    pub async fn sweep_no_runner(&self, batch: i64) -> Result<Vec<Moved>> {
        self.sweep(sql::SWEEP_NO_RUNNER, &[&batch, &self.presence_window_ms])
            .await
    }

    pub async fn sweep_queue_timeout(&self, batch: i64) -> Result<Vec<Moved>> {
        self.sweep(sql::SWEEP_QUEUE_TIMEOUT, &[&batch]).await
    }

    pub async fn sweep_join_codes(&self, batch: i64) -> Result<u64> {
        self.execute(sql::SWEEP_JOIN_CODES, &[&batch]).await
    }

    /// Purge ephemeral runners unseen for `unseen_ms`, re-parking or rejecting their jobs.
    pub async fn sweep_ephemeral_runners(&self, batch: i64, unseen_ms: i64) -> Result<Vec<Moved>> {
        let mut client = self.client().await?;
        self.count(3);
        let tx = client.transaction().await?;
        let purge = tx
            .prepare_cached(sql::SWEEP_EPHEMERAL_RUNNERS)
            .await
            .at(sql::SWEEP_EPHEMERAL_RUNNERS)?;
        let ids: Vec<Uuid> = tx
            .query(&purge, &[&batch, &unseen_ms])
            .await
            .at(sql::SWEEP_EPHEMERAL_RUNNERS)?
            .iter()
            .map(|r| r.get(0))
            .collect();
        let jobs = tx
            .prepare_cached(sql::RUNNER_REVOKE_JOBS)
            .await
            .at(sql::RUNNER_REVOKE_JOBS)?;
        let mut out = Vec::new();
        for id in ids {
            self.count(1);
            for row in tx.query(&jobs, &[&id]).await.at(sql::RUNNER_REVOKE_JOBS)? {
                out.push(rows::moved(&row)?);
            }
        }
        tx.commit().await?;
        Ok(out)
    }
}
