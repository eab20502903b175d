//! A PostgreSQL primary failover, on real parts: a primary and a synchronous streaming standby
//! built from the installed binaries (`pg_basebackup -R`), two `leasehold serve` processes given
//! one two-host URL with `target_session_attrs=read-write`, runners working through the client.
//! The primary is stopped with `-m immediate` and the standby promoted. Invariants: both
//! replicas answer `/readyz` 503 meanwhile and 200 after, without a restart; a long-poll parked
//! across the failover is woken by a job dispatched after it; every acknowledged job settles
//! exactly once and no epoch is handed out twice (the drill's checker judges the history).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use leasehold::client::Client;
use leasehold::commands::drill::check::{self, Event, Outcome};
use leasehold::commands::drill::cluster::Cluster;
use leasehold::commands::drill::history::Recorder;
use leasehold::wire::{self, Tier};
use serde_json::json;

use crate::support::{
    connect, eventually, gauge, key_in, pair, personal, readiness, serve_process, until_waiters,
    workspace_pool,
};

/// Lease and complete until `stop`, riding out 503s and refused connections; a report is retried
/// at the same epoch until it is answered.
pub(crate) async fn work(r: Client, name: String, history: Recorder, stop: Arc<AtomicBool>) {
    while !stop.load(Ordering::Relaxed) {
        let lease = wire::Lease::waiting(500, 2);
        let jobs = match r.lease(&lease).await {
            Ok(jobs) => jobs,
            Err(e) => {
                history.error("lease", &e);
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        for job in jobs {
            history.leased(job.id, job.epoch, &name);
            settle(&r, &name, &job, &history).await;
        }
    }
}

pub(crate) async fn settle(r: &Client, name: &str, job: &wire::LeasedJob, history: &Recorder) {
    for _ in 0..600 {
        let at = history.now();
        match r.complete(job.id, job.epoch, json!("ok")).await {
            Ok(_) => return history.reported(job.id, job.epoch, name, Outcome::Accepted, at),
            Err(e) if e.status().is_some_and(|s| s.as_u16() == 409) => {
                return history.reported(job.id, job.epoch, name, Outcome::Refused, at);
            }
            Err(e) => {
                history.error("complete", &e);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    history.reported(job.id, job.epoch, name, Outcome::Unknown, history.now());
}

/// Dispatch through `replicas` in turn until `stop`, each job under its own idempotency key
/// retried until answered, so every job the dispatcher made is acknowledged.
pub(crate) async fn dispatch_loop(replicas: Vec<Client>, history: Recorder, stop: Arc<AtomicBool>) {
    let pool = workspace_pool();
    for n in 0.. {
        if stop.load(Ordering::Relaxed) {
            return;
        }
        let key = uuid::Uuid::now_v7().to_string();
        for attempt in 0.. {
            let via = &replicas[(n + attempt) % replicas.len()];
            let mut d = wire::Dispatch::new(pool.clone(), json!(n));
            d.max_attempts = Some(10);
            match via.dispatch_idempotent(&d, &key).await {
                Ok((_, job)) => {
                    history.dispatched(job.id);
                    break;
                }
                Err(e) => {
                    history.error("dispatch", &e);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
}

pub(crate) fn leases_after(history: &Recorder, t: u64) -> usize {
    history.count(|e| matches!(e, Event::Leased { at_ms, .. } if *at_ms > t))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_failover_loses_nothing_acknowledged_and_replicas_recover() {
    let missing = leasehold::tooling::private_pg::find_tool("pg_basebackup")
        .is_none()
        .then(|| "pg_basebackup (PostgreSQL client tools) is not installed".to_owned());
    if !crate::support::require("a_primary_failover", missing) {
        return;
    }
    let mut cluster = tokio::task::block_in_place(|| Cluster::start(false)).expect("cluster");
    cluster
        .make_synchronous()
        .await
        .expect("synchronous standby");
    let url = cluster.url("postgres");
    let env = [
        ("LEASEHOLD_LEASE_TTL_MS", "3000"),
        ("LEASEHOLD_AUTH_BURST", "100000"),
        // Only the re-check after LISTEN reconnects, or a notification, may wake the parked poll.
        ("LEASEHOLD_RECHECK_INTERVAL_MS", "600000"),
    ];
    let a = serve_process(&url, &env).await;
    let b = serve_process(&url, &env).await;
    for r in [&a, &b] {
        readiness(&r.url, 200, Duration::from_secs(10)).await;
    }
    let key = key_in(&url, "acme", "alice", true).await;
    // A write that reaches a read-only standby is "unavailable" (a 503), never a 500. (A
    // synchronous commit waits for the standby's flush, not its replay: wait for the schema.)
    let standby_url = cluster.standby.as_ref().unwrap().url("postgres");
    let standby_db = connect(&standby_url).await;
    eventually(
        Duration::from_secs(30),
        "the standby replays the schema",
        || async {
            let row = standby_db
                .query_one("SELECT to_regclass('api_keys') IS NOT NULL", &[])
                .await
                .ok()?;
            row.get::<_, bool>(0).then_some(())
        },
    )
    .await;
    let on_standby = leasehold::store::Store::connect(&standby_url, 1, 90_000).unwrap();
    let refused = on_standby
        .insert_key(uuid::Uuid::now_v7(), "acme", "bob", false, b"x")
        .await;
    assert!(
        matches!(refused, Err(leasehold::store::StoreError::Unavailable(_))),
        "{refused:?}"
    );
    let alice_a = Client::new(&a.url, Some(key.clone()));
    let alice_b = Client::new(&b.url, Some(key));

    let mut load = Workload::new();
    let history = load.history.clone();
    // Workspace runners long-poll replica A; the personal runner's poll is the one on B.
    for i in 0..2 {
        let (_, r) = pair(&alice_a, Tier::Workspace, &["linux"], 2).await;
        load.work(r, format!("runner-{i}"));
    }
    let (_, late) = pair(&alice_b, Tier::Personal, &["linux"], 1).await;
    load.dispatch(vec![alice_a.clone(), alice_b.clone()]);
    eventually(Duration::from_secs(30), "runners working", || async {
        (leases_after(&history, 0) >= 10).then_some(())
    })
    .await;

    let parked = tokio::spawn({
        let late = late.clone();
        async move { late.lease(&wire::Lease::waiting(45_000, 1)).await }
    });
    until_waiters(&b.url, 1, Duration::from_secs(10)).await;
    // Registered is not yet parked: the poll registers before its look, whose lease
    // transaction a crash now would fail (a 503 the runner would retry, not this test's case).
    eventually(
        Duration::from_secs(10),
        "the poll parked past its look",
        || async { (gauge(&b.url, "leasehold_long_polls").await? == 1).then_some(()) },
    )
    .await;

    tokio::task::block_in_place(|| cluster.crash_primary()).expect("crash the primary");
    for r in [&a, &b] {
        readiness(&r.url, 503, Duration::from_secs(10)).await;
    }
    cluster.promote_standby().await.expect("promote");
    let promoted_at = history.now();
    for r in [&a, &b] {
        readiness(&r.url, 200, Duration::from_secs(30)).await;
    }

    // The poll parked before the failover is woken by a job dispatched after it.
    let after = alice_a
        .dispatch(&wire::Dispatch::new(
            personal(),
            json!("after the failover"),
        ))
        .await
        .expect("dispatch after the failover");
    history.dispatched(after.id);
    let got = tokio::time::timeout(Duration::from_secs(20), parked)
        .await
        .expect("the parked long-poll is answered")
        .unwrap()
        .expect("lease");
    assert_eq!(got.iter().map(|j| j.id).collect::<Vec<_>>(), vec![after.id]);
    history.leased(after.id, got[0].epoch, "late");
    settle(&late, "late", &got[0], &history).await;

    eventually(
        Duration::from_secs(30),
        "leases after the failover",
        || async { (leases_after(&history, promoted_at) >= 10).then_some(()) },
    )
    .await;
    load.stop_dispatching().await;

    // Every acknowledged job settles; then the history is judged.
    let verdict = load.judge(&url).await;
    assert_every_job_completed("failover", &verdict);
    drop((a, b, cluster));
}

/// The history `verdict` judged (printed, named `drill`) broke no invariant, and every one of
/// its twenty or more acknowledged jobs completed.
pub(crate) fn assert_every_job_completed(drill: &str, verdict: &check::Verdict) {
    eprintln!("{drill}: {verdict:?}");
    assert!(verdict.ok(), "violations: {:#?}", verdict.violations);
    assert!(verdict.dispatched >= 20, "{verdict:?}");
    assert_eq!(verdict.completed, verdict.dispatched, "{verdict:?}");
}

/// Runners working and a dispatcher dispatching through the client, all recorded in one
/// history: what a failover test runs while it breaks the database.
pub(crate) struct Workload {
    pub history: Recorder,
    stop_work: Arc<AtomicBool>,
    stop_dispatch: Arc<AtomicBool>,
    workers: Vec<tokio::task::JoinHandle<()>>,
    dispatcher: Option<tokio::task::JoinHandle<()>>,
}

impl Workload {
    pub(crate) fn new() -> Self {
        Self {
            history: Recorder::new(),
            stop_work: Arc::new(AtomicBool::new(false)),
            stop_dispatch: Arc::new(AtomicBool::new(false)),
            workers: Vec::new(),
            dispatcher: None,
        }
    }

    /// `r` leases and completes as `name` (see [`work`]) until the workload is judged.
    pub(crate) fn work(&mut self, r: Client, name: String) {
        let (history, stop) = (self.history.clone(), self.stop_work.clone());
        self.workers
            .push(tokio::spawn(work(r, name, history, stop)));
    }

    /// Dispatch through `replicas` (see [`dispatch_loop`]) until [`Workload::stop_dispatching`].
    pub(crate) fn dispatch(&mut self, replicas: Vec<Client>) {
        let (history, stop) = (self.history.clone(), self.stop_dispatch.clone());
        self.dispatcher = Some(tokio::spawn(dispatch_loop(replicas, history, stop)));
    }

    pub(crate) async fn stop_dispatching(&mut self) {
        self.stop_dispatch.store(true, Ordering::Relaxed);
        if let Some(dispatcher) = self.dispatcher.take() {
            dispatcher.await.unwrap();
        }
    }

    /// Wait (30 s at most) until every acknowledged job is terminal in `database_url`, stop the
    /// runners, record each job's final state and judge the whole history with the drill's
    /// checker.
    pub(crate) async fn judge(self, database_url: &str) -> check::Verdict {
        let db = connect(database_url).await;
        let history = self.history;
        let acked = history.dispatched_jobs();
        let finals = eventually(Duration::from_secs(30), "every job settled", || async {
            let rows = db
                .query(
                    "SELECT id, state, epoch FROM jobs WHERE id = ANY($1)",
                    &[&acked],
                )
                .await
                .ok()?;
            rows.iter()
                .all(|r| !matches!(r.get::<_, &str>(1), "parked" | "leased"))
                .then_some(rows)
        })
        .await;
        self.stop_work.store(true, Ordering::Relaxed);
        for t in self.workers {
            t.await.unwrap();
        }
        for r in finals {
            history.push(Event::Final {
                job: r.get(0),
                state: Some(r.get(1)),
                epoch: r.get(2),
            });
        }
        check::check(&history.snapshot())
    }
}
