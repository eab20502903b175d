//! Report and lease in one call (contract v1.2, part B): a lease call's `done` reports are
//! applied first, each exactly as its own `complete` or `fail` call (fencing, first terminal
//! report wins, the same validation), committed before the lease looks, and answered in request
//! order with the status and code their own calls would have had; the slots they free count for
//! the same call; a reader waiting on a job so settled wakes; a body that does not parse, or
//! over 100 reports, is a 400 naming `done` with nothing applied. The reference runner reports
//! this way when it leases right after a job ends, and its jobs complete end to end. v1.3: a
//! report answered 200 in `done` was committed durably (it waits for the synchronous standby),
//! while a lease that took nothing and settled nothing need not wait.

use std::time::Duration;

use leasehold::client::Client;
use leasehold::wire::{self, Tier};
use serde_json::{json, Value};
use uuid::Uuid;

use crate::procs::{RunnerRig, LONG};
use crate::support::{
    dispatch, eventually, gauge, key_in, lease, pair, personal, private_pg, start_replica,
    sync_standbys, test_config, until_waiters, waiting_for_standby, TestApp,
};

fn completes(id: Uuid, epoch: i64, result: Value) -> wire::DoneReport {
    wire::DoneReport {
        id,
        epoch,
        result: Some(result),
        fail: None,
    }
}

fn fails(id: Uuid, epoch: i64, message: &str) -> wire::DoneReport {
    wire::DoneReport {
        id,
        epoch,
        result: None,
        fail: Some(message.into()),
    }
}

fn reporting(wait_ms: i64, max_jobs: i64, done: Vec<wire::DoneReport>) -> wire::Lease {
    wire::Lease {
        done: Some(done),
        ..wire::Lease::waiting(wait_ms, max_jobs)
    }
}

fn statuses(answer: &wire::Leased) -> Vec<(Uuid, u16, Option<&str>)> {
    answer
        .done
        .iter()
        .map(|d| (d.id, d.status, d.code.as_deref()))
        .collect()
}

/// POST `body` to the lease route with `runner`'s token: the status and the JSON answer.
async fn raw_lease(app: &TestApp, runner: &Client, body: &Value) -> (u16, Value) {
    let r = reqwest::Client::new()
        .post(format!("{}/v1/runner/lease", app.url(0)))
        .bearer_auth(runner.token().unwrap())
        .json(body)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.json().await.unwrap())
}

#[tokio::test]
async fn reports_are_applied_in_order_each_with_the_status_of_its_own_call() {
    let app = TestApp::spawn().await;
    let alice = app.operator("acme", "alice", false).await;
    let (_, r) = pair(&alice, Tier::Personal, &[], 3).await;
    let a = dispatch(&alice, personal(), json!("a")).await;
    let b = dispatch(&alice, personal(), json!("b")).await;
    let c = dispatch(&alice, personal(), json!("c")).await;
    assert_eq!(lease(&r, 0, 3).await.len(), 3);
    let unknown = Uuid::now_v7();

    let answer = r
        .lease_reporting(&reporting(
            0,
            3,
            vec![
                completes(a.id, 1, json!({"exit_code": 0})),
                // A second terminal report for the same job: what its own call answers.
                fails(a.id, 1, "late"),
                // Not the epoch it was leased at.
                completes(b.id, 7, json!("stale")),
                completes(unknown, 1, json!(null)),
                fails(c.id, 1, "could not run"),
                // What its own call refuses with 400 stays in its entry.
                fails(b.id, 1, "nul\0inside"),
            ],
        ))
        .await
        .unwrap();
    assert_eq!(
        statuses(&answer),
        [
            (a.id, 200, None),
            (a.id, 409, Some("job_terminal")),
            (b.id, 409, Some("lease_superseded")),
            (unknown, 404, Some("not_found")),
            (c.id, 200, None),
            (b.id, 400, Some("bad_request")),
        ]
    );
    assert!(answer.jobs.is_empty());

    let a = alice.job(a.id).await.unwrap();
    assert_eq!(a.state, "completed");
    assert_eq!(a.result, Some(json!({"exit_code": 0})));
    assert_eq!(a.provenance.unwrap()["epoch"], json!(1));
    assert_eq!(alice.job(b.id).await.unwrap().state, "leased");
    let c = alice.job(c.id).await.unwrap();
    assert_eq!(c.state, "failed");
    assert_eq!(c.error.unwrap()["message"], json!("could not run"));
    // The same events as their own calls append.
    let states: Vec<_> = alice
        .events(a.id, 0, 0)
        .await
        .unwrap()
        .events
        .iter()
        .map(|e| e.data["state"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(states, ["parked", "leased", "completed"]);
    assert_eq!(
        gauge(&app.url(0), "leasehold_done_reports_total").await,
        Some(6)
    );
    // A lease call without `done` answers `done: []`.
    let (status, plain) = raw_lease(&app, &r, &json!({"wait_ms": 0})).await;
    assert_eq!((status, &plain["done"]), (200, &json!([])));
}

#[tokio::test]
async fn a_body_that_does_not_parse_or_over_100_reports_is_a_400_naming_done_and_applies_nothing() {
    let app = TestApp::spawn().await;
    let alice = app.operator("acme", "alice", false).await;
    let (_, r) = pair(&alice, Tier::Personal, &[], 1).await;
    let job = dispatch(&alice, personal(), json!(1)).await;
    assert_eq!(lease(&r, 0, 1).await.len(), 1);
    let good = json!({"id": job.id, "epoch": 1, "result": {"ok": true}});

    let (status, body) = raw_lease(
        &app,
        &r,
        &json!({"wait_ms": 0, "done": [good, {"id": "nope", "epoch": 1, "result": 1}]}),
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(body["error"]["code"], json!("bad_request"));
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.starts_with("done"), "{message}");

    let many: Vec<Value> = (0..101).map(|_| good.clone()).collect();
    let (status, body) = raw_lease(&app, &r, &json!({"wait_ms": 0, "done": many})).await;
    assert_eq!(status, 400);
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.starts_with("done"), "{message}");

    assert_eq!(alice.job(job.id).await.unwrap().state, "leased");
    // Neither `result` nor `fail`: a complete with a null result, as its own call would be.
    let (status, body) = raw_lease(
        &app,
        &r,
        &json!({"wait_ms": 0, "done": [{"id": job.id, "epoch": 1}]}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["done"],
        json!([{"id": job.id, "status": 200, "code": null}])
    );
    let settled = alice.job(job.id).await.unwrap();
    assert_eq!(
        (settled.state.as_str(), settled.result),
        ("completed", None)
    );
}

#[tokio::test]
async fn the_slot_a_report_frees_is_leased_by_the_same_call() {
    let app = TestApp::spawn().await;
    let alice = app.operator("acme", "alice", false).await;
    let (_, r) = pair(&alice, Tier::Personal, &[], 1).await;
    let first = dispatch(&alice, personal(), json!(1)).await;
    let second = dispatch(&alice, personal(), json!(2)).await;
    let took = lease(&r, 0, 1).await;
    assert_eq!(took[0].id, first.id);
    // Capacity 1 and busy: nothing without a report.
    assert!(lease(&r, 0, 1).await.is_empty());

    let answer = r
        .lease_reporting(&reporting(
            5_000,
            1,
            vec![completes(first.id, 1, json!({"exit_code": 0}))],
        ))
        .await
        .unwrap();
    assert_eq!(statuses(&answer), [(first.id, 200, None)]);
    assert_eq!(answer.jobs.len(), 1, "the freed slot takes the next job");
    assert_eq!(answer.jobs[0].id, second.id);
    assert_eq!(alice.job(first.id).await.unwrap().state, "completed");
    assert_eq!(alice.job(second.id).await.unwrap().state, "leased");
}

#[tokio::test]
async fn a_reader_waiting_on_the_job_wakes_when_a_report_in_done_settles_it() {
    let app = TestApp::spawn().await;
    let alice = app.operator("acme", "alice", false).await;
    let (_, r) = pair(&alice, Tier::Personal, &[], 1).await;
    let job = dispatch(&alice, personal(), json!(1)).await;
    assert_eq!(lease(&r, 0, 1).await.len(), 1);

    // The longest wait the contract allows: answering well within the test's deadline needs
    // the wake.
    let reader = tokio::spawn({
        let alice = alice.clone();
        async move { alice.wait_job(job.id, 60_000).await }
    });
    until_waiters(&app.url(0), 1, Duration::from_secs(10)).await;
    let answer = r
        .lease_reporting(&reporting(0, 1, vec![fails(job.id, 1, "no")]))
        .await
        .unwrap();
    assert_eq!(statuses(&answer), [(job.id, 200, None)]);
    let seen = tokio::time::timeout(Duration::from_secs(20), reader)
        .await
        .expect("the waiting reader is woken")
        .unwrap()
        .unwrap();
    assert_eq!(seen.state, "failed");
}

#[tokio::test]
async fn the_reference_runner_reports_through_its_next_lease_and_every_job_completes() {
    let rig = RunnerRig::new(TestApp::spawn().await, "done-e2e").await;
    // Queued before the runner starts: with its one slot busy, each job's report rides on the
    // lease call that takes the next.
    let n = 5;
    let mut ids = Vec::new();
    for i in 0..n {
        ids.push(
            dispatch(
                &rig.alice,
                personal(),
                json!({"argv": ["sh", "-c", format!("echo job-{i}")]}),
            )
            .await
            .id,
        );
    }
    let (_config, mut runner) = rig.start_runner(&[], &["--unconfined"]).await;
    for id in &ids {
        let job = eventually(LONG, "the job completes", || async {
            let job = rig.alice.job(*id).await.ok()?;
            (job.state == "completed").then_some(job)
        })
        .await;
        assert_eq!(job.result.as_ref().unwrap()["exit_code"], json!(0));
    }
    for (i, id) in ids.iter().enumerate() {
        let job = rig.alice.job(*id).await.unwrap();
        assert_eq!(
            job.result.unwrap()["stdout_tail"],
            json!(format!("job-{i}\n")),
            "{}",
            runner.log()
        );
    }
    // Every report but perhaps the first came through a lease call's `done`.
    let carried = gauge(&rig.url(), "leasehold_done_reports_total")
        .await
        .unwrap_or(0);
    assert!(
        carried >= n - 1,
        "{carried} reports via done\n{}",
        runner.log()
    );
    runner.signal(nix::sys::signal::Signal::SIGTERM);
    assert!(runner.exit(LONG).await.success(), "{}", runner.log());
}

/// v1.3, "Acknowledged means durable": the embedded drill settled jobs twice after a failover
/// because a lease call's `done` committed with `synchronous_commit` off when its claim took
/// nothing. Here commits wait for a synchronous standby that never confirms: the call with a
/// report must be seen waiting for it (not answered), and answers 200 once the wait is lifted;
/// a lease that takes nothing and settles nothing answers without that wait.
#[tokio::test]
async fn a_report_in_done_is_answered_only_once_its_commit_is_durable() {
    let pg = private_pg("durable-done", true).await;
    let url = pg.url("postgres");
    let replica = start_replica(test_config(&url)).await;
    let server = format!("http://{}", replica.addr);
    let alice = Client::new(&server, Some(key_in(&url, "acme", "alice", false).await));
    let (_, runner) = pair(&alice, Tier::Personal, &[], 1).await;
    let job = dispatch(&alice, personal(), json!("durable")).await.id;
    let held = lease(&runner, 0, 1).await;
    assert_eq!(held.len(), 1);

    sync_standbys(&url, "standby_that_does_not_exist").await;
    // Nothing to take (its one slot is held) and nothing to settle: no wait for the standby.
    assert!(lease(&runner, 0, 1).await.is_empty());

    let reporting_runner = runner.clone();
    let epoch = held[0].epoch;
    let call = tokio::spawn(async move {
        reporting_runner
            .lease_reporting(&reporting(
                0,
                1,
                vec![completes(job, epoch, json!({"exit_code": 0}))],
            ))
            .await
    });
    eventually(
        Duration::from_secs(20),
        "the report's commit waiting for the standby",
        || async {
            assert!(
                !call.is_finished(),
                "the report was answered before its commit was durable"
            );
            (waiting_for_standby(&url).await >= 1).then_some(())
        },
    )
    .await;
    sync_standbys(&url, "").await;
    let answer = tokio::time::timeout(Duration::from_secs(20), call)
        .await
        .expect("answered once the standby wait is lifted")
        .unwrap()
        .unwrap();
    assert_eq!(statuses(&answer), vec![(job, 200, None)]);
    assert_eq!(alice.job(job).await.unwrap().state, "completed");
    drop(replica);
}
