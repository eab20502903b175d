//! The `leasehold` binary: parses arguments, starts telemetry and dispatches to the library
//! (the server, `dev`, `admin`, the runner, and the people's commands in [`leasehold::cli`]).

use clap::{Parser, Subcommand};

use leasehold::commands::{admin, dev, serve};
use leasehold::config::Config;
use leasehold::{cli, runner};

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
    Serve(Box<Config>),
    /// Everything on one machine: a private PostgreSQL in a local directory, one replica and a
    /// local runner.
    Dev(dev::DevArgs),
    /// Measure a real deployment against the raw-SQL limit (starts its own by default).
    Bench(leasehold::commands::bench::BenchArgs),
    /// Run a deployment under faults and prove nothing is lost (starts its own by default).
    Drill(leasehold::commands::drill::DrillArgs),
    /// One drill runner process (started by `leasehold drill`).
    #[command(hide = true)]
    DrillWorker(leasehold::commands::drill::worker::WorkerArgs),
    /// Operator tasks straight against the database.
    Admin {
        #[command(subcommand)]
        command: admin::AdminCommand,
    },
    /// Print the OpenAPI 3.1 document of the HTTP API (the same as GET /openapi.json).
    Openapi {
        /// The same as a Markdown reference for people (docs/api-reference.md).
        #[arg(long)]
        markdown: bool,
    },
    /// Serve the operator tools to a local MCP client over stdio, calling LEASEHOLD_SERVER
    /// with LEASEHOLD_API_KEY.
    Mcp(leasehold::commands::mcp::McpArgs),
    #[command(flatten)]
    People(cli::Command),
    /// Enrol this machine as a runner, and run it.
    Runner {
        #[command(subcommand)]
        command: runner::cli::RunnerCommand,
    },
}

/// Logs go to stderr (coloured on a terminal only); `LEASEHOLD_LOG` overrides `default` (`info` for long-running commands,
/// `warn` for the people's commands, whose output is the point).
/// With `traces`, spans also go to the OTLP endpoint when one is configured (see
/// `telemetry::traces`); the returned handle flushes them at exit.
fn init_tracing(default: &str, traces: bool) -> Option<leasehold::telemetry::traces::Tracing> {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::Layer;
    let filter = tracing_subscriber::EnvFilter::try_from_env("LEASEHOLD_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    // Colours on a terminal only: a file, a pipe or journald gets plain text.
    let logs = tracing_subscriber::fmt::layer()
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .with_filter(filter)
        .with_filter(leasehold::telemetry::logs::without_caller_data());
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
    let command = Cli::parse_from(cli::hoist_globals(std::env::args_os().collect())).command;
    if matches!(command, Command::People(_)) {
        // A closed pipe (`job get ID | head -1`) ends a people's command quietly, as it does
        // any Unix tool, rather than as a panic of println!.
        default_sigpipe();
    }
    let quiet = matches!(
        &command,
        Command::People(_) | Command::Drill(_) | Command::DrillWorker(_) | Command::Mcp(_)
    );
    let server = matches!(&command, Command::Serve(_) | Command::Dev(_));
    // rmcp's lines quote callers: off whatever the level (telemetry::logs).
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
        Command::Serve(config) => serve::run(*config).await.map(|()| 0),
        Command::Dev(args) => dev::run(args).await.map(|()| 0),
        Command::Bench(args) => leasehold::commands::bench::run(args).await.map(|()| 0),
        Command::Openapi { markdown } => leasehold::commands::openapi::run(markdown).map(|()| 0),
        Command::Drill(args) => leasehold::commands::drill::run(args).await,
        Command::DrillWorker(args) => leasehold::commands::drill::worker::run(args).await,
        Command::Admin { command } => admin::run(command).await,
        Command::Mcp(args) => leasehold::commands::mcp::run(args).await.map(|()| 0),
    }
}

/// Let SIGPIPE end the process (its default; Rust's runtime ignores it): for the people's
/// commands only, whose output is the point; never for the runner or the server, which write
/// to sockets and must live on when a peer goes away.
fn default_sigpipe() {
    use nix::sys::signal::{signal, SigHandler, Signal};
    // SAFETY: SIG_DFL installs no handler, so nothing runs in signal context; called before
    // any other thread could be handling SIGPIPE.
    let _ = unsafe { signal(Signal::SIGPIPE, SigHandler::SigDfl) };
}
