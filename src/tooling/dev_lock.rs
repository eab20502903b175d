//! The lock `leasehold dev` holds on its data directory for its whole life: an exclusive
//! `flock` on `<data dir>.lock` (beside the directory: `initdb` wants the directory itself
//! empty), whose text says who holds it and where it serves ([`Running`], JSON).
//!
//! Invariant: one `dev` at a time owns a data directory. A second one finds the lock taken and
//! reads where the first runs instead of touching its PostgreSQL; the kernel drops the lock
//! when its holder dies, however it died, so a crashed `dev` never blocks the next. What the
//! last holder wrote stays in the file after it is gone: the next holder reads it to recognise
//! a PostgreSQL that crashed `dev` left running ([`DevLock::previous`]).

use std::fs::File;
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};

use anyhow::Context;
use nix::fcntl::{Flock, FlockArg};
use serde::{Deserialize, Serialize};

/// What the holder of a dev lock says about itself.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Running {
    /// The `dev` process.
    pub pid: u32,
    /// Its base URL, once it listens.
    pub url: Option<String>,
    /// The certificate to trust when it serves HTTPS.
    pub ca_cert: Option<PathBuf>,
    /// The workspace of its admin key.
    pub workspace: Option<String>,
    /// Its PostgreSQL's postmaster and port, and where that keeps its data.
    pub postgres_pid: Option<u32>,
    pub postgres_port: Option<u16>,
    pub pg_data: Option<PathBuf>,
}

/// The lock, held while this value lives.
pub struct DevLock {
    file: Flock<File>,
    previous: Option<Running>,
}

/// `<data_dir>.lock`.
pub fn lock_path(data_dir: &Path) -> PathBuf {
    let mut name = data_dir.as_os_str().to_owned();
    name.push(".lock");
    PathBuf::from(name)
}

impl DevLock {
    /// Take the lock of `data_dir`, or learn who holds it: `Err(running)` with what the holder
    /// wrote (its pid at least, once it has started).
    ///
    /// # Errors
    /// The lock file cannot be created or read.
    pub fn take(data_dir: &Path) -> anyhow::Result<Result<DevLock, Running>> {
        let path = lock_path(data_dir);
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        let file = {
            use std::os::unix::fs::OpenOptionsExt;
            File::options()
                .create(true)
                .truncate(false)
                .read(true)
                .write(true)
                .mode(0o600)
                .open(&path)
                .with_context(|| format!("opening {}", path.display()))?
        };
        match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(mut file) => {
                let previous = read(&mut file);
                let mut lock = DevLock { file, previous };
                lock.record(&Running {
                    pid: std::process::id(),
                    ..Running::default()
                })?;
                Ok(Ok(lock))
            }
            Err((mut file, nix::errno::Errno::EWOULDBLOCK)) => {
                // The holder writes its pid as soon as it has the lock; an empty file means it
                // is between the two.
                Ok(Err(read(&mut file).unwrap_or_default()))
            }
            Err((_, e)) => Err(e).with_context(|| format!("locking {}", path.display())),
        }
    }

    /// What the last holder wrote before this one took the lock (a crashed `dev`'s server).
    pub fn previous(&self) -> Option<&Running> {
        self.previous.as_ref()
    }

    /// Say where this `dev` runs, for a second one to print.
    ///
    /// # Errors
    /// The file cannot be written.
    pub fn record(&mut self, running: &Running) -> anyhow::Result<()> {
        let text = serde_json::to_string(running)?;
        self.file.set_len(0)?;
        self.file.rewind()?;
        self.file.write_all(text.as_bytes())?;
        self.file.flush()?;
        Ok(())
    }
}

fn read(file: &mut File) -> Option<Running> {
    let mut text = String::new();
    file.rewind().ok()?;
    file.read_to_string(&mut text).ok()?;
    serde_json::from_str(&text).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_taker_reads_what_the_holder_wrote_and_the_next_holder_its_past() {
        let dir = std::env::temp_dir().join(format!("lh-devlock-{}", uuid::Uuid::now_v7()));
        let data = dir.join("dev-pg");
        let mut held = DevLock::take(&data).unwrap().expect("free");
        let running = Running {
            pid: std::process::id(),
            url: Some("http://127.0.0.1:8080".into()),
            postgres_pid: Some(42),
            ..Running::default()
        };
        held.record(&running).unwrap();
        assert_eq!(DevLock::take(&data).unwrap().err(), Some(running.clone()));
        drop(held);
        let next = DevLock::take(&data).unwrap().expect("free again");
        assert_eq!(next.previous(), Some(&running));
        drop(next);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
