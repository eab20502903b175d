//! `leasehold drill-worker` (hidden): one drill runner as its own process, so the drill can
//! freeze it (SIGSTOP/SIGCONT) and cut its long-poll (SIGUSR1 drops the request in flight).
//!
//! It leases one job at a time through the contract (rotating servers on 503 or no answer),
//! holds it for `--hold-ms` (a no-op executor), then completes it at the leased epoch, retrying
//! that same report until a server answers. Every lease and report goes to stdout as one JSON
//! line stamped with the wall clock, for the drill's history. Its token comes from the
//! environment (`LEASEHOLD_RUNNER_TOKEN`), never from the command line.

use std::io::Write;
use std::time::Duration;

use serde_json::{json, Value};

use crate::client::{Client, ClientError};
use crate::wire;

#[derive(clap::Args, Debug)]
pub struct WorkerArgs {
    /// Replicas to call, in turn.
    #[arg(long = "server", required = true, num_args = 1..)]
    pub servers: Vec<String>,
    /// How long each job is held before it is completed.
    #[arg(long, default_value_t = 100)]
    pub hold_ms: u64,
    /// Capability the worker advertises (the drill's jobs require it).
    #[arg(long)]
    pub capability: Option<String>,
}

fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn emit(line: Value) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

fn error_line(what: &str, e: &ClientError) {
    if let Some(status) = e.status().filter(|s| s.is_server_error()) {
        emit(json!({"e": "error", "what": what, "status": status.as_u16(), "at": unix_ms()}));
    }
}

/// A 503 or no answer: try the next server.
fn retryable(e: &ClientError) -> bool {
    e.status().is_none_or(|s| s.as_u16() == 503)
}

/// Run until killed (the drill ends its workers).
///
/// # Errors
/// `LEASEHOLD_RUNNER_TOKEN` is not set.
pub async fn run(args: WorkerArgs) -> anyhow::Result<i32> {
    let token = std::env::var("LEASEHOLD_RUNNER_TOKEN")
        .map_err(|_| anyhow::anyhow!("LEASEHOLD_RUNNER_TOKEN is not set"))?;
    let clients: Vec<Client> = args
        .servers
        .iter()
        .map(|s| Client::new(s, Some(token.clone())))
        .collect();
    let mut cut = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::user_defined1())?;
    let mut at = 0usize;
    let lease = wire::Lease {
        wait_ms: Some(5_000),
        max_jobs: Some(1),
        capabilities: args.capability.clone().map(|c| vec![c]),
        ..Default::default()
    };
    loop {
        let client = &clients[at % clients.len()];
        let answer = tokio::select! {
            a = client.lease(&lease) => a,
            _ = cut.recv() => {
                // The long-poll's connection is dropped mid-request; poll again elsewhere.
                emit(json!({"e": "cut", "at": unix_ms()}));
                at += 1;
                continue;
            }
        };
        let jobs = match answer {
            Ok(jobs) => jobs,
            Err(e) => {
                error_line("lease", &e);
                if retryable(&e) {
                    at += 1;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        for job in jobs {
            emit(json!({
                "e": "leased", "job": job.id, "epoch": job.epoch,
                "ttl_ms": job.lease_ttl_ms, "at": unix_ms(),
            }));
            tokio::time::sleep(Duration::from_millis(args.hold_ms)).await;
            complete(&clients, &mut at, &job).await;
        }
    }
}

/// Report `job` done at its epoch, retrying the same report for up to a minute.
async fn complete(clients: &[Client], at: &mut usize, job: &wire::LeasedJob) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let mut sent = unix_ms();
    let outcome = loop {
        let client = &clients[*at % clients.len()];
        match client.complete(job.id, job.epoch, json!("ok")).await {
            Ok(_) => break "accepted",
            Err(e) if e.status().is_some_and(|s| s.as_u16() == 409) => break "refused",
            Err(e) => {
                error_line("complete", &e);
                if retryable(&e) {
                    *at += 1;
                }
                if tokio::time::Instant::now() > deadline {
                    break "unknown";
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
                sent = unix_ms();
            }
        }
    };
    emit(
        json!({"e": "reported", "job": job.id, "epoch": job.epoch, "outcome": outcome, "at": sent}),
    );
}
