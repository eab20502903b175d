//! Wake latency: runners idle in long-polls on replica A, single jobs dispatched through replica
//! B at a steady pace; latency from the dispatch's commit (PostgreSQL's commit timestamp of the
//! job's first event, `track_commit_timestamp`) to the runner holding the lease.
//!
//! And where each wake's time went (issue 55): replica A logs the stages of every answer with
//! jobs (`leasehold::wake=debug`, hub::wake_stages), joined here per job with the commit time
//! and the runner's receipt: commit -> heard (the NOTIFY reached A) -> tick (A's tick for it
//! started) -> claimed (its statements answered) -> durable (its commit answered) -> written
//! (the answer handed to the connection) -> received. Each stage's p50 and p99, and its mean
//! over the slowest 1% of wakes: which stage the tail is.

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
    let log_path = std::env::temp_dir().join(format!("leasehold-wake-{}.log", Uuid::now_v7()));
    let a = ReplicaProcess::start_logging(
        &url,
        &[("LEASEHOLD_LOG", "warn,leasehold::wake=debug".to_owned())],
        std::fs::File::create(&log_path)?,
    )
    .await?;
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
    let logged = std::fs::read_to_string(&log_path).unwrap_or_default();
    let _ = std::fs::remove_file(&log_path);
    stages(&ids, &committed, &received, &logged, out, table);
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

/// The stages of one wake, in ms: `before_tick` (commit -> its tick started) is `notify` (->
/// heard on A) and `wait_tick` (-> started), which are `None` when not seen (a first look hears
/// no park; a tick that heard three or more may not say which was the job's).
const STAGES: [&str; 7] = [
    "before_tick",
    "notify",
    "wait_tick",
    "claim",
    "commit",
    "answer",
    "client",
];

/// Replica A's `lease stages` lines: job id -> (first heard, last heard, started, claimed,
/// durable, written), unix seconds (heard 0: none).
fn logged_stages(log: &str) -> HashMap<Uuid, [f64; 6]> {
    let mut out = HashMap::new();
    for line in log.lines().filter(|l| l.contains("lease stages")) {
        let fields: HashMap<&str, &str> = line
            .split_whitespace()
            .filter_map(|w| w.split_once('='))
            .collect();
        let Some(job) = fields.get("job").and_then(|j| j.parse().ok()) else {
            continue;
        };
        let at = |k: &str| {
            fields
                .get(k)
                .and_then(|v| v.parse::<i64>().ok())
                .map_or(0.0, |us| us as f64 / 1e6)
        };
        let times = [
            at("heard_us"),
            at("heard_last_us"),
            at("started_us"),
            at("claimed_us"),
            at("durable_us"),
            at("written_us"),
        ];
        out.insert(job, times);
    }
    out
}

/// Each wake's stages joined from the commit time, A's log and the receipt; each stage's p50
/// and p99, and its mean over the slowest 1% of wakes.
fn stages(
    ids: &[Uuid],
    committed: &HashMap<Uuid, f64>,
    received: &HashMap<Uuid, f64>,
    log: &str,
    out: &mut serde_json::Map<String, serde_json::Value>,
    table: &mut Vec<(String, String, String)>,
) {
    let logged = logged_stages(log);
    // (total, stages) per wake, ms.
    let mut wakes: Vec<(f64, [Option<f64>; 7])> = Vec::new();
    let (mut first_looks, mut unknown) = (0, 0);
    for id in ids {
        let (Some(c), Some(r), Some(t)) = (committed.get(id), received.get(id), logged.get(id))
        else {
            continue;
        };
        let [first, last, started, claimed, durable, written] = *t;
        let ms = |from: f64, to: f64| Some((to - from) * 1000.0);
        // The job's own park was heard after its commit: the first heard before the tick if
        // that one is, else the last (exact for up to two parks a tick; else unknown).
        let heard = [first, last].into_iter().find(|h| *h >= *c);
        let (notify, wait) = match heard {
            Some(heard) => (ms(*c, heard), ms(heard, started)),
            None if first == 0.0 => {
                first_looks += 1;
                (None, None)
            }
            None => {
                unknown += 1;
                (None, None)
            }
        };
        let each = [
            ms(*c, started),
            notify,
            wait,
            ms(started, claimed),
            ms(claimed, durable),
            ms(durable, written),
            ms(written, *r),
        ];
        wakes.push(((r - c) * 1000.0, each));
    }
    wakes.sort_by(|a, b| a.0.total_cmp(&b.0));
    let tail = &wakes[wakes.len() - wakes.len().div_ceil(100).min(wakes.len())..];
    let mut json = serde_json::Map::new();
    for (i, stage) in STAGES.iter().enumerate() {
        let mut all: Vec<f64> = wakes.iter().filter_map(|w| w.1[i]).collect();
        let slow: Vec<f64> = tail.iter().filter_map(|w| w.1[i]).collect();
        let slow_mean = if slow.is_empty() {
            0.0
        } else {
            slow.iter().sum::<f64>() / slow.len() as f64
        };
        let (p50, p99) = (quantile(&mut all, 0.5), quantile(&mut all, 0.99));
        json.insert(
            (*stage).to_owned(),
            json!({"p50_ms": round(p50, 3), "p99_ms": round(p99, 3),
                   "slowest_1pct_mean_ms": round(slow_mean, 3), "n": all.len()}),
        );
        table.push((
            format!("wake_stage_{stage}_ms"),
            format!("{p50:.2} / {p99:.2}"),
            format!("p50 / p99; slowest 1% of wakes: mean {slow_mean:.2}"),
        ));
    }
    json.insert("wakes".into(), json!(wakes.len()));
    json.insert("first_looks".into(), json!(first_looks));
    json.insert("heard_unknown".into(), json!(unknown));
    out.insert("wake_stages".into(), serde_json::Value::Object(json));
}
