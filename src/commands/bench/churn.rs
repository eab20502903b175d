//! Churn: are claim and complete latency flat in history and in leases held? One runner times
//! its lease calls (`wait_ms` 0) and its completes on a fresh table, then again after a million
//! settled jobs and with 10,000 leases held by other runners (the settled jobs bulk-loaded, the
//! leases real rows in the lease indexes), each time with the same number of parked jobs
//! waiting for it. A fenced statement reached by primary key, and a claim walking only its
//! partial index, should not notice either.

use serde_json::json;

use super::setup::{self, ReplicaProcess};
use super::stats::quantile;
use super::{progress, round, BenchArgs, Deployment, Report};
use crate::client::Client;

/// Lease calls and completes timed per phase.
const SAMPLES: usize = 300;

/// A million settled jobs of the same workspace and queue, and 10,000 leases held by 40
/// other runners of it.
async fn history(db: &tokio_postgres::Client) -> anyhow::Result<()> {
    for chunk in 0..10 {
        db.batch_execute(
            "INSERT INTO jobs (id, workspace, owner, pool, state, kind, payload, max_attempts,
                               no_runner_timeout_ms, no_runner_check_at, billing_tenant,
                               epoch, attempts, finished_at, result, event_seq)
             SELECT gen_random_uuid(), 'bench', 'ws:bench', 'workspace', 'completed', 'command',
                    '{\"argv\":[\"true\"]}', 3, 300000, now(), 'bench',
                    1, 1, now(), '{\"exit_code\":0}', 3
               FROM generate_series(1, 100000)",
        )
        .await?;
        progress(&format!(
            "churn: {} settled jobs loaded",
            (chunk + 1) * 100_000
        ));
    }
    db.batch_execute(
        "INSERT INTO runners (id, owner, workspace, label, capacity, token_hash, approved_by,
                              last_seen_at)
         SELECT gen_random_uuid(), 'ws:bench', 'bench', 'holder-' || g, 250,
                sha256(('churn-holder-' || g)::bytea), 'bench', now()
           FROM generate_series(1, 40) g;
         INSERT INTO jobs (id, workspace, owner, pool, state, kind, payload, max_attempts,
                           no_runner_timeout_ms, no_runner_check_at, billing_tenant,
                           epoch, attempts, leased_by, leased_at, lease_expires_at,
                           lease_check_at, event_seq)
         SELECT gen_random_uuid(), 'bench', 'ws:bench', 'workspace', 'leased', 'command',
                '{\"argv\":[\"true\"]}', 3, 300000, now(), 'bench', 1, 1, r.id, now(),
                now() + interval '1 day', now() + interval '1 day', 2
           FROM (SELECT id FROM runners WHERE label LIKE 'holder-%') r,
                generate_series(1, 250);
         ANALYZE;",
    )
    .await?;
    Ok(())
}

pub async fn run(dep: &Deployment, _args: &BenchArgs, report: &mut Report) -> anyhow::Result<()> {
    let Report { json: out, table } = report;
    let url = dep.fresh_database("leasehold_bench_churn").await?;
    let replica = ReplicaProcess::start(&url, &[]).await?;
    let key = setup::api_key(&url, "bench", "bench").await?;
    let operator = Client::new(&replica.url, Some(key));
    let runner = setup::runners(&operator, 1, 1).await?.remove(0);
    let db = setup::connect(&url).await?;

    progress("churn: timing on a fresh table");
    setup::park(&db, SAMPLES as i64 + 100).await?;
    db.batch_execute("ANALYZE").await?;
    let (mut fresh_claim, mut fresh_complete) = setup::timed_cycles(&runner, SAMPLES).await?;

    history(&db).await?;
    progress("churn: timing after 1M settled jobs and with 10k leases held");
    setup::park(&db, SAMPLES as i64).await?;
    let (mut churned_claim, mut churned_complete) = setup::timed_cycles(&runner, SAMPLES).await?;

    let p50 = |v: &mut Vec<f64>| quantile(v, 0.5);
    let p99 = |v: &mut Vec<f64>| quantile(v, 0.99);
    let (fc50, fc99) = (p50(&mut fresh_claim), p99(&mut fresh_claim));
    let (cc50, cc99) = (p50(&mut churned_claim), p99(&mut churned_claim));
    let (fk50, fk99) = (p50(&mut fresh_complete), p99(&mut fresh_complete));
    let (ck50, ck99) = (p50(&mut churned_complete), p99(&mut churned_complete));
    out.insert(
        "churn_claim_ms".into(),
        json!({"fresh_p50": round(fc50, 3), "fresh_p99": round(fc99, 3),
               "churned_p50": round(cc50, 3), "churned_p99": round(cc99, 3)}),
    );
    out.insert(
        "churn_complete_ms".into(),
        json!({"fresh_p50": round(fk50, 3), "fresh_p99": round(fk99, 3),
               "churned_p50": round(ck50, 3), "churned_p99": round(ck99, 3)}),
    );
    out.insert("churn_claim_ratio".into(), round(cc50 / fc50, 3));
    out.insert("churn_complete_ratio".into(), round(ck50 / fk50, 3));
    table.push((
        "churn claim p50 ms, fresh / 1M settled + 10k leases".into(),
        format!("{fc50:.2} / {cc50:.2}"),
        format!("ratio {:.2} (target <= 1.5)", cc50 / fc50),
    ));
    table.push((
        "churn complete p50 ms, fresh / 1M settled + 10k leases".into(),
        format!("{fk50:.2} / {ck50:.2}"),
        format!("ratio {:.2} (target <= 1.5)", ck50 / fk50),
    ));
    Ok(())
}
