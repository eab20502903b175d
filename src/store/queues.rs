//! What dispatchers and the wake-up safety net ask about queues: pool counts, preflight, and
//! which waited-on queues have parked jobs. Read-only.

use uuid::Uuid;

use super::{sql, Result, Store};
use crate::store::records::PoolCounts;

/// Queues a replica has waiters on, for [`Store::parked_queues`].
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

#[derive(Debug, Default, Clone)]
pub struct WaitedQueues {
    /// Pool queues: (workspace, owner).
    pub pools: Vec<(String, String)>,
    /// Workspaces whose `any` queue is waited on (by workspace runners).
    pub any: Vec<String>,
    pub runners: Vec<Uuid>,
}

impl WaitedQueues {
    pub fn is_empty(&self) -> bool {
        self.pools.is_empty() && self.any.is_empty() && self.runners.is_empty()
    }
}

/// A queue with a parked job: exactly one of the three is set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParkedQueue {
    Pool { workspace: String, owner: String },
    Any { workspace: String },
    Runner(Uuid),
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

    /// Of the given queues, those with a parked job.
    pub async fn parked_queues(&self, waited: &WaitedQueues) -> Result<Vec<ParkedQueue>> {
        let (workspaces, owners): (Vec<&str>, Vec<&str>) = waited
            .pools
            .iter()
            .map(|(w, o)| (w.as_str(), o.as_str()))
            .unzip();
        let rows = self
            .query(
                sql::PARKED_QUEUES,
                &[&workspaces, &owners, &waited.any, &waited.runners],
            )
            .await?;
        Ok(rows
            .iter()
            .filter_map(|r| {
                let workspace: Option<String> = r.get(0);
                let owner: Option<String> = r.get(1);
                let runner: Option<Uuid> = r.get(2);
                match (workspace, owner, runner) {
                    (_, _, Some(id)) => Some(ParkedQueue::Runner(id)),
                    (Some(workspace), Some(owner), None) => {
                        Some(ParkedQueue::Pool { workspace, owner })
                    }
                    (Some(workspace), None, None) => Some(ParkedQueue::Any { workspace }),
                    _ => None,
                }
            })
            .collect())
    }
}
