//! Throughput: durable jobs per second, each figure beside the raw-SQL reference cycle
//! (pgbench running `bench/cycle.sql` on `bench/schema.sql`: insert, SKIP LOCKED claim, fenced
//! complete, 16 clients) measured on the same server in the same run.
//!
//! - `baseline`: the service's own statements without HTTP, in their fastest form (the store's
//!   insert, pipelined lease transaction and fenced complete), each client running the whole
//!   cycle like a pgbench client, one job at a time.
//! - `e2e`: dispatch → lease → complete through two replicas over HTTP, one job per call; a
//!   runner's next lease carries the report of the job it just finished (`done`, v1.2), so a
//!   job costs the runner one call.
//! - `e2e batch`: batch dispatch (`POST /v1/jobs/batch`) and `max_jobs` leases, the reports of
//!   one lease's jobs carried by the next.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::{json, Value};
use uuid::Uuid;

use super::setup::{self, ReplicaProcess};
use super::{progress, round, BenchArgs, Deployment, Report};
use crate::client::Client;
use crate::domain::credentials::{self, Kind};
use crate::store::claim::{ClassClaim, DoneReport, ReportOf, Reported};
use crate::store::{NewJob, Store};
use crate::wire;

pub(super) const CYCLE_SQL: &str = include_str!("../../../bench/cycle.sql");
const CYCLE_SCHEMA: &str = include_str!("../../../bench/schema.sql");

/// The reports a bench runner's next lease carries for the jobs its last one gave: each
/// completed with exit code 0.
pub(super) fn reports(jobs: &[wire::LeasedJob]) -> Vec<wire::DoneReport> {
    jobs.iter()
        .map(|j| wire::DoneReport {
            id: j.id,
            epoch: j.epoch,
            result: Some(json!({"exit_code": 0})),
            fail: None,
        })
        .collect()
}

pub async fn run(dep: &Deployment, args: &BenchArgs, report: &mut Report) -> anyhow::Result<()> {
    let Report { json: out, table } = report;
    progress("throughput: the pgbench reference cycle");
    let (reference, reference_work) = pgbench_cycle(dep, args).await?;
    let reference_pg_ms = reference_work.map(|w| w.ms);

    let url = dep.fresh_database("leasehold_bench_throughput").await?;
    let (replicas, key, operators) = setup::load_replicas(&url, args).await?;

    progress("throughput: the service's statements without HTTP");
    let single = setup::runners(&operators[0], args.runners, 1).await?;
    let shared: Vec<(String, Client)> = single.iter().map(|r| (key.clone(), r.clone())).collect();
    let baseline = raw_cycle(&url, &shared, "workspace", args).await?;
    truncate(&url).await?;
    // The reference's shape: each client mostly on a queue of its own (pgbench's claims pick one
    // of 100 owners), here one subject and its personal runner per client.
    progress("throughput: the service's statements without HTTP, a queue per client");
    let mut spread = Vec::with_capacity(args.runners);
    for i in 0..args.runners {
        let own = setup::api_key(&url, "bench", &format!("client-{i}")).await?;
        let op = Client::new(&replicas[0].url, Some(own.clone()));
        let runner = op
            .pair_runner(
                wire::Tier::Personal,
                &wire::CreateRunner {
                    label: format!("own-{i}"),
                    capacity: Some(1),
                    ..Default::default()
                },
            )
            .await?;
        spread.push((own, op.with_token(runner.token)));
    }
    let baseline_spread = raw_cycle(&url, &spread, "personal", args).await?;
    truncate(&url).await?;

    progress("throughput: end to end, one job per call");
    let pg_before = setup::pg_work(dep, "leasehold_bench_throughput").await;
    let (e2e, e2e_jobs) = end_to_end(&operators, &single, &replicas, 1, args).await?;
    let e2e_work = pg_before
        .zip(setup::pg_work(dep, "leasehold_bench_throughput").await)
        .map(|(before, after)| after.per_job_since(before, e2e_jobs));
    let e2e_pg_ms = e2e_work.map(|w| w.ms);
    truncate(&url).await?;

    progress("throughput: end to end, batch dispatch and batch leasing");
    let batched = setup::runners(&operators[0], args.runners, args.batch).await?;
    let (e2e_batch, _) = end_to_end(&operators, &batched, &replicas, args.batch, args).await?;

    out.insert("pgbench_cycle_jobs_per_s".into(), round(reference, 0));
    out.insert("baseline_jobs_per_s".into(), round(baseline, 0));
    out.insert(
        "baseline_spread_jobs_per_s".into(),
        round(baseline_spread, 0),
    );
    out.insert(
        "baseline_spread_ratio".into(),
        round(baseline_spread / reference, 3),
    );
    out.insert("e2e_jobs_per_s".into(), round(e2e, 0));
    out.insert("e2e_batch_jobs_per_s".into(), round(e2e_batch, 0));
    out.insert("baseline_ratio".into(), round(baseline / reference, 3));
    out.insert("e2e_ratio".into(), round(e2e / reference, 3));
    out.insert("e2e_batch_ratio".into(), round(e2e_batch / reference, 3));
    out.insert("e2e_vs_baseline".into(), round(e2e / baseline, 3));
    // PostgreSQL's own time per completed job (pg_stat_statements), null without the extension.
    let pg_ms = |v: Option<f64>| v.map_or(Value::Null, |ms| round(ms, 4));
    out.insert("pg_ms_per_job".into(), pg_ms(e2e_pg_ms));
    out.insert("reference_pg_ms_per_job".into(), pg_ms(reference_pg_ms));
    let pg_ratio = e2e_pg_ms.zip(reference_pg_ms).map(|(e, r)| e / r);
    // What one job costs the database, steady state: statements (the work, not BEGIN/COMMIT)
    // and transactions, e2e one job per call against the reference cycle.
    let per_job = |w: Option<setup::PgWork>| {
        w.map_or(
            Value::Null,
            |w| json!({"statements": round(w.statements, 2), "xacts": round(w.xacts, 2)}),
        )
    };
    out.insert("e2e_per_job".into(), per_job(e2e_work));
    out.insert("reference_per_job".into(), per_job(reference_work));
    out.insert(
        "pg_ms_per_job_ratio".into(),
        pg_ratio.map_or(Value::Null, |r| round(r, 3)),
    );
    out.insert(
        "throughput_shape".into(),
        json!({"dispatchers": args.dispatchers, "runners": args.runners, "batch": args.batch,
               "replicas": 2, "seconds": args.seconds, "pgbench_clients": 16}),
    );
    table.push((
        "pgbench_cycle_jobs_per_s (reference)".into(),
        format!("{reference:.0}"),
        "bench/cycle.sql, 16 clients, same server".into(),
    ));
    table.push((
        "baseline_jobs_per_s (service SQL, no HTTP)".into(),
        format!("{baseline:.0}"),
        format!("ratio {:.2} (target >= 0.8)", baseline / reference),
    ));
    table.push((
        "baseline_spread_jobs_per_s (a queue per client)".into(),
        format!("{baseline_spread:.0}"),
        format!("ratio {:.2}", baseline_spread / reference),
    ));
    table.push((
        "e2e_jobs_per_s".into(),
        format!("{e2e:.0}"),
        format!("ratio {:.2} (target >= 0.5)", e2e / reference),
    ));
    if let (Some(e), Some(r), Some(ratio)) = (e2e_pg_ms, reference_pg_ms, pg_ratio) {
        table.push((
            "pg_ms_per_job, e2e / reference".into(),
            format!("{e:.3} / {r:.3}"),
            format!("ratio {ratio:.2} (target <= 2)"),
        ));
    }
    if let (Some(e), Some(r)) = (e2e_work, reference_work) {
        table.push((
            "statements / transactions per job, e2e".into(),
            format!("{:.2} / {:.2}", e.statements, e.xacts),
            format!("reference {:.2} / {:.2}", r.statements, r.xacts),
        ));
    }
    table.push((
        format!("e2e_batch_jobs_per_s (batch {})", args.batch),
        format!("{e2e_batch:.0}"),
        format!("ratio {:.2} (target >= 1.0)", e2e_batch / reference),
    ));
    Ok(())
}

async fn truncate(url: &str) -> anyhow::Result<()> {
    let c = setup::connect(url).await?;
    c.batch_execute("TRUNCATE jobs, job_events CASCADE").await?;
    c.batch_execute("VACUUM ANALYZE jobs").await?;
    Ok(())
}

/// The reference: pgbench running the raw cycle on its own database of the same server. Also
/// what PostgreSQL did per completed job, where `pg_stat_statements` is loaded.
async fn pgbench_cycle(
    dep: &Deployment,
    args: &BenchArgs,
) -> anyhow::Result<(f64, Option<setup::PgWork>)> {
    let name = "leasehold_bench_raw";
    let url = reference_database(dep, name).await?;
    let pg_before = setup::pg_work(dep, name).await;
    let output = run_pgbench(&url, args.seconds, CYCLE_SQL, &[]).await?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let tps = stdout
        .lines()
        .find_map(|l| l.strip_prefix("tps = "))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|t| t.parse::<f64>().ok())
        .context("no tps line in pgbench's output")?;
    let completed: i64 = setup::connect(&url)
        .await?
        .query_one("SELECT count(*) FROM jobs WHERE state = 'completed'", &[])
        .await?
        .get(0);
    let work = pg_before
        .zip(setup::pg_work(dep, name).await)
        .map(|(before, after)| after.per_job_since(before, completed as u64));
    dep.drop_database(name).await?;
    Ok((tps, work))
}

/// A new database `name` on the deployment's server holding the reference's table
/// (`bench/schema.sql`); its URL.
pub(super) async fn reference_database(dep: &Deployment, name: &str) -> anyhow::Result<String> {
    let url = dep.empty_database(name).await?;
    setup::connect(&url)
        .await?
        .batch_execute(CYCLE_SCHEMA)
        .await?;
    Ok(url)
}

/// pgbench's 16 clients running `script` (the reference cycle, or a variant of it) against
/// `url` for `seconds`, with `extra` arguments; its output, once it succeeded.
pub(super) async fn run_pgbench(
    url: &str,
    seconds: u64,
    script: &str,
    extra: &[&str],
) -> anyhow::Result<std::process::Output> {
    let path = std::env::temp_dir().join(format!("leasehold-cycle-{}.sql", Uuid::now_v7()));
    std::fs::write(&path, script)?;
    let pgbench = crate::tooling::private_pg::find_tool("pgbench")
        .context("pgbench (PostgreSQL's client tools) not found")?;
    let output = tokio::process::Command::new(pgbench)
        .args(["-n", "-M", "prepared", "-c", "16", "-j", "2", "-T"])
        .arg(seconds.to_string())
        .args(extra)
        .arg("-f")
        .arg(&path)
        .arg(url)
        .output()
        .await;
    let _ = std::fs::remove_file(&path);
    let output = output?;
    anyhow::ensure!(
        output.status.success(),
        "pgbench failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(output)
}

/// Completed jobs per second over the measured window (after a one-second warm-up).
async fn measure(completed: &AtomicU64, seconds: u64, label: &str) -> f64 {
    tokio::time::sleep(Duration::from_secs(1)).await;
    let start = completed.load(Ordering::Relaxed);
    let t0 = Instant::now();
    for s in 0..seconds {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let n = completed.load(Ordering::Relaxed) - start;
        progress(&format!(
            "{label}: {s}/{seconds} s, {:.0} jobs/s",
            n as f64 / t0.elapsed().as_secs_f64()
        ));
    }
    (completed.load(Ordering::Relaxed) - start) as f64 / t0.elapsed().as_secs_f64()
}

fn workspace_pool() -> wire::Target {
    wire::Target::Pool {
        pool: wire::PoolName::Workspace,
    }
}

pub(super) async fn end_to_end(
    operators: &[Client],
    runners: &[Client],
    replicas: &[ReplicaProcess],
    batch: i64,
    args: &BenchArgs,
) -> anyhow::Result<(f64, u64)> {
    let stop = Arc::new(AtomicBool::new(false));
    let completed = Arc::new(AtomicU64::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    for d in 0..args.dispatchers {
        let op = operators[d % operators.len()].clone();
        let stop = stop.clone();
        tasks.spawn(async move {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                if batch == 1 {
                    let _ = op
                        .dispatch(&wire::Dispatch::new(workspace_pool(), json!({"n": n})))
                        .await;
                    n += 1;
                } else {
                    let items = (0..batch)
                        .map(|i| wire::BatchItem {
                            dispatch: wire::Dispatch::new(
                                workspace_pool(),
                                json!({"n": n + i as u64}),
                            ),
                            idempotency_key: None,
                        })
                        .collect();
                    let _ = op.dispatch_batch(items).await;
                    n += batch as u64;
                }
            }
        });
    }
    for (i, r) in runners.iter().enumerate() {
        // Half the runners poll one replica, half the other.
        let r = Client::new(
            &replicas[i % replicas.len()].url,
            r.token().map(str::to_owned),
        );
        let stop = stop.clone();
        let completed = completed.clone();
        tasks.spawn(async move {
            // The reports of the jobs the last lease gave, carried by the next lease (`done`,
            // v1.2): a runner leasing right after it finished, one call per lease.
            let mut done: Vec<wire::DoneReport> = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let mut req = wire::Lease::waiting(1000, batch);
                req.done = (!done.is_empty()).then(|| std::mem::take(&mut done));
                let leased = match r.lease_reporting(&req).await {
                    Ok(leased) => leased,
                    Err(_) => {
                        // Sent again: a report applied before the call failed answers 409.
                        done = req.done.unwrap_or_default();
                        continue;
                    }
                };
                let applied = leased.done.iter().filter(|d| d.status == 200).count();
                completed.fetch_add(applied as u64, Ordering::Relaxed);
                done = reports(&leased.jobs);
            }
            // What the last lease gave is reported alone, so its slots are free for the next
            // phase that drives these runners.
            for d in done {
                let _ = r.complete(d.id, d.epoch, json!({"exit_code": 0})).await;
            }
        });
    }
    let label = if batch == 1 { "e2e" } else { "e2e batch" };
    let rate = measure(&completed, args.seconds, label).await;
    stop.store(true, Ordering::Relaxed);
    while tasks.join_next().await.is_some() {}
    Ok((rate, completed.load(Ordering::Relaxed)))
}

/// The service's statements through the store, no HTTP, no coalescing: each client parks a
/// job, then runs a tick for its runner alone with the last job's report (`done`: report, lock
/// and claim in one pipelined transaction), as a dispatcher does for one waiting runner.
async fn raw_cycle(
    url: &str,
    clients: &[(String, Client)],
    pool: &'static str,
    args: &BenchArgs,
) -> anyhow::Result<f64> {
    let store = Store::connect(url, args.runners, 90_000)?;
    let stop = Arc::new(AtomicBool::new(false));
    let completed = Arc::new(AtomicU64::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    for (key, r) in clients {
        let key_hash = credentials::parse(Kind::ApiKey, key).context("bench key")?;
        let token = r.token().context("runner token")?;
        let token_hash = credentials::parse(Kind::Runner, token).context("runner token")?;
        let (store, key_hash, stop, completed) = (
            store.clone(),
            key_hash.clone(),
            stop.clone(),
            completed.clone(),
        );
        tasks.spawn(async move {
            let mut me = store
                .runner_for_lease(&token_hash)
                .await?
                .context("the bench runner is live")?;
            let mut n = 0i64;
            let mut done: Vec<ReportOf> = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let job = NewJob {
                    id: Uuid::now_v7(),
                    key_hash: key_hash.clone(),
                    pool: Some(pool),
                    kind: "command".into(),
                    payload: json!({"n": n}),
                    max_attempts: 3,
                    no_runner_timeout_ms: 300_000,
                    ..NewJob::default()
                };
                n += 1;
                store.insert_jobs(&[job]).await?;
                let claim = ClassClaim {
                    runners: vec![me.id],
                    wants: vec![1],
                    since: vec![me.leases_since],
                    named: vec![false],
                    ..ClassClaim::of(&me)
                };
                let out = store.tick(&done, &[claim], 120_000).await?;
                completed.fetch_add(out.done.iter().flatten().count() as u64, Ordering::Relaxed);
                let mine = out.claims.into_iter().flat_map(|c| c.runners).next();
                me.leases_since = mine.as_ref().and_then(|m| m.leases_since);
                // Each job is reported by the next tick, as the e2e runners report.
                done = mine
                    .into_iter()
                    .flat_map(|m| m.claimed)
                    .map(|c| ReportOf {
                        token_hash: token_hash.clone(),
                        runner: me.id,
                        done: DoneReport {
                            id: c.id,
                            epoch: c.epoch,
                            report: Reported::Complete(json!({"exit_code": 0})),
                        },
                    })
                    .collect();
            }
            Ok::<_, anyhow::Error>(())
        });
    }
    let rate = measure(&completed, args.seconds, "baseline").await;
    stop.store(true, Ordering::Relaxed);
    while let Some(r) = tasks.join_next().await {
        r??;
    }
    Ok(rate)
}
