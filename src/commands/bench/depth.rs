//! Depth: claim latency (the lease call a runner makes, p50 and p99) with many parked jobs of
//! other owners, and of the runner's own owner, bulk-loaded with `generate_series`. With a
//! partial index per claim predicate, depth should not matter; bloat would.

use serde_json::{Map, Value};

use super::setup::{self, ReplicaProcess};
use super::stats::quantile;
use super::{progress, round, BenchArgs, Deployment, Report};
use crate::client::Client;

/// Claims timed per depth and kind.
const SAMPLES: usize = 300;

/// Insert `n` parked pool jobs for `owner` (`None`: spread over 1000 other owners).
async fn load(db: &tokio_postgres::Client, n: i64, owner: Option<&str>) -> anyhow::Result<()> {
    let chunk = 1_000_000;
    let mut done = 0;
    while done < n {
        let take = chunk.min(n - done);
        db.execute(
            "INSERT INTO jobs (id, workspace, owner, pool, state, kind, payload, max_attempts,
                               no_runner_timeout_ms, no_runner_check_at, billing_tenant)
             SELECT gen_random_uuid(), 'bench', COALESCE($2, 'other-' || (g % 1000)),
                    CASE WHEN $2 IS NULL THEN 'personal' ELSE 'workspace' END, 'parked', 'command',
                    '{\"argv\":[\"true\"]}', 3, 86400000, now() + interval '1 day', NULL
               FROM generate_series(1, $1::bigint) AS g",
            &[&take, &owner],
        )
        .await?;
        done += take;
        progress(&format!("depth: loaded {done}/{n} parked jobs"));
    }
    db.batch_execute("VACUUM ANALYZE jobs").await?;
    Ok(())
}

pub async fn run(dep: &Deployment, args: &BenchArgs, report: &mut Report) -> anyhow::Result<()> {
    let Report { json: out, table } = report;
    let mut depths: Vec<i64> = args
        .depths
        .split(',')
        .filter_map(|d| d.trim().parse().ok())
        .collect();
    if args.depth_10m {
        depths.push(10_000_000);
    }
    let url = dep.fresh_database("leasehold_bench_depth").await?;
    let replica = ReplicaProcess::start(&url, &[]).await?;
    let key = setup::api_key(&url, "bench", "bench").await?;
    let operator = Client::new(&replica.url, Some(key));
    let runner = setup::runners(&operator, 1, 1).await?.remove(0);
    let db = setup::connect(&url).await?;
    let mut p50s = Map::new();
    let mut p99s = Map::new();
    for depth in depths {
        for kind in ["other", "same"] {
            db.batch_execute("TRUNCATE jobs, job_events CASCADE")
                .await?;
            if kind == "other" {
                load(&db, depth, None).await?;
                load(&db, SAMPLES as i64, Some("ws:bench")).await?;
            } else {
                load(&db, depth + SAMPLES as i64, Some("ws:bench")).await?;
            }
            progress(&format!(
                "depth: timing {SAMPLES} claims at {depth} parked ({kind} owner)"
            ));
            let (mut samples, _) = setup::timed_cycles(&runner, SAMPLES).await?;
            let (p50, p99) = (quantile(&mut samples, 0.5), quantile(&mut samples, 0.99));
            let name = format!("{kind}_{depth}");
            p50s.insert(name.clone(), round(p50, 3));
            p99s.insert(name, round(p99, 3));
            table.push((
                format!("depth p50/p99 ms, {depth} parked, {kind} owner"),
                format!("{p50:.2}/{p99:.2}"),
                String::new(),
            ));
        }
    }
    db.batch_execute("TRUNCATE jobs, job_events CASCADE")
        .await?;
    out.insert("depth_p50_ms".into(), Value::Object(p50s));
    out.insert("depth_p99_ms".into(), Value::Object(p99s));
    Ok(())
}
