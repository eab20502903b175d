//! `unfit-head`: does a pool whose head no connected runner can run cost the runner behind it?
//! One runner (no capabilities) times its lease calls (`wait_ms` 0) and completes on a clean
//! queue, then again with `--unfit-jobs` (10,000) parked pool jobs ahead of its work that
//! require a capability it lacks, so every claim must pass them by (they are skipped, never
//! touched). The goal (issue 19): lease latency within 1.5x of the clean queue.

use serde_json::json;

use super::setup::{self, ReplicaProcess};
use super::stats::quantile;
use super::{progress, round, BenchArgs, Deployment, Report};
use crate::client::Client;

/// Lease calls and completes timed per phase.
const SAMPLES: usize = 300;

/// Park `n` pool jobs that require `gpu`, with ids below every UUIDv7 the service makes, so
/// they sit at the head of the pool (same priority, FIFO by id).
async fn park_unfit_head(db: &tokio_postgres::Client, n: i64) -> anyhow::Result<()> {
    db.execute(
        "INSERT INTO jobs (id, workspace, owner, pool, state, kind, payload, max_attempts,
                           required_capabilities, no_runner_timeout_ms, no_runner_check_at,
                           billing_tenant)
         SELECT ('00000000-0000-7000-8000-' || lpad(to_hex(g), 12, '0'))::uuid, 'bench',
                'ws:bench', 'workspace', 'parked', 'command', '{\"argv\":[\"true\"]}', 3,
                '{gpu}', 86400000, now() + interval '1 day', 'bench'
           FROM generate_series(1, $1::bigint) g",
        &[&n],
    )
    .await?;
    Ok(())
}

pub async fn run(dep: &Deployment, args: &BenchArgs, report: &mut Report) -> anyhow::Result<()> {
    let Report { json: out, table } = report;
    let url = dep.fresh_database("leasehold_bench_unfit_head").await?;
    let replica = ReplicaProcess::start(&url, &[]).await?;
    let key = setup::api_key(&url, "bench", "bench").await?;
    let operator = Client::new(&replica.url, Some(key));
    let runner = setup::runners(&operator, 1, 1).await?.remove(0);
    let db = setup::connect(&url).await?;

    progress("unfit-head: timing on a clean queue");
    setup::park(&db, SAMPLES as i64 + 50).await?;
    db.batch_execute("ANALYZE").await?;
    let (mut clean, _) = setup::timed_cycles(&runner, SAMPLES).await?;

    progress(&format!(
        "unfit-head: {} unfit jobs at the head of the pool",
        args.unfit_jobs
    ));
    park_unfit_head(&db, args.unfit_jobs as i64).await?;
    setup::park(&db, SAMPLES as i64 + 50).await?;
    db.batch_execute("ANALYZE").await?;
    let (mut behind, _) = setup::timed_cycles(&runner, SAMPLES).await?;
    let still_parked: i64 = db
        .query_one(
            "SELECT count(*) FROM jobs WHERE state = 'parked' AND required_capabilities = '{gpu}'",
            &[],
        )
        .await?
        .get(0);
    anyhow::ensure!(
        still_parked == args.unfit_jobs as i64,
        "unfit jobs were touched: {still_parked} of {} still parked",
        args.unfit_jobs
    );

    let (c50, c99) = (quantile(&mut clean, 0.5), quantile(&mut clean, 0.99));
    let (b50, b99) = (quantile(&mut behind, 0.5), quantile(&mut behind, 0.99));
    out.insert(
        "unfit_head_lease_ms".into(),
        json!({"clean_p50": round(c50, 3), "clean_p99": round(c99, 3),
               "behind_p50": round(b50, 3), "behind_p99": round(b99, 3),
               "unfit_jobs": args.unfit_jobs}),
    );
    out.insert("unfit_head_ratio".into(), round(b50 / c50, 3));
    table.push((
        format!(
            "unfit-head lease p50 ms, clean / behind {} unfit",
            args.unfit_jobs
        ),
        format!("{c50:.2} / {b50:.2}"),
        format!("ratio {:.2} (target <= 1.5)", b50 / c50),
    ));
    Ok(())
}
