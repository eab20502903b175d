//! Several replicas on one database: a job parked through any replica reaches a runner
//! long-polling any other in milliseconds (not through the re-check safety net); waiting costs
//! no database connection; a notification heard by three replicas delivers the job once; wakes
//! are shared round-robin across runners.

use std::time::{Duration, Instant};

use leasehold::client::Client;
use leasehold::wire::{self, Tier};
use serde_json::json;

use crate::support::{dispatch, lease, pair, personal, pool_connections, until_waiters, TestApp};

/// The re-check safety net is pushed far out, so only a notification can deliver in time.
fn notifications_only(c: &mut leasehold::config::Config) {
    c.recheck_interval_ms = 600_000;
}

#[tokio::test]
async fn a_runner_polling_replica_a_gets_a_job_dispatched_on_replica_b() {
    let app = TestApp::spawn_with(2, notifications_only).await;
    let alice_a = app.operator("acme", "alice", false).await;
    let alice_b = Client::new(app.url(1), None).with_token(app.key("acme", "alice", false).await);
    let (_, runner_a) = pair(&alice_a, Tier::Personal, &[], 1).await;
    let mut latencies = Vec::new();
    for i in 0..100 {
        let poll = tokio::spawn({
            let r = runner_a.clone();
            async move {
                let got = lease(&r, 20_000, 1).await;
                (got, Instant::now())
            }
        });
        // Let the poll park (registering as a waiter) before dispatching.
        until_waiters(&app.url(0), 1, Duration::from_secs(5)).await;
        let sent = Instant::now();
        let job = dispatch(&alice_b, personal(), json!(i)).await;
        let (got, received) = poll.await.unwrap();
        assert_eq!(
            got.len(),
            1,
            "delivered by notification, not by the wait ending"
        );
        assert_eq!(got[0].id, job.id);
        latencies.push(received.duration_since(sent));
        runner_a
            .complete(job.id, got[0].epoch, json!(null))
            .await
            .unwrap();
    }
    latencies.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "cross-replica wake (dispatch call start -> lease answer) over {} wakes: p50 {:.2} ms, p90 {:.2} ms, max {:.2} ms",
        latencies.len(),
        ms(latencies[latencies.len() / 2]),
        ms(latencies[latencies.len() * 9 / 10]),
        ms(*latencies.last().unwrap())
    );
    assert!(latencies.iter().all(|l| *l < Duration::from_secs(10)));
}

#[tokio::test]
async fn a_result_waiter_on_a_returns_when_the_job_completes_through_b() {
    let app = TestApp::spawn_with(2, notifications_only).await;
    let alice_a = app.operator("acme", "alice", false).await;
    let alice_b = alice_a.with_token(app.key("acme", "alice", false).await);
    let alice_b = Client::new(app.url(1), None).with_token(alice_b_token(&alice_b));
    let (_, runner) = pair(&alice_a, Tier::Personal, &[], 1).await;
    let runner_b = Client::new(app.url(1), None).with_token(runner_token(&runner));
    let job = dispatch(&alice_a, personal(), json!(null)).await;
    let waiter = tokio::spawn({
        let a = alice_a.clone();
        async move {
            let j = a.wait_job(job.id, 30_000).await.unwrap();
            (j, Instant::now())
        }
    });
    let l = lease(&runner_b, 1000, 1).await.remove(0);
    // Events read on A, appended on B.
    let reader = tokio::spawn({
        let a = alice_a.clone();
        async move { a.events(job.id, 2, 30_000).await.unwrap() }
    });
    runner_b
        .append_events(
            job.id,
            l.epoch,
            vec![wire::NewEvent {
                kind: "stdout".into(),
                data: Some(json!("hi")),
            }],
        )
        .await
        .unwrap();
    assert_eq!(reader.await.unwrap().events[0].data, json!("hi"));
    let completed_at = Instant::now();
    runner_b
        .complete(job.id, l.epoch, json!("done"))
        .await
        .unwrap();
    let (settled, woke) = waiter.await.unwrap();
    assert_eq!(settled.state, "completed");
    assert!(woke.duration_since(completed_at) < Duration::from_secs(5));
    let _ = alice_b;
}

fn alice_b_token(c: &Client) -> String {
    token_of(c)
}

fn runner_token(c: &Client) -> String {
    token_of(c)
}

/// The bearer token a test client holds (tests only: the client keeps it private otherwise).
fn token_of(c: &Client) -> String {
    c.token().expect("client has a token").to_owned()
}

#[tokio::test]
async fn a_thousand_idle_long_polls_hold_no_more_connections_than_the_pool() {
    let app = TestApp::spawn_with(1, |c| {
        c.pool_size = 4;
        // A hundred polls per runner token here, past the default bound of 16.
        c.max_polls_per_runner = 100;
    })
    .await;
    let alice = app.operator("acme", "alice", false).await;
    let mut runners = Vec::new();
    for _ in 0..10 {
        runners.push(pair(&alice, Tier::Personal, &[], 100).await.1);
    }
    let polls: Vec<_> = (0..1000)
        .map(|i| {
            let r = runners[i % 10].clone();
            tokio::spawn(async move { lease(&r, 20_000, 1).await })
        })
        .collect();
    until_waiters(&app.url(0), 1000, Duration::from_secs(30)).await;
    let held = pool_connections(&app.database_url).await;
    println!("1000 idle long-polls hold {held} pooled database connections (pool size 4)");
    assert!(held <= 4, "held {held} connections");
    // They still work: one job wakes exactly one of them.
    let job = dispatch(&alice, personal(), json!(null)).await;
    let first =
        crate::support::eventually(Duration::from_secs(10), "one poll answered", || async {
            polls.iter().position(|p| p.is_finished())
        })
        .await;
    let got = polls.into_iter().nth(first).unwrap().await.unwrap();
    assert_eq!(got[0].id, job.id);
}

#[tokio::test]
async fn a_job_heard_by_three_replicas_is_delivered_exactly_once() {
    let app = TestApp::spawn_with(3, notifications_only).await;
    let alice = app.operator("acme", "alice", false).await;
    let (runner, r0) = pair(&alice, Tier::Personal, &[], 3).await;
    let token = token_of(&r0);
    let _ = runner;
    // The same runner long-polls every replica at once, with room for more than one job.
    let polls: Vec<_> = (0..3)
        .map(|i| {
            let r = Client::new(app.url(i), Some(token.clone()));
            tokio::spawn(async move { lease(&r, 3000, 3).await })
        })
        .collect();
    for i in 0..3 {
        until_waiters(&app.url(i), 1, Duration::from_secs(5)).await;
    }
    let job = dispatch(
        &Client::new(app.url(2), Some(token_of(&alice))),
        personal(),
        json!(null),
    )
    .await;
    let mut delivered = Vec::new();
    for p in polls {
        delivered.extend(p.await.unwrap());
    }
    assert_eq!(delivered.len(), 1, "{delivered:?}");
    assert_eq!((delivered[0].id, delivered[0].epoch), (job.id, 1));
}

#[tokio::test]
async fn a_stream_of_jobs_is_shared_between_two_long_polling_runners() {
    let app = TestApp::spawn_with(2, notifications_only).await;
    let alice = app.operator("acme", "alice", false).await;
    // Both poll replica 1; jobs are dispatched through replica 0, so every wake arrives by
    // notification and replica 1 hands it to its longest-waiting runner.
    let (_, a) = pair(&alice, Tier::Personal, &[], 1).await;
    let (_, b) = pair(&alice, Tier::Personal, &[], 1).await;
    let a = Client::new(app.url(1), Some(token_of(&a)));
    let b = Client::new(app.url(1), Some(token_of(&b)));
    let total = 30;
    let worker = |r: Client| async move {
        let mut mine = 0;
        loop {
            let got = lease(&r, 3000, 1).await;
            let Some(j) = got.into_iter().next() else {
                return mine;
            };
            r.complete(j.id, j.epoch, json!(null)).await.unwrap();
            mine += 1;
        }
    };
    let (ta, tb) = (tokio::spawn(worker(a)), tokio::spawn(worker(b)));
    for i in 0..total {
        dispatch(&alice, personal(), json!(i)).await;
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    let (na, nb) = (ta.await.unwrap(), tb.await.unwrap());
    println!("fairness: runner a took {na}, runner b took {nb} of {total}");
    assert_eq!(na + nb, total);
    assert!(
        na >= total / 5 && nb >= total / 5,
        "one runner monopolised the pool: {na} vs {nb}"
    );
}

#[tokio::test]
async fn a_woken_runner_that_must_skip_the_job_passes_the_wake_to_the_next_waiter() {
    let app = TestApp::spawn_with(2, notifications_only).await;
    let alice = app.operator("acme", "alice", false).await;
    let (_, plain) = pair(&alice, Tier::Personal, &["linux"], 1).await;
    let (_, gpu) = pair(&alice, Tier::Personal, &["linux", "gpu"], 1).await;
    let plain = Client::new(app.url(1), Some(token_of(&plain)));
    let gpu = Client::new(app.url(1), Some(token_of(&gpu)));
    // The runner without a GPU waits longest, so replica 1 wakes it first.
    let plain_poll = tokio::spawn(async move { lease(&plain, 20_000, 1).await });
    until_waiters(&app.url(1), 1, Duration::from_secs(5)).await;
    let gpu_poll = tokio::spawn(async move { (lease(&gpu, 20_000, 1).await, Instant::now()) });
    until_waiters(&app.url(1), 2, Duration::from_secs(5)).await;
    let mut d = wire::Dispatch::new(personal(), json!("needs a gpu"));
    d.required_capabilities = Some(vec!["gpu".into()]);
    let sent = Instant::now();
    let job = alice.dispatch(&d).await.unwrap();
    let (got, at) = gpu_poll.await.unwrap();
    assert_eq!(got.first().map(|j| j.id), Some(job.id));
    assert!(
        at.duration_since(sent) < Duration::from_secs(5),
        "delivered by the passed-on wake, not the wait's end"
    );
    assert!(
        !plain_poll.is_finished(),
        "the runner that skipped went back to waiting"
    );
    plain_poll.abort();
}

/// A woken plain runner that takes one of two jobs asks whether more are parked
/// (`lease_more.sql`, sent only by a woken waiter) and passes the wake on: the second runner
/// gets the second job from the one notification, long before its wait ends.
#[tokio::test]
async fn a_woken_runner_that_leaves_a_job_behind_passes_the_wake_to_the_next_waiter() {
    let app = TestApp::spawn_with(2, notifications_only).await;
    let alice = app.operator("acme", "alice", false).await;
    let (_, first) = pair(&alice, Tier::Personal, &[], 1).await;
    let (_, second) = pair(&alice, Tier::Personal, &[], 1).await;
    let first = Client::new(app.url(1), Some(token_of(&first)));
    let second = Client::new(app.url(1), Some(token_of(&second)));
    let polls = [first, second]
        .map(|r| tokio::spawn(async move { (lease(&r, 20_000, 1).await, Instant::now()) }));
    until_waiters(&app.url(1), 2, Duration::from_secs(5)).await;
    // One batch, one transaction, one notification to replica 1 for both jobs.
    let item = |n: i32| wire::BatchItem {
        dispatch: wire::Dispatch::new(personal(), json!(n)),
        idempotency_key: None,
    };
    let sent = Instant::now();
    let jobs = alice.dispatch_batch(vec![item(1), item(2)]).await.unwrap();
    let mut got = Vec::new();
    for poll in polls {
        let (leased, at) = poll.await.unwrap();
        assert_eq!(leased.len(), 1, "each runner takes one job");
        assert!(
            at.duration_since(sent) < Duration::from_secs(5),
            "delivered by the wake and the passed-on wake, not the wait's end"
        );
        got.push(leased[0].id);
    }
    got.sort();
    let mut want: Vec<_> = jobs.iter().map(|j| j.id).collect();
    want.sort();
    assert_eq!(got, want);
}
