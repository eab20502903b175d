//! The `leasehold` binary: parses arguments, starts telemetry, calls the library (the server,
//! the runner, and the people's commands in [`leasehold::cli`]).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use leasehold::cli;
use leasehold::client::Client;
use leasehold::config::Config;
use leasehold::domain::credentials::{Kind, Secret};
use leasehold::domain::sealing::{SealKey, Sealer};
use leasehold::embedded_pg::EmbeddedPg;
use leasehold::runner::{self, Stopper};
use leasehold::server;
use leasehold::store::Store;
use leasehold::wire;

#[derive(Parser)]
#[command(
    name = "leasehold",
    version,
    about = "A durable, multi-replica job lease service for self-hosted runners"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run one replica against DATABASE_URL.
    Serve(Config),
    /// Everything on one machine: a private PostgreSQL in a local directory, one replica and a
    /// local runner.
    Dev {
        /// Where the private PostgreSQL keeps its data (kept across runs).
        #[arg(long, default_value = ".leasehold/dev-pg")]
        data_dir: PathBuf,
        #[arg(long, default_value = "127.0.0.1:8080")]
        listen: std::net::SocketAddr,
        /// Workspace of the printed admin key.
        #[arg(long, default_value = "dev")]
        workspace: String,
        /// Do not start the local runner.
        #[arg(long)]
        no_runner: bool,
    },
    /// Measure a real deployment against the raw-SQL limit (starts its own by default).
    Bench(leasehold::bench::BenchArgs),
    /// Operator tasks straight against the database.
    Admin {
        #[command(subcommand)]
        command: AdminCommand,
    },
    /// Print the OpenAPI 3.1 document of the HTTP API (the same as GET /openapi.json).
    Openapi,
    #[command(flatten)]
    People(cli::Command),
    /// Enrol this machine as a runner, and run it.
    Runner {
        #[command(subcommand)]
        command: runner::cli::RunnerCommand,
    },
}

#[derive(Subcommand)]
enum AdminCommand {
    /// Mint an API key; the key is the last line of standard output.
    CreateKey {
        #[arg(long, env = "DATABASE_URL")]
        database_url: String,
        #[arg(long)]
        workspace: String,
        #[arg(long)]
        subject: String,
        #[arg(long, value_parser = ["admin", "member"])]
        role: String,
    },
    /// Re-seal every workspace secret with LEASEHOLD_SECRETS_KEY, opening each with it or with
    /// LEASEHOLD_SECRETS_OLD_KEY (the last step of a key rotation).
    ResealSecrets {
        #[arg(long, env = "DATABASE_URL")]
        database_url: String,
        #[arg(long, env = "LEASEHOLD_SECRETS_KEY", hide_env_values = true)]
        secrets_key: SealKey,
        #[arg(long, env = "LEASEHOLD_SECRETS_OLD_KEY", hide_env_values = true)]
        secrets_old_key: Option<SealKey>,
    },
}

/// Logs go to stderr; `LEASEHOLD_LOG` overrides `default` (`info` for long-running commands,
/// `warn` for the people's commands, whose output is the point).
/// With `traces`, spans also go to the OTLP endpoint when one is configured (see
/// `telemetry::traces`); the returned handle flushes them at exit.
fn init_tracing(default: &str, traces: bool) -> Option<leasehold::telemetry::traces::Tracing> {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::Layer;
    let filter = tracing_subscriber::EnvFilter::try_from_env("LEASEHOLD_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let logs = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_filter(filter);
    let otel = if traces {
        leasehold::telemetry::traces::layer().unwrap_or_else(|e| {
            eprintln!("leasehold: traces are off: {e}");
            None
        })
    } else {
        None
    };
    let (otel, guard) = match otel {
        Some((layer, guard)) => (Some(layer), Some(guard)),
        None => (None, None),
    };
    tracing_subscriber::registry().with(logs).with(otel).init();
    guard
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let command = Cli::parse().command;
    let quiet = matches!(&command, Command::People(_));
    let server = matches!(&command, Command::Serve(_) | Command::Dev { .. });
    let traces = init_tracing(if quiet { "warn" } else { "info" }, server);
    let outcome = run(command).await;
    if let Some(traces) = traces {
        tokio::task::spawn_blocking(move || traces.shutdown())
            .await
            .ok();
    }
    match outcome {
        Ok(code) => std::process::ExitCode::from(u8::try_from(code).unwrap_or(1)),
        Err(e) => {
            eprintln!("leasehold: {}", cli::render_error(&e));
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(command: Command) -> anyhow::Result<i32> {
    match command {
        Command::People(c) => cli::run(c).await,
        Command::Runner { command } => runner::cli::run(command).await,
        Command::Serve(config) => serve(config).await.map(|()| 0),
        Command::Dev {
            data_dir,
            listen,
            workspace,
            no_runner,
        } => dev(data_dir, listen, workspace, no_runner)
            .await
            .map(|()| 0),
        Command::Bench(args) => leasehold::bench::run(args).await.map(|()| 0),
        Command::Openapi => leasehold::openapi::run().map(|()| 0),
        Command::Admin {
            command:
                AdminCommand::ResealSecrets {
                    database_url,
                    secrets_key,
                    secrets_old_key,
                },
        } => {
            server::migrate_with_patience(&database_url, Duration::from_secs(10)).await?;
            let n = reseal_secrets(&database_url, &secrets_key, secrets_old_key.as_ref()).await?;
            println!("{n} secret(s) re-sealed with the current key");
            Ok(0)
        }
        Command::Admin {
            command:
                AdminCommand::CreateKey {
                    database_url,
                    workspace,
                    subject,
                    role,
                },
        } => {
            server::migrate_with_patience(&database_url, Duration::from_secs(10)).await?;
            let key = create_key(&database_url, &workspace, &subject, role == "admin").await?;
            println!("{key}");
            Ok(0)
        }
    }
}

async fn create_key(
    database_url: &str,
    workspace: &str,
    subject: &str,
    admin: bool,
) -> anyhow::Result<String> {
    anyhow::ensure!(
        leasehold::domain::owner::is_valid_name(workspace)
            && leasehold::domain::owner::is_valid_name(subject),
        "workspace and subject must be 1..128 of A-Z a-z 0-9 . _ @ -"
    );
    let store = Store::connect(database_url, 1, 90_000)?;
    let key = Secret::generate(Kind::ApiKey);
    store
        .insert_key(Uuid::now_v7(), workspace, subject, admin, key.hash())
        .await
        .context("storing the key")?;
    Ok(key.reveal().to_owned())
}

/// Open every secret with the current or old key and seal it again with the current one.
async fn reseal_secrets(
    database_url: &str,
    key: &SealKey,
    old: Option<&SealKey>,
) -> anyhow::Result<usize> {
    let store = Store::connect(database_url, 1, 90_000)?;
    let sealer = Sealer::new(key, old);
    let all = store.all_sealed_secrets().await?;
    for (workspace, name, sealed) in &all {
        let value = sealer
            .open(workspace, name, sealed)
            .with_context(|| format!("secret {name} of workspace {workspace}"))?;
        store
            .put_secret(workspace, name, &sealer.seal(workspace, name, &value))
            .await?;
    }
    Ok(all.len())
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

/// Run a replica until SIGTERM or Ctrl-C, then drain within 10 s.
async fn serve(config: Config) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("binding {}", config.listen))?;
    let replica = server::start(config, listener).await?;
    // Scripts and tests read the bound address from this line.
    println!("leasehold listening on http://{}", replica.addr);
    let token = replica.shutdown_token();
    tokio::spawn(stop_on_signal(token));
    replica.stop_after_shutdown(Duration::from_secs(9)).await;
    Ok(())
}

async fn stop_on_signal(token: CancellationToken) {
    stop_on_signal_then(async {}).await;
    token.cancel();
}

/// Wait for SIGTERM or Ctrl-C, then run `before_stop`.
async fn stop_on_signal_then(before_stop: impl std::future::Future<Output = ()>) {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("SIGTERM handler");
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    tracing::info!("shutting down");
    before_stop.await;
}

async fn dev(
    data_dir: PathBuf,
    listen: std::net::SocketAddr,
    workspace: String,
    no_runner: bool,
) -> anyhow::Result<()> {
    let state_dir = data_dir
        .parent()
        .map_or_else(|| PathBuf::from("."), PathBuf::from);
    let work_dir = state_dir.join("work");
    let runner_config = state_dir.join("dev-runner.json");
    let pg =
        tokio::task::spawn_blocking(move || EmbeddedPg::start(&data_dir, true, false)).await??;
    let url = pg.url("postgres");
    let mut config = Config::new(&url);
    config.listen = listen;
    config.secrets_key = Some(dev_secrets_key(&state_dir.join("secrets.key"))?);
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("binding {listen}"))?;
    let replica = server::start(config, listener).await?;
    let key = create_key(&url, &workspace, "admin", true).await?;
    let base = format!("http://{}", replica.addr);
    let admin = Client::new(&base, Some(key.clone()));

    // A local runner in this process, owned by the admin key's subject, so personal-pool jobs
    // run on this machine; and a spare join code to enrol another one.
    let stopper = Stopper::new();
    let local_runner = if no_runner {
        None
    } else {
        let config = dev_runner(&admin, &base, &runner_config).await?;
        let id = config.runner_id;
        let mut opts = runner::Options::new(config, work_dir);
        opts.capacity = Some(2);
        let task = tokio::spawn(runner::run(opts, stopper.clone()));
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
    println!();
    println!("  export LEASEHOLD_SERVER={base}");
    println!("  export LEASEHOLD_API_KEY={key}");
    println!();
    if let Some((id, _)) = &local_runner {
        println!("A local runner ({id}) takes jobs from your personal pool:");
        println!("  leasehold job submit --wait -- echo hello");
    } else {
        println!("Dispatch a job to your personal pool (no local runner; enrol one below):");
        println!("  leasehold job submit -- echo hello");
    }
    println!();
    println!(
        "Workspace secrets are sealed with the key kept in {} (mode 0600):",
        state_dir.join("secrets.key").display()
    );
    println!("  printf %s \"$TOKEN\" | leasehold secrets set TOKEN");
    println!();
    println!("Enrol another runner (code valid 10 minutes, once):");
    println!("  leasehold runner connect {} --server {base}", spare.code);
    println!("Admin key for workspace '{workspace}' (shown once):");
    println!("{key}");

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
    Ok(())
}

/// The dev runner: the one enrolled by an earlier `leasehold dev` (kept in `path`, mode 0600)
/// while its token still works, else a new one enrolled with a personal join code minted with
/// the admin key.
async fn dev_runner(
    admin: &Client,
    base: &str,
    path: &std::path::Path,
) -> anyhow::Result<runner::RunnerConfig> {
    if let Ok(mut config) = runner::RunnerConfig::load(path) {
        config.servers = vec![base.to_owned()];
        let probe = Client::new(base, Some(config.token.clone()));
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
