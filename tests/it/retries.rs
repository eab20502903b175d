//! Retries (contract v1.2, part B): a dispatch's retry policy, and `POST /v1/jobs/{id}/retry`.
//!
//! Invariants defended: a `fail` report, a `complete` with a non-zero integer `exit_code`, and
//! `max_attempts` lapses within one try park the job again when the policy names the reason and
//! fewer than `limit` retries were made (same id, epoch + 1, retries + 1, attempts back to 0, a
//! `state` event naming what ended the attempt), and settle it as before once the limit is
//! spent; a reason the policy does not name settles at once; a job-wait long poll never answers
//! a re-parked job as settled; a delayed retry is not leasable before its `not_before`, is
//! leased once it passes (a waiting runner is woken for it), and is never skipped by a claim
//! from a remembered place; the policy is validated (400 naming `retry`), in batches too; the
//! retry call re-parks any settled job, supersedes a leased one (its runner's late report is
//! 409 `lease_superseded`, its next heartbeat lists it in `cancelled`, and a real runner kills
//! the command and runs the new attempt), answers a parked job unchanged, is 404 for another
//! workspace's job, and honours `Idempotency-Key`.

use std::time::Duration;

use leasehold::client::Client;
use leasehold::wire::{self, Tier};
use reqwest::Method;
use serde_json::{json, Value};
use uuid::Uuid;

use crate::procs::{live_in_group, marker, processes_with, saved, RunnerRig, TempDir, LONG};
use crate::support::{code, eventually, lease, pair, personal, TestApp};

/// A personal-pool dispatch of a null payload with this retry policy.
fn with_retry(policy: Value) -> wire::Dispatch {
    wire::Dispatch {
        retry: Some(policy),
        ..wire::Dispatch::new(personal(), json!(null))
    }
}

/// Lease the one job there is at once.
async fn take(runner: &Client) -> wire::LeasedJob {
    let mut got = lease(runner, 5000, 1).await;
    assert_eq!(got.len(), 1, "a job to lease");
    got.remove(0)
}

/// The data of a job's `state` events, in order.
async fn states(client: &Client, id: Uuid) -> Vec<Value> {
    client
        .events(id, 0, 0)
        .await
        .unwrap()
        .events
        .into_iter()
        .filter(|e| e.kind == "state")
        .map(|e| e.data)
        .collect()
}

/// The error (code, message) of a raw call.
async fn refused(client: &Client, method: Method, path: &str, body: Value) -> (String, String) {
    match client
        .call::<_, Value>(method, path, Some(&body), &[])
        .await
    {
        Ok(v) => panic!("expected an error, got {v:?}"),
        Err(leasehold::client::ClientError::Api { code, message, .. }) => (code, message),
        Err(e) => panic!("transport: {e}"),
    }
}

#[tokio::test]
async fn a_fail_the_policy_names_parks_the_job_again_until_the_limit_is_spent() {
    let app = TestApp::spawn().await;
    let alice = app.operator("acme", "alice", false).await;
    let (_, r) = pair(&alice, Tier::Personal, &[], 1).await;
    let job = alice
        .dispatch(&with_retry(json!({"limit": 2, "on": ["runner_failed"]})))
        .await
        .unwrap();
    assert_eq!(job.retries, 0);
    let policy = job.retry.clone().expect("the policy is shown");
    assert_eq!(
        (policy.limit, policy.on.as_slice(), policy.delay_ms),
        (2, &["runner_failed".to_owned()][..], 0)
    );
    assert_eq!(job.not_before, None);

    // A waiter on the job: it must not be answered by a re-park.
    let waiter = {
        let alice = alice.clone();
        tokio::spawn(async move { alice.wait_job(job.id, 60_000).await.unwrap() })
    };

    let mut epoch_before = 0;
    for retry in 1..=2 {
        let l = take(&r).await;
        assert_eq!(l.epoch, epoch_before + 1, "the lease bumps the epoch");
        assert_eq!(l.attempt, 1, "attempts count the leases of this try only");
        let answered = r.fail(job.id, l.epoch, "no docker").await.unwrap();
        assert_eq!(
            answered.state, "parked",
            "the report is accepted and re-parks"
        );
        assert_eq!(answered.epoch, l.epoch + 1);
        assert_eq!(answered.retries, retry);
        assert_eq!(answered.attempts, 0);
        assert_eq!(answered.error, None);
        assert_eq!(answered.not_before, None, "no delay: leasable at once");
        // The old attempt is fenced out like any superseded lease.
        assert_eq!(
            code(r.complete(job.id, l.epoch, json!("late")).await),
            "lease_superseded"
        );
        let last = states(&alice, job.id).await.pop().unwrap();
        assert_eq!(
            (
                &last["state"],
                &last["reason"],
                &last["after"],
                &last["attempt"]
            ),
            (
                &json!("parked"),
                &json!("retry"),
                &json!("runner_failed"),
                &json!(retry)
            ),
            "{last}"
        );
        epoch_before = answered.epoch;
        assert!(!waiter.is_finished(), "a re-parked job is not settled");
    }
    // The limit is spent: the third failure settles.
    let l = take(&r).await;
    let failed = r.fail(job.id, l.epoch, "no docker").await.unwrap();
    assert_eq!(failed.state, "failed");
    assert_eq!(failed.retries, 2);
    assert_eq!(failed.error.as_ref().unwrap()["reason"], "runner_failed");
    let waited = waiter.await.unwrap();
    assert_eq!(
        (waited.state.to_string(), waited.retries),
        ("failed".to_owned(), 2)
    );
}

#[tokio::test]
async fn a_non_zero_exit_code_retries_only_when_the_policy_names_it() {
    let app = TestApp::spawn().await;
    let alice = app.operator("acme", "alice", false).await;
    let (_, r) = pair(&alice, Tier::Personal, &[], 1).await;

    // The default `on` names all three reasons.
    let job = alice
        .dispatch(&with_retry(json!({"limit": 1})))
        .await
        .unwrap();
    assert_eq!(
        job.retry.as_ref().unwrap().on,
        ["runner_failed", "exit_code", "lease_lost"]
    );
    let l = take(&r).await;
    let parked = r
        .complete(job.id, l.epoch, json!({"exit_code": 3}))
        .await
        .unwrap();
    assert_eq!(
        (parked.state.to_string(), parked.retries, parked.result),
        ("parked".to_owned(), 1, None)
    );
    assert_eq!(
        states(&alice, job.id).await.pop().unwrap()["after"],
        "exit_code"
    );
    let l = take(&r).await;
    let done = r
        .complete(job.id, l.epoch, json!({"exit_code": 3}))
        .await
        .unwrap();
    assert_eq!(done.state, "completed", "the limit is spent");
    assert_eq!(done.result, Some(json!({"exit_code": 3})));

    // Exit code 0, a non-integer, no exit code: completed at once.
    for result in [
        json!({"exit_code": 0}),
        json!({"exit_code": "1"}),
        json!("ok"),
    ] {
        let job = alice
            .dispatch(&with_retry(json!({"limit": 3})))
            .await
            .unwrap();
        let l = take(&r).await;
        let done = r.complete(job.id, l.epoch, result.clone()).await.unwrap();
        assert_eq!(done.state, "completed", "{result}");
        assert_eq!(done.retries, 0);
    }

    // A reason the policy does not name settles at once.
    let job = alice
        .dispatch(&with_retry(json!({"limit": 3, "on": ["exit_code"]})))
        .await
        .unwrap();
    let l = take(&r).await;
    let failed = r.fail(job.id, l.epoch, "cannot").await.unwrap();
    assert_eq!(
        (failed.state.to_string(), failed.retries),
        ("failed".to_owned(), 0)
    );
}

#[tokio::test]
async fn max_attempts_lapses_within_one_try_retry_on_lease_lost() {
    let app = TestApp::spawn_with(1, |c| c.lease_ttl_ms = 300).await;
    let alice = app.operator("acme", "alice", false).await;
    let (_, r) = pair(&alice, Tier::Personal, &[], 1).await;
    let mut d = with_retry(json!({"limit": 1, "on": ["lease_lost"]}));
    d.max_attempts = Some(2);
    let job = alice.dispatch(&d).await.unwrap();
    // Two lapses in the first try, then a retry: the attempts start again.
    let mut attempts = Vec::new();
    for _ in 0..4 {
        let l = eventually(Duration::from_secs(20), "a delivery", || async {
            lease(&r, 1000, 1).await.into_iter().next()
        })
        .await;
        attempts.push(l.attempt);
    }
    assert_eq!(attempts, [1, 2, 1, 2]);
    let failed = alice.wait_job(job.id, 20_000).await.unwrap();
    assert_eq!(failed.state, "failed");
    assert_eq!(failed.error.as_ref().unwrap()["reason"], "lease_lost");
    assert_eq!(failed.retries, 1);
    let retried: Vec<Value> = states(&alice, job.id)
        .await
        .into_iter()
        .filter(|s| s["reason"] == "retry")
        .collect();
    assert_eq!(retried.len(), 1, "{retried:?}");
    assert_eq!(retried[0]["after"], "lease_lost");
    assert_eq!(retried[0]["attempt"], 1);
}

#[tokio::test]
async fn a_delayed_retry_is_not_leasable_before_not_before_and_is_leased_after() {
    let app = TestApp::spawn().await;
    let alice = app.operator("acme", "alice", false).await;
    let (_, r) = pair(&alice, Tier::Personal, &[], 1).await;

    // An hour's delay: a lease finds nothing, and the job shows when it may go.
    let slow = alice
        .dispatch(&with_retry(json!({"limit": 1, "delay_ms": 3_600_000})))
        .await
        .unwrap();
    let l = take(&r).await;
    let parked = r.fail(slow.id, l.epoch, "flaky").await.unwrap();
    assert_eq!(parked.state, "parked");
    let not_before = parked.not_before.expect("waiting for its delay");
    assert!(not_before > parked.created_at);
    assert!(
        lease(&r, 300, 1).await.is_empty(),
        "leased before not_before"
    );

    // A short delay: a waiting runner is woken for it once it passes.
    let quick = alice
        .dispatch(&with_retry(json!({"limit": 1, "delay_ms": 200})))
        .await
        .unwrap();
    let l = take(&r).await;
    assert_eq!(l.id, quick.id);
    let parked = r.fail(quick.id, l.epoch, "flaky").await.unwrap();
    assert!(parked.not_before.is_some());
    let again = take_within(&r, 10_000).await;
    assert_eq!((again.id, again.epoch), (quick.id, l.epoch + 2));
    let leased = alice.job(quick.id).await.unwrap();
    assert_eq!(leased.not_before, None, "no longer waiting");
    // The hour-delayed job is still there, still waiting.
    let slow_now = alice.job(slow.id).await.unwrap();
    assert_eq!(slow_now.state, "parked");
    assert_eq!(slow_now.not_before, Some(not_before));
}

/// v1.3 ("Outcome"): a job leased again has `not_before` null, whoever clears it first. The
/// sweeper, which clears a passed delay, is held off here, so the lease itself must.
#[tokio::test]
async fn a_retried_job_leased_after_its_delay_has_no_not_before() {
    let app = TestApp::spawn_with(1, |c| c.sweep_interval_ms = 600_000).await;
    let alice = app.operator("acme", "alice", false).await;
    let (_, r) = pair(&alice, Tier::Personal, &[], 1).await;
    let job = alice
        .dispatch(&with_retry(json!({"limit": 1, "delay_ms": 100})))
        .await
        .unwrap();
    let l = take(&r).await;
    let parked = r.fail(job.id, l.epoch, "flaky").await.unwrap();
    assert!(parked.not_before.is_some(), "waiting for its delay");
    let again = eventually(Duration::from_secs(20), "the retry leased", || async {
        lease(&r, 0, 1).await.pop()
    })
    .await;
    assert_eq!((again.id, again.epoch), (job.id, l.epoch + 2));
    let leased = alice.job(job.id).await.unwrap();
    assert_eq!(leased.state, "leased");
    assert_eq!(leased.not_before, None, "a leased job waits for nothing");
}

/// One long poll of `wait_ms` that must take a job.
async fn take_within(runner: &Client, wait_ms: i64) -> wire::LeasedJob {
    let mut got = lease(runner, wait_ms, 1).await;
    assert_eq!(got.len(), 1, "a job within {wait_ms} ms");
    got.remove(0)
}

/// The claims from remembered places (the dispatcher's places, docs/design.md "Where a claim starts") start at the first parked job they saw,
/// delayed or not: a job whose delay passes later is leased, for every claim shape.
#[tokio::test]
async fn a_claim_from_a_remembered_place_takes_a_delayed_retry_once_its_delay_passes() {
    for (capabilities, requires) in [
        (&[][..], &[][..]),
        (&["linux"][..], &[][..]),
        (&["linux"][..], &["linux"][..]),
    ] {
        let app = TestApp::spawn_with(1, |c| {
            c.claim_places_age = 0;
            c.claim_full_walk_ms = 3_600_000;
        })
        .await;
        let alice = app.operator("acme", "alice", false).await;
        let (_, r) = pair(&alice, Tier::Personal, capabilities, 4).await;
        let dispatch = |retry: Option<Value>| wire::Dispatch {
            retry,
            required_capabilities: (!requires.is_empty())
                .then(|| requires.iter().map(|c| (*c).to_owned()).collect()),
            ..wire::Dispatch::new(personal(), json!(null))
        };
        let first = alice
            .dispatch(&dispatch(Some(json!({"limit": 1, "delay_ms": 1000}))))
            .await
            .unwrap();
        let l = take(&r).await;
        assert_eq!(l.id, first.id);
        r.fail(first.id, l.epoch, "flaky").await.unwrap();
        // Jobs after it are dispatched while it waits, and each claim remembers a place.
        let mut want = vec![first.id];
        let mut got = Vec::new();
        for _ in 0..2 {
            want.push(alice.dispatch(&dispatch(None)).await.unwrap().id);
            got.push(take(&r).await.id);
        }
        got.push(take_within(&r, 10_000).await.id);
        want.sort();
        got.sort();
        assert_eq!(got, want, "{capabilities:?} {requires:?}");
    }
}

#[tokio::test]
async fn a_retry_policy_is_validated_and_400_names_it() {
    let app = TestApp::spawn().await;
    let alice = app.operator("acme", "alice", false).await;
    for (policy, field) in [
        (json!("yes"), "retry"),
        (json!({}), "retry.limit"),
        (json!({"limit": 11}), "retry.limit"),
        (json!({"limit": -1}), "retry.limit"),
        (json!({"limit": 1.5}), "retry.limit"),
        (json!({"limit": 1, "delay_ms": 3_600_001}), "retry.delay_ms"),
        (json!({"limit": 1, "delay_ms": -1}), "retry.delay_ms"),
        (json!({"limit": 1, "on": ["timeout"]}), "retry.on"),
        (json!({"limit": 1, "on": "exit_code"}), "retry.on"),
    ] {
        let body = json!({"target": {"pool": "personal"}, "payload": null, "retry": policy});
        let (code, message) = refused(&alice, Method::POST, "/v1/jobs", body.clone()).await;
        assert_eq!(code, "bad_request", "{policy}");
        assert!(message.starts_with(field), "{policy}: {message}");
        let batch = json!({"jobs": [{"target": {"pool": "personal"}, "payload": 1}, body]});
        let (code, message) = refused(&alice, Method::POST, "/v1/jobs/batch", batch).await;
        assert_eq!(code, "bad_request");
        assert!(
            message.starts_with(&format!("jobs[1].{field}")),
            "{policy}: {message}"
        );
    }
    // The bounds themselves are fine, and a batch stores each item's policy.
    let jobs = alice
        .dispatch_batch(vec![
            wire::BatchItem {
                dispatch: with_retry(json!({"limit": 10, "delay_ms": 3_600_000, "on": []})),
                idempotency_key: None,
            },
            wire::BatchItem {
                dispatch: with_retry(json!({"limit": 0})),
                idempotency_key: None,
            },
        ])
        .await
        .unwrap();
    let p = jobs[0].retry.as_ref().unwrap();
    assert_eq!((p.limit, p.delay_ms, p.on.len()), (10, 3_600_000, 0));
    assert_eq!(jobs[1].retry.as_ref().unwrap().limit, 0);
    assert_eq!(alice.job(jobs[1].id).await.unwrap().retry, jobs[1].retry);
}

#[tokio::test]
async fn the_retry_call_reparks_settled_jobs_and_answers_a_parked_one_unchanged() {
    let app = TestApp::spawn().await;
    let alice = app.operator("acme", "alice", false).await;
    let bob = app.operator("acme", "bob", false).await;
    let eve = app.operator("other", "eve", false).await;
    let (_, r) = pair(&alice, Tier::Personal, &[], 1).await;

    let job = alice
        .dispatch(&wire::Dispatch::new(personal(), json!(null)))
        .await
        .unwrap();
    // Parked: unchanged.
    let same = alice.retry_job(job.id, None).await.unwrap();
    assert_eq!(
        (same.state.to_string(), same.epoch, same.retries),
        ("parked".to_owned(), 0, 0)
    );
    // Another workspace: 404; a malformed id: 400.
    assert_eq!(code(eve.retry_job(job.id, None).await), "not_found");
    assert_eq!(
        code(alice.retry_job(Uuid::now_v7(), None).await),
        "not_found"
    );
    let (c, _) = refused(&alice, Method::POST, "/v1/jobs/nope/retry", json!({})).await;
    assert_eq!(c, "bad_request");

    let l = take(&r).await;
    let done = r
        .complete(job.id, l.epoch, json!({"exit_code": 0}))
        .await
        .unwrap();
    assert_eq!(done.state, "completed");
    // Any member of the workspace may retry it.
    let again = bob.retry_job(job.id, None).await.unwrap();
    assert_eq!(again.state, "parked");
    assert_eq!(again.epoch, done.epoch + 1);
    assert_eq!((again.retries, again.attempts), (1, 0));
    assert_eq!(
        (
            again.result.clone(),
            again.finished_at,
            again.provenance.clone()
        ),
        (None, None, None)
    );
    let last = states(&alice, job.id).await.pop().unwrap();
    assert_eq!(
        (&last["reason"], &last["after"], &last["attempt"]),
        (&json!("retry"), &json!("retry_call"), &json!(1))
    );
    // The settled attempt's runner is fenced out; the new attempt runs.
    assert_eq!(
        code(r.complete(job.id, l.epoch, json!("late")).await),
        "lease_superseded"
    );
    let l2 = take(&r).await;
    assert_eq!(l2.epoch, again.epoch + 1);
    r.fail(l2.id, l2.epoch, "broken").await.unwrap();

    // Failed, cancelled and rejected jobs are re-parked too.
    let failed = alice.job(job.id).await.unwrap();
    assert_eq!(failed.state, "failed");
    assert_eq!(alice.retry_job(job.id, None).await.unwrap().state, "parked");
    let cancelled = alice.cancel(job.id).await.unwrap();
    assert_eq!(cancelled.state, "cancelled");
    let back = alice.retry_job(job.id, None).await.unwrap();
    assert_eq!(
        (back.state.to_string(), back.retries, back.error),
        ("parked".to_owned(), 3, None)
    );
}

#[tokio::test]
async fn the_retry_call_honours_its_idempotency_key() {
    let app = TestApp::spawn().await;
    let alice = app.operator("acme", "alice", false).await;
    let job = alice
        .dispatch(&wire::Dispatch::new(personal(), json!(null)))
        .await
        .unwrap();
    alice.cancel(job.id).await.unwrap();
    let first = alice.retry_job(job.id, Some("k1")).await.unwrap();
    assert_eq!(
        (first.state.to_string(), first.retries),
        ("parked".to_owned(), 1)
    );
    alice.cancel(job.id).await.unwrap();
    // The same key again: the job as it is, nothing retried.
    let repeat = alice.retry_job(job.id, Some("k1")).await.unwrap();
    assert_eq!(
        (repeat.state.to_string(), repeat.retries),
        ("cancelled".to_owned(), 1)
    );
    // Another key retries.
    let second = alice.retry_job(job.id, Some("k2")).await.unwrap();
    assert_eq!(
        (second.state.to_string(), second.retries),
        ("parked".to_owned(), 2)
    );
    // Another workspace's caller learns nothing from a key.
    let eve = app.operator("other", "eve", false).await;
    assert_eq!(code(eve.retry_job(job.id, Some("k1")).await), "not_found");
}

#[tokio::test]
async fn retrying_a_leased_job_supersedes_its_lease() {
    let app = TestApp::spawn().await;
    let alice = app.operator("acme", "alice", false).await;
    let (_, r) = pair(&alice, Tier::Personal, &[], 1).await;
    let job = alice
        .dispatch(&wire::Dispatch::new(personal(), json!(null)))
        .await
        .unwrap();
    let l = take(&r).await;
    let retried = alice.retry_job(job.id, None).await.unwrap();
    assert_eq!(
        (retried.state.to_string(), retried.epoch),
        ("parked".to_owned(), l.epoch + 1)
    );
    for late in [
        code(r.complete(job.id, l.epoch, json!("late")).await),
        code(r.fail(job.id, l.epoch, "late").await),
        code(r.heartbeat_job(job.id, l.epoch).await),
    ] {
        assert_eq!(late, "lease_superseded");
    }
    let beat = r
        .runner_heartbeat(&wire::RunnerHeartbeat {
            running: Some(vec![wire::Running {
                id: job.id,
                epoch: l.epoch,
            }]),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(beat.cancelled, [job.id]);
    let state = states(&alice, job.id).await.pop().unwrap();
    assert_eq!(state["after"], "retry_call");
    // The slot is free again: the new attempt is leased.
    let l2 = take(&r).await;
    assert_eq!((l2.id, l2.epoch), (job.id, l.epoch + 2));
}

/// A real runner running a long command: the retry call supersedes it, the runner kills the
/// command's process group, its late report is refused, and the new attempt runs.
#[tokio::test]
async fn a_real_runner_kills_a_superseded_attempt_and_runs_the_new_one() {
    // Short leases: the runner heartbeats every second and hears of it quickly.
    let app = TestApp::spawn_with(1, |c| c.lease_ttl_ms = 3000).await;
    let rig = RunnerRig::new(app, "retry-supersede").await;
    let (config, _runner) = rig.start_runner(&[], &["--unconfined"]).await;
    let flags = TempDir::new("retry-flag");
    let flag = flags.join("second");
    let marker = marker();
    let script = format!(
        "if [ -e {flag} ]; then echo second; else sleep {marker}; fi",
        flag = flag.display()
    );
    let id = rig.submit(&["--", "sh", "-c", &script]).await;
    let pgid = eventually(LONG, "the first attempt runs", || async {
        let p = processes_with(&marker);
        (p.iter().filter(|(_, s, _)| *s != 'Z').count() >= 2).then(|| p[0].2)
    })
    .await;
    let first = rig.alice.job(id).await.unwrap();
    assert_eq!(first.state, "leased");

    std::fs::write(&flag, b"").unwrap();
    let retried = crate::procs::cli(
        &rig.url(),
        &rig.key,
        &["job", "retry", &id.to_string()],
        LONG,
    )
    .await;
    assert_eq!(retried.code, Some(0), "{retried:?}");
    assert!(retried.stdout.contains("parked again"), "{retried:?}");
    eventually(
        LONG,
        "the superseded attempt's process group is gone",
        || async { (live_in_group(pgid) == 0).then_some(()) },
    )
    .await;
    // The first attempt's report, late, is refused.
    let token = saved(&config)["token"].as_str().unwrap().to_owned();
    let holder = Client::new(rig.url(), Some(token));
    assert_eq!(
        code(
            holder
                .complete(id, first.epoch, json!({"exit_code": 0}))
                .await
        ),
        "lease_superseded"
    );
    let done = eventually(LONG, "the new attempt completes", || async {
        let j = rig.alice.job(id).await.ok()?;
        (j.state == "completed").then_some(j)
    })
    .await;
    assert_eq!(done.retries, 1);
    assert_eq!(done.epoch, first.epoch + 2);
    assert_eq!(done.result.as_ref().unwrap()["exit_code"], 0);
    let shown =
        crate::procs::cli(&rig.url(), &rig.key, &["job", "get", &id.to_string()], LONG).await;
    assert!(shown.stdout.contains("retries"), "{shown:?}");
}

/// `job submit --retry` sends the policy.
#[tokio::test]
async fn job_submit_sends_the_retry_flags() {
    let app = TestApp::spawn().await;
    let rig = RunnerRig::new(app, "retry-cli").await;
    let id = rig
        .submit(&[
            "--retry",
            "2",
            "--retry-on",
            "exit_code,lease_lost",
            "--retry-delay",
            "5s",
            "--",
            "true",
        ])
        .await;
    let job = rig.alice.job(id).await.unwrap();
    let p = job.retry.unwrap();
    assert_eq!(
        (p.limit, p.on, p.delay_ms),
        (
            2,
            vec!["exit_code".to_owned(), "lease_lost".to_owned()],
            5000
        )
    );
}
