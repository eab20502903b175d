//! Drain (issue 55): `--drain-jobs` (50,000) runnable jobs parked at once, then 16 runners (8
//! on each of two replicas) leasing `max_jobs` 100, each lease carrying the reports of the jobs
//! the last one gave (`done`), until every job is completed: jobs per second from the first
//! lease to the last report. graphile-worker's harness (`../shared/peers`) measures the same
//! shape (`drain`); no goal yet, the figure is reported beside the reference cycle.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;

use super::setup::{self, ReplicaProcess};
use super::{progress, round, BenchArgs, Deployment, Report};
use crate::client::Client;
use crate::wire;

/// Jobs a runner asks for in each lease.
const MAX_JOBS: i64 = 100;
/// Runners, half on each replica.
const RUNNERS: usize = 16;

pub async fn run(dep: &Deployment, args: &BenchArgs, report: &mut Report) -> anyhow::Result<()> {
    let Report { json: out, table } = report;
    let url = dep.fresh_database("leasehold_bench_drain").await?;
    let replicas = [
        ReplicaProcess::start(&url, &[]).await?,
        ReplicaProcess::start(&url, &[]).await?,
    ];
    let key = setup::api_key(&url, "bench", "bench").await?;
    let operator = Client::new(&replicas[0].url, Some(key));
    let runners = setup::runners(&operator, RUNNERS, MAX_JOBS).await?;
    let total = args.drain_jobs;
    progress(&format!("drain: parking {total} jobs"));
    let db = setup::connect(&url).await?;
    setup::park(&db, total as i64).await?;
    db.batch_execute("ANALYZE jobs").await?;

    progress("drain: 16 runners leasing 100 at a time");
    let completed = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for (i, r) in runners.iter().enumerate() {
        let r = Client::new(
            &replicas[i % replicas.len()].url,
            r.token().map(str::to_owned),
        );
        let completed = completed.clone();
        tasks.spawn(async move {
            let mut done: Vec<wire::DoneReport> = Vec::new();
            loop {
                // No wait: a lease answers at once with what it claimed, and a runner that
                // found nothing and had nothing to report is done.
                let mut req = wire::Lease::waiting(0, MAX_JOBS);
                req.done = (!done.is_empty()).then(|| std::mem::take(&mut done));
                let reported = req.done.as_ref().map_or(0, Vec::len);
                let leased = match r.lease_reporting(&req).await {
                    Ok(leased) => leased,
                    Err(_) => {
                        done = req.done.unwrap_or_default();
                        continue;
                    }
                };
                let applied = leased.done.iter().filter(|d| d.status == 200).count();
                completed.fetch_add(applied as u64, Ordering::Relaxed);
                if leased.jobs.is_empty() && reported == 0 {
                    return;
                }
                done = super::throughput::reports(&leased.jobs);
            }
        });
    }
    let deadline = Instant::now() + Duration::from_secs(600);
    while completed.load(Ordering::Relaxed) < total as u64 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
        progress(&format!(
            "drain: {}/{total} completed",
            completed.load(Ordering::Relaxed)
        ));
    }
    let elapsed = started.elapsed().as_secs_f64();
    tasks.abort_all();
    while tasks.join_next().await.is_some() {}
    let done = completed.load(Ordering::Relaxed);
    anyhow::ensure!(
        done >= total as u64,
        "drain: {done} of {total} completed in 600 s"
    );
    let rate = done as f64 / elapsed;
    out.insert("drain_jobs".into(), json!(total));
    out.insert("drain_jobs_per_s".into(), round(rate, 0));
    table.push((
        "drain_jobs_per_s".into(),
        format!("{rate:.0}"),
        format!("{total} parked, {RUNNERS} runners leasing {MAX_JOBS} with done, 2 replicas"),
    ));
    Ok(())
}
