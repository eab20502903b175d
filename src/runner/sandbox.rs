//! How a command is started: directly, or inside a bubblewrap (`bwrap`) sandbox.
//!
//! Invariants of the sandbox: the job's directory is the only writable mount (at
//! [`JOB_MOUNT`]: its `work/`, `home/` as `HOME`, and `tmp/` also as `/tmp`); system directories are read-only; the host's
//! home directories (`/home`, `/root`), and with them the runner's configuration and token,
//! are never mounted; the environment is rebuilt from scratch. The command runs in its own
//! PID namespace and session, and dies with `bwrap`, so killing `bwrap`'s process group
//! kills everything the job started. A runner asked for a sandbox that does not work refuses
//! to start ([`Sandbox::check`]) rather than run jobs unconfined.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};

use super::workdir::WorkRoot;

/// System directories mounted read-only when they exist.
const READ_ONLY: &[&str] = &["/usr", "/etc", "/opt", "/run/systemd/resolve"];
/// Top-level directories that are directories on some systems and symlinks into `/usr` on others.
const MAYBE_LINKS: &[&str] = &["/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"];
/// Where the job's directory is mounted inside the sandbox.
pub const JOB_MOUNT: &str = "/leasehold/job";
/// `PATH` inside the sandbox when the job does not set one.
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// How jobs are confined.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sandbox {
    /// Run as the runner's user, in the job's directory, with the runner's environment.
    None,
    /// Run under `bwrap`, found at this path.
    Bubblewrap(PathBuf),
}

/// A program and its arguments, environment and directory, ready to spawn.
#[derive(Debug, Clone)]
pub struct Launch {
    pub program: OsString,
    pub args: Vec<OsString>,
    /// The complete environment when `clear_env`, else additions to the runner's.
    pub env: BTreeMap<String, String>,
    pub clear_env: bool,
    /// Where the spawned process starts (for bwrap, where `bwrap` itself starts).
    pub cwd: PathBuf,
}

/// Find an executable `name` on `path` (a `PATH` value).
pub fn which(name: &str, path: &str) -> Option<PathBuf> {
    path.split(':')
        .filter(|d| !d.is_empty())
        .map(|d| Path::new(d).join(name))
        .find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

impl Sandbox {
    /// `bubblewrap`, located on `path`.
    ///
    /// # Errors
    /// `bwrap` is not installed.
    pub fn bubblewrap(path: &str) -> anyhow::Result<Self> {
        which("bwrap", path)
            .map(Sandbox::Bubblewrap)
            .context("--sandbox bubblewrap: `bwrap` is not on PATH (apt-get install bubblewrap)")
    }

    /// Run a probe job in the sandbox: it must start, write its work directory and its
    /// `HOME`, and not see `hidden` (the runner's configuration file, which holds its token).
    ///
    /// # Errors
    /// The sandbox does not work here; the message carries `bwrap`'s own.
    pub async fn check(&self, root: &WorkRoot, hidden: Option<&Path>) -> anyhow::Result<()> {
        let Sandbox::Bubblewrap(_) = self else {
            return Ok(());
        };
        let dir = root.job_dir("sandbox-probe")?;
        let mut argv: Vec<String> = [
            "/bin/sh",
            "-c",
            "echo ok > probe && echo ok > \"$HOME/h\" && { [ -z \"$1\" ] || [ ! -e \"$1\" ]; }",
            "probe",
        ]
        .map(String::from)
        .to_vec();
        argv.push(hidden.map(|p| p.display().to_string()).unwrap_or_default());
        let launch = self.launch(&argv, &BTreeMap::new(), &dir.work, &dir.root, &dir.home)?;
        let out = tokio::process::Command::new(&launch.program)
            .args(&launch.args)
            .env_clear()
            .envs(&launch.env)
            .current_dir(&launch.cwd)
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true)
            .output()
            .await
            .context("starting bwrap")?;
        let wrote = dir.work.join("probe").exists() && dir.home.join("h").exists();
        dir.remove().await;
        if !out.status.success() || !wrote {
            bail!(
                "--sandbox bubblewrap does not work on this machine ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(())
    }

    /// How to start `argv` for a job whose directory is `root` (work dir `cwd`, home `home`).
    /// `env` is the job's own environment (with the runner's `LEASEHOLD_*` variables).
    ///
    /// # Errors
    /// A path is not valid UTF-8 where bwrap needs it as an argument.
    pub fn launch(
        &self,
        argv: &[String],
        env: &BTreeMap<String, String>,
        cwd: &Path,
        root: &Path,
        home: &Path,
    ) -> anyhow::Result<Launch> {
        match self {
            Sandbox::None => {
                let mut env = env.clone();
                env.insert("TMPDIR".into(), root.join("tmp").display().to_string());
                Ok(Launch {
                    program: argv[0].clone().into(),
                    args: argv[1..].iter().map(OsString::from).collect(),
                    env,
                    clear_env: false,
                    cwd: cwd.to_owned(),
                })
            }
            Sandbox::Bubblewrap(bwrap) => {
                let mut args: Vec<OsString> = Vec::new();
                let mut arg = |a: &str| args.push(a.into());
                for a in [
                    "--die-with-parent",
                    "--new-session",
                    "--unshare-pid",
                    "--unshare-ipc",
                    "--unshare-uts",
                    "--unshare-cgroup-try",
                    "--proc",
                    "/proc",
                    "--dev",
                    "/dev",
                ] {
                    arg(a);
                }
                for dir in READ_ONLY {
                    for a in ["--ro-bind-try", dir, dir] {
                        arg(a);
                    }
                }
                for link in MAYBE_LINKS {
                    match std::fs::read_link(link) {
                        Ok(target) => {
                            let t = target.to_str().context("a system symlink is not UTF-8")?;
                            for a in ["--symlink", t, link] {
                                arg(a);
                            }
                        }
                        Err(_) => {
                            for a in ["--ro-bind-try", link, link] {
                                arg(a);
                            }
                        }
                    }
                }
                // The job's directory appears at a fixed path, whatever the host's layout (a
                // work directory under /tmp must not be hidden by the job's own /tmp).
                let inside = |p: &Path| match p.strip_prefix(root) {
                    Ok(rel) => Path::new(JOB_MOUNT).join(rel),
                    Err(_) => p.to_owned(),
                };
                let root_s = root.to_str().context("the work directory is not UTF-8")?;
                let tmp = root.join("tmp");
                let tmp_s = tmp.to_str().context("the work directory is not UTF-8")?;
                let cwd_inside = inside(cwd);
                let cwd_s = cwd_inside
                    .to_str()
                    .context("the working directory is not UTF-8")?;
                for a in [
                    "--bind", tmp_s, "/tmp", "--bind", root_s, JOB_MOUNT, "--chdir", cwd_s,
                ] {
                    arg(a);
                }
                arg("--");
                args.extend(argv.iter().map(OsString::from));

                let mut full = BTreeMap::new();
                full.insert("PATH".to_owned(), DEFAULT_PATH.to_owned());
                full.insert("LANG".to_owned(), "C.UTF-8".to_owned());
                full.extend(env.iter().map(|(k, v)| (k.clone(), v.clone())));
                full.insert("HOME".into(), inside(home).display().to_string());
                full.insert("TMPDIR".into(), "/tmp".into());
                Ok(Launch {
                    program: bwrap.clone().into_os_string(),
                    args,
                    env: full,
                    clear_env: true,
                    cwd: root.to_owned(),
                })
            }
        }
    }
}
