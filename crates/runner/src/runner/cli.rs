//! `leasehold runner connect|run`: enrol this machine, then run it until drained.
//!
//! Invariants: the token is written only to the configuration file (mode 0600) and never
//! printed; a pasted `lh1.` payload's pin is kept there and checked on every later call;
//! SIGTERM or Ctrl-C drains, a second one releases at once; a runner asked for a sandbox that
//! does not work refuses to start.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::{Subcommand, ValueEnum};

use super::sandbox::Network;
use super::{config, Options, RunnerConfig, Sandbox, Stopper};
use crate::client::{Pin, Trust};
use crate::runner;
use crate::wire;
use crate::wire::connect::Connect;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SandboxArg {
    /// Run commands as the runner's user, in the job's directory.
    None,
    /// Run commands under `bwrap`: no capabilities, only the job's directory writable, the
    /// host's home unseen.
    Bubblewrap,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum NetworkArg {
    /// The host's network (the default: builds fetch dependencies).
    Host,
    /// Only a loopback of the job's own (needs --sandbox bubblewrap).
    None,
}

#[derive(Debug, Subcommand)]
pub enum RunnerCommand {
    /// Enrol with a join code and write the runner's credentials (mode 0600).
    Connect {
        /// The `lh1.` payload `leasehold join-code create` printed (it carries the code, the
        /// servers and the key pin: no other flag is needed), its `https://HOST/j/...` join URL
        /// (fetched once, over HTTPS only), or a bare `jc_` code with --server.
        #[arg(value_name = "PAYLOAD|URL|CODE")]
        code: String,
        /// The service's URL; repeat for replicas to fail over to. Needed with a bare code;
        /// with a payload, used instead of the URLs it carries.
        #[arg(long = "server", value_name = "URL")]
        servers: Vec<String>,
        /// A PEM file of CA certificates to trust beside the system's (a private CA), kept in
        /// the configuration for `runner run`.
        #[arg(long, env = "LEASEHOLD_CA_CERT", value_name = "FILE")]
        ca_cert: Option<PathBuf>,
        /// A name for people (default: the host name).
        #[arg(long)]
        label: Option<String>,
        /// Jobs run at once (1..256).
        #[arg(long, default_value_t = 1)]
        capacity: i64,
        /// A capability this runner advertises, e.g. `linux` or `docker` (repeatable).
        #[arg(long = "capability", value_name = "CAP")]
        capabilities: Vec<String>,
        /// A git repository URL this runner offers to build (repeatable); an operator approves it.
        #[arg(long = "repo-target", value_name = "URL")]
        repo_targets: Vec<String>,
        /// A canary capability (repeatable): this runner then takes only jobs that require
        /// every one of them.
        #[arg(long = "exclusive", value_name = "CAP")]
        exclusive: Vec<String>,
        /// Where to write the credentials.
        #[arg(long, value_name = "PATH")]
        config: Option<PathBuf>,
        /// Trust only the server whose key has this pin (`sha256//BASE64`, curl's
        /// `--pinnedpubkey` form), for a join URL or a bare code (a payload carries its own).
        #[arg(long, value_name = "sha256//BASE64")]
        pin: Option<Pin>,
        /// Also install and start a systemd unit running `runner run` with these credentials
        /// (printed, with the commands that install it, where systemd does not run).
        #[arg(long)]
        service: bool,
        /// Replace an existing configuration at that path (the runner it held is orphaned:
        /// revoke it with `leasehold runners revoke`).
        #[arg(long)]
        force: bool,
    },
    /// Lease and run jobs until SIGTERM (drains) or, with --once, one job.
    Run {
        #[arg(long, value_name = "PATH")]
        config: Option<PathBuf>,
        /// A PEM file of CA certificates to trust beside the system's, instead of the one the
        /// configuration names.
        #[arg(long, env = "LEASEHOLD_CA_CERT", value_name = "FILE")]
        ca_cert: Option<PathBuf>,
        /// Take one job, report it, and exit.
        #[arg(long)]
        once: bool,
        /// How commands are confined.
        #[arg(long, value_enum, default_value_t = SandboxArg::None)]
        sandbox: SandboxArg,
        /// The network a sandboxed job sees.
        #[arg(long, value_enum, default_value_t = NetworkArg::Host)]
        network: NetworkArg,
        /// Run jobs as this unprivileged user (the runner runs as root): they cannot read the
        /// runner's files, its token included. Every job shares it: see --job-user-range.
        #[arg(long, value_name = "USER", conflicts_with = "job_user_range")]
        job_user: Option<String>,
        /// Run each concurrent job as its own uid from FIRST-LAST (e.g. 60000-60063; the
        /// runner runs as root; one uid per job slot, locked against other runners on this
        /// machine): jobs cannot read each other's environment or write each other's
        /// directories, and everything running as a job's uid is killed when it ends. The uids
        /// must be dedicated to this (nothing else may run as them).
        #[arg(long, value_name = "FIRST-LAST")]
        job_user_range: Option<String>,
        /// As root with no --sandbox, --job-user or --job-user-range, run jobs as root anyway
        /// (otherwise such a runner refuses to start): they can read its token and everything
        /// else.
        #[arg(long)]
        unconfined: bool,
        /// After SIGTERM, how long running jobs may finish before they are released: `10m`,
        /// `90s`, or seconds.
        #[arg(long, value_name = "DURATION", default_value = "600",
              value_parser = crate::wire::input::parse_seconds)]
        drain_timeout: f64,
        /// Parent of the per-job work directories.
        #[arg(long, env = "LEASEHOLD_WORK_DIR", value_name = "PATH")]
        work_dir: Option<PathBuf>,
        /// Jobs run at once, overriding the configuration.
        #[arg(long)]
        capacity: Option<i64>,
        /// Longest wait of one lease long-poll.
        #[arg(long, value_name = "MS", default_value_t = 30_000, hide = true)]
        poll_wait_ms: u64,
        /// A git repository URL this runner offers to build (repeatable); an operator approves
        /// it before jobs with that source come here.
        #[arg(long = "repo-target", value_name = "URL")]
        repo_targets: Vec<String>,
        /// A host (`name` or `name:port`) a job's git credential may be sent to (repeatable);
        /// credentials for other hosts are withheld.
        #[arg(long = "git-credential-host", value_name = "HOST")]
        git_credential_hosts: Vec<String>,
    },
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

fn config_path(given: Option<PathBuf>) -> PathBuf {
    given.unwrap_or_else(|| {
        config::default_path(env("XDG_CONFIG_HOME").as_deref(), env("HOME").as_deref())
    })
}

/// As root [`ROOT_WORK_DIR`] (job users must reach it, and root's home is 0700); else
/// `$XDG_STATE_HOME/leasehold/work`, else `$HOME/.local/state/leasehold/work`.
fn default_work_dir() -> PathBuf {
    if nix::unistd::Uid::effective().is_root() {
        return PathBuf::from(ROOT_WORK_DIR);
    }
    match (env("XDG_STATE_HOME"), env("HOME")) {
        (Some(x), _) => PathBuf::from(x),
        (None, Some(h)) => PathBuf::from(h).join(".local").join("state"),
        (None, None) => PathBuf::from("."),
    }
    .join("leasehold")
    .join("work")
}

/// A root runner's default `--work-dir`: outside any home, so job users can reach it.
pub const ROOT_WORK_DIR: &str = "/var/lib/leasehold/work";

fn hostname() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "runner".into())
}

/// SIGTERM or SIGINT: the first drains, the next releases.
pub fn escalate_on_signals(stopper: Stopper) -> anyhow::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).context("installing a SIGTERM handler")?;
    let mut int = signal(SignalKind::interrupt()).context("installing a SIGINT handler")?;
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
            stopper.escalate();
        }
    });
    Ok(())
}

/// The code, the servers and the trust of `runner connect`: from a pasted payload (its servers
/// unless `--server` is given, its pin), or a bare code and `--server`.
fn what_to_join(
    code: String,
    servers: Vec<String>,
    ca_cert: Option<PathBuf>,
) -> anyhow::Result<(String, Vec<String>, Trust)> {
    let ca_cert = ca_cert.map(absolute).transpose()?;
    if !Connect::is_payload(&code) {
        anyhow::ensure!(
            !servers.is_empty(),
            "a bare join code needs --server URL (or paste the whole `leasehold runner connect \
             lh1...` line that `leasehold join-code create` printed)"
        );
        return Ok((code, servers, Trust { ca_cert, pin: None }));
    }
    let payload = Connect::decode(&code).map_err(anyhow::Error::msg)?;
    let pin = payload
        .pin
        .as_deref()
        .map(str::parse::<Pin>)
        .transpose()
        .map_err(|e| anyhow::anyhow!("the connect payload's pin: {e}"))?;
    let servers = if servers.is_empty() {
        payload.servers
    } else {
        servers
    };
    if let Some(plain) = servers
        .iter()
        .find(|u| pin.is_some() && !crate::wire::input::is_https(u))
    {
        anyhow::bail!(
            "the connect payload pins the server's key, but {} is not https://, where no key \
             is checked: use its https:// URL",
            crate::wire::input::escaped(plain)
        );
    }
    Ok((payload.code, servers, Trust { ca_cert, pin }))
}

/// `path` from the root, so `runner run` finds it from any directory.
fn absolute(path: PathBuf) -> anyhow::Result<PathBuf> {
    std::fs::canonicalize(&path).with_context(|| format!("--ca-cert {}", path.display()))
}

/// # Errors
/// Enrolment refused, configuration unreadable, sandbox broken, token revoked.
pub async fn run(command: RunnerCommand) -> anyhow::Result<i32> {
    match command {
        RunnerCommand::Connect {
            code,
            servers,
            ca_cert,
            label,
            capacity,
            capabilities,
            repo_targets,
            exclusive,
            config,
            pin,
            service,
            force,
        } => {
            let path = config_path(config);
            if service {
                // Refused before the code is used (it stays good for another try).
                runner::service::check_path(&std::path::absolute(&path)?)?;
                runner::service::check_path(&default_work_dir())?;
            }
            anyhow::ensure!(
                force || !path.exists(),
                "{} already holds a runner's configuration; enrolling would orphan that runner: \
                 pass --force to replace it, or --config PATH to write another file",
                path.display()
            );
            let code = if runner::join_url::is_url(&code) {
                let trust = Trust {
                    ca_cert: ca_cert.clone().map(absolute).transpose()?,
                    pin,
                };
                runner::join_url::fetch(&code, &trust).await?.encode()
            } else {
                code
            };
            let (code, servers, mut trust) = what_to_join(code, servers, ca_cert)?;
            if trust.pin.is_none() && pin.is_some() {
                anyhow::ensure!(
                    servers.iter().all(|u| runner::join_url::is_https(u)),
                    "--pin checks the server's key, which plain HTTP has none of: use https:// URLs"
                );
                trust.pin = pin;
            }
            let req = wire::Enroll {
                code,
                label: label.unwrap_or_else(hostname),
                os: Some(std::env::consts::OS.to_owned()),
                version: Some(runner::VERSION.to_owned()),
                capabilities: Some(capabilities),
                exclusive: Some(exclusive),
                capacity: Some(capacity),
                repo_targets: (!repo_targets.is_empty()).then(|| {
                    repo_targets
                        .iter()
                        .map(wire::AdvertisedTarget::git)
                        .collect()
                }),
            };
            let cfg = runner::enroll(&servers, &trust, &req).await?;
            cfg.save(&path)?;
            println!(
                "enrolled runner {} ({}) for {}{}",
                cfg.runner_id,
                cfg.label,
                cfg.owner,
                if cfg.ephemeral { ", ephemeral" } else { "" }
            );
            println!("credentials written to {} (mode 0600)", path.display());
            if service {
                let config = std::fs::canonicalize(&path)?;
                let unit = runner::service::Unit::for_this_machine(&config, &default_work_dir())?;
                runner::service::install(&unit)?;
            } else {
                println!(
                    "start it with: leasehold runner run --config {}",
                    runner::service::shell_word(&path.to_string_lossy())
                );
            }
            Ok(0)
        }
        RunnerCommand::Run {
            config,
            ca_cert,
            once,
            sandbox,
            network,
            job_user,
            job_user_range,
            unconfined,
            drain_timeout,
            work_dir,
            capacity,
            poll_wait_ms,
            repo_targets,
            git_credential_hosts,
        } => {
            let path = config_path(config);
            let mut cfg = RunnerConfig::load(&path)?;
            if let Some(ca) = ca_cert {
                cfg.trust.ca_cert = Some(absolute(ca)?);
            }
            let mut opts = Options::new(cfg, work_dir.unwrap_or_else(default_work_dir));
            opts.config_path = Some(path);
            opts.subreaper = true;
            if let Some(name) = job_user {
                opts.job_users =
                    runner::workdir::JobUsers::Shared(runner::workdir::JobUser::lookup(&name)?);
            }
            if let Some(range) = job_user_range {
                let (first, last) = runner::contain::parse_range(&range)?;
                opts.job_users = runner::workdir::JobUsers::Range { first, last };
            }
            opts.unconfined = unconfined;
            opts.once = once;
            let network = match network {
                NetworkArg::Host => Network::Host,
                NetworkArg::None => Network::None,
            };
            opts.sandbox = match sandbox {
                SandboxArg::None => {
                    anyhow::ensure!(
                        network == Network::Host,
                        "--network none needs --sandbox bubblewrap (without it a job shares \
                         the runner's network)"
                    );
                    Sandbox::None
                }
                SandboxArg::Bubblewrap => Sandbox::bubblewrap(
                    &env("PATH").unwrap_or_else(|| runner::sandbox::DEFAULT_PATH.to_owned()),
                    network,
                )?,
            };
            anyhow::ensure!(
                drain_timeout.is_finite() && drain_timeout >= 0.0,
                "--drain-timeout must be a number of seconds"
            );
            opts.drain_timeout = Duration::from_secs_f64(drain_timeout);
            opts.capacity = capacity;
            opts.poll_wait = Duration::from_millis(poll_wait_ms);
            opts.repo_targets = repo_targets;
            opts.git_credential_hosts = git_credential_hosts;
            let stopper = Stopper::new();
            escalate_on_signals(stopper.clone())?;
            runner::run(opts, stopper).await?;
            Ok(0)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn payload(servers: &[&str], pin: Option<&str>) -> String {
        Connect {
            code: "jc_x".into(),
            servers: servers.iter().map(|s| (*s).to_owned()).collect(),
            pin: pin.map(str::to_owned),
        }
        .encode()
    }

    const PIN: &str = "sha256//AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=";

    #[test]
    fn a_payload_needs_no_flag_and_a_bare_code_needs_a_server() {
        let (code, servers, trust) =
            what_to_join(payload(&["https://a"], Some(PIN)), vec![], None).unwrap();
        assert_eq!(code, "jc_x");
        assert_eq!(servers, vec!["https://a"]);
        assert_eq!(trust.pin, Some(PIN.parse().unwrap()));

        let (_, servers, _) = what_to_join(
            payload(&["https://a"], Some(PIN)),
            vec!["https://b".into()],
            None,
        )
        .unwrap();
        assert_eq!(
            servers,
            vec!["https://b"],
            "--server replaces the payload's"
        );

        let err = what_to_join("jc_x".into(), vec![], None).unwrap_err();
        assert!(err.to_string().contains("--server"), "{err}");
        let (_, _, trust) = what_to_join("jc_x".into(), vec!["http://a".into()], None).unwrap();
        assert_eq!(trust, Trust::default());
    }

    #[test]
    fn a_pin_is_never_paired_with_plain_http() {
        for (servers, flag) in [
            (vec!["http://a"], vec![]),
            (vec!["https://a"], vec!["http://a".to_owned()]),
        ] {
            let err = what_to_join(payload(&servers, Some(PIN)), flag, None).unwrap_err();
            assert!(
                err.to_string()
                    .contains("is not https://, where no key is checked"),
                "{err}"
            );
        }
        assert!(what_to_join(payload(&["http://a"], None), vec![], None).is_ok());
        let err = what_to_join(payload(&["https://a"], Some("sha1//x")), vec![], None).unwrap_err();
        assert!(err.to_string().contains("pin"), "{err}");
    }
}
