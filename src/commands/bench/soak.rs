//! `soak`: does the queue stay fast for hours? The end-to-end load of `throughput` (dispatch →
//! lease → complete over HTTP, one job per call, two replicas) runs for `--soak-seconds`
//! (600) while one transaction holds a snapshot open the whole time (the analytics query users
//! report: river#59, graphile#348), so vacuum can remove nothing the load leaves behind. Then
//! the snapshot is released and the load runs one more minute.
//!
//! Printed: throughput and lease p99 in the first minute, the last minute under the snapshot,
//! and the minute after its release; the job table's and its indexes' sizes at each point; and
//! where the time goes in each of those minutes: per statement (`pg_stat_statements`: mean ms
//! and shared blocks per call) and per index of `jobs` (entries read per scan).
//! Goals (issue 19): last minute ≥ 0.7× the first, lease p99 ≤ 3× fresh, and back to fresh
//! within a minute of the release.
//!
//! Before it, the raw reference cycle (pgbench, as `throughput` runs it) gets the same
//! treatment for `--soak-reference-seconds` (120; 0 skips it): once as it is (its claims spread
//! over 100 queues) and once on one queue (the soak's shape: every claim reads the same index
//! range), each with a snapshot held the whole run. It says how much of the loss is
//! PostgreSQL's own for a queue under a snapshot, and how much is ours.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};

use super::setup::{self, ReplicaProcess};
use super::stats::quantile;
use super::throughput;
use super::{progress, round, BenchArgs, Deployment, Report};
use crate::client::Client;
use crate::wire;

/// One minute: the window each figure is taken over.
const WINDOW: Duration = Duration::from_secs(60);

/// Lease latencies (ms) of calls that returned a job, stamped with when they ended.
type Samples = Arc<Mutex<Vec<(Duration, f64)>>>;

pub async fn run(dep: &Deployment, args: &BenchArgs, report: &mut Report) -> anyhow::Result<()> {
    let Report { json: out, table } = report;
    if args.soak_reference_seconds > 0 {
        let mut reference = Map::new();
        for (label, owners) in [("queues_100", 100), ("one_queue", 1)] {
            progress(&format!(
                "soak: the reference cycle under an open snapshot ({label}), {} s",
                args.soak_reference_seconds
            ));
            let r = reference_soak(dep, args.soak_reference_seconds, owners).await?;
            table.push((
                format!("soak reference ({label}) tps, first / last minute"),
                format!("{} / {}", r["tps"]["first_minute"], r["tps"]["last_minute"]),
                format!("ratio {} after {} jobs", r["ratio"], r["jobs"]),
            ));
            reference.insert(label.into(), r);
        }
        out.insert("soak_reference".into(), Value::Object(reference));
    }

    let url = dep.fresh_database("leasehold_bench_soak").await?;
    let (replicas, _, operators) = setup::load_replicas(&url, args).await?;
    let runners = setup::runners(&operators[0], args.runners, 1).await?;
    let db = setup::connect(&url).await?;
    let sizes_fresh = sizes(&db).await?;

    // The snapshot holder: a repeatable-read transaction that has read the job table.
    let holder = setup::connect(&url).await?;
    holder
        .batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM jobs")
        .await?;

    let name = "leasehold_bench_soak";
    let at_start = Counters::read(dep, &db, name).await?;
    let load = Load::start(
        &operators,
        &runners,
        &replicas,
        args.dispatchers,
        &names(&args.soak_capabilities),
        &names(&args.soak_requires),
    );
    let soak = Duration::from_secs(args.soak_seconds.max(2 * WINDOW.as_secs()));
    let (mut after_first, mut before_last) = (None, None);
    while load.t0.elapsed() < soak {
        tokio::time::sleep(Duration::from_secs(5)).await;
        if after_first.is_none() && load.t0.elapsed() >= WINDOW {
            after_first = Some(Counters::read(dep, &db, name).await?);
        }
        if before_last.is_none() && load.t0.elapsed() + WINDOW >= soak {
            before_last = Some(Counters::read(dep, &db, name).await?);
        }
        let (rate, _) = load.window(load.t0.elapsed());
        progress(&format!(
            "soak: {}/{} s under an open snapshot, {rate:.0} jobs/s",
            load.t0.elapsed().as_secs(),
            soak.as_secs()
        ));
    }
    let held_until = load.t0.elapsed();
    let at_release = Counters::read(dep, &db, name).await?;
    let sizes_held = sizes(&db).await?;
    holder.batch_execute("COMMIT").await?;
    progress("soak: snapshot released, one more minute");
    tokio::time::sleep(WINDOW).await;
    let end = load.t0.elapsed();
    let at_end = Counters::read(dep, &db, name).await?;
    let sizes_end = sizes(&db).await?;
    let figures = load.stop().await;
    let first = after_first.unwrap_or_default().since(&at_start);
    let last = at_release.since(&before_last.unwrap_or_default());
    let after = at_end.since(&at_release);

    let (first_rate, first_p99) = figures.window(WINDOW);
    let (held_rate, held_p99) = figures.window(held_until);
    let (after_rate, after_p99) = figures.window(end);
    out.insert(
        "soak".into(),
        json!({
            "seconds_under_snapshot": held_until.as_secs(),
            "jobs_per_s": {"first_minute": round(first_rate, 0), "last_minute": round(held_rate, 0),
                           "after_release": round(after_rate, 0)},
            "lease_p99_ms": {"first_minute": round(first_p99, 2), "last_minute": round(held_p99, 2),
                             "after_release": round(after_p99, 2)},
            "sizes_mb": {"fresh": sizes_fresh, "under_snapshot": sizes_held, "after_release": sizes_end},
            "profile": {"first_minute": first.json(), "last_minute": last.json(),
                        "after_release": after.json()},
        }),
    );
    out.insert(
        "soak_throughput_ratio".into(),
        round(held_rate / first_rate, 3),
    );
    out.insert(
        "soak_lease_p99_ratio".into(),
        round(held_p99 / first_p99, 3),
    );
    out.insert(
        "soak_recovered_ratio".into(),
        round(after_rate / first_rate, 3),
    );
    table.push((
        "soak jobs/s, first / last minute under a snapshot".into(),
        format!("{first_rate:.0} / {held_rate:.0}"),
        format!("ratio {:.2} (target >= 0.7)", held_rate / first_rate),
    ));
    table.push((
        "soak lease p99 ms, first / last minute".into(),
        format!("{first_p99:.1} / {held_p99:.1}"),
        format!("ratio {:.2} (target <= 3)", held_p99 / first_p99),
    ));
    table.push((
        "soak jobs/s, minute after the release".into(),
        format!("{after_rate:.0}"),
        format!("ratio {:.2} to the first minute", after_rate / first_rate),
    ));
    // The claim: from remembered places under the snapshot, from the head after.
    let claim = ["claim.sql"];
    table.push((
        "soak claim ms, first / last minute / after".into(),
        format!(
            "{:.2} / {:.2} / {:.2}",
            first.mean_ms(&claim),
            last.mean_ms(&claim),
            after.mean_ms(&claim)
        ),
        "pg_stat_statements, claim.sql".into(),
    ));
    table.push((
        "soak jobs table + indexes MB, fresh / held / after".into(),
        format!(
            "{} / {} / {}",
            sizes_fresh["jobs_total"], sizes_held["jobs_total"], sizes_end["jobs_total"]
        ),
        "pg_total_relation_size('jobs')".into(),
    ));
    Ok(())
}

/// Sizes in MB of the job table, its indexes and the events table.
async fn sizes(db: &tokio_postgres::Client) -> anyhow::Result<Value> {
    let row = db
        .query_one(
            "SELECT pg_relation_size('jobs')::float8, pg_indexes_size('jobs')::float8,
                    pg_total_relation_size('jobs')::float8,
                    pg_total_relation_size('job_events')::float8",
            &[],
        )
        .await?;
    let mb = |i: usize| round(row.get::<_, f64>(i) / 1_048_576.0, 1);
    Ok(
        json!({"jobs_heap": mb(0), "jobs_indexes": mb(1), "jobs_total": mb(2),
              "job_events_total": mb(3)}),
    )
}

/// The reference cycle on its own database with a snapshot held the whole run: pgbench's tps
/// in its first and last minute (from its progress report every 10 s), the jobs it completed,
/// and its table's size at the end. `owners` is how many queues its claims spread over (its
/// script's 100, or fewer).
async fn reference_soak(dep: &Deployment, seconds: u64, owners: u32) -> anyhow::Result<Value> {
    let name = "leasehold_bench_raw_soak";
    let url = throughput::reference_database(dep, name).await?;
    let script = throughput::CYCLE_SQL.replace("random(1, 100)", &format!("random(1, {owners})"));
    anyhow::ensure!(
        script != throughput::CYCLE_SQL || owners == 100,
        "the reference cycle no longer picks its queue with random(1, 100)"
    );
    let holder = setup::connect(&url).await?;
    holder
        .batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM jobs")
        .await?;
    let output = throughput::run_pgbench(&url, seconds, &script, &["-P", "10"]).await?;
    // "progress: 10.0 s, 5231.9 tps, lat 3.055 ms stddev 4.017, 0 failed"
    let progress_lines: Vec<(f64, f64)> = String::from_utf8_lossy(&output.stderr)
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("progress: ")?;
            let (t, rest) = rest.split_once(" s, ")?;
            let (tps, _) = rest.split_once(" tps")?;
            Some((t.parse().ok()?, tps.parse().ok()?))
        })
        .collect();
    let window = WINDOW.as_secs_f64();
    let mean = |pick: &dyn Fn(f64) -> bool| {
        let tps: Vec<f64> = progress_lines
            .iter()
            .filter(|(t, _)| pick(*t))
            .map(|(_, tps)| *tps)
            .collect();
        tps.iter().sum::<f64>() / tps.len().max(1) as f64
    };
    let first = mean(&|t| t <= window);
    let last = mean(&|t| t > seconds as f64 - window);
    let row = holder
        .query_one(
            "SELECT pg_total_relation_size('jobs')::float8, pg_indexes_size('jobs')::float8",
            &[],
        )
        .await?;
    holder.batch_execute("COMMIT").await?;
    let jobs: i64 = holder
        .query_one("SELECT count(*) FROM jobs WHERE state = 'completed'", &[])
        .await?
        .get(0);
    drop(holder);
    dep.drop_database(name).await?;
    let mb = |i: usize| round(row.get::<_, f64>(i) / 1_048_576.0, 1);
    Ok(json!({
        "seconds": seconds, "queues": owners, "jobs": jobs,
        "tps": {"first_minute": round(first, 0), "last_minute": round(last, 0)},
        "ratio": round(last / first, 3),
        "sizes_mb": {"jobs_total": mb(0), "jobs_indexes": mb(1)},
    }))
}

/// The `sql/` file a `pg_stat_statements` text is of. That text has its constants replaced by
/// `$n` (comments kept), so it is the file sharing the longest prefix with it, at least its
/// first line (each file opens with a comment of its own).
fn statement_file(text: &str) -> Option<&'static str> {
    let text = text.trim_start();
    let common = |sql: &str| {
        sql.bytes()
            .zip(text.bytes())
            .take_while(|(a, b)| a == b)
            .count()
    };
    crate::store::sql::ALL
        .iter()
        .filter(|(_, sql)| common(sql) >= sql.find('\n').unwrap_or(sql.len()))
        .max_by_key(|(_, sql)| common(sql))
        .map(|(file, _)| *file)
}

/// Cumulative work counters of the soak's database, read at the edges of each window.
#[derive(Default)]
struct Counters {
    /// Per statement file: calls, execution ms, shared blocks (hit + read).
    statements: HashMap<&'static str, (f64, f64, f64)>,
    /// Per index of `jobs`: scans, entries read.
    indexes: HashMap<String, (f64, f64)>,
}

impl Counters {
    /// Read them now. Statements only where the server loads `pg_stat_statements` (the private
    /// one does; a `--database-url` may not).
    async fn read(
        dep: &Deployment,
        db: &tokio_postgres::Client,
        name: &str,
    ) -> anyhow::Result<Self> {
        let mut statements = HashMap::new();
        if let Ok(admin) = setup::connect(&dep.url("postgres")).await {
            let rows = admin
                .query(
                    "SELECT query, calls::float8, total_exec_time,
                            (shared_blks_hit + shared_blks_read)::float8
                       FROM pg_stat_statements
                      WHERE dbid = (SELECT oid FROM pg_database WHERE datname = $1)",
                    &[&name],
                )
                .await
                .unwrap_or_default();
            for r in rows {
                if let Some(file) = statement_file(r.get(0)) {
                    let e = statements.entry(file).or_insert((0.0, 0.0, 0.0));
                    e.0 += r.get::<_, f64>(1);
                    e.1 += r.get::<_, f64>(2);
                    e.2 += r.get::<_, f64>(3);
                }
            }
        }
        let indexes = db
            .query(
                "SELECT indexrelname::text, idx_scan::float8, idx_tup_read::float8
                   FROM pg_stat_user_indexes WHERE relname = 'jobs'",
                &[],
            )
            .await?
            .into_iter()
            .map(|r| (r.get(0), (r.get(1), r.get(2))))
            .collect();
        Ok(Self {
            statements,
            indexes,
        })
    }

    /// What was done between `earlier` and these.
    fn since(&self, earlier: &Self) -> Self {
        let statements = self
            .statements
            .iter()
            .map(|(k, (c, ms, b))| {
                let (c0, ms0, b0) = earlier.statements.get(k).copied().unwrap_or_default();
                (*k, (c - c0, ms - ms0, b - b0))
            })
            .collect();
        let indexes = self
            .indexes
            .iter()
            .map(|(k, (s, r))| {
                let (s0, r0) = earlier.indexes.get(k).copied().unwrap_or_default();
                (k.clone(), (s - s0, r - r0))
            })
            .collect();
        Self {
            statements,
            indexes,
        }
    }

    /// Mean execution ms per call in this window of the statement in `file`.
    /// Mean ms a call over these statements together.
    fn mean_ms(&self, files: &[&str]) -> f64 {
        let (calls, ms) = files
            .iter()
            .filter_map(|f| self.statements.get(f))
            .fold((0.0, 0.0), |(c, m), (calls, ms, _)| (c + calls, m + ms));
        ms / f64::max(calls, 1.0)
    }

    /// The statements that took at least 1 % of this window's statement time (calls, mean ms,
    /// shared blocks per call) and each scanned index of `jobs` (scans, entries read per scan).
    fn json(&self) -> Value {
        let total: f64 = self.statements.values().map(|(_, ms, _)| ms).sum();
        let statements: Map<String, Value> = self
            .statements
            .iter()
            .filter(|(_, (calls, ms, _))| *calls > 0.0 && *ms >= total / 100.0)
            .map(|(k, (calls, ms, blocks))| {
                (
                    (*k).to_owned(),
                    json!({"calls": calls, "ms": round(ms / calls, 3),
                           "blocks": round(blocks / calls, 0)}),
                )
            })
            .collect();
        let indexes: Map<String, Value> = self
            .indexes
            .iter()
            .filter(|(_, (scans, _))| *scans > 0.0)
            .map(|(k, (scans, read))| {
                (
                    k.clone(),
                    json!({"scans": scans, "entries_per_scan": round(read / scans, 1)}),
                )
            })
            .collect();
        json!({"statements": statements, "indexes": indexes})
    }
}

/// A comma-separated list of names, empty ones dropped.
fn names(list: &str) -> Vec<String> {
    list.split(',')
        .filter(|c| !c.is_empty())
        .map(str::to_owned)
        .collect()
}

/// The running load: dispatchers and runners, a per-second count of completed jobs, and the
/// lease latencies.
struct Load {
    t0: Instant,
    stop: Arc<AtomicBool>,
    tasks: tokio::task::JoinSet<()>,
    /// Completed jobs at the end of each second since `t0`.
    counts: Arc<Mutex<Vec<u64>>>,
    samples: Samples,
}

/// What a load measured, once stopped.
struct Figures {
    counts: Vec<u64>,
    samples: Vec<(Duration, f64)>,
}

impl Load {
    fn start(
        operators: &[Client],
        runners: &[Client],
        replicas: &[ReplicaProcess],
        dispatchers: usize,
        capabilities: &[String],
        requires: &[String],
    ) -> Self {
        let t0 = Instant::now();
        let stop = Arc::new(AtomicBool::new(false));
        let completed = Arc::new(AtomicU64::new(0));
        let samples: Samples = Arc::default();
        let counts: Arc<Mutex<Vec<u64>>> = Arc::default();
        let mut tasks = tokio::task::JoinSet::new();
        let target = wire::Target::Pool {
            pool: wire::PoolName::Workspace,
        };
        let requires = (!requires.is_empty()).then(|| requires.to_vec());
        for d in 0..dispatchers {
            let (op, stop, target, requires) = (
                operators[d % operators.len()].clone(),
                stop.clone(),
                target.clone(),
                requires.clone(),
            );
            tasks.spawn(async move {
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let dispatch = wire::Dispatch {
                        required_capabilities: requires.clone(),
                        ..wire::Dispatch::new(target.clone(), json!({"n": n}))
                    };
                    let _ = op.dispatch(&dispatch).await;
                    n += 1;
                }
            });
        }
        for (i, r) in runners.iter().enumerate() {
            let r = Client::new(
                &replicas[i % replicas.len()].url,
                r.token().map(str::to_owned),
            );
            let (stop, completed, samples) = (stop.clone(), completed.clone(), samples.clone());
            let capabilities = (!capabilities.is_empty()).then(|| capabilities.to_vec());
            tasks.spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let t = Instant::now();
                    let Ok(jobs) = r
                        .lease(&wire::Lease {
                            wait_ms: Some(1000),
                            max_jobs: Some(1),
                            capabilities: capabilities.clone(),
                            ..Default::default()
                        })
                        .await
                    else {
                        continue;
                    };
                    if jobs.is_empty() {
                        continue;
                    }
                    let ms = t.elapsed().as_secs_f64() * 1000.0;
                    samples
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push((t0.elapsed(), ms));
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
        {
            let (stop, completed, counts) = (stop.clone(), completed.clone(), counts.clone());
            tasks.spawn(async move {
                let mut tick = tokio::time::interval_at(
                    tokio::time::Instant::from_std(t0) + Duration::from_secs(1),
                    Duration::from_secs(1),
                );
                while !stop.load(Ordering::Relaxed) {
                    tick.tick().await;
                    counts
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push(completed.load(Ordering::Relaxed));
                }
            });
        }
        Self {
            t0,
            stop,
            tasks,
            counts,
            samples,
        }
    }

    /// Throughput and lease p99 over the minute that ends at `end` (so far).
    fn window(&self, end: Duration) -> (f64, f64) {
        let counts = self
            .counts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let samples = self
            .samples
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        Figures { counts, samples }.window(end)
    }

    async fn stop(mut self) -> Figures {
        self.stop.store(true, Ordering::Relaxed);
        while self.tasks.join_next().await.is_some() {}
        let counts = std::mem::take(&mut *self.counts.lock().unwrap_or_else(|p| p.into_inner()));
        let samples = std::mem::take(&mut *self.samples.lock().unwrap_or_else(|p| p.into_inner()));
        Figures { counts, samples }
    }
}

impl Figures {
    /// Jobs per second and lease p99 (ms) over the minute ending at `end` (shorter when less
    /// has been measured).
    fn window(&self, end: Duration) -> (f64, f64) {
        let end_s = (end.as_secs() as usize).min(self.counts.len());
        let start_s = end_s.saturating_sub(WINDOW.as_secs() as usize);
        let at = |s: usize| if s == 0 { 0 } else { self.counts[s - 1] };
        let rate = if end_s > start_s {
            (at(end_s) - at(start_s)) as f64 / (end_s - start_s) as f64
        } else {
            0.0
        };
        let from = Duration::from_secs(start_s as u64);
        let to = Duration::from_secs(end_s as u64);
        let mut lat: Vec<f64> = self
            .samples
            .iter()
            .filter(|(t, _)| *t >= from && *t < to)
            .map(|(_, ms)| *ms)
            .collect();
        (rate, quantile(&mut lat, 0.99))
    }
}

#[cfg(test)]
mod tests {
    use super::statement_file;

    #[test]
    fn a_normalized_statement_is_named_by_its_file() {
        // What pg_stat_statements shows: constants replaced, comments kept.
        let normalized = crate::store::sql::JOB_COMPLETE
            .replace("'completed'", "$6")
            .replace("'leased'", "$14");
        assert_eq!(statement_file(&normalized), Some("job_complete.sql"));
        assert_eq!(statement_file(crate::store::sql::CLAIM), Some("claim.sql"));
        assert_eq!(statement_file("SELECT 1"), None);
    }
}
