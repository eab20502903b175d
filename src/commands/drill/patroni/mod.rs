//! The production database shape on this machine, for `leasehold drill --cluster patroni` and
//! the tests: one etcd, two or three Patroni nodes each running PostgreSQL as the `postgres` OS
//! user (`synchronous_mode: true`, configured from `deploy/patroni.yml`), and HAProxy in front
//! routing to whichever node Patroni's REST `/primary` answers 200 (`deploy/haproxy-patroni.cfg`).
//! leasehold reaches the primary either way: a multi-host URL with
//! `target_session_attrs=read-write` ([`PatroniCluster::multi_host_url`]) or HAProxy's port
//! ([`PatroniCluster::haproxy_url`]).
//!
//! Replicas stream from the leader through a small TCP proxy in front of each node (the node's
//! `connect_address`), which reads the `application_name` of each connection's startup packet:
//! [`PatroniCluster::cut`] closes a named standby's streams and refuses new ones until
//! [`PatroniCluster::heal`], a network cut of that replica from the leader. leasehold's own
//! connections bypass the proxies.
//!
//! Invariants: every process started here (etcd, Patroni, PostgreSQL, HAProxy) is gone and the
//! directory removed when the value drops, or, if this process dies first, once a watchdog
//! notices; every wait is a condition with a deadline.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use serde_json::Value;
use tokio::net::TcpListener;
use uuid::Uuid;

mod links;
mod templates;

use links::{serve_link, Cuts};
pub use templates::{fill, haproxy_config};

/// The shipped node configuration, a template filled in per node.
pub const PATRONI_TEMPLATE: &str = include_str!("../../../../deploy/patroni.yml");
/// The shipped HAProxy configuration; its bind and server lines are rewritten for this machine.
pub const HAPROXY_TEMPLATE: &str = include_str!("../../../../deploy/haproxy-patroni.cfg");

/// Timings of a test or drill cluster: short, so a failover takes seconds, but with room for a
/// loaded two-core machine (an HA loop that overruns `ttl` would flap the leader).
#[derive(Clone, Copy, Debug)]
pub struct Timings {
    pub ttl_s: u32,
    pub loop_wait_s: u32,
    pub retry_timeout_s: u32,
}

impl Default for Timings {
    fn default() -> Self {
        Self {
            ttl_s: 20,
            loop_wait_s: 2,
            retry_timeout_s: 6,
        }
    }
}

/// What the cluster needs installed that is not: `patroni`, `etcd`, `haproxy`, PostgreSQL's
/// server binaries. Empty when everything is there.
pub fn missing_tools() -> Vec<&'static str> {
    let mut missing: Vec<&'static str> = ["patroni", "etcd", "haproxy"]
        .into_iter()
        .filter(|t| on_path(t).is_none())
        .collect();
    if bin_dir().is_err() {
        missing.push("postgresql-15 (initdb, postgres)");
    }
    missing
}

fn on_path(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/usr/bin")])
        .map(|d| d.join(program))
        .find(|p| p.is_file())
}

/// PostgreSQL 15's binaries when installed (what the shipped template names), else the newest.
fn bin_dir() -> anyhow::Result<PathBuf> {
    let fifteen = PathBuf::from("/usr/lib/postgresql/15/bin");
    if fifteen.join("postgres").is_file() {
        return Ok(fifteen);
    }
    crate::tooling::private_pg::find_bin_dir()
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// One Patroni node.
pub struct Node {
    pub name: String,
    /// PostgreSQL's own port (leasehold and HAProxy connect here).
    pub pg_port: u16,
    /// Patroni's REST API.
    pub rest_port: u16,
    /// The replication proxy in front of `pg_port` (the node's `connect_address`).
    pub link_port: u16,
    dir: PathBuf,
    patroni: Option<Child>,
}

impl Node {
    pub fn rest_url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.rest_port)
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// The postmaster's pid, from its pid file.
    pub fn postmaster_pid(&self) -> Option<i32> {
        crate::tooling::private_pg::postmaster_pid_in(&self.data_dir())
            .and_then(|p| i32::try_from(p).ok())
    }
}

pub struct PatroniCluster {
    pub nodes: Vec<Node>,
    superuser_password: String,
    etcd: Child,
    etcd_args: Vec<String>,
    etcd_port: u16,
    haproxy: Option<Child>,
    haproxy_port: u16,
    cuts: Arc<Cuts>,
    links: Vec<tokio::task::JoinHandle<()>>,
    http: reqwest::Client,
    watchdog: Option<Child>,
    root: PathBuf,
}

fn log_file(path: &Path) -> anyhow::Result<Stdio> {
    let f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .with_context(|| format!("opening {}", path.display()))?;
    Ok(f.into())
}

fn secret() -> String {
    Uuid::new_v4().simple().to_string()
}

impl PatroniCluster {
    /// Start etcd, `nodes` Patroni nodes and HAProxy, and wait until one node leads with every
    /// other streaming from it (one synchronously) and HAProxy routes to the leader.
    ///
    /// # Errors
    /// A tool is missing, or the cluster did not come up within its deadline.
    pub async fn start(nodes: usize, timings: Timings) -> anyhow::Result<Self> {
        anyhow::ensure!((2..=3).contains(&nodes), "a cluster of 2 or 3 nodes");
        let missing = missing_tools();
        anyhow::ensure!(missing.is_empty(), "not installed: {}", missing.join(", "));
        let bin = bin_dir()?;
        let (uid, gid) = crate::tooling::private_pg::postgres_owner()?;
        let root = std::env::temp_dir().join(format!(
            "lhp-{}",
            &Uuid::new_v4().simple().to_string()[..10]
        ));
        std::fs::create_dir_all(&root)?;
        std::fs::set_permissions(&root, std::os::unix::fs::PermissionsExt::from_mode(0o755))?;

        // ---- etcd --------------------------------------------------------------------------
        let etcd_port = free_port()?;
        let peer_port = free_port()?;
        let etcd_args: Vec<String> = [
            "--name",
            "e0",
            "--data-dir",
            &root.join("etcd").display().to_string(),
            "--listen-client-urls",
            &format!("http://127.0.0.1:{etcd_port}"),
            "--advertise-client-urls",
            &format!("http://127.0.0.1:{etcd_port}"),
            "--listen-peer-urls",
            &format!("http://127.0.0.1:{peer_port}"),
            "--initial-advertise-peer-urls",
            &format!("http://127.0.0.1:{peer_port}"),
            "--initial-cluster",
            &format!("e0=http://127.0.0.1:{peer_port}"),
            "--initial-cluster-state",
            "new",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let etcd = spawn_etcd(&root, &etcd_args)?;
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(3))
            .build()?;
        let mut cluster = Self {
            nodes: Vec::new(),
            superuser_password: secret(),
            etcd,
            etcd_args,
            etcd_port,
            haproxy: None,
            haproxy_port: free_port()?,
            cuts: Arc::new(Cuts::default()),
            links: Vec::new(),
            http,
            watchdog: None,
            root: root.clone(),
        };
        cluster.start_watchdog()?;
        cluster.wait_etcd(Duration::from_secs(30)).await?;

        // ---- Patroni nodes -----------------------------------------------------------------
        let replication_password = secret();
        for i in 0..nodes {
            let dir = root.join(format!("n{i}"));
            std::fs::create_dir_all(&dir)?;
            std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o700))?;
            let node = Node {
                name: format!("pg{i}"),
                pg_port: free_port()?,
                rest_port: free_port()?,
                link_port: free_port()?,
                dir,
                patroni: None,
            };
            let config = fill(
                PATRONI_TEMPLATE,
                &[
                    ("name", node.name.clone()),
                    ("rest_listen", format!("127.0.0.1:{}", node.rest_port)),
                    ("rest_connect", format!("127.0.0.1:{}", node.rest_port)),
                    ("etcd_hosts", format!("127.0.0.1:{etcd_port}")),
                    ("pg_listen", format!("127.0.0.1:{}", node.pg_port)),
                    ("pg_connect", format!("127.0.0.1:{}", node.link_port)),
                    ("data_dir", node.data_dir().display().to_string()),
                    ("bin_dir", bin.display().to_string()),
                    ("pgpass", node.dir.join("pgpass").display().to_string()),
                    ("socket_dir", node.dir.display().to_string()),
                    ("cidr", "127.0.0.1/32".into()),
                    ("ttl", timings.ttl_s.to_string()),
                    ("loop_wait", timings.loop_wait_s.to_string()),
                    ("retry_timeout", timings.retry_timeout_s.to_string()),
                    // Archiving on, as in production, to nowhere: nothing here restores.
                    ("archive_command", "/bin/true".into()),
                    ("superuser_password", cluster.superuser_password.clone()),
                    ("replication_password", replication_password.clone()),
                ],
            )?;
            let path = node.dir.join("patroni.yml");
            std::fs::write(&path, config)?;
            let listener = TcpListener::bind(("127.0.0.1", node.link_port)).await?;
            cluster.links.push(tokio::spawn(serve_link(
                listener,
                node.pg_port,
                cluster.cuts.clone(),
            )));
            cluster.nodes.push(node);
        }
        let status = Command::new("chown")
            .arg("-R")
            .arg(format!("{uid}:{gid}"))
            .args(cluster.nodes.iter().map(|n| &n.dir))
            .status()?;
        anyhow::ensure!(status.success(), "chown of the node directories failed");
        for i in 0..nodes {
            cluster.start_patroni(i, uid, gid)?;
            if i == 0 {
                // The first node bootstraps alone (initdb); the others clone it.
                cluster
                    .wait_leader(None, Duration::from_secs(90))
                    .await
                    .context("the first Patroni node did not bootstrap")?;
            }
        }

        // ---- HAProxy -----------------------------------------------------------------------
        let cfg = haproxy_config(HAPROXY_TEMPLATE, cluster.haproxy_port, &cluster.nodes)?;
        let cfg_path = root.join("haproxy.cfg");
        std::fs::write(&cfg_path, cfg)?;
        let haproxy = Command::new(on_path("haproxy").context("haproxy")?)
            .args(["-db", "-f"])
            .arg(&cfg_path)
            .stdin(Stdio::null())
            .stdout(log_file(&root.join("haproxy.log"))?)
            .stderr(log_file(&root.join("haproxy.log"))?)
            .spawn()
            .context("starting haproxy")?;
        cluster.haproxy = Some(haproxy);
        cluster.write_pids();

        cluster
            .wait_healthy(Duration::from_secs(120))
            .await
            .context("the Patroni cluster did not become healthy")?;
        cluster
            .wait_haproxy_on_leader(Duration::from_secs(30))
            .await?;
        Ok(cluster)
    }

    fn start_patroni(&mut self, i: usize, uid: u32, gid: u32) -> anyhow::Result<()> {
        use std::os::unix::process::CommandExt;
        let node = &mut self.nodes[i];
        let log = self.root.join(format!("{}.log", node.name));
        let child = Command::new(on_path("patroni").context("patroni")?)
            .arg(node.dir.join("patroni.yml"))
            .current_dir(&node.dir)
            .env("HOME", &node.dir)
            .uid(uid)
            .gid(gid)
            .stdin(Stdio::null())
            .stdout(log_file(&log)?)
            .stderr(log_file(&log)?)
            .spawn()
            .with_context(|| format!("starting patroni {}", node.name))?;
        node.patroni = Some(child);
        self.write_pids();
        Ok(())
    }

    /// The pids the watchdog kills if this process dies: Patroni first (so nothing restarts a
    /// server), then etcd and HAProxy; postmasters it finds from their pid files.
    fn write_pids(&self) {
        let mut pids: Vec<u32> = self
            .nodes
            .iter()
            .filter_map(|n| n.patroni.as_ref().map(Child::id))
            .collect();
        pids.push(self.etcd.id());
        pids.extend(self.haproxy.as_ref().map(Child::id));
        let text: String = pids.iter().map(|p| format!("{p}\n")).collect();
        let _ = std::fs::write(self.root.join("pids"), text);
    }

    fn start_watchdog(&mut self) -> anyhow::Result<()> {
        use crate::tooling::private_pg::{spawn_watchdog, STOP_POSTMASTER};
        let me = std::process::id().to_string();
        let root = self.root.canonicalize()?;
        // The pids file is ours (the root directory is); each postmaster is signalled only if
        // it runs in its data directory (tooling::private_pg::watchdog).
        let script = format!(
            "{STOP_POSTMASTER}\
             while kill -0 \"$1\" 2>/dev/null; do sleep 1; done; \
             for p in $(cat \"$2/pids\" 2>/dev/null); do kill -9 \"$p\" 2>/dev/null; done; \
             for d in \"$2\"/n*/data; do stop_postmaster \"$d\" QUIT; done; \
             sleep 2; rm -rf \"$2\""
        );
        self.watchdog = Some(spawn_watchdog(
            &script,
            &[std::ffi::OsStr::new(&me), root.as_os_str()],
        )?);
        Ok(())
    }

    /// Node `i`'s Patroni configuration, for `patronictl -c`.
    pub fn config_path(&self, i: usize) -> PathBuf {
        self.nodes[i].dir.join("patroni.yml")
    }

    /// Where the processes' logs are (kept while the cluster lives).
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `postgresql://postgres:PW@127.0.0.1:P0,127.0.0.1:P1,.../<db>?target_session_attrs=read-write`
    pub fn multi_host_url(&self, db: &str) -> String {
        let hosts: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.pg_port))
            .collect();
        format!(
            "postgresql://postgres:{}@{}/{db}?target_session_attrs=read-write",
            self.superuser_password,
            hosts.join(",")
        )
    }

    /// `postgresql://postgres:PW@127.0.0.1:<haproxy>/<db>`: HAProxy routes to the leader.
    pub fn haproxy_url(&self, db: &str) -> String {
        format!(
            "postgresql://postgres:{}@127.0.0.1:{}/{db}",
            self.superuser_password, self.haproxy_port
        )
    }

    /// A direct URL of one node's PostgreSQL.
    pub fn node_url(&self, i: usize, db: &str) -> String {
        format!(
            "postgresql://postgres:{}@127.0.0.1:{}/{db}",
            self.superuser_password, self.nodes[i].pg_port
        )
    }

    async fn get_json(&self, url: &str) -> Option<(u16, Value)> {
        let r = self.http.get(url).send().await.ok()?;
        let status = r.status().as_u16();
        Some((status, r.json().await.unwrap_or(Value::Null)))
    }

    /// The node whose Patroni answers `GET /primary` 200 (what HAProxy checks), if exactly one.
    pub async fn leader(&self) -> Option<usize> {
        let checks = self.nodes.iter().map(|n| {
            let url = n.rest_url("/primary");
            async move { self.get_json(&url).await.is_some_and(|(s, _)| s == 200) }
        });
        let up: Vec<usize> = futures_util::future::join_all(checks)
            .await
            .into_iter()
            .enumerate()
            .filter_map(|(i, ok)| ok.then_some(i))
            .collect();
        match up.as_slice() {
            [one] => Some(*one),
            _ => None,
        }
    }

    /// Wait until a node other than `not` leads; which one.
    ///
    /// # Errors
    /// None did within `within`.
    pub async fn wait_leader(&self, not: Option<usize>, within: Duration) -> anyhow::Result<usize> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if let Some(l) = self.leader().await.filter(|&l| Some(l) != not) {
                return Ok(l);
            }
            if tokio::time::Instant::now() > deadline {
                bail!(
                    "no new leader within {} s (logs in {})",
                    within.as_secs(),
                    self.root.display()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The leader's view of its standbys: `(application_name, state, sync_state)`.
    pub async fn replication(&self, leader: usize) -> Vec<(String, String, String)> {
        let Some((_, v)) = self
            .get_json(&self.nodes[leader].rest_url("/patroni"))
            .await
        else {
            return Vec::new();
        };
        v["replication"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|r| {
                let s = |k: &str| r[k].as_str().unwrap_or_default().to_owned();
                (s("application_name"), s("state"), s("sync_state"))
            })
            .collect()
    }

    /// The synchronous standby: the one the leader's server streams to synchronously and
    /// Patroni's `/sync` key in etcd names (only it may be promoted; until the key names it, a
    /// crashed leader is restarted in place rather than failed over).
    pub async fn sync_standby(&self, leader: usize) -> Option<usize> {
        let rep = self.replication(leader).await;
        let (_, members) = self
            .get_json(&self.nodes[leader].rest_url("/cluster"))
            .await?;
        let named = members["members"]
            .as_array()?
            .iter()
            .find(|m| m["role"] == "sync_standby")?["name"]
            .as_str()?
            .to_owned();
        rep.iter()
            .any(|(n, state, sync)| n == &named && state == "streaming" && sync == "sync")
            .then(|| self.nodes.iter().position(|n| n.name == named))?
    }

    /// Healthy: one leader, every other node streaming from it, one of them synchronously.
    pub async fn healthy(&self) -> Option<usize> {
        let leader = self.leader().await?;
        let rep = self.replication(leader).await;
        let all = self.nodes.iter().enumerate().all(|(i, n)| {
            i == leader
                || rep
                    .iter()
                    .any(|(name, state, _)| name == &n.name && state == "streaming")
        });
        if !all {
            return None;
        }
        let standby = self.sync_standby(leader).await?;
        // Patroni fails a crashed leader over only to a standby on the cluster's timeline (its
        // `is_failover_possible`); right after a switchover the standby's status can lag a loop.
        let timeline = |i: usize| async move {
            self.get_json(&self.nodes[i].rest_url("/patroni"))
                .await
                .and_then(|(_, v)| v["timeline"].as_u64())
        };
        let (lt, st) = (timeline(leader).await?, timeline(standby).await?);
        (lt == st).then_some(leader)
    }

    /// Wait until [`Self::healthy`]; the leader.
    ///
    /// # Errors
    /// Not healthy within `within`.
    pub async fn wait_healthy(&self, within: Duration) -> anyhow::Result<usize> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if let Some(l) = self.healthy().await {
                return Ok(l);
            }
            if tokio::time::Instant::now() > deadline {
                bail!(
                    "the cluster was not healthy (a leader, every standby streaming, one synchronous) within {} s (logs in {})",
                    within.as_secs(),
                    self.root.display()
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Wait until connections through HAProxy reach the leader only: six in a row, across at
    /// least one check interval, each finding a server that is not in recovery.
    async fn wait_haproxy_on_leader(&self, within: Duration) -> anyhow::Result<()> {
        let deadline = tokio::time::Instant::now() + within;
        let url = self.haproxy_url("postgres");
        let mut in_a_row = 0;
        loop {
            let primary = async {
                let (c, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await?;
                let conn = tokio::spawn(conn);
                let row = c.query_one("SELECT pg_is_in_recovery()", &[]).await?;
                drop(c);
                let _ = conn.await;
                Ok::<bool, tokio_postgres::Error>(!row.get::<_, bool>(0))
            }
            .await
            .unwrap_or(false);
            in_a_row = if primary { in_a_row + 1 } else { 0 };
            if in_a_row >= 6 {
                return Ok(());
            }
            if tokio::time::Instant::now() > deadline {
                bail!(
                    "HAProxy did not route to the leader within {} s",
                    within.as_secs()
                );
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    async fn wait_etcd(&self, within: Duration) -> anyhow::Result<()> {
        let deadline = tokio::time::Instant::now() + within;
        let url = format!("http://127.0.0.1:{}/health", self.etcd_port);
        loop {
            if let Some((200, v)) = self.get_json(&url).await {
                if v["health"] == "true" {
                    return Ok(());
                }
            }
            if tokio::time::Instant::now() > deadline {
                bail!("etcd was not healthy within {} s", within.as_secs());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    // ---- faults --------------------------------------------------------------------------

    /// A planned switchover from the leader to its synchronous standby (Patroni's REST
    /// `POST /switchover`, what `patronictl switchover` sends); returns the new leader once it
    /// answers `/primary` 200.
    ///
    /// # Errors
    /// No healthy leader, Patroni refused, or no new leader within 60 s.
    pub async fn switchover(&self) -> anyhow::Result<usize> {
        let leader = self.wait_healthy(Duration::from_secs(60)).await?;
        let candidate = self
            .sync_standby(leader)
            .await
            .context("no synchronous standby to switch over to")?;
        let r = self
            .http
            .post(self.nodes[leader].rest_url("/switchover"))
            .timeout(Duration::from_secs(60))
            .json(&serde_json::json!({
                "leader": self.nodes[leader].name,
                "candidate": self.nodes[candidate].name,
            }))
            .send()
            .await?;
        let status = r.status();
        let body = r.text().await.unwrap_or_default();
        anyhow::ensure!(status.is_success(), "switchover refused: {status} {body}");
        self.wait_leader(Some(leader), Duration::from_secs(60))
            .await
    }

    /// SIGKILL the leader's postmaster; Patroni (`primary_start_timeout: 0`) fails over to the
    /// synchronous standby. Returns the new leader.
    ///
    /// Patroni restarts a crashed leader in place instead when, at that moment, it finds no
    /// standby it may promote (one whose REST status it could not read in time, or that it
    /// judged behind: `is_failover_possible`). That is its documented choice, not a loss; the
    /// fault asked for is a failover, so the restarted postmaster is crashed again (at most
    /// three times, each logged).
    ///
    /// # Errors
    /// No leader, or no new one after three crashes.
    pub async fn crash_leader(&self) -> anyhow::Result<usize> {
        let leader = self.wait_healthy(Duration::from_secs(60)).await?;
        for crash in 1..=3 {
            let pid = self.nodes[leader]
                .postmaster_pid()
                .context("the leader's postmaster.pid")?;
            nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            )?;
            let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
            loop {
                match self.leader().await {
                    Some(l) if l != leader => return Ok(l),
                    Some(_)
                        if self.nodes[leader]
                            .postmaster_pid()
                            .is_some_and(|p| p != pid) =>
                    {
                        eprintln!(
                            "patroni: {} restarted in place after crash {crash} (no standby it \
                             would promote then); crashing it again",
                            self.nodes[leader].name
                        );
                        self.wait_healthy(Duration::from_secs(60)).await?;
                        break;
                    }
                    _ => {}
                }
                if tokio::time::Instant::now() > deadline {
                    bail!(
                        "no new leader within 60 s of crash {crash} (logs in {})",
                        self.root.display()
                    );
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        bail!(
            "{} was restarted in place after three crashes (logs in {})",
            self.nodes[leader].name,
            self.root.display()
        )
    }

    /// Restart PostgreSQL on the leader in place (REST `POST /restart`, `patronictl restart`):
    /// returns once it leads again.
    ///
    /// # Errors
    /// No leader, Patroni refused, or it did not lead again within 60 s.
    pub async fn restart_leader(&self) -> anyhow::Result<usize> {
        let leader = self.wait_healthy(Duration::from_secs(60)).await?;
        let r = self
            .http
            .post(self.nodes[leader].rest_url("/restart"))
            .timeout(Duration::from_secs(60))
            .json(&serde_json::json!({}))
            .send()
            .await?;
        let status = r.status();
        let body = r.text().await.unwrap_or_default();
        anyhow::ensure!(status.is_success(), "restart refused: {status} {body}");
        self.wait_leader(None, Duration::from_secs(60)).await
    }

    /// Stop etcd (SIGTERM, as a service restart does) and start it again on its data.
    ///
    /// # Errors
    /// It did not come back healthy within 30 s.
    pub async fn restart_etcd(&mut self) -> anyhow::Result<()> {
        let pid = nix::unistd::Pid::from_raw(self.etcd.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while self.etcd.try_wait()?.is_none() {
            if std::time::Instant::now() > deadline {
                let _ = self.etcd.kill();
                let _ = self.etcd.wait();
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.etcd = spawn_etcd(&self.root, &self.etcd_args)?;
        self.write_pids();
        self.wait_etcd(Duration::from_secs(30)).await
    }

    /// Cut standby `name` off: its streams through every node's replication proxy are closed
    /// and new ones refused until [`Self::heal`].
    pub fn cut(&self, name: &str) {
        self.cuts
            .names
            .lock()
            .expect("cuts lock")
            .insert(name.to_owned());
        self.cuts.changed.notify_waiters();
    }

    /// Let every cut standby stream again.
    pub fn heal(&self) {
        self.cuts.names.lock().expect("cuts lock").clear();
        self.cuts.changed.notify_waiters();
    }

    /// Wait until the leader no longer lists `name` among its standbys.
    ///
    /// # Errors
    /// It still did after `within`.
    pub async fn wait_detached(&self, name: &str, within: Duration) -> anyhow::Result<()> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if let Some(l) = self.leader().await {
                if !self.replication(l).await.iter().any(|(n, _, _)| n == name) {
                    return Ok(());
                }
            }
            if tokio::time::Instant::now() > deadline {
                bail!("{name} still streamed {} s after the cut", within.as_secs());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

fn spawn_etcd(root: &Path, args: &[String]) -> anyhow::Result<Child> {
    Command::new(on_path("etcd").context("etcd")?)
        .args(args)
        .stdin(Stdio::null())
        .stdout(log_file(&root.join("etcd.log"))?)
        .stderr(log_file(&root.join("etcd.log"))?)
        .spawn()
        .context("starting etcd")
}

impl Drop for PatroniCluster {
    fn drop(&mut self) {
        for l in &self.links {
            l.abort();
        }
        // Patroni first, so nothing restarts a server; then the servers, at once.
        for n in &mut self.nodes {
            if let Some(mut p) = n.patroni.take() {
                let _ = p.kill();
                let _ = p.wait();
            }
        }
        let pids: Vec<i32> = self.nodes.iter().filter_map(Node::postmaster_pid).collect();
        for &pid in &pids {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGQUIT,
            );
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        for &pid in &pids {
            let p = nix::unistd::Pid::from_raw(pid);
            while nix::sys::signal::kill(p, None).is_ok() && std::time::Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = nix::sys::signal::kill(p, nix::sys::signal::Signal::SIGKILL);
        }
        for c in [Some(&mut self.etcd), self.haproxy.as_mut()]
            .into_iter()
            .flatten()
        {
            let _ = c.kill();
            let _ = c.wait();
        }
        if let Some(mut w) = self.watchdog.take() {
            let _ = w.kill();
            let _ = w.wait();
        }
        if std::env::var_os("LEASEHOLD_KEEP_PATRONI").is_none() {
            let _ = std::fs::remove_dir_all(&self.root);
        }
    }
}
