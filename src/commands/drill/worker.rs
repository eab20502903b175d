//! `leasehold drill-worker` (hidden): one drill runner as its own process, so the drill can
//! freeze it (SIGSTOP/SIGCONT) and cut its long-poll (SIGUSR1 drops the request in flight).
//!
//! It leases one job at a time through the contract (rotating servers on 503 or no answer),
//! holds it for `--hold-ms` (a no-op executor), then completes it at the leased epoch in the
//! `done` of its next lease call (v1.2), sending that same report again with every retried
//! call until a server answers or a minute has passed. Every lease and report goes to stdout as one JSON
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
    // The report of the job just held, carried by the next lease call: (job, sent at, given up
    // at).
    let mut pending: Option<(wire::LeasedJob, u64, tokio::time::Instant)> = None;
    loop {
        let client = &clients[at % clients.len()];
        let mut lease = lease.clone();
        lease.done = pending.as_ref().map(|(job, _, _)| {
            vec![wire::DoneReport {
                id: job.id,
                epoch: job.epoch,
                result: Some(json!("ok")),
                fail: None,
            }]
        });
        let answer = tokio::select! {
            a = client.lease_reporting(&lease) => a,
            _ = cut.recv() => {
                // The long-poll's connection is dropped mid-request; poll again elsewhere.
                emit(json!({"e": "cut", "at": unix_ms()}));
                at += 1;
                continue;
            }
        };
        let leased = match answer {
            Ok(leased) => leased,
            Err(e) => {
                error_line("lease", &e);
                if retryable(&e) {
                    at += 1;
                }
                if let Some((job, sent, deadline)) = pending.take() {
                    if tokio::time::Instant::now() > deadline {
                        reported(&job, "unknown", sent);
                    } else {
                        pending = Some((job, unix_ms(), deadline));
                    }
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        if let Some((job, sent, _)) = pending.take() {
            let outcome = match leased.done.first().map(|d| d.status) {
                Some(200) => "accepted",
                Some(409) => "refused",
                _ => "unknown",
            };
            reported(&job, outcome, sent);
        }
        // One job at a time (`max_jobs` 1): held, then reported by the next call.
        if let Some(job) = leased.jobs.into_iter().next() {
            emit(json!({
                "e": "leased", "job": job.id, "epoch": job.epoch,
                "ttl_ms": job.lease_ttl_ms, "at": unix_ms(),
            }));
            tokio::time::sleep(Duration::from_millis(args.hold_ms)).await;
            let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
            pending = Some((job, unix_ms(), deadline));
        }
    }
}

/// The history line of a report: `outcome` is `accepted`, `refused` (a 409) or `unknown`; `at`
/// is when the call that carried it was sent.
fn reported(job: &wire::LeasedJob, outcome: &str, at: u64) {
    emit(json!({"e": "reported", "job": job.id, "epoch": job.epoch, "outcome": outcome, "at": at}));
}
