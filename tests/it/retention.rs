//! Retention (contract v1.2, part B): jobs settled longer ago than the window are deleted with
//! their events and artifacts, and their ids then answer 404; parked and leased jobs, and those
//! settled within the window, are kept; a deleted job's idempotency key makes a new job; two
//! replicas sweeping at once delete each job once, without an error; a window of 0 keeps every
//! job; `leasehold serve` takes the window from its environment.
//!
//! The window is driven from the database clock: the tests wait (on a condition) until the
//! database's clock has passed the old jobs' settling by a second, and then sweep with a window
//! that ends between those and the recent ones.

use std::time::Duration;

use leasehold::client::Client;
use leasehold::hub::retention::{self, BATCH};
use leasehold::hub::Hub;
use leasehold::wire::{self, Tier};
use serde_json::json;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::support::{
    code, connect, dispatch, eventually, key_in, lease, pair, personal, serve_process, to_runner,
    TestApp,
};

/// Spawned without a background retention sweep: each test sweeps itself.
async fn app(replicas: usize) -> TestApp {
    TestApp::spawn_with(replicas, |c| {
        c.retention_days = 0;
        c.retention_ms = None;
    })
    .await
}

async fn rows(database_url: &str, sql: &str, id: Uuid) -> i64 {
    connect(database_url)
        .await
        .query_one(sql, &[&id])
        .await
        .unwrap()
        .get(0)
}

/// Wait until the database's clock is a second past every job settled so far; answers the
/// latest settling (seconds since the epoch, database clock).
async fn a_second_after_the_last_settled(database_url: &str) -> f64 {
    let db = connect(database_url).await;
    eventually(
        Duration::from_secs(10),
        "the database clock passes the settled jobs by a second",
        || async {
            let row = db
                .query_one(
                    "SELECT now() > max(finished_at) + interval '1 second',
                            extract(epoch FROM max(finished_at))::float8
                       FROM jobs",
                    &[],
                )
                .await
                .ok()?;
            row.get::<_, Option<bool>>(0)
                .unwrap_or(false)
                .then(|| row.get::<_, f64>(1))
        },
    )
    .await
}

/// A window that ends half a second after `settled` (seconds since the epoch), from now on the
/// database clock: a sweep with it at once deletes what settled up to then, and keeps what
/// settled a second after.
async fn window_after(database_url: &str, settled: f64) -> Duration {
    let ms: f64 = connect(database_url)
        .await
        .query_one(
            "SELECT (extract(epoch FROM now())::float8 - $1::float8) * 1000 - 500",
            &[&settled],
        )
        .await
        .unwrap()
        .get(0);
    Duration::from_millis(ms as u64)
}

async fn count(database_url: &str, sql: &str) -> i64 {
    connect(database_url)
        .await
        .query_one(sql, &[])
        .await
        .unwrap()
        .get(0)
}

async fn sweep(hub: &Hub, window: Duration) -> i64 {
    retention::retain(hub, window, &CancellationToken::new())
        .await
        .expect("the retention sweep")
}

/// A job leased by `runner` and completed, with runner events and an artifact.
async fn completed_with_history(alice: &Client, runner: &Client, key: &str) -> Uuid {
    let (_, job) = alice
        .dispatch_idempotent(&wire::Dispatch::new(personal(), json!("old")), key)
        .await
        .unwrap();
    let leased = lease(runner, 0, 1).await;
    assert_eq!(leased[0].id, job.id);
    runner
        .append_events(
            job.id,
            1,
            vec![wire::NewEvent {
                kind: "log".into(),
                data: Some(json!("line")),
            }],
        )
        .await
        .unwrap();
    runner
        .upload_artifact(job.id, 1, "out.txt", b"bytes".to_vec().into(), Some(5))
        .await
        .unwrap();
    runner
        .complete(job.id, 1, json!({"exit_code": 0}))
        .await
        .unwrap();
    job.id
}

#[tokio::test]
async fn settled_jobs_past_the_window_go_with_their_events_and_artifacts_and_the_rest_stay() {
    let app = app(1).await;
    let db = &app.database_url;
    let alice = app.operator("acme", "alice", false).await;
    let (_, r) = pair(&alice, Tier::Personal, &[], 1).await;
    let (_, busy) = pair(&alice, Tier::Personal, &[], 1).await;

    let old = completed_with_history(&alice, &r, "key-1").await;
    let cancelled = dispatch(&alice, personal(), json!("cancelled")).await.id;
    alice.cancel(cancelled).await.unwrap();
    // Dispatched as long ago, never settled.
    let leased = dispatch(&alice, personal(), json!("leased")).await.id;
    assert_eq!(lease(&busy, 0, 1).await[0].id, leased);
    // Named for a runner that never leases: parked.
    let (idle, _) = pair(&alice, Tier::Personal, &[], 1).await;
    let parked = dispatch(&alice, to_runner(idle.id), json!("parked"))
        .await
        .id;
    assert_eq!(
        rows(db, "SELECT count(*) FROM artifacts WHERE job_id = $1", old).await,
        1
    );

    let settled = a_second_after_the_last_settled(db).await;
    let recent = dispatch(&alice, personal(), json!("recent")).await.id;
    alice.cancel(recent).await.unwrap();
    let window = window_after(db, settled).await;
    // The window ends before the recent job settled (it settled a second after the old ones).
    assert_eq!(sweep(&app.replicas[0].hub, window).await, 2);

    for gone in [old, cancelled] {
        assert_eq!(code(alice.job(gone).await), "not_found");
        assert_eq!(code(alice.events(gone, 0, 0).await), "not_found");
        assert_eq!(code(alice.artifacts(gone).await), "not_found");
        assert_eq!(
            rows(
                db,
                "SELECT count(*) FROM job_events WHERE job_id = $1",
                gone
            )
            .await,
            0
        );
        // Its runner's calls about it are 404 too.
        assert_eq!(code(r.complete(gone, 1, json!(null)).await), "not_found");
    }
    assert_eq!(
        count(db, "SELECT count(*) FROM artifact_chunks").await,
        0,
        "the artifact's bytes are gone"
    );
    assert_eq!(alice.job(leased).await.unwrap().state, "leased");
    assert_eq!(alice.job(parked).await.unwrap().state, "parked");
    assert_eq!(alice.job(recent).await.unwrap().state, "cancelled");

    // The deleted job's key is forgotten: the same key makes a new job.
    let (status, again) = alice
        .dispatch_idempotent(&wire::Dispatch::new(personal(), json!("new")), "key-1")
        .await
        .unwrap();
    assert_eq!(status.as_u16(), 201);
    assert_ne!(again.id, old);
    assert_eq!(again.payload, json!("new"));
    // A second sweep with the same window finds nothing more.
    assert_eq!(sweep(&app.replicas[0].hub, window).await, 0);
}

#[tokio::test]
async fn two_replicas_sweeping_at_once_delete_each_job_once() {
    let app = app(2).await;
    let db = &app.database_url;
    let alice = app.operator("acme", "alice", false).await;
    let n = 3 * BATCH as usize + 17;
    let items = (0..n)
        .map(|i| wire::BatchItem {
            dispatch: wire::Dispatch::new(personal(), json!(i)),
            idempotency_key: None,
        })
        .collect();
    let jobs = alice.dispatch_batch(items).await.unwrap();
    for job in &jobs {
        alice.cancel(job.id).await.unwrap();
    }
    let settled = a_second_after_the_last_settled(db).await;
    let window = window_after(db, settled).await;
    let (a, b) = tokio::join!(
        sweep(&app.replicas[0].hub, window),
        sweep(&app.replicas[1].hub, window)
    );
    assert_eq!(a + b, n as i64, "each job deleted once ({a} + {b})");
    assert_eq!(count(db, "SELECT count(*) FROM jobs").await, 0);
}

#[tokio::test]
async fn a_window_of_zero_keeps_every_job() {
    let mut config = crate::support::test_config("postgres://unused");
    config.retention_days = 30;
    assert_eq!(config.retention(), Some(Duration::from_secs(30 * 86_400)));
    config.retention_ms = Some(1_500);
    assert_eq!(config.retention(), Some(Duration::from_millis(1_500)));
    config.retention_ms = Some(0);
    assert_eq!(
        config.retention(),
        None,
        "0 in ms keeps forever, whatever the days"
    );
    config.retention_ms = None;
    config.retention_days = 0;
    assert_eq!(config.retention(), None);

    // With retention 0 the loop runs nothing: it ends at once, and settled jobs stay.
    let app = TestApp::spawn_with(1, |c| {
        c.retention_days = 0;
        c.retention_interval_ms = 10;
    })
    .await;
    let alice = app.operator("acme", "alice", false).await;
    let job = dispatch(&alice, personal(), json!(1)).await.id;
    alice.cancel(job).await.unwrap();
    let hub = app.replicas[0].hub.clone();
    tokio::time::timeout(
        Duration::from_secs(10),
        retention::run(hub, CancellationToken::new()),
    )
    .await
    .expect("the retention loop does nothing when retention is 0");
    assert_eq!(alice.job(job).await.unwrap().state, "cancelled");
}

#[tokio::test]
async fn serve_deletes_settled_jobs_by_its_environment() {
    let database_url = crate::support::fresh_database().await;
    let server = serve_process(
        &database_url,
        &[
            ("LEASEHOLD_RETENTION_DAYS", "30"),
            ("LEASEHOLD_RETENTION_MS", "1"),
            ("LEASEHOLD_RETENTION_INTERVAL_MS", "50"),
        ],
    )
    .await;
    let key = key_in(&database_url, "acme", "alice", false).await;
    let alice = Client::new(server.url.clone(), Some(key));
    let job = dispatch(&alice, personal(), json!(1)).await.id;
    alice.cancel(job).await.unwrap();
    eventually(
        Duration::from_secs(20),
        "the settled job is deleted",
        || async {
            match alice.job(job).await {
                Err(e) if e.code() == Some("not_found") => Some(()),
                _ => None,
            }
        },
    )
    .await;
}
