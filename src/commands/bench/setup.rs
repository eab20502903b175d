//! The deployment a benchmark drives: a private, durable PostgreSQL (fsync on, synchronous
//! commit on, as in docs/perf.md) or the one given, and `leasehold serve` replicas as
//! real processes of this same binary.

use std::process::Stdio;
use std::time::Instant;

use anyhow::Context;
use serde_json::{json, Value};
use uuid::Uuid;

use crate::client::Client;
use crate::tooling::private_pg::PrivatePg;
use crate::tooling::serve_process::ServeProcess;
use crate::wire;

pub struct Deployment {
    _pg: Option<PrivatePg>,
    /// URL of the server with `{db}` for the database name.
    base: String,
}

impl Deployment {
    /// A private durable PostgreSQL, or the server behind `database_url`.
    ///
    /// # Errors
    /// PostgreSQL could not be started.
    pub async fn start(database_url: Option<&str>) -> anyhow::Result<Self> {
        match database_url {
            Some(url) => {
                let (head, tail) = url
                    .rsplit_once('/')
                    .context("--database-url names a database")?;
                // Keep the parameters (`?target_session_attrs=read-write` with several hosts).
                let params = tail.find('?').map_or("", |i| &tail[i..]);
                Ok(Self {
                    _pg: None,
                    base: format!("{head}/{{db}}{params}"),
                })
            }
            None => {
                super::progress("starting a private durable PostgreSQL");
                let pg = tokio::task::spawn_blocking(|| {
                    let dir =
                        std::env::temp_dir().join(format!("leasehold-bench-{}", Uuid::now_v7()));
                    PrivatePg::start_with(
                        &dir,
                        true,
                        true,
                        &[
                            "shared_buffers=1GB",
                            "track_commit_timestamp=on",
                            "max_wal_size=8GB",
                            "checkpoint_timeout=30min",
                            "shared_preload_libraries=pg_stat_statements",
                            "pg_stat_statements.track_planning=on",
                        ],
                    )
                })
                .await??;
                let base = pg.url("{db}");
                connect(&base.replace("{db}", "postgres"))
                    .await?
                    .batch_execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
                    .await?;
                Ok(Self {
                    _pg: Some(pg),
                    base,
                })
            }
        }
    }

    pub fn url(&self, db: &str) -> String {
        self.base.replace("{db}", db)
    }

    /// A new, migrated database for one scenario.
    ///
    /// # Errors
    /// The server refused.
    pub async fn fresh_database(&self, name: &str) -> anyhow::Result<String> {
        let url = self.empty_database(name).await?;
        crate::store::migrate::run(&url).await?;
        Ok(url)
    }

    /// Let the server settle before the next scenario: a `CHECKPOINT` writes and syncs what the
    /// previous one left dirty now, rather than while the next one is timed. Without it the wake
    /// scenario, run right after `throughput`'s writes, measured its commits at the disk's worst
    /// (dispatch round trip p50 8.4 ms, wake p50 12.3 ms, against 1.1 and 1.9 ms run alone).
    /// A server that refuses (the role may not checkpoint) is only noted.
    pub async fn settle(&self) {
        let done = async {
            connect(&self.url("postgres"))
                .await?
                .batch_execute("CHECKPOINT")
                .await?;
            anyhow::Ok(())
        };
        if let Err(e) = done.await {
            eprintln!("[bench] could not checkpoint between scenarios: {e:#}");
        }
    }

    /// Database `name`, dropped (whoever is connected) and created again empty: its URL.
    ///
    /// # Errors
    /// The server refused.
    pub async fn empty_database(&self, name: &str) -> anyhow::Result<String> {
        self.drop_database(name).await?;
        connect(&self.url("postgres"))
            .await?
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await?;
        Ok(self.url(name))
    }

    /// Drop database `name` if it exists, whoever is connected.
    ///
    /// # Errors
    /// The server refused.
    pub async fn drop_database(&self, name: &str) -> anyhow::Result<()> {
        connect(&self.url("postgres"))
            .await?
            .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
            .await?;
        Ok(())
    }
}

/// What PostgreSQL did for database `db` so far, read before and after a phase and divided by
/// the jobs it settled: for `pg_ms_per_job`, `statements_per_job` and `xacts_per_job`.
#[derive(Debug, Clone, Copy)]
pub struct PgWork {
    /// Execution plus planning time (ms) of its statements, from `pg_stat_statements`. Only the
    /// work counts: transaction control (`BEGIN`, `COMMIT`: their time is the WAL flush, which
    /// pgbench's autocommit statements do outside any statement's timing) and session `SET`s
    /// are left out.
    pub ms: f64,
    /// Statements executed, counted the same way (the work, not `BEGIN`/`COMMIT`/`SET`).
    pub statements: f64,
    /// Transactions committed or rolled back (`pg_stat_database`; each backend flushes these
    /// about once a second, so a phase of many seconds is off by a fraction of one).
    pub xacts: f64,
}

impl PgWork {
    /// Per settled job over the phase from `before` to `self`.
    pub fn per_job_since(self, before: PgWork, jobs: u64) -> PgWork {
        let n = jobs.max(1) as f64;
        PgWork {
            ms: (self.ms - before.ms) / n,
            statements: (self.statements - before.statements) / n,
            xacts: (self.xacts - before.xacts) / n,
        }
    }
}

/// [`PgWork`] of database `db` now. `None` when the server does not load
/// `pg_stat_statements` (a `--database-url` without it).
pub async fn pg_work(dep: &Deployment, db: &str) -> Option<PgWork> {
    let admin = connect(&dep.url("postgres")).await.ok()?;
    let row = admin
        .query_one(
            "SELECT coalesce(sum(total_exec_time + total_plan_time), 0)::float8,
                    coalesce(sum(calls), 0)::float8,
                    (SELECT (xact_commit + xact_rollback)::float8
                       FROM pg_stat_database WHERE datname = $1)
               FROM pg_stat_statements
              WHERE dbid = (SELECT oid FROM pg_database WHERE datname = $1)
                AND query !~* '^\\s*(begin|commit|rollback|set|reset|show|discard)\\M'",
            &[&db],
        )
        .await
        .ok()?;
    Some(PgWork {
        ms: row.get(0),
        statements: row.get(1),
        xacts: row.get::<_, Option<f64>>(2).unwrap_or(0.0),
    })
}

/// A plain connection (not pooled) for measurement and set-up queries.
///
/// # Errors
/// The database cannot be reached.
pub async fn connect(url: &str) -> anyhow::Result<tokio_postgres::Client> {
    let (client, conn) = crate::store::listener::connect_as(url, "leasehold-bench").await?;
    tokio::spawn(conn);
    Ok(client)
}

/// A `leasehold serve` process of this binary, started by [`crate::tooling::serve_process`]
/// with the bench's settings (authentication never rate limited).
pub struct ReplicaProcess(ServeProcess);

impl ReplicaProcess {
    /// Start a replica on port 0 against `database_url` with extra environment.
    ///
    /// # Errors
    /// It did not start listening.
    pub async fn start(database_url: &str, env: &[(&str, String)]) -> anyhow::Result<Self> {
        let exe = std::env::current_exe()?;
        let env = [("LEASEHOLD_AUTH_BURST", "100000".to_owned())]
            .into_iter()
            .chain(env.iter().map(|(k, v)| (*k, v.clone())));
        let process = ServeProcess::start(exe, database_url, env, Stdio::inherit()).await?;
        Ok(Self(process))
    }

    /// [`Self::start`] with its log (stderr) written to `log`.
    ///
    /// # Errors
    /// As [`Self::start`].
    pub async fn start_logging(
        database_url: &str,
        env: &[(&str, String)],
        log: std::fs::File,
    ) -> anyhow::Result<Self> {
        let exe = std::env::current_exe()?;
        let env = [("LEASEHOLD_AUTH_BURST", "100000".to_owned())]
            .into_iter()
            .chain(env.iter().map(|(k, v)| (*k, v.clone())));
        let process = ServeProcess::start(exe, database_url, env, Stdio::from(log)).await?;
        Ok(Self(process))
    }
}

impl std::ops::Deref for ReplicaProcess {
    type Target = ServeProcess;

    fn deref(&self) -> &ServeProcess {
        &self.0
    }
}

/// The two replicas the load scenarios (throughput, soak) drive, each with a pool for half
/// the bench's clients, an admin key of workspace `bench`, and an operator client on each.
///
/// # Errors
/// A replica did not start, or the key could not be minted.
pub async fn load_replicas(
    url: &str,
    args: &super::BenchArgs,
) -> anyhow::Result<([ReplicaProcess; 2], String, Vec<Client>)> {
    load_replicas_env(url, args, &[]).await
}

/// [`load_replicas`] with `extra` environment for both replicas.
///
/// # Errors
/// As [`load_replicas`].
pub async fn load_replicas_env(
    url: &str,
    args: &super::BenchArgs,
    extra: &[(&str, String)],
) -> anyhow::Result<([ReplicaProcess; 2], String, Vec<Client>)> {
    let pool = (args.runners + args.dispatchers)
        .div_ceil(2)
        .max(8)
        .to_string();
    let mut env = vec![("LEASEHOLD_POOL_SIZE", pool)];
    env.extend(extra.iter().cloned());
    let replicas = [
        ReplicaProcess::start(url, &env).await?,
        ReplicaProcess::start(url, &env).await?,
    ];
    let key = api_key(url, "bench", "bench").await?;
    let operators = replicas
        .iter()
        .map(|r| Client::new(&r.url, Some(key.clone())))
        .collect();
    Ok((replicas, key, operators))
}

/// Park `n` runnable jobs on the workspace pool of `bench` (bulk-loaded, no requirements).
///
/// # Errors
/// The database refused.
pub async fn park(db: &tokio_postgres::Client, n: i64) -> anyhow::Result<()> {
    db.execute(
        "INSERT INTO jobs (id, workspace, owner, pool, state, kind, payload, max_attempts,
                           no_runner_timeout_ms, no_runner_check_at, billing_tenant)
         SELECT gen_random_uuid(), 'bench', 'ws:bench', 'workspace', 'parked', 'command',
                '{\"argv\":[\"true\"]}', 3, 86400000, now() + interval '1 day', 'bench'
           FROM generate_series(1, $1::bigint)",
        &[&n],
    )
    .await?;
    Ok(())
}

/// An admin API key minted straight in the database, as `leasehold admin create-key` does.
///
/// # Errors
/// The database refused.
pub async fn api_key(database_url: &str, workspace: &str, subject: &str) -> anyhow::Result<String> {
    crate::commands::admin::create_key(database_url, workspace, subject, true).await
}

/// Pair `n` workspace-tier runners through `operator`, each with `capacity`.
///
/// # Errors
/// The server refused.
pub async fn runners(operator: &Client, n: usize, capacity: i64) -> anyhow::Result<Vec<Client>> {
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let created = operator
            .pair_runner(
                wire::Tier::Workspace,
                &wire::CreateRunner {
                    label: format!("bench-{i}"),
                    os: Some("linux".into()),
                    capabilities: None,
                    capacity: Some(capacity),
                    ..Default::default()
                },
            )
            .await?;
        out.push(operator.with_token(created.token));
    }
    Ok(out)
}

/// What the numbers were measured on.
pub fn machine() -> Value {
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_owned())
        })
        .unwrap_or_default();
    let mem_gb = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .next()
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0 / 1024.0);
    json!(format!("{cpus} cores, {mem_gb:.0} GiB, {model}"))
}

/// (lease call, complete) latencies in ms over `n` cycles of one runner: a lease with
/// `wait_ms` 0 that must find a job, then its complete.
pub async fn timed_cycles(runner: &Client, n: usize) -> anyhow::Result<(Vec<f64>, Vec<f64>)> {
    let mut claims = Vec::with_capacity(n);
    let mut completes = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let jobs = runner.lease(&wire::Lease::waiting(0, 1)).await?;
        claims.push(t.elapsed().as_secs_f64() * 1000.0);
        let j = jobs
            .first()
            .ok_or_else(|| anyhow::anyhow!("the runner's queue ran dry"))?;
        let t = Instant::now();
        runner
            .complete(j.id, j.epoch, json!({"exit_code": 0}))
            .await?;
        completes.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    Ok((claims, completes))
}
