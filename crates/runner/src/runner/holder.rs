//! One runner configuration runs in one process on a machine, whatever its work directory.
//!
//! Invariants: a running runner holds an exclusive `flock` on a file keyed by the runner,
//! beside its configuration file (`runner.json.lock`; without a configuration file, beside
//! the work directory as `<runner id>.holder.lock`), for its whole life, taken before anything
//! else is touched. A second process with the same configuration finds it locked and refuses
//! to start, naming the holder. The file records the holder's run id, and every job is started
//! with `LEASEHOLD_RUNNER_RUN=<run id>`: the next holder sweeps only processes carrying the run
//! id the file names, that is what a crashed holder of this same lock left, never the jobs of
//! a live process (which holds the lock) nor of a copy of the configuration elsewhere.
//!
//! A copy of the configuration at another path is refused too where the machine has a runtime
//! directory for the runner's user (`/run/leasehold` as root, `/run/user/<uid>/leasehold`
//! otherwise): a second lock there, keyed by the runner id alone.

use std::fs::File;
use std::io::{Read, Seek, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use anyhow::Context;
use nix::fcntl::{Flock, FlockArg};
use uuid::Uuid;

/// The environment variable naming the run that started a job.
pub const RUN_VAR: &str = "LEASEHOLD_RUNNER_RUN";

/// The runner's lock, held for as long as this value lives.
pub struct Holder {
    run: Uuid,
    left: Option<Uuid>,
    path: PathBuf,
    _lock: Flock<File>,
    _machine: Option<Flock<File>>,
}

/// The machine's runtime directory for this user's runner locks, where there is one.
fn machine_dir() -> Option<PathBuf> {
    let uid = nix::unistd::Uid::effective();
    if uid.is_root() {
        return Some(PathBuf::from("/run/leasehold"));
    }
    let user = PathBuf::from(format!("/run/user/{uid}"));
    user.is_dir().then(|| user.join("leasehold"))
}

/// [`lock_file`], creating its directory.
fn lock(path: &Path, runner: Uuid) -> anyhow::Result<Flock<File>> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    lock_file(path, runner)
}

/// Lock `path` exclusively, or say which process holds it.
fn lock_file(path: &Path, runner: Uuid) -> anyhow::Result<Flock<File>> {
    let file = File::options()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("opening the runner's lock {}", path.display()))?;
    match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(lock) => Ok(lock),
        Err((mut file, _)) => {
            let mut said = String::new();
            let _ = file.read_to_string(&mut said);
            let field = |name: &str| {
                said.lines()
                    .find_map(|l| l.strip_prefix(name).map(str::trim).map(str::to_owned))
                    .unwrap_or_else(|| "?".to_owned())
            };
            anyhow::bail!(
                "refusing to start: runner {runner} is already running on this machine (pid {}, \
                 work dir {}; it holds {}); one runner configuration runs in one process: stop \
                 that one first, or enrol another runner (`leasehold runner connect` with a new \
                 join code and another --config) for a second process",
                field("pid "),
                field("work_dir "),
                path.display()
            )
        }
    }
}

/// Where the lock of `runner` is: beside `config`, else beside the work directory `work_dir`.
pub fn lock_path(config: Option<&Path>, work_dir: &Path, runner: Uuid) -> PathBuf {
    match config {
        Some(c) => {
            let c = std::fs::canonicalize(c).unwrap_or_else(|_| c.to_path_buf());
            let mut name = c.file_name().unwrap_or_default().to_os_string();
            name.push(".lock");
            c.with_file_name(name)
        }
        None => work_dir.join(format!("{runner}.holder.lock")),
    }
}

impl Holder {
    /// Lock `path` for this process, or refuse: another process runs this runner.
    ///
    /// # Errors
    /// The file cannot be opened, or another live process holds it (the message names it).
    pub fn acquire(path: &Path, runner: Uuid, work_dir: &Path) -> anyhow::Result<Self> {
        let mut lock = lock(path, runner)?;
        let mut machine = match machine_dir() {
            Some(dir) if std::fs::create_dir_all(&dir).is_ok() => Some(lock_file(
                &dir.join(format!("runner-{runner}.lock")),
                runner,
            )?),
            _ => None,
        };
        let mut before = String::new();
        let _ = lock.read_to_string(&mut before);
        let left = before
            .lines()
            .find_map(|l| l.strip_prefix("run "))
            .and_then(|r| r.trim().parse().ok());
        let run = Uuid::now_v7();
        let now = format!(
            "pid {}\nrun {run}\nrunner {runner}\nwork_dir {}\n",
            std::process::id(),
            work_dir.display()
        );
        for file in std::iter::once(&mut lock).chain(machine.as_mut()) {
            file.set_len(0)?;
            file.rewind()?;
            file.write_all(now.as_bytes())?;
        }
        Ok(Self {
            run,
            left,
            path: path.to_path_buf(),
            _lock: lock,
            _machine: machine,
        })
    }

    /// This run's id, given to every job it starts as [`RUN_VAR`].
    pub fn run(&self) -> Uuid {
        self.run
    }

    /// The run id of the last holder, which is gone (it no longer holds the lock): its jobs,
    /// if any still run, are orphans.
    pub fn left_behind(&self) -> Option<Uuid> {
        self.left
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_holder_is_refused_and_the_next_one_learns_the_last_run() {
        let dir = std::env::temp_dir().join(format!("lh-holder-{}", Uuid::now_v7().simple()));
        let runner = Uuid::now_v7();
        let path = lock_path(None, &dir, runner);
        let first = Holder::acquire(&path, runner, &dir).unwrap();
        assert_eq!(first.left_behind(), None);
        let refused = Holder::acquire(&path, runner, Path::new("/elsewhere"))
            .err()
            .unwrap()
            .to_string();
        assert!(refused.contains("already running"), "{refused}");
        assert!(
            refused.contains(&format!("pid {}", std::process::id())),
            "{refused}"
        );
        let run = first.run();
        drop(first);
        let next = Holder::acquire(&path, runner, &dir).unwrap();
        assert_eq!(next.left_behind(), Some(run));
        assert_ne!(next.run(), run);
        drop(next);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn the_lock_sits_beside_the_configuration() {
        let p = lock_path(
            Some(Path::new("/nonexistent/x/runner.json")),
            Path::new("/w"),
            Uuid::nil(),
        );
        assert_eq!(p, Path::new("/nonexistent/x/runner.json.lock"));
    }
}
