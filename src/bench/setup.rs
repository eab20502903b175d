//! The deployment a benchmark drives: a private, durable PostgreSQL (fsync on, synchronous
//! commit on, as in shared/PERF-FACTS.md) or the one given, and `leasehold serve` replicas as
//! real processes of this same binary.

use std::time::Duration;

use anyhow::Context;
use serde_json::{json, Value};
use tokio::io::AsyncBufReadExt;
use uuid::Uuid;

use crate::client::Client;
use crate::domain::credentials::{Kind, Secret};
use crate::embedded_pg::EmbeddedPg;
use crate::store::Store;
use crate::wire;

pub struct Deployment {
    _pg: Option<EmbeddedPg>,
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
                    EmbeddedPg::start_with(
                        &dir,
                        true,
                        true,
                        &[
                            "shared_buffers=1GB",
                            "track_commit_timestamp=on",
                            "max_wal_size=8GB",
                            "checkpoint_timeout=30min",
                        ],
                    )
                })
                .await??;
                let base = pg.url("{db}");
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
        let admin = connect(&self.url("postgres")).await?;
        admin
            .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
            .await?;
        admin
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await?;
        let url = self.url(name);
        crate::store::migrate::run(&url).await?;
        Ok(url)
    }
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

/// A `leasehold serve` process of this binary.
pub struct ReplicaProcess {
    pub child: tokio::process::Child,
    pub url: String,
}

impl ReplicaProcess {
    /// Start a replica on port 0 against `database_url` with extra environment.
    ///
    /// # Errors
    /// It did not start listening within 30 s.
    pub async fn start(database_url: &str, env: &[(&str, String)]) -> anyhow::Result<Self> {
        let exe = std::env::current_exe()?;
        let mut cmd = tokio::process::Command::new(exe);
        cmd.args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--database-url",
            database_url,
        ])
        .env("LEASEHOLD_LOG", "warn")
        .env("LEASEHOLD_AUTH_BURST", "100000")
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn()?;
        let mut lines = tokio::io::BufReader::new(child.stdout.take().context("stdout")?).lines();
        let url = tokio::time::timeout(Duration::from_secs(30), async {
            while let Some(line) = lines.next_line().await? {
                if let Some(url) = line.strip_prefix("leasehold listening on ") {
                    return Ok::<_, anyhow::Error>(url.to_owned());
                }
            }
            anyhow::bail!("replica exited before listening")
        })
        .await
        .context("replica did not listen within 30 s")??;
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Ok(Self { child, url })
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }
}

/// An API key minted straight in the database, as `leasehold admin create-key` does.
///
/// # Errors
/// The database refused.
pub async fn api_key(database_url: &str, workspace: &str, subject: &str) -> anyhow::Result<String> {
    let store = Store::connect(database_url, 1, 90_000)?;
    let key = Secret::generate(Kind::ApiKey);
    store
        .insert_key(Uuid::now_v7(), workspace, subject, true, key.hash())
        .await?;
    Ok(key.reveal().to_owned())
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
