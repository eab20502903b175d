//! The dispatcher under a fleet's shapes (issue 51, v1.4 "No class starves" and "A lease to a
//! caller that is gone"). Invariants defended, each over real HTTP against real PostgreSQL:
//! a runner reaches a job it can run whatever it cannot run is parked ahead of it; a job leased
//! for a caller that hung up is parked again at once (`caller_gone`), never held until its TTL;
//! a tick that fails answers its waiters, gives back what it leased, and its workspace keeps
//! dispatching; a revoke racing a tick that carries the runner's report never deadlocks into a
//! 500; and among a class's runners, the least recently served is served first, however many
//! calls each holds open.

use std::time::Duration;

use leasehold::client::Client;
use leasehold::wire::{self, Tier};
use serde_json::json;

use crate::secrets::app_with_secrets;
use crate::support::{
    connect, eventually, gauge, lease, pair, personal, until_waiters, workspace_pool, TestApp,
};

/// A dispatch to the workspace pool requiring `caps`.
fn requiring(caps: &[&str], payload: serde_json::Value) -> wire::Dispatch {
    let mut d = wire::Dispatch::new(workspace_pool(), payload);
    d.required_capabilities = Some(caps.iter().map(|c| (*c).to_owned()).collect());
    d
}

/// An idle `arm64` runner gets the `arm64` job parked after 1,200 `gpu` jobs of its workspace
/// (more than one page of a lane scan) at once: what it cannot run is not read.
#[tokio::test]
async fn an_idle_runner_gets_its_job_behind_1200_it_cannot_run() {
    let app = TestApp::spawn().await;
    let admin = app.operator("acme", "root", true).await;
    let (_, _gpu) = pair(&admin, Tier::Workspace, &["gpu"], 1).await;
    let (_, arm) = pair(&admin, Tier::Workspace, &["arm64"], 1).await;
    for chunk in 0..12 {
        let items = (0..100)
            .map(|i| wire::BatchItem {
                dispatch: requiring(&["gpu"], json!(chunk * 100 + i)),
                idempotency_key: None,
            })
            .collect();
        admin.dispatch_batch(items).await.unwrap();
    }
    let job = admin
        .dispatch(&requiring(&["arm64"], json!("arm")))
        .await
        .unwrap();
    let got = lease(&arm, 5_000, 1).await;
    assert_eq!(
        got.iter().map(|j| j.id).collect::<Vec<_>>(),
        [job.id],
        "the arm64 runner reaches its job behind 1,200 gpu jobs"
    );
}

/// A job leased for a lease call whose client hangs up before its answer is written (here:
/// while the hand-over reads the job's secrets, held up by a lock) is parked again at once,
/// with a `caller_gone` state event and its attempt given back: it never waits for its lease
/// to lapse, and never fails for it (max_attempts 1).
#[tokio::test]
async fn a_job_leased_for_a_caller_that_hung_up_is_parked_again_at_once() {
    let app = app_with_secrets().await;
    let admin = app.operator("acme", "root", true).await;
    admin.put_secret("TOKEN", "s3cret").await.unwrap();
    let (_, r) = pair(&admin, Tier::Workspace, &[], 1).await;
    let mut d = wire::Dispatch::new(workspace_pool(), json!("x"));
    d.secrets = Some(vec!["TOKEN".into()]);
    d.max_attempts = Some(1);
    let job = admin.dispatch(&d).await.unwrap();
    // Hold the hand-over: its read of the secrets waits for this lock.
    let mut db = connect(&app.database_url).await;
    let lock = db.transaction().await.unwrap();
    lock.batch_execute("LOCK TABLE secrets IN ACCESS EXCLUSIVE MODE")
        .await
        .unwrap();
    let runner = r.clone();
    let call = tokio::spawn(async move { lease(&runner, 30_000, 1).await });
    let watch = connect(&app.database_url).await;
    eventually(Duration::from_secs(10), "the job leased", || async {
        (state_of(&watch, job.id).await == "leased").then_some(())
    })
    .await;
    // The caller hangs up while its hand-over waits.
    call.abort();
    let _ = call.await;
    until_waiters(&app.url(0), 0, Duration::from_secs(10)).await;
    lock.rollback().await.unwrap();
    eventually(Duration::from_secs(5), "the job parked again", || async {
        (state_of(&watch, job.id).await == "parked").then_some(())
    })
    .await;
    let events = admin.events(job.id, 0, 0).await.unwrap();
    let last = events.events.last().unwrap();
    assert_eq!(last.data["state"], "parked", "{events:?}");
    assert_eq!(last.data["reason"], "caller_gone", "{events:?}");
    // Given back, not counted: the next lease runs it, although max_attempts is 1.
    let got = lease(&r, 5_000, 1).await;
    assert_eq!(got.iter().map(|j| j.id).collect::<Vec<_>>(), [job.id]);
    assert!(
        gauge(&app.url(0), "leasehold_leases_caller_gone_total")
            .await
            .unwrap()
            >= 1
    );
}

async fn state_of(db: &tokio_postgres::Client, id: uuid::Uuid) -> String {
    db.query_one("SELECT state FROM jobs WHERE id = $1", &[&id])
        .await
        .unwrap()
        .get(0)
}

/// Every second tick fails after its transaction committed (the tick fault): each lease call
/// is still answered within its wait (503 from a failed tick, and the runner asks again), what a
/// failed tick leased is parked again at once, and the workspace keeps dispatching until every
/// job has run once and completed.
#[tokio::test]
async fn ticks_that_fail_answer_their_waiters_and_the_workspace_keeps_dispatching() {
    let app = TestApp::spawn_with(1, |c| c.fault_fail_ticks = 2).await;
    let alice = app.operator("acme", "alice", false).await;
    let (_, r) = pair(&alice, Tier::Personal, &[], 1).await;
    let mut jobs = Vec::new();
    for i in 0..5 {
        jobs.push(
            alice
                .dispatch(&wire::Dispatch::new(personal(), json!(i)))
                .await
                .unwrap()
                .id,
        );
    }
    let mut completed = Vec::new();
    let (mut failed_calls, mut calls) = (0, 0);
    while completed.len() < jobs.len() {
        calls += 1;
        assert!(calls < 60, "the workspace stopped dispatching");
        let started = std::time::Instant::now();
        let got = r.lease(&wire::Lease::waiting(2_000, 1)).await;
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "a lease call was left unanswered"
        );
        match got {
            Ok(leased) => {
                for j in leased {
                    r.complete(j.id, j.epoch, json!({"ok": true}))
                        .await
                        .unwrap();
                    completed.push(j.id);
                }
            }
            Err(e) => {
                assert!(e.to_string().contains("503"), "{e}");
                failed_calls += 1;
            }
        }
    }
    completed.sort();
    jobs.sort();
    assert_eq!(completed, jobs, "every job ran and completed once");
    assert!(failed_calls > 0, "the fault failed no tick");
    assert!(
        gauge(&app.url(0), "leasehold_dispatcher_ticks_failed_total")
            .await
            .unwrap()
            > 0
    );
    // What a failed tick leased was given back (caller_gone), never lost to a lapsed lease.
    let db = connect(&app.database_url).await;
    let gone: i64 = db
        .query_one(
            "SELECT count(*) FROM job_events WHERE data->>'reason' = 'caller_gone'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(gone > 0, "no job a failed tick leased was given back");
}

/// A revoke on one replica races a lease call on the other that carries the runner's report
/// (`done`): one lock order (runners, then jobs) means neither deadlocks. The revoke always
/// answers 204 and the runner is revoked; the lease call answers, never a 500.
#[tokio::test]
async fn a_revoke_racing_a_tick_with_the_runners_report_never_deadlocks() {
    let app = TestApp::spawn_with(2, |_| {}).await;
    let admin = app.operator("acme", "root", true).await;
    let admin1 = Client::new(app.url(1), Some(app.key("acme", "root", true).await));
    for i in 0..40 {
        let (runner, r) = pair(&admin, Tier::Workspace, &[], 2).await;
        let first = admin
            .dispatch(&wire::Dispatch::new(workspace_pool(), json!(i)))
            .await
            .unwrap();
        admin
            .dispatch(&wire::Dispatch::new(workspace_pool(), json!(i)))
            .await
            .unwrap();
        let got = lease(&r, 5_000, 1).await;
        assert_eq!(got.len(), 1);
        let epoch = got[0].epoch;
        let mut req = wire::Lease::waiting(0, 1);
        req.done = Some(vec![wire::DoneReport {
            id: got[0].id,
            epoch,
            result: Some(json!({"exit_code": 0})),
            fail: None,
        }]);
        let r0 = Client::new(app.url(0), r.token().map(str::to_owned));
        let (leased, revoked) = tokio::join!(
            r0.lease(&req),
            admin1.revoke_runner(Tier::Workspace, runner.id)
        );
        if let Err(e) = revoked {
            panic!("round {i}: the revoke failed: {e}");
        }
        if let Err(e) = &leased {
            assert!(
                !e.to_string().contains("500"),
                "round {i}: the lease call answered {e}"
            );
        }
        let listed = admin.runners(Tier::Workspace).await.unwrap();
        assert!(
            listed.iter().all(|x| x.id != runner.id),
            "round {i}: the runner is not revoked"
        );
        let _ = first;
    }
}

/// Runner A holds eight lease calls open, runner B one: single dispatches go to them in turn
/// (the least recently served first), not almost all to A.
#[tokio::test]
async fn a_runner_with_many_open_calls_gets_no_more_than_its_turn() {
    let app = TestApp::spawn_with(1, |c| {
        c.sweep_interval_ms = 3_600_000;
        c.recheck_interval_ms = 3_600_000;
    })
    .await;
    let url = app.url(0);
    let alice = app.operator("acme", "alice", false).await;
    let (_, a) = pair(&alice, Tier::Personal, &[], 100).await;
    let (_, b) = pair(&alice, Tier::Personal, &[], 100).await;
    let poll = |r: &Client| {
        let r = r.clone();
        tokio::spawn(async move { (r.token().map(str::to_owned), lease(&r, 30_000, 1).await) })
    };
    let mut calls = Vec::new();
    for _ in 0..8 {
        calls.push(poll(&a));
    }
    calls.push(poll(&b));
    until_waiters(&url, 9, Duration::from_secs(10)).await;
    let (mut to_a, mut to_b) = (0, 0);
    for i in 0..30 {
        alice
            .dispatch(&wire::Dispatch::new(personal(), json!(i)))
            .await
            .unwrap();
        // The call that got it answers; its runner asks again, as a runner does.
        let done = eventually(Duration::from_secs(10), "an answer", || {
            let at = calls.iter().position(|c| c.is_finished());
            async move { at }
        })
        .await;
        let (token, got) = calls.remove(done).await.unwrap();
        assert_eq!(got.len(), 1);
        if token.as_deref() == a.token() {
            to_a += 1;
            calls.push(poll(&a));
        } else {
            to_b += 1;
            calls.push(poll(&b));
        }
        until_waiters(&url, 9, Duration::from_secs(10)).await;
    }
    assert!(
        to_b >= 12,
        "B got {to_b} of 30 beside A's eight open calls ({to_a})"
    );
    for c in calls {
        c.abort();
    }
}
