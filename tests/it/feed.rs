//! The workspace feed and who did what (contract v1.4, "The workspace feed", "Who").
//!
//! Invariants defended: a reader that follows `next` sees every event of its kinds exactly
//! once and never skips one whose transaction committed after a later-numbered one (forced
//! here with two transactions on raw connections), and one job's events keep their seq order
//! when transaction ids do not; a cursor works on any replica and after a restart; SIGTERM
//! ends an open stream; a cursor of another workspace or not made by the server is
//! `400 bad_request` naming `after`; one below what retention deleted is `410 gone` naming the
//! oldest cursor, which then works; `wait_ms` answers as soon as an event comes; server-sent
//! events carry `id:` cursors, resume from `Last-Event-ID`, keep the connection alive with
//! comment lines and end after `LEASEHOLD_MAX_WAIT_MS`; the Job view names who dispatched or
//! last retried it, and a retry's `state` event names who.

use std::collections::HashSet;
use std::time::Duration;

use leasehold::client::Client;
use leasehold::wire::{self, Tier};
use reqwest::Method;
use serde_json::{json, Value};
use uuid::Uuid;

use crate::support::{connect, dispatch, eventually, lease, pair, personal, TestApp};

/// Every event of `kinds` after `after`, following `next` until a page is empty. The first
/// page waits for an event (another test's open transaction can hold the cluster's snapshot
/// horizon back for a moment: docs/contract-notes.md, "The feed's order").
async fn drain(
    client: &Client,
    after: Option<String>,
    kinds: &[String],
) -> (Vec<wire::FeedEvent>, String) {
    let mut all = Vec::new();
    let mut after = after;
    let mut wait = 5_000;
    loop {
        let page = client
            .feed(after.as_deref(), kinds, Some(3), wait)
            .await
            .unwrap();
        wait = 0;
        let empty = page.events.is_empty();
        all.extend(page.events);
        after = Some(page.next.clone());
        if empty {
            return (all, page.next);
        }
    }
}

/// The error (status, code, message) of a raw GET.
async fn refused(client: &Client, path: &str) -> (u16, String, String) {
    match client.call::<(), Value>(Method::GET, path, None, &[]).await {
        Ok(v) => panic!("{path}: expected an error, got {v:?}"),
        Err(leasehold::client::ClientError::Api {
            status,
            code,
            message,
            ..
        }) => (status.as_u16(), code, message),
        Err(e) => panic!("{path}: {e}"),
    }
}

#[tokio::test]
async fn feed_never_skips_an_event_committed_out_of_order() {
    let app = TestApp::spawn().await;
    let alice = app.operator("acme", "alice", false).await;
    let a = dispatch(&alice, personal(), json!(null)).await;
    let b = dispatch(&alice, personal(), json!(null)).await;
    let (seen, cursor) = drain(&alice, None, &[]).await;
    assert_eq!(seen.len(), 2, "the two dispatches' parked events");

    // Two writers: the first takes its transaction id, the second takes a later one and
    // commits first. A reader between the two commits must not move past the first's event.
    let first = connect(&app.database_url).await;
    let second = connect(&app.database_url).await;
    let insert = "INSERT INTO job_events (job_id, seq, kind, data) \
                  VALUES ($1, 1000, 'state', '{\"state\":\"parked\",\"forced\":true}')";
    first.batch_execute("BEGIN").await.unwrap();
    first.execute(insert, &[&a.id]).await.unwrap();
    second.batch_execute("BEGIN").await.unwrap();
    second.execute(insert, &[&b.id]).await.unwrap();
    second.batch_execute("COMMIT").await.unwrap();

    let page = alice.feed(Some(&cursor), &[], None, 0).await.unwrap();
    assert!(
        page.events.is_empty(),
        "nothing is answered past a transaction still open: {:?}",
        page.events
    );
    let cursor = page.next;
    first.batch_execute("COMMIT").await.unwrap();

    let (after, _) = drain(&alice, Some(cursor), &[]).await;
    let got: Vec<(Uuid, i32)> = after.iter().map(|e| (e.job_id, e.seq)).collect();
    assert_eq!(
        got,
        vec![(a.id, 1000), (b.id, 1000)],
        "both forced events, once each, in transaction order"
    );
    let mut cursors = HashSet::new();
    for e in seen.iter().chain(after.iter()) {
        assert!(cursors.insert(e.cursor.clone()), "each event once");
    }
}

#[tokio::test]
async fn feed_pages_kinds_and_waits_for_the_next_event() {
    let app = TestApp::spawn().await;
    let alice = app.operator("acme", "alice", false).await;
    let job = dispatch(&alice, personal(), json!({"n": 1})).await;
    let page = alice.feed(None, &[], None, 5_000).await.unwrap();
    assert_eq!(page.events.len(), 1);
    let e = &page.events[0];
    assert_eq!((e.job_id, e.seq, e.kind.as_str()), (job.id, 1, "state"));
    assert_eq!(e.data["state"], "parked");
    assert_eq!(page.next, e.cursor);

    // An empty page keeps the cursor.
    let empty = alice.feed(Some(&page.next), &[], None, 0).await.unwrap();
    assert!(empty.events.is_empty());
    assert_eq!(empty.next, page.next);

    // A long poll answers when the lease comes.
    let (_, runner) = pair(&alice, Tier::Personal, &[], 1).await;
    let waiting = {
        let alice = alice.clone();
        let next = page.next.clone();
        tokio::spawn(async move { alice.feed(Some(&next), &[], None, 20_000).await.unwrap() })
    };
    let leased = lease(&runner, 5000, 1).await;
    assert_eq!(leased.len(), 1);
    let woke = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("the long poll answers once the job is leased")
        .unwrap();
    assert_eq!(woke.events[0].job_id, job.id);
    assert_eq!(woke.events[0].data["state"], "leased");

    // Output is opt-in by kind.
    runner
        .append_events(
            job.id,
            leased[0].epoch,
            vec![wire::NewEvent {
                kind: "stdout".into(),
                data: Some(json!({"line": "hello"})),
            }],
        )
        .await
        .unwrap();
    let (states, _) = drain(&alice, None, &[]).await;
    assert!(states.iter().all(|e| e.kind == "state"));
    let (both, _) = drain(&alice, None, &["state".into(), "stdout".into()]).await;
    assert_eq!(
        both.iter().map(|e| e.kind.as_str()).collect::<Vec<_>>(),
        ["state", "state", "stdout"]
    );

    // Validation.
    let (status, c, m) = refused(&alice, "/v1/events?limit=0").await;
    assert_eq!((status, c.as_str()), (400, "bad_request"));
    assert!(m.contains("limit"), "{m}");
    let (status, _, m) = refused(&alice, "/v1/events?kinds=NOPE").await;
    assert_eq!(status, 400);
    assert!(m.contains("kinds"), "{m}");
}

#[tokio::test]
async fn feed_cursors_are_bound_to_their_workspace() {
    let app = TestApp::spawn().await;
    let alice = app.operator("acme", "alice", false).await;
    let eve = app.operator("beta", "eve", false).await;
    dispatch(&alice, personal(), json!(null)).await;
    dispatch(&eve, personal(), json!(null)).await;
    let mine = alice.feed(None, &[], None, 5_000).await.unwrap();
    assert_eq!(mine.events.len(), 1, "only the workspace's own events");
    for path in [
        format!("/v1/events?after={}", mine.next),
        "/v1/events?after=garbage".to_owned(),
        "/v1/events?after=".to_owned(),
    ] {
        let (status, c, m) = refused(&eve, &path).await;
        assert_eq!((status, c.as_str()), (400, "bad_request"), "{path}");
        assert!(m.contains("after"), "{m}");
    }
}

#[tokio::test]
async fn a_cursor_works_on_every_replica() {
    let app = TestApp::spawn_with(2, |_| {}).await;
    let key = app.key("acme", "alice", false).await;
    let on = |i: usize| Client::new(app.url(i), Some(key.clone()));
    let first = dispatch(&on(0), personal(), json!(null)).await;
    let page = on(0).feed(None, &[], None, 5_000).await.unwrap();
    assert_eq!(page.events[0].job_id, first.id);
    let second = dispatch(&on(0), personal(), json!(null)).await;
    let next = on(1)
        .feed(Some(&page.next), &[], None, 5_000)
        .await
        .unwrap();
    assert_eq!(
        next.events.iter().map(|e| e.job_id).collect::<Vec<_>>(),
        [second.id]
    );
}

#[tokio::test]
async fn a_cursor_past_retention_is_gone_with_the_oldest_cursor() {
    let app = TestApp::spawn_with(1, |c| {
        c.retention_ms = Some(1);
        c.retention_interval_ms = 50;
    })
    .await;
    let alice = app.operator("acme", "alice", false).await;
    let job = dispatch(&alice, personal(), json!(null)).await;
    let first = alice.feed(None, &[], None, 5_000).await.unwrap().next;
    alice.cancel(job.id).await.unwrap();
    eventually(
        Duration::from_secs(20),
        "retention deletes the job",
        || async { alice.job(job.id).await.is_err().then_some(()) },
    )
    .await;
    let (status, c, message) = refused(&alice, &format!("/v1/events?after={first}")).await;
    assert_eq!((status, c.as_str()), (410, "gone"));
    let oldest = message.rsplit(' ').next().unwrap().to_owned();
    let page = alice.feed(Some(&oldest), &[], None, 0).await.unwrap();
    assert!(page.events.is_empty(), "the oldest cursor reads on");
    let later = dispatch(&alice, personal(), json!(null)).await;
    let page = alice.feed(Some(&oldest), &[], None, 5_000).await.unwrap();
    assert_eq!(page.events[0].job_id, later.id);
}

/// Read a server-sent event stream until `want` frames with an `id:` came; returns them
/// (id, data) and whether a comment line came.
async fn frames(resp: &mut reqwest::Response, want: usize) -> (Vec<(String, Value)>, bool) {
    let mut text = String::new();
    let mut out = Vec::new();
    let mut comment = false;
    while out.len() < want {
        let chunk = tokio::time::timeout(Duration::from_secs(10), resp.chunk())
            .await
            .expect("a frame within the deadline")
            .unwrap()
            .expect("the stream goes on");
        text.push_str(std::str::from_utf8(&chunk).unwrap());
        while let Some(end) = text.find("\n\n") {
            let frame: String = text.drain(..end + 2).collect();
            if frame.starts_with(':') {
                comment = true;
                continue;
            }
            let id = frame
                .lines()
                .find_map(|l| l.strip_prefix("id: "))
                .unwrap()
                .to_owned();
            let data = frame
                .lines()
                .find_map(|l| l.strip_prefix("data: "))
                .unwrap();
            out.push((id, serde_json::from_str(data).unwrap()));
        }
    }
    (out, comment)
}

#[tokio::test]
async fn feed_streams_server_sent_events_and_resumes() {
    let app = TestApp::spawn_with(1, |c| {
        c.max_wait_ms = 3_000;
        c.feed_keepalive_ms = 100;
    })
    .await;
    let key = app.key("acme", "alice", false).await;
    let alice = Client::new(app.url(0), Some(key.clone()));
    let http = reqwest::Client::new();
    let open = |last: Option<String>| {
        let mut req = http
            .get(format!("{}/v1/events", app.url(0)))
            .bearer_auth(&key)
            .header("accept", "text/event-stream");
        if let Some(l) = last {
            req = req.header("last-event-id", l);
        }
        req.send()
    };
    let mut stream = open(None).await.unwrap();
    assert_eq!(stream.status(), 200);
    assert_eq!(stream.headers()["content-type"], "text/event-stream");
    let one = dispatch(&alice, personal(), json!(null)).await;
    let (got, _) = frames(&mut stream, 1).await;
    assert_eq!(got[0].1["job_id"], json!(one.id));
    assert_eq!(got[0].1["cursor"], json!(got[0].0));
    drop(stream);

    let two = dispatch(&alice, personal(), json!(null)).await;
    let mut resumed = open(Some(got[0].0.clone())).await.unwrap();
    let (again, _) = frames(&mut resumed, 1).await;
    assert_eq!(
        again[0].1["job_id"],
        json!(two.id),
        "resumes after the last id seen"
    );
    // Quiet: comment lines keep it open, and it ends after LEASEHOLD_MAX_WAIT_MS.
    let rest = tokio::time::timeout(Duration::from_secs(15), resumed.text())
        .await
        .expect("the stream ends after LEASEHOLD_MAX_WAIT_MS")
        .unwrap();
    assert!(rest.contains(": keep-alive"), "{rest}");
}

#[tokio::test]
async fn who_dispatched_and_who_retried() {
    let app = TestApp::spawn().await;
    let alice = app.operator("acme", "alice", false).await;
    let bob = app.operator("acme", "bob", true).await;
    let job = dispatch(&alice, personal(), json!(null)).await;
    let by = job.dispatched_by.clone().expect("dispatched_by");
    assert_eq!((by.subject.as_str(), by.role.as_str()), ("alice", "member"));
    let raw: Value = alice
        .call::<(), Value>(Method::GET, &format!("/v1/jobs/{}", job.id), None, &[])
        .await
        .unwrap()
        .1;
    assert_eq!(
        raw["dispatched_by"],
        json!({"subject": "alice", "role": "member"})
    );

    alice.cancel(job.id).await.unwrap();
    let retried = bob.retry_job(job.id, None).await.unwrap();
    let by = retried.dispatched_by.expect("dispatched_by");
    assert_eq!((by.subject.as_str(), by.role.as_str()), ("bob", "admin"));
    let events = alice.events(job.id, 0, 0).await.unwrap().events;
    let retry = events
        .iter()
        .find(|e| e.data["reason"] == "retry")
        .expect("the retry's state event");
    assert_eq!(retry.data["by"], "bob");
}

/// `leasehold ARGS` against `server` with `key`; its standard output.
fn cli(server: &str, key: &str, args: &[&str]) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(args)
        .env("LEASEHOLD_SERVER", server)
        .env("LEASEHOLD_API_KEY", key)
        .output()
        .expect("leasehold runs");
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[tokio::test]
async fn the_cli_prints_a_line_per_event_and_manages_webhooks() {
    let app = TestApp::spawn_with(1, |c| c.webhook_allow_http = true).await;
    let key = app.key("acme", "ada", true).await;
    let alice = Client::new(app.url(0), Some(key.clone()));
    let job = dispatch(&alice, personal(), json!(null)).await;
    alice.cancel(job.id).await.unwrap();
    alice.feed(None, &[], None, 5_000).await.unwrap();
    let server = app.url(0);
    let (server, key2) = (server.clone(), key.clone());
    let out = tokio::task::spawn_blocking(move || cli(&server, &key2, &["events"]))
        .await
        .unwrap();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{out}");
    assert!(
        lines[0].contains(&job.id.to_string()) && lines[0].contains("parked reason=dispatched"),
        "{out}"
    );
    assert!(lines[1].contains("cancelled"), "{out}");

    let server = app.url(0);
    let out = tokio::task::spawn_blocking(move || {
        let made = cli(
            &server,
            &key,
            &[
                "webhooks",
                "set",
                "ci",
                "http://example.com/hook",
                "--states",
                "completed,failed",
            ],
        );
        let listed = cli(&server, &key, &["webhooks", "list"]);
        let removed = cli(&server, &key, &["webhooks", "rm", "ci"]);
        format!("{made}{listed}{removed}")
    })
    .await
    .unwrap();
    assert!(out.contains("whsec_"), "{out}");
    assert!(
        out.contains("ci") && out.contains("completed,failed") && out.contains("active"),
        "{out}"
    );
    assert!(out.contains("webhook ci deleted"), "{out}");
}

#[tokio::test]
async fn one_jobs_events_keep_their_order_when_transaction_ids_do_not() {
    let app = TestApp::spawn().await;
    let alice = app.operator("acme", "alice", false).await;
    let job = dispatch(&alice, personal(), json!(null)).await;
    let (_, cursor) = drain(&alice, None, &[]).await;
    // The earlier transaction id writes the job's later event.
    let early = connect(&app.database_url).await;
    let late = connect(&app.database_url).await;
    let insert = "INSERT INTO job_events (job_id, seq, kind, data) VALUES ($1, $2, 'state', '{}')";
    early
        .batch_execute("BEGIN; SELECT pg_current_xact_id()")
        .await
        .unwrap();
    late.execute(insert, &[&job.id, &1000i32]).await.unwrap();
    early.execute(insert, &[&job.id, &1001i32]).await.unwrap();
    early.batch_execute("COMMIT").await.unwrap();
    let (events, _) = drain(&alice, Some(cursor), &[]).await;
    assert_eq!(
        events.iter().map(|e| e.seq).collect::<Vec<_>>(),
        [1000, 1001]
    );
}

/// A reader's cursor outlives the replica that made it, and SIGTERM ends an open stream at
/// once (the client reconnects elsewhere with its Last-Event-ID).
#[tokio::test]
async fn a_cursor_survives_a_replica_restart_and_sigterm_ends_a_stream() {
    use crate::procs::{serve, TempDir};
    use nix::sys::signal::Signal;
    let app = TestApp::spawn_with(0, |_| {}).await;
    let dir = TempDir::new("feed-restart");
    let key = app.key("acme", "alice", false).await;
    let (mut first, url) = serve(&app.database_url, &dir, &[]).await;
    let alice = Client::new(url.clone(), Some(key.clone()));
    let one = dispatch(&alice, personal(), json!(null)).await;
    let page = alice.feed(None, &[], None, 5_000).await.unwrap();
    assert_eq!(page.events[0].job_id, one.id);

    let mut stream = reqwest::Client::new()
        .get(format!("{url}/v1/events?after={}", page.next))
        .bearer_auth(&key)
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), 200);
    stream
        .chunk()
        .await
        .unwrap()
        .expect("the stream's first comment");
    first.signal(Signal::SIGTERM);
    let rest = tokio::time::timeout(Duration::from_secs(10), async {
        while let Ok(Some(_)) = stream.chunk().await {}
    })
    .await;
    assert!(rest.is_ok(), "the stream ends at SIGTERM");
    assert!(first.exit(Duration::from_secs(15)).await.success());

    let (_second, url) = serve(&app.database_url, &dir, &[]).await;
    let alice = Client::new(url, Some(key));
    let two = dispatch(&alice, personal(), json!(null)).await;
    let next = alice
        .feed(Some(&page.next), &[], None, 5_000)
        .await
        .unwrap();
    assert_eq!(
        next.events.iter().map(|e| e.job_id).collect::<Vec<_>>(),
        [two.id]
    );
}
