//! The `leasehold-runner` binary: the runner and the people's commands of `leasehold`, built
//! without the server side (for the machines that run jobs and the terminals that dispatch
//! them). Every command it has is the `leasehold` binary's command of the same name.

use clap::{Parser, Subcommand};

use leasehold_runner::{cli, runner};

#[derive(Parser)]
#[command(
    name = "leasehold-runner",
    version,
    about = "leasehold's runner and command line, without the server"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    #[command(flatten)]
    People(cli::Command),
    /// Enrol this machine as a runner, and run it.
    Runner {
        #[command(subcommand)]
        command: runner::cli::RunnerCommand,
    },
}

/// Logs go to stderr; `LEASEHOLD_LOG` overrides `default` (`info` for the runner, `warn` for
/// the people's commands, whose output is the point).
fn init_tracing(default: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("LEASEHOLD_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(filter)
        .init();
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let command = Cli::parse_from(cli::hoist_globals(std::env::args_os().collect())).command;
    if matches!(command, Command::People(_)) {
        // A closed pipe (`job get ID | head -1`) ends a people's command quietly, as it does
        // any Unix tool, rather than as a panic of println!.
        default_sigpipe();
    }
    init_tracing(match &command {
        Command::People(_) => "warn",
        Command::Runner { .. } => "info",
    });
    let outcome = match command {
        Command::People(c) => cli::run(c).await,
        Command::Runner { command } => runner::cli::run(command).await,
    };
    match outcome {
        Ok(code) => std::process::ExitCode::from(u8::try_from(code).unwrap_or(1)),
        Err(e) => {
            eprintln!("leasehold: {}", cli::render_error(&e));
            std::process::ExitCode::FAILURE
        }
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
