//! Keeping a job's processes from outliving it when no sandbox does (bubblewrap's PID
//! namespace does it by itself, and these are harmless there).
//!
//! Where cgroup v2 is writable ([`Cgroups::open`]), each job runs in a cgroup of its own
//! (`<the runner's cgroup>/leasehold-<runner id>-<job id>`), and when it ends everything in
//! it is killed (`cgroup.kill`, or each member where the kernel lacks it): nothing escapes by
//! changing group, session or environment. The command enters its cgroup itself before it
//! execs ([`ENTER_CGROUP`]), so everything it starts is born inside.
//!
//! Everywhere, with or without a cgroup: every process a job starts carries `LEASEHOLD_JOB_ID=<its id>` in its
//! environment (a payload cannot overwrite it), so when the job ends [`sweep`] kills every
//! process that still carries it, whatever group or session it moved to (`setsid`,
//! `nohup ... &`). The runner is a child subreaper ([`become_subreaper`]): orphans of its jobs
//! are re-parented to it rather than to init, so they stay in sight; [`reap_orphans`] waits
//! for those that exit, and only for them: a child the runner spawned itself (registered with
//! [`spawn_tracked`]) is left to its own waiter, and the registry is locked across spawning so
//! no child is ever reaped by the wrong waiter.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
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

/// `sh -c ENTER_CGROUP <cgroup.procs> PROGRAM ARGS...`: enter the cgroup, then become the
/// command. Should the kernel refuse, the command still runs (the sweep contains it).
pub const ENTER_CGROUP: &str = r#"{ echo 0 > "$0"; } 2>/dev/null; exec "$@""#;

/// Where the runner makes its jobs' cgroups: inside its own, named
/// `leasehold-<runner id>-<job id>`, so a runner leaves nothing behind between jobs.
#[derive(Debug)]
pub struct Cgroups {
    parent: PathBuf,
    prefix: String,
}

/// One job's cgroup.
#[derive(Debug, Clone)]
pub struct JobCgroup {
    path: PathBuf,
}

/// This process's cgroup v2 directory: the `cgroup2` mount joined with the `0::` line of
/// `/proc/self/cgroup`.
fn own_cgroup() -> Option<PathBuf> {
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let mount = mounts.lines().find_map(|l| {
        let (left, right) = l.split_once(" - ")?;
        right
            .starts_with("cgroup2 ")
            .then(|| left.split_whitespace().nth(4).map(PathBuf::from))?
    })?;
    let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let rel = own.lines().find_map(|l| l.strip_prefix("0::"))?;
    Some(mount.join(rel.trim_start_matches('/')))
}

impl Cgroups {
    /// Job cgroups for runner `name`, when cgroup v2 is mounted and writable here. Job
    /// cgroups a crashed run of the same runner left are emptied and removed.
    pub fn open(name: &str) -> Option<Self> {
        let parent = own_cgroup()?;
        let prefix = format!("leasehold-{name}-");
        for entry in std::fs::read_dir(&parent).ok()?.flatten() {
            if entry.file_name().to_string_lossy().starts_with(&prefix) {
                JobCgroup { path: entry.path() }.kill_and_remove();
            }
        }
        let probe = parent.join(format!("{prefix}probe"));
        std::fs::create_dir(&probe).ok()?;
        let usable = std::fs::metadata(probe.join("cgroup.procs")).is_ok();
        let _ = std::fs::remove_dir(&probe);
        usable.then_some(Self { parent, prefix })
    }

    /// Where the jobs' cgroups are made.
    pub fn path(&self) -> &Path {
        &self.parent
    }

    /// A fresh cgroup for job `name`.
    ///
    /// # Errors
    /// It cannot be made.
    pub fn job(&self, name: &str) -> std::io::Result<JobCgroup> {
        let path = self.parent.join(format!("{}{name}", self.prefix));
        if path.exists() {
            JobCgroup { path: path.clone() }.kill_and_remove();
        }
        std::fs::create_dir(&path)?;
        Ok(JobCgroup { path })
    }
}

impl JobCgroup {
    /// The file a process writes `0` to, to enter this cgroup.
    pub fn procs_file(&self) -> PathBuf {
        self.path.join("cgroup.procs")
    }

    fn members(&self) -> Vec<i32> {
        std::fs::read_to_string(self.path.join("cgroup.procs"))
            .map(|t| t.lines().filter_map(|l| l.trim().parse().ok()).collect())
            .unwrap_or_default()
    }

    /// Kill everything in the cgroup; returns how many processes it held.
    pub fn kill(&self) -> usize {
        let members = self.members();
        if members.is_empty() {
            return 0;
        }
        if std::fs::write(self.path.join("cgroup.kill"), "1").is_err() {
            // Before Linux 5.14: one by one (what forks meanwhile is caught by the next pass).
            for _ in 0..10 {
                let left = self.members();
                if left.is_empty() {
                    break;
                }
                for pid in left {
                    let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
                }
            }
        }
        members.len()
    }

    /// Kill what is left and remove the cgroup (it empties as the killed processes exit).
    pub fn kill_and_remove(self) {
        self.kill();
        for _ in 0..100 {
            match std::fs::remove_dir(&self.path) {
                Err(e) if e.raw_os_error() == Some(nix::libc::EBUSY) => {
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                _ => return,
            }
        }
        tracing::warn!(cgroup = %self.path.display(), "a job's cgroup would not empty; left in place");
    }
}
