//! Starting `leasehold serve` as a child process, for the tests, the benchmark and the drill,
//! which need a real replica process (to kill it, signal it, or measure it apart from
//! themselves).
//!
//! Invariants: [`ServeProcess::start`] returns only once the replica listens, with the URL it
//! printed on its first line ([`LISTENING`]); the child's standard output is drained for its
//! whole life, so it never blocks on a full pipe; the child is killed when its handle drops,
//! so a failed test or an aborted benchmark leaves nothing running (under a [`WRAPPER`], the
//! wrapper is that child); and a child started directly stops by itself once this process is
//! gone ([`PARENT_PID`]), which covers what a drop cannot: this process killed by a signal.

use std::ffi::OsStr;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use anyhow::Context;
use tokio::io::AsyncBufReadExt;
use tokio::process::{Child, Command};

/// What `leasehold serve` prints, followed by its base URL, once it listens.
pub const LISTENING: &str = "leasehold listening on ";

/// The variable naming a program to run each replica under, its command line after it (for
/// profiling the benchmark's replicas; unset, a replica runs directly). What is read of the
/// process, such as its resident memory, and what is signalled, is then the wrapper: a wrapper
/// that runs the replica as a child of its own (heaptrack does) leaves it running when it is
/// killed, so the module's invariant holds only for one that `exec`s it or passes signals on,
/// and a profiling run ends with `pkill -TERM -f 'leasehold serve'` (docs/perf.md).
pub const WRAPPER: &str = "LEASEHOLD_SERVE_WRAPPER";

/// The variable naming the process that started a replica: the replica stops, as on SIGTERM,
/// once its parent is no longer that process (it died and the replica was handed to another).
/// A handle's drop kills the child, but a benchmark or a drill killed by SIGTERM or SIGKILL
/// runs no drop, and its replicas went on serving a database that was going away. Set only for
/// a replica started directly: under a [`WRAPPER`] the replica's parent is the wrapper.
pub const PARENT_PID: &str = "LEASEHOLD_PARENT_PID";

/// How long a replica may take to listen (it migrates first, under an advisory lock).
pub const START_WITHIN: Duration = Duration::from_secs(60);

/// A running `leasehold serve` child and the URL it listens on.
pub struct ServeProcess {
    pub child: Child,
    /// `http://127.0.0.1:PORT`, or `https://...` when it serves TLS.
    pub url: String,
}

impl ServeProcess {
    /// Start `exe serve` on `127.0.0.1:0` against `database_url` with `LEASEHOLD_LOG=warn`, then
    /// `env` (which may override it), its standard error going to `stderr`.
    ///
    /// # Errors
    /// It could not be spawned, or exited or did not listen within [`START_WITHIN`].
    pub async fn start<K, V>(
        exe: impl AsRef<OsStr>,
        database_url: &str,
        env: impl IntoIterator<Item = (K, V)>,
        stderr: Stdio,
    ) -> anyhow::Result<Self>
    where
        K: AsRef<OsStr>,
        V: AsRef<OsStr>,
    {
        Self::start_on(exe, "127.0.0.1:0", database_url, env, stderr).await
    }

    /// [`ServeProcess::start`] listening on `listen` (a fixed port, for a replica that must
    /// come back where it was).
    ///
    /// # Errors
    /// It could not be spawned, or exited or did not listen within [`START_WITHIN`].
    pub async fn start_on<K, V>(
        exe: impl AsRef<OsStr>,
        listen: &str,
        database_url: &str,
        env: impl IntoIterator<Item = (K, V)>,
        stderr: Stdio,
    ) -> anyhow::Result<Self>
    where
        K: AsRef<OsStr>,
        V: AsRef<OsStr>,
    {
        // A profiler to run the replica under (`heaptrack`, `perf record --`, ...): docs/perf.md.
        let mut command = match std::env::var_os(WRAPPER) {
            Some(wrapper) => {
                let mut command = Command::new(wrapper);
                command.arg(exe.as_ref());
                command
            }
            None => {
                let mut command = Command::new(exe);
                command.env(PARENT_PID, std::process::id().to_string());
                command
            }
        };
        let mut child = command
            .args(["serve", "--listen", listen, "--database-url", database_url])
            .env("LEASEHOLD_LOG", "warn")
            .envs(env)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .kill_on_drop(true)
            .spawn()
            .context("spawning leasehold serve")?;
        let stdout = child.stdout.take().context("leasehold serve's stdout")?;
        let mut lines = tokio::io::BufReader::new(stdout).lines();
        let url = tokio::time::timeout(START_WITHIN, async {
            while let Some(line) = lines.next_line().await? {
                if let Some(url) = line.strip_prefix(LISTENING) {
                    return Ok(url.trim().to_owned());
                }
            }
            anyhow::bail!("leasehold serve exited before listening")
        })
        .await
        .with_context(|| format!("leasehold serve did not listen within {START_WITHIN:?}"))??;
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Ok(Self { child, url })
    }

    /// The child's process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// SIGKILL, and wait for it: no chance to clean up.
    ///
    /// # Errors
    /// The child could not be signalled or waited for.
    pub async fn kill9(&mut self) -> std::io::Result<()> {
        self.child.kill().await
    }

    /// SIGTERM (an orderly drain), then its exit status.
    ///
    /// # Errors
    /// It had already been reaped, or did not exit `within`.
    pub async fn terminate(&mut self, within: Duration) -> anyhow::Result<ExitStatus> {
        let pid = self.pid().context("leasehold serve already exited")?;
        let pid = nix::unistd::Pid::from_raw(i32::try_from(pid)?);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM)?;
        Ok(tokio::time::timeout(within, self.child.wait())
            .await
            .context("leasehold serve did not exit after SIGTERM")??)
    }
}
