//! Uploading a command job's artifacts: the files under its work directory that its
//! `"artifacts"` globs match, once the command has ended (whatever its exit), with progress
//! as `artifact` events.
//!
//! Invariant: a job is hostile, and this runs as the runner (root, maybe). The walk never
//! leaves the work directory and never follows a link: every directory and file is opened
//! relative to the directory already open above it, with `O_NOFOLLOW`, so no path a job
//! swaps for a symbolic link is followed, even mid-walk; symbolic links, hard-linked files
//! (more than one link: the other could be anywhere, such as `/etc/shadow`), other file
//! systems and anything but regular files are skipped, by what the opened descriptor says.
//! Where the job has its own user, the walk runs on a thread of its own whose file-system
//! identity is that user's (`setfsuid`/`setfsgid`), so the runner opens nothing the job
//! could not. A file is uploaded at the size it had when opened, never more, and the
//! service's own limit (`413 too_large`) is reported and the next file goes on; past one of
//! the service's artifact bounds (`413 quota_exceeded`) the uploads stop.

use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use nix::dir::Dir;
use nix::fcntl::{openat, OFlag};
use nix::sys::stat::{fstat, Mode, SFlag};
use serde_json::json;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::servers::Servers;
use super::workdir::JobUser;
use crate::wire::{self, LeasedJob};

/// Deepest directory the walk enters, and most entries it looks at: a job cannot make the
/// runner walk forever.
const MAX_DEPTH: usize = 64;
const MAX_ENTRIES: usize = 200_000;
/// Bytes read from a file per read.
const READ: usize = 256 * 1024;
/// How often a long upload reports its progress.
const PROGRESS_EVERY: Duration = Duration::from_secs(2);

// ---- globs ------------------------------------------------------------------------------

/// `*` and `?` within one path segment (a leading `.` included).
fn segment_matches(pattern: &[u8], name: &[u8]) -> bool {
    let (mut p, mut n) = (0, 0);
    let (mut star, mut star_n) = (None, 0);
    while n < name.len() {
        if p < pattern.len() && (pattern[p] == b'?' || pattern[p] == name[n]) {
            p += 1;
            n += 1;
        } else if p < pattern.len() && pattern[p] == b'*' {
            star = Some(p);
            star_n = n;
            p += 1;
        } else if let Some(s) = star {
            p = s + 1;
            star_n += 1;
            n = star_n;
        } else {
            return false;
        }
    }
    pattern[p..].iter().all(|&b| b == b'*')
}

/// Whether `path` (segments) matches `glob` (segments, `**` for any number of them); with
/// `prefix`, whether something under the directory `path` could.
fn glob_matches(glob: &[&str], path: &[&str], prefix: bool) -> bool {
    match (glob.first(), path.first()) {
        (None, None) => true,
        (None, Some(_)) => false,
        (Some(_), None) => prefix || glob.iter().all(|g| *g == "**"),
        (Some(&"**"), Some(_)) => {
            glob_matches(&glob[1..], path, prefix) || glob_matches(glob, &path[1..], prefix)
        }
        (Some(g), Some(s)) => {
            segment_matches(g.as_bytes(), s.as_bytes())
                && glob_matches(&glob[1..], &path[1..], prefix)
        }
    }
}

/// A job's artifact globs.
pub struct Globs(Vec<Vec<String>>);

impl Globs {
    pub fn new(globs: &[String]) -> Self {
        Self(
            globs
                .iter()
                .map(|g| {
                    g.split('/')
                        .filter(|s| !s.is_empty() && *s != ".")
                        .map(str::to_owned)
                        .collect()
                })
                .collect(),
        )
    }

    fn any(&self, path: &[&str], prefix: bool) -> bool {
        self.0.iter().any(|g| {
            let g: Vec<&str> = g.iter().map(String::as_str).collect();
            glob_matches(&g, path, prefix)
        })
    }

    /// Whether the file `path` is an artifact: a glob matches it, or a directory above it.
    pub fn file(&self, path: &[&str]) -> bool {
        (1..=path.len()).any(|n| self.any(&path[..n], false))
    }

    /// Whether the walk need enter directory `path`.
    pub fn enter(&self, path: &[&str]) -> bool {
        self.any(path, true) || (1..=path.len()).any(|n| self.any(&path[..n], false))
    }
}

// ---- the walk ---------------------------------------------------------------------------

/// What the walk hands the uploader, one at a time.
pub enum Found {
    /// A regular file, open, with its size when opened.
    File {
        path: String,
        file: std::fs::File,
        size: u64,
    },
    /// A match that is not uploaded, and why.
    Skipped { path: String, reason: String },
}

/// Walk `root` for artifacts matching `globs`, as `user` where given, sending each to `tx`
/// (the uploader takes them one at a time). Runs on its own thread: its file-system identity
/// is changed for the walk and dies with the thread.
pub fn spawn_walk(
    root: PathBuf,
    globs: Globs,
    user: Option<JobUser>,
    tx: mpsc::Sender<Found>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("leasehold-artifacts".into())
        .spawn(move || {
            if let Some(u) = &user {
                nix::unistd::setfsgid(nix::unistd::Gid::from_raw(u.gid));
                nix::unistd::setfsuid(nix::unistd::Uid::from_raw(u.uid));
            }
            let mut walk = Walk {
                globs,
                tx,
                seen: 0,
                device: 0,
            };
            let opened = nix::fcntl::open(
                &root,
                OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
                Mode::empty(),
            );
            match opened {
                Ok(fd) => {
                    walk.device = fstat(&fd).map(|s| s.st_dev).unwrap_or(0);
                    walk.dir(fd, &mut Vec::new());
                }
                Err(e) => walk.skip(
                    String::new(),
                    format!("cannot open the work directory: {e}"),
                ),
            }
        })
}

struct Walk {
    globs: Globs,
    tx: mpsc::Sender<Found>,
    seen: usize,
    device: u64,
}

impl Walk {
    fn skip(&self, path: String, reason: String) {
        let _ = self.tx.blocking_send(Found::Skipped { path, reason });
    }

    /// The entries of directory `fd` (at `at` under the root), in name order.
    fn dir(&mut self, fd: OwnedFd, at: &mut Vec<String>) {
        let names = match nix::unistd::dup(&fd).and_then(Dir::from_fd) {
            Ok(mut d) => {
                let mut names: Vec<Vec<u8>> = d
                    .iter()
                    .filter_map(Result::ok)
                    .map(|e| e.file_name().to_bytes().to_vec())
                    .filter(|n| n != b"." && n != b"..")
                    .collect();
                names.sort();
                names
            }
            Err(e) => {
                self.skip(at.join("/"), format!("cannot list this directory: {e}"));
                return;
            }
        };
        for name in names {
            self.seen += 1;
            if self.seen > MAX_ENTRIES {
                if self.seen == MAX_ENTRIES + 1 {
                    self.skip(
                        at.join("/"),
                        format!("the walk stops after {MAX_ENTRIES} entries"),
                    );
                }
                return;
            }
            let Ok(name) = String::from_utf8(name) else {
                continue;
            };
            at.push(name);
            self.entry(&fd, at);
            at.pop();
        }
    }

    /// One entry, opened without following it, and judged by what was opened.
    fn entry(&mut self, parent: &OwnedFd, at: &mut Vec<String>) {
        let segments: Vec<&str> = at.iter().map(String::as_str).collect();
        let (is_file, enter) = (self.globs.file(&segments), self.globs.enter(&segments));
        if !is_file && !enter {
            return;
        }
        let path = at.join("/");
        let name = at.last().cloned().unwrap_or_default();
        // O_PATH-free: O_RDONLY | O_NOFOLLOW fails with ELOOP on a symbolic link; O_NONBLOCK
        // keeps a FIFO from blocking the open.
        let flags = OFlag::O_RDONLY
            | OFlag::O_NOFOLLOW
            | OFlag::O_CLOEXEC
            | OFlag::O_NONBLOCK
            | OFlag::O_NOCTTY;
        let fd = match openat(parent.as_fd(), name.as_str(), flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(nix::errno::Errno::ELOOP) => {
                if is_file {
                    self.skip(path, "a symbolic link: never followed".into());
                }
                return;
            }
            Err(e) => {
                if is_file {
                    self.skip(path, format!("cannot open: {e}"));
                }
                return;
            }
        };
        let Ok(stat) = fstat(&fd) else {
            return;
        };
        let kind = SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT;
        if stat.st_dev != self.device {
            if is_file {
                self.skip(path, "on another file system: not uploaded".into());
            }
            return;
        }
        if kind == SFlag::S_IFDIR {
            if at.len() < MAX_DEPTH {
                self.dir(fd, at);
            }
            return;
        }
        if !is_file {
            return;
        }
        if kind != SFlag::S_IFREG {
            self.skip(path, "not a regular file".into());
            return;
        }
        if stat.st_nlink > 1 {
            self.skip(
                path,
                "a hard link (the file has other names): never followed".into(),
            );
            return;
        }
        if !wire::artifacts::is_valid_path(&path) {
            self.skip(path, wire::artifacts::PATH_RULE.into());
            return;
        }
        let file = std::fs::File::from(fd);
        let size = stat.st_size.max(0) as u64;
        let _ = self.tx.blocking_send(Found::File { path, file, size });
    }
}

// ---- the upload -------------------------------------------------------------------------

/// How the uploads of a job went.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Uploaded {
    pub files: usize,
    pub skipped: usize,
    pub failed: usize,
}

/// Upload the artifacts `globs` name under `root` for `job`, reporting each as an `artifact`
/// event. Stops early when the service says the job is not ours any more (`lost` fires).
pub async fn upload(
    servers: &Arc<Servers>,
    job: &LeasedJob,
    root: &Path,
    globs: &[String],
    user: Option<&JobUser>,
    lost: &CancellationToken,
) -> Uploaded {
    let mut done = Uploaded::default();
    let (tx, mut rx) = mpsc::channel(1);
    let walker = match spawn_walk(root.to_owned(), Globs::new(globs), user.cloned(), tx) {
        Ok(w) => w,
        Err(e) => {
            tracing::error!(job = %job.id, error = %e, "cannot start the artifact walk");
            return done;
        }
    };
    while let Some(found) = rx.recv().await {
        if lost.is_cancelled() {
            break;
        }
        match found {
            Found::Skipped { path, reason } => {
                done.skipped += 1;
                event(
                    servers,
                    job,
                    json!({"state": "skipped", "path": path, "reason": reason}),
                )
                .await;
            }
            Found::File { path, file, size } => {
                match upload_one(servers, job, &path, Arc::new(file), size).await {
                    Ok(up) => {
                        done.files += 1;
                        event(
                            servers,
                            job,
                            json!({"state": "uploaded", "path": up.path, "size": up.size, "sha256": up.sha256}),
                        )
                        .await;
                    }
                    Err(e) if e.is_conflict() && e.code() != Some("artifact_exists") => {
                        tracing::warn!(job = %job.id, reason = e.code().unwrap_or("?"), "the job is not ours any more; artifacts stop");
                        lost.cancel();
                        break;
                    }
                    Err(e) => {
                        done.failed += 1;
                        tracing::warn!(job = %job.id, %path, error = %e, "an artifact was not uploaded");
                        event(
                            servers,
                            job,
                            json!({"state": "failed", "path": path, "code": e.code(), "message": e.to_string()}),
                        )
                        .await;
                        // The job's (or its workspace's) bound: what comes next is refused too.
                        if e.code() == Some("quota_exceeded") {
                            break;
                        }
                    }
                }
            }
        }
    }
    drop(rx);
    let _ = tokio::task::spawn_blocking(move || walker.join()).await;
    done
}

/// How long an upload refused at a transfer cap (`429 rate_limited`: the replica runs as many
/// transfers as it allows, or this runner does) waits before it is tried again.
const BUSY_PAUSE: Duration = Duration::from_secs(2);

/// One file, streamed from where it is open (positioned reads: a retry through another
/// replica starts again from byte 0), its progress reported every [`PROGRESS_EVERY`]. Refused
/// at a transfer cap, it is tried again after [`BUSY_PAUSE`] for as long as its patience lasts.
async fn upload_one(
    servers: &Arc<Servers>,
    job: &LeasedJob,
    path: &str,
    file: Arc<std::fs::File>,
    size: u64,
) -> Result<wire::ArtifactUploaded, super::servers::CallError> {
    // Ten minutes, and a second more per MiB: a slow link is not a dead one.
    let patience = Duration::from_secs(600 + size / (1024 * 1024));
    let until = Instant::now() + patience;
    loop {
        match upload_until(servers, job, path, file.clone(), size, until, patience).await {
            Err(e) if e.code() == Some("rate_limited") && Instant::now() + BUSY_PAUSE < until => {
                tracing::info!(job = %job.id, %path, "the server runs as many transfers as it allows; trying again");
                tokio::time::sleep(BUSY_PAUSE).await;
            }
            r => return r,
        }
    }
}

/// [`upload_one`]'s one try, through any replica, until `until`.
async fn upload_until(
    servers: &Arc<Servers>,
    job: &LeasedJob,
    path: &str,
    file: Arc<std::fs::File>,
    size: u64,
    until: Instant,
    patience: Duration,
) -> Result<wire::ArtifactUploaded, super::servers::CallError> {
    let sent = Arc::new(AtomicU64::new(0));
    let call = servers.call(until, patience, |c| {
        let (file, sent) = (file.clone(), sent.clone());
        sent.store(0, Ordering::Relaxed);
        let body = reqwest::Body::wrap_stream(read_stream(file, size, sent));
        let (id, epoch) = (job.id, job.epoch);
        let path = path.to_owned();
        async move { c.upload_artifact(id, epoch, &path, body, Some(size)).await }
    });
    tokio::pin!(call);
    let mut tick = tokio::time::interval_at(Instant::now() + PROGRESS_EVERY, PROGRESS_EVERY);
    loop {
        tokio::select! {
            r = &mut call => return r,
            _ = tick.tick() => {
                let n = sent.load(Ordering::Relaxed);
                event(servers, job, json!({"state": "uploading", "path": path, "sent": n, "size": size})).await;
            }
        }
    }
}

/// `size` bytes of `file` from its start, read a piece at a time off the runtime's threads.
fn read_stream(
    file: Arc<std::fs::File>,
    size: u64,
    sent: Arc<AtomicU64>,
) -> impl futures_util::Stream<Item = std::io::Result<Bytes>> + Send + 'static {
    futures_util::stream::try_unfold(0u64, move |at| {
        let (file, sent) = (file.clone(), sent.clone());
        async move {
            if at >= size {
                return Ok(None);
            }
            let n = (size - at).min(READ as u64) as usize;
            let piece = tokio::task::spawn_blocking(move || {
                let mut buf = vec![0u8; n];
                file.read_exact_at(&mut buf, at).map(|()| buf)
            })
            .await
            .map_err(std::io::Error::other)??;
            sent.fetch_add(n as u64, Ordering::Relaxed);
            Ok(Some((Bytes::from(piece), at + n as u64)))
        }
    })
}

/// Append one `artifact` event; a failure is logged, never fatal.
async fn event(servers: &Servers, job: &LeasedJob, data: serde_json::Value) {
    let (id, epoch) = (job.id, job.epoch);
    let r = servers
        .call(
            Instant::now() + Duration::from_secs(30),
            Duration::from_secs(10),
            |c| {
                let data = data.clone();
                async move {
                    c.append_events(
                        id,
                        epoch,
                        vec![wire::NewEvent {
                            kind: "artifact".into(),
                            data: Some(data),
                        }],
                    )
                    .await
                }
            },
        )
        .await;
    if let Err(e) = r {
        tracing::warn!(job = %id, error = %e, "an artifact event was not appended");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segs(p: &str) -> Vec<&str> {
        p.split('/').collect()
    }

    #[test]
    fn globs_match_by_segment() {
        let g = Globs::new(&[
            "dist/**".into(),
            "report.xml".into(),
            "logs/*.txt".into(),
            "out".into(),
        ]);
        for yes in [
            "dist/a",
            "dist/a/b/c.tar.gz",
            "report.xml",
            "logs/x.txt",
            "logs/.x.txt",
            "out/deep/file",
        ] {
            assert!(g.file(&segs(yes)), "{yes}");
        }
        for no in [
            "report.xml.bak",
            "sub/report.xml",
            "logs/x.log",
            "logs/a/x.txt",
            "distx/a",
            "outx",
        ] {
            assert!(!g.file(&segs(no)), "{no}");
        }
        assert!(g.enter(&segs("dist")) && g.enter(&segs("dist/a/b")) && g.enter(&segs("logs")));
        assert!(!g.enter(&segs("src")) && !g.enter(&segs("logs/a")));
        let any = Globs::new(&["**/*.xml".into()]);
        assert!(
            any.file(&segs("a.xml")) && any.file(&segs("a/b/c.xml")) && any.enter(&segs("a/b"))
        );
        assert!(segment_matches(b"a?c*", b"abcdef") && !segment_matches(b"a?c", b"ac"));
    }
}
