//! The faults the drill injects into its own deployment or its runners, and their repair; or,
//! for a kind given a `--fault-command`, the operator's own command (a `patronictl` call
//! against their cluster).
//!
//! Invariant: every fault is repaired before `inject` returns (a replica restarted on its port,
//! the database back or a standby promoted, a new Patroni leader elected and every standby
//! streaming again, a runner thawed, a fault command exited), and the time of the repair is
//! returned, since recovery is measured from there.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::Context;
use rand::Rng;

use super::check::Event;
use super::history::Recorder;
use super::procs::{Db, Own, WorkerProc};

/// A fault the drill injects.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FaultKind {
    /// SIGKILL a replica, then start it again.
    KillReplica,
    /// SIGTERM a replica (it must drain and exit 0), then start it again.
    TermReplica,
    /// Restart the PostgreSQL primary (fast shutdown, start; Patroni: `POST /restart` of the
    /// leader).
    RestartDb,
    /// Crash the primary (`-m immediate`), promote the standby, rebuild a standby (Patroni:
    /// SIGKILL of the leader's postmaster; Patroni fails over and the old leader rejoins).
    FailoverDb,
    /// A planned switchover to the synchronous standby (Patroni's `POST /switchover`).
    SwitchoverDb,
    /// Restart etcd (SIGTERM, start on the same data).
    RestartEtcd,
    /// Cut the synchronous standby off the leader (its replication proxy closes), then heal.
    CutReplication,
    /// SIGSTOP a runner holding a lease past its TTL, then SIGCONT it.
    FreezeRunner,
    /// Drop a runner's long-poll connection mid-request.
    CutRunner,
}

impl FaultKind {
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::KillReplica => "kill-replica",
            FaultKind::TermReplica => "term-replica",
            FaultKind::RestartDb => "restart-db",
            FaultKind::FailoverDb => "failover-db",
            FaultKind::SwitchoverDb => "switchover-db",
            FaultKind::RestartEtcd => "restart-etcd",
            FaultKind::CutReplication => "cut-replication",
            FaultKind::FreezeRunner => "freeze-runner",
            FaultKind::CutRunner => "cut-runner",
        }
    }

    pub(super) fn needs_own_deployment(self) -> bool {
        !matches!(self, FaultKind::FreezeRunner | FaultKind::CutRunner)
    }

    /// A fault of the database (or its consensus store), not of leasehold or a runner.
    pub(super) fn is_database(self) -> bool {
        matches!(
            self,
            FaultKind::RestartDb
                | FaultKind::FailoverDb
                | FaultKind::SwitchoverDb
                | FaultKind::RestartEtcd
                | FaultKind::CutReplication
        )
    }

    /// Only a Patroni cluster (of the drill's own) has these built in.
    pub(super) fn needs_patroni(self) -> bool {
        matches!(
            self,
            FaultKind::SwitchoverDb | FaultKind::RestartEtcd | FaultKind::CutReplication
        )
    }
}

/// How long a cut standby stays cut once the leader has noticed.
const CUT_HOLD: Duration = Duration::from_secs(3);
/// How long a Patroni cluster may take to have every standby streaming again after a repair.
pub(super) const PATRONI_SETTLE: Duration = Duration::from_secs(90);

/// Run an operator's fault command (`sh -c`, with `LEASEHOLD_DRILL_FAULT` naming the kind, and
/// `env`); the fault is repaired when it exits. On the drill's own Patroni cluster, the next
/// fault waits until the cluster is healthy again.
pub(super) async fn run_hook(
    kind: FaultKind,
    command: &str,
    env: &[(String, String)],
    patroni: Option<&crate::commands::drill::patroni::PatroniCluster>,
    logs: &std::path::Path,
    history: &Recorder,
) -> anyhow::Result<(String, u64)> {
    let ran = run_command(kind, command, env, logs, history).await?;
    if let Some(p) = patroni {
        p.wait_healthy(PATRONI_SETTLE).await?;
    }
    Ok(ran)
}

async fn run_command(
    kind: FaultKind,
    command: &str,
    env: &[(String, String)],
    logs: &std::path::Path,
    history: &Recorder,
) -> anyhow::Result<(String, u64)> {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(logs.join(format!("fault-command-{}.log", kind.name())))?;
    let mut child = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(command)
        .env("LEASEHOLD_DRILL_FAULT", kind.name())
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(std::process::Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("starting the fault command for {}", kind.name()))?;
    match tokio::time::timeout(Duration::from_secs(300), child.wait()).await {
        Ok(Ok(status)) if status.success() => {}
        Ok(Ok(status)) => history.push(Event::Violation {
            what: format!("the fault command for {} exited {status}", kind.name()),
        }),
        Ok(Err(e)) => return Err(e.into()),
        Err(_) => {
            let _ = child.kill().await;
            history.push(Event::Violation {
                what: format!("the fault command for {} ran past 300 s", kind.name()),
            });
        }
    }
    Ok(("fault-command".into(), history.now()))
}

/// The Patroni faults; the target and when the repair finished (a new leader leads, etcd is
/// healthy, the cut is healed). Returns once every standby streams again.
async fn inject_patroni(
    kind: FaultKind,
    cluster: &mut crate::commands::drill::patroni::PatroniCluster,
    history: &Recorder,
) -> anyhow::Result<(String, u64)> {
    let (target, healed) = match kind {
        FaultKind::RestartDb => {
            let l = cluster.restart_leader().await?;
            (
                format!("{} (restarted)", cluster.nodes[l].name),
                history.now(),
            )
        }
        FaultKind::FailoverDb => {
            let old = cluster.wait_healthy(PATRONI_SETTLE).await?;
            let new = cluster.crash_leader().await?;
            let healed = history.now();
            (
                format!(
                    "{} postmaster SIGKILLed, {} leads",
                    cluster.nodes[old].name, cluster.nodes[new].name
                ),
                healed,
            )
        }
        FaultKind::SwitchoverDb => {
            let old = cluster.wait_healthy(PATRONI_SETTLE).await?;
            let new = cluster.switchover().await?;
            let healed = history.now();
            (
                format!("{} -> {}", cluster.nodes[old].name, cluster.nodes[new].name),
                healed,
            )
        }
        FaultKind::RestartEtcd => {
            cluster.wait_healthy(PATRONI_SETTLE).await?;
            cluster.restart_etcd().await?;
            ("etcd".into(), history.now())
        }
        FaultKind::CutReplication => {
            let l = cluster.wait_healthy(PATRONI_SETTLE).await?;
            let s = cluster
                .sync_standby(l)
                .await
                .context("no synchronous standby to cut")?;
            let name = cluster.nodes[s].name.clone();
            cluster.cut(&name);
            let detached = cluster.wait_detached(&name, Duration::from_secs(30)).await;
            if detached.is_ok() {
                tokio::time::sleep(CUT_HOLD).await;
            }
            cluster.heal();
            detached?;
            (
                format!("{name} cut from {}", cluster.nodes[l].name),
                history.now(),
            )
        }
        _ => anyhow::bail!("{} is not a Patroni fault", kind.name()),
    };
    cluster.wait_healthy(PATRONI_SETTLE).await?;
    Ok((target, healed))
}

/// A frozen runner stays frozen this much past the lease TTL (and the sweep).
const FREEZE_MARGIN_MS: u64 = 1_500;
/// The longest lease TTL the drill will freeze a runner past.
const MAX_FREEZE_TTL_MS: u64 = 30_000;

/// Inject one fault and repair it; the target's name and when the repair finished.
pub(super) async fn inject(
    kind: FaultKind,
    rng: &mut rand::rngs::StdRng,
    own: Option<&mut Own>,
    workers: &mut [WorkerProc],
    max_ttl: &AtomicU64,
    history: &Recorder,
) -> anyhow::Result<(String, u64)> {
    use nix::sys::signal::{kill, Signal};
    match kind {
        FaultKind::KillReplica | FaultKind::TermReplica => {
            let own = own.context("no replicas of the drill's own")?;
            let i = rng.random_range(0..own.replicas.len());
            let r = &mut own.replicas[i];
            let name = r.name.clone();
            let mut child = r.child.take().context("replica not running")?;
            if kind == FaultKind::KillReplica {
                child.kill().await?;
            } else {
                if let Some(pid) = child.id() {
                    kill(nix::unistd::Pid::from_raw(pid as i32), Signal::SIGTERM)?;
                }
                match tokio::time::timeout(Duration::from_secs(15), child.wait()).await {
                    Ok(Ok(status)) if status.success() => {}
                    Ok(Ok(status)) => history.push(Event::Violation {
                        what: format!("{name} exited {status} after SIGTERM"),
                    }),
                    _ => {
                        let _ = child.kill().await;
                        history.push(Event::Violation {
                            what: format!("{name} did not exit within 15 s of SIGTERM"),
                        });
                    }
                }
            }
            r.start(&own.database_urls[i % own.database_urls.len()], &own.logs)
                .await?;
            Ok((name, history.now()))
        }
        FaultKind::RestartDb
        | FaultKind::FailoverDb
        | FaultKind::SwitchoverDb
        | FaultKind::RestartEtcd
        | FaultKind::CutReplication => {
            let own = own.context("no database of the drill's own")?;
            let cluster = match &mut own.db {
                Db::Patroni(p) => return inject_patroni(kind, p, history).await,
                Db::Embedded(c) => c,
            };
            match kind {
                FaultKind::RestartDb => {
                    tokio::task::block_in_place(|| cluster.restart_primary())?;
                    Ok(("primary".into(), history.now()))
                }
                FaultKind::FailoverDb => {
                    tokio::task::block_in_place(|| cluster.crash_primary())?;
                    cluster.promote_standby().await?;
                    let healed = history.now();
                    // A new standby, so the drill can fail over again.
                    cluster.rebuild_standby().await?;
                    Ok(("primary".into(), healed))
                }
                _ => anyhow::bail!("{} needs --cluster patroni", kind.name()),
            }
        }
        FaultKind::FreezeRunner => {
            // Frozen right after it leases a job, so its report comes after the lease lapsed
            // (and usually after another runner took the job at a higher epoch).
            let w = &workers[rng.random_range(0..workers.len())];
            let pid = w.pid().context("runner not running")?;
            w.freeze.armed.store(true, Ordering::Release);
            let sprung = tokio::time::timeout(Duration::from_secs(5), w.freeze.sprung.notified())
                .await
                .is_ok();
            if !sprung && w.freeze.armed.swap(false, Ordering::AcqRel) {
                // No lease came: freeze it mid long-poll instead.
                kill(pid, Signal::SIGSTOP)?;
            }
            let ttl = max_ttl.load(Ordering::Relaxed).clamp(1, MAX_FREEZE_TTL_MS);
            tokio::time::sleep(Duration::from_millis(ttl + FREEZE_MARGIN_MS)).await;
            kill(pid, Signal::SIGCONT)?;
            Ok((w.name.clone(), history.now()))
        }
        FaultKind::CutRunner => {
            let idle: Vec<usize> = (0..workers.len())
                .filter(|&i| !workers[i].holds())
                .collect();
            let i = if idle.is_empty() {
                rng.random_range(0..workers.len())
            } else {
                idle[rng.random_range(0..idle.len())]
            };
            let w = &workers[i];
            kill(w.pid().context("runner not running")?, Signal::SIGUSR1)?;
            Ok((w.name.clone(), history.now()))
        }
    }
}
