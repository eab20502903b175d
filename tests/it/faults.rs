//! Failures the service must ride through, on the test's own private PostgreSQL and its own
//! server processes: a database restart (readiness drops and returns, parked jobs survive, a
//! waiting runner gets a new job within seconds; an authenticated call meanwhile is 503, never
//! 401), kill -9 of a replica during a long-poll and during a lease (the runner carries on
//! through another replica at the same epoch), SIGTERM (open long-polls answered at once,
//! exit 0 well inside 10 s), and a child replica whose parent is killed (it stops by itself).

use std::time::{Duration, Instant};

use leasehold::client::Client;
use leasehold::wire::{self, Tier};
use serde_json::json;

use crate::support::{
    dispatch, eventually, key_in, lease, pair, personal, private_pg, readiness, serve_process,
    start_replica, test_config, waiters, workspace_pool, TestApp,
};

/// Keep long-polling until a job arrives, riding out 503s and connection errors.
async fn poll_until_job(r: &Client, within: Duration) -> wire::LeasedJob {
    eventually(within, "a job through the long-poll", || async {
        let got = r.lease(&wire::Lease::waiting(2000, 1)).await.ok()?;
        got.into_iter().next()
    })
    .await
}

#[tokio::test]
async fn a_database_restart_loses_nothing_and_long_polls_resume() {
    let mut pg = private_pg("fault", false).await;
    let url = pg.url("postgres");
    let mut config = test_config(&url);
    // Only the re-check after the LISTEN reconnect (or a notification) may deliver in time.
    config.recheck_interval_ms = 600_000;
    let replica = start_replica(config).await;
    let base = format!("http://{}", replica.addr);
    readiness(&base, 200, Duration::from_secs(10)).await;
    let alice = Client::new(&base, Some(key_in(&url, "acme", "alice", false).await));
    let (_, r) = pair(&alice, Tier::Personal, &["linux"], 1).await;
    // A job no runner here can take stays parked across the restart.
    let mut d = wire::Dispatch::new(personal(), json!("needs a gpu"));
    d.required_capabilities = Some(vec!["gpu".into()]);
    let parked = alice.dispatch(&d).await.unwrap();

    let poll = tokio::spawn({
        let r = r.clone();
        async move { poll_until_job(&r, Duration::from_secs(90)).await }
    });
    eventually(Duration::from_secs(10), "runner parked", || async {
        (waiters(&base).await? == 1).then_some(())
    })
    .await;

    let mut pg = tokio::task::spawn_blocking(move || {
        pg.stop();
        pg
    })
    .await
    .unwrap();
    readiness(&base, 503, Duration::from_secs(10)).await;
    match alice.pool().await {
        Err(e) => assert_eq!(
            e.status().map(|s| s.as_u16()),
            Some(503),
            "database down is 503, never 401: {e}"
        ),
        Ok(p) => panic!("answered while the database was down: {p:?}"),
    }
    let pg = tokio::task::spawn_blocking(move || {
        pg.start_server().expect("restart");
        pg
    })
    .await
    .unwrap();
    readiness(&base, 200, Duration::from_secs(20)).await;

    let sent = Instant::now();
    let fresh = eventually(
        Duration::from_secs(10),
        "dispatch after restart",
        || async {
            alice
                .dispatch(&wire::Dispatch::new(personal(), json!("after restart")))
                .await
                .ok()
        },
    )
    .await;
    let got = poll.await.unwrap();
    assert_eq!(got.id, fresh.id);
    println!(
        "job reached the waiting runner {:?} after dispatch following a database restart",
        sent.elapsed()
    );
    assert_eq!(
        alice.job(parked.id).await.unwrap().state,
        "parked",
        "parked jobs survive"
    );
    replica.stop(Duration::from_secs(10)).await;
    drop(pg);
}

#[tokio::test]
async fn kill_9_of_a_replica_during_a_long_poll_and_a_lease_loses_nothing() {
    let app = TestApp::spawn_with(0, |_| {}).await;
    let env = [("LEASEHOLD_LEASE_TTL_MS", "30000")];
    let mut a = serve_process(&app.database_url, &env).await;
    let b = serve_process(&app.database_url, &env).await;
    let key = app.key("acme", "alice", false).await;
    let alice_b = Client::new(&b.url, Some(key));
    let (_, runner_b) = pair(&alice_b, Tier::Personal, &[], 2).await;
    let runner_a = Client::new(&a.url, Some(runner_b.token().unwrap().to_owned()));

    // A lease taken through A...
    let held = dispatch(&alice_b, personal(), json!("held")).await;
    let l = lease(&runner_a, 1000, 1).await.remove(0);
    assert_eq!(l.id, held.id);
    // ...and a long-poll open on A, when A dies.
    let open_poll = tokio::spawn({
        let r = runner_a.clone();
        async move { r.lease(&wire::Lease::waiting(30_000, 1)).await }
    });
    eventually(Duration::from_secs(10), "poll parked on A", || async {
        (waiters(&a.url).await? == 1).then_some(())
    })
    .await;
    a.kill9().await.unwrap();
    assert!(
        open_poll.await.unwrap().is_err(),
        "the open long-poll is cut, not answered"
    );

    // The runner carries on through B: same lease, same epoch.
    runner_b
        .heartbeat_job(l.id, l.epoch)
        .await
        .expect("heartbeat through B");
    let done = runner_b
        .complete(l.id, l.epoch, json!("finished via B"))
        .await
        .expect("complete through B");
    assert_eq!((done.state.as_str(), done.epoch), ("completed", 1));
    // And its next long-poll on B gets new work.
    let poll = tokio::spawn({
        let r = runner_b.clone();
        async move { lease(&r, 10_000, 1).await }
    });
    let next = dispatch(&alice_b, personal(), json!("next")).await;
    assert_eq!(poll.await.unwrap()[0].id, next.id);
}

#[tokio::test]
async fn sigterm_answers_open_long_polls_at_once_and_exits_cleanly() {
    let app = TestApp::spawn_with(0, |_| {}).await;
    let mut a = serve_process(&app.database_url, &[]).await;
    let alice = Client::new(&a.url, Some(app.key("acme", "alice", false).await));
    let (_, r) = pair(&alice, Tier::Personal, &[], 2).await;
    let job = dispatch(&alice, workspace_pool(), json!("nobody takes this")).await;
    let polls: Vec<_> = (0..2)
        .map(|_| {
            let r = r.clone();
            tokio::spawn(async move { r.lease(&wire::Lease::waiting(30_000, 1)).await })
        })
        .collect();
    let job_wait = tokio::spawn({
        let alice = alice.clone();
        async move { alice.wait_job(job.id, 30_000).await }
    });
    eventually(Duration::from_secs(10), "three waiters parked", || async {
        (waiters(&a.url).await? == 3).then_some(())
    })
    .await;
    // The contract: exit with status 0 within 10 s of SIGTERM (terminate fails past it).
    let status = a.terminate(Duration::from_secs(10)).await.unwrap();
    assert!(status.success(), "exit status {status:?}");
    // Each poll waited 30 s and was answered, empty and not cut: by the drain, since no wait
    // could have ended by then, and a replica gone without answering cuts the connection. (Not
    // an ordering of clocks: when the client's task reads the answer is the scheduler's.)
    for p in polls {
        let got = p.await.unwrap();
        assert!(got.expect("answered, not cut").is_empty());
    }
    assert_eq!(
        job_wait
            .await
            .unwrap()
            .expect("answered with what it has")
            .state,
        "parked"
    );
}

/// Whether `pid` is a live process (not gone, not a zombie waiting to be reaped).
fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        let state = s.rfind(')').and_then(|i| s[i + 2..].chars().next());
        !matches!(state, Some('Z' | 'X') | None)
    })
}

/// A benchmark or drill killed by a signal runs no destructor, so the handle that would kill its
/// replicas never drops: each replica it started must notice its parent is gone and stop.
#[tokio::test]
async fn a_replica_whose_parent_is_killed_stops_by_itself() {
    let app = TestApp::spawn_with(0, |_| {}).await;
    let dir = std::env::temp_dir().join(format!("leasehold-orphan-{}", uuid::Uuid::now_v7()));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("serve.log");
    // A parent that starts the replica as `ServeProcess` does (naming itself), then waits.
    let mut parent = tokio::process::Command::new("sh")
        .args([
            "-c",
            "LEASEHOLD_PARENT_PID=$$ \"$0\" serve --listen 127.0.0.1:0 --database-url \"$1\" \
             > \"$2\" 2>&1 & echo $!; wait",
            crate::procs::BIN,
            &app.database_url,
            log.to_str().unwrap(),
        ])
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut out = tokio::io::BufReader::new(parent.stdout.take().unwrap());
    let mut line = String::new();
    tokio::io::AsyncBufReadExt::read_line(&mut out, &mut line)
        .await
        .unwrap();
    let replica: i32 = line.trim().parse().expect("the replica's pid");
    eventually(Duration::from_secs(60), "the replica listening", || async {
        let text = std::fs::read_to_string(&log).ok()?;
        text.contains(leasehold::tooling::serve_process::LISTENING)
            .then_some(())
    })
    .await;
    assert!(alive(replica), "the replica runs while its parent does");
    parent.kill().await.unwrap();
    eventually(
        Duration::from_secs(15),
        "the orphaned replica gone",
        || async { (!alive(replica)).then_some(()) },
    )
    .await;
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains("the process that started this replica is gone"),
        "it stopped for that reason: {text}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
