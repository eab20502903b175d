//! Re-delivery: a runner dies holding leases; how long until another runner holds them all.

use std::time::{Duration, Instant};

use serde_json::json;

use super::setup::{self, ReplicaProcess};
use super::{progress, round, BenchArgs, Deployment, Report};
use crate::client::Client;
use crate::wire;

pub async fn run(dep: &Deployment, args: &BenchArgs, report: &mut Report) -> anyhow::Result<()> {
    let Report { json: out, table } = report;
    let url = dep.fresh_database("leasehold_bench_redelivery").await?;
    let ttl = args.redelivery_ttl_ms;
    let replica =
        ReplicaProcess::start(&url, &[("LEASEHOLD_LEASE_TTL_MS", ttl.to_string())]).await?;
    let key = setup::api_key(&url, "bench", "bench").await?;
    let operator = Client::new(&replica.url, Some(key));
    let mut runners = setup::runners(&operator, 2, 10).await?;
    let (dead, heir) = (runners.remove(0), runners.remove(0));
    let target = wire::Target::Pool {
        pool: wire::PoolName::Workspace,
    };
    for i in 0..10 {
        operator
            .dispatch(&wire::Dispatch::new(target.clone(), json!(i)))
            .await?;
    }
    let held = dead.lease(&wire::Lease::waiting(1000, 10)).await?;
    anyhow::ensure!(
        held.len() == 10,
        "the dying runner took {} of 10 jobs",
        held.len()
    );
    // It dies now: no heartbeat, no report.
    let died = Instant::now();
    progress(&format!(
        "redelivery: runner died holding 10 leases (ttl {ttl} ms)"
    ));
    let mut got = 0;
    while got < 10 {
        anyhow::ensure!(
            died.elapsed() < Duration::from_millis(ttl) + Duration::from_secs(30),
            "re-delivery took too long"
        );
        let jobs = heir.lease(&wire::Lease::waiting(5000, 10)).await?;
        got += jobs.len();
    }
    let secs = died.elapsed().as_secs_f64();
    out.insert("redelivery_s".into(), round(secs, 3));
    out.insert("redelivery_ttl_s".into(), round(ttl as f64 / 1000.0, 3));
    table.push((
        "redelivery_s".into(),
        format!("{secs:.2}"),
        format!("target <= ttl + 1 s = {:.1} s", ttl as f64 / 1000.0 + 1.0),
    ));
    Ok(())
}
