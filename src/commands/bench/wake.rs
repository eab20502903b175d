//! Wake latency: runners idle in long-polls on replica A, single jobs dispatched through replica
//! B at a steady pace; latency from the dispatch's commit (PostgreSQL's commit timestamp of the
//! job's first event, `track_commit_timestamp`) to the runner holding the lease.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::json;
use uuid::Uuid;

use super::setup::{self, ReplicaProcess};
use super::stats::quantile;
use super::{progress, round, BenchArgs, Deployment, Report};
use crate::client::Client;
use crate::wire;

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

pub async fn run(dep: &Deployment, args: &BenchArgs, report: &mut Report) -> anyhow::Result<()> {
    let Report { json: out, table } = report;
    let url = dep.fresh_database("leasehold_bench_wake").await?;
    let a = ReplicaProcess::start(&url, &[]).await?;
    let b = ReplicaProcess::start(&url, &[]).await?;
    let key = setup::api_key(&url, "bench", "bench").await?;
    let on_a = Client::new(&a.url, Some(key.clone()));
    let on_b = Client::new(&b.url, Some(key));
    let runners = setup::runners(&on_a, 20, 1).await?;

    let received: Arc<Mutex<HashMap<Uuid, f64>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = tokio::task::JoinSet::new();
    for r in runners {
        let received = received.clone();
        let stop = stop.clone();
        tasks.spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let Ok(jobs) = r.lease(&wire::Lease::waiting(2000, 1)).await else {
                    continue;
                };
                for j in jobs {
                    received.lock().expect("lock").insert(j.id, unix_now());
                    let _ = r.complete(j.id, j.epoch, json!(null)).await;
                }
            }
        });
    }
    // Let every runner park.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let target = wire::Target::Pool {
        pool: wire::PoolName::Workspace,
    };
    let mut ids = Vec::with_capacity(args.wake_jobs);
    let mut rtts = Vec::with_capacity(args.wake_jobs);
    let mut pace = tokio::time::interval(Duration::from_micros(1_000_000 / args.wake_rate.max(1)));
    for i in 0..args.wake_jobs {
        pace.tick().await;
        let sent = Instant::now();
        let job = on_b
            .dispatch(&wire::Dispatch::new(target.clone(), json!({"i": i})))
            .await?;
        rtts.push(sent.elapsed().as_secs_f64() * 1000.0);
        ids.push(job.id);
        if i % 100 == 0 {
            progress(&format!("wake: {i}/{} jobs dispatched", args.wake_jobs));
        }
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while received.lock().expect("lock").len() < ids.len() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop.store(true, Ordering::Relaxed);
    while tasks.join_next().await.is_some() {}

    let db = setup::connect(&url).await?;
    let rows = db
        .query(
            "SELECT job_id, extract(epoch FROM pg_xact_commit_timestamp(xmin))::float8 FROM job_events WHERE seq = 1",
            &[],
        )
        .await?;
    let committed: HashMap<Uuid, f64> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
    let received = received.lock().expect("lock");
    let mut lat: Vec<f64> = ids
        .iter()
        .filter_map(|id| Some((received.get(id)? - committed.get(id)?) * 1000.0))
        .collect();
    let missing = ids.len() - lat.len();
    let (p50, p99, p999, max) = (
        quantile(&mut lat, 0.5),
        quantile(&mut lat, 0.99),
        quantile(&mut lat, 0.999),
        quantile(&mut lat, 1.0),
    );
    let rtt50 = quantile(&mut rtts, 0.5);
    out.insert("wake_jobs".into(), json!(lat.len()));
    out.insert("wake_p50_ms".into(), round(p50, 3));
    out.insert("wake_p99_ms".into(), round(p99, 3));
    out.insert("wake_p999_ms".into(), round(p999, 3));
    out.insert("wake_max_ms".into(), round(max, 3));
    out.insert("wake_dispatch_rtt_p50_ms".into(), round(rtt50, 3));
    let note = format!(
        "{} jobs at {}/s, commit on B -> lease on A; missing {missing}",
        lat.len(),
        args.wake_rate
    );
    table.push((
        "wake_p50_ms".into(),
        format!("{p50:.2}"),
        format!("target <= 2; {note}"),
    ));
    table.push((
        "wake_p99_ms".into(),
        format!("{p99:.2}"),
        "target <= 5".into(),
    ));
    table.push(("wake_p999_ms".into(), format!("{p999:.2}"), String::new()));
    table.push((
        "wake_max_ms".into(),
        format!("{max:.2}"),
        format!("dispatch round trip p50 {rtt50:.2} ms"),
    ));
    Ok(())
}
