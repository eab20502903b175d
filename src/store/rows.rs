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

/// Columns the statements that park a job again answer beside [`MOVED_COLUMNS`]: where it
/// waits (its lane and its place in it; hub::dispatcher).
pub const PARKED_COLUMNS: &[&str] = &[
    "priority",
    "required_capabilities",
    "source_key",
    "needs_workspace_runner",
];

/// Columns `feed::webhook` reads.
pub const WEBHOOK_COLUMNS: &[&str] = &[
    "id",
    "workspace",
    "name",
    "url",
    "kinds",
    "states",
    "secret",
    "disabled_at",
    "disabled_reason",
    "failing_since",
    "created_at",
    "updated_at",
    "created",
];

/// Columns `feed::delivery` reads.
pub const DELIVERY_COLUMNS: &[&str] = &[
    "id",
    "xid",
    "job_id",
    "seq",
    "kind",
    "data",
    "at",
    "status",
    "attempts",
    "next_at",
    "last_status",
    "last_error",
    "last_at",
    "redelivery_of",
    "created_at",
];

/// Columns the delivery claim answers (`feed.rs`).
pub const CLAIMED_DELIVERY_COLUMNS: &[&str] = &[
    "id",
    "lease_token",
    "attempts",
    "xid",
    "job_id",
    "seq",
    "kind",
    "data",
    "at",
    "workspace",
    "name",
    "url",
    "secret",
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
    ("runner_revoke_jobs.sql", PARKED_COLUMNS),
    ("sweep_lapsed_leases.sql", PARKED_COLUMNS),
    ("sweep_retry_due.sql", PARKED_COLUMNS),
    ("lease_give_back.sql", PARKED_COLUMNS),
    ("lease_give_back.sql", MOVED_COLUMNS),
    ("claim.sql", CLAIMED_COLUMNS),
    ("webhook_put.sql", WEBHOOK_COLUMNS),
    ("webhooks_list.sql", WEBHOOK_COLUMNS),
    ("webhook_get.sql", WEBHOOK_COLUMNS),
    ("webhook_deliveries_list.sql", DELIVERY_COLUMNS),
    ("webhook_redeliver.sql", DELIVERY_COLUMNS),
    ("webhook_claim.sql", CLAIMED_DELIVERY_COLUMNS),
    (
        "claim.sql",
        &[
            "runner",
            "grouped",
            "capabilities",
            "exclusive",
            "sources",
            "free",
            "leases_since",
            "unfit_named",
            "next_slots",
            "next_negs",
            "next_ids",
        ],
    ),
    ("lease_reject_unfit.sql", &["id"]),
    ("runners_lock_for_claim.sql", &["id"]),
    (
        "runner_for_lease.sql",
        &[
            "id",
            "workspace",
            "owner",
            "capabilities",
            "exclusive",
            "sources",
        ],
    ),
    ("parked_lanes.sql", &["lane", "neg", "id"]),
];

use super::Result;
use crate::store::records::{Job, Moved, Queue};

/// The rows of a statement over arrays in step (`job_complete.sql`, `job_fail.sql`,
/// `job_heartbeat.sql`), each carrying its element's place (`ord`, from 1), as one answer per
/// element of `n`, in order: `None` where no row answered (a fence missed).
///
/// # Errors
/// A row named an element that was not sent, or did not map.
pub fn by_ord<T>(
    n: usize,
    rows: &[Row],
    map: impl Fn(&Row) -> Result<T>,
) -> Result<Vec<Option<T>>> {
    let mut out: Vec<Option<T>> = (0..n).map(|_| None).collect();
    for row in rows {
        let at = usize::try_from(row.get::<_, i64>("ord") - 1).ok();
        let slot = at.and_then(|i| out.get_mut(i)).ok_or_else(|| {
            super::StoreError::Invalid(format!(
                "{} answered an element it was not sent",
                row.columns().first().map_or("a statement", |c| c.name())
            ))
        })?;
        *slot = Some(map(row)?);
    }
    Ok(out)
}

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
            // The statements that park a job say where it waits; the others need not.
            constrained: r
                .try_get::<_, Vec<String>>("required_capabilities")
                .ok()
                .zip(r.try_get::<_, Option<String>>("source_key").ok())
                .map(|(required, source)| !required.is_empty() || source.is_some()),
            priority: r.try_get("priority").ok(),
        },
        state: state(r, "state")?,
    })
}
