//! The dispatcher (issue 48): a replica claims once for all its waiting runners. A parked job
//! makes a replica's waiting runners due and costs one claim for all of them, never one per
//! waiter; what one tick takes goes round-robin among the runners that wait (every runner's
//! first free slot, oldest waiter first, then every second), so no runner takes a burst while
//! others wait; a lease call that goes away while it waits leaves nothing behind, and its
//! runner's next call is served.

use std::time::Duration;

use leasehold::client::Client;
use leasehold::wire::{self, Tier};
use serde_json::json;

use crate::support::{eventually, gauge, pair, personal, until_waiters, TestApp};

/// A replica nothing but lease calls and dispatches drives: no sweep, no safety net in the
/// test's time.
async fn quiet_app() -> TestApp {
    TestApp::spawn_with(1, |c| {
        c.sweep_interval_ms = 3_600_000;
        c.recheck_interval_ms = 3_600_000;
    })
    .await
}

async fn ticks(url: &str) -> u64 {
    gauge(url, "leasehold_dispatcher_ticks_total")
        .await
        .expect("the tick counter")
}

/// Start a long-poll of `runner` (30 s, up to `max_jobs`) and wait until its first look (a tick)
/// has begun.
async fn waiting(
    url: &str,
    runner: &Client,
    max_jobs: i64,
) -> tokio::task::JoinHandle<Vec<wire::LeasedJob>> {
    let before = ticks(url).await;
    let r = runner.clone();
    let call = tokio::spawn(async move {
        r.lease(&wire::Lease::waiting(30_000, max_jobs))
            .await
            .unwrap()
    });
    eventually(Duration::from_secs(10), "its first look", || async {
        (ticks(url).await > before).then_some(())
    })
    .await;
    call
}

/// A batch of jobs parked while six runners wait is claimed for all of them at once: five jobs
/// reach five runners (one each), in at most two ticks (one that takes them, one more for the
/// runner still waiting, which the park made due), and the sixth runner keeps waiting.
#[tokio::test]
async fn jobs_parked_while_runners_wait_cost_one_claim_for_all_of_them() {
    let app = quiet_app().await;
    let url = app.url(0);
    let alice = app.operator("acme", "alice", false).await;
    let mut calls = Vec::new();
    for _ in 0..6 {
        let (_, r) = pair(&alice, Tier::Personal, &[], 1).await;
        calls.push(waiting(&url, &r, 1).await);
    }
    until_waiters(&url, 6, Duration::from_secs(10)).await;
    let before = ticks(&url).await;
    let items = (0..5)
        .map(|i| wire::BatchItem {
            dispatch: wire::Dispatch::new(personal(), json!(i)),
            idempotency_key: None,
        })
        .collect();
    let jobs = alice.dispatch_batch(items).await.unwrap();
    until_waiters(&url, 1, Duration::from_secs(10)).await;
    let mut got = Vec::new();
    let mut still = Vec::new();
    for call in calls {
        if call.is_finished() {
            got.extend(call.await.unwrap().into_iter().map(|j| j.id));
        } else {
            still.push(call);
        }
    }
    got.sort();
    let mut want: Vec<_> = jobs.iter().map(|j| j.id).collect();
    want.sort();
    assert_eq!(got, want, "each job reached one runner");
    assert_eq!(still.len(), 1, "the sixth runner waits on");
    let spent = ticks(&url).await - before;
    assert!(
        (1..=2).contains(&spent),
        "five jobs for six waiting runners took {spent} ticks"
    );
    still.pop().unwrap().abort();
}

/// Three runners that each want three jobs wait; three jobs parked at once go one to each, not
/// three to the first.
#[tokio::test]
async fn a_claim_hands_its_jobs_out_round_robin() {
    let app = quiet_app().await;
    let url = app.url(0);
    let alice = app.operator("acme", "alice", false).await;
    let mut calls = Vec::new();
    for _ in 0..3 {
        let (_, r) = pair(&alice, Tier::Personal, &[], 3).await;
        calls.push(waiting(&url, &r, 3).await);
    }
    until_waiters(&url, 3, Duration::from_secs(10)).await;
    let items = (0..3)
        .map(|i| wire::BatchItem {
            dispatch: wire::Dispatch::new(personal(), json!(i)),
            idempotency_key: None,
        })
        .collect();
    alice.dispatch_batch(items).await.unwrap();
    let mut each = Vec::new();
    for call in calls {
        each.push(call.await.unwrap().len());
    }
    assert_eq!(each, [1, 1, 1], "one job to each waiting runner");
}

/// A lease call whose client goes away while it waits is withdrawn: nothing is leased for it,
/// and the next job parked goes to the call that replaces it.
#[tokio::test]
async fn a_call_that_goes_away_while_it_waits_leaves_nothing_behind() {
    let app = quiet_app().await;
    let url = app.url(0);
    let alice = app.operator("acme", "alice", false).await;
    let (_, r) = pair(&alice, Tier::Personal, &[], 1).await;
    let gone = waiting(&url, &r, 1).await;
    until_waiters(&url, 1, Duration::from_secs(10)).await;
    gone.abort();
    until_waiters(&url, 0, Duration::from_secs(10)).await;
    let next = waiting(&url, &r, 1).await;
    let job = alice
        .dispatch(&wire::Dispatch::new(personal(), json!("next")))
        .await
        .unwrap();
    let got = next.await.unwrap();
    assert_eq!(got.iter().map(|j| j.id).collect::<Vec<_>>(), [job.id]);
    assert_eq!(got[0].epoch, 1, "leased once, by the call that asked");
}
