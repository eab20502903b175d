//! Test support for end-to-end tests of the `leasehold` binary: `leasehold serve` replicas,
//! runners and CLI calls as real child processes, temporary directories, and process-group
//! inspection through `/proc`, and [`RunnerRig`], what a runner test starts from. Every child
//! is killed when its handle drops, so a failing test leaves nothing running.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use leasehold::client::Client;
use leasehold::domain::sealing::SealKey;
use leasehold::tooling::serve_process::ServeProcess;
use leasehold::wire;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tokio::process::{Child, Command};
use uuid::Uuid;

use crate::support::{eventually, TestApp};

pub const BIN: &str = env!("CARGO_BIN_EXE_leasehold");

/// Generous: these tests run many processes at once on small machines.
pub const LONG: Duration = Duration::from_secs(90);

/// What a runner test starts from: an app, alice (of workspace `acme`) with her key and a
/// client on replica 0, and a directory for runner configurations, logs and work.
pub struct RunnerRig {
    pub app: TestApp,
    pub key: String,
    pub alice: Client,
    pub dir: TempDir,
}

impl RunnerRig {
    /// `app` with a member key for alice, and a fresh directory named after `what`.
    pub async fn new(app: TestApp, what: &str) -> Self {
        Self::with_role(app, what, false).await
    }

    /// [`RunnerRig::new`] with an admin key for alice when `admin`.
    pub async fn with_role(app: TestApp, what: &str, admin: bool) -> Self {
        let key = app.key("acme", "alice", admin).await;
        let alice = Client::new(app.url(0), Some(key.clone()));
        Self {
            app,
            key,
            alice,
            dir: TempDir::new(what),
        }
    }

    pub fn url(&self) -> String {
        self.app.url(0)
    }

    /// A personal runner enrolled by alice against replica 0 (see [`enrol`]), its
    /// configuration in the rig's directory; `extra` goes to `leasehold runner connect`.
    pub async fn enrol(&self, extra: &[&str]) -> PathBuf {
        self.enrol_in(self.dir.path(), extra).await
    }

    /// [`RunnerRig::enrol`] with the configuration in `dir`.
    pub async fn enrol_in(&self, dir: &Path, extra: &[&str]) -> PathBuf {
        enrol(&self.alice, &[&self.url()], dir, false, extra).await
    }

    /// [`RunnerRig::enrol`] with `connect`, then [`RunnerRig::runner`] started with `run`: the
    /// configuration and the running runner.
    pub async fn start_runner(&self, connect: &[&str], run: &[&str]) -> (PathBuf, Proc) {
        let config = self.enrol(connect).await;
        let runner = self.runner(&config, run, &[]);
        (config, runner)
    }

    /// [`runner`] with `config`, working in the rig's `work` directory.
    pub fn runner(&self, config: &Path, extra: &[&str], envs: &[(&str, &str)]) -> Proc {
        runner(config, &self.dir.join("work"), extra, envs)
    }

    /// `leasehold job submit ARGS...` as alice, without waiting: the new job's id.
    pub async fn submit(&self, args: &[&str]) -> Uuid {
        job_id(
            &cli(
                &self.url(),
                &self.key,
                &[&["job", "submit"], args].concat(),
                LONG,
            )
            .await,
        )
    }

    /// [`submit_wait`] as alice.
    pub async fn submit_wait(&self, args: &[&str]) -> Output {
        submit_wait(&self.url(), &self.key, args).await
    }

    /// `leasehold job submit --wait -- sh -c SCRIPT` as alice.
    pub async fn sh(&self, script: &str) -> Output {
        self.submit_wait(&["--", "sh", "-c", script]).await
    }
}

/// A directory removed when dropped.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(what: &str) -> Self {
        let p = std::env::temp_dir().join(format!("lh-{what}-{}", Uuid::now_v7().simple()));
        std::fs::create_dir_all(&p).unwrap();
        Self(p)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    pub fn join(&self, p: &str) -> PathBuf {
        self.0.join(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A child process whose stderr goes to a log file; killed on drop.
pub struct Proc {
    pub child: Child,
    pub log: PathBuf,
}

impl Proc {
    pub fn pid(&self) -> Pid {
        Pid::from_raw(self.child.id().expect("running") as i32)
    }

    pub fn signal(&self, sig: Signal) {
        kill(self.pid(), sig).expect("signal the child");
    }

    /// What the process logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Wait for the process to exit, failing the test after `deadline`.
    pub async fn exit(&mut self, deadline: Duration) -> ExitStatus {
        match tokio::time::timeout(deadline, self.child.wait()).await {
            Ok(status) => status.unwrap(),
            Err(_) => panic!(
                "process did not exit within {deadline:?}; its log:\n{}",
                self.log()
            ),
        }
    }
}

/// `leasehold ARGS` with `envs`, its stderr in `log`, holding each of `held` open as the
/// descriptor number it is paired with (inheritable, as a shell's `8<file` leaves it).
fn spawn_holding(
    args: &[&str],
    envs: &[(&str, &str)],
    log: PathBuf,
    stdout: Stdio,
    held: Vec<(i32, std::os::fd::OwnedFd)>,
) -> Proc {
    use std::os::fd::AsRawFd;
    let file = std::fs::File::create(&log).unwrap();
    let mut cmd = Command::new(BIN);
    if !held.is_empty() {
        let pairs: Vec<(i32, i32)> = held.iter().map(|(n, fd)| (*n, fd.as_raw_fd())).collect();
        // SAFETY: dup2 and fcntl are async-signal-safe; nothing here allocates.
        unsafe {
            cmd.pre_exec(move || {
                for &(n, fd) in &pairs {
                    if nix::libc::dup2(fd, n) < 0 || nix::libc::fcntl(n, nix::libc::F_SETFD, 0) < 0
                    {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
    }
    let child = cmd
        .args(args)
        .envs(envs.iter().copied())
        .env_remove("LEASEHOLD_SERVER")
        .env_remove("LEASEHOLD_API_KEY")
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(file)
        .kill_on_drop(true)
        .spawn()
        .expect("start leasehold");
    Proc { child, log }
}

/// `leasehold serve` on port 0 against `database_url` (started by [`ServeProcess`]), its
/// stderr in a log under `dir`; returns it and its base URL.
pub async fn serve(database_url: &str, dir: &TempDir, envs: &[(&str, &str)]) -> (Proc, String) {
    let mut all = vec![
        ("LEASEHOLD_SWEEP_INTERVAL_MS", "200"),
        ("LEASEHOLD_RECHECK_INTERVAL_MS", "500"),
        ("LEASEHOLD_AUTH_BURST", "10000"),
        ("LEASEHOLD_AUTH_REFILL_PER_S", "1000"),
        ("LEASEHOLD_POOL_SIZE", "4"),
    ];
    all.extend_from_slice(envs);
    let log = dir.join(&format!("serve-{}.log", Uuid::now_v7().simple()));
    let file = std::fs::File::create(&log).unwrap();
    match ServeProcess::start(BIN, database_url, all, file.into()).await {
        Ok(ServeProcess { child, url }) => (Proc { child, log }, url),
        Err(e) => panic!(
            "serve did not start: {e:#}; log:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        ),
    }
}

/// `leasehold runner run --config CONFIG --work-dir WORK EXTRA...`.
pub fn runner(config: &Path, work: &Path, extra: &[&str], envs: &[(&str, &str)]) -> Proc {
    runner_holding(config, work, extra, envs, Vec::new())
}

/// [`runner`] started holding `held` (descriptor number, what is open there) beside 0, 1, 2.
pub fn runner_holding(
    config: &Path,
    work: &Path,
    extra: &[&str],
    envs: &[(&str, &str)],
    held: Vec<(i32, std::os::fd::OwnedFd)>,
) -> Proc {
    let mut args = vec![
        "runner",
        "run",
        "--config",
        config.to_str().unwrap(),
        "--work-dir",
        work.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let log = config.with_extension(format!("{}.log", Uuid::now_v7().simple()));
    let mut envs = envs.to_vec();
    envs.push(("LEASEHOLD_LOG", "info"));
    spawn_holding(&args, &envs, log, Stdio::null(), held)
}

/// The outcome of one CLI call.
#[derive(Debug)]
pub struct Output {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

/// Run `leasehold ARGS` against `server` with `key`; fails the test after `deadline`.
pub async fn cli(server: &str, key: &str, args: &[&str], deadline: Duration) -> Output {
    let out = Command::new(BIN)
        .args(args)
        .env("LEASEHOLD_SERVER", server)
        .env("LEASEHOLD_API_KEY", key)
        .env_remove("LEASEHOLD_LOG")
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(deadline, out)
        .await
        .unwrap_or_else(|_| {
            panic!(
                "`leasehold {}` did not finish in {deadline:?}",
                args.join(" ")
            )
        })
        .unwrap();
    Output {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// `leasehold job submit --wait ARGS...` against `server` with `key`.
pub async fn submit_wait(server: &str, key: &str, args: &[&str]) -> Output {
    let all = [&["job", "submit", "--wait"], args].concat();
    cli(server, key, &all, LONG).await
}

/// `leasehold runner connect ARGS...`, which reaches the servers its code or payload names.
pub async fn runner_connect(args: &[&str]) -> Output {
    cli(
        "unused",
        "unused",
        &[&["runner", "connect"], args].concat(),
        LONG,
    )
    .await
}

/// Mint a join code with `operator` and enrol through `leasehold runner connect`; returns the
/// configuration path, after checking it is owner-only and that the token was not printed.
pub async fn enrol(
    operator: &Client,
    servers: &[&str],
    dir: &Path,
    ephemeral: bool,
    extra: &[&str],
) -> PathBuf {
    let code = operator
        .create_join_code(&wire::CreateJoinCode {
            tier: wire::Tier::Personal,
            ttl_s: None,
            ephemeral: ephemeral.then_some(true),
        })
        .await
        .unwrap();
    let path = dir.join(format!("runner-{}.json", Uuid::now_v7().simple()));
    let mut args = vec![code.code.as_str(), "--config", path.to_str().unwrap()];
    for s in servers {
        args.extend_from_slice(&["--server", s]);
    }
    args.extend_from_slice(extra);
    let out = runner_connect(&args).await;
    assert_eq!(out.code, Some(0), "connect failed: {out:?}");
    assert!(
        out.stdout.contains(path.to_str().unwrap()),
        "the path is printed"
    );
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "credentials are owner-only");
    let saved = saved(&path);
    let token = saved["token"].as_str().unwrap();
    assert!(token.starts_with("rnr_"));
    assert!(
        !out.stdout.contains(token) && !out.stderr.contains(token),
        "the token is never printed"
    );
    path
}

/// Two `leasehold serve` processes on one app's database, A with `envs_a` and B with
/// `envs_b`, and a runner alice enrolled against both (A first, so it talks to A until A
/// fails), started `--unconfined`: what a failover test starts from.
pub struct FailoverRig {
    pub a: Proc,
    /// Kept running for the rig's life.
    _b: Proc,
    pub url_b: String,
    pub key: String,
    /// Alice's client on B.
    pub alice: Client,
    pub runner: Proc,
    /// Last: it holds the logs and work of the processes above.
    _dir: TempDir,
}

impl FailoverRig {
    pub async fn start(
        app: &TestApp,
        what: &str,
        envs_a: &[(&str, &str)],
        envs_b: &[(&str, &str)],
    ) -> Self {
        let dir = TempDir::new(what);
        let ((a, url_a), (b, url_b)) = tokio::join!(
            serve(&app.database_url, &dir, envs_a),
            serve(&app.database_url, &dir, envs_b)
        );
        let key = app.key("acme", "alice", false).await;
        let alice = Client::new(url_b.clone(), Some(key.clone()));
        let config = enrol(&alice, &[&url_a, &url_b], dir.path(), false, &[]).await;
        let runner = runner(&config, &dir.join("work"), &["--unconfined"], &[]);
        Self {
            a,
            _b: b,
            url_b,
            key,
            alice,
            runner,
            _dir: dir,
        }
    }

    /// `leasehold job submit ARGS...` through B, without waiting: the new job's id.
    pub async fn submit(&self, args: &[&str]) -> Uuid {
        job_id(
            &cli(
                &self.url_b,
                &self.key,
                &[&["job", "submit"], args].concat(),
                LONG,
            )
            .await,
        )
    }
}

/// A `leasehold serve` process with a fresh secrets key on a fresh database, and an admin key
/// of `acme` with a client: what a test of secrets through the real binaries starts from.
pub struct SealingServer {
    pub server: Proc,
    pub url: String,
    pub key: String,
    pub admin: Client,
}

impl SealingServer {
    /// Its log goes under `dir`.
    pub async fn start(dir: &TempDir) -> Self {
        let database_url = crate::support::fresh_database().await;
        let sealing_key = SealKey::generate().to_base64();
        let (server, url) = serve(
            &database_url,
            dir,
            &[("LEASEHOLD_SECRETS_KEY", &sealing_key)],
        )
        .await;
        let key = crate::support::key_in(&database_url, "acme", "root", true).await;
        let admin = Client::new(&url, Some(key.clone()));
        Self {
            server,
            url,
            key,
            admin,
        }
    }
}

/// The id a successful `leasehold job submit` (without `--wait`) printed.
pub fn job_id(out: &Output) -> Uuid {
    assert_eq!(out.code, Some(0), "submit failed: {out:?}");
    out.stdout.trim().parse().expect("submit prints the job id")
}

/// A runner's saved configuration (`runner_id`, `token`, ...), as `runner connect` wrote it.
pub fn saved(config: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(config).unwrap()).unwrap()
}

/// A number no other process on the machine has in its command line, also a long `sleep`.
pub fn marker() -> String {
    let n = Uuid::now_v7().as_u128();
    format!("{}.{}", 4000 + n % 1000, (n >> 64) as u32)
}

/// Wait until no live process carries `marker` in its command line.
pub async fn none_alive(marker: &str, what: &str) {
    eventually(LONG, what, || async {
        processes_with(marker)
            .iter()
            .all(|(_, state, _)| *state == 'Z')
            .then_some(())
    })
    .await;
}

/// Kills what carries its marker when dropped (so a red test does not leave sleepers running).
pub struct KillOnDrop(pub String);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        for (pid, _, _) in processes_with(&self.0) {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
    }
}

/// `(pid, state, pgid)` of every process whose command line contains `marker`.
pub fn processes_with(marker: &str) -> Vec<(i32, char, i32)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        if !String::from_utf8_lossy(&cmdline).contains(marker) {
            continue;
        }
        if let Some((state, pgid)) = stat(pid) {
            found.push((pid, state, pgid));
        }
    }
    found
}

/// State and process group of `pid`, from `/proc/PID/stat`.
fn stat(pid: i32) -> Option<(char, i32)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &s[s.rfind(')')? + 2..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let _ppid = fields.next()?;
    let pgid = fields.next()?.parse().ok()?;
    Some((state, pgid))
}

/// Live (not zombie) processes in process group `pgid`.
pub fn live_in_group(pgid: i32) -> usize {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_string_lossy().parse::<i32>().ok())
        .filter_map(stat)
        .filter(|&(state, g)| g == pgid && state != 'Z' && state != 'X')
        .count()
}

/// Files and directories directly inside `dir`.
pub fn entries(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}
