//! What the store takes and hands back: the jobs it parks ([`NewJob`]), and rows as typed
//! records, before the API shapes them for the wire.
//!
//! Invariant: a record, the columns its mapping reads and the mapping are one definition
//! ([`record!`]): each field names its column beside its type, the column list is made from
//! those lines, and the mapping builds the record with a struct literal, so a field without a
//! column does not compile and a column it reads is always in the list the schema test checks
//! (`rows::MAPPED`). Each mapping reads columns by name, so a statement may return more columns
//! than a record needs.

use chrono::{DateTime, Utc};
use serde_json::Value;
use tokio_postgres::Row;
use uuid::Uuid;

use super::{Result, StoreError};
use crate::domain::state::JobState;

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
        pub fn $name(r: &Row) -> Result<$rec> {
            Ok($rec { $($field: record!(@try r, $col $(, $read)?)),* })
        }
    };
    (@map $rec:ident, $name:ident, $($field:ident: $col:literal $(=> $read:path)?),*) => {
        #[doc = concat!("A row as a [`", stringify!($rec), "`].")]
        pub fn $name(r: &Row) -> $rec {
            $rec { $($field: record!(@get r, $col $(, $read)?)),* }
        }
    };
    (@try $r:ident, $col:literal) => { $r.get($col) };
    (@try $r:ident, $col:literal, $read:path) => { $read($r, $col)? };
    (@get $r:ident, $col:literal) => { $r.get($col) };
    (@get $r:ident, $col:literal, $read:path) => { $read($r, $col) };
}

/// A job state read from the database. The CHECK constraint admits only the six states, so
/// anything else is an error, never a guess.
pub fn state(r: &Row, column: &str) -> Result<JobState> {
    let raw: &str = r.get(column);
    JobState::parse(raw).ok_or_else(|| StoreError::Invalid(format!("unknown job state {raw:?}")))
}

/// A runner's repository targets, aggregated as JSON by the statement.
fn repo_targets(r: &Row, column: &str) -> Vec<RepoTarget> {
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

/// An authenticated API key.
#[derive(Debug, Clone)]
pub struct ApiKey {
    pub id: Uuid,
    pub workspace: String,
    pub subject: String,
    pub admin: bool,
}

/// A runner as a replica's lease calls know it: who it is, the class it claims with (what it
/// advertises: runners of one owner that advertise the same are claimed for together,
/// claim.sql), and where its leases start. Learnt from its first lease call on the replica
/// (`runner_for_lease.sql`) and refreshed by every claim's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseIdentity {
    pub id: Uuid,
    pub workspace: String,
    pub owner: String,
    /// Sorted; an exclusive name is also a capability.
    pub capabilities: Vec<String>,
    pub exclusive: Vec<String>,
    /// `provider repository` of its approved repository targets, sorted.
    pub sources: Vec<String>,
    /// Not identity but a bound, as of the runner's last claim on this replica: every lease the
    /// runner holds was stamped (`leased_at`) at or after it, so the next claim counts its leases
    /// from there (migration 0015; `None`: from the first).
    pub leases_since: Option<DateTime<Utc>>,
}

impl LeaseIdentity {
    /// The same runner (id, workspace, owner), whatever it advertises.
    pub fn same_runner(&self, other: &Self) -> bool {
        self.id == other.id && self.workspace == other.workspace && self.owner == other.owner
    }

    /// A workspace runner (owned by `ws:<workspace>`), not a personal one.
    pub fn is_workspace_runner(&self) -> bool {
        self.owner.starts_with("ws:")
    }
}

/// An authenticated runner token.
#[derive(Debug, Clone)]
pub struct RunnerIdentity {
    pub id: Uuid,
    pub owner: String,
    pub workspace: String,
    pub ephemeral: bool,
}

record! {
    /// A runner as listed (never carries its token hash).
    #[derive(Debug, Clone)]
    pub struct Runner (RUNNER_COLUMNS, runner) {
        pub id: Uuid = "id",
        pub owner: String = "owner",
        pub workspace: String = "workspace",
        pub label: String = "label",
        pub os: Option<String> = "os",
        pub version: Option<String> = "version",
        pub capabilities: Vec<String> = "capabilities",
        pub capacity: i32 = "capacity",
        pub active_leases: i64 = "active_leases",
        /// The jobs it holds leased now, by ascending id (as many as `active_leases`).
        pub current_jobs: Vec<Uuid> = "current_jobs",
        pub presence: String = "presence",
        pub last_seen_at: Option<DateTime<Utc>> = "last_seen_at",
        pub created_at: DateTime<Utc> = "created_at",
        pub approved_by: String = "approved_by",
        pub ephemeral: bool = "ephemeral",
        /// Its version is below the minimum (or absent, or not semver) while one is set.
        pub outdated: bool = "outdated",
        /// Canary names: it takes only jobs requiring all of them.
        pub exclusive: Vec<String> = "exclusive",
        pub repo_targets: Vec<RepoTarget> = "repo_targets" => repo_targets,
    }
}

/// A repository a runner advertised, and whether an operator approved it for that runner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepoTarget {
    pub id: Uuid,
    pub provider: String,
    pub repository: String,
    pub label: Option<String>,
    /// `pending`, `approved` or `revoked`.
    pub status: String,
}

/// A secret as listed: never its value.
#[derive(Debug, Clone)]
pub struct SecretInfo {
    pub name: String,
    /// `workspace` (workspace runners only) or `any` (personal runners too).
    pub runners: String,
    /// `member` or `admin`: who may name it in a dispatch.
    pub dispatch: String,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// A job to park, validated and targeted. Its workspace and (for a pool) its owner are derived
/// in SQL from the caller's key, which the statement authenticates. Serialised, it is one item
/// of `job_insert.sql`'s `$2` (every field but the key hash, which is `$1`).
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct NewJob {
    pub id: Uuid,
    /// SHA-256 of the caller's API key.
    #[serde(skip)]
    pub key_hash: Vec<u8>,
    /// `personal`, `workspace` or `any`; `None` for a job named for a runner.
    pub pool: Option<&'static str>,
    pub runner_id: Option<Uuid>,
    /// For a named runner: the runner's owner (the job's queue owner).
    pub owner: Option<String>,
    pub kind: String,
    pub payload: Value,
    pub required_capabilities: Vec<String>,
    pub priority: i32,
    pub max_attempts: i32,
    pub no_runner_timeout_ms: i64,
    pub queue_timeout_ms: Option<i64>,
    pub idempotency_key: Option<String>,
    pub secrets: Vec<String>,
    pub source: Option<Value>,
    /// `provider repository` of `source`, compared with runners' approved targets.
    pub source_key: Option<String>,
    /// W3C `traceparent` of the dispatch, when traces are on.
    pub traceparent: Option<String>,
    /// It names a `workspace` secret: personal runners never take it.
    pub needs_workspace_runner: bool,
    /// The retry policy, normalised (`{"limit","on","delay_ms"}`), or none.
    pub retry: Option<Value>,
}

record! {
    /// A job row.
    #[derive(Debug, Clone)]
    pub struct Job (JOB_COLUMNS, job -> Result) {
        pub id: Uuid = "id",
        pub workspace: String = "workspace",
        pub owner: String = "owner",
        pub runner_id: Option<Uuid> = "runner_id",
        pub state: JobState = "state" => state,
        pub kind: String = "kind",
        pub payload: Value = "payload",
        pub required_capabilities: Vec<String> = "required_capabilities",
        pub priority: i32 = "priority",
        pub epoch: i64 = "epoch",
        pub attempts: i32 = "attempts",
        pub max_attempts: i32 = "max_attempts",
        pub created_at: DateTime<Utc> = "created_at",
        pub leased_at: Option<DateTime<Utc>> = "leased_at",
        pub finished_at: Option<DateTime<Utc>> = "finished_at",
        pub result: Option<Value> = "result",
        pub error: Option<Value> = "error",
        pub provenance: Option<Value> = "provenance",
        pub billing_tenant: Option<String> = "billing_tenant",
        /// `personal`, `workspace` or `any` for a pool job; `None` for a job named for a runner.
        pub pool: Option<String> = "pool",
        /// Names of the workspace secrets the job's lease carries.
        pub secrets: Vec<String> = "secrets",
        /// The repository source to build (never with a credential).
        pub source: Option<Value> = "source",
        /// W3C `traceparent` of the dispatch (traces only; never shown on the wire).
        pub traceparent: Option<String> = "traceparent",
        /// It names a `workspace` secret: only workspace runners take it (never on the wire).
        pub needs_workspace_runner: bool = "needs_workspace_runner",
        /// Re-parks made by its retry policy or the retry call (v1.2).
        pub retries: i32 = "retries",
        /// The retry policy as dispatched, normalised (`{"limit","on","delay_ms"}`), or none.
        pub retry: Option<Value> = "retry",
        /// While it waits out a retry's delay: when it may be leased again.
        pub not_before: Option<DateTime<Utc>> = "not_before",
        /// Who made the last dispatch or retry call (v1.4 "Who"; migration 0031): subject.
        pub dispatcher_subject: Option<String> = "dispatcher_subject",
        /// That caller's role, `member` or `admin`.
        pub dispatcher_role: Option<String> = "dispatcher_role",
    }
}

/// A job just parked, with why it waits (v1.4 "Why a job waits"): `job_insert.sql` answers
/// both in the dispatch's one statement.
#[derive(Debug, Clone)]
pub struct Dispatched {
    pub job: Job,
    /// `no_matching_runner`, `no_runner_online`, `all_busy`, or `None` (about to be leased).
    pub waiting: Option<String>,
}

record! {
    /// A job as the lease claim hands it to its runner.
    #[derive(Debug, Clone)]
    pub struct Claimed (CLAIMED_COLUMNS, claimed) {
        pub id: Uuid = "id",
        pub workspace: String = "workspace",
        pub epoch: i64 = "epoch",
        pub attempt: i32 = "attempts",
        pub kind: String = "kind",
        pub payload: Value = "payload",
        pub required_capabilities: Vec<String> = "required_capabilities",
        pub priority: i32 = "priority",
        pub named: bool = "named",
        pub lease_expires_at: DateTime<Utc> = "lease_expires_at",
        /// Names of the secrets it needs; their values are read for the lease answer.
        pub secrets: Vec<String> = "secrets",
        pub source: Option<Value> = "source",
        /// W3C `traceparent` of the dispatch (traces only).
        pub traceparent: Option<String> = "traceparent",
        /// Where it waited (its lane, migration 0040): its pool, and whether only workspace
        /// runners may take it.
        pub pool: Option<String> = "pool",
        pub needs_workspace_runner: bool = "needs_workspace_runner",
    }
}

/// A job's queue: `(workspace, owner, runner_id)` (PROTOCOL.md, Words), and for a pool job
/// which pool (an `any` job is also on its workspace's `any` queue).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Queue {
    pub workspace: String,
    pub owner: String,
    pub runner_id: Option<Uuid>,
    pub pool: Option<String>,
    /// Only workspace runners may take it (it names a `workspace` secret).
    pub needs_workspace_runner: bool,
    /// Its claim class: it requires a capability or a source (migration 0012). `None` where the
    /// statement that moved the job does not say (it did not park it): then both classes.
    pub constrained: Option<bool>,
    /// Its priority, where the statement says: where it stands in its lane, with its id.
    pub priority: Option<i32>,
}

/// A job a transition moved, for wake-ups: its queue and new state.
#[derive(Debug, Clone)]
pub struct Moved {
    pub id: Uuid,
    pub queue: Queue,
    pub state: JobState,
}

#[derive(Debug, Clone)]
pub struct Event {
    pub seq: i32,
    pub at: DateTime<Utc>,
    pub kind: String,
    pub data: Value,
}

/// A burned join code: what the runner it enrols becomes.
#[derive(Debug, Clone)]
pub struct JoinGrant {
    pub workspace: String,
    pub owner: String,
    pub approved_by: String,
    pub ephemeral: bool,
}

#[derive(Debug, Clone, Default)]
pub struct PoolCounts {
    pub online: i64,
    pub dormant: i64,
    pub never: i64,
    pub slot_capacity: i64,
    pub slot_active: i64,
    pub parked: i64,
    pub leased: i64,
}

impl Job {
    /// The queue the job waits on while parked.
    pub fn queue(&self) -> Queue {
        Queue {
            workspace: self.workspace.clone(),
            owner: self.owner.clone(),
            runner_id: self.runner_id,
            pool: self.pool.clone(),
            needs_workspace_runner: self.needs_workspace_runner,
            constrained: Some(!self.required_capabilities.is_empty() || self.source.is_some()),
            priority: Some(self.priority),
        }
    }
}
