//! Keeping a job's processes from outliving it, and jobs of different uids apart.
//!
//! Where cgroup v2 is writable ([`Cgroups::open`]), each job runs in a cgroup of its own
//! (`<the runner's cgroup>/leasehold-<runner id>-<job id>`), whatever uid it runs as, and when
//! it ends everything in it is killed (`cgroup.kill`, or each member where the kernel lacks
//! it): nothing escapes by changing group, session or environment. The command starts as
//! [`WAIT_FOR_GO`], a shell that blocks reading its first line until the runner has moved it
//! into the cgroup ([`JobCgroup::adopt`], written by the runner, so a job user that may not
//! write `cgroup.procs` is placed all the same), so everything it starts is born inside. The
//! cgroup directories belong to root (or the runner's user): a job running as another uid
//! cannot write any `cgroup.procs` and so cannot move itself out; a job running as the
//! runner's own uid can (see docs/security.md).
//!
//! With a uid range ([`UidPool`], `--job-user-range`), each concurrent job gets a uid no
//! other live job has (a lock file per uid under [`UID_LOCKS`] keeps other runners on the
//! machine off it too), and when the job ends [`kill_uid`] kills every process of that uid,
//! cgroup or not: the kernel's `kill(-1, SIGKILL)` from a process of that uid. Before a uid
//! is given to a job and once its job is over, [`clear_uid`] also removes what the uid left
//! in the directories all uids share and its IPC objects, so nothing passes from one job to
//! the next on the same uid.
//!
//! As a last resort for jobs without either: every process a job starts carries
//! `LEASEHOLD_JOB_ID=<its id>` in its environment (a payload cannot overwrite it), and
//! [`sweep`] kills every process that still carries it; a process that cleared its
//! environment is beyond it. The runner is a child subreaper ([`become_subreaper`]): orphans
//! of its jobs are re-parented to it rather than to init, so they stay in sight;
//! [`reap_orphans`] waits for those that exit, and only for them: a child the runner spawned
//! itself (registered with [`spawn_tracked`]) is left to its own waiter, and the registry is
//! locked across spawning so no child is ever reaped by the wrong waiter.

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

/// `sh -c WAIT_FOR_GO leasehold-job PROGRAM ARGS...`: wait for the runner's first line on
/// standard input (sent once the shell is in the job's cgroup), then become the command: on
/// the same standard input after [`GO`] (the payload's `stdin` follows), on `/dev/null` after
/// [`GO_WITHOUT_INPUT`] (v1.3: a job without input reads `/dev/null`, as elsewhere). Without
/// that line (the runner could not place it) it exits 125.
pub const WAIT_FOR_GO: &str = r#"read -r go || exit 125
case "$go" in go) exec "$@" ;; null) exec "$@" </dev/null ;; esac
exit 125"#;

/// The line that lets a [`WAIT_FOR_GO`] shell go on, its standard input the runner's pipe.
pub const GO: &[u8] = b"go\n";

/// The line that lets a [`WAIT_FOR_GO`] shell go on with standard input `/dev/null`.
pub const GO_WITHOUT_INPUT: &[u8] = b"null\n";

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

/// Whether a process of ours can be moved into `cgroup` (as every job is), tried with a
/// short-lived shell.
fn adopts(cgroup: &Path) -> bool {
    let Ok(mut child) = std::process::Command::new("/bin/sh")
        .args(["-c", "read -r _"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
    else {
        return false;
    };
    let moved = std::fs::write(cgroup.join("cgroup.procs"), child.id().to_string()).is_ok();
    drop(child.stdin.take()); // the shell reads its end of input and exits
    let _ = child.wait();
    moved
}

impl Cgroups {
    /// Job cgroups for runner `name`, when cgroup v2 is mounted and writable here and a
    /// process can be moved into one (tried at once). Job
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
        let usable = adopts(&probe);
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
    /// Move process `pid` (a [`WAIT_FOR_GO`] shell that has not gone on yet) into this cgroup.
    ///
    /// # Errors
    /// The kernel refused.
    pub fn adopt(&self, pid: i32) -> std::io::Result<()> {
        std::fs::write(self.path.join("cgroup.procs"), pid.to_string())
    }

    /// Where this cgroup is.
    pub fn path(&self) -> &Path {
        &self.path
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

/// Where `--job-user-range` keeps one lock file per uid (`<uid>.lock`, `flock`ed by the runner
/// using that uid), so two runners on one machine never hand the same uid to live jobs.
pub const UID_LOCKS: &str = "/run/leasehold/job-uids";

/// `sh -c KILL_ALL`, run as a uid: `kill(-1, SIGKILL)` signals every process of that uid
/// but the caller, in one pass over the process table (a process being killed cannot fork);
/// a few more passes catch nothing but are cheap. Zombies count as signalled, so the loop is
/// bounded rather than run until `kill` fails.
const KILL_ALL: &str =
    "i=0; while [ $i -lt 5 ] && kill -s KILL -- -1 2>/dev/null; do i=$((i+1)); done; exit 0";

/// Kill every process running as `uid` (a uid of a [`UidPool`]: only this runner's job on it
/// runs as it). Never call it for a uid something else uses.
pub async fn kill_uid(uid: u32) {
    run_as(uid, KILL_ALL, "leasehold-kill-uid").await;
}

/// `sh -c CLEAR_ALL`, run as a uid after [`KILL_ALL`]: removes what the uid owns in the
/// directories every uid shares (`/tmp`, `/var/tmp`, `/dev/shm` with POSIX shared memory and
/// semaphores, `/dev/mqueue`) and its System V IPC objects. It runs with the uid's own rights,
/// never root's, so a link a job planted gains it nothing: `find` follows no symlink, stays on
/// each directory's file system, and removes only entries the uid could remove itself.
/// Directories the job made unreadable are opened up first (a directory's own entry is
/// handled before `find` reads it). `ipcrm -a` as the uid removes exactly the objects it owns
/// or created (the others answer "permission denied", ignored).
const CLEAR_ALL: &str = "u=$(id -u); \
for d in /tmp /var/tmp /dev/shm /dev/mqueue; do \
  [ -d \"$d\" ] || continue; \
  find \"$d\" -xdev -mindepth 1 -user \"$u\" -type d -exec chmod u+rwx {} \\; 2>/dev/null; \
  find \"$d\" -xdev -mindepth 1 -user \"$u\" -delete 2>/dev/null; \
done; \
ipcrm -a 2>/dev/null; exit 0";

/// Kill every process running as `uid` and remove what it left where other uids could later
/// find it ([`CLEAR_ALL`]): what one job of a [`UidPool`] uid leaves in `/tmp`, `/dev/shm` or
/// an IPC object never reaches the next job given that uid. Never call it for a uid something
/// else uses, nor while a job of that uid may still need its files (artifacts upload after
/// the command ends).
pub async fn clear_uid(uid: u32) {
    kill_uid(uid).await;
    run_as(uid, CLEAR_ALL, "leasehold-clear-uid").await;
}

/// Run `script` with `/bin/sh` as `uid` (its group too), with nothing of the runner's
/// environment, and wait for it.
async fn run_as(uid: u32, script: &str, name: &str) {
    let mut cmd = tokio::process::Command::new("/bin/sh");
    cmd.args(["-c", script, name])
        .env_clear()
        .env("PATH", super::sandbox::DEFAULT_PATH)
        .current_dir("/")
        .uid(uid)
        .gid(uid)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true);
    match spawn_tracked(&mut cmd) {
        Ok(mut child) => {
            let pid = child.id();
            let _ = child.wait().await;
            if let Some(pid) = pid {
                forget(pid as i32);
            }
        }
        Err(e) => {
            tracing::error!(uid, script = name, error = %e, "cannot start a process as a job uid")
        }
    }
}

/// The uids of `--job-user-range FIRST-LAST` this runner holds (one per job slot, each locked
/// in [`UID_LOCKS`] for the runner's life), and which of them live jobs use now.
pub struct UidPool {
    free: Mutex<Vec<u32>>,
    held: Vec<u32>,
    _locks: Vec<nix::fcntl::Flock<std::fs::File>>,
}

/// One uid of a [`UidPool`], given back when dropped.
pub struct Slot<'a> {
    pool: &'a UidPool,
    pub uid: u32,
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.pool.free.lock().expect("uid pool lock").push(self.uid);
    }
}

/// `FIRST-LAST` (inclusive), neither 0.
///
/// # Errors
/// Not two numbers, reversed, or including root.
pub fn parse_range(text: &str) -> anyhow::Result<(u32, u32)> {
    let parsed = text
        .split_once('-')
        .and_then(|(a, b)| Some((a.trim().parse::<u32>().ok()?, b.trim().parse::<u32>().ok()?)));
    match parsed {
        Some((first, last)) if first > 0 && first <= last => Ok((first, last)),
        _ => anyhow::bail!(
            "--job-user-range {text}: want FIRST-LAST, two uids above 0 in order (e.g. 60000-60063)"
        ),
    }
}

impl UidPool {
    /// Lock `need` free uids of `first..=last` under `dir` (created 0700).
    ///
    /// # Errors
    /// The lock directory cannot be made, or fewer than `need` uids are free.
    pub fn open(first: u32, last: u32, need: usize, dir: &Path) -> anyhow::Result<Self> {
        use anyhow::Context;
        use nix::fcntl::{Flock, FlockArg};
        use std::os::unix::fs::PermissionsExt;
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
        let mut locks = Vec::new();
        let mut held = Vec::new();
        for uid in first..=last {
            if held.len() == need {
                break;
            }
            let path = dir.join(format!("{uid}.lock"));
            let file = std::fs::File::options()
                .create(true)
                .truncate(false)
                .write(true)
                .open(&path)
                .with_context(|| format!("opening {}", path.display()))?;
            if let Ok(lock) = Flock::lock(file, FlockArg::LockExclusiveNonblock) {
                locks.push(lock);
                held.push(uid);
            }
        }
        anyhow::ensure!(
            held.len() == need,
            "--job-user-range {first}-{last}: {} of its uids are free (the others are locked in {} \
             by another runner on this machine); capacity {need} needs one per job",
            held.len(),
            dir.display()
        );
        let mut free = held.clone();
        free.reverse();
        Ok(Self {
            free: Mutex::new(free),
            held,
            _locks: locks,
        })
    }

    /// A uid no live job of this runner uses, if one is free.
    pub fn take(&self) -> Option<Slot<'_>> {
        let uid = self.free.lock().expect("uid pool lock").pop()?;
        Some(Slot { pool: self, uid })
    }

    /// Every uid this runner holds.
    pub fn uids(&self) -> &[u32] {
        &self.held
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_range_parses_only_in_order_and_above_root() {
        assert_eq!(parse_range("60000-60063").unwrap(), (60000, 60063));
        assert_eq!(parse_range("7-7").unwrap(), (7, 7));
        for bad in ["0-10", "10-9", "60000", "a-b", "-5-6"] {
            assert!(parse_range(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn two_pools_never_share_a_uid() {
        let dir = std::env::temp_dir().join(format!("lh-uids-{}", uuid::Uuid::now_v7()));
        let a = UidPool::open(70000, 70003, 2, &dir).unwrap();
        let b = UidPool::open(70000, 70003, 2, &dir).unwrap();
        assert_eq!(a.uids(), [70000, 70001]);
        assert_eq!(b.uids(), [70002, 70003]);
        assert!(UidPool::open(70000, 70003, 1, &dir).is_err(), "all locked");
        let s1 = a.take().unwrap();
        let s2 = a.take().unwrap();
        assert_ne!(s1.uid, s2.uid);
        assert!(a.take().is_none());
        drop(s1);
        assert!(a.take().is_some());
        drop(s2);
        drop((a, b));
        std::fs::remove_dir_all(dir).unwrap();
    }
}
