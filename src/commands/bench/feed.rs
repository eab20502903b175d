//! The workspace feed under load (issue 53): 20 runners long-polling replica A take and
//! complete jobs dispatched one by one through replica B at a steady pace, while one reader
//! follows the feed on replica A with long polls. Measured: whether the reader saw every
//! `state` event exactly once and each job's in `seq` order, and the lag from each event's
//! commit (PostgreSQL's commit timestamp, `track_commit_timestamp`) to the reader holding it.
//! (The webhook figures and the e2e ratio with a reader attached are not measured yet.)

use std::collections::{HashMap, HashSet};
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

/// Events the reader held: (job, seq) -> when, in the order it got them.
type Seen = Arc<Mutex<Vec<(Uuid, i32, f64)>>>;

pub async fn run(dep: &Deployment, args: &BenchArgs, report: &mut Report) -> anyhow::Result<()> {
    let Report { json: out, table } = report;
    let url = dep.fresh_database("leasehold_bench_feed").await?;
    let a = ReplicaProcess::start(&url, &[]).await?;
    let b = ReplicaProcess::start(&url, &[]).await?;
    let key = setup::api_key(&url, "bench", "bench").await?;
    let on_a = Client::new(&a.url, Some(key.clone()));
    let on_b = Client::new(&b.url, Some(key));
    let runners = setup::runners(&on_a, 20, 1).await?;

    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = tokio::task::JoinSet::new();
    for r in runners {
        let stop = stop.clone();
        tasks.spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let Ok(jobs) = r.lease(&wire::Lease::waiting(2000, 1)).await else {
                    continue;
                };
                for j in jobs {
                    let _ = r.complete(j.id, j.epoch, json!(null)).await;
                }
            }
        });
    }
    let seen: Seen = Arc::default();
    let reader = {
        let seen = seen.clone();
        let stop = stop.clone();
        let on_a = on_a.clone();
        tokio::spawn(async move {
            let mut after: Option<String> = None;
            while !stop.load(Ordering::Relaxed) {
                let Ok(page) = on_a.feed(after.as_deref(), &[], Some(1000), 2000).await else {
                    continue;
                };
                let now = unix_now();
                let mut seen = seen.lock().expect("lock");
                seen.extend(page.events.iter().map(|e| (e.job_id, e.seq, now)));
                after = Some(page.next);
            }
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let target = wire::Target::Pool {
        pool: wire::PoolName::Workspace,
    };
    let mut ids = Vec::with_capacity(args.wake_jobs);
    let mut pace = tokio::time::interval(Duration::from_micros(1_000_000 / args.wake_rate.max(1)));
    for i in 0..args.wake_jobs {
        pace.tick().await;
        let job = on_b
            .dispatch(&wire::Dispatch::new(target.clone(), json!({"i": i})))
            .await?;
        ids.push(job.id);
        if i % 100 == 0 {
            progress(&format!("feed: {i}/{} jobs dispatched", args.wake_jobs));
        }
    }
    // Every job settles with three state events: parked, leased, completed.
    let want = ids.len() * 3;
    let deadline = Instant::now() + Duration::from_secs(30);
    while seen.lock().expect("lock").len() < want && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop.store(true, Ordering::Relaxed);
    let _ = reader.await;
    while tasks.join_next().await.is_some() {}

    let db = setup::connect(&url).await?;
    let rows = db
        .query(
            "SELECT job_id, seq, extract(epoch FROM pg_xact_commit_timestamp(xmin))::float8
               FROM job_events WHERE kind = 'state'",
            &[],
        )
        .await?;
    let committed: HashMap<(Uuid, i32), f64> = rows
        .iter()
        .map(|r| ((r.get(0), r.get(1)), r.get(2)))
        .collect();
    let seen = seen.lock().expect("lock");
    let mut once = HashSet::new();
    let mut duplicates = 0;
    let mut out_of_order = 0;
    let mut last_seq: HashMap<Uuid, i32> = HashMap::new();
    let mut lag = Vec::with_capacity(seen.len());
    for (job, seq, at) in seen.iter() {
        if !once.insert((*job, *seq)) {
            duplicates += 1;
        }
        if last_seq.get(job).is_some_and(|last| *last >= *seq) {
            out_of_order += 1;
        }
        last_seq.insert(*job, *seq);
        if let Some(c) = committed.get(&(*job, *seq)) {
            lag.push((at - c) * 1000.0);
        }
    }
    let missing = committed.keys().filter(|k| !once.contains(k)).count();
    let (p50, p99, max) = (
        quantile(&mut lag, 0.5),
        quantile(&mut lag, 0.99),
        quantile(&mut lag, 1.0),
    );
    out.insert("feed_events".into(), json!(seen.len()));
    out.insert("feed_missing".into(), json!(missing));
    out.insert("feed_duplicates".into(), json!(duplicates));
    out.insert("feed_out_of_order".into(), json!(out_of_order));
    out.insert("feed_lag_p50_ms".into(), round(p50, 3));
    out.insert("feed_lag_p99_ms".into(), round(p99, 3));
    out.insert("feed_lag_max_ms".into(), round(max, 3));
    table.push((
        "feed_lag_p99_ms".into(),
        format!("{p99:.2}"),
        format!(
            "target <= 50; p50 {p50:.2}, max {max:.2}; {} events of {} jobs at {}/s: missing {missing}, duplicates {duplicates}, out of order {out_of_order}",
            seen.len(),
            ids.len(),
            args.wake_rate
        ),
    ));
    Ok(())
}
