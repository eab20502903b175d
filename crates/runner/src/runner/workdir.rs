//! Where jobs run: one directory per runner (`<base>/<runner id>/`), one fresh directory per
//! job inside it, removed when the job ends.
//!
//! Invariants: one process at a time uses a runner's directory (an exclusive `flock` on
//! `<base>/<runner id>.lock`, held for the runner's life, beside the runner's own lock of
//! [`super::holder`]), so clearing left-overs at start can never touch a live job: the process
//! groups the crashed run named by that lock left behind (found by the `LEASEHOLD_RUNNER_ID`
//! and `LEASEHOLD_RUNNER_RUN` every job is started with) are killed, then their directories
//! removed. A job directory holds `work/` (the command's default
//! working directory), `home/` (its `HOME`) and `tmp/` (its `TMPDIR`): everything a job
//! writes by default is removed with it.
//!
//! When jobs run as other users ([`JobUsers`]), the runner's directory is searchable (0711)
//! but not listable by others, and each job's directory (0700) belongs to the uid that job
//! runs as, so a job can reach its own directory and nothing else of the runner's (nor,
//! with a uid range, another job's). The whole directory stays the runner's until the source
//! is checked out, and is handed over only then ([`JobDir::hand_to`], by file descriptor,
//! never following a link, children first and the job root last): git refuses a
//! repository another user owns, and a job sharing the uid cannot swap `work/` for a link
//! while git, as the runner, writes there.

use std::fs::{self, File};
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use std::ffi::{CStr, CString};

use anyhow::Context;
use nix::dir::Dir;
use nix::errno::Errno;
use nix::fcntl::{AtFlags, Flock, FlockArg, OFlag};
use nix::sys::stat::{fchmod, fstatat, FileStat, Mode, SFlag};
use nix::unistd::{fchown, fchownat, Gid, Uid};
use uuid::Uuid;

/// The other, unprivileged user jobs run as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobUser {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
}

impl JobUser {
    /// Look `name` up in the user database.
    ///
    /// # Errors
    /// No such user, or it is root.
    pub fn lookup(name: &str) -> anyhow::Result<Self> {
        let user = nix::unistd::User::from_name(name)?
            .with_context(|| format!("--job-user {name}: no such user"))?;
        anyhow::ensure!(
            !user.uid.is_root(),
            "--job-user {name}: jobs must run as an unprivileged user, not root"
        );
        Ok(Self {
            name: name.to_owned(),
            uid: user.uid.as_raw(),
            gid: user.gid.as_raw(),
        })
    }
}

/// Who a runner's jobs run as.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum JobUsers {
    /// The runner's own user.
    #[default]
    Runner,
    /// One unprivileged user for every job (`--job-user`).
    Shared(JobUser),
    /// One uid per concurrent job from `first..=last` (`--job-user-range`), its gid the same
    /// number; the uids need not have accounts.
    Range { first: u32, last: u32 },
}

impl JobUser {
    /// A uid of a `--job-user-range` (its gid is the same number).
    pub fn of_uid(uid: u32) -> Self {
        Self {
            name: format!("uid {uid}"),
            uid,
            gid: uid,
        }
    }
}

/// A runner's directory, locked for as long as this value lives.
pub struct WorkRoot {
    path: PathBuf,
    run: Uuid,
    _lock: Flock<File>,
}

/// One job's directories. Remove with [`JobDir::remove`]; dropping removes too (blocking).
#[derive(Debug)]
pub struct JobDir {
    pub root: PathBuf,
    pub work: PathBuf,
    pub home: PathBuf,
    pub tmp: PathBuf,
    removed: bool,
}

impl WorkRoot {
    /// Lock `<base>/<runner id>` and clear what a crashed run left there: the processes of
    /// the run `left` (the last holder of the runner's lock, gone) and every job directory.
    /// `run` is this run's id ([`super::holder::Holder::run`]).
    ///
    /// # Errors
    /// The directory cannot be created, or another process holds the lock.
    /// `others`: jobs run as other users, who must be able to search (not list) it.
    pub fn open(
        base: &Path,
        runner: Uuid,
        others: bool,
        run: Uuid,
        left: Option<Uuid>,
    ) -> anyhow::Result<Self> {
        fs::create_dir_all(base).with_context(|| format!("creating {}", base.display()))?;
        // Absolute, so a job's TMPDIR and HOME mean the same from any working directory.
        let base =
            &fs::canonicalize(base).with_context(|| format!("resolving {}", base.display()))?;
        let lock_path = base.join(format!("{runner}.lock"));
        let file = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .with_context(|| format!("opening {}", lock_path.display()))?;
        let lock = Flock::lock(file, FlockArg::LockExclusiveNonblock).map_err(|(_, e)| {
            anyhow::anyhow!(
                "another process is running this runner ({} is locked: {e}); \
                 one runner configuration runs once at a time",
                lock_path.display()
            )
        })?;
        if let Some(left) = left {
            kill_orphans(runner, left);
        }
        let path = base.join(runner.to_string());
        if path.exists() {
            for entry in fs::read_dir(&path)? {
                let entry = entry?;
                tracing::info!(path = %entry.path().display(), "removing a left-over job directory");
                force_remove(&entry.path())
                    .with_context(|| format!("removing {}", entry.path().display()))?;
            }
        }
        fs::create_dir_all(&path)?;
        let mode = if others { 0o711 } else { 0o700 };
        fs::set_permissions(&path, fs::Permissions::from_mode(mode))?;
        Ok(Self {
            path,
            run,
            _lock: lock,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// This run's id, in every job's environment as `LEASEHOLD_RUNNER_RUN`.
    pub fn run(&self) -> Uuid {
        self.run
    }

    /// A fresh directory for `name` (a job id, or a probe), the runner's until
    /// [`JobDir::hand_to`] gives it to the job's user.
    ///
    /// # Errors
    /// The directories cannot be created.
    pub fn job_dir(&self, name: &str) -> io::Result<JobDir> {
        let root = self.path.join(name);
        if root.exists() {
            force_remove(&root)?;
        }
        let dir = JobDir {
            work: root.join("work"),
            home: root.join("home"),
            tmp: root.join("tmp"),
            root,
            removed: false,
        };
        fs::create_dir(&dir.root)?;
        fs::set_permissions(&dir.root, fs::Permissions::from_mode(0o700))?;
        for d in [&dir.work, &dir.home, &dir.tmp] {
            fs::create_dir(d)?;
        }
        Ok(dir)
    }
}

impl JobDir {
    /// Give the directory and everything in it (a checkout) to `owner`, when the job runs as
    /// another user; off the async threads. Until then nothing of that user can reach it.
    ///
    /// # Errors
    /// A file could not be handed over.
    pub async fn hand_to(&self, owner: Option<&JobUser>) -> io::Result<()> {
        let Some(u) = owner else { return Ok(()) };
        let (root, uid, gid) = (self.root.clone(), u.uid, u.gid);
        tokio::task::spawn_blocking(move || hand_to(&root, uid, gid))
            .await
            .map_err(io::Error::other)?
    }

    /// Remove the job's directories, off the async threads.
    pub async fn remove(mut self) {
        self.removed = true;
        let root = self.root.clone();
        let result = tokio::task::spawn_blocking(move || force_remove(&root)).await;
        if !matches!(result, Ok(Ok(()))) {
            tracing::warn!(path = %self.root.display(), "could not remove a job directory; it is cleared at the next start");
        }
    }
}

impl Drop for JobDir {
    fn drop(&mut self) {
        if !self.removed {
            let _ = force_remove(&self.root);
        }
    }
}

/// Give a directory and everything in it (a checkout) to the job's user (`--job-user`): the
/// runner fetched it as itself, the command runs as that user and must be able to write there.
///
/// The walk goes by file descriptor and never follows a link: each directory is opened
/// `O_NOFOLLOW` relative to the one above it, each entry is handed over with
/// `fchownat(AT_SYMLINK_NOFOLLOW)` and each directory with `fchown` on the descriptor opened,
/// children first, `dir` itself last (a 0700 job root keeps everything of that uid out until
/// then). An entry swapped for a link meanwhile is a link handed over, never its target; a
/// file with other hard links is left alone (it may be a name for a file outside the tree).
///
/// # Errors
/// A file could not be handed over.
pub fn hand_to(dir: &Path, uid: u32, gid: u32) -> std::io::Result<()> {
    let mut d = Dir::open(dir, DIR_FLAGS, Mode::empty())?;
    chown_tree(&mut d, Uid::from_raw(uid), Gid::from_raw(gid))
}

/// Open a directory without following a link, close-on-exec.
const DIR_FLAGS: OFlag = OFlag::O_RDONLY
    .union(OFlag::O_DIRECTORY)
    .union(OFlag::O_NOFOLLOW)
    .union(OFlag::O_CLOEXEC);

/// The names in `dir` but `.` and `..`.
fn names(dir: &mut Dir) -> nix::Result<Vec<CString>> {
    let mut out = Vec::new();
    for e in dir.iter() {
        let name = e?.file_name().to_owned();
        if name.as_bytes() != b"." && name.as_bytes() != b".." {
            out.push(name);
        }
    }
    Ok(out)
}

/// What `name` in `dir` is, without following a link; `None` when it is gone.
fn entry(dir: &Dir, name: &CStr) -> nix::Result<Option<FileStat>> {
    match fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
        Err(Errno::ENOENT) => Ok(None),
        other => other.map(Some),
    }
}

fn is_dir(st: &FileStat) -> bool {
    SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFDIR
}

fn chown_tree(dir: &mut Dir, uid: Uid, gid: Gid) -> io::Result<()> {
    for name in names(dir)? {
        let Some(st) = entry(dir, &name)? else {
            continue;
        };
        if is_dir(&st) {
            match Dir::openat(&*dir, name.as_c_str(), DIR_FLAGS, Mode::empty()) {
                Ok(mut child) => {
                    chown_tree(&mut child, uid, gid)?;
                    continue;
                }
                // Swapped for a link or a file since: hand over the entry itself, below.
                Err(Errno::ELOOP | Errno::ENOTDIR) => {}
                Err(Errno::ENOENT) => continue,
                Err(e) => return Err(e.into()),
            }
        } else if st.st_nlink > 1 && st.st_uid != uid.as_raw() {
            tracing::warn!(name = %name.to_string_lossy(), "not handing over a file with other hard links");
            continue;
        }
        match fchownat(
            &*dir,
            name.as_c_str(),
            Some(uid),
            Some(gid),
            AtFlags::AT_SYMLINK_NOFOLLOW,
        ) {
            Ok(()) | Err(Errno::ENOENT) => {}
            Err(e) => return Err(e.into()),
        }
    }
    fchown(&*dir, Some(uid), Some(gid))?;
    Ok(())
}

/// Kill the process groups of jobs the run `left` of `runner` left running (it was killed
/// before it could stop them). Only the holder of the runner's lock calls this, with the run
/// that held it last, so every process carrying both ids in its environment is an orphan of a
/// dead run; jobs of any other process (another copy of the configuration) are left alone.
/// Processes of other users are not readable and are left alone.
fn kill_orphans(runner: Uuid, left: Uuid) {
    use nix::sys::signal::{kill, killpg, Signal};
    use nix::unistd::{getpgid, Pid};
    let needle = format!("LEASEHOLD_RUNNER_ID={runner}");
    let run = format!("{}={left}", super::holder::RUN_VAR);
    let me = std::process::id() as i32;
    let my_group = getpgid(None).map_or(me, Pid::as_raw);
    let Ok(procs) = fs::read_dir("/proc") else {
        return;
    };
    for entry in procs.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        if pid == me {
            continue;
        }
        let Ok(environ) = fs::read(entry.path().join("environ")) else {
            continue;
        };
        let has = |want: &str| environ.split(|&b| b == 0).any(|var| var == want.as_bytes());
        if has(&needle) && has(&run) {
            let pid = Pid::from_raw(pid);
            tracing::warn!(
                pid = pid.as_raw(),
                "killing a process a crashed run of this runner left behind"
            );
            if let Ok(pgid) = getpgid(Some(pid)) {
                // A job leads its own group; never signal ours.
                if pgid.as_raw() > 1 && pgid.as_raw() != my_group {
                    let _ = killpg(pgid, Signal::SIGKILL);
                }
            }
            let _ = kill(pid, Signal::SIGKILL);
        }
    }
}

/// `rm -rf`, also through directories a job made read-only (as Go's module cache does).
///
/// # Errors
/// What is left cannot be removed even after making directories writable.
pub fn force_remove(path: &Path) -> io::Result<()> {
    match fs::symlink_metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
        Ok(m) if !m.is_dir() => return fs::remove_file(path),
        Ok(_) => {}
    }
    if fs::remove_dir_all(path).is_ok() {
        return Ok(());
    }
    make_writable(path);
    match fs::remove_dir_all(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

/// Make `dir` and every directory below it 0700, by file descriptor, never following a link
/// (a job may have swapped a directory for a link to one of the runner's).
fn make_writable(dir: &Path) {
    if let Ok(mut d) = Dir::open(dir, DIR_FLAGS, Mode::empty()) {
        writable_tree(&mut d);
    }
}

fn writable_tree(dir: &mut Dir) {
    let _ = fchmod(&*dir, Mode::S_IRWXU);
    let Ok(names) = names(dir) else { return };
    for name in names {
        if entry(dir, &name)
            .ok()
            .flatten()
            .is_some_and(|st| is_dir(&st))
        {
            if let Ok(mut child) = Dir::openat(&*dir, name.as_c_str(), DIR_FLAGS, Mode::empty()) {
                writable_tree(&mut child);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_checkout_is_handed_to_the_job_user_whole() {
        use std::os::unix::fs::MetadataExt;
        if !nix::unistd::geteuid().is_root() {
            eprintln!("skipping: handing files to another user needs root");
            return;
        }
        let dir = std::env::temp_dir().join(format!("lh-hand-{}", uuid::Uuid::now_v7()));
        std::fs::create_dir_all(dir.join(".git/objects")).unwrap();
        std::fs::write(dir.join(".git/objects/x"), "x").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", dir.join("link")).unwrap();
        hand_to(&dir, 65534, 65534).unwrap();
        for p in [dir.clone(), dir.join(".git/objects/x")] {
            assert_eq!(
                std::fs::metadata(&p).unwrap().uid(),
                65534,
                "{}",
                p.display()
            );
        }
        assert_eq!(
            std::fs::symlink_metadata(dir.join("link")).unwrap().uid(),
            65534
        );
        assert_eq!(
            std::fs::metadata("/etc/passwd").unwrap().uid(),
            0,
            "links not followed"
        );
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[tokio::test]
    async fn a_job_directory_is_the_runners_until_it_is_handed_over_whole() {
        use std::os::unix::fs::MetadataExt;
        if !nix::unistd::geteuid().is_root() {
            eprintln!("skipping: handing files to another user needs root");
            return;
        }
        let base = std::env::temp_dir().join(format!("lh-work-{}", Uuid::now_v7()));
        let root = WorkRoot::open(&base, Uuid::now_v7(), true, Uuid::now_v7(), None).unwrap();
        let dir = root.job_dir("job").unwrap();
        let meta = fs::metadata(&dir.root).unwrap();
        assert_eq!(
            (meta.uid(), meta.mode() & 0o777),
            (0, 0o700),
            "no one else gets in"
        );
        fs::write(dir.work.join("checked-out"), "x").unwrap();
        let user = JobUser::of_uid(65534);
        dir.hand_to(Some(&user)).await.unwrap();
        for p in [
            &dir.root,
            &dir.work,
            &dir.home,
            &dir.tmp,
            &dir.work.join("checked-out"),
        ] {
            assert_eq!(fs::metadata(p).unwrap().uid(), 65534, "{}", p.display());
        }
        dir.remove().await;
        drop(root);
        fs::remove_dir_all(base).unwrap();
    }

    /// Issue 35 row 1: while the hand-over runs, something of the job's uid (here a thread)
    /// keeps swapping a directory of the tree for a link to a root-only directory holding
    /// files of the same names; no file outside the job directory changes owner.
    #[test]
    fn a_hand_over_never_follows_a_directory_swapped_for_a_link() {
        use std::os::unix::fs::MetadataExt;
        use std::sync::atomic::{AtomicBool, Ordering};
        if !nix::unistd::geteuid().is_root() {
            eprintln!("skipping: handing files to another user needs root");
            return;
        }
        let base = std::env::temp_dir().join(format!("lh-swap-{}", Uuid::now_v7()));
        let (tree, outside) = (base.join("job"), base.join("root-only"));
        let c = tree.join("work/c");
        for d in [&c, &outside] {
            fs::create_dir_all(d.join("sub")).unwrap();
            for i in 0..300 {
                fs::write(d.join(format!("f{i}")), "x").unwrap();
                fs::write(d.join("sub").join(format!("f{i}")), "x").unwrap();
            }
        }
        fs::set_permissions(&outside, fs::Permissions::from_mode(0o700)).unwrap();
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let swapper = std::thread::spawn({
            let (stop, c, outside) = (stop.clone(), c.clone(), outside.clone());
            move || {
                let real = c.with_file_name("c.real");
                while !stop.load(Ordering::Relaxed) {
                    if fs::rename(&c, &real).is_ok() {
                        let _ = std::os::unix::fs::symlink(&outside, &c);
                        std::thread::yield_now();
                        let _ = fs::remove_file(&c);
                        let _ = fs::rename(&real, &c);
                    }
                }
            }
        });
        for _ in 0..100 {
            let _ = hand_to(&tree, 65534, 65534);
        }
        stop.store(true, Ordering::Relaxed);
        swapper.join().unwrap();
        let mut moved = Vec::new();
        for d in [outside.clone(), outside.join("sub")] {
            for e in fs::read_dir(&d).unwrap().flatten() {
                if e.metadata().unwrap().uid() != 0 {
                    moved.push(e.path());
                }
            }
            if fs::metadata(&d).unwrap().uid() != 0 {
                moved.push(d);
            }
        }
        let _ = fs::remove_dir_all(&base);
        assert!(
            moved.is_empty(),
            "{} files outside the job directory changed owner: {:?}",
            moved.len(),
            &moved[..moved.len().min(5)]
        );
    }

    #[test]
    fn the_root_is_exclusive_and_left_overs_are_cleared() {
        let base = std::env::temp_dir().join(format!("lh-work-{}", Uuid::now_v7()));
        let runner = Uuid::now_v7();
        let root = WorkRoot::open(&base, runner, false, Uuid::now_v7(), None).unwrap();
        let dir = root.job_dir("job").unwrap();
        let ro = dir.work.join("ro");
        fs::create_dir(&ro).unwrap();
        fs::write(ro.join("f"), "x").unwrap();
        fs::set_permissions(&ro, fs::Permissions::from_mode(0o500)).unwrap();
        std::mem::forget(dir); // as a crash would
        assert!(
            WorkRoot::open(&base, runner, false, Uuid::now_v7(), None).is_err(),
            "second opener refused"
        );
        drop(root);
        let root = WorkRoot::open(&base, runner, false, Uuid::now_v7(), None).unwrap();
        assert_eq!(fs::read_dir(root.path()).unwrap().count(), 0);
        drop(root);
        fs::remove_dir_all(base).unwrap();
    }
}
