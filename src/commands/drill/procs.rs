//! The processes of a drill: `leasehold serve` replicas on fixed ports and
//! `leasehold drill-worker` runners whose output becomes the drill's history.
//!
//! Invariant: a replica restarts on the port it had, so every URL the drill and its runners
//! hold stays valid across kills; a worker's every lease and report line is recorded in order.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use anyhow::Context;
use serde_json::Value;
use tokio::io::AsyncBufReadExt;
use uuid::Uuid;

use super::check::{Event, Outcome};
use super::cluster::Cluster;
use super::history::Recorder;
use super::patroni::PatroniCluster;
use crate::tooling::serve_process::ServeProcess;

/// Lease TTL of the drill's own replicas: short, so a frozen runner's lease lapses quickly.
pub(super) const OWN_LEASE_TTL_MS: u64 = 2_000;

/// One `leasehold serve` process of this binary on a fixed port.
pub(super) struct ReplicaProc {
    pub(super) name: String,
    pub(super) port: u16,
    pub(super) child: Option<tokio::process::Child>,
    /// `LEASEHOLD_FAULT_FAIL_TICKS` for it (0: off).
    pub(super) fail_ticks: u64,
}

impl ReplicaProc {
    pub(super) fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub(super) async fn start(
        &mut self,
        database_url: &str,
        logs: &std::path::Path,
    ) -> anyhow::Result<()> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(logs.join(format!("{}.log", self.name)))?;
        let env = [
            ("LEASEHOLD_AUTH_BURST", "1000000".to_owned()),
            ("LEASEHOLD_AUTH_REFILL_PER_S", "100000".to_owned()),
            ("LEASEHOLD_LEASE_TTL_MS", OWN_LEASE_TTL_MS.to_string()),
            ("LEASEHOLD_SWEEP_INTERVAL_MS", "200".to_owned()),
            ("LEASEHOLD_FAULT_FAIL_TICKS", self.fail_ticks.to_string()),
        ];
        let listen = format!("127.0.0.1:{}", self.port);
        let ServeProcess { child, .. } = ServeProcess::start_on(
            std::env::current_exe()?,
            &listen,
            database_url,
            env,
            log.into(),
        )
        .await
        .with_context(|| format!("starting {}", self.name))?;
        self.child = Some(child);
        Ok(())
    }
}

/// A `leasehold drill-worker` process and what the drill knows of it.
pub(super) struct WorkerProc {
    pub(super) name: String,
    pub(super) child: tokio::process::Child,
    /// The job it holds a lease on now, if any.
    pub(super) holding: Arc<Mutex<Option<Uuid>>>,
    /// Freeze it the moment it next reports a lease (its report then comes late).
    pub(super) freeze: Arc<FreezeTrap>,
}

/// Set by the freeze fault, sprung by the worker's output reader on its next lease line.
#[derive(Default)]
pub(super) struct FreezeTrap {
    pub(super) armed: AtomicBool,
    pub(super) sprung: tokio::sync::Notify,
}

impl WorkerProc {
    pub(super) fn pid(&self) -> Option<nix::unistd::Pid> {
        self.child
            .id()
            .map(|p| nix::unistd::Pid::from_raw(p as i32))
    }

    pub(super) fn holds(&self) -> bool {
        self.holding.lock().expect("holding lock").is_some()
    }
}

/// The database of the drill's own deployment.
pub(super) enum Db {
    /// A primary and a standby the drill fails over itself.
    Embedded(Cluster),
    /// etcd, Patroni nodes and HAProxy.
    Patroni(PatroniCluster),
}

/// The drill's own deployment, when it started one.
pub(super) struct Own {
    pub(super) db: Db,
    /// Replica `i` connects with URL `i % len` (a Patroni cluster's: the multi-host URL, then
    /// HAProxy's).
    pub(super) database_urls: Vec<String>,
    pub(super) replicas: Vec<ReplicaProc>,
    pub(super) logs: PathBuf,
}

pub(super) fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

pub(super) fn start_worker(
    name: &str,
    urls: &[String],
    capability: &str,
    token: &str,
    logs: &std::path::Path,
    history: &Recorder,
    max_ttl: &Arc<AtomicU64>,
) -> anyhow::Result<WorkerProc> {
    let log = std::fs::File::create(logs.join(format!("{name}.log")))?;
    let mut cmd = tokio::process::Command::new(std::env::current_exe()?);
    cmd.arg("drill-worker")
        .arg("--server")
        .args(urls)
        .args(["--capability", capability])
        .env("LEASEHOLD_RUNNER_TOKEN", token)
        .env("LEASEHOLD_LOG", "warn")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(log)
        .kill_on_drop(true);
    let mut child = cmd.spawn()?;
    let stdout = child.stdout.take().context("worker stdout")?;
    let holding = Arc::new(Mutex::new(None));
    let freeze = Arc::new(FreezeTrap::default());
    let pid = child
        .id()
        .map(|p| nix::unistd::Pid::from_raw(p as i32))
        .context("worker pid")?;
    let (name_owned, history, hold, max_ttl, trap) = (
        name.to_owned(),
        history.clone(),
        holding.clone(),
        max_ttl.clone(),
        freeze.clone(),
    );
    tokio::spawn(async move {
        let mut lines = tokio::io::BufReader::new(stdout).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let Ok(v) = serde_json::from_str::<Value>(&line) else {
                continue;
            };
            if v["e"] == "leased" && trap.armed.swap(false, Ordering::AcqRel) {
                // Within a millisecond of the lease, well inside the worker's hold.
                let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGSTOP);
                trap.sprung.notify_one();
            }
            record_worker_line(&name_owned, &v, &history, &hold, &max_ttl);
        }
    });
    Ok(WorkerProc {
        name: name.to_owned(),
        child,
        holding,
        freeze,
    })
}

fn record_worker_line(
    name: &str,
    v: &Value,
    history: &Recorder,
    holding: &Mutex<Option<Uuid>>,
    max_ttl: &AtomicU64,
) {
    let at = history.from_unix_ms(v["at"].as_u64().unwrap_or(0));
    let job = v["job"].as_str().and_then(|s| s.parse::<Uuid>().ok());
    let epoch = v["epoch"].as_i64().unwrap_or(0);
    match (v["e"].as_str(), job) {
        (Some("leased"), Some(job)) => {
            *holding.lock().expect("holding lock") = Some(job);
            max_ttl.fetch_max(v["ttl_ms"].as_u64().unwrap_or(0), Ordering::Relaxed);
            history.push(Event::Leased {
                job,
                epoch,
                runner: name.to_owned(),
                at_ms: at,
            });
        }
        (Some("reported"), Some(job)) => {
            *holding.lock().expect("holding lock") = None;
            let outcome = match v["outcome"].as_str() {
                Some("accepted") => Outcome::Accepted,
                Some("refused") => Outcome::Refused,
                _ => Outcome::Unknown,
            };
            history.reported(job, epoch, name, outcome, at);
        }
        (Some("error"), _) => history.push(Event::ServerError {
            status: v["status"].as_u64().unwrap_or(0) as u16,
            what: format!("{name} {}", v["what"].as_str().unwrap_or("call")),
            at_ms: at,
        }),
        _ => {}
    }
}
