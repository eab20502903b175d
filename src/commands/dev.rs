//! `leasehold dev`: everything on one machine: a private PostgreSQL in a local directory (kept
//! across runs), one replica, a local runner in this process and a printed admin key.
//!
//! With `--tls` it serves HTTPS with a self-signed certificate kept beside the data directory
//! (`dev-tls.crt`, `dev-tls.key`, made on first use and reused, so its pin stays the same) and
//! prints how to trust it.
//!
//! Invariant: what must stay secret stays in files only its user can read (the secrets key, the
//! TLS key and the dev runner's credentials, mode 0600); a key file readable by others is
//! refused. Run as root, the local runner runs its jobs as `nobody` (in a work directory
//! `nobody` can reach), never as root; only where there is no `nobody` does it run them
//! unconfined, and says so.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Args;

use crate::client::{Client, Trust};
use crate::commands::admin::create_key;
use crate::commands::serve::stop_on_signal_then;
use crate::config::Config;
use crate::domain::sealing::SealKey;
use crate::replica;
use crate::runner::{self, Stopper};
use crate::tooling::dev_lock::{DevLock, Running};
use crate::tooling::private_pg::PrivatePg;
use crate::wire;
use crate::wire::command::shell_word;

/// `leasehold dev`'s arguments.
#[derive(Debug, Args)]
pub struct DevArgs {
    /// Where the private PostgreSQL keeps its data (kept across runs).
    #[arg(long, default_value = ".leasehold/dev-pg")]
    pub data_dir: PathBuf,
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub listen: std::net::SocketAddr,
    /// Workspace of the printed admin key.
    #[arg(long, default_value = "dev")]
    pub workspace: String,
    /// Do not start the local runner.
    #[arg(long)]
    pub no_runner: bool,
    /// Serve HTTPS with a self-signed certificate (made once, kept beside the data directory)
    /// and print how to trust it.
    #[arg(long)]
    pub tls: bool,
}

/// Run until SIGTERM or Ctrl-C; the local runner gives its jobs back, then the replica stops.
///
/// # Errors
/// PostgreSQL or the replica cannot start, or the admin key or runner cannot be set up.
pub async fn run(args: DevArgs) -> anyhow::Result<()> {
    let DevArgs {
        data_dir,
        listen,
        workspace,
        no_runner,
        tls,
    } = args;
    let state_dir = data_dir
        .parent()
        .map_or_else(|| PathBuf::from("."), PathBuf::from);
    let work_dir = state_dir.join("work");
    let runner_config = state_dir.join("dev-runner.json");
    // One dev per data directory: a second one says where the first runs and leaves it be.
    let mut lock = match DevLock::take(&data_dir)? {
        Ok(lock) => lock,
        Err(running) => return Err(already_running(&data_dir, running).await),
    };
    let orphan = lock.previous().and_then(|p| p.postgres_pid);
    let pg = tokio::task::spawn_blocking(move || PrivatePg::start_reclaiming(&data_dir, orphan))
        .await??;
    let url = pg.url("postgres");
    let mut config = Config::new(&url);
    config.listen = listen;
    config.secrets_key = Some(dev_secrets_key(&state_dir.join("secrets.key"))?);
    let tls_files = if tls {
        Some(dev_certificate(&state_dir)?)
    } else {
        None
    };
    if let Some((cert, key)) = &tls_files {
        config.tls_cert = Some(cert.clone());
        config.tls_key = Some(key.clone());
    }
    let listener = tokio::net::TcpListener::bind(listen).await.map_err(|e| {
        anyhow::anyhow!(
            "cannot listen on {listen}: {e}; is another `leasehold dev` running? \
             pass --listen ADDR:PORT for another address (e.g. --listen 127.0.0.1:8081)"
        )
    })?;
    let scheme = if tls { "https" } else { "http" };
    let base = format!("{scheme}://{}", listener.local_addr()?);
    // Join codes come with a pasted connect payload for this address.
    config.public_url = vec![base.clone()];
    let replica = replica::start(config, listener).await?;
    let key = create_key(&url, &workspace, "admin", true).await?;
    let pin = replica
        .certificates
        .as_ref()
        .and_then(|c| c.self_signed_pin());
    let trust = Trust { ca_cert: None, pin };
    let admin = Client::with_trust(&base, Some(key.clone()), &trust)?;

    // A local runner in this process, owned by the admin key's subject, so personal-pool jobs
    // run on this machine; and a spare join code to enrol another one.
    let stopper = Stopper::new();
    let runner_stopper = stopper.clone();
    let local_runner = if no_runner {
        None
    } else {
        let config = dev_runner(&admin, &base, &trust, &runner_config).await?;
        let id = config.runner_id;
        let mut opts = runner::Options::new(config, work_dir);
        opts.capacity = Some(2);
        if nix::unistd::Uid::effective().is_root() {
            match dev_job_user(&state_dir, id) {
                Ok((user, work)) => {
                    opts.job_users = runner::workdir::JobUsers::Shared(user);
                    opts.work_dir = work;
                }
                Err(e) => {
                    eprintln!(
                        "leasehold: the local runner cannot run jobs as `nobody` ({e:#}); it runs \
                         them as root, unconfined"
                    );
                    opts.unconfined = true;
                }
            }
        }
        let task = tokio::spawn(async move {
            let r = runner::run(opts, runner_stopper).await;
            if let Err(e) = &r {
                eprintln!("leasehold: the local runner stopped: {e:#}");
            }
            r
        });
        Some((id, task))
    };
    let spare = admin
        .create_join_code(&wire::CreateJoinCode {
            tier: wire::Tier::Personal,
            ttl_s: None,
            ephemeral: None,
        })
        .await
        .context("minting a join code")?;

    println!(
        "leasehold dev is running at {base} (PostgreSQL on port {})",
        pg.port
    );
    println!(
        "PostgreSQL data: {} (DATABASE_URL={url}; the password is in {}/leasehold.password)",
        pg.data_dir().display(),
        pg.data_dir().display()
    );
    // Commands as they run when pasted into any shell: this executable by its absolute path
    // (a fresh shell has no `leasehold` on PATH) with the server and key in front.
    let exe = std::env::current_exe().map_or_else(
        |_| "leasehold".to_owned(),
        |p| shell_word(&p.to_string_lossy()),
    );
    let ca = tls_files
        .as_ref()
        .map(|(cert, _)| std::fs::canonicalize(cert).unwrap_or_else(|_| cert.clone()));
    let mut env = format!("LEASEHOLD_SERVER={base} LEASEHOLD_API_KEY={key}");
    if let Some(cert) = &ca {
        env.push_str(&format!(
            " LEASEHOLD_CA_CERT={}",
            shell_word(&cert.to_string_lossy())
        ));
    }
    println!();
    println!("  export LEASEHOLD_SERVER={base}");
    println!("  export LEASEHOLD_API_KEY={key}");
    if let Some(cert) = &ca {
        println!("  export LEASEHOLD_CA_CERT={}", cert.display());
        println!();
        println!(
            "HTTPS with a self-signed certificate; trust it with --ca-cert \
             (or LEASEHOLD_CA_CERT above):"
        );
        println!("  certificate: {}", cert.display());
        if let Some(pin) = pin {
            println!("  key pin:     {pin}");
            println!("  curl --cacert {} {base}/healthz", cert.display());
            println!("  curl -k --pinnedpubkey '{pin}' {base}/healthz");
        }
    }
    println!();
    println!("Web UI (paste the admin key below into it): {base}/ui");
    println!();
    if let Some((id, _)) = &local_runner {
        println!("A local runner ({id}) takes jobs from your personal pool:");
        println!("  {env} {exe} job submit --wait -- echo hello");
    } else {
        println!("Dispatch a job to your personal pool (no local runner; enrol one below):");
        println!("  {env} {exe} job submit -- echo hello");
    }
    println!();
    println!(
        "Workspace secrets are sealed with the key kept in {} (mode 0600):",
        state_dir.join("secrets.key").display()
    );
    println!(
        "  printf %s \"$TOKEN\" | {env} {exe} secrets set TOKEN --runners any   \
         # --runners any: personal runners like this one may receive it"
    );
    println!();
    println!("Enrol another runner (code valid 10 minutes, once):");
    match &spare.connect {
        Some(payload) => println!("  {exe} runner connect {payload}"),
        None => println!("  {exe} runner connect {} --server {base}", spare.code),
    }
    println!("Admin key for workspace '{workspace}' (shown once):");
    println!("{key}");
    lock.record(&Running {
        pid: std::process::id(),
        url: Some(base.clone()),
        ca_cert: ca.clone(),
        workspace: Some(workspace.clone()),
        postgres_pid: pg.postmaster_pid(),
        postgres_port: Some(pg.port),
        pg_data: Some(pg.data_dir().to_owned()),
    })?;

    let token = replica.shutdown_token();
    tokio::spawn(async move {
        stop_on_signal_then(async {
            // The dev runner gives its jobs back at once, then the replica stops.
            stopper.drain.cancel();
            stopper.release.cancel();
            if let Some((_, task)) = local_runner {
                let _ = tokio::time::timeout(Duration::from_secs(5), task).await;
            }
        })
        .await;
        token.cancel();
    });
    replica.stop_after_shutdown(Duration::from_secs(9)).await;
    drop(pg);
    drop(lock);
    Ok(())
}

/// The error a second `dev` on a data directory ends with: where the first one runs, and the
/// lines that reach it (with a fresh admin key minted in its database, when it can be).
async fn already_running(data_dir: &std::path::Path, first: Running) -> anyhow::Error {
    let Some(url) = &first.url else {
        return anyhow::anyhow!(
            "another `leasehold dev` (pid {}) is starting on {}; wait for its banner, or pass \
             --data-dir DIR for a second one",
            first.pid,
            data_dir.display()
        );
    };
    let mut text = format!(
        "another `leasehold dev` (pid {1}) is running on {0} at {url}; it was left untouched.\n\
         Reach it with:\n  export LEASEHOLD_SERVER={url}\n",
        data_dir.display(),
        first.pid
    );
    if let Some(ca) = &first.ca_cert {
        text.push_str(&format!("  export LEASEHOLD_CA_CERT={}\n", ca.display()));
    }
    let minted = match (&first.pg_data, first.postgres_port, &first.workspace) {
        (Some(pg_data), Some(port), Some(workspace)) => {
            match crate::tooling::private_pg::read_password(pg_data) {
                Ok(password) => {
                    let url = format!("postgres://postgres:{password}@127.0.0.1:{port}/postgres");
                    create_key(&url, workspace, "admin", true).await.ok()
                }
                Err(_) => None,
            }
        }
        _ => None,
    };
    match minted {
        Some(key) => text.push_str(&format!(
            "  export LEASEHOLD_API_KEY={key}    # a new admin key, shown once\n"
        )),
        None => text.push_str("  export LEASEHOLD_API_KEY=...    # the key its banner printed\n"),
    }
    text.push_str(&format!(
        "Its page: {url}/ui. Stop it with Ctrl-C in its terminal (or kill {}); for a second \
         one beside it pass --data-dir DIR --listen 127.0.0.1:0.",
        first.pid
    ));
    anyhow::anyhow!(text)
}

/// As root: `nobody`, and a work directory it can reach: `<state>/work` when every directory
/// above it lets others through, else `<temp>/leasehold-dev-<runner id>` (made by root, not
/// writable by others; one that is not so is refused).
fn dev_job_user(
    state_dir: &std::path::Path,
    runner: uuid::Uuid,
) -> anyhow::Result<(runner::workdir::JobUser, PathBuf)> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let user = runner::workdir::JobUser::lookup("nobody")?;
    std::fs::create_dir_all(state_dir)?;
    let state = std::fs::canonicalize(state_dir)?;
    let passable = state
        .ancestors()
        .all(|d| std::fs::metadata(d).is_ok_and(|m| m.mode() & 0o001 != 0));
    if passable {
        return Ok((user, state.join("work")));
    }
    let dir = std::env::temp_dir().join(format!("leasehold-dev-{runner}"));
    match std::fs::create_dir(&dir) {
        Ok(()) => std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o711))?,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e).with_context(|| format!("creating {}", dir.display())),
    }
    let meta = std::fs::symlink_metadata(&dir)?;
    anyhow::ensure!(
        meta.is_dir() && meta.uid() == 0 && meta.mode() & 0o022 == 0,
        "{} is not a directory of root's that only root may write",
        dir.display()
    );
    Ok((user, dir))
}

/// The dev server's secrets key, kept in `path` (mode 0600) across runs.
fn dev_secrets_key(path: &std::path::Path) -> anyhow::Result<SealKey> {
    use std::io::Write;
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    if let Ok(meta) = std::fs::metadata(path) {
        anyhow::ensure!(
            meta.permissions().mode() & 0o077 == 0,
            "{} is readable by others; it holds the secrets key (chmod 600 it)",
            path.display()
        );
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        return text
            .parse()
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()));
    }
    let key = SealKey::generate();
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?;
    writeln!(f, "{}", key.to_base64())?;
    Ok(key)
}

/// The dev server's self-signed certificate and key (`dev-tls.crt`, `dev-tls.key`, mode 0600)
/// in `dir`: made on first use for `localhost`, `127.0.0.1` and `::1`, reused after.
fn dev_certificate(dir: &std::path::Path) -> anyhow::Result<(PathBuf, PathBuf)> {
    use std::io::Write;
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let cert = dir.join("dev-tls.crt");
    let key = dir.join("dev-tls.key");
    if let Ok(meta) = std::fs::metadata(&key) {
        anyhow::ensure!(
            meta.permissions().mode() & 0o077 == 0,
            "{} is readable by others; it holds the TLS key (chmod 600 it)",
            key.display()
        );
        if cert.exists() {
            return Ok((cert, key));
        }
    }
    let made = rcgen::generate_simple_self_signed(vec![
        "localhost".to_owned(),
        "127.0.0.1".to_owned(),
        "::1".to_owned(),
    ])
    .context("making a self-signed certificate")?;
    std::fs::create_dir_all(dir)?;
    let _ = std::fs::remove_file(&key);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&key)
        .with_context(|| format!("creating {}", key.display()))?;
    f.write_all(made.signing_key.serialize_pem().as_bytes())?;
    std::fs::write(&cert, made.cert.pem())
        .with_context(|| format!("writing {}", cert.display()))?;
    Ok((cert, key))
}

/// The dev runner: the one enrolled by an earlier `leasehold dev` (kept in `path`, mode 0600)
/// while its token still works, else a new one enrolled with a personal join code minted with
/// the admin key.
async fn dev_runner(
    admin: &Client,
    base: &str,
    trust: &Trust,
    path: &std::path::Path,
) -> anyhow::Result<runner::RunnerConfig> {
    if let Ok(mut config) = runner::RunnerConfig::load(path) {
        config.servers = vec![base.to_owned()];
        config.trust = trust.clone();
        let probe = Client::with_trust(base, Some(config.token.clone()), trust)?;
        if probe
            .runner_heartbeat(&wire::RunnerHeartbeat::default())
            .await
            .is_ok()
        {
            return Ok(config);
        }
    }
    let code = admin
        .create_join_code(&wire::CreateJoinCode {
            tier: wire::Tier::Personal,
            ttl_s: Some(60),
            ephemeral: None,
        })
        .await
        .context("minting the local runner's join code")?;
    let label = nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .map_or_else(|| "dev-runner".to_owned(), |h| format!("{h} (dev)"));
    let config = runner::enroll(
        &[base.to_owned()],
        trust,
        &wire::Enroll {
            code: code.code,
            label,
            os: Some(std::env::consts::OS.to_owned()),
            version: Some(env!("CARGO_PKG_VERSION").to_owned()),
            capabilities: Some(vec![std::env::consts::OS.to_owned()]),
            capacity: Some(2),
            ..Default::default()
        },
    )
    .await?;
    config.save(path)?;
    Ok(config)
}
