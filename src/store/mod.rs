//! PostgreSQL, the only state. One function per statement in `sql/`, each run as a cached
//! prepared statement on a pooled connection.
//!
//! Invariants: every job transition is one fenced statement (or, for the lease and revocation,
//! one short transaction that locks the runner row first); deadlines use the database clock;
//! values are always bound, never formatted into SQL.

pub mod error;
pub mod listener;
pub mod migrate;
pub mod sql;

use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime, Timeouts};
use serde_json::Value;
use tokio_postgres::{NoTls, Row};
use uuid::Uuid;

pub use error::StoreError;

use crate::domain::records::{
    ApiKey, Claimed, Event, Job, JoinGrant, Moved, PoolCounts, Runner, RunnerIdentity,
};
use crate::domain::state::JobState;

pub type Result<T> = std::result::Result<T, StoreError>;

/// A pooled handle on the database. Cheap to clone.
#[derive(Clone)]
pub struct Store {
    pool: Pool,
    presence_window_ms: i64,
    /// Statements sent to the database (BEGIN and COMMIT included), for `/metrics`.
    statements: Arc<AtomicU64>,
}

/// A new job, validated and targeted, ready to park.
#[derive(Debug, Clone)]
pub struct NewJob {
    pub id: Uuid,
    pub workspace: String,
    pub owner: String,
    pub runner_id: Option<Uuid>,
    pub kind: String,
    pub payload: Value,
    pub required_capabilities: Vec<String>,
    pub priority: i32,
    pub max_attempts: i32,
    pub no_runner_timeout_ms: i64,
    pub queue_timeout_ms: Option<i64>,
    pub idempotency_key: Option<String>,
    pub billing_tenant: Option<String>,
}

/// A new runner, paired by a key or enrolled with a join code.
#[derive(Debug, Clone)]
pub struct NewRunner {
    pub id: Uuid,
    pub owner: String,
    pub workspace: String,
    pub label: String,
    pub os: Option<String>,
    pub version: Option<String>,
    pub capabilities: Vec<String>,
    pub capacity: i32,
    pub token_hash: Vec<u8>,
    pub approved_by: String,
    pub ephemeral: bool,
    /// Enrolment counts as being seen; pairing by key does not.
    pub seen: bool,
}

impl NewRunner {
    /// The parameters of `runner_insert.sql`, in order.
    fn params<'a>(
        &'a self,
        presence_window_ms: &'a i64,
    ) -> [&'a (dyn tokio_postgres::types::ToSql + Sync); 13] {
        [
            &self.id,
            &self.owner,
            &self.workspace,
            &self.label,
            &self.os,
            &self.version,
            &self.capabilities,
            &self.capacity,
            &self.token_hash,
            &self.approved_by,
            &self.ephemeral,
            &self.seen,
            presence_window_ms,
        ]
    }
}

/// What one lease transaction did.
#[derive(Debug, Default)]
pub struct LeaseOutcome {
    /// No live runner has this token (unknown, revoked, spent ephemeral).
    pub runner_gone: bool,
    pub runner_id: Uuid,
    pub owner: String,
    /// How many jobs this call could take: free slots (capacity - active leases), capped by
    /// `max_jobs`.
    pub free: i64,
    pub claimed: Vec<Claimed>,
    /// Named jobs rejected for a missing capability.
    pub rejected: Vec<Uuid>,
    /// Pool jobs this call did not take are still parked.
    pub more: bool,
}

/// Why a fenced runner call matched no row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FenceMiss {
    /// Unknown, or another owner's job.
    NotFound,
    /// The job has settled; it carries the terminal state.
    Terminal(JobState),
    /// Live, but not held by this runner at that epoch.
    Superseded,
}

impl Store {
    /// Build a pool for `database_url` of at most `size` connections. Connects lazily.
    ///
    /// # Errors
    /// The URL does not parse.
    pub fn connect(
        database_url: &str,
        size: usize,
        presence_window_ms: u64,
    ) -> anyhow::Result<Self> {
        let mut pg = tokio_postgres::Config::from_str(database_url)?;
        if pg.get_application_name().is_none() {
            pg.application_name("leasehold-pool");
        }
        // With several hosts, a dead one must not use up the whole create timeout before the
        // next is tried.
        if pg.get_connect_timeout().is_none() {
            pg.connect_timeout(Duration::from_secs(1));
        }
        // Fast recycling (no round trip per checkout) is enough across a failover: a connection
        // to the dead primary is closed and dropped on checkout, and `target_session_attrs` in
        // the URL keeps new ones off a standby. A read-write server only turns read-only by
        // restarting, which closes every connection; a write that meets one anyway (25006) is
        // a 503, like any other unreachable database.
        let manager = Manager::from_config(
            pg,
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(size.max(1))
            .runtime(Runtime::Tokio1)
            .timeouts(Timeouts {
                wait: Some(Duration::from_secs(5)),
                create: Some(Duration::from_secs(3)),
                recycle: Some(Duration::from_secs(3)),
            })
            .build()?;
        Ok(Self {
            pool,
            presence_window_ms: presence_window_ms as i64,
            statements: Arc::new(AtomicU64::new(0)),
        })
    }

    /// Statements sent so far.
    pub fn statements(&self) -> u64 {
        self.statements.load(Ordering::Relaxed)
    }

    fn count(&self, n: u64) {
        self.statements.fetch_add(n, Ordering::Relaxed);
    }

    /// Connections open in the pool now (for metrics and tests).
    pub fn pool_status(&self) -> deadpool_postgres::Status {
        self.pool.status()
    }

    async fn client(&self) -> Result<deadpool_postgres::Object> {
        Ok(self.pool.get().await?)
    }

    async fn query(
        &self,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<Vec<Row>> {
        let client = self.client().await?;
        let stmt = client.prepare_cached(sql).await?;
        Ok(client.query(&stmt, params).await?)
    }

    async fn query_opt(
        &self,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<Option<Row>> {
        let client = self.client().await?;
        let stmt = client.prepare_cached(sql).await?;
        Ok(client.query_opt(&stmt, params).await?)
    }

    async fn execute(
        &self,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<u64> {
        let client = self.client().await?;
        let stmt = client.prepare_cached(sql).await?;
        Ok(client.execute(&stmt, params).await?)
    }

    /// The database answers.
    pub async fn ping(&self) -> Result<()> {
        self.query(sql::PING, &[]).await.map(drop)
    }

    /// Prepare every statement in `sql/` (the schema test).
    pub async fn prepare_all(
        &self,
    ) -> Result<Vec<(&'static str, std::result::Result<(), String>)>> {
        let client = self.client().await?;
        let mut out = Vec::new();
        for (file, text) in sql::ALL {
            out.push((
                *file,
                client
                    .prepare(text)
                    .await
                    .map(drop)
                    .map_err(|e| format!("{e:?}")),
            ));
        }
        Ok(out)
    }

    // ---- API keys ------------------------------------------------------------------------

    pub async fn insert_key(
        &self,
        id: Uuid,
        workspace: &str,
        subject: &str,
        admin: bool,
        hash: &[u8],
    ) -> Result<()> {
        let role = if admin { "admin" } else { "member" };
        self.execute(sql::KEY_INSERT, &[&id, &workspace, &subject, &role, &hash])
            .await
            .map(drop)
    }

    pub async fn key_by_hash(&self, hash: &[u8]) -> Result<Option<ApiKey>> {
        Ok(self
            .query_opt(sql::KEY_BY_HASH, &[&hash])
            .await?
            .map(|r| ApiKey {
                id: r.get("id"),
                workspace: r.get("workspace"),
                subject: r.get("subject"),
                admin: r.get::<_, &str>("role") == "admin",
            }))
    }

    /// `true` if a live key of `workspace` was revoked.
    pub async fn revoke_key(&self, id: Uuid, workspace: &str) -> Result<bool> {
        Ok(self.execute(sql::KEY_REVOKE, &[&id, &workspace]).await? == 1)
    }

    // ---- runners -------------------------------------------------------------------------

    pub async fn insert_runner(&self, r: &NewRunner) -> Result<Runner> {
        let row = self
            .query(sql::RUNNER_INSERT, &r.params(&self.presence_window_ms))
            .await?;
        Ok(runner(&row[0]))
    }

    /// Burn a join code and enrol its runner in one transaction: both or neither.
    pub async fn enroll(
        &self,
        code_hash: &[u8],
        make: impl FnOnce(&JoinGrant) -> NewRunner,
    ) -> Result<Option<Runner>> {
        let mut client = self.client().await?;
        self.count(4);
        let tx = client.transaction().await?;
        let burn = tx.prepare_cached(sql::JOIN_CODE_BURN).await?;
        let Some(row) = tx.query_opt(&burn, &[&code_hash]).await? else {
            return Ok(None);
        };
        let grant = JoinGrant {
            workspace: row.get("workspace"),
            owner: row.get("owner"),
            approved_by: row.get("approved_by"),
            ephemeral: row.get("ephemeral"),
        };
        let r = make(&grant);
        let insert = tx.prepare_cached(sql::RUNNER_INSERT).await?;
        let row = tx
            .query_one(&insert, &r.params(&self.presence_window_ms))
            .await?;
        tx.commit().await?;
        Ok(Some(runner(&row)))
    }

    pub async fn insert_join_code(
        &self,
        hash: &[u8],
        workspace: &str,
        owner: &str,
        approved_by: &str,
        ephemeral: bool,
        ttl_s: i64,
    ) -> Result<chrono::DateTime<chrono::Utc>> {
        let rows = self
            .query(
                sql::JOIN_CODE_INSERT,
                &[&hash, &workspace, &owner, &approved_by, &ephemeral, &ttl_s],
            )
            .await?;
        Ok(rows[0].get("expires_at"))
    }

    /// Authenticate a runner token; `refresh_ms` is how stale `last_seen_at` may be.
    pub async fn runner_by_token(
        &self,
        hash: &[u8],
        refresh_ms: i64,
    ) -> Result<Option<RunnerIdentity>> {
        Ok(self
            .query_opt(sql::RUNNER_BY_TOKEN, &[&hash, &refresh_ms])
            .await?
            .map(|r| RunnerIdentity {
                id: r.get("id"),
                owner: r.get("owner"),
                workspace: r.get("workspace"),
                ephemeral: r.get("ephemeral"),
                stale: r.get("stale"),
            }))
    }

    /// Mark runners as seen now, in one statement.
    pub async fn touch_runners(&self, ids: &[Uuid]) -> Result<()> {
        if ids.is_empty() {
            return Ok(());
        }
        self.execute(sql::RUNNERS_TOUCH, &[&ids]).await.map(drop)
    }

    pub async fn runners_by_owner(&self, owner: &str) -> Result<Vec<Runner>> {
        let rows = self
            .query(sql::RUNNERS_BY_OWNER, &[&owner, &self.presence_window_ms])
            .await?;
        Ok(rows.iter().map(runner).collect())
    }

    pub async fn runners_in_workspace(&self, workspace: &str) -> Result<Vec<Runner>> {
        let rows = self
            .query(
                sql::RUNNERS_IN_WORKSPACE,
                &[&workspace, &self.presence_window_ms],
            )
            .await?;
        Ok(rows.iter().map(runner).collect())
    }

    pub async fn runner(&self, id: Uuid) -> Result<Option<Runner>> {
        Ok(self
            .query_opt(sql::RUNNER_GET, &[&id, &self.presence_window_ms])
            .await?
            .as_ref()
            .map(runner))
    }

    pub async fn runner_heartbeat(
        &self,
        id: Uuid,
        version: Option<&str>,
        capabilities: Option<&[String]>,
        capacity: Option<i32>,
    ) -> Result<Option<Runner>> {
        Ok(self
            .query_opt(
                sql::RUNNER_HEARTBEAT,
                &[
                    &id,
                    &version,
                    &capabilities,
                    &capacity,
                    &self.presence_window_ms,
                ],
            )
            .await?
            .as_ref()
            .map(runner))
    }

    /// Of `running`, the job ids this runner does not hold at the given epoch.
    pub async fn not_running(&self, runner_id: Uuid, running: &[(Uuid, i64)]) -> Result<Vec<Uuid>> {
        if running.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<Uuid> = running.iter().map(|r| r.0).collect();
        let epochs: Vec<i64> = running.iter().map(|r| r.1).collect();
        let rows = self
            .query(sql::RUNNER_NOT_RUNNING, &[&runner_id, &ids, &epochs])
            .await?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    /// Revoke a runner of `owner` and re-park or reject its jobs, in one transaction.
    /// `None`: no such live runner of that owner.
    pub async fn revoke_runner(&self, id: Uuid, owner: &str) -> Result<Option<Vec<Moved>>> {
        let mut client = self.client().await?;
        self.count(4);
        let tx = client.transaction().await?;
        let revoke = tx.prepare_cached(sql::RUNNER_REVOKE).await?;
        if tx.query_opt(&revoke, &[&id, &owner]).await?.is_none() {
            return Ok(None);
        }
        let jobs = tx.prepare_cached(sql::RUNNER_REVOKE_JOBS).await?;
        let moved = tx.query(&jobs, &[&id]).await?.iter().map(moved).collect();
        tx.commit().await?;
        Ok(Some(moved))
    }

    // ---- leasing -------------------------------------------------------------------------

    /// One lease attempt, authenticated by the runner's token hash: lock the runner, claim up to
    /// `max_jobs` within its free capacity. Concurrent calls of one runner serialise on its row,
    /// so together they never exceed its capacity. Four round trips: BEGIN, lock, claim, COMMIT.
    pub async fn lease(
        &self,
        token_hash: &[u8],
        capabilities: Option<&[String]>,
        max_jobs: i64,
        lease_ttl_ms: i64,
    ) -> Result<LeaseOutcome> {
        let mut client = self.client().await?;
        self.count(3);
        let tx = client.transaction().await?;
        let lock = tx.prepare_cached(sql::RUNNER_LOCK_FOR_LEASE).await?;
        let Some(runner) = tx.query_opt(&lock, &[&token_hash, &capabilities]).await? else {
            return Ok(LeaseOutcome {
                runner_gone: true,
                ..LeaseOutcome::default()
            });
        };
        let runner_id: Uuid = runner.get("id");
        let owner: String = runner.get("owner");
        let caps: Vec<String> = runner.get("capabilities");
        let capacity = i64::from(runner.get::<_, i32>("capacity"));
        let ephemeral: bool = runner.get("ephemeral");
        let ephemeral_job: Option<Uuid> = runner.get("ephemeral_job");
        // An ephemeral runner takes one job in its life.
        let wanted = match (ephemeral, ephemeral_job) {
            (true, Some(_)) => 0,
            (true, None) => 1,
            (false, _) => max_jobs,
        };
        let mut out = LeaseOutcome {
            runner_id,
            owner: owner.clone(),
            ..LeaseOutcome::default()
        };
        let claim = tx.prepare_cached(sql::LEASE_CLAIM).await?;
        self.count(1);
        for row in tx
            .query(
                &claim,
                &[&runner_id, &owner, &caps, &wanted, &lease_ttl_ms, &capacity],
            )
            .await?
        {
            match row.get::<_, &str>("outcome") {
                "leased" => out.claimed.push(Claimed {
                    id: row.get("id"),
                    workspace: row.get("workspace"),
                    epoch: row.get("epoch"),
                    attempt: row.get("attempts"),
                    kind: row.get("kind"),
                    payload: row.get("payload"),
                    required_capabilities: row.get("required_capabilities"),
                    priority: row.get("priority"),
                    named: row.get("named"),
                    lease_expires_at: row.get("lease_expires_at"),
                }),
                "rejected" => out.rejected.push(row.get("id")),
                "free" => out.free = row.get("epoch"),
                _ => out.more = true,
            }
        }
        out.claimed.sort_by(|a, b| {
            b.named
                .cmp(&a.named)
                .then(b.priority.cmp(&a.priority))
                .then(a.id.cmp(&b.id))
        });
        if ephemeral {
            if let Some(first) = out.claimed.first() {
                let set = tx.prepare_cached(sql::RUNNER_SET_EPHEMERAL_JOB).await?;
                self.count(1);
                tx.execute(&set, &[&runner_id, &first.id]).await?;
            }
        }
        tx.commit().await?;
        Ok(out)
    }

    // ---- jobs ----------------------------------------------------------------------------

    /// Park a job. `None` when its idempotency key was already used in the workspace.
    pub async fn insert_job(&self, j: &NewJob) -> Result<Option<Job>> {
        Ok(self
            .query_opt(
                sql::JOB_INSERT,
                &[
                    &j.id,
                    &j.workspace,
                    &j.owner,
                    &j.runner_id,
                    &j.kind,
                    &j.payload,
                    &j.required_capabilities,
                    &j.priority,
                    &j.max_attempts,
                    &j.no_runner_timeout_ms,
                    &j.queue_timeout_ms,
                    &j.idempotency_key,
                    &j.billing_tenant,
                ],
            )
            .await?
            .as_ref()
            .map(job))
    }

    pub async fn job_by_idempotency_key(&self, workspace: &str, key: &str) -> Result<Option<Job>> {
        Ok(self
            .query_opt(sql::JOB_BY_IDEMPOTENCY_KEY, &[&workspace, &key])
            .await?
            .as_ref()
            .map(job))
    }

    pub async fn job(&self, id: Uuid, workspace: &str) -> Result<Option<Job>> {
        Ok(self
            .query_opt(sql::JOB_GET, &[&id, &workspace])
            .await?
            .as_ref()
            .map(job))
    }

    pub async fn jobs(
        &self,
        workspace: &str,
        state: Option<&str>,
        after: Option<Uuid>,
        limit: i64,
    ) -> Result<Vec<Job>> {
        let rows = self
            .query(sql::JOBS_LIST, &[&workspace, &state, &after, &limit])
            .await?;
        Ok(rows.iter().map(job).collect())
    }

    /// Cancel a live job. `None` when it is unknown or already terminal.
    pub async fn cancel_job(&self, id: Uuid, workspace: &str, by: &str) -> Result<Option<Job>> {
        Ok(self
            .query_opt(sql::JOB_CANCEL, &[&id, &workspace, &by])
            .await?
            .as_ref()
            .map(job))
    }

    /// Why a fenced call by a runner of `owner` matched nothing.
    pub async fn fence_miss(&self, id: Uuid, owner: &str) -> Result<FenceMiss> {
        Ok(
            match self
                .query_opt(sql::JOB_STATE_FOR_RUNNER, &[&id, &owner])
                .await?
            {
                None => FenceMiss::NotFound,
                Some(row) => match JobState::parse(row.get(0)) {
                    Some(s) if s.is_terminal() => FenceMiss::Terminal(s),
                    _ => FenceMiss::Superseded,
                },
            },
        )
    }

    pub async fn heartbeat_job(
        &self,
        id: Uuid,
        epoch: i64,
        runner: Uuid,
        ttl_ms: i64,
    ) -> Result<Option<chrono::DateTime<chrono::Utc>>> {
        Ok(self
            .query_opt(sql::JOB_HEARTBEAT, &[&id, &epoch, &runner, &ttl_ms])
            .await?
            .map(|r| r.get(0)))
    }

    pub async fn complete_job(
        &self,
        id: Uuid,
        epoch: i64,
        runner: Uuid,
        result: &Value,
    ) -> Result<Option<Job>> {
        Ok(self
            .query_opt(sql::JOB_COMPLETE, &[&id, &epoch, &runner, &result])
            .await?
            .as_ref()
            .map(job))
    }

    pub async fn fail_job(
        &self,
        id: Uuid,
        epoch: i64,
        runner: Uuid,
        message: &str,
    ) -> Result<Option<Job>> {
        Ok(self
            .query_opt(sql::JOB_FAIL, &[&id, &epoch, &runner, &message])
            .await?
            .as_ref()
            .map(job))
    }

    pub async fn release_job(&self, id: Uuid, epoch: i64, runner: Uuid) -> Result<Option<Job>> {
        Ok(self
            .query_opt(sql::JOB_RELEASE, &[&id, &epoch, &runner])
            .await?
            .as_ref()
            .map(job))
    }

    /// Append runner events, fenced. The seq of the last one, or `None` if the fence missed.
    pub async fn append_events(
        &self,
        id: Uuid,
        epoch: i64,
        runner: Uuid,
        kinds: &[String],
        data: &[Value],
    ) -> Result<Option<i32>> {
        let row = self
            .query_opt(
                sql::JOB_EVENTS_APPEND,
                &[&id, &epoch, &runner, &kinds, &data],
            )
            .await?;
        Ok(row.and_then(|r| r.get(0)))
    }

    pub async fn events(&self, id: Uuid, after: i32, limit: i64) -> Result<Vec<Event>> {
        let rows = self
            .query(sql::JOB_EVENTS_LIST, &[&id, &after, &limit])
            .await?;
        Ok(rows
            .iter()
            .map(|r| Event {
                seq: r.get("seq"),
                at: r.get("at"),
                kind: r.get("kind"),
                data: r.get("data"),
            })
            .collect())
    }

    // ---- pool and preflight ----------------------------------------------------------------

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

    /// (matching, online matching) runners of a target for the required capabilities.
    pub async fn preflight(
        &self,
        owner: Option<&str>,
        runner_id: Option<Uuid>,
        required: &[String],
    ) -> Result<(i64, i64)> {
        let rows = self
            .query(
                sql::PREFLIGHT_RUNNERS,
                &[&owner, &runner_id, &required, &self.presence_window_ms],
            )
            .await?;
        Ok((rows[0].get("matching"), rows[0].get("online")))
    }

    /// Of the given queues, those with a parked job: (owner, runner_id).
    pub async fn parked_queues(
        &self,
        owners: &[String],
        runners: &[Uuid],
    ) -> Result<Vec<(String, Option<Uuid>)>> {
        let rows = self.query(sql::PARKED_QUEUES, &[&owners, &runners]).await?;
        Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
    }

    // ---- sweeper -------------------------------------------------------------------------

    async fn sweep(
        &self,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<Vec<Moved>> {
        Ok(self.query(sql, params).await?.iter().map(moved).collect())
    }

    pub async fn sweep_lapsed_leases(&self, batch: i64) -> Result<Vec<Moved>> {
        self.sweep(sql::SWEEP_LAPSED_LEASES, &[&batch]).await
    }

    pub async fn sweep_no_runner(&self, batch: i64) -> Result<Vec<Moved>> {
        self.sweep(sql::SWEEP_NO_RUNNER, &[&batch, &self.presence_window_ms])
            .await
    }

    pub async fn sweep_queue_timeout(&self, batch: i64) -> Result<Vec<Moved>> {
        self.sweep(sql::SWEEP_QUEUE_TIMEOUT, &[&batch]).await
    }

    pub async fn sweep_join_codes(&self, batch: i64) -> Result<u64> {
        self.execute(sql::SWEEP_JOIN_CODES, &[&batch]).await
    }

    /// Purge ephemeral runners unseen for `unseen_ms`, re-parking or rejecting their jobs.
    pub async fn sweep_ephemeral_runners(&self, batch: i64, unseen_ms: i64) -> Result<Vec<Moved>> {
        let mut client = self.client().await?;
        self.count(3);
        let tx = client.transaction().await?;
        let purge = tx.prepare_cached(sql::SWEEP_EPHEMERAL_RUNNERS).await?;
        let ids: Vec<Uuid> = tx
            .query(&purge, &[&batch, &unseen_ms])
            .await?
            .iter()
            .map(|r| r.get(0))
            .collect();
        let jobs = tx.prepare_cached(sql::RUNNER_REVOKE_JOBS).await?;
        let mut out = Vec::new();
        for id in ids {
            out.extend(tx.query(&jobs, &[&id]).await?.iter().map(moved));
        }
        tx.commit().await?;
        Ok(out)
    }
}

fn runner(r: &Row) -> Runner {
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
    }
}

fn job(r: &Row) -> Job {
    Job {
        id: r.get("id"),
        workspace: r.get("workspace"),
        owner: r.get("owner"),
        runner_id: r.get("runner_id"),
        // The CHECK constraint admits only the six states.
        state: JobState::parse(r.get("state")).unwrap_or(JobState::Failed),
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
    }
}

fn moved(r: &Row) -> Moved {
    Moved {
        id: r.get("id"),
        owner: r.get("owner"),
        runner_id: r.get("runner_id"),
        state: JobState::parse(r.get("state")).unwrap_or(JobState::Failed),
    }
}
