//! Keeping a job's processes from outliving it when no sandbox does (bubblewrap's PID
//! namespace does it by itself, and the sweep is harmless there).
//!
//! Invariants: every process a job starts carries `LEASEHOLD_JOB_ID=<its id>` in its
//! environment (a payload cannot overwrite it), so when the job ends [`sweep`] kills every
//! process that still carries it, whatever group or session it moved to (`setsid`,
//! `nohup ... &`). The runner is a child subreaper ([`become_subreaper`]): orphans of its jobs
//! are re-parented to it rather than to init, so they stay in sight; [`reap_orphans`] waits
//! for those that exit, and only for them: a child the runner spawned itself (registered with
//! [`spawn_tracked`]) is left to its own waiter, and the registry is locked across spawning so
//! no child is ever reaped by the wrong waiter.

use std::collections::BTreeSet;
use std::sync::Mutex;

use nix::sys::signal::{kill, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag};
use nix::unistd::Pid;

/// Children the runner spawned and waits for itself.
static SPAWNED: Mutex<BTreeSet<i32>> = Mutex::new(BTreeSet::new());

/// Make this process the subreaper of everything it starts.
///
/// # Errors
/// The kernel refused (not Linux ≥ 3.4).
pub fn become_subreaper() -> nix::Result<()> {
    nix::sys::prctl::set_child_subreaper(true)
}

/// Spawn `cmd`, registering the child as one the runner waits for itself.
///
/// # Errors
/// As [`tokio::process::Command::spawn`].
pub fn spawn_tracked(cmd: &mut tokio::process::Command) -> std::io::Result<tokio::process::Child> {
    let mut spawned = SPAWNED.lock().expect("spawned lock");
    let child = cmd.spawn()?;
    if let Some(pid) = child.id() {
        spawned.insert(pid as i32);
    }
    Ok(child)
}

/// The child `pid` has been waited for.
pub fn forget(pid: i32) {
    SPAWNED.lock().expect("spawned lock").remove(&pid);
}

/// `(state, ppid)` of `pid`, from `/proc/<pid>/stat`.
fn stat(pid: i32) -> Option<(char, i32)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may hold anything; fields follow the last ')'.
    let rest = &text[text.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    Some((state, ppid))
}

fn pids() -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect()
}

/// Kill every process whose environment holds `marker` (`NAME=value`); returns how many.
/// Processes of other users are not readable and are left alone.
pub fn sweep(marker: &str) -> usize {
    let me = std::process::id() as i32;
    let mut killed = 0;
    for pid in pids() {
        if pid == me {
            continue;
        }
        let Ok(environ) = std::fs::read(format!("/proc/{pid}/environ")) else {
            continue;
        };
        if environ
            .split(|&b| b == 0)
            .any(|var| var == marker.as_bytes())
            && kill(Pid::from_raw(pid), Signal::SIGKILL).is_ok()
        {
            killed += 1;
        }
    }
    killed
}

/// Wait for the exited orphans re-parented to this process (never for its own spawned
/// children). Returns how many were reaped.
pub fn reap_orphans() -> usize {
    let me = std::process::id() as i32;
    let spawned = SPAWNED.lock().expect("spawned lock");
    let mut reaped = 0;
    for pid in pids() {
        if spawned.contains(&pid) {
            continue;
        }
        if let Some(('Z', ppid)) = stat(pid) {
            if ppid == me
                && waitpid(Pid::from_raw(pid), Some(WaitPidFlag::WNOHANG))
                    .is_ok_and(|s| !matches!(s, nix::sys::wait::WaitStatus::StillAlive))
            {
                reaped += 1;
            }
        }
    }
    reaped
}
