//! The HTTP contract's bodies (`docs/api.md`), shared by the server, the client, the
//! runner and the tests. Responses serialise every documented field, `null` where empty;
//! requests ignore unknown fields and leave range checks to the server's validation.
//!
//! The contract's closed vocabularies (job `state`, runner `presence`, target `status`) are
//! enums serialising to exactly its strings and deserialising strictly: the contract fixes them,
//! so a value outside them is not one our server sends. Open vocabularies (job and event
//! `kind`, error `code`) stay strings. A source is typed twice on purpose: [`Source`] names a
//! credential (dispatch, Job view), [`LeasedSource`] carries its value (lease only), so a
//! credential value cannot reach a Job view by construction.

pub mod artifacts;
pub mod command;
pub mod connect;
pub mod feed;
pub mod input;
pub mod stores;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;
use uuid::Uuid;

pub use feed::{
    FeedEvent, FeedPage, PutWebhook, Webhook, WebhookDelivery, WebhookDeliveryList, WebhookList,
};
pub use stores::{Artifact, ArtifactList, ArtifactUploaded, PutSecret, SecretInfo, SecretList};

/// A closed vocabulary of the contract as a Rust enum that serialises to exactly the contract's
/// string. `as_str`, `Display` and comparison with `&str` (`job.state == "completed"`) keep the
/// string forms usable where a test or a message wants them.
macro_rules! vocabulary {
    ($(#[$meta:meta])* $name:ident { $($variant:ident => $text:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(utoipa::ToSchema, Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
        #[serde(rename_all = "lowercase")]
        pub enum $name {
            $($variant),+
        }

        impl $name {
            /// Every value, in the contract's order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The contract's string.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text),+
                }
            }

            /// The value whose contract string is `s`.
            pub fn parse(s: &str) -> Option<Self> {
                Self::ALL.iter().copied().find(|v| v.as_str() == s)
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.as_str() == other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.as_str() == *other
            }
        }

        impl PartialEq<$name> for &str {
            fn eq(&self, other: &$name) -> bool {
                *self == other.as_str()
            }
        }
    };
}

vocabulary! {
    /// A job's state (`Job.state`). The contract fixes the six values, so a client deserialises
    /// strictly: a server speaking this contract never sends another. The rule is the domain's
    /// `JobState`; this mirrors it for the wire (`api::views` converts, and tests that the two
    /// are the same set).
    JobState {
        Parked => "parked",
        Leased => "leased",
        Completed => "completed",
        Failed => "failed",
        Cancelled => "cancelled",
        Rejected => "rejected",
    }
}

impl JobState {
    /// Settled: the state never changes again.
    pub fn is_terminal(self) -> bool {
        !matches!(self, JobState::Parked | JobState::Leased)
    }
}

vocabulary! {
    /// How a settled job ended (`Job.outcome`, v1.3): `succeeded` (completed, its result with
    /// no `exit_code` or 0), `failed` (state failed, or completed with any other `exit_code`),
    /// `cancelled`, `rejected`; null while the job is live.
    Outcome {
        Succeeded => "succeeded",
        Failed => "failed",
        Cancelled => "cancelled",
        Rejected => "rejected",
    }
}

vocabulary! {
    /// A runner's presence (`Runner.presence`): `online` (seen within the presence window),
    /// `dormant` (seen before that), `never` (paired, never seen). A closed vocabulary of the
    /// contract, deserialised strictly.
    Presence {
        Online => "online",
        Dormant => "dormant",
        Never => "never",
    }
}

vocabulary! {
    /// A repository target's status (`RepoTarget.status`, v1.1). A closed vocabulary of the
    /// contract, deserialised strictly.
    TargetStatus {
        Pending => "pending",
        Approved => "approved",
        Revoked => "revoked",
    }
}

/// `{"error": {...}}`, every non-2xx answer.
#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize)]
pub struct ErrorDetail {
    pub code: String,
    pub message: String,
    /// Only on `job_terminal`: the job's terminal state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<JobState>,
    /// Only on `runner_outdated`: the lowest version the server accepts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_version: Option<String>,
}

#[derive(utoipa::ToSchema, Debug, Clone, PartialEq, Serialize, Deserialize)]
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
    pub presence: Presence,
    pub last_seen_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub approved_by: Option<String>,
    pub ephemeral: bool,
    /// v1.1: the version is below the server's minimum (or absent, or not semver).
    #[serde(default)]
    pub outdated: bool,
    /// v1.1: canary names; the runner takes only jobs requiring all of them.
    #[serde(default)]
    pub exclusive: Vec<String>,
    /// v1.1: repositories this runner advertised, and whether each is approved for it.
    #[serde(default)]
    pub repo_targets: Vec<RepoTarget>,
    /// The jobs it holds leased now, by ascending id (leasehold's own, beside
    /// `active_leases`: docs/contract-notes.md); `[]` from a server before it.
    #[serde(default)]
    pub current_jobs: Vec<Uuid>,
}

/// A repository target as recorded for a runner.
#[derive(utoipa::ToSchema, Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RepoTarget {
    pub id: Uuid,
    pub provider: String,
    pub repository: String,
    pub label: Option<String>,
    pub status: TargetStatus,
}

/// A repository target as a runner advertises it.
#[derive(utoipa::ToSchema, Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdvertisedTarget {
    pub provider: String,
    pub repository: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
}

impl AdvertisedTarget {
    /// A git repository by URL, as `--repo-target URL` advertises it.
    pub fn git(repository: impl Into<String>) -> Self {
        Self {
            provider: "git".into(),
            repository: repository.into(),
            label: None,
        }
    }
}

/// A job's repository source, as dispatched and as the Job view shows it (a credential is only
/// ever named here, never carried).
#[derive(utoipa::ToSchema, Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Source {
    pub provider: String,
    pub repository: String,
    pub commit_sha: String,
    #[serde(default, rename = "ref", skip_serializing_if = "Option::is_none")]
    pub git_ref: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credential_secret: Option<String>,
}

/// Text that is never printed by `Debug` (secret values, credentials).
#[derive(utoipa::ToSchema, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Redacted(pub String);

impl std::fmt::Debug for Redacted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

/// The source of a leased job: what to fetch, and the credential for it when one was named.
#[derive(utoipa::ToSchema, Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeasedSource {
    pub provider: String,
    pub repository: String,
    pub commit_sha: String,
    #[serde(default, rename = "ref")]
    pub git_ref: Option<String>,
    #[serde(default)]
    pub credential: Option<Redacted>,
}

/// `{"NAME": "value"}`: a leased job's secrets. `Debug` shows the names only.
#[derive(utoipa::ToSchema, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SecretValues(pub std::collections::BTreeMap<String, String>);

impl std::fmt::Debug for SecretValues {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.0.keys()).finish()
    }
}

#[derive(utoipa::ToSchema, Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Job {
    pub id: Uuid,
    pub workspace: String,
    pub owner: String,
    /// A runner id, or `*` for the owner's pool.
    pub runner_id: String,
    pub state: JobState,
    /// An open vocabulary (`^[a-z][a-z0-9_.-]{0,63}$`, default `command`): the contract lets
    /// dispatchers name their own kinds, so it stays a string, validated at dispatch.
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
    /// `personal`, `workspace` or `any` for a pool job; null for a job named for a runner.
    #[serde(default)]
    pub pool: Option<String>,
    /// Names of the workspace secrets the job's lease carries (never their values).
    #[serde(default)]
    pub secrets: Vec<String>,
    /// The repository source as dispatched: a credential only named, never carried.
    #[serde(default)]
    pub source: Option<Source>,
    /// Re-parks made by its retry policy or `POST /v1/jobs/{id}/retry` (v1.2).
    #[serde(default)]
    pub retries: i32,
    /// The retry policy as dispatched, defaults filled in; null for none (v1.2).
    #[serde(default)]
    pub retry: Option<RetryPolicy>,
    /// While it waits out a retry's delay: when it may be leased again; else null (v1.2).
    #[serde(default)]
    pub not_before: Option<DateTime<Utc>>,
    /// How it ended; null until it is terminal (v1.3).
    #[serde(default)]
    pub outcome: Option<Outcome>,
    /// The caller of the last dispatch or retry call (v1.4 "Who"); null for a job parked
    /// before the server recorded it.
    #[serde(default)]
    pub dispatched_by: Option<DispatchedBy>,
    /// Why a parked job waits (v1.4): `no_matching_runner`, `no_runner_online`, `all_busy`,
    /// `not_before`, or null (about to be leased, or not parked). `GET /v1/jobs/{id}` and a
    /// dispatch answer compute it; lists leave it null.
    #[serde(default)]
    pub waiting: Option<String>,
}

/// Who dispatched or last retried a job (v1.4): the API key's subject and role.
#[derive(utoipa::ToSchema, Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DispatchedBy {
    pub subject: String,
    /// `member` or `admin`.
    pub role: String,
}

/// A dispatch's retry policy (v1.2): up to `limit` re-parks, for the reasons in `on`, each
/// leasable `delay_ms × 2^(retries-1)` (capped at an hour) after the attempt ended.
#[derive(utoipa::ToSchema, Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetryPolicy {
    /// 0..10.
    pub limit: i64,
    /// A subset of `runner_failed`, `exit_code`, `lease_lost` (default all three).
    pub on: Vec<String>,
    /// 0..3600000 (default 0).
    pub delay_ms: i64,
}

impl RetryPolicy {
    /// The reasons a policy may name, in the order the default lists them.
    pub const REASONS: [&'static str; 3] = ["runner_failed", "exit_code", "lease_lost"];
}

impl Job {
    pub fn is_terminal(&self) -> bool {
        self.state.is_terminal()
    }
}

/// A job as the runner holding it sees it.
#[derive(utoipa::ToSchema, Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LeasedJob {
    pub id: Uuid,
    pub epoch: i64,
    pub attempt: i32,
    pub workspace: String,
    /// Open vocabulary, as in [`Job::kind`].
    pub kind: String,
    pub payload: Value,
    pub required_capabilities: Vec<String>,
    pub lease_expires_at: DateTime<Utc>,
    pub lease_ttl_ms: u64,
    pub heartbeat_interval_ms: u64,
    /// v1.1: the values of the secrets the job names, read at lease time.
    #[serde(default)]
    pub secrets: SecretValues,
    /// v1.1: the repository commit to run in, if the job has one.
    #[serde(default)]
    pub source: Option<LeasedSource>,
}

#[derive(utoipa::ToSchema, Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    pub seq: i32,
    pub at: DateTime<Utc>,
    pub kind: String,
    pub data: Value,
}

// ---- requests -------------------------------------------------------------------------

/// Deserialises a present field, even `null`, as `Some`: `payload` is required but may be null.
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

/// `POST /v1/runners`, `POST /v1/workspace/runners`.
#[derive(utoipa::ToSchema, Debug, Clone, Default, Serialize, Deserialize)]
pub struct CreateRunner {
    pub label: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub os: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repo_targets: Option<Vec<AdvertisedTarget>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capabilities: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exclusive: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<i64>,
}

/// `201` of pairing and enrolment: the token is shown this once.
#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize)]
pub struct RunnerWithToken {
    pub runner: Runner,
    pub token: String,
}

#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize)]
pub struct RunnerList {
    pub runners: Vec<Runner>,
}

#[derive(utoipa::ToSchema, Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Member,
    Admin,
}

#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize)]
pub struct CreateKey {
    pub subject: String,
    pub role: Role,
}

#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize)]
pub struct CreatedKey {
    pub id: Uuid,
    pub key: String,
}

#[derive(utoipa::ToSchema, Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Tier {
    Personal,
    Workspace,
}

/// The pool a job is dispatched to: the caller's personal runners, the workspace's, or (v1.1)
/// either, whichever leases first.
#[derive(utoipa::ToSchema, Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PoolName {
    Personal,
    Workspace,
    Any,
}

impl PoolName {
    pub fn as_str(self) -> &'static str {
        match self {
            PoolName::Personal => "personal",
            PoolName::Workspace => "workspace",
            PoolName::Any => "any",
        }
    }
}

/// Where a job goes: exactly one of the two shapes; anything else is 400.
#[derive(utoipa::ToSchema, Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged, deny_unknown_fields)]
pub enum Target {
    Runner { runner_id: Uuid },
    Pool { pool: PoolName },
}

#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize)]
pub struct Dispatch {
    pub target: Target,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default, deserialize_with = "present")]
    pub payload: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub required_capabilities: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_attempts: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub no_runner_timeout_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_timeout_ms: Option<i64>,
    /// Names of workspace secrets the lease carries (v1.1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secrets: Option<Vec<String>>,
    /// A repository source (v1.1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<Value>,
    /// A retry policy (v1.2): `{"limit": 0..10, "on"?: [...], "delay_ms"?: 0..3600000}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<Value>,
}

/// One item of `POST /v1/jobs/batch`: a dispatch body and its own idempotency key.
#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize)]
pub struct BatchItem {
    #[serde(flatten)]
    pub dispatch: Dispatch,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
}

/// `POST /v1/jobs/batch` (v1.1): 1..1000 items, all parked in one transaction or none.
#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize)]
pub struct DispatchBatch {
    pub jobs: Vec<BatchItem>,
}

/// The answer of a batch dispatch: the jobs in request order.
#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize)]
pub struct Jobs {
    pub jobs: Vec<Job>,
}

impl Dispatch {
    /// A pool or named dispatch of `payload` with every option at its default.
    pub fn new(target: Target, payload: Value) -> Self {
        Self {
            target,
            kind: None,
            payload: Some(payload),
            required_capabilities: None,
            priority: None,
            max_attempts: None,
            no_runner_timeout_ms: None,
            queue_timeout_ms: None,
            secrets: None,
            source: None,
            retry: None,
        }
    }
}

#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize)]
pub struct JobList {
    pub jobs: Vec<Job>,
    pub next: Option<Uuid>,
}

#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize)]
pub struct EventList {
    pub events: Vec<Event>,
    pub next: i64,
}

#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize)]
pub struct CreateJoinCode {
    pub tier: Tier,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_s: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ephemeral: Option<bool>,
}

#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize)]
pub struct JoinCode {
    pub code: String,
    pub expires_at: DateTime<Utc>,
    /// The code with the server's URLs (and, for a self-signed server, its key pin) in one
    /// `lh1.` string for `leasehold runner connect`; `null` when the server has no
    /// `LEASEHOLD_PUBLIC_URL`. A leasehold extension; v1 clients ignore it.
    #[serde(default)]
    pub connect: Option<String>,
    /// v1.2: `<first public URL>/j/<short>`, which hands out `connect` once (`GET /j/<short>`),
    /// for `leasehold runner connect <url>` and the installer; `null` unless the first
    /// `LEASEHOLD_PUBLIC_URL` is https.
    #[serde(default)]
    pub url: Option<String>,
}

/// v1.2: the answer of `GET /j/<short>`, given once.
#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize)]
pub struct JoinUrl {
    /// The join code's `lh1.` connect payload.
    pub connect: String,
}

#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize)]
pub struct Preflight {
    pub target: Target,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub required_capabilities: Option<Vec<String>>,
    /// v1.1: the job's repository source (blocker `no_approved_target`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<Value>,
}

#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize)]
pub struct Finding {
    pub code: String,
    pub message: String,
}

#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize)]
pub struct PreflightReport {
    pub ok: bool,
    pub blockers: Vec<Finding>,
    pub warnings: Vec<Finding>,
}

#[derive(utoipa::ToSchema, Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PoolRunners {
    pub online: i64,
    pub dormant: i64,
    pub never: i64,
}

#[derive(utoipa::ToSchema, Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PoolSlots {
    pub capacity: i64,
    pub active: i64,
}

#[derive(utoipa::ToSchema, Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PoolJobs {
    pub parked: i64,
    pub leased: i64,
}

#[derive(utoipa::ToSchema, Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Pool {
    pub runners: PoolRunners,
    pub slots: PoolSlots,
    pub jobs: PoolJobs,
}

// ---- runner calls -----------------------------------------------------------------------

#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize, Default)]
pub struct Enroll {
    pub code: String,
    pub label: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub os: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capabilities: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exclusive: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repo_targets: Option<Vec<AdvertisedTarget>>,
}

#[derive(utoipa::ToSchema, Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Running {
    pub id: Uuid,
    pub epoch: i64,
}

#[derive(utoipa::ToSchema, Debug, Clone, Default, Serialize, Deserialize)]
pub struct RunnerHeartbeat {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capabilities: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exclusive: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running: Option<Vec<Running>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repo_targets: Option<Vec<AdvertisedTarget>>,
}

#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize)]
pub struct RunnerHeartbeatReply {
    pub runner: Runner,
    pub cancelled: Vec<Uuid>,
}

#[derive(utoipa::ToSchema, Debug, Clone, Default, Serialize, Deserialize)]
pub struct Lease {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repo_targets: Option<Vec<AdvertisedTarget>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_jobs: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capabilities: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exclusive: Option<Vec<String>>,
    /// v1.2: reports of finished jobs, applied before the lease (at most 100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub done: Option<Vec<DoneReport>>,
}

/// One report a lease call carries (v1.2): `{id, epoch, result}` is a `complete`,
/// `{id, epoch, fail: "message"}` a `fail`.
#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize)]
pub struct DoneReport {
    pub id: Uuid,
    pub epoch: i64,
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub result: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fail: Option<String>,
}

/// What one report of a lease call's `done` came to: the status and error code its own call
/// would have answered (`code` null on success).
#[derive(utoipa::ToSchema, Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DoneStatus {
    pub id: Uuid,
    pub status: u16,
    pub code: Option<String>,
}

impl Lease {
    /// A long-poll of `wait_ms` for at most `max_jobs`, saying nothing else (no advertisement).
    pub fn waiting(wait_ms: i64, max_jobs: i64) -> Self {
        Self {
            wait_ms: Some(wait_ms),
            max_jobs: Some(max_jobs),
            ..Self::default()
        }
    }
}

#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize)]
pub struct Leased {
    pub jobs: Vec<LeasedJob>,
    /// v1.2: what each report of the call's `done` came to, in request order (`[]` without).
    #[serde(default)]
    pub done: Vec<DoneStatus>,
}

/// `{epoch}`: job heartbeat and release.
#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize)]
pub struct Fence {
    pub epoch: i64,
}

#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize)]
pub struct LeaseExtended {
    pub lease_expires_at: DateTime<Utc>,
}

#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize)]
pub struct NewEvent {
    pub kind: String,
    #[serde(default, deserialize_with = "present")]
    pub data: Option<Value>,
}

#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize)]
pub struct AppendEvents {
    pub epoch: i64,
    pub events: Vec<NewEvent>,
}

#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize)]
pub struct Appended {
    pub next: i64,
}

#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize)]
pub struct Complete {
    pub epoch: i64,
    #[serde(default, deserialize_with = "present")]
    pub result: Option<Value>,
}

#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize)]
pub struct Fail {
    pub epoch: i64,
    pub message: String,
}
