//! Rows to records. Each mapping reads columns by name, so a statement may return more columns
//! than a record needs; the schema test checks that every statement returns what its mapping
//! reads.
//!
//! Invariant: a record, the columns its mapping reads and the mapping are one definition
//! ([`record!`], used in `records.rs`): each field names its column beside its type, the
//! column list is made from those lines, and the mapping builds the record with a struct
//! literal, so a field without a column does not compile and a column it reads is always in the
//! list the schema test checks.

use serde_json::Value;
use tokio_postgres::Row;

/// `record!(struct Record (COLUMNS, name [-> Result]) { field: Type = "column" [=> reader], ... })`
/// defines the record `Record` (attributes and docs as written), `pub const COLUMNS` (every
/// column read, in order) and `pub fn name(&Row) -> Record`; a field with a reader is read by
/// `reader(row, column)`, the others by `Row::get`. With `-> Result` the readers are fallible
/// and the mapping returns their error.
macro_rules! record {
    ($(#[$attr:meta])* pub struct $rec:ident ($columns:ident, $name:ident $(-> $result:ident)?) {
        $($(#[$fattr:meta])* pub $field:ident: $ty:ty = $col:literal $(=> $read:path)?),* $(,)?
    }) => {
        $(#[$attr])*
        pub struct $rec {
            $($(#[$fattr])* pub $field: $ty,)*
        }
        /// Columns the mapping of the same record reads.
        pub const $columns: &[&str] = &[$($col),*];
        record!(@map $rec, $name $(-> $result)?, $($field: $col $(=> $read)?),*);
    };
    (@map $rec:ident, $name:ident -> Result, $($field:ident: $col:literal $(=> $read:path)?),*) => {
        #[doc = concat!("A row as a [`", stringify!($rec), "`].")]
        pub fn $name(r: &tokio_postgres::Row) -> crate::store::Result<$rec> {
            Ok($rec { $($field: record!(@try r, $col $(, $read)?)),* })
        }
    };
    (@map $rec:ident, $name:ident, $($field:ident: $col:literal $(=> $read:path)?),*) => {
        #[doc = concat!("A row as a [`", stringify!($rec), "`].")]
        pub fn $name(r: &tokio_postgres::Row) -> $rec {
            $rec { $($field: record!(@get r, $col $(, $read)?)),* }
        }
    };
    (@try $r:ident, $col:literal) => { $r.get($col) };
    (@try $r:ident, $col:literal, $read:path) => { $read($r, $col)? };
    (@get $r:ident, $col:literal) => { $r.get($col) };
    (@get $r:ident, $col:literal, $read:path) => { $read($r, $col) };
}
pub(super) use record;

pub use super::records::{claimed, job, runner, CLAIMED_COLUMNS, JOB_COLUMNS, RUNNER_COLUMNS};

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

use super::{Result, StoreError};
use crate::domain::state::JobState;
use crate::store::records::{Job, Moved, Queue, RepoTarget};

/// A job state read from the database. The CHECK constraint admits only the six states, so
/// anything else is an error, never a guess.
pub fn state(r: &Row, column: &str) -> Result<JobState> {
    let raw: &str = r.get(column);
    JobState::parse(raw).ok_or_else(|| StoreError::Invalid(format!("unknown job state {raw:?}")))
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
        },
        state: state(r, "state")?,
    })
}

/// A runner's repository targets, aggregated as JSON by the statement.
pub(super) fn repo_targets(r: &Row, column: &str) -> Vec<RepoTarget> {
    repo_targets_json(&r.get(column))
}

/// The `repo_targets` column of a runner row (a JSON array, ordered by id).
fn repo_targets_json(v: &Value) -> Vec<RepoTarget> {
    let text = |t: &Value, k: &str| t.get(k).and_then(Value::as_str).map(str::to_owned);
    v.as_array()
        .map(|items| {
            items
                .iter()
                .filter_map(|t| {
                    Some(RepoTarget {
                        id: text(t, "id")?.parse().ok()?,
                        provider: text(t, "provider")?,
                        repository: text(t, "repository")?,
                        label: text(t, "label"),
                        status: text(t, "status")?,
                    })
                })
                .collect()
        })
        .unwrap_or_default()
}
