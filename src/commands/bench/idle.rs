//! Idle: many concurrent long-polls parked on one replica for a minute. What they cost: the
//! replica's resident memory, its database connections (pg_stat_activity), and the statements it
//! sends per second while they wait (its own counter).

use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::json;

use super::setup::{self, ReplicaProcess};
use super::{progress, round, BenchArgs, Deployment, Report};
use crate::client::Client;
use crate::wire;

async fn metric(http: &reqwest::Client, url: &str, name: &str) -> Option<f64> {
    let text = http
        .get(format!("{url}/metrics"))
        .send()
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

/// A process's resident memory, KiB (0 if it is gone).
pub(super) fn rss_kb(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

fn rss_mb(pid: u32) -> f64 {
    rss_kb(pid) as f64 / 1024.0
}

pub async fn run(dep: &Deployment, args: &BenchArgs, report: &mut Report) -> anyhow::Result<()> {
    let Report { json: out, table } = report;
    let url = dep.fresh_database("leasehold_bench_idle").await?;
    let per_runner = 100;
    // Each runner holds `per_runner` polls at once: above the default per-token cap (16), which
    // would answer the rest 429.
    let replica = ReplicaProcess::start(
        &url,
        &[("LEASEHOLD_MAX_POLLS_PER_RUNNER", per_runner.to_string())],
    )
    .await?;
    let pid = replica.pid().unwrap_or(0);
    let key = setup::api_key(&url, "bench", "bench").await?;
    let operator = Client::new(&replica.url, Some(key));
    let runners = setup::runners(
        &operator,
        args.idle_pollers.div_ceil(per_runner),
        per_runner as i64,
    )
    .await?;
    let rss_before = rss_mb(pid);
    let wait_ms = (args.idle_seconds * 1000).min(60_000) as i64;
    let started = Instant::now();
    let deadline = started + Duration::from_millis(wait_ms as u64);
    let mut polls = tokio::task::JoinSet::new();
    let http = reqwest::Client::new();
    // Runners come up in waves, as a fleet does; a poll refused (503 while the pool is
    // saturated) is re-issued, as a runner would.
    let wave = 500;
    for start in (0..args.idle_pollers).step_by(wave) {
        for i in start..(start + wave).min(args.idle_pollers) {
            let r = runners[i / per_runner].clone();
            polls.spawn(async move {
                while Instant::now() + Duration::from_secs(2) < deadline {
                    let left = deadline
                        .saturating_duration_since(Instant::now())
                        .as_millis() as i64;
                    match r
                        .lease(&wire::Lease {
                            wait_ms: Some(left),
                            max_jobs: Some(1),
                            capabilities: None,
                            ..Default::default()
                        })
                        .await
                    {
                        Ok(_) => return,
                        Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
                    }
                }
            });
        }
        let want = (start + wave).min(args.idle_pollers);
        loop {
            let parked = metric(&http, &replica.url, "leasehold_waiters")
                .await
                .unwrap_or(0.0) as usize;
            progress(&format!(
                "idle: {parked}/{} long-polls parked",
                args.idle_pollers
            ));
            if parked >= want {
                break;
            }
            anyhow::ensure!(
                started.elapsed() < Duration::from_secs(45),
                "long-polls did not all park within 45 s ({parked})"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    // A poll counts as parked once registered, before its second look at the queue: wait for
    // those looks to drain (at most 15 s) so the window measures the idle state.
    let settle_start = Instant::now();
    let mut last = metric(&http, &replica.url, "leasehold_db_statements_total")
        .await
        .context("the replica does not report this metric")?;
    while settle_start.elapsed() < Duration::from_secs(15) {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = metric(&http, &replica.url, "leasehold_db_statements_total")
            .await
            .context("the replica does not report this metric")?;
        progress(&format!(
            "idle: settling, {:.0} statements in the last second",
            now - last
        ));
        if now - last < 10.0 {
            break;
        }
        last = now;
    }
    let settled_in = settle_start.elapsed();
    let parked_after = started.elapsed();
    // Measure while all of them wait, stopping well before their waits end.
    let window = Duration::from_millis(wait_ms as u64)
        .saturating_sub(parked_after + Duration::from_secs(5))
        .max(Duration::from_secs(5));
    let s0 = metric(&http, &replica.url, "leasehold_db_statements_total")
        .await
        .context("the replica does not report this metric")?;
    let n0 = metric(&http, &replica.url, "leasehold_notifications_sent_total")
        .await
        .context("the replica does not report this metric")?;
    let t0 = Instant::now();
    while t0.elapsed() < window {
        tokio::time::sleep(Duration::from_secs(1)).await;
        progress(&format!(
            "idle: {} long-polls held, {:.0}/{:.0} s",
            args.idle_pollers,
            t0.elapsed().as_secs_f64(),
            window.as_secs_f64()
        ));
    }
    let s1 = metric(&http, &replica.url, "leasehold_db_statements_total")
        .await
        .context("the replica does not report this metric")?;
    let n1 = metric(&http, &replica.url, "leasehold_notifications_sent_total")
        .await
        .context("the replica does not report this metric")?;
    let secs = t0.elapsed().as_secs_f64();
    let rss = rss_mb(pid);
    let db = setup::connect(&url).await?;
    let conns: i64 = db
        .query_one(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name LIKE 'leasehold-%' AND application_name <> 'leasehold-bench'",
            &[],
        )
        .await?
        .get(0);
    let pooled: i64 = db
        .query_one(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'leasehold-pool'",
            &[],
        )
        .await?
        .get(0);
    let qps = (s1 - s0 + n1 - n0) / secs;
    drop(polls);
    out.insert("idle_pollers".into(), json!(args.idle_pollers));
    out.insert("idle_rss_mb".into(), round(rss, 1));
    out.insert("idle_rss_before_mb".into(), round(rss_before, 1));
    out.insert("idle_db_connections".into(), json!(conns));
    out.insert("idle_pool_connections".into(), json!(pooled));
    out.insert("idle_queries_per_s".into(), round(qps, 2));
    out.insert("idle_window_s".into(), round(secs, 1));
    table.push((
        "idle_pollers".into(),
        args.idle_pollers.to_string(),
        format!(
            "parked in {:.1} s, settled in {:.1} s",
            (parked_after - settled_in).as_secs_f64(),
            settled_in.as_secs_f64()
        ),
    ));
    table.push((
        "idle_rss_mb".into(),
        format!("{rss:.1}"),
        format!("target <= 100; {rss_before:.1} before the polls"),
    ));
    table.push((
        "idle_db_connections".into(),
        conns.to_string(),
        format!("{pooled} pooled + LISTEN + notifier; pool size 16"),
    ));
    table.push((
        "idle_queries_per_s".into(),
        format!("{qps:.2}"),
        format!(
            "target <= {:.0} (1 per 100 pollers), over {secs:.0} s",
            args.idle_pollers as f64 / 100.0
        ),
    ));
    Ok(())
}
