//! How a command is started: directly, or inside a bubblewrap (`bwrap`) sandbox.
//!
//! Invariants of the sandbox: the job's directory is the only writable mount (at
//! [`JOB_MOUNT`]: its `work/`, `home/` as `HOME`, and `tmp/` also as `/tmp`); system
//! directories are read-only; the host's home directories (`/home`, `/root`), and with them
//! the runner's configuration and token, are never mounted. The command runs in a new user
//! namespace with every capability dropped (so even a runner running as root gives its jobs
//! no power to sniff traffic, mount, or trace), in its own PID namespace and session, and
//! dies with `bwrap`, so killing `bwrap`'s process group kills everything the job started.
//! With [`Network::None`] it also gets a network namespace of its own (only a loopback).
//! A runner running as root starts `bwrap` itself as an unprivileged uid (the job user, a
//! uid of the range, or `nobody`): inside the namespace uid 0 would be root outside, owner of
//! every root-owned file, capabilities or not.
//! A runner asked for a sandbox that does not work refuses to start ([`Sandbox::check`] runs
//! a probe job inside it that checks the drop took effect) rather than run jobs unconfined.
//!
//! In both modes the environment is rebuilt from an allow-list: `PATH`, `LANG`, `TERM` (from
//! the runner, or defaults), `HOME` and `TMPDIR` (the job's own), the job's variables.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};

use super::workdir::{JobUser, WorkRoot};

/// System directories mounted read-only when they exist.
const READ_ONLY: &[&str] = &["/usr", "/etc", "/opt", "/run/systemd/resolve"];
/// Top-level directories that are directories on some systems and symlinks into `/usr` on others.
const MAYBE_LINKS: &[&str] = &["/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"];
/// Where the job's directory is mounted inside the sandbox.
pub const JOB_MOUNT: &str = "/leasehold/job";
/// The probe job (`sh -c PROBE probe HIDDEN WORK HOME NETWORK UID`): exits 3 naming the
/// first check that fails, using only the shell's built-ins and `/proc`.
const PROBE: &str = r#"
cap=
uid=
while read -r key value rest; do
    [ "$key" = CapEff: ] && cap=$value
    [ "$key" = Uid: ] && uid=$value
done < /proc/self/status
[ "$cap" = 0000000000000000 ] || { echo "capabilities were not dropped (CapEff: ${cap:-unknown})" >&2; exit 3; }
[ -z "$5" ] || [ "$uid" = "$5" ] || { echo "the job runs as uid ${uid:-unknown}, not $5" >&2; exit 3; }
[ "$$" -le 3 ] || { echo "the job is not in a PID namespace of its own (its pid is $$)" >&2; exit 3; }
[ "$(pwd)" = "$2" ] || { echo "the working directory is $(pwd), not $2" >&2; exit 3; }
[ "$HOME" = "$3" ] || { echo "HOME is $HOME, not $3" >&2; exit 3; }
[ -z "$1" ] || [ ! -s "$1" ] || { echo "the runner's configuration $1 is visible to jobs" >&2; exit 3; }
if [ "$4" = none ]; then
    while read -r line; do
        case "$line" in *:*) [ "${line%%:*}" = lo ] || { echo "network interface ${line%%:*} is visible" >&2; exit 3; } ;; esac
    done < /proc/net/dev
fi
echo ok > probe && echo ok > "$HOME/h"
"#;

/// `PATH` inside the sandbox when the job does not set one.
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// What network a sandboxed job sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Network {
    /// The host's (as CI jobs expect), without the capabilities to read others' traffic.
    #[default]
    Host,
    /// A namespace with only its own loopback.
    None,
}

/// How jobs are confined.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sandbox {
    /// Run as the runner's user, in the job's directory, with an allow-listed environment.
    None,
    /// Run under `bwrap`, found at `path`; `hide` (the runner's configuration file) is
    /// masked when it lies in a directory the sandbox mounts.
    Bubblewrap {
        path: PathBuf,
        network: Network,
        hide: Option<PathBuf>,
    },
}

/// A program and its arguments, environment and directory, ready to spawn.
#[derive(Debug, Clone)]
pub struct Launch {
    pub program: OsString,
    pub args: Vec<OsString>,
    /// The complete environment.
    pub env: BTreeMap<String, String>,
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

/// A regular file with an execute bit.
pub fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

impl Sandbox {
    /// `bubblewrap`, located on `path`.
    ///
    /// # Errors
    /// `bwrap` is not installed.
    pub fn bubblewrap(path: &str, network: Network) -> anyhow::Result<Self> {
        which("bwrap", path)
            .map(|path| Sandbox::Bubblewrap {
                path,
                network,
                hide: None,
            })
            .context("--sandbox bubblewrap: `bwrap` is not on PATH (apt-get install bubblewrap)")
    }

    /// The same sandbox, masking `file` (the runner's configuration) from jobs.
    #[must_use]
    pub fn hiding(self, file: Option<PathBuf>) -> Self {
        match self {
            Sandbox::Bubblewrap { path, network, .. } => Sandbox::Bubblewrap {
                path,
                network,
                hide: file,
            },
            other => other,
        }
    }

    /// Run a probe job in the sandbox (as `user` when given, as jobs will be), checking from
    /// inside what a job would see: no capability at all (`CapEff` 0), the uid `user`'s
    /// (bwrap maps it to itself), a PID namespace of its own, the working directory and `HOME` where a job's are,
    /// both writable, `hidden` (the runner's configuration file, which holds its token)
    /// absent, and with [`Network::None`] no interface but loopback.
    ///
    /// # Errors
    /// The sandbox does not work here, or does not confine; the message says which check
    /// failed (or carries `bwrap`'s own error).
    pub async fn check(
        &self,
        root: &WorkRoot,
        hidden: Option<&Path>,
        user: Option<&JobUser>,
    ) -> anyhow::Result<()> {
        let Sandbox::Bubblewrap { network, .. } = self else {
            return Ok(());
        };
        let dir = root.job_dir("sandbox-probe")?;
        dir.hand_to(user).await?;
        let work_inside = Path::new(JOB_MOUNT).join("work").display().to_string();
        let home_inside = Path::new(JOB_MOUNT).join("home").display().to_string();
        let mut argv: Vec<String> =
            vec!["/bin/sh".into(), "-c".into(), PROBE.into(), "probe".into()];
        argv.push(hidden.map(|p| p.display().to_string()).unwrap_or_default());
        argv.push(work_inside);
        argv.push(home_inside);
        argv.push(
            if *network == Network::None {
                "none"
            } else {
                "host"
            }
            .into(),
        );
        // The uid as seen from inside (bwrap maps the caller's uid to itself).
        argv.push(user.map(|u| u.uid.to_string()).unwrap_or_default());
        let launch = self.launch(&argv, &BTreeMap::new(), &dir.work, &dir.root, &dir.home)?;
        let mut cmd = tokio::process::Command::new(&launch.program);
        if let Some(u) = user {
            cmd.uid(u.uid).gid(u.gid);
        }
        let out = cmd
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
        let said = String::from_utf8_lossy(&out.stderr).trim().to_owned();
        if out.status.code() == Some(3) {
            bail!("--sandbox bubblewrap does not confine jobs on this machine: {said}");
        }
        if !out.status.success() || !wrote {
            bail!(
                "--sandbox bubblewrap does not work on this machine ({}): {said}",
                out.status
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
                let mut full = BTreeMap::new();
                let host = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
                full.insert("PATH".into(), host("PATH").unwrap_or(DEFAULT_PATH.into()));
                full.insert("LANG".into(), host("LANG").unwrap_or("C.UTF-8".into()));
                if let Some(term) = host("TERM") {
                    full.insert("TERM".into(), term);
                }
                full.insert("HOME".into(), home.display().to_string());
                full.insert("TMPDIR".into(), root.join("tmp").display().to_string());
                full.extend(env.iter().map(|(k, v)| (k.clone(), v.clone())));
                Ok(Launch {
                    program: argv[0].clone().into(),
                    args: argv[1..].iter().map(OsString::from).collect(),
                    env: full,
                    cwd: cwd.to_owned(),
                })
            }
            Sandbox::Bubblewrap {
                path: bwrap,
                network,
                hide,
            } => {
                let mut args: Vec<OsString> = Vec::new();
                let mut arg = |a: &str| args.push(a.into());
                if *network == Network::None {
                    arg("--unshare-net");
                }
                for a in [
                    "--die-with-parent",
                    "--new-session",
                    "--unshare-user",
                    "--cap-drop",
                    "ALL",
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
                // A configuration file under a mounted directory (`/etc/leasehold/runner.json`)
                // is masked: its directory by an empty tmpfs, or, directly in a mount root,
                // the file itself by an empty one.
                if let Some(file) = hide {
                    let mounted = READ_ONLY
                        .iter()
                        .chain(MAYBE_LINKS)
                        .any(|d| file.starts_with(d));
                    if mounted {
                        let dir = file.parent().context("the configuration has a directory")?;
                        let dir_s = dir
                            .to_str()
                            .context("the configuration path is not UTF-8")?;
                        let file_s = file
                            .to_str()
                            .context("the configuration path is not UTF-8")?;
                        if READ_ONLY
                            .iter()
                            .chain(MAYBE_LINKS)
                            .any(|d| Path::new(d) == dir)
                        {
                            for a in ["--ro-bind", "/dev/null", file_s] {
                                arg(a);
                            }
                        } else {
                            for a in ["--tmpfs", dir_s] {
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
                if let Some(term) = std::env::var("TERM").ok().filter(|v| !v.is_empty()) {
                    full.insert("TERM".to_owned(), term);
                }
                full.extend(env.iter().map(|(k, v)| (k.clone(), v.clone())));
                full.insert("HOME".into(), inside(home).display().to_string());
                full.insert("TMPDIR".into(), "/tmp".into());
                Ok(Launch {
                    program: bwrap.clone().into_os_string(),
                    args,
                    env: full,
                    cwd: root.to_owned(),
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args_hiding(file: &str) -> Vec<String> {
        let sandbox = Sandbox::Bubblewrap {
            path: "/usr/bin/bwrap".into(),
            network: Network::Host,
            hide: None,
        }
        .hiding(Some(file.into()));
        let root = Path::new("/srv/work/job");
        let launch = sandbox
            .launch(&["true".into()], &BTreeMap::new(), root, root, root)
            .unwrap();
        launch
            .args
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn a_configuration_under_a_mounted_directory_is_masked() {
        let a = args_hiding("/etc/leasehold/runner.json");
        assert!(
            a.windows(2).any(|w| w == ["--tmpfs", "/etc/leasehold"]),
            "{a:?}"
        );
        let a = args_hiding("/etc/runner.json");
        assert!(
            a.windows(3)
                .any(|w| w == ["--ro-bind", "/dev/null", "/etc/runner.json"]),
            "{a:?}"
        );
        let a = args_hiding("/home/ci/.config/leasehold/runner.json");
        assert!(
            !a.iter()
                .any(|x| x.contains("runner.json") || x == "--tmpfs"),
            "not mounted anyway: {a:?}"
        );
    }

    #[test]
    fn every_capability_is_dropped_in_a_user_namespace() {
        let a = args_hiding("/nowhere");
        assert!(a.windows(2).any(|w| w == ["--cap-drop", "ALL"]), "{a:?}");
        assert!(a.iter().any(|x| x == "--unshare-user"), "{a:?}");
    }
}
