//! The lease state machine: a parked job settles exactly once; the epoch fences every runner
//! call; lapsed leases are re-delivered with a higher epoch while heartbeated ones never are;
//! first terminal report wins; capacity holds under concurrent lease calls; concurrent claimers
//! get distinct jobs; named jobs are rejected on a capability mismatch, pool jobs only skipped.

use std::collections::HashSet;
use std::time::Duration;

use leasehold::client::Client;
use leasehold::domain::credentials::{self, Kind};
use leasehold::hub::sweeper::sweep_once;
use leasehold::store::claim::ClassClaim;
use leasehold::store::{Beat, Failure, Report};
use leasehold::wire::{self, Tier};
use serde_json::json;

use crate::support::{
    code, connect, dispatch, eventually, lease, pair, personal, to_runner, TestApp,
};

#[tokio::test]
async fn a_parked_job_settles_exactly_once() {
    let app = TestApp::spawn().await;
    let alice = app.operator("acme", "alice", false).await;
    let (runner, r) = pair(&alice, Tier::Personal, &["linux"], 1).await;
    let job = dispatch(&alice, personal(), json!({"argv": ["true"]})).await;
    assert_eq!(job.state, "parked");
    assert_eq!(job.epoch, 0);

    let leased = lease(&r, 1000, 1).await;
    assert_eq!(leased.len(), 1);
    let l = &leased[0];
    assert_eq!((l.id, l.epoch, l.attempt), (job.id, 1, 1));
    assert_eq!(l.heartbeat_interval_ms, l.lease_ttl_ms / 3);

    let done = r
        .complete(job.id, 1, json!({"exit_code": 0}))
        .await
        .unwrap();
    assert_eq!(done.state, "completed");
    assert_eq!(done.result, Some(json!({"exit_code": 0})));
    // Every later report is refused, whatever it is, and the job does not change.
    assert_eq!(
        code(r.complete(job.id, 1, json!({"exit_code": 1})).await),
        "job_terminal"
    );
    assert_eq!(code(r.fail(job.id, 1, "late").await), "job_terminal");
    assert_eq!(code(r.release(job.id, 1).await), "job_terminal");
    assert_eq!(code(r.heartbeat_job(job.id, 1).await), "job_terminal");
    let cancelled = alice.cancel(job.id).await.unwrap();
    assert_eq!(
        cancelled.state, "completed",
        "cancel returns a terminal job unchanged"
    );
    let now = alice.job(job.id).await.unwrap();
    assert_eq!(now.result, Some(json!({"exit_code": 0})));
    assert_eq!(now.provenance.unwrap()["runner"], json!(runner.id));

    let events = alice.events(job.id, 0, 0).await.unwrap();
    let states: Vec<_> = events
        .events
        .iter()
        .map(|e| e.data["state"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(states, ["parked", "leased", "completed"]);
    assert_eq!(
        events.events.iter().map(|e| e.seq).collect::<Vec<_>>(),
        [1, 2, 3]
    );
}

#[tokio::test]
async fn the_409_says_terminal_with_its_state_or_superseded_and_foreign_jobs_are_404() {
    let app = TestApp::spawn().await;
    let alice = app.operator("acme", "alice", false).await;
    let bob = app.operator("acme", "bob", false).await;
    let (_, r) = pair(&alice, Tier::Personal, &[], 1).await;
    let (_, bob_runner) = pair(&bob, Tier::Personal, &[], 1).await;
    let job = dispatch(&alice, personal(), json!(1)).await;
    let l = lease(&r, 1000, 1).await.remove(0);
    assert_eq!(
        code(r.heartbeat_job(job.id, l.epoch + 1).await),
        "lease_superseded"
    );
    assert_eq!(
        code(bob_runner.complete(job.id, l.epoch, json!(null)).await),
        "not_found"
    );
    alice.cancel(job.id).await.unwrap();
    match r.complete(job.id, l.epoch, json!(null)).await {
        Err(leasehold::client::ClientError::Api {
            status,
            code,
            state,
            ..
        }) => {
            assert_eq!(
                (status.as_u16(), code.as_str(), state.as_deref()),
                (409, "job_terminal", Some("cancelled"))
            );
        }
        other => panic!("expected 409 job_terminal, got {other:?}"),
    }
    assert_eq!(
        code(r.complete(uuid::Uuid::now_v7(), 1, json!(null)).await),
        "not_found"
    );
}

#[tokio::test]
async fn first_terminal_report_wins_among_concurrent_reports() {
    let app = TestApp::spawn().await;
    let alice = app.operator("acme", "alice", false).await;
    let (_, r) = pair(&alice, Tier::Personal, &[], 1).await;
    for round in 0..10 {
        let job = dispatch(&alice, personal(), json!(round)).await;
        let l = lease(&r, 1000, 1).await.remove(0);
        let (a, b, c) = tokio::join!(
            r.complete(job.id, l.epoch, json!("complete")),
            r.fail(job.id, l.epoch, "fail"),
            alice.cancel(job.id),
        );
        let final_job = alice.job(job.id).await.unwrap();
        let winners = [
            a.is_ok(),
            b.is_ok(),
            c.as_ref().is_ok_and(|j| j.state == "cancelled"),
        ];
        assert_eq!(
            winners.iter().filter(|w| **w).count(),
            1,
            "exactly one report wins: {winners:?}"
        );
        let expected =
            ["completed", "failed", "cancelled"][winners.iter().position(|w| *w).unwrap()];
        assert_eq!(final_job.state, expected);
        let terminal_events = alice
            .events(job.id, 0, 0)
            .await
            .unwrap()
            .events
            .into_iter()
            .filter(|e| {
                ["completed", "failed", "cancelled"]
                    .contains(&e.data["state"].as_str().unwrap_or(""))
            })
            .count();
        assert_eq!(terminal_events, 1);
    }
}

/// Two personal runners of alice's, each holding one lease (of jobs `1` and `2`).
async fn two_runners_each_leasing_one() -> (
    TestApp,
    Client,
    (Client, wire::LeasedJob),
    (Client, wire::LeasedJob),
) {
    let app = TestApp::spawn().await;
    let alice = app.operator("acme", "alice", false).await;
    let (_, r1) = pair(&alice, Tier::Personal, &[], 1).await;
    let (_, r2) = pair(&alice, Tier::Personal, &[], 1).await;
    let j1 = dispatch(&alice, personal(), json!(1)).await;
    let l1 = lease(&r1, 1000, 1).await.remove(0);
    let j2 = dispatch(&alice, personal(), json!(2)).await;
    let l2 = lease(&r2, 1000, 1).await.remove(0);
    assert_eq!((l1.id, l2.id), (j1.id, j2.id));
    (app, alice, (r1, l1), (r2, l2))
}

/// What the store matches a runner's report by: the hash of its token.
fn token_hash(c: &Client) -> Vec<u8> {
    credentials::parse(Kind::Runner, c.token().unwrap()).unwrap()
}

/// Reports coalesced by a replica are settled by one statement, and each is matched alone: a
/// report settles only its own runner's lease at its epoch, and of two reports of one job one
/// settles it and the other misses, as it would have after the first. Answers come back in the
/// reports' order.
#[tokio::test]
async fn coalesced_reports_are_each_fenced_alone() {
    let (app, alice, (r1, l1), (r2, l2)) = two_runners_each_leasing_one().await;
    let (j1, j2) = (&l1, &l2);
    let hash = token_hash;
    let report = |id, epoch, runner: &leasehold::client::Client, result| Report {
        id,
        epoch,
        token_hash: hash(runner),
        result: json!(result),
    };
    let answers = app
        .store
        .complete_jobs(&[
            report(j2.id, l2.epoch, &r2, "two"),
            report(j1.id, l1.epoch, &r2, "not r2's lease"),
            report(j1.id, l1.epoch + 1, &r1, "no such epoch"),
            report(j1.id, l1.epoch, &r1, "one"),
            report(j1.id, l1.epoch, &r1, "one again"),
        ])
        .await
        .unwrap();
    let settled: Vec<Option<uuid::Uuid>> =
        answers.iter().map(|a| a.as_ref().map(|j| j.id)).collect();
    assert_eq!(settled.len(), 5);
    assert_eq!(&settled[..3], &[Some(j2.id), None, None]);
    let won = match &settled[3..] {
        [Some(id), None] if *id == j1.id => "one",
        [None, Some(id)] if *id == j1.id => "one again",
        other => panic!("exactly one of the two reports of one job settles it: {other:?}"),
    };
    for (job, result) in [(j1.id, won), (j2.id, "two")] {
        let now = alice.job(job).await.unwrap();
        assert_eq!(now.state, "completed");
        assert_eq!(now.result, Some(json!(result)));
        let completed = alice
            .events(job, 0, 0)
            .await
            .unwrap()
            .events
            .into_iter()
            .filter(|e| e.data["state"] == "completed")
            .count();
        assert_eq!(completed, 1, "one state event per settled job");
    }
    // The losers' fences are reported as the single calls would report them.
    assert_eq!(
        code(r1.complete(j1.id, l1.epoch, json!("late")).await),
        "job_terminal"
    );
}

/// Fails and heartbeats coalesced by a replica (issue 48) are one statement each, every
/// element matched alone as its own call would be: only the lease its runner holds at that
/// epoch, answers in order, and of two fails of one job exactly one settles it.
#[tokio::test]
async fn coalesced_fails_and_heartbeats_are_each_fenced_alone() {
    let (app, alice, (r1, l1), (r2, l2)) = two_runners_each_leasing_one().await;
    let (j1, j2) = (&l1, &l2);
    let hash = token_hash;
    let beat = |id, epoch, runner: &leasehold::client::Client| Beat {
        id,
        epoch,
        token_hash: hash(runner),
        ttl_ms: 600_000,
    };
    let beats = app
        .store
        .extend_leases(&[
            beat(j1.id, l1.epoch, &r2),
            beat(j2.id, l2.epoch, &r2),
            beat(j1.id, l1.epoch + 1, &r1),
            beat(j1.id, l1.epoch, &r1),
        ])
        .await
        .unwrap();
    let extended: Vec<bool> = beats.iter().map(Option::is_some).collect();
    assert_eq!(extended, [false, true, false, true]);
    assert!(beats[1].unwrap() > l2.lease_expires_at, "ten minutes now");

    let fail = |id, epoch, runner: &leasehold::client::Client, message: &str| Failure {
        id,
        epoch,
        token_hash: hash(runner),
        message: message.into(),
    };
    let answers = app
        .store
        .fail_jobs(&[
            fail(j2.id, l2.epoch, &r1, "not r1's lease"),
            fail(j2.id, l2.epoch, &r2, "two"),
            fail(j1.id, l1.epoch, &r1, "one"),
            fail(j1.id, l1.epoch, &r1, "one again"),
        ])
        .await
        .unwrap();
    let failed: Vec<Option<uuid::Uuid>> =
        answers.iter().map(|a| a.as_ref().map(|j| j.id)).collect();
    assert_eq!(&failed[..2], &[None, Some(j2.id)]);
    assert!(
        matches!(&failed[2..], [Some(a), None] | [None, Some(a)] if *a == j1.id),
        "exactly one of the two fails of one job settles it: {failed:?}"
    );
    for job in [j1.id, j2.id] {
        let now = alice.job(job).await.unwrap();
        assert_eq!(now.state, "failed");
        assert_eq!(now.error.unwrap()["reason"], "runner_failed");
    }
    // A lost fence answers as the single call would.
    assert_eq!(
        code(r2.heartbeat_job(j2.id, l2.epoch).await),
        "job_terminal"
    );
}

#[tokio::test]
async fn a_lapsed_lease_is_redelivered_with_a_higher_epoch_and_the_old_holder_is_fenced_out() {
    let app = TestApp::spawn_with(1, |c| c.lease_ttl_ms = 600).await;
    let alice = app.operator("acme", "alice", false).await;
    let (_, old) = pair(&alice, Tier::Personal, &[], 1).await;
    let (new_runner, new) = pair(&alice, Tier::Personal, &[], 1).await;
    let job = dispatch(&alice, personal(), json!("work")).await;
    let first = lease(&old, 1000, 1).await.remove(0);
    assert_eq!(first.epoch, 1);
    // The old holder goes silent; the new runner's long-poll receives the re-delivery.
    let second = eventually(Duration::from_secs(10), "re-delivery", || async {
        lease(&new, 2000, 1).await.into_iter().next()
    })
    .await;
    assert_eq!((second.id, second.epoch, second.attempt), (job.id, 2, 2));
    assert_eq!(code(old.heartbeat_job(job.id, 1).await), "lease_superseded");
    assert_eq!(
        code(
            old.append_events(
                job.id,
                1,
                vec![wire::NewEvent {
                    kind: "stdout".into(),
                    data: Some(json!("x"))
                }]
            )
            .await
        ),
        "lease_superseded"
    );
    assert_eq!(
        code(old.complete(job.id, 1, json!("stale")).await),
        "lease_superseded"
    );
    let done = new.complete(job.id, 2, json!("fresh")).await.unwrap();
    assert_eq!(done.result, Some(json!("fresh")));
    assert_eq!(
        done.provenance.as_ref().unwrap()["runner"],
        json!(new_runner.id)
    );
    assert_eq!(done.provenance.as_ref().unwrap()["epoch"], json!(2));
}

#[tokio::test]
async fn an_actively_heartbeating_job_is_never_redelivered_or_timed_out() {
    let app = TestApp::spawn_with(1, |c| c.lease_ttl_ms = 1200).await;
    let alice = app.operator("acme", "alice", false).await;
    let (_, holder) = pair(&alice, Tier::Personal, &[], 1).await;
    let (_, other) = pair(&alice, Tier::Personal, &[], 1).await;
    let mut d = wire::Dispatch::new(personal(), json!(null));
    d.queue_timeout_ms = Some(1000);
    d.no_runner_timeout_ms = Some(1000);
    let job = alice.dispatch(&d).await.unwrap();
    let l = lease(&holder, 1000, 1).await.remove(0);
    // Heartbeat every 200 ms (a sixth of the TTL, margin for a loaded machine) for 3 s, two and a
    // half TTLs, while another runner keeps asking.
    let heartbeats = async {
        for _ in 0..15 {
            holder
                .heartbeat_job(job.id, l.epoch)
                .await
                .expect("heartbeat accepted");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    };
    let (_, stolen) = tokio::join!(heartbeats, lease(&other, 3000, 1));
    assert!(stolen.is_empty(), "a heartbeated job was re-delivered");
    let now = alice.job(job.id).await.unwrap();
    assert_eq!(
        (now.state.as_str(), now.epoch, now.attempts),
        ("leased", 1, 1)
    );
    holder.complete(job.id, l.epoch, json!("ok")).await.unwrap();
}

#[tokio::test]
async fn a_lease_lost_max_attempts_times_fails_the_job() {
    let app = TestApp::spawn_with(1, |c| c.lease_ttl_ms = 300).await;
    let alice = app.operator("acme", "alice", false).await;
    let (_, r) = pair(&alice, Tier::Personal, &[], 1).await;
    let mut d = wire::Dispatch::new(personal(), json!(null));
    d.max_attempts = Some(2);
    let job = alice.dispatch(&d).await.unwrap();
    assert_eq!(lease(&r, 1000, 1).await.len(), 1);
    let again = eventually(Duration::from_secs(10), "second delivery", || async {
        lease(&r, 1000, 1).await.into_iter().next()
    })
    .await;
    assert_eq!(again.attempt, 2);
    let failed = alice.wait_job(job.id, 10_000).await.unwrap();
    assert_eq!(failed.state, "failed");
    assert_eq!(failed.error.unwrap()["reason"], "lease_lost");
    assert_eq!(failed.attempts, 2);
}

#[tokio::test]
async fn release_reparks_without_failing_and_the_next_lease_bumps_the_epoch() {
    let app = TestApp::spawn().await;
    let alice = app.operator("acme", "alice", false).await;
    let (_, r) = pair(&alice, Tier::Personal, &[], 1).await;
    let mut d = wire::Dispatch::new(personal(), json!(null));
    d.max_attempts = Some(1);
    let job = alice.dispatch(&d).await.unwrap();
    for epoch in 1..=3 {
        let l = lease(&r, 1000, 1).await.remove(0);
        assert_eq!(l.epoch, epoch);
        let released = r.release(job.id, epoch).await.unwrap();
        assert_eq!(released.state, "parked");
        assert_eq!(
            code(r.complete(job.id, epoch, json!(null)).await),
            "lease_superseded"
        );
    }
}

#[tokio::test]
async fn a_named_job_is_rejected_on_a_capability_mismatch_and_a_pool_job_only_skipped() {
    let app = TestApp::spawn().await;
    let alice = app.operator("acme", "alice", false).await;
    let (plain, plain_client) = pair(&alice, Tier::Personal, &["linux"], 2).await;
    let (_, gpu_client) = pair(&alice, Tier::Personal, &["linux", "gpu"], 2).await;

    // Pre-gate: a named runner lacking a required capability is 422 at dispatch.
    let mut named = wire::Dispatch::new(to_runner(plain.id), json!("named"));
    named.required_capabilities = Some(vec!["gpu".into()]);
    assert_eq!(code(alice.dispatch(&named).await), "capability_mismatch");

    // A named job the runner could run when dispatched, then the runner drops the capability.
    named.required_capabilities = Some(vec!["linux".into()]);
    let named_job = alice.dispatch(&named).await.unwrap();
    let mut pool_job = wire::Dispatch::new(personal(), json!("pool"));
    pool_job.required_capabilities = Some(vec!["gpu".into()]);
    let pool_job = alice.dispatch(&pool_job).await.unwrap();

    let got = plain_client
        .lease(&wire::Lease {
            wait_ms: Some(0),
            max_jobs: Some(2),
            capabilities: Some(vec!["docker".into()]),
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(
        got.is_empty(),
        "no job ran in the wrong environment: {got:?}"
    );
    let rejected = alice.job(named_job.id).await.unwrap();
    assert_eq!(rejected.state, "rejected");
    assert_eq!(rejected.error.unwrap()["reason"], "capability_mismatch");
    assert_eq!(
        alice.job(pool_job.id).await.unwrap().state,
        "parked",
        "the pool job was only skipped"
    );

    let got = lease(&gpu_client, 1000, 2).await;
    assert_eq!(got.iter().map(|j| j.id).collect::<Vec<_>>(), [pool_job.id]);
}

/// A plain runner's lease (no capability, no target: the plain claim, issue 19) sends no
/// rejection unless its claim saw a named job it cannot run; then that job is rejected in the
/// same call, and the pool job behind it is still taken.
#[tokio::test]
async fn a_plain_runner_rejects_a_named_job_it_can_no_longer_run() {
    let app = TestApp::spawn().await;
    let alice = app.operator("acme", "alice", false).await;
    let (runner, client) = pair(&alice, Tier::Personal, &[], 2).await;
    // The replica learns the runner is plain from its first claim.
    assert!(lease(&client, 0, 2).await.is_empty());
    let named = dispatch(&alice, to_runner(runner.id), json!("named")).await;
    let pooled = dispatch(&alice, personal(), json!("pool")).await;
    // What a job dispatched to a personal runner can come to need after dispatch: a
    // workspace runner (here set directly; the API refuses it at dispatch).
    let db = crate::support::connect(&app.database_url).await;
    db.execute(
        "UPDATE jobs SET needs_workspace_runner = true WHERE id = $1",
        &[&named.id],
    )
    .await
    .unwrap();
    let got = lease(&client, 0, 2).await;
    assert_eq!(got.iter().map(|j| j.id).collect::<Vec<_>>(), [pooled.id]);
    let rejected = alice.job(named.id).await.unwrap();
    assert_eq!(rejected.state, "rejected");
    assert_eq!(rejected.error.unwrap()["reason"], "capability_mismatch");
    let events = alice.events(named.id, 0, 0).await.unwrap().events;
    assert_eq!(
        events.last().map(|e| e.data["state"].clone()),
        Some(json!("rejected"))
    );
}

#[tokio::test]
async fn named_jobs_come_first_then_priority_then_fifo() {
    let app = TestApp::spawn().await;
    let alice = app.operator("acme", "alice", false).await;
    let (runner, r) = pair(&alice, Tier::Personal, &[], 10).await;
    let mut ids = Vec::new();
    for (priority, named) in [(0, false), (5, false), (0, false), (-3, true), (5, false)] {
        let target = if named {
            to_runner(runner.id)
        } else {
            personal()
        };
        let mut d = wire::Dispatch::new(target, json!(priority));
        d.priority = Some(priority);
        ids.push(alice.dispatch(&d).await.unwrap().id);
    }
    let got: Vec<_> = lease(&r, 0, 10).await.into_iter().map(|j| j.id).collect();
    assert_eq!(got, [ids[3], ids[1], ids[4], ids[0], ids[2]]);
}

#[tokio::test]
async fn capacity_is_never_exceeded_even_by_concurrent_lease_calls_of_one_runner() {
    let app = TestApp::spawn().await;
    let alice = app.operator("acme", "alice", false).await;
    let (runner, r) = pair(&alice, Tier::Personal, &[], 3).await;
    for i in 0..20 {
        dispatch(&alice, personal(), json!(i)).await;
    }
    let calls = (0..10).map(|_| lease(&r, 0, 5));
    let got: Vec<_> = futures_util::future::join_all(calls)
        .await
        .into_iter()
        .flatten()
        .collect();
    assert_eq!(got.len(), 3, "capacity 3, got {}", got.len());
    // With no free slot a lease answers at once with no jobs, even with a long wait: here the
    // answer must come before a wait of the longest allowed could have ended.
    let wait_ms = leasehold::config::Config::new("").max_wait_ms;
    let answered = tokio::time::timeout(
        Duration::from_millis(wait_ms / 2),
        lease(&r, i64::try_from(wait_ms).unwrap(), 1),
    )
    .await
    .expect("a full runner's lease answers without waiting");
    assert!(answered.is_empty());
    let listed = alice.runners(Tier::Personal).await.unwrap();
    assert_eq!(
        listed
            .iter()
            .find(|x| x.id == runner.id)
            .unwrap()
            .active_leases,
        3
    );
}

#[tokio::test]
async fn many_concurrent_claimers_get_distinct_jobs() {
    let app = TestApp::spawn_with(1, |c| c.pool_size = 16).await;
    let alice = app.operator("acme", "alice", false).await;
    let mut runners = Vec::new();
    for _ in 0..8 {
        runners.push(pair(&alice, Tier::Personal, &[], 100).await.1);
    }
    let total = 300;
    for i in 0..total {
        dispatch(&alice, personal(), json!(i)).await;
    }
    let claimers = runners.iter().map(|r| async move {
        let mut mine = Vec::new();
        loop {
            let got = lease(r, 0, 7).await;
            if got.is_empty() {
                return mine;
            }
            mine.extend(got.into_iter().map(|j| j.id));
        }
    });
    let all: Vec<_> = futures_util::future::join_all(claimers)
        .await
        .into_iter()
        .flatten()
        .collect();
    let distinct: HashSet<_> = all.iter().collect();
    assert_eq!(all.len(), total, "every job leased");
    assert_eq!(distinct.len(), total, "no job leased twice");
}

/// Migration 0015: a claim counts its runner's leases from a bound its replica remembers from
/// the runner's last claim there. A lease held from long before (stamped an hour back) still
/// counts, on both replicas, however many claims have moved their bounds since.
#[tokio::test]
async fn a_lease_held_since_long_before_still_counts_against_capacity() {
    let app = TestApp::spawn_with(2, |_| {}).await;
    let alice = app.operator("acme", "alice", false).await;
    let (runner, r0) = pair(&alice, Tier::Personal, &[], 2).await;
    let r1 = Client::new(app.url(1), r0.token().map(str::to_owned));
    // Leased (through the test's own store, so that neither replica has seen the runner yet)
    // and stamped an hour back, as if held that long.
    let held = dispatch(&alice, personal(), json!("held")).await;
    let me = identity(&app, &r0).await;
    let first = app
        .store
        .tick(
            &[],
            &[ClassClaim {
                runners: vec![runner.id],
                wants: vec![1],
                since: vec![None],
                named: vec![true],
                ..ClassClaim::of(&me)
            }],
            600_000,
        )
        .await
        .unwrap();
    assert_eq!(first.claims[0].runners[0].claimed[0].id, held.id);
    connect(&app.database_url)
        .await
        .execute(
            "UPDATE jobs SET leased_at = leased_at - interval '1 hour' WHERE id = $1",
            &[&held.id],
        )
        .await
        .unwrap();
    // Claims on both replicas, each settling what it took, each moving its replica's bound.
    for i in 0..6 {
        let r = if i % 2 == 0 { &r0 } else { &r1 };
        dispatch(&alice, personal(), json!(i)).await;
        let got = lease(r, 0, 5).await;
        assert_eq!(got.len(), 1);
        r.complete(got[0].id, got[0].epoch, json!(i)).await.unwrap();
    }
    for i in 0..3 {
        dispatch(&alice, personal(), json!(i)).await;
    }
    assert_eq!(
        lease(&r0, 0, 5).await.len(),
        1,
        "capacity 2, one held an hour"
    );
    assert!(lease(&r1, 0, 5).await.is_empty(), "capacity 2, both held");
    let listed = alice.runners(Tier::Personal).await.unwrap();
    let active = listed.iter().find(|x| x.id == runner.id).unwrap();
    assert_eq!(active.active_leases, 2);
}

/// A remembered bound ahead of the database's clock (the clock stepped back, or a failover went
/// to a server whose clock is behind) is not trusted: the claim then counts every lease of the
/// runner, from the heads and from places alike.
#[tokio::test]
async fn a_bound_ahead_of_the_database_clock_counts_every_lease() {
    let app = TestApp::spawn().await;
    let alice = app.operator("acme", "alice", false).await;
    let (runner, r) = pair(&alice, Tier::Personal, &[], 2).await;
    dispatch(&alice, personal(), json!("held")).await;
    assert_eq!(lease(&r, 0, 1).await.len(), 1);
    for i in 0..4 {
        dispatch(&alice, personal(), json!(i)).await;
    }
    let me = identity(&app, &r).await;
    for places in [false, true] {
        let claim = ClassClaim {
            runners: vec![runner.id],
            wants: vec![5],
            since: vec![Some(chrono::Utc::now() + chrono::Duration::hours(1))],
            named: vec![true],
            places,
            ..ClassClaim::of(&me)
        };
        let out = app.store.tick(&[], &[claim], 60_000).await.unwrap();
        let mine = &out.claims[0].runners[0];
        assert_eq!(
            (mine.free, mine.claimed.len()),
            (1, 1),
            "places {places}: capacity 2, one held"
        );
        let job = &mine.claimed[0];
        r.complete(job.id, job.epoch, json!(places)).await.unwrap();
    }
}

/// While the oldest snapshot is old, the sweeps read only the checks that fell due since their
/// last sweep (hub::sweeper), and still read every due check at each whole walk: a lease whose
/// check fell due an hour ago is re-delivered, and a parked job whose no-runner check did is
/// rejected.
#[tokio::test]
async fn under_an_old_horizon_checks_due_long_ago_are_still_judged() {
    let app = TestApp::spawn_with(1, |c| {
        c.claim_places_age = 0;
        c.sweep_full_walk_ms = 1_000;
    })
    .await;
    let alice = app.operator("acme", "alice", false).await;
    let (_, r) = pair(&alice, Tier::Personal, &[], 1).await;
    let lapsed = dispatch(&alice, personal(), json!("lapsed")).await;
    let held = lease(&r, 0, 1).await.remove(0);
    assert_eq!(held.id, lapsed.id);
    // Bob has no runner.
    let bob = app.operator("acme", "bob", false).await;
    let mut d = wire::Dispatch::new(personal(), json!("nobody"));
    d.no_runner_timeout_ms = Some(600_000);
    let orphan = bob.dispatch(&d).await.unwrap();
    // Both checks an hour overdue: past any window, so only a whole walk reads them.
    let db = connect(&app.database_url).await;
    db.execute(
        "UPDATE jobs SET lease_expires_at = now() - interval '1 hour',
                         lease_check_at = now() - interval '1 hour' WHERE id = $1",
        &[&lapsed.id],
    )
    .await
    .unwrap();
    db.execute(
        "UPDATE jobs SET no_runner_check_at = now() - interval '1 hour',
                         created_at = now() - interval '1 hour' WHERE id = $1",
        &[&orphan.id],
    )
    .await
    .unwrap();
    eventually(Duration::from_secs(10), "re-delivered", || async {
        (alice.job(lapsed.id).await.unwrap().state == "parked").then_some(())
    })
    .await;
    let rejected = eventually(Duration::from_secs(10), "rejected", || async {
        let job = bob.job(orphan.id).await.unwrap();
        (job.state == "rejected").then_some(job)
    })
    .await;
    assert_eq!(rejected.error.unwrap()["reason"], "no_runner");
}

/// A sweep goes on while its batches come back full counting every lease it judged, not only
/// the ones it moved: a full batch of leases whose holders kept heartbeating (their checks only
/// move to their expiry) does not hide a lapsed lease due after them until the next tick.
#[tokio::test]
async fn a_full_batch_of_heartbeating_leases_does_not_end_a_sweep_early() {
    let app = TestApp::spawn_with(1, |c| c.sweep_interval_ms = 3_600_000).await;
    let alice = app.operator("acme", "alice", false).await;
    let (runner, _) = pair(&alice, Tier::Personal, &[], 1).await;
    let db = connect(&app.database_url).await;
    // 500 leases (a whole batch) checked a minute ago whose holder kept them alive, then one
    // that lapsed, due after them.
    db.execute(
        "INSERT INTO jobs (id, workspace, owner, pool, state, kind, payload, max_attempts,
                           no_runner_timeout_ms, no_runner_check_at, leased_by, leased_at,
                           lease_expires_at, lease_check_at, epoch, attempts)
         SELECT gen_random_uuid(), r.workspace, r.owner, 'personal', 'leased', 'command', '{}',
                3, 300000, now() + interval '5 minutes', r.id, now(),
                CASE WHEN g <= 500 THEN now() + interval '10 minutes'
                     ELSE now() - interval '1 second' END,
                CASE WHEN g <= 500 THEN now() - interval '1 minute'
                     ELSE now() - interval '1 second' END,
                1, 1
           FROM runners r, generate_series(1, 501) g
          WHERE r.id = $1",
        &[&runner.id],
    )
    .await
    .unwrap();
    sweep_once(&app.replicas[0].hub).await.unwrap();
    let states: Vec<(String, i64)> = db
        .query(
            "SELECT state, count(*) FROM jobs WHERE leased_by IS NOT NULL OR state = 'parked'
              GROUP BY state ORDER BY state",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(
        states,
        [("leased".to_owned(), 500), ("parked".to_owned(), 1)],
        "the lapsed lease re-delivered in the same sweep"
    );
    let still_due: i64 = db
        .query_one(
            "SELECT count(*) FROM jobs WHERE state = 'leased' AND lease_check_at <= now()",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        still_due, 0,
        "every heartbeating lease's check moved to its expiry"
    );
}

/// The runner behind a client's token, as a lease call finds it (its class).
async fn identity(app: &TestApp, r: &Client) -> leasehold::store::records::LeaseIdentity {
    let hash = credentials::parse(Kind::Runner, r.token().unwrap()).unwrap();
    app.store.runner_for_lease(&hash).await.unwrap().unwrap()
}
