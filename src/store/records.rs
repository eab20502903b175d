//! What the store hands back: rows as typed records, before the API shapes them for the wire.

use chrono::{DateTime, Utc};
use serde_json::Value;
use uuid::Uuid;

use crate::domain::state::JobState;

/// An authenticated API key.
#[derive(Debug, Clone)]
pub struct ApiKey {
    pub id: Uuid,
    pub workspace: String,
    pub subject: String,
    pub admin: bool,
}

/// Who a runner is: fixed for the runner's life, so a replica may remember it by token hash
/// (authorisation is still checked by every statement).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseIdentity {
    pub id: Uuid,
    pub workspace: String,
    pub owner: String,
    /// Not identity but a hint, as of the runner's last claim: it advertised no capability and
    /// held no approved repository target, so only plain jobs fit it (the next lease then sends
    /// the plain claim, which checks it again).
    pub plain: bool,
    /// Not identity but a bound, as of the runner's last claim on this replica: every lease the
    /// runner holds was stamped (`leased_at`) at or after it, so the next claim counts its leases
    /// from there (migration 0015; `None`: from the first).
    pub leases_since: Option<DateTime<Utc>>,
}

impl LeaseIdentity {
    /// The same runner (id, workspace, owner), whatever the hint says.
    pub fn same_runner(&self, other: &Self) -> bool {
        self.id == other.id && self.workspace == other.workspace && self.owner == other.owner
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

/// A runner as listed (never carries its token hash).
#[derive(Debug, Clone)]
pub struct Runner {
    pub id: Uuid,
    pub owner: String,
    pub workspace: String,
    pub label: String,
    pub os: Option<String>,
    pub version: Option<String>,
    pub capabilities: Vec<String>,
    pub capacity: i32,
    pub active_leases: i64,
    pub presence: String,
    pub last_seen_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub approved_by: String,
    pub ephemeral: bool,
    /// Its version is below the minimum (or absent, or not semver) while one is set.
    pub outdated: bool,
    /// Canary names: it takes only jobs requiring all of them.
    pub exclusive: Vec<String>,
    pub repo_targets: Vec<RepoTarget>,
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

/// A job row.
#[derive(Debug, Clone)]
pub struct Job {
    pub id: Uuid,
    pub workspace: String,
    pub owner: String,
    pub runner_id: Option<Uuid>,
    pub state: JobState,
    pub kind: String,
    pub payload: Value,
    pub required_capabilities: Vec<String>,
    pub priority: i32,
    pub epoch: i64,
    pub attempts: i32,
    pub max_attempts: i32,
    pub created_at: DateTime<Utc>,
    pub leased_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
    pub result: Option<Value>,
    pub error: Option<Value>,
    pub provenance: Option<Value>,
    pub billing_tenant: Option<String>,
    /// `personal`, `workspace` or `any` for a pool job; `None` for a job named for a runner.
    pub pool: Option<String>,
    /// Names of the workspace secrets the job's lease carries.
    pub secrets: Vec<String>,
    /// The repository source to build (never with a credential).
    pub source: Option<Value>,
    /// W3C `traceparent` of the dispatch (traces only; never shown on the wire).
    pub traceparent: Option<String>,
    /// It names a `workspace` secret: only workspace runners take it (never on the wire).
    pub needs_workspace_runner: bool,
    /// Re-parks made by its retry policy or the retry call (v1.2).
    pub retries: i32,
    /// The retry policy as dispatched, normalised (`{"limit","on","delay_ms"}`), or none.
    pub retry: Option<Value>,
    /// While it waits out a retry's delay: when it may be leased again.
    pub not_before: Option<DateTime<Utc>>,
}

/// A job as the lease claim hands it to its runner.
#[derive(Debug, Clone)]
pub struct Claimed {
    pub id: Uuid,
    pub workspace: String,
    pub epoch: i64,
    pub attempt: i32,
    pub kind: String,
    pub payload: Value,
    pub required_capabilities: Vec<String>,
    pub priority: i32,
    pub named: bool,
    pub lease_expires_at: DateTime<Utc>,
    /// Names of the secrets it needs; their values are read for the lease answer.
    pub secrets: Vec<String>,
    pub source: Option<Value>,
    /// W3C `traceparent` of the dispatch (traces only).
    pub traceparent: Option<String>,
}

/// A job's queue: `(workspace, owner, runner_id)` (PROTOCOL.md, Words), and for a pool job
/// which pool (an `any` job is also on its workspace's `any` queue).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Queue {
    pub workspace: String,
    pub owner: String,
    pub runner_id: Option<Uuid>,
    pub pool: Option<String>,
    /// Only workspace runners may take it (it names a `workspace` secret); `false` where the
    /// statement that moved the job does not say, which at worst sends a wake to a personal
    /// runner that passes it on.
    pub needs_workspace_runner: bool,
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
        }
    }
}
