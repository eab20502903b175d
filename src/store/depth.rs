//! The queue-depth count behind `/metrics`: one statement over partial indexes, run on a timer
//! by each replica, never per scrape or per owner.

use super::{sql, Result, Store};

/// Parked and leased jobs in the whole database.
#[derive(Debug, Clone, Copy, Default)]
pub struct JobDepth {
    pub parked: i64,
    pub leased: i64,
}

impl Store {
    /// Count parked and leased jobs.
    ///
    /// # Errors
    /// The database failed.
    pub async fn job_depth(&self) -> Result<JobDepth> {
        let rows = self.query(sql::METRICS_JOB_DEPTH, &[]).await?;
        Ok(JobDepth {
            parked: rows[0].get("parked"),
            leased: rows[0].get("leased"),
        })
    }
}
