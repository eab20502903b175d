//! The faults the drill injects into its own deployment or its runners, and their repair.
//!
//! Invariant: every fault is repaired before `inject` returns (a replica restarted on its port,
//! the database back or a standby promoted, a runner thawed), and the time of the repair is
//! returned, since recovery is measured from there.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::Context;
use rand::Rng;

use super::check::Event;
use super::history::Recorder;
use super::procs::{Own, WorkerProc};

/// A fault the drill injects.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FaultKind {
    /// SIGKILL a replica, then start it again.
    KillReplica,
    /// SIGTERM a replica (it must drain and exit 0), then start it again.
    TermReplica,
    /// Restart the PostgreSQL primary (fast shutdown, start).
    RestartDb,
    /// Crash the primary (`-m immediate`), promote the standby, rebuild a standby.
    FailoverDb,
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
            FaultKind::FreezeRunner => "freeze-runner",
            FaultKind::CutRunner => "cut-runner",
        }
    }

    pub(super) fn needs_own_deployment(self) -> bool {
        !matches!(self, FaultKind::FreezeRunner | FaultKind::CutRunner)
    }
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
            r.start(&own.database_url, &own.logs).await?;
            Ok((name, history.now()))
        }
        FaultKind::RestartDb => {
            let own = own.context("no database of the drill's own")?;
            tokio::task::block_in_place(|| own.cluster.restart_primary())?;
            Ok(("primary".into(), history.now()))
        }
        FaultKind::FailoverDb => {
            let own = own.context("no database of the drill's own")?;
            tokio::task::block_in_place(|| own.cluster.crash_primary())?;
            own.cluster.promote_standby().await?;
            let healed = history.now();
            // A new standby, so the drill can fail over again.
            own.cluster.rebuild_standby().await?;
            Ok(("primary".into(), healed))
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
