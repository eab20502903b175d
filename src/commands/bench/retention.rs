//! Retention (issue 37): does deleting history cost the hot path, and does the database stay
//! bounded? Two replicas run the e2e load (one job per call, `done` reports) on a table that
//! also holds `--retention-jobs` settled jobs (one event each) finished a day ago, first with
//! retention off, then on replicas that keep a `--retention-window-ms` window: the throughput
//! while they delete the old jobs beside the throughput without, and how many they deleted.
//! Then the load goes on for `--retention-churn-seconds`, and the live rows and on-disk sizes
//! of `jobs` and `job_events` are read every few seconds: once a window has passed they should
//! stay flat (what settles is deleted as fast as it settles).

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::setup::{self, ReplicaProcess};
use super::{progress, round, throughput, BenchArgs, Deployment, Report};
use crate::client::Client;

const DB: &str = "leasehold_bench_retention";

/// `n` settled jobs of the bench workspace, dispatched and finished a day ago (UUIDv7 ids of
/// that time, as the service writes them: the sweep walks ids below the window's start), each
/// with one event.
async fn old_history(db: &tokio_postgres::Client, n: i64) -> anyhow::Result<()> {
    let chunk = 100_000i64;
    let mut done = 0;
    while done < n {
        let take = chunk.min(n - done);
        db.execute(
            "WITH made AS (
                INSERT INTO jobs (id, workspace, owner, pool, state, kind, payload, max_attempts,
                                  no_runner_timeout_ms, no_runner_check_at, billing_tenant,
                                  epoch, attempts, finished_at, result, event_seq)
                SELECT (lpad(to_hex(floor(extract(epoch FROM now() - interval '1 day') * 1000)::bigint
                                    - 100000000 + $1::bigint + g), 12, '0')
                        || '7' || substr(md5(($1::bigint + g)::text), 1, 19))::uuid,
                       'bench', 'ws:bench', 'workspace', 'completed', 'command',
                       '{\"argv\":[\"true\"]}', 3, 300000, now(), 'bench',
                       1, 1, now() - interval '1 day', '{\"exit_code\":0}', 1
                  FROM generate_series(1, $2::bigint) g
                RETURNING id)
             INSERT INTO job_events (job_id, seq, kind, data)
             SELECT id, 1, 'state', '{\"state\":\"completed\"}' FROM made",
            &[&done, &take],
        )
        .await?;
        done += take;
        progress(&format!("retention: {done} old settled jobs loaded"));
    }
    db.batch_execute("VACUUM ANALYZE jobs, job_events").await?;
    Ok(())
}

async fn count_old(db: &tokio_postgres::Client) -> anyhow::Result<i64> {
    Ok(db
        .query_one(
            "SELECT count(*) FROM jobs WHERE finished_at < now() - interval '12 hours'",
            &[],
        )
        .await?
        .get(0))
}

/// Live rows (all, and settled: what retention bounds; a backlog of parked jobs grows `jobs`
/// whatever it does) and total on-disk bytes (indexes and TOAST included) of `jobs` and `job_events`.
async fn sizes(db: &tokio_postgres::Client) -> anyhow::Result<Value> {
    let row = db
        .query_one(
            "SELECT (SELECT count(*) FROM jobs), (SELECT count(*) FROM job_events),
                    pg_total_relation_size('jobs'), pg_total_relation_size('job_events'),
                    (SELECT count(*) FROM jobs WHERE finished_at IS NOT NULL)",
            &[],
        )
        .await?;
    Ok(json!({
        "jobs": row.get::<_, i64>(0), "job_events": row.get::<_, i64>(1),
        "jobs_bytes": row.get::<_, i64>(2), "job_events_bytes": row.get::<_, i64>(3),
        "settled": row.get::<_, i64>(4),
    }))
}

async fn replicas_with(
    url: &str,
    args: &BenchArgs,
    retention_ms: u64,
) -> anyhow::Result<([ReplicaProcess; 2], Vec<Client>, Vec<Client>)> {
    let env = [
        ("LEASEHOLD_RETENTION_MS", retention_ms.to_string()),
        ("LEASEHOLD_RETENTION_INTERVAL_MS", "1000".to_string()),
    ];
    let (replicas, _key, operators) = setup::load_replicas_env(url, args, &env).await?;
    let runners = setup::runners(&operators[0], args.runners, 1).await?;
    Ok((replicas, operators, runners))
}

pub async fn run(dep: &Deployment, args: &BenchArgs, report: &mut Report) -> anyhow::Result<()> {
    let Report { json: out, table } = report;
    let url = dep.fresh_database(DB).await?;
    let db = setup::connect(&url).await?;
    old_history(&db, args.retention_jobs).await?;

    progress("retention: e2e with retention off");
    let (base, _) = {
        let (replicas, operators, runners) = replicas_with(&url, args, 0).await?;
        throughput::end_to_end(&operators, &runners, &replicas, 1, args).await?
    };

    progress("retention: e2e while the old jobs are deleted");
    let window = args.retention_window_ms;
    let (replicas, operators, runners) = replicas_with(&url, args, window).await?;
    let old_before = count_old(&db).await?;
    let (during, _) = throughput::end_to_end(&operators, &runners, &replicas, 1, args).await?;
    let old_after = count_old(&db).await?;
    let deleted = old_before - old_after;
    // The measured window is `seconds` after a one-second warm-up; the deletion started with
    // the replicas, so this undercounts its rate a little.
    let deleted_per_s = deleted as f64 / (args.seconds + 1) as f64;

    let churn = args.retention_churn_seconds;
    let mut samples = Vec::new();
    if churn > 0 {
        let mut churn_args = args.clone();
        churn_args.seconds = churn;
        let load = throughput::end_to_end(&operators, &runners, &replicas, 1, &churn_args);
        let sample = async {
            let t0 = Instant::now();
            while t0.elapsed() < Duration::from_secs(churn) {
                tokio::time::sleep(Duration::from_secs(5)).await;
                let mut s = sizes(&db).await?;
                s["at_s"] = json!(t0.elapsed().as_secs());
                progress(&format!("retention: churn {s}"));
                samples.push(s);
            }
            anyhow::Ok(())
        };
        let (load, sampled) = tokio::join!(load, sample);
        load?;
        sampled?;
    }
    drop(replicas);
    let old_left = count_old(&db).await?;
    dep.drop_database(DB).await?;

    // Flat: the last sample against the first one a whole window into the churn.
    let past_window = samples
        .iter()
        .find(|s| s["at_s"].as_u64().unwrap_or(0) * 1000 >= window);
    let growth = |field: &str| {
        past_window
            .zip(samples.last())
            .and_then(|(a, b)| Some(b[field].as_f64()? / a[field].as_f64()?.max(1.0)))
            .map_or(Value::Null, |r| round(r, 3))
    };
    let ratio = during / base;
    out.insert(
        "retention".into(),
        json!({
            "old_jobs": args.retention_jobs, "window_ms": window,
            "e2e_without_jobs_per_s": round(base, 0), "e2e_during_jobs_per_s": round(during, 0),
            "ratio": round(ratio, 3), "deleted_during": deleted,
            "deleted_per_s": round(deleted_per_s, 0), "old_left_after_churn": old_left,
            "churn_seconds": churn, "samples": samples,
            "settled_growth_after_window": growth("settled"),
            "jobs_growth_after_window": growth("jobs"),
            "job_events_growth_after_window": growth("job_events"),
            "jobs_bytes_growth_after_window": growth("jobs_bytes"),
            "job_events_bytes_growth_after_window": growth("job_events_bytes"),
        }),
    );
    table.push((
        "retention: e2e during deletion / without".into(),
        format!("{during:.0} / {base:.0}"),
        format!("ratio {ratio:.2} (target >= 0.9), {deleted_per_s:.0} old jobs deleted/s"),
    ));
    table.push((
        format!("retention: settled jobs / bytes growth, {churn} s churn"),
        format!("{} / {}", growth("settled"), growth("jobs_bytes")),
        format!("after the first {window} ms window; {old_left} old jobs left"),
    ));
    Ok(())
}
