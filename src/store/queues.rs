//! What dispatchers ask about queues: pool counts, preflight and why a job waits. Read-only.

use uuid::Uuid;

use super::{sql, Result, Store};
use crate::store::records::PoolCounts;

/// What preflight counts over a target's runners.
#[derive(Debug, Clone, Copy, Default)]
pub struct PreflightCounts {
    /// Advertising every required capability, requiring no exclusive name the job does not.
    pub matching: i64,
    /// Of those, not outdated.
    pub current: i64,
    /// Of those matching, holding an approved target for the source (all, without a source).
    pub sourced: i64,
    /// Current and sourced: they could take the job.
    pub usable: i64,
    /// Usable and online.
    pub online: i64,
}

impl Store {
    pub async fn pool_counts(
        &self,
        subject: &str,
        ws_owner: &str,
        workspace: &str,
    ) -> Result<PoolCounts> {
        let rows = self
            .query(
                sql::POOL_COUNTS,
                &[&subject, &ws_owner, &workspace, &self.presence_window_ms],
            )
            .await?;
        let r = &rows[0];
        Ok(PoolCounts {
            online: r.get("online"),
            dormant: r.get("dormant"),
            never: r.get("never"),
            slot_capacity: r.get("slot_capacity"),
            slot_active: r.get("slot_active"),
            parked: r.get("parked"),
            leased: r.get("leased"),
        })
    }

    /// Runners of a target in `workspace` that could take a job with these requirements;
    /// `any` counts the workspace's runners beside the owner's; `source_key` is the job's
    /// `provider repository`, if it has a source.
    pub async fn preflight(
        &self,
        workspace: &str,
        owner: Option<&str>,
        runner_id: Option<Uuid>,
        any: bool,
        required: &[String],
        source_key: Option<&str>,
    ) -> Result<PreflightCounts> {
        let rows = self
            .query(
                sql::PREFLIGHT_RUNNERS,
                &[
                    &owner,
                    &runner_id,
                    &required,
                    &self.presence_window_ms,
                    &workspace,
                    &any,
                    &source_key,
                ],
            )
            .await?;
        let r = &rows[0];
        Ok(PreflightCounts {
            matching: r.get("matching"),
            current: r.get("current"),
            sourced: r.get("sourced"),
            usable: r.get("usable"),
            online: r.get("online"),
        })
    }

    /// Why job `id` of `workspace` waits (v1.4): `no_matching_runner`, `no_runner_online`,
    /// `all_busy`, `not_before`, or `None` (not parked, or about to be leased, or no such job).
    pub async fn job_waiting(&self, id: Uuid, workspace: &str) -> Result<Option<String>> {
        let rows = self
            .query(
                sql::JOB_WAITING,
                &[&id, &workspace, &self.presence_window_ms],
            )
            .await?;
        Ok(rows.first().and_then(|r| r.get("waiting")))
    }
}
