//! Rows to records. Each mapping reads columns by name, so a statement may return more columns
//! than a record needs; the schema test checks that every statement returns what its mapping
//! reads.

use tokio_postgres::Row;

/// Columns each mapping reads.
pub const JOB_COLUMNS: &[&str] = &[
    "id",
    "workspace",
    "owner",
    "runner_id",
    "state",
    "kind",
    "payload",
    "required_capabilities",
    "priority",
    "epoch",
    "attempts",
    "max_attempts",
    "created_at",
    "leased_at",
    "finished_at",
    "result",
    "error",
    "provenance",
    "billing_tenant",
    "pool",
    "secrets",
    "source",
    "traceparent",
];
pub const RUNNER_COLUMNS: &[&str] = &[
    "id",
    "owner",
    "workspace",
    "label",
    "os",
    "version",
    "capabilities",
    "capacity",
    "active_leases",
    "presence",
    "last_seen_at",
    "created_at",
    "approved_by",
    "ephemeral",
];
pub const MOVED_COLUMNS: &[&str] = &["id", "workspace", "owner", "runner_id", "pool", "state"];
pub const CLAIMED_COLUMNS: &[&str] = &[
    "outcome",
    "id",
    "workspace",
    "epoch",
    "attempts",
    "kind",
    "payload",
    "required_capabilities",
    "priority",
    "named",
    "lease_expires_at",
    "secrets",
    "source",
    "traceparent",
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
    ("runner_insert.sql", RUNNER_COLUMNS),
    ("runner_get.sql", RUNNER_COLUMNS),
    ("runner_heartbeat.sql", RUNNER_COLUMNS),
    ("runners_by_owner.sql", RUNNER_COLUMNS),
    ("runners_in_workspace.sql", RUNNER_COLUMNS),
    ("runner_revoke_jobs.sql", MOVED_COLUMNS),
    ("sweep_lapsed_leases.sql", MOVED_COLUMNS),
    ("sweep_no_runner.sql", MOVED_COLUMNS),
    ("sweep_queue_timeout.sql", MOVED_COLUMNS),
    ("lease_claim.sql", CLAIMED_COLUMNS),
];

use super::{Result, StoreError};
use crate::domain::records::{Claimed, Job, Moved, Queue, Runner};
use crate::domain::state::JobState;

/// A job state read from the database. The CHECK constraint admits only the six states, so
/// anything else is an error, never a guess.
pub fn state(r: &Row, column: &str) -> Result<JobState> {
    let raw: &str = r.get(column);
    JobState::parse(raw).ok_or_else(|| StoreError::Invalid(format!("unknown job state {raw:?}")))
}

pub fn runner(r: &Row) -> Runner {
    Runner {
        id: r.get("id"),
        owner: r.get("owner"),
        workspace: r.get("workspace"),
        label: r.get("label"),
        os: r.get("os"),
        version: r.get("version"),
        capabilities: r.get("capabilities"),
        capacity: r.get("capacity"),
        active_leases: r.get("active_leases"),
        presence: r.get("presence"),
        last_seen_at: r.get("last_seen_at"),
        created_at: r.get("created_at"),
        approved_by: r.get("approved_by"),
        ephemeral: r.get("ephemeral"),
        outdated: r.get("outdated"),
        exclusive: r.get("exclusive"),
        repo_targets: super::placement::repo_targets(&r.get("repo_targets")),
    }
}

pub fn job(r: &Row) -> Result<Job> {
    Ok(Job {
        id: r.get("id"),
        workspace: r.get("workspace"),
        owner: r.get("owner"),
        runner_id: r.get("runner_id"),
        state: state(r, "state")?,
        kind: r.get("kind"),
        payload: r.get("payload"),
        required_capabilities: r.get("required_capabilities"),
        priority: r.get("priority"),
        epoch: r.get("epoch"),
        attempts: r.get("attempts"),
        max_attempts: r.get("max_attempts"),
        created_at: r.get("created_at"),
        leased_at: r.get("leased_at"),
        finished_at: r.get("finished_at"),
        result: r.get("result"),
        error: r.get("error"),
        provenance: r.get("provenance"),
        billing_tenant: r.get("billing_tenant"),
        pool: r.get("pool"),
        secrets: r.get("secrets"),
        source: r.get("source"),
        traceparent: r.try_get("traceparent").ok().flatten(),
        needs_workspace_runner: r.try_get("needs_workspace_runner").unwrap_or(false),
    })
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

pub fn claimed(r: &Row) -> Claimed {
    Claimed {
        id: r.get("id"),
        workspace: r.get("workspace"),
        epoch: r.get("epoch"),
        attempt: r.get("attempts"),
        kind: r.get("kind"),
        payload: r.get("payload"),
        required_capabilities: r.get("required_capabilities"),
        priority: r.get("priority"),
        named: r.get("named"),
        lease_expires_at: r.get("lease_expires_at"),
        secrets: r.get("secrets"),
        source: r.get("source"),
        traceparent: r.get("traceparent"),
    }
}
