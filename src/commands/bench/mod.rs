//! `leasehold bench`: drives a real deployment (its own durable PostgreSQL and `leasehold serve`
//! replicas by default) through the project's own client, and measures every figure beside a
//! raw-SQL baseline run in the same process, on the same machine, at the same concurrency.
//!
//! It prints a human table and, with `--json`, one JSON object as its last line. Numbers only:
//! nothing here asserts a target.

mod artifacts;
mod churn;
mod depth;
mod drain;
mod feed;
mod fleet;
mod idle;
mod redelivery;
mod retention;
mod setup;
mod soak;
pub mod stats;
mod throughput;
mod unfit_head;
mod wake;

use std::io::Write;

use clap::Args;
use serde_json::{json, Map, Value};

pub use setup::Deployment;

/// The human table: metric, value, baseline or target.
pub type Table = Vec<(String, String, String)>;

/// What the scenarios measured: the JSON object's entries and the human table's rows.
#[derive(Default)]
pub struct Report {
    pub json: Map<String, Value>,
    pub table: Table,
}

#[derive(Debug, Clone, Args)]
pub struct BenchArgs {
    /// Scenarios, comma-separated: throughput, wake, idle, depth, churn, redelivery,
    /// unfit-head, fleet, artifacts, retention, feed, drain, soak, or all (every one but soak,
    /// which runs for --soak-seconds, and fleet, which runs two phases of --seconds on three
    /// replicas).
    #[arg(long, default_value = "all")]
    pub scenario: String,
    /// Use this PostgreSQL server (its role must be allowed to create databases) instead of a
    /// private one.
    #[arg(long)]
    pub database_url: Option<String>,
    /// Print one JSON object as the last line.
    #[arg(long)]
    pub json: bool,
    /// Length of each throughput phase, seconds.
    #[arg(long, default_value_t = 10)]
    pub seconds: u64,
    /// Concurrent dispatchers in the throughput scenario.
    #[arg(long, default_value_t = 8)]
    pub dispatchers: usize,
    /// Concurrent runners (and raw-SQL claimers) in the throughput scenario.
    #[arg(long, default_value_t = 16)]
    pub runners: usize,
    /// Jobs per lease call in the batch phase.
    #[arg(long, default_value_t = 10)]
    pub batch: i64,
    /// Jobs parked at once in the drain scenario.
    #[arg(long, default_value_t = 50_000)]
    pub drain_jobs: usize,
    /// Jobs dispatched one by one in the wake scenario.
    #[arg(long, default_value_t = 2000)]
    pub wake_jobs: usize,
    /// Dispatch pace in the wake scenario, jobs per second.
    #[arg(long, default_value_t = 200)]
    pub wake_rate: u64,
    /// Idle long-polls held open in the idle scenario.
    #[arg(long, default_value_t = 10_000)]
    pub idle_pollers: usize,
    /// How long the idle long-polls are held, seconds.
    #[arg(long, default_value_t = 60)]
    pub idle_seconds: u64,
    /// Size of the one file the artifacts scenario uploads and downloads, MiB.
    #[arg(long, default_value_t = 1024)]
    pub artifact_mib: usize,
    /// Run the artifacts scenario against this bucket (`s3://bucket/prefix`, the `AWS_*`
    /// variables as for `serve`) instead of PostgreSQL: the raw figure is then a multipart
    /// PUT and a GET of the same bytes straight to the bucket.
    #[arg(long)]
    pub artifact_store: Option<String>,
    /// Settled jobs (finished a day ago) the retention scenario deletes under load.
    #[arg(long, default_value_t = 1_000_000)]
    pub retention_jobs: i64,
    /// The window the retention scenario's replicas keep, milliseconds.
    #[arg(long, default_value_t = 60_000)]
    pub retention_window_ms: u64,
    /// How long the retention scenario's load goes on while the table sizes are read,
    /// seconds (0: not at all).
    #[arg(long, default_value_t = 120)]
    pub retention_churn_seconds: u64,
    /// Queue depths for the depth scenario, comma-separated.
    #[arg(long, default_value = "1000,100000,1000000")]
    pub depths: String,
    /// Also measure at 10,000,000 parked jobs (several minutes of loading).
    #[arg(long)]
    pub depth_10m: bool,
    /// Lease TTL used by the redelivery scenario, milliseconds.
    #[arg(long, default_value_t = 2000)]
    pub redelivery_ttl_ms: u64,
    /// Parked jobs no runner can run at the head of the pool in the unfit-head scenario.
    #[arg(long, default_value_t = 10_000)]
    pub unfit_jobs: usize,
    /// Workspaces in the fleet scenario (the first one floods).
    #[arg(long, default_value_t = 20)]
    pub fleet_workspaces: usize,
    /// Runners in the fleet scenario, over every workspace and class.
    #[arg(long, default_value_t = 400)]
    pub fleet_runners: usize,
    /// Jobs the fleet's flooding workspace dispatches as fast as it can.
    #[arg(long, default_value_t = 50_000)]
    pub fleet_flood: usize,
    /// `gpu` jobs parked in every workspace of the fleet, their runners busy.
    #[arg(long, default_value_t = 10_000)]
    pub fleet_backlog: usize,
    /// One fleet replica fails every Nth tick (LEASEHOLD_FAULT_FAIL_TICKS; 0: none).
    #[arg(long, default_value_t = 200)]
    pub fleet_fail_ticks: u64,
    /// How long the soak scenario holds its snapshot open under load, seconds.
    #[arg(long, default_value_t = 600)]
    pub soak_seconds: u64,
    /// How long the soak scenario runs the reference cycle under a snapshot, for each of its
    /// two shapes, seconds (0: not at all).
    #[arg(long, default_value_t = 120)]
    pub soak_reference_seconds: u64,
    /// Capabilities the soak's runners advertise, comma-separated (none by default: plain
    /// runners). With any, every claim also reads the constrained lanes (`claim.sql`).
    #[arg(long, default_value = "")]
    pub soak_capabilities: String,
    /// Capabilities every job of the soak requires, comma-separated (none by default: plain
    /// jobs). With any, the jobs are in the constrained class (migration 0012), which the
    /// runners serve only if they advertise them (`--soak-capabilities`).
    #[arg(long, default_value = "")]
    pub soak_requires: String,
}

/// Progress on stderr, one line rewritten in place.
pub fn progress(msg: &str) {
    let mut err = std::io::stderr();
    let _ = write!(err, "\r\x1b[2K[bench] {msg}");
    let _ = err.flush();
}

fn done_progress() {
    eprintln!();
}

/// Run the chosen scenarios.
///
/// # Errors
/// Set-up failed (PostgreSQL, replicas) or a scenario could not run.
pub async fn run(args: BenchArgs) -> anyhow::Result<()> {
    let all = [
        "throughput",
        "wake",
        "idle",
        "depth",
        "churn",
        "redelivery",
        "unfit-head",
        "fleet",
        "artifacts",
        "retention",
        "feed",
        "drain",
        "soak",
    ];
    let chosen: Vec<&str> = if args.scenario == "all" {
        all.iter()
            .copied()
            .filter(|s| *s != "soak" && *s != "fleet")
            .collect()
    } else {
        args.scenario.split(',').map(str::trim).collect()
    };
    for c in &chosen {
        anyhow::ensure!(
            all.contains(c),
            "unknown scenario {c}; choose from {}",
            all.join(", ")
        );
    }
    let deployment = Deployment::start(args.database_url.as_deref()).await?;
    let mut report = Report::default();
    let machine = setup::machine();
    report.json.insert("machine".into(), machine.clone());
    let mut failed = Vec::new();
    for (i, scenario) in chosen.into_iter().enumerate() {
        if i > 0 {
            deployment.settle().await;
        }
        let result = match scenario {
            "throughput" => throughput::run(&deployment, &args, &mut report).await,
            "wake" => wake::run(&deployment, &args, &mut report).await,
            "idle" => idle::run(&deployment, &args, &mut report).await,
            "depth" => depth::run(&deployment, &args, &mut report).await,
            "churn" => churn::run(&deployment, &args, &mut report).await,
            "redelivery" => redelivery::run(&deployment, &args, &mut report).await,
            "unfit-head" => unfit_head::run(&deployment, &args, &mut report).await,
            "fleet" => fleet::run(&deployment, &args, &mut report).await,
            "artifacts" => artifacts::run(&deployment, &args, &mut report).await,
            "retention" => retention::run(&deployment, &args, &mut report).await,
            "soak" => soak::run(&deployment, &args, &mut report).await,
            "feed" => feed::run(&deployment, &args, &mut report).await,
            "drain" => drain::run(&deployment, &args, &mut report).await,
            _ => unreachable!("checked above"),
        };
        done_progress();
        // One scenario failing does not lose the others' figures.
        if let Err(e) = result {
            eprintln!("[bench] {scenario} failed: {e:#}");
            let why = format!("{e:#}");
            report.json.insert(format!("{scenario}_error"), json!(why));
            report
                .table
                .push((scenario.to_string(), "FAILED".into(), why));
            failed.push(scenario);
        }
    }
    println!("leasehold bench on {}", machine);
    let Report { json: out, table } = report;
    let w = table.iter().map(|r| r.0.len()).max().unwrap_or(10).max(6);
    let v = table.iter().map(|r| r.1.len()).max().unwrap_or(10).max(5);
    println!("{:<w$}  {:>v$}  baseline / target", "metric", "value");
    for (metric, value, note) in &table {
        println!("{metric:<w$}  {value:>v$}  {note}");
    }
    if args.json {
        println!("{}", Value::Object(out));
    }
    anyhow::ensure!(failed.is_empty(), "scenarios failed: {}", failed.join(", "));
    Ok(())
}

/// Round to `digits` decimals for the JSON.
pub fn round(x: f64, digits: i32) -> Value {
    let m = 10f64.powi(digits);
    json!((x * m).round() / m)
}
