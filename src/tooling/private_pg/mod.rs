//! A private PostgreSQL from the installed server binaries, for `leasehold dev`, the tests and
//! the benchmark. Never for production.
//!
//! As root (CI, these machines) `initdb` refuses to run, so the server runs as the `postgres`
//! OS user in a directory that user owns. That user must be able to reach the directory: when
//! an ancestor shuts it out (a checkout in root's 0700 home), the cluster lives instead in
//! `/var/tmp/leasehold-<hash of the asked path>/pg` (stable for the same path), and
//! [`PrivatePg::data_dir`] says where. A watchdog shell stops the server (and, for a
//! throw-away directory, deletes it) once the process that started it is gone, so a crashed
//! test never leaves a server behind.
//!
//! Invariant: the server trusts nobody. Every connection, TCP or socket, authenticates with
//! SCRAM as `postgres`, with a password generated at `initdb` and kept in the data directory
//! (`leasehold.password`, mode 0600, readable by whoever started the server and by root);
//! [`PrivatePg::url`] carries it. A cluster made by an older version with `trust` is given a
//! password the first time it is started.
//!
//! Invariant: as root, nothing another local user made is used (issue 52 row 1). The
//! relocation's name is one anyone can compute, in a directory anyone can write, so it is made
//! exclusively (`mkdir`, never "create if missing"): `leasehold-<hash>/` owned by root, group
//! `postgres`, mode 0710 (only root writes it; only the server's user passes through), holding
//! a marker only root can write (`leasehold-dev.owner`, naming the asked path) and `pg/` (the
//! `postgres` user's, 0700). A path there that is not exactly that (another owner or mode, a
//! symbolic link, no marker or another's) is refused and left as it is, never chowned, never
//! initialised over, its password never read. Files in a data directory (which its server's
//! user controls) are opened without following symbolic links (`O_NOFOLLOW`) and checked
//! (a regular file, one link, its owner) before root reads or writes them; the server's log
//! in the shared temporary directory is made afresh (`O_EXCL`), never opened where it lies.

use std::ffi::OsStr;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

mod files;
mod watchdog;

use files::*;
pub use files::{read_password, relocated};
pub use watchdog::{spawn_watchdog, STOP_POSTMASTER};

/// Settings for a throw-away test or bench server: durability off, many connections.
const FAST: &[&str] = &[
    "fsync=off",
    "synchronous_commit=off",
    "full_page_writes=off",
];

pub struct PrivatePg {
    pub port: u16,
    dir: PathBuf,
    password: String,
    bin: PathBuf,
    owner: Option<(u32, u32)>,
    durable: bool,
    temporary: bool,
    /// Extra `-c name=value` settings for the server.
    extra: Vec<String>,
    server: Option<Child>,
    watchdog: Option<Child>,
}

/// Where `pg_ctl` and friends live: on PATH, else the newest `/usr/lib/postgresql/*/bin`.
///
/// # Errors
/// No PostgreSQL server binaries are installed.
pub fn find_bin_dir() -> anyhow::Result<PathBuf> {
    if let Some(paths) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&paths) {
            if dir.join("initdb").is_file() && dir.join("postgres").is_file() {
                return Ok(dir);
            }
        }
    }
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("bin"))
        .filter(|p| p.join("initdb").is_file())
        .collect();
    found.sort_by_key(|p| {
        p.parent()
            .and_then(|v| v.file_name())
            .and_then(|v| v.to_str())
            .and_then(|v| v.parse::<u32>().ok())
            .unwrap_or(0)
    });
    found
        .pop()
        .context("PostgreSQL server binaries (initdb, postgres) not found on PATH or under /usr/lib/postgresql/*/bin")
}

/// A PostgreSQL client or server program (`pg_dump`, `psql`, ...): on PATH, else under
/// `/usr/lib/postgresql/*/bin`.
pub fn find_tool(name: &str) -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join(name));
    let packaged = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("bin").join(name));
    on_path.chain(packaged).find(|p| p.is_file())
}

fn postgres_ids() -> anyhow::Result<(u32, u32)> {
    let user = nix::unistd::User::from_name("postgres")?
        .context("running as root needs a 'postgres' OS user")?;
    Ok((user.uid.as_raw(), user.gid.as_raw()))
}

fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

impl PrivatePg {
    /// Start a server in `dir` (created and initialised if needed). `durable` keeps fsync on
    /// (`leasehold dev`, benchmarks); otherwise durability is off for speed. With `temporary`,
    /// the watchdog deletes `dir` after the server stops.
    ///
    /// # Errors
    /// initdb or the server failed to start.
    pub fn start(dir: &Path, durable: bool, temporary: bool) -> anyhow::Result<Self> {
        Self::start_with(dir, durable, temporary, &[])
    }

    /// [`PrivatePg::start`] with extra server settings (`name=value`).
    ///
    /// # Errors
    /// initdb or the server failed to start.
    pub fn start_with(
        dir: &Path,
        durable: bool,
        temporary: bool,
        extra: &[&str],
    ) -> anyhow::Result<Self> {
        Self::start_inner(dir, durable, temporary, extra, None)
    }

    /// [`PrivatePg::start`] of a kept (durable) directory whose last server may have been left
    /// running by a process that crashed: a live postmaster whose pid is `orphan` (what that
    /// process recorded) is stopped first (fast shutdown); any other live one is left alone.
    ///
    /// # Errors
    /// Another server runs on the directory, or initdb or the server failed to start.
    pub fn start_reclaiming(dir: &Path, orphan: Option<u32>) -> anyhow::Result<Self> {
        Self::start_inner(dir, true, false, &[], orphan)
    }

    fn start_inner(
        dir: &Path,
        durable: bool,
        temporary: bool,
        extra: &[&str],
        orphan: Option<u32>,
    ) -> anyhow::Result<Self> {
        let mut pg = Self::prepare(dir, durable, temporary, extra)?;
        let password_file = pg.dir.join(PASSWORD_FILE);
        if !pg.dir.join("PG_VERSION").exists() {
            let password = new_password();
            // initdb reads the password from a file its user can open: a private one in the
            // temporary directory, removed at once.
            let pwfile =
                std::env::temp_dir().join(format!("leasehold-pw-{}", uuid::Uuid::now_v7()));
            save_password(&pwfile, &password, pg.owner)?;
            let out = pg
                .command("initdb")
                .args([
                    "-U",
                    "postgres",
                    "--auth=scram-sha-256",
                    "-E",
                    "UTF8",
                    "--no-sync",
                ])
                .arg(format!("--pwfile={}", pwfile.display()))
                .arg("-D")
                .arg(&pg.dir)
                .stdout(Stdio::null())
                .output();
            let _ = std::fs::remove_file(&pwfile);
            let out = out.context("starting initdb")?;
            if !out.status.success() {
                bail!("initdb failed: {}", String::from_utf8_lossy(&out.stderr));
            }
            // The server's own user owns every file of its data directory, this one too
            // (pg_basebackup copies them all); 0600 still keeps every other user out.
            save_password(&password_file, &password, pg.owner)?;
        }
        pg.clear_pid_file(orphan)?;
        pg.password = match std::fs::symlink_metadata(&password_file) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                pg.set_password(&password_file)?
            }
            _ => read_password(&pg.dir)?,
        };
        pg.start_server()?;
        pg.start_watchdog(temporary)?;
        Ok(pg)
    }

    /// Make way for this server in a directory that has a `postmaster.pid`: a stale one (its
    /// process is gone, or is no PostgreSQL) is removed; a live postmaster is stopped only when
    /// it is `orphan`, else this fails naming it. A server someone else started is never
    /// stopped (issue 47: a second `leasehold dev` once killed the first one's database here).
    fn clear_pid_file(&self, orphan: Option<u32>) -> anyhow::Result<()> {
        let file = self.dir.join("postmaster.pid");
        let Ok(text) = std::fs::read_to_string(&file) else {
            return Ok(());
        };
        let mut lines = text.lines();
        let pid = lines.next().and_then(|l| l.trim().parse::<u32>().ok());
        let port = lines.nth(2).map(str::trim).unwrap_or("?").to_owned();
        let Some(pid) = pid.filter(|&p| postmaster_alive(p)) else {
            tracing::info!(file = %file.display(), "removing a stale postmaster.pid");
            let _ = std::fs::remove_file(&file);
            return Ok(());
        };
        if orphan != Some(pid) {
            bail!(
                "a PostgreSQL (pid {pid}, port {port}) is already running on {} (its \
                 postmaster.pid); it was not started by this process, so it is left running: \
                 stop it, or use another data directory",
                self.dir.display()
            );
        }
        tracing::warn!(pid, "stopping the PostgreSQL a crashed run left behind");
        let target = nix::unistd::Pid::from_raw(pid as i32);
        let _ = nix::sys::signal::kill(target, nix::sys::signal::Signal::SIGINT);
        let deadline = Instant::now() + Duration::from_secs(60);
        while postmaster_alive(pid) {
            if Instant::now() > deadline {
                bail!("the PostgreSQL a crashed run left behind (pid {pid}) did not stop");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = std::fs::remove_file(&file);
        Ok(())
    }

    /// The postmaster's pid, from its pid file.
    pub fn postmaster_pid(&self) -> Option<u32> {
        postmaster_pid_in(&self.dir)
    }

    /// A streaming hot standby of `primary` in `dir` (which must not hold a cluster yet): a
    /// base backup taken with `pg_basebackup -R` (so it follows the primary), started with the
    /// same settings on `port` (a free one if `None`). It reports itself to the primary as
    /// `application_name` (the name `synchronous_standby_names` lists).
    ///
    /// # Errors
    /// The base backup or the server failed.
    pub fn standby_of(
        primary: &PrivatePg,
        dir: &Path,
        application_name: &str,
        port: Option<u16>,
        temporary: bool,
    ) -> anyhow::Result<Self> {
        let extra: Vec<&str> = primary.extra.iter().map(String::as_str).collect();
        let mut pg = Self::prepare(dir, primary.durable, temporary, &extra)?;
        if let Some(port) = port {
            pg.port = port;
        }
        std::fs::set_permissions(&pg.dir, std::os::unix::fs::PermissionsExt::from_mode(0o700))?;
        let conninfo = format!(
            "host=127.0.0.1 port={} user=postgres password={} application_name={application_name}",
            primary.port, primary.password
        );
        let out = pg
            .command("pg_basebackup")
            .args([
                "-d",
                &conninfo,
                "-R",
                "-X",
                "stream",
                "--no-sync",
                "-c",
                "fast",
                "-D",
            ])
            .arg(&pg.dir)
            .stdout(Stdio::null())
            .output()?;
        if !out.status.success() {
            bail!(
                "pg_basebackup failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        // The copy carries the primary's password file (and its pg_hba.conf).
        pg.password = primary.password.clone();
        pg.start_server()?;
        pg.start_watchdog(temporary)?;
        Ok(pg)
    }

    /// A server not yet initialised: where its data lives (reachable by the `postgres` OS user
    /// when root), its port and settings.
    fn prepare(dir: &Path, durable: bool, temporary: bool, extra: &[&str]) -> anyhow::Result<Self> {
        let bin = find_bin_dir()?;
        let owner = if nix::unistd::Uid::effective().is_root() {
            Some(postgres_ids()?)
        } else {
            None
        };
        std::fs::create_dir_all(dir)?;
        let dir = dir.canonicalize()?;
        if let Some((uid, gid)) = owner {
            if let Some(blocked) = unreachable_by(&dir, uid, gid) {
                let moved = relocated(&dir);
                tracing::warn!(
                    asked = %dir.display(), blocked_by = %blocked.display(), data = %moved.display(),
                    "the postgres OS user cannot reach the asked data directory; using another"
                );
                claim_relocated(&moved, &dir, uid, gid)
                    .with_context(|| cannot_reach(&dir, &blocked))?;
                if let Some(still) = unreachable_by(&moved, uid, gid) {
                    bail!(
                        "{} ({} blocks it too)",
                        cannot_reach(&dir, &blocked),
                        still.display()
                    );
                }
                // Made for the postgres user by this function: never `chown -R` as root a tree
                // that user controls.
                return Self::new(moved, bin, owner, durable, temporary, extra);
            }
            // A directory the postgres user owns already is its own: root never walks a tree
            // that user controls (a file it links in would change hands). One of another user
            // (a cluster first made without root) is handed over whole.
            let top = std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(&dir)?);
            if top != uid {
                let status = Command::new("chown")
                    .arg("-R")
                    .arg(format!("{uid}:{gid}"))
                    .arg(&dir)
                    .status()?;
                if !status.success() {
                    bail!("chown of {} failed", dir.display());
                }
            }
        }
        Self::new(dir, bin, owner, durable, temporary, extra)
    }

    fn new(
        dir: PathBuf,
        bin: PathBuf,
        owner: Option<(u32, u32)>,
        durable: bool,
        temporary: bool,
        extra: &[&str],
    ) -> anyhow::Result<Self> {
        Ok(Self {
            port: free_port()?,
            dir,
            password: String::new(),
            bin,
            owner,
            durable,
            temporary,
            extra: extra.iter().map(|s| s.to_string()).collect(),
            server: None,
            watchdog: None,
        })
    }

    fn command(&self, program: &str) -> Command {
        let mut path = self.bin.join(program);
        if !path.is_file() {
            // A PATH directory may link only initdb, pg_ctl and postgres: take the tool from
            // where `postgres` really lives (the same version), else from anywhere.
            path = std::fs::canonicalize(self.bin.join("postgres"))
                .ok()
                .and_then(|p| Some(p.parent()?.join(program)))
                .filter(|p| p.is_file())
                .or_else(|| find_tool(program))
                .unwrap_or(path);
        }
        let mut cmd = Command::new(path);
        if let Some((uid, gid)) = self.owner {
            use std::os::unix::process::CommandExt;
            cmd.uid(uid).gid(gid);
        }
        cmd.env_remove("PGDATA");
        cmd
    }

    /// Start the server process (again, after [`PrivatePg::kill`] or [`PrivatePg::stop`]), on
    /// the same port and data directory, and wait until it accepts connections.
    ///
    /// # Errors
    /// The server did not come up within 30 s.
    pub fn start_server(&mut self) -> anyhow::Result<()> {
        let mut cmd = self.command("postgres");
        cmd.arg("-D").arg(&self.dir);
        cmd.args(["-p", &self.port.to_string()]);
        let socket_dir = self.dir.display().to_string();
        let mut settings = vec![
            "listen_addresses=127.0.0.1".to_owned(),
            format!("unix_socket_directories={socket_dir}"),
            "max_connections=500".to_owned(),
            "shared_buffers=256MB".to_owned(),
        ];
        if !self.durable {
            settings.extend(FAST.iter().map(|s| s.to_string()));
        }
        settings.extend(self.extra.iter().cloned());
        for s in settings {
            cmd.arg("-c").arg(s);
        }
        let log = fresh_log(&std::env::temp_dir().join(format!("leasehold-pg-{}.log", self.port)))?;
        cmd.stdout(Stdio::null()).stderr(log);
        // Its own process group: Ctrl-C in the terminal of `leasehold dev` (SIGINT to the
        // foreground group) must reach dev alone, which gives its runner's leases back through
        // this server before it stops it (issue 47 item 4).
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        self.server = Some(cmd.spawn().context("starting postgres")?);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            // The postmaster writes "ready" as the status line of its pid file once it accepts
            // connections.
            let ready = std::fs::read_to_string(self.dir.join("postmaster.pid")).is_ok_and(|pid| {
                pid.lines()
                    .nth(7)
                    .is_some_and(|status| status.trim() == "ready")
            });
            if ready {
                return Ok(());
            }
            if let Some(child) = self.server.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    bail!(
                        "postgres exited during start-up ({status}); see {}/leasehold-pg-{}.log",
                        std::env::temp_dir().display(),
                        self.port
                    );
                }
            }
            if Instant::now() > deadline {
                bail!("postgres did not become ready within 30 s");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn start_watchdog(&mut self, temporary: bool) -> anyhow::Result<()> {
        let me = std::process::id().to_string();
        let dir = self.dir.canonicalize()?;
        // Runs as our own user, so it can watch our pid; it stops the postmaster that runs in
        // the data directory when we are gone (whichever one: it follows restarts), and
        // removes a temporary directory.
        let script = format!(
            "{STOP_POSTMASTER}\
             while kill -0 \"$1\" 2>/dev/null; do sleep 1; done; \
             pid=$(stop_postmaster \"$2\" INT); \
             if [ -n \"$pid\" ]; then while kill -0 \"$pid\" 2>/dev/null; do sleep 0.2; done; fi; \
             if [ \"$3\" = temporary ]; then rm -rf \"$2\"; fi"
        );
        let keep = if temporary { "temporary" } else { "kept" };
        self.watchdog = Some(spawn_watchdog(
            &script,
            &[OsStr::new(&me), dir.as_os_str(), OsStr::new(keep)],
        )?);
        self.temporary = temporary;
        Ok(())
    }

    /// A connection URL for `database` on this server, with its password.
    /// The `postgres` role's password (standbys made by [`Self::standby_of`] share it).
    pub fn password(&self) -> &str {
        &self.password
    }

    pub fn url(&self, database: &str) -> String {
        format!(
            "postgres://postgres:{}@127.0.0.1:{}/{database}",
            self.password, self.port
        )
    }

    /// Where the cluster lives (not the asked directory when the `postgres` user could not
    /// reach that).
    pub fn data_dir(&self) -> &Path {
        &self.dir
    }

    /// Give a cluster made with `trust` (by an older leasehold) a password, and require it:
    /// `ALTER ROLE` in single-user mode, then a `pg_hba.conf` that asks every connection for
    /// SCRAM. Returns the password, saved to `file`.
    fn set_password(&self, file: &Path) -> anyhow::Result<String> {
        let password = new_password();
        let mut single = self
            .command("postgres")
            .args(["--single", "-D"])
            .arg(&self.dir)
            .arg("postgres")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .context("starting postgres --single")?;
        {
            use std::io::Write;
            let mut stdin = single.stdin.take().expect("piped");
            writeln!(
                stdin,
                "SET password_encryption = 'scram-sha-256'; ALTER ROLE postgres PASSWORD '{password}';"
            )?;
        }
        let out = single.wait_with_output()?;
        if !out.status.success() {
            bail!(
                "setting the password of {}: {}",
                self.dir.display(),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let hba = "local all all scram-sha-256\nhost all all 127.0.0.1/32 scram-sha-256\n\
                   host all all ::1/128 scram-sha-256\n\
                   local replication all scram-sha-256\n\
                   host replication all 127.0.0.1/32 scram-sha-256\n";
        {
            use std::io::Write;
            let mut conf = open_own(&self.dir.join("pg_hba.conf"), true)?;
            conf.set_len(0)?;
            conf.write_all(hba.as_bytes())?;
        }
        save_password(file, &password, self.owner)?;
        Ok(password)
    }

    /// Crash the server (SIGKILL of the postmaster; its backends exit on their own).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.server.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        // Backends notice the postmaster is gone; wait for them to release the port.
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline
            && std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok()
        {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = std::fs::remove_file(self.dir.join("postmaster.pid"));
    }

    /// Fast shutdown (SIGINT): open connections are closed, the server exits cleanly.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.server.take() {
            let pid = nix::unistd::Pid::from_raw(child.id() as i32);
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT);
            let _ = child.wait();
        }
    }
}

impl PrivatePg {
    /// `pg_ctl stop -m immediate`: the postmaster and its backends quit at once, as in a crash
    /// (connections are cut, nothing is checkpointed; the WAL is intact).
    ///
    /// # Errors
    /// `pg_ctl` failed.
    pub fn stop_immediate(&mut self) -> anyhow::Result<()> {
        let out = self
            .command("pg_ctl")
            .args(["stop", "-m", "immediate", "-w", "-D"])
            .arg(&self.dir)
            .output()?;
        if let Some(mut child) = self.server.take() {
            let _ = child.wait();
        }
        if !out.status.success() {
            bail!(
                "pg_ctl stop failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(())
    }

    /// `pg_ctl promote`: a standby becomes a primary and accepts writes; waits until it does.
    ///
    /// # Errors
    /// `pg_ctl` failed (not a standby, or promotion did not finish within its timeout).
    pub fn promote(&self) -> anyhow::Result<()> {
        let out = self
            .command("pg_ctl")
            .args(["promote", "-w", "-D"])
            .arg(&self.dir)
            .output()?;
        if !out.status.success() {
            bail!(
                "pg_ctl promote failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(())
    }

    /// The server process is running (it has not been stopped or killed through this handle).
    pub fn is_running(&self) -> bool {
        self.server.is_some()
    }
}

impl Drop for PrivatePg {
    fn drop(&mut self) {
        self.stop();
        if let Some(mut w) = self.watchdog.take() {
            let _ = w.kill();
            let _ = w.wait();
        }
        if self.temporary {
            let _ = std::fs::remove_dir_all(&self.dir);
            if let Some(parent) = self.dir.parent().filter(|p| p.starts_with("/var/tmp")) {
                // The relocation's, once its cluster is gone.
                if !self.dir.exists() {
                    let _ = std::fs::remove_file(parent.join(OWNER_MARKER));
                    let _ = std::fs::remove_dir(parent);
                }
            }
        }
    }
}

/// The pid a data directory's `postmaster.pid` names (its first line), if it has one.
pub fn postmaster_pid_in(data_dir: &Path) -> Option<u32> {
    std::fs::read_to_string(data_dir.join("postmaster.pid"))
        .ok()?
        .lines()
        .next()?
        .trim()
        .parse()
        .ok()
}

/// `pid` is a live PostgreSQL process (a pid a crash left in a pid file may since belong to
/// anything else; where `/proc` cannot say, any live process counts).
fn postmaster_alive(pid: u32) -> bool {
    let Ok(raw) = i32::try_from(pid) else {
        return false;
    };
    let alive = match nix::sys::signal::kill(nix::unistd::Pid::from_raw(raw), None) {
        Ok(()) | Err(nix::errno::Errno::EPERM) => true,
        Err(_) => false,
    };
    if !alive {
        return false;
    }
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // `pid (comm) state ...`: a zombie is gone for our purpose.
        Ok(stat) => {
            let comm = stat
                .split_once('(')
                .and_then(|(_, rest)| rest.rsplit_once(')'))
                .map(|(c, rest)| (c.to_owned(), rest.trim_start().chars().next()));
            matches!(comm, Some((c, state)) if c.starts_with("postgres") && state != Some('Z'))
        }
        Err(_) => !Path::new("/proc/self").exists(),
    }
}

/// The `postgres` OS user's uid and gid (servers run as it when we are root).
///
/// # Errors
/// There is no such user.
pub fn postgres_owner() -> anyhow::Result<(u32, u32)> {
    postgres_ids()
}
