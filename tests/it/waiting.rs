//! Why a job waits (contract v1.4, issue 56 row 4): the Job view's `waiting`, over HTTP on
//! PostgreSQL.
//!
//! Invariants defended: `GET /v1/jobs/{id}` and the dispatch answer say
//! `no_matching_runner` while no runner of the job's target advertises what it requires (and
//! the CLI says so at dispatch), `no_runner_online` while the fitting ones are absent,
//! `all_busy` while every slot of the present ones is held, `not_before` during a retry's
//! delay, and null when a fitting runner has a free slot or the job is not parked; a batch
//! answer judges each job's class; lists leave it null.

use leasehold::wire;
use serde_json::json;

use crate::procs::{cli, LONG};
use crate::support::{lease, pair, personal, TestApp};

fn needing(caps: &[&str]) -> wire::Dispatch {
    let mut d = wire::Dispatch::new(personal(), json!({"argv": ["true"]}));
    d.required_capabilities = Some(caps.iter().map(|c| c.to_string()).collect());
    d
}

fn waiting(job: &wire::Job) -> Option<&str> {
    job.waiting.as_deref()
}

#[tokio::test]
async fn a_parked_job_says_why_it_waits() {
    let app = TestApp::spawn().await;
    let alice = app.operator("acme", "alice", false).await;

    let gpu = alice.dispatch(&needing(&["gpu"])).await.unwrap();
    assert_eq!(
        waiting(&gpu),
        Some("no_matching_runner"),
        "the dispatch answer"
    );
    let got = alice.job(gpu.id).await.unwrap();
    assert_eq!(waiting(&got), Some("no_matching_runner"));

    // A runner advertising gpu, paired and never seen: it would fit, none is present.
    let (_r, runner) = pair(&alice, wire::Tier::Personal, &["gpu"], 1).await;
    assert_eq!(
        waiting(&alice.job(gpu.id).await.unwrap()),
        Some("no_runner_online")
    );

    // Seen: the job is about to be leased.
    runner
        .runner_heartbeat(&wire::RunnerHeartbeat::default())
        .await
        .unwrap();
    assert_eq!(waiting(&alice.job(gpu.id).await.unwrap()), None);

    // Its one slot held: the next job waits for it.
    let leased = lease(&runner, 0, 1).await;
    assert_eq!(leased.len(), 1);
    let got = alice.job(gpu.id).await.unwrap();
    assert_eq!((got.state.as_str(), waiting(&got)), ("leased", None));
    let next = alice.dispatch(&needing(&["gpu"])).await.unwrap();
    assert_eq!(waiting(&next), Some("all_busy"));

    // A retry's delay.
    let mut d = needing(&["gpu"]);
    d.retry = Some(json!({"limit": 1, "on": ["runner_failed"], "delay_ms": 3_600_000}));
    let delayed = alice.dispatch(&d).await.unwrap();
    runner
        .fail(leased[0].id, leased[0].epoch, "done")
        .await
        .unwrap();
    let again = lease(&runner, 0, 1).await;
    assert_eq!(again.len(), 1);
    let first = if again[0].id == next.id {
        next.id
    } else {
        delayed.id
    };
    runner
        .fail(again[0].id, again[0].epoch, "boom")
        .await
        .unwrap();
    if first == delayed.id {
        let got = alice.job(delayed.id).await.unwrap();
        assert_eq!(
            (got.state.as_str(), waiting(&got)),
            ("parked", Some("not_before"))
        );
    } else {
        let third = lease(&runner, 0, 1).await;
        assert_eq!(third[0].id, delayed.id);
        runner
            .fail(third[0].id, third[0].epoch, "boom")
            .await
            .unwrap();
        let got = alice.job(delayed.id).await.unwrap();
        assert_eq!(
            (got.state.as_str(), waiting(&got)),
            ("parked", Some("not_before"))
        );
    }

    // Lists may leave it null; a settled job has none.
    let listed = alice.jobs(None, None, None).await.unwrap().jobs;
    assert!(listed.iter().all(|j| j.waiting.is_none()));
    let done = alice.job(gpu.id).await.unwrap();
    assert_eq!((done.state.as_str(), waiting(&done)), ("failed", None));
}

/// A batch answer says why each of its jobs waits, each class judged on its own in the one
/// statement that parks them all.
#[tokio::test]
async fn a_batch_answer_says_why_each_job_waits() {
    let app = TestApp::spawn().await;
    let alice = app.operator("acme", "alice", false).await;
    let (_r, runner) = pair(&alice, wire::Tier::Personal, &["gpu"], 1).await;
    runner
        .runner_heartbeat(&wire::RunnerHeartbeat::default())
        .await
        .unwrap();
    let items = [&["gpu"][..], &["arm64"], &["gpu"], &[]]
        .iter()
        .map(|caps| wire::BatchItem {
            dispatch: needing(caps),
            idempotency_key: None,
        })
        .collect();
    let jobs = alice.dispatch_batch(items).await.unwrap();
    let said: Vec<Option<&str>> = jobs.iter().map(waiting).collect();
    assert_eq!(said, [None, Some("no_matching_runner"), None, None]);

    // Its one slot held: the gpu class is busy, a class no runner has still unmatched.
    assert_eq!(lease(&runner, 0, 1).await.len(), 1);
    let items = [&["gpu"][..], &["arm64"]]
        .iter()
        .map(|caps| wire::BatchItem {
            dispatch: needing(caps),
            idempotency_key: None,
        })
        .collect();
    let jobs = alice.dispatch_batch(items).await.unwrap();
    let said: Vec<Option<&str>> = jobs.iter().map(waiting).collect();
    assert_eq!(said, [Some("all_busy"), Some("no_matching_runner")]);
}

/// The CLI warns at dispatch when no runner of the target can take the job, with or without
/// `--wait`, and `job get` shows why a job waits and what it requires.
#[tokio::test]
async fn the_cli_warns_at_dispatch_and_job_get_says_why_a_job_waits() {
    let app = TestApp::spawn().await;
    let key = app.key("acme", "alice", false).await;
    let url = app.url(0);
    let out = cli(
        &url,
        &key,
        &["job", "submit", "--require", "gpu", "--", "true"],
        LONG,
    )
    .await;
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(
        out.stderr.contains("no_matching_runner") && out.stderr.contains("gpu"),
        "warns at dispatch: {out:?}"
    );
    let id = out.stdout.trim().to_owned();
    let out = cli(
        &url,
        &key,
        &[
            "job",
            "submit",
            "--count",
            "3",
            "--pool",
            "workspace",
            "--",
            "true",
        ],
        LONG,
    )
    .await;
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(
        out.stderr.contains("no_matching_runner"),
        "a batch warns too: {out:?}"
    );
    let got = cli(&url, &key, &["job", "get", &id], LONG).await;
    assert!(got.stdout.contains("no_matching_runner"), "{got:?}");
    assert!(got.stdout.contains("gpu"), "its requirements: {got:?}");
}
