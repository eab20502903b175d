//! `/metrics` speaks the Prometheus text format (parsed here by a real parser, not by string
//! search), carries every family docs/operations.md names, and the families move when the
//! service does what they count. Labels stay bounded: no job or runner id, no owner, no raw
//! path ever becomes a label value.

use std::collections::HashMap;
use std::time::Duration;

use prometheus_parse::{Scrape, Value};
use serde_json::json;

use crate::support::*;

/// One scrape of a replica, as text.
async fn exposition(url: &str) -> String {
    reqwest::get(format!("{url}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// One scrape of a replica, parsed.
async fn scrape(url: &str) -> Scrape {
    let text = exposition(url).await;
    Scrape::parse(text.lines().map(|l| Ok(l.to_owned()))).expect("the exposition parses")
}

fn number(v: &Value) -> f64 {
    match v {
        Value::Counter(n) | Value::Gauge(n) | Value::Untyped(n) => *n,
        Value::Histogram(b) => b.last().map_or(0.0, |c| c.count),
        Value::Summary(_) => f64::NAN,
    }
}

/// The sum of `metric`'s samples whose labels include every pair of `labels`.
fn value(s: &Scrape, metric: &str, labels: &[(&str, &str)]) -> f64 {
    s.samples
        .iter()
        .filter(|x| x.metric == metric)
        .filter(|x| labels.iter().all(|(k, v)| x.labels.get(k) == Some(*v)))
        .map(|x| number(&x.value))
        .sum()
}

#[tokio::test]
async fn families_exist_move_and_stay_bounded() {
    let app = TestApp::spawn_with(1, |c| c.metrics_interval_ms = 50).await;
    let url = app.url(0);
    let before = scrape(&url).await;
    let operator = app.operator("acme", "alice", false).await;
    let (_runner, runner) = pair(&operator, leasehold::wire::Tier::Personal, &[], 1).await;
    // A long-poll parks first, so the dispatch wakes it.
    let waiting = tokio::spawn({
        let runner = runner.clone();
        async move { lease(&runner, 10_000, 1).await }
    });
    until_waiters(&url, 1, Duration::from_secs(10)).await;
    eventually(Duration::from_secs(10), "one long-poll open", || async {
        (value(&scrape(&url).await, "leasehold_long_polls", &[]) == 1.0).then_some(())
    })
    .await;
    let job = dispatch(&operator, personal(), json!({"n": 1})).await;
    let leased = waiting.await.unwrap();
    assert_eq!(leased.len(), 1);
    runner
        .complete(job.id, leased[0].epoch, json!({"ok": true}))
        .await
        .unwrap();
    // A late report of a settled job is refused as stale.
    let late = runner.complete(job.id, leased[0].epoch, json!({})).await;
    assert_eq!(code(late), "job_terminal");
    // A parked job shows in the periodic depth count.
    dispatch(&operator, personal(), json!({"n": 2})).await;

    let after = eventually(Duration::from_secs(10), "depth counted", || async {
        let s = scrape(&url).await;
        (value(&s, "leasehold_jobs", &[("state", "parked")]) == 1.0).then_some(s)
    })
    .await;
    assert!(value(&after, "leasehold_leases_total", &[]) >= 1.0);
    assert_eq!(
        value(&after, "leasehold_lease_wait_seconds_count", &[]),
        1.0
    );
    assert_eq!(
        value(&after, "leasehold_wake_latency_seconds_count", &[]),
        1.0
    );
    // The woken lease's stages (issue 55): a park heard, its tick's statements, its commit,
    // its answer; the first look that found nothing observed none.
    for stage in ["heard_to_tick", "claim", "commit", "answer"] {
        assert_eq!(
            value(
                &after,
                "leasehold_lease_stage_seconds_count",
                &[("stage", stage)]
            ),
            1.0,
            "{stage}"
        );
    }
    assert_eq!(value(&after, "leasehold_long_polls", &[]), 0.0);
    assert_eq!(
        value(
            &after,
            "leasehold_stale_reports_total",
            &[("reason", "job_terminal")]
        ),
        1.0
    );
    let dispatches = [("route", "/v1/jobs"), ("method", "POST"), ("status", "201")];
    assert_eq!(
        value(
            &after,
            "leasehold_http_request_duration_seconds_count",
            &dispatches
        ),
        2.0
    );
    // prometheus-parse drops samples whose label values hold a `}`, as route templates do
    // (`/v1/jobs/{id}`; valid in the format, and Prometheus reads them): read that one raw.
    let text = exposition(&url).await;
    assert!(
        text.lines().any(
            |l| l.starts_with("leasehold_http_request_duration_seconds_count{")
                && l.contains(r#"route="/v1/runner/jobs/{id}/complete""#)
                && l.contains(r#"status="409""#)
                && l.ends_with(" 1")
        ),
        "the stale complete is counted under its route template"
    );
    assert!(
        value(
            &after,
            "leasehold_sweeper_batches_total",
            &[("sweep", "lapsed_leases")]
        ) >= 1.0
    );
    assert!(value(&after, "leasehold_sweep_duration_seconds_count", &[]) >= 1.0);
    assert!(
        value(&after, "leasehold_db_statements_total", &[])
            > value(&before, "leasehold_db_statements_total", &[])
    );
    assert!(value(&after, "leasehold_pool_connections", &[]) >= 1.0);

    // An unknown path is counted under one label, whatever the path.
    reqwest::get(format!("{url}/no/such/{}", job.id))
        .await
        .unwrap();
    let last = scrape(&url).await;
    assert_eq!(
        value(
            &last,
            "leasehold_http_request_duration_seconds_count",
            &[("route", "unmatched"), ("status", "404")]
        ),
        1.0
    );
    // Every family shows once it has a sample (db_errors shows from the first error).
    let families: Vec<&str> = last.docs.keys().map(String::as_str).collect();
    for family in [
        "leasehold_http_request_duration_seconds",
        "leasehold_lease_wait_seconds",
        "leasehold_wake_latency_seconds",
        "leasehold_lease_stage_seconds",
        "leasehold_leases",
        "leasehold_redeliveries",
        "leasehold_stale_reports",
        "leasehold_sweeper_batches",
        "leasehold_sweep_duration_seconds",
        "leasehold_notifications_sent",
        "leasehold_notifications_heard",
        "leasehold_long_polls",
        "leasehold_snapshot_horizon_age",
        "leasehold_claims_from_places",
        "leasehold_waiters",
        "leasehold_pool_connections_in_use",
        "leasehold_pool_waiting",
        "leasehold_db_statements",
        "leasehold_background_failures",
        "leasehold_jobs",
    ] {
        assert!(families.contains(&family), "{family} missing: {families:?}");
    }

    // The dashboard and the alerts under deploy/ read only families this server writes.
    for file in [
        "deploy/grafana/dashboards/leasehold.json",
        "deploy/alerts.yml",
    ] {
        let text =
            std::fs::read_to_string(format!("{}/{file}", env!("CARGO_MANIFEST_DIR"))).unwrap();
        let re = regex_lite::Regex::new(r"leasehold_[a-z_]+").unwrap();
        for name in re.find_iter(&text).map(|m| m.as_str()) {
            let family = ["_bucket", "_count", "_sum", "_total"]
                .iter()
                .fold(name, |n, suffix| n.strip_suffix(suffix).unwrap_or(n));
            assert!(
                last.docs.contains_key(family) || family == "leasehold_db_errors",
                "{file} reads {name}, which /metrics does not write"
            );
        }
    }
    let mut label_values: HashMap<String, String> = HashMap::new();
    for s in &last.samples {
        for (k, v) in s.labels.iter() {
            label_values.insert(v.clone(), k.clone());
        }
    }
    for (v, k) in &label_values {
        assert!(
            !v.contains(&job.id.to_string()) && !v.contains("alice") && v.len() < 64,
            "unbounded label {k}={v}"
        );
    }
}

/// `leasehold_claims_from_places` as the replica at `url` exposes it: 1 while the horizon is old.
async fn claims_from_places(url: &str) -> f64 {
    value(&scrape(url).await, "leasehold_claims_from_places", &[])
}

/// A snapshot held open (the analytics query) switches plain claims to remembered places once
/// it is `LEASEHOLD_CLAIM_PLACES_AGE` transactions old, the jobs still come in FIFO order, and its
/// end switches the claims back to the head.
#[tokio::test]
async fn an_old_snapshot_switches_plain_claims_to_remembered_places_and_back() {
    let app = TestApp::spawn_with(1, |c| c.claim_places_age = 20).await;
    let url = app.url(0);
    let alice = app.operator("acme", "alice", false).await;
    let (_, runner) = pair(&alice, leasehold::wire::Tier::Personal, &[], 100).await;
    let gauge = |want: f64| {
        let url = url.clone();
        move || {
            let url = url.clone();
            async move { (claims_from_places(&url).await == want).then_some(()) }
        }
    };
    eventually(Duration::from_secs(10), "claims read the head", gauge(0.0)).await;
    let mut analytics = connect(&app.database_url).await;
    let snapshot = hold_snapshot(&mut analytics, "SELECT count(*) FROM jobs").await;
    // Each dispatch is a transaction: the snapshot grows older.
    let mut ids = Vec::new();
    for i in 0..30 {
        ids.push(dispatch(&alice, personal(), json!(i)).await.id);
    }
    eventually(
        Duration::from_secs(10),
        "claims start from remembered places",
        gauge(1.0),
    )
    .await;
    assert!(
        value(&scrape(&url).await, "leasehold_snapshot_horizon_age", &[]) >= 20.0,
        "the age it switched on"
    );
    let mut leased = Vec::new();
    while leased.len() < ids.len() {
        let got = lease(&runner, 0, 1).await;
        assert_eq!(got.len(), 1, "every job is found");
        leased.push(got[0].id);
    }
    assert_eq!(leased, ids, "in FIFO order");
    snapshot.commit().await.unwrap();
    eventually(
        Duration::from_secs(10),
        "claims read the head again",
        gauge(0.0),
    )
    .await;
}

/// When an old snapshot ends, the job table is vacuumed at once (hub::vacuum), by one replica of
/// the two that see it end, rather than at autovacuum's next turn. `vacuum_count` counts only
/// such explicit vacuums, never autovacuum's.
#[tokio::test]
async fn when_an_old_snapshot_ends_one_replica_vacuums_the_job_table() {
    let app = TestApp::spawn_with(2, |c| c.claim_places_age = 20).await;
    let url = app.url(0);
    let alice = app.operator("acme", "alice", false).await;
    let (_, runner) = pair(&alice, leasehold::wire::Tier::Personal, &[], 100).await;
    let db = connect(&app.database_url).await;
    let vacuums = || async {
        db.query_one(
            "SELECT vacuum_count FROM pg_stat_user_tables WHERE relname = 'jobs'",
            &[],
        )
        .await
        .unwrap()
        .get::<_, i64>(0)
    };
    let mut analytics = connect(&app.database_url).await;
    let snapshot = hold_snapshot(&mut analytics, "SELECT count(*) FROM jobs").await;
    for i in 0..30 {
        dispatch(&alice, personal(), json!(i)).await;
    }
    eventually(Duration::from_secs(10), "the horizon seen old", || async {
        (claims_from_places(&url).await == 1.0).then_some(())
    })
    .await;
    // Dead versions the snapshot keeps: every job leased.
    while !lease(&runner, 0, 10).await.is_empty() {}
    assert_eq!(
        vacuums().await,
        0,
        "nothing vacuumed while the snapshot stands"
    );
    snapshot.commit().await.unwrap();
    eventually(
        Duration::from_secs(15),
        "the job table vacuumed",
        || async { (vacuums().await >= 1).then_some(()) },
    )
    .await;
}
