//! Rows to records. Each mapping reads columns by name, so a statement may return more columns
//! than a record needs; the schema test checks that every statement returns what its mapping
//! reads.
//!
//! The records mapped from one kind of row are defined with their mappings in `records.rs`
//! (re-exported here); this file has the mappings of rows that are not one record ([`moved`],
//! [`jobs`]) and [`MAPPED`], which statements feed which mapping.

use tokio_postgres::Row;

pub use super::records::{
    claimed, job, runner, state, CLAIMED_COLUMNS, JOB_COLUMNS, RUNNER_COLUMNS,
};

/// Columns [`moved`] reads.
pub const MOVED_COLUMNS: &[&str] = &["id", "workspace", "owner", "runner_id", "pool", "state"];

/// What the claims from remembered places answer of where each plain lane's next claim starts
/// (store::bounds).
const PLACE_COLUMNS: &[&str] = &[
    "own_next_priority",
    "own_next_id",
    "any_next_priority",
    "any_next_id",
    "snapshot_xmin",
];

/// Which statements feed which mapping: the schema test checks that each returns every column
/// its mapping reads, so a column dropped from a statement fails a test, not a request.
pub const MAPPED: &[(&str, &[&str])] = &[
    ("job_insert.sql", JOB_COLUMNS),
    ("job_get.sql", JOB_COLUMNS),
    ("jobs_list.sql", JOB_COLUMNS),
    ("jobs_list_desc.sql", JOB_COLUMNS),
    ("job_by_idempotency_key.sql", JOB_COLUMNS),
    ("job_cancel.sql", JOB_COLUMNS),
    ("job_complete.sql", JOB_COLUMNS),
    ("job_fail.sql", JOB_COLUMNS),
    ("job_release.sql", JOB_COLUMNS),
    ("job_retry.sql", JOB_COLUMNS),
    ("job_retry_by_key.sql", JOB_COLUMNS),
    ("runner_insert.sql", RUNNER_COLUMNS),
    ("runner_get.sql", RUNNER_COLUMNS),
    ("runner_heartbeat.sql", RUNNER_COLUMNS),
    ("runners_by_owner.sql", RUNNER_COLUMNS),
    ("runners_in_workspace.sql", RUNNER_COLUMNS),
    ("runner_revoke_jobs.sql", MOVED_COLUMNS),
    ("sweep_lapsed_leases.sql", MOVED_COLUMNS),
    ("sweep_no_runner.sql", MOVED_COLUMNS),
    ("sweep_queue_timeout.sql", MOVED_COLUMNS),
    ("sweep_retry_due.sql", MOVED_COLUMNS),
    ("lease_claim.sql", &["plain", "free", "more", "unfit_named"]),
    ("lease_claim.sql", CLAIMED_COLUMNS),
    ("lease_claim.sql", PLACE_COLUMNS),
    (
        "lease_claim.sql",
        &[
            "own_c_next_priority",
            "own_c_next_id",
            "any_c_next_priority",
            "any_c_next_id",
        ],
    ),
    ("lease_more.sql", &["more"]),
    ("lease_reject_unfit.sql", &["id"]),
    (
        "runner_lock_for_lease.sql",
        &["id", "owner", "workspace", "version"],
    ),
];

use super::Result;
use crate::store::records::{Job, Moved, Queue};

pub fn jobs(rows: &[Row]) -> Result<Vec<Job>> {
    rows.iter().map(job).collect()
}

pub fn moved(r: &Row) -> Result<Moved> {
    Ok(Moved {
        id: r.get("id"),
        queue: Queue {
            workspace: r.get("workspace"),
            owner: r.get("owner"),
            runner_id: r.get("runner_id"),
            pool: r.get("pool"),
            needs_workspace_runner: r.try_get("needs_workspace_runner").unwrap_or(false),
        },
        state: state(r, "state")?,
    })
}
