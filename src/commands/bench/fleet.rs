//! `fleet`: the dispatcher under a fleet's shapes (issue 51), not the bench's plain runners.
//! Three replicas on one database; `--fleet-workspaces` workspaces (20), each with runners of
//! six classes (plain, `gpu`, `arm64`, `gpu`+`arm64`, an exclusive `canary`, and jobs named for
//! one runner), capacities 1-8, workspace and personal tiers, `--fleet-runners` (400) in all,
//! each long-polling one replica. Each class has a steady dispatcher per workspace (20 jobs a
//! second; the named one 4, what one runner keeps up with). Three phases of `--seconds` each:
//! quiet; one workspace (`flood`) dispatching `--fleet-flood` (50,000) jobs as fast as it can;
//! then `--fleet-backlog` (10,000) `gpu` jobs parked in every workspace ahead of its other work,
//! its `gpu` runners busy (here: not polling). Throughout, 1 % of lease calls hang up at random and one replica fails every
//! `--fleet-fail-ticks`th tick (the hidden tick fault).
//!
//! Per class and phase: dispatch -> lease p50 / p99 / max (the dispatch sent to the runner
//! holding the job, both clocks this process's); jobs given back for a gone caller and the time
//! from their lease to their `caller_gone`; capacity overcommits seen by a sampler; failed
//! ticks; deadlocks (`pg_stat_database`). One `fleet` object in the JSON line.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::Rng;
use serde_json::{json, Value};
use uuid::Uuid;

use super::setup::{self, ReplicaProcess};
use super::stats::quantile;
use super::{progress, round, BenchArgs, Deployment, Report};
use crate::client::Client;
use crate::wire;

/// The classes a workspace's runners and jobs come in: name, capabilities, exclusive set.
const CLASSES: [(&str, &[&str], &[&str]); 5] = [
    ("plain", &[], &[]),
    ("gpu", &["cuda12", "gpu"], &[]),
    ("arm64", &["arm64"], &[]),
    ("gpu+arm64", &["arm64", "gpu"], &[]),
    ("canary", &["canary"], &["canary"]),
];

/// When each job was dispatched (its class and workspace), and when a runner first held it.
#[derive(Default)]
struct Clock {
    sent: HashMap<Uuid, (Instant, &'static str, bool)>,
    held: HashMap<Uuid, Instant>,
}

pub async fn run(dep: &Deployment, args: &BenchArgs, report: &mut Report) -> anyhow::Result<()> {
    let Report { json: out, table } = report;
    let url = dep.fresh_database("leasehold_bench_fleet").await?;
    let fault = [(
        "LEASEHOLD_FAULT_FAIL_TICKS",
        args.fleet_fail_ticks.to_string(),
    )];
    let replicas = vec![
        ReplicaProcess::start(&url, &[]).await?,
        ReplicaProcess::start(&url, &[]).await?,
        ReplicaProcess::start(&url, &fault).await?,
    ];
    let workspaces: Vec<String> = (0..args.fleet_workspaces.max(2))
        .map(|i| {
            if i == 0 {
                "flood".to_owned()
            } else {
                format!("ws{i}")
            }
        })
        .collect();
    let per_ws = (args.fleet_runners / workspaces.len()).max(CLASSES.len() + 1);

    progress("fleet: pairing runners");
    let clock: Arc<Mutex<Clock>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let hangups = Arc::new(AtomicU64::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    let mut operators = Vec::new();
    let mut named_for: Vec<Uuid> = Vec::new();
    let mut n = 0usize;
    for ws in &workspaces {
        let key = setup::api_key(&url, ws, "bench").await?;
        let ops: Vec<Client> = replicas
            .iter()
            .map(|r| Client::new(&r.url, Some(key.clone())))
            .collect();
        let mut first = None;
        for i in 0..per_ws {
            let (_, caps, exclusive) = CLASSES[i % CLASSES.len()];
            let tier = if i % 4 == 3 {
                wire::Tier::Personal
            } else {
                wire::Tier::Workspace
            };
            let on = &ops[n % ops.len()];
            n += 1;
            let created = on
                .pair_runner(
                    tier,
                    &wire::CreateRunner {
                        label: format!("fleet-{ws}-{i}"),
                        os: Some("linux".into()),
                        capabilities: Some(caps.iter().map(|c| (*c).to_owned()).collect()),
                        exclusive: Some(exclusive.iter().map(|c| (*c).to_owned()).collect()),
                        // The first runner also takes the workspace's named jobs: room for them.
                        capacity: Some(if i == 0 { 8 } else { 1 + (i as i64 % 8) }),
                        ..Default::default()
                    },
                )
                .await?;
            first.get_or_insert(created.runner.id);
            // A `gpu`-only runner is busy elsewhere: it never polls (the backlog waits).
            if caps == ["cuda12", "gpu"] {
                continue;
            }
            let r = on.with_token(created.token);
            let capacity = if i == 0 { 8 } else { 1 + (i as i64 % 8) };
            let (clock, stop, hangups) = (clock.clone(), stop.clone(), hangups.clone());
            tasks.spawn(async move { poll(r, capacity, clock, stop, hangups).await });
        }
        named_for.extend(first);
        operators.push(ops);
    }

    // Quiet, then one workspace flooding, then the gpu backlogs parked (the flood over);
    // steady dispatchers throughout.
    let mut phases = Vec::new();
    for phase in ["quiet", "flood", "backlog"] {
        let mut load = tokio::task::JoinSet::new();
        let flood_stop = Arc::new(AtomicBool::new(false));
        if phase == "backlog" {
            progress("fleet: parking the gpu backlogs");
            let db = setup::connect(&url).await?;
            for ws in &workspaces {
                backlog(&db, ws, args.fleet_backlog as i64).await?;
            }
        }
        if phase == "flood" {
            progress("fleet: one workspace floods");
            let flood = operators[0][0].clone();
            let (clock, stop, total) = (clock.clone(), flood_stop.clone(), args.fleet_flood);
            load.spawn(async move {
                let mut sent = 0;
                while sent < total && !stop.load(Ordering::Relaxed) {
                    let items = (0..100)
                        .map(|i| wire::BatchItem {
                            dispatch: wire::Dispatch::new(workspace_pool(), json!(sent + i)),
                            idempotency_key: None,
                        })
                        .collect();
                    let now = Instant::now();
                    if let Ok(jobs) = flood.dispatch_batch(items).await {
                        let mut c = clock.lock().expect("clock");
                        for j in jobs {
                            c.sent.insert(j.id, (now, "flood", true));
                        }
                    }
                    sent += 100;
                }
            });
        }
        let phase_stop = Arc::new(AtomicBool::new(false));
        for (w, ops) in operators.iter().enumerate().skip(1) {
            for (c, (name, caps, _)) in CLASSES.iter().enumerate() {
                if *name == "gpu" {
                    // Its runners are busy: its jobs are the backlog.
                    continue;
                }
                let on = ops[(w + c) % ops.len()].clone();
                let (clock, phase_stop) = (clock.clone(), phase_stop.clone());
                let mut d = wire::Dispatch::new(workspace_pool(), json!(name));
                if !caps.is_empty() {
                    d.required_capabilities = Some(caps.iter().map(|c| (*c).to_owned()).collect());
                }
                load.spawn(steady(on, d, name, 50, clock, phase_stop));
            }
            let on = ops[w % ops.len()].clone();
            let d = wire::Dispatch::new(
                wire::Target::Runner {
                    runner_id: named_for[w],
                },
                json!("named"),
            );
            // Named for one runner: a pace it can keep alone.
            load.spawn(steady(
                on,
                d,
                "named",
                250,
                clock.clone(),
                phase_stop.clone(),
            ));
        }
        let db = setup::connect(&url).await?;
        let overcommits = sample_overcommits(&db, Duration::from_secs(args.seconds)).await?;
        phase_stop.store(true, Ordering::Relaxed);
        flood_stop.store(true, Ordering::Relaxed);
        while load.join_next().await.is_some() {}
        // What was dispatched has time to be held.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let taken = std::mem::take(&mut *clock.lock().expect("clock"));
        phases.push((phase, figures(&taken), overcommits));
    }
    stop.store(true, Ordering::Relaxed);
    while tasks.join_next().await.is_some() {}

    let db = setup::connect(&url).await?;
    let gone = db
        .query_one(
            "SELECT count(*), COALESCE(max(extract(epoch FROM g.at - l.at)), 0)::float8 * 1000
               FROM job_events g JOIN job_events l ON l.job_id = g.job_id AND l.seq = g.seq - 1
              WHERE g.data->>'reason' = 'caller_gone'",
            &[],
        )
        .await?;
    let (gone_jobs, gone_max_ms): (i64, f64) = (gone.get(0), gone.get(1));
    let deadlocks: i64 = db
        .query_one(
            "SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()",
            &[],
        )
        .await?
        .get(0);
    let mut failed_ticks = 0;
    for r in &replicas {
        let text = reqwest::get(format!("{}/metrics", r.url))
            .await?
            .text()
            .await?;
        failed_ticks += text
            .lines()
            .find_map(|l| l.strip_prefix("leasehold_dispatcher_ticks_failed_total "))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .unwrap_or(0.0) as u64;
    }

    let mut fleet = serde_json::Map::new();
    for (phase, by_class, overcommits) in &phases {
        fleet.insert(
            (*phase).to_owned(),
            json!({"by_class": by_class, "capacity_overcommits": overcommits}),
        );
    }
    let p99 = |phase: usize, class: &str| {
        phases[phase]
            .1
            .get(class)
            .and_then(|v| v["p99_ms"].as_f64())
    };
    let ratio = |phase: usize, class: &str| match (p99(0, class), p99(phase, class)) {
        (Some(q), Some(l)) if q > 0.0 => Some(l / q),
        _ => None,
    };
    // The other workspaces under the flood: every class of theirs.
    let quiet_ratio = ["plain", "arm64", "gpu+arm64", "canary", "named"]
        .iter()
        .filter_map(|c| ratio(1, c))
        .fold(0.0f64, f64::max);
    // Behind the backlog, which no runner that polls can run.
    let behind = |c: &str| ratio(2, c);
    fleet.insert("quiet_workspaces_p99_ratio".into(), round(quiet_ratio, 3));
    for c in ["arm64", "gpu+arm64", "canary", "plain"] {
        fleet.insert(
            format!("{c}_behind_backlog_p99_ratio"),
            behind(c).map_or(Value::Null, |r| round(r, 3)),
        );
    }
    fleet.insert("hangups".into(), json!(hangups.load(Ordering::Relaxed)));
    fleet.insert("caller_gone_jobs".into(), json!(gone_jobs));
    fleet.insert("caller_gone_max_ms".into(), round(gone_max_ms, 3));
    fleet.insert("ticks_failed".into(), json!(failed_ticks));
    fleet.insert("deadlocks".into(), json!(deadlocks));
    fleet.insert(
        "shape".into(),
        json!({"replicas": 3, "workspaces": workspaces.len(), "runners": n,
               "flood": args.fleet_flood, "backlog": args.fleet_backlog,
               "fail_every_ticks": args.fleet_fail_ticks, "seconds": args.seconds}),
    );
    table.push((
        "fleet: other workspaces' p99 under the flood / quiet (worst)".into(),
        format!("{quiet_ratio:.2}"),
        "target <= 2 (v1.4)".into(),
    ));
    table.push((
        "fleet: arm64 p99 behind the gpu backlog / without".into(),
        behind("arm64").map_or("-".into(), |r| format!("{r:.2}")),
        "target <= 1.5".into(),
    ));
    table.push((
        "fleet: caller_gone jobs / longest lease -> parked ms".into(),
        format!("{gone_jobs} / {gone_max_ms:.1}"),
        format!(
            "target <= 1000 ms; {} hang-ups",
            hangups.load(Ordering::Relaxed)
        ),
    ));
    table.push((
        "fleet: ticks failed / deadlocks / overcommits".into(),
        format!(
            "{failed_ticks} / {deadlocks} / {}",
            phases.iter().map(|p| p.2).sum::<u64>()
        ),
        "target: overcommits and deadlocks 0".into(),
    ));
    out.insert("fleet".into(), Value::Object(fleet));
    Ok(())
}

fn workspace_pool() -> wire::Target {
    wire::Target::Pool {
        pool: wire::PoolName::Workspace,
    }
}

/// A runner's loop: long-poll for up to its free capacity, complete what it holds at once; one
/// call in a hundred hangs up after 0-20 ms.
async fn poll(
    r: Client,
    capacity: i64,
    clock: Arc<Mutex<Clock>>,
    stop: Arc<AtomicBool>,
    hangups: Arc<AtomicU64>,
) {
    while !stop.load(Ordering::Relaxed) {
        let (hang, after) = {
            let mut rng = rand::rng();
            (rng.random_bool(0.01), rng.random_range(0..20u64))
        };
        let req = wire::Lease::waiting(2_000, capacity);
        let call = r.lease(&req);
        let got = if hang {
            let _ = tokio::time::timeout(Duration::from_millis(after), call).await;
            hangups.fetch_add(1, Ordering::Relaxed);
            continue;
        } else {
            call.await
        };
        let Ok(jobs) = got else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let now = Instant::now();
        {
            let mut c = clock.lock().expect("clock");
            for j in &jobs {
                c.held.entry(j.id).or_insert(now);
            }
        }
        for j in jobs {
            let _ = r.complete(j.id, j.epoch, json!({"exit_code": 0})).await;
        }
    }
}

/// One dispatch of `d` every `every_ms` until the phase ends.
async fn steady(
    on: Client,
    d: wire::Dispatch,
    class: &'static str,
    every_ms: u64,
    clock: Arc<Mutex<Clock>>,
    stop: Arc<AtomicBool>,
) {
    let mut pace = tokio::time::interval(Duration::from_millis(every_ms));
    while !stop.load(Ordering::Relaxed) {
        pace.tick().await;
        // From when the dispatch was sent: a runner may hold the job before its answer is read.
        let sent = Instant::now();
        if let Ok(job) = on.dispatch(&d).await {
            clock
                .lock()
                .expect("clock")
                .sent
                .insert(job.id, (sent, class, false));
        }
    }
}

/// `n` jobs for the busy `gpu` runners (`cuda12` and `gpu`: no runner that polls can run one)
/// parked in workspace `ws`'s pool, ahead of everything of their priority.
async fn backlog(db: &tokio_postgres::Client, ws: &str, n: i64) -> anyhow::Result<()> {
    db.execute(
        "INSERT INTO jobs (id, workspace, owner, pool, state, kind, payload, max_attempts,
                           required_capabilities, no_runner_timeout_ms, no_runner_check_at,
                           billing_tenant)
         SELECT gen_random_uuid(), $1, 'ws:' || $1, 'workspace', 'parked', 'command',
                '{\"argv\":[\"true\"]}', 3, '{cuda12,gpu}', 86400000, now() + interval '1 day', $1
           FROM generate_series(1, $2::bigint)",
        &[&ws, &n],
    )
    .await?;
    db.batch_execute("ANALYZE jobs").await?;
    Ok(())
}

/// Sample, every 100 ms for `how_long`, runners holding more leases than their capacity.
async fn sample_overcommits(
    db: &tokio_postgres::Client,
    how_long: Duration,
) -> anyhow::Result<u64> {
    let until = Instant::now() + how_long;
    let mut seen = 0u64;
    while Instant::now() < until {
        let over: i64 = db
            .query_one(
                "SELECT count(*) FROM (SELECT leased_by, count(*) AS n FROM jobs
                                        WHERE state = 'leased' GROUP BY leased_by) h
                   JOIN runners r ON r.id = h.leased_by WHERE h.n > r.capacity",
                &[],
            )
            .await?
            .get(0);
        seen += over as u64;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(seen)
}

/// Dispatch -> held, per class (the flood apart), in ms.
fn figures(c: &Clock) -> serde_json::Map<String, Value> {
    let mut lat: HashMap<&str, Vec<f64>> = HashMap::new();
    let mut missing: HashMap<&str, u64> = HashMap::new();
    for (id, (sent, class, _)) in &c.sent {
        match c.held.get(id) {
            Some(held) => lat
                .entry(class)
                .or_default()
                .push(held.saturating_duration_since(*sent).as_secs_f64() * 1000.0),
            None => *missing.entry(class).or_default() += 1,
        }
    }
    let mut out = serde_json::Map::new();
    for (class, mut l) in lat {
        out.insert(
            class.to_owned(),
            json!({"jobs": l.len(), "p50_ms": round(quantile(&mut l, 0.5), 3),
                   "p99_ms": round(quantile(&mut l, 0.99), 3),
                   "max_ms": round(quantile(&mut l, 1.0), 3),
                   "not_held": missing.get(class).copied().unwrap_or(0)}),
        );
    }
    out
}
