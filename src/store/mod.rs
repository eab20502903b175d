//! PostgreSQL, the only state. One function per statement in `sql/`, each run as a cached
//! prepared statement on a pooled connection.
//!
//! # Layout
//! - this file: the pool, and the one place every statement goes through ([`Store::query`]
//!   and friends), which counts it for `/metrics`;
//! - [`keys`]: API keys and join codes; [`runners`]: pairing, enrolment, heartbeats,
//!   revocation; [`claim`]: a dispatcher's tick (reports and claims in one transaction) and
//!   the lanes jobs wait in; [`jobs`]: parking, reading and the fenced runner transitions;
//!   [`queues`]: pool counts and preflight; [`sweep`]: maintenance; [`records`]: what the
//!   store hands back; [`rows`]: rows to records; [`combine`]: coalescing concurrent calls
//!   into one statement; [`conn`]: a checked-out connection and the deadlines every operation
//!   runs under; [`horizon`]: whether an old snapshot is held.
//!
//! Invariants: every job transition is one fenced statement that also authenticates its caller
//! (or, for a claim and revocation, one short transaction that locks the runner rows first);
//! deadlines use the database clock; values are always bound, never formatted into SQL; every
//! operation finishes within [`Deadlines::operation`], and a connection an operation left
//! mid-statement never goes back to the pool.

pub mod artifacts;
pub mod claim;
pub mod combine;
pub mod conn;
mod depth;
pub mod error;
pub mod feed;
pub mod horizon;
pub mod jobs;
pub mod keys;
pub mod listener;
pub mod migrate;
pub mod placement;
pub mod queues;
pub mod records;
pub mod rows;
pub mod runners;
mod secrets;
pub mod sql;
pub mod sweep;

use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime};

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use tokio_postgres::types::ToSql;
use tokio_postgres::{NoTls, Row};

pub use conn::{Conn, Deadlines};
pub use depth::JobDepth;
pub use error::{At, StoreError};
pub use jobs::{Beat, Failure, FenceMiss, JobFilter, Report};
pub use placement::{AdvertisedTargets, LeaseCaller};
pub use records::{Dispatched, NewJob};
pub use runners::NewRunner;
pub use secrets::{SealedSecret, SecretScope};

use crate::store::records::Job;
use crate::telemetry::traces;

pub type Result<T> = std::result::Result<T, StoreError>;

/// Parameters of a statement.
pub type Params<'a> = [&'a (dyn ToSql + Sync)];

/// A pooled handle on the database. Cheap to clone.
#[derive(Clone)]
pub struct Store {
    pool: Pool,
    presence_window_ms: i64,
    /// How stale a runner's `last_seen_at` may get before a runner call refreshes it.
    seen_refresh_ms: i64,
    /// Statements sent to the database (BEGIN and COMMIT included), for `/metrics`.
    statements: Arc<AtomicU64>,
    /// Dispatches, reports, fails and heartbeats of concurrent callers, coalesced (each started
    /// on first use).
    parker: Arc<OnceLock<combine::Combiner<NewJob, Option<Dispatched>>>>,
    reporter: Arc<OnceLock<combine::Combiner<Report, Option<Job>>>>,
    failer: Arc<OnceLock<combine::Combiner<jobs::Failure, Option<Job>>>>,
    beater: Arc<OnceLock<combine::Combiner<jobs::Beat, Option<chrono::DateTime<chrono::Utc>>>>>,
    /// How long one operation and one checkout may take.
    deadlines: Deadlines,
    /// Whether an old snapshot is held (see [`horizon`]).
    horizon: Arc<horizon::Horizon>,
    /// The count of stale prepared statements when this pool's caches were last cleared.
    stale_plans_seen: Arc<AtomicU64>,
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
        // Plan each statement once per connection: the hot statements are CTEs whose custom
        // planning costs more than their execution (docs/perf.md, "plans"). A generic plan is
        // kept for the connection's life, and one made while a table is new and empty believes
        // a sequential scan is free; every statement here reaches its rows through an index,
        // so sequential scans are ruled out rather than left to statistics
        // (tests/it/plans.rs checks the plans on a table ANALYZEd empty and on a full one).
        // No JIT: it compiles for milliseconds to save microseconds on statements like these,
        // and a plan left with a (penalised) sequential scan would always cost enough to
        // trigger it.
        let options = format!(
            "{} -c plan_cache_mode=force_generic_plan -c enable_seqscan=off -c jit=off",
            pg.get_options().unwrap_or_default()
        );
        pg.options(options.trim());
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
        // Last in, first out: the connection used last is warm (in the kernel's and
        // PostgreSQL's caches), and one used only when many are busy at once is rarely needed.
        // Each new one is warmed for the tick before its first use (claim::warm).
        let pool = Pool::builder(manager)
            .max_size(size.max(1))
            .queue_mode(deadpool_postgres::QueueMode::Lifo)
            .post_create(deadpool_postgres::Hook::async_fn(|client, _| {
                Box::pin(async move {
                    claim::warm(client).await;
                    Ok(())
                })
            }))
            .runtime(Runtime::Tokio1)
            .timeouts(Deadlines::default().pool_timeouts())
            .build()?;
        Ok(Self {
            pool,
            presence_window_ms: presence_window_ms as i64,
            seen_refresh_ms: (presence_window_ms / 3) as i64,
            statements: Arc::new(AtomicU64::new(0)),
            parker: Arc::new(OnceLock::new()),
            reporter: Arc::new(OnceLock::new()),
            failer: Arc::new(OnceLock::new()),
            beater: Arc::new(OnceLock::new()),
            deadlines: Deadlines::default(),
            horizon: Arc::default(),
            stale_plans_seen: Arc::default(),
        })
    }

    /// The same store with other deadlines (`LEASEHOLD_REQUEST_TIMEOUT_MS` and
    /// `LEASEHOLD_POOL_TIMEOUT_MS` for a replica). Call before first use: the combiners keep
    /// the deadlines they started with.
    #[must_use]
    pub fn with_deadlines(mut self, deadlines: Deadlines) -> Self {
        self.deadlines = deadlines;
        self
    }

    /// The same store counting the horizon old from an age of `from_age` transactions
    /// (`LEASEHOLD_CLAIM_PLACES_AGE`, 0: always; see [`horizon`]). Call before first use.
    #[must_use]
    pub fn with_old_horizon_from(mut self, from_age: u64) -> Self {
        self.horizon = Arc::new(horizon::Horizon::new(from_age));
        self
    }

    /// The deadlines of this store's operations.
    pub fn deadlines(&self) -> Deadlines {
        self.deadlines
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

    /// Check out a connection within the checkout deadline. Give it back with
    /// [`Conn::release`] once every statement sent on it has answered; dropped otherwise, it
    /// is cancelled and discarded.
    async fn client(&self) -> Result<Conn> {
        // Read-only on every checkout; written only in the rare event.
        let stale = error::stale_plans();
        if self.stale_plans_seen.load(Ordering::Relaxed) != stale
            && self.stale_plans_seen.swap(stale, Ordering::Relaxed) != stale
        {
            // A migration changed a table under prepared statements (error::stale_plan).
            self.pool.manager().statement_caches.clear();
        }
        let timeouts = self.deadlines.pool_timeouts();
        Ok(Conn::new(self.pool.timeout_get(&timeouts).await?))
    }

    /// Run one operation under the operation deadline (see [`Deadlines::bound`]).
    async fn bounded<T>(
        &self,
        what: &'static str,
        op: impl std::future::Future<Output = Result<T>>,
    ) -> Result<T> {
        self.deadlines.bound(what, op).await
    }

    /// Run a transaction, again while PostgreSQL rolls it back to break a deadlock or a
    /// serialization conflict ([`StoreError::is_conflict`]): at most three tries, a few
    /// milliseconds apart. One lock order everywhere makes a deadlock rare (docs/design.md),
    /// not impossible (a sweep, an operator's statement), and a rolled-back transaction wrote
    /// nothing, so running it again is safe.
    pub(crate) async fn retrying_conflicts<T, F, Fut>(&self, mut op: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T>>,
    {
        let mut tries = 0u32;
        loop {
            match op().await {
                Err(e) if e.is_conflict() && tries < 2 => {
                    tries += 1;
                    tracing::debug!(error = %e, tries, "a transaction was rolled back by a conflict; running it again");
                    tokio::time::sleep(std::time::Duration::from_millis(u64::from(tries) * 3))
                        .await;
                }
                other => return other,
            }
        }
    }

    /// Run one statement of `sql/` and return its rows. Every statement outside a transaction
    /// goes through here (or [`Self::query_opt`], [`Self::execute`]), which counts it.
    async fn query(&self, sql: &'static str, params: &Params<'_>) -> Result<Vec<Row>> {
        traces::statement(|| sql::span_name(sql), self.query_untraced(sql, params)).await
    }

    /// [`Self::query`] without a span: for statements a combiner runs on behalf of several
    /// requests, whose callers each hold the span (see [`Self::park`]).
    async fn query_untraced(&self, sql: &'static str, params: &Params<'_>) -> Result<Vec<Row>> {
        self.bounded(sql::name(sql), async {
            let client = self.client().await?;
            let stmt = client.prepare_cached(sql).await.at(sql)?;
            self.count(1);
            let rows = client.query(&stmt, params).await;
            client.release();
            rows.at(sql)
        })
        .await
    }

    async fn query_opt(&self, sql: &'static str, params: &Params<'_>) -> Result<Option<Row>> {
        let mut rows = self.query(sql, params).await?;
        Ok(rows.pop())
    }

    async fn execute(&self, sql: &'static str, params: &Params<'_>) -> Result<u64> {
        traces::statement(
            || sql::span_name(sql),
            self.bounded(sql::name(sql), async {
                let client = self.client().await?;
                let stmt = client.prepare_cached(sql).await.at(sql)?;
                self.count(1);
                let n = client.execute(&stmt, params).await;
                client.release();
                n.at(sql)
            }),
        )
        .await
    }

    /// Run `sql/` statements, each with its parameter set, all in one transaction whose
    /// messages (BEGIN, the statements, COMMIT) are sent together: one round trip and one commit
    /// for the lot. One set runs alone, in autocommit. Returns each statement's rows, in order.
    /// No span: the callers hold it.
    ///
    /// # Errors
    /// Any statement failed: the transaction rolled back and nothing was written.
    async fn each_in_one_transaction<'p, P: AsRef<Params<'p>>>(
        &self,
        sets: &[(&'static str, P)],
    ) -> Result<Vec<Vec<Row>>> {
        Ok(self.each_in_one_transaction_timed(sets).await?.0)
    }

    /// [`Self::each_in_one_transaction`], and when the statements had answered (before the
    /// commit's answer: the lease stages of a wake, hub::wake_stages).
    ///
    /// # Errors
    /// As [`Self::each_in_one_transaction`].
    async fn each_in_one_transaction_timed<'p, P: AsRef<Params<'p>>>(
        &self,
        sets: &[(&'static str, P)],
    ) -> Result<(Vec<Vec<Row>>, SystemTime)> {
        let Some((first, _)) = sets.first() else {
            return Ok((Vec::new(), SystemTime::now()));
        };
        if let [(sql, one)] = sets {
            let rows = self.query_untraced(sql, one.as_ref()).await?;
            return Ok((vec![rows], SystemTime::now()));
        }
        self.bounded(sql::name(first), async {
            let client = self.client().await?;
            // Each distinct statement is looked up once (the cache hashes the whole text); a
            // batch repeats one or two of them.
            let mut distinct: Vec<(&'static str, tokio_postgres::Statement)> = Vec::new();
            let mut statements = Vec::with_capacity(sets.len());
            for (sql, _) in sets {
                let stmt = match distinct
                    .iter()
                    .find(|(known, _)| std::ptr::eq(*known, *sql))
                {
                    Some((_, stmt)) => stmt.clone(),
                    None => {
                        let stmt = client.prepare_cached(sql).await.at(sql)?;
                        distinct.push((sql, stmt.clone()));
                        stmt
                    }
                };
                statements.push(stmt);
            }
            self.count(sets.len() as u64 + 2);
            // Every message is queued on the connection before any answer is read (each future
            // sends its message when first polled, and join polls them in order), so a caller
            // that gives up half-way still leaves a whole transaction behind it, never an open
            // one (and the connection is discarded, its COMMIT cancelled: see [`Conn`]).
            let (begin, (rows, answered), commit) = tokio::join!(
                client.batch_execute("BEGIN"),
                async {
                    let rows = futures_util::future::join_all(
                        statements
                            .iter()
                            .zip(sets)
                            .map(|(stmt, (_, p))| client.query(stmt, p.as_ref())),
                    )
                    .await;
                    (rows, SystemTime::now())
                },
                client.batch_execute("COMMIT"),
            );
            client.release();
            begin.at(first)?;
            // An error is named by the statement that failed.
            let rows = rows
                .into_iter()
                .zip(sets)
                .map(|(row, (sql, _))| row.at(sql))
                .collect::<Result<Vec<_>>>()?;
            commit.at(first)?;
            Ok((rows, answered))
        })
        .await
    }

    /// The database answers.
    pub async fn ping(&self) -> Result<()> {
        self.query(sql::PING, &[]).await.map(drop)
    }

    /// Prepare every statement in `sql/` (the schema test): its file, and the names and types
    /// of its result columns, or why it did not prepare.
    pub async fn prepare_all(&self) -> Result<Vec<(&'static str, PreparedColumns)>> {
        let client = self.client().await?;
        let mut out = Vec::new();
        for (file, text) in sql::ALL {
            let columns = client
                .prepare(text)
                .await
                .map(|s| {
                    s.columns()
                        .iter()
                        .map(|c| (c.name().to_owned(), c.type_().name().to_owned()))
                        .collect()
                })
                .map_err(|e| format!("{e:?}"));
            out.push((*file, columns));
        }
        client.release();
        Ok(out)
    }

    /// Plans of the hot statements as PostgreSQL caches them for any parameters
    /// (`plan_cache_mode = force_generic_plan`), as `EXPLAIN` text, for the plan test.
    ///
    /// # Errors
    /// The database failed, or a statement did not prepare.
    pub async fn generic_plans(&self, statements: &[(&'static str, &str)]) -> Result<Vec<String>> {
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        tx.batch_execute(
            "SET LOCAL plan_cache_mode = force_generic_plan; SET LOCAL enable_seqscan = off",
        )
        .await?;
        let mut out = Vec::new();
        for (i, (sql, args)) in statements.iter().enumerate() {
            let name = format!("plan_test_{i}");
            tx.batch_execute(&format!("PREPARE {name} AS {sql}"))
                .await?;
            let rows = tx
                .simple_query(&format!("EXPLAIN EXECUTE {name}({args})"))
                .await?;
            let text: Vec<String> = rows
                .iter()
                .filter_map(|m| match m {
                    tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_owned),
                    _ => None,
                })
                .collect();
            out.push(text.join("\n"));
        }
        tx.rollback().await?;
        client.release();
        Ok(out)
    }
}

/// The result columns of a prepared statement, or why it did not prepare.
pub type PreparedColumns = std::result::Result<Vec<(String, String)>, String>;
