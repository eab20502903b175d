//! The `leasehold` binary: parses arguments, starts telemetry, calls the library.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use leasehold::config::Config;
use leasehold::domain::credentials::{Kind, Secret};
use leasehold::embedded_pg::EmbeddedPg;
use leasehold::server;
use leasehold::store::Store;

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
    /// Everything on one machine: a private PostgreSQL in a local directory and one replica.
    Dev {
        /// Where the private PostgreSQL keeps its data (kept across runs).
        #[arg(long, default_value = ".leasehold/dev-pg")]
        data_dir: PathBuf,
        #[arg(long, default_value = "127.0.0.1:8080")]
        listen: std::net::SocketAddr,
        /// Workspace of the printed admin key.
        #[arg(long, default_value = "dev")]
        workspace: String,
    },
    /// Measure a real deployment against the raw-SQL limit (starts its own by default).
    Bench(leasehold::bench::BenchArgs),
    /// Operator tasks straight against the database.
    Admin {
        #[command(subcommand)]
        command: AdminCommand,
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
}

fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("LEASEHOLD_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    init_tracing();
    match Cli::parse().command {
        Command::Serve(config) => serve(config).await,
        Command::Dev {
            data_dir,
            listen,
            workspace,
        } => dev(data_dir, listen, workspace).await,
        Command::Bench(args) => leasehold::bench::run(args).await,
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
            Ok(())
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
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("SIGTERM handler");
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    tracing::info!("shutting down");
    token.cancel();
}

async fn dev(
    data_dir: PathBuf,
    listen: std::net::SocketAddr,
    workspace: String,
) -> anyhow::Result<()> {
    let pg =
        tokio::task::spawn_blocking(move || EmbeddedPg::start(&data_dir, true, false)).await??;
    let url = pg.url("postgres");
    let mut config = Config::new(&url);
    config.listen = listen;
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("binding {listen}"))?;
    let replica = server::start(config, listener).await?;
    let key = create_key(&url, &workspace, "admin", true).await?;
    let base = format!("http://{}", replica.addr);
    println!(
        "leasehold dev is running at {base} (PostgreSQL on port {})",
        pg.port
    );
    println!();
    println!("  export LEASEHOLD_SERVER={base}");
    println!("  export LEASEHOLD_API_KEY={key}");
    println!();
    println!("Dispatch a job to your personal pool:");
    println!("  curl -s -H \"Authorization: Bearer $LEASEHOLD_API_KEY\" -H 'Content-Type: application/json' \\");
    println!("       -d '{{\"target\":{{\"pool\":\"personal\"}},\"payload\":{{\"argv\":[\"echo\",\"hello\"]}}}}' $LEASEHOLD_SERVER/v1/jobs");
    println!("Admin key for workspace '{workspace}' (shown once):");
    println!("{key}");
    let token = replica.shutdown_token();
    tokio::spawn(stop_on_signal(token));
    replica.stop_after_shutdown(Duration::from_secs(9)).await;
    drop(pg);
    Ok(())
}
