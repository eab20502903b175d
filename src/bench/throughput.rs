//! Throughput: durable jobs per second over dispatch → lease → complete through two replicas,
//! one job per lease and batched, beside the raw-SQL baseline: the same park, claim and fenced
//! complete statements from `sql/`, prepared, autocommit, at the same concurrency, no HTTP.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};
use uuid::Uuid;

use super::setup::{self, ReplicaProcess};
use super::{progress, round, BenchArgs, Deployment, Table};
use crate::client::Client;
use crate::store::sql;
use crate::wire;

pub async fn run(
    dep: &Deployment,
    args: &BenchArgs,
    out: &mut Map<String, Value>,
    table: &mut Table,
) -> anyhow::Result<()> {
    let url = dep.fresh_database("leasehold_bench_throughput").await?;
    let pool = (args.runners + args.dispatchers)
        .div_ceil(2)
        .max(8)
        .to_string();
    let env = [("LEASEHOLD_POOL_SIZE", pool)];
    let replicas = [
        ReplicaProcess::start(&url, &env).await?,
        ReplicaProcess::start(&url, &env).await?,
    ];
    let key = setup::api_key(&url, "bench", "bench").await?;
    let operators: Vec<Client> = replicas
        .iter()
        .map(|r| Client::new(&r.url, Some(key.clone())))
        .collect();

    progress("throughput: raw-SQL baseline");
    let baseline = baseline(&url, args).await?;
    truncate(&url).await?;

    progress("throughput: end to end, one job per lease");
    let single = setup::runners(&operators[0], args.runners, 1).await?;
    let e2e = end_to_end(&operators, &single, &replicas, 1, args).await?;
    truncate(&url).await?;

    progress("throughput: end to end, batch leasing");
    let batched = setup::runners(&operators[0], args.runners, args.batch).await?;
    let e2e_batch = end_to_end(&operators, &batched, &replicas, args.batch, args).await?;

    out.insert("baseline_jobs_per_s".into(), round(baseline, 0));
    out.insert("e2e_jobs_per_s".into(), round(e2e, 0));
    out.insert("e2e_batch_jobs_per_s".into(), round(e2e_batch, 0));
    out.insert("e2e_ratio".into(), round(e2e / baseline, 3));
    out.insert("e2e_batch_ratio".into(), round(e2e_batch / baseline, 3));
    out.insert(
        "throughput_shape".into(),
        json!({"dispatchers": args.dispatchers, "runners": args.runners, "batch": args.batch, "replicas": 2, "seconds": args.seconds}),
    );
    table.push((
        "baseline_jobs_per_s (raw SQL)".into(),
        format!("{baseline:.0}"),
        format!("{} inserters + {} claimers", args.dispatchers, args.runners),
    ));
    table.push((
        "e2e_jobs_per_s".into(),
        format!("{e2e:.0}"),
        format!("ratio {:.2} (target >= 0.6)", e2e / baseline),
    ));
    table.push((
        format!("e2e_batch_jobs_per_s (max_jobs {})", args.batch),
        format!("{e2e_batch:.0}"),
        format!("ratio {:.2} (target >= 1.0)", e2e_batch / baseline),
    ));
    Ok(())
}

async fn truncate(url: &str) -> anyhow::Result<()> {
    let c = setup::connect(url).await?;
    c.batch_execute("TRUNCATE jobs, job_events").await?;
    c.batch_execute("VACUUM ANALYZE jobs").await?;
    Ok(())
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

async fn end_to_end(
    operators: &[Client],
    runners: &[Client],
    replicas: &[ReplicaProcess],
    max_jobs: i64,
    args: &BenchArgs,
) -> anyhow::Result<f64> {
    let stop = Arc::new(AtomicBool::new(false));
    let completed = Arc::new(AtomicU64::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    for d in 0..args.dispatchers {
        let op = operators[d % operators.len()].clone();
        let stop = stop.clone();
        tasks.spawn(async move {
            let target = wire::Target::Pool {
                pool: wire::PoolName::Workspace,
            };
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let _ = op
                    .dispatch(&wire::Dispatch::new(target.clone(), json!({"n": n})))
                    .await;
                n += 1;
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
            while !stop.load(Ordering::Relaxed) {
                let Ok(jobs) = r
                    .lease(&wire::Lease {
                        wait_ms: Some(1000),
                        max_jobs: Some(max_jobs),
                        capabilities: None,
                        ..Default::default()
                    })
                    .await
                else {
                    continue;
                };
                // Report each job as it "finishes", one after another, as a runner does; firing
                // a whole batch of completions at once only queues them ahead of the dispatches.
                for j in &jobs {
                    if r.complete(j.id, j.epoch, json!({"exit_code": 0}))
                        .await
                        .is_ok()
                    {
                        completed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        });
    }
    let label = if max_jobs == 1 { "e2e" } else { "e2e batch" };
    let rate = measure(&completed, args.seconds, label).await;
    stop.store(true, Ordering::Relaxed);
    while tasks.join_next().await.is_some() {}
    Ok(rate)
}

async fn baseline(url: &str, args: &BenchArgs) -> anyhow::Result<f64> {
    let stop = Arc::new(AtomicBool::new(false));
    let completed = Arc::new(AtomicU64::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..args.dispatchers {
        let c = setup::connect(url).await?;
        let stop = stop.clone();
        tasks.spawn(async move {
            let insert = c.prepare(sql::JOB_INSERT).await?;
            let mut n = 0i64;
            while !stop.load(Ordering::Relaxed) {
                let payload = json!({"n": n});
                let none_uuid: Option<Uuid> = None;
                let none_i64: Option<i64> = None;
                let none_text: Option<String> = None;
                c.query_opt(
                    &insert,
                    &[
                        &Uuid::now_v7(),
                        &"bench",
                        &"ws:bench",
                        &none_uuid,
                        &"command",
                        &payload,
                        &Vec::<String>::new(),
                        &0i32,
                        &3i32,
                        &300_000i64,
                        &none_i64,
                        &none_text,
                        &Some("bench"),
                    ],
                )
                .await?;
                n += 1;
            }
            Ok::<_, anyhow::Error>(())
        });
    }
    for _ in 0..args.runners {
        let c = setup::connect(url).await?;
        let stop = stop.clone();
        let completed = completed.clone();
        tasks.spawn(async move {
            let claim = c.prepare(sql::LEASE_CLAIM).await?;
            let complete = c.prepare(sql::JOB_COMPLETE).await?;
            let runner = Uuid::now_v7();
            let caps: Vec<String> = Vec::new();
            let result = json!({"exit_code": 0});
            while !stop.load(Ordering::Relaxed) {
                let rows = c
                    .query(
                        &claim,
                        &[&runner, &"ws:bench", &caps, &1i64, &120_000i64, &1i64],
                    )
                    .await?;
                let mut took = false;
                for row in rows
                    .iter()
                    .filter(|r| r.get::<_, &str>("outcome") == "leased")
                {
                    let id: Uuid = row.get("id");
                    let epoch: i64 = row.get("epoch");
                    c.query_opt(&complete, &[&id, &epoch, &runner, &result])
                        .await?;
                    completed.fetch_add(1, Ordering::Relaxed);
                    took = true;
                }
                if !took {
                    // An empty queue: poll again shortly rather than spin on the CPU the
                    // inserters need.
                    tokio::time::sleep(Duration::from_micros(500)).await;
                }
            }
            Ok::<_, anyhow::Error>(())
        });
    }
    let rate = measure(&completed, args.seconds, "baseline").await;
    stop.store(true, Ordering::Relaxed);
    while let Some(r) = tasks.join_next().await {
        if let Err(e) = r? {
            let detail = e
                .downcast_ref::<tokio_postgres::Error>()
                .and_then(|e| e.as_db_error())
                .map(|d| d.message().to_owned());
            anyhow::bail!("baseline worker failed: {e:#} {detail:?}");
        }
    }
    Ok(rate)
}
