//! Dispatch and the dispatcher's view: idempotent dispatch, tenancy (another workspace's job is
//! 404 everywhere), server-stamped provenance and billing, no-runner and queue timeouts, waits,
//! events, pool and preflight, revocation and roles.

use std::time::{Duration, Instant};

use leasehold::domain::credentials::{self, Kind};
use leasehold::store::NewJob;
use leasehold::wire::{self, Tier};
use serde_json::json;

use leasehold::hub::sweeper::sweep_once;

use crate::support::{
    code, connect, dispatch, eventually, lease, pair, personal, to_runner, workspace_pool, TestApp,
};

#[tokio::test]
async fn idempotent_dispatch_returns_the_first_job_and_4xx_does_not_use_the_key() {
    let app = TestApp::spawn().await;
    let alice = app.operator("acme", "alice", false).await;
    let mut bad = wire::Dispatch::new(personal(), json!(1));
    bad.priority = Some(5000);
    assert_eq!(
        code(alice.dispatch_idempotent(&bad, "k1").await),
        "bad_request"
    );
    let (status, first) = alice
        .dispatch_idempotent(&wire::Dispatch::new(personal(), json!(1)), "k1")
        .await
        .unwrap();
    assert_eq!(status.as_u16(), 201);
    let (status, again) = alice
        .dispatch_idempotent(&wire::Dispatch::new(workspace_pool(), json!(2)), "k1")
        .await
        .unwrap();
    assert_eq!(status.as_u16(), 200);
    assert_eq!(again.id, first.id);
    assert_eq!(again.payload, json!(1));
    // Concurrent first dispatches with one key: one job.
    let d = wire::Dispatch::new(personal(), json!("race"));
    let racers = (0..8).map(|_| alice.dispatch_idempotent(&d, "race"));
    let ids: std::collections::HashSet<_> = futures_util::future::join_all(racers)
        .await
        .into_iter()
        .map(|r| r.unwrap().1.id)
        .collect();
    assert_eq!(ids.len(), 1);
    // Keys are per workspace.
    let other = app.operator("globex", "alice", false).await;
    let (status, theirs) = other
        .dispatch_idempotent(&wire::Dispatch::new(personal(), json!(3)), "k1")
        .await
        .unwrap();
    assert_eq!(status.as_u16(), 201);
    assert_ne!(theirs.id, first.id);
}

#[tokio::test]
async fn another_workspaces_jobs_and_runners_are_invisible() {
    let app = TestApp::spawn().await;
    let acme = app.operator("acme", "alice", true).await;
    let globex = app.operator("globex", "mallory", true).await;
    let (ws_runner, _) = pair(&acme, Tier::Workspace, &[], 1).await;
    let job = dispatch(&acme, workspace_pool(), json!("secret")).await;
    assert_eq!(code(globex.job(job.id).await), "not_found");
    assert_eq!(code(globex.cancel(job.id).await), "not_found");
    assert_eq!(code(globex.events(job.id, 0, 0).await), "not_found");
    assert!(globex.jobs(None, None, None).await.unwrap().jobs.is_empty());
    assert_eq!(
        code(
            globex
                .dispatch(&wire::Dispatch::new(to_runner(ws_runner.id), json!(1)))
                .await
        ),
        "not_found"
    );
    assert_eq!(
        code(globex.revoke_runner(Tier::Workspace, ws_runner.id).await),
        "not_found"
    );
    assert!(globex.runners(Tier::Workspace).await.unwrap().is_empty());
    assert_eq!(
        acme.job(job.id).await.unwrap().state,
        "parked",
        "nothing changed"
    );
    // Members of a workspace all see its jobs.
    let bob = app.operator("acme", "bob", false).await;
    assert_eq!(bob.job(job.id).await.unwrap().id, job.id);
}

#[tokio::test]
async fn provenance_and_billing_are_stamped_by_the_server() {
    let app = TestApp::spawn().await;
    let admin = app.operator("acme", "alice", true).await;
    let (mine, personal_runner) = pair(&admin, Tier::Personal, &[], 1).await;
    let (theirs, ws_runner) = pair(&admin, Tier::Workspace, &[], 1).await;
    assert_eq!(mine.owner, "alice");
    assert_eq!(theirs.owner, "ws:acme");
    assert_eq!(theirs.approved_by.as_deref(), Some("alice"));

    let p = dispatch(&admin, personal(), json!(1)).await;
    let w = dispatch(&admin, workspace_pool(), json!(2)).await;
    assert_eq!(p.billing_tenant, None, "personal runners are own-pays");
    assert_eq!(w.billing_tenant.as_deref(), Some("acme"));

    let lp = lease(&personal_runner, 1000, 1).await.remove(0);
    let lw = lease(&ws_runner, 1000, 1).await.remove(0);
    // A runner cannot forge provenance: fields it sends are ignored.
    let forged: wire::Job = personal_runner
        .call(
            reqwest::Method::POST,
            &format!("/v1/runner/jobs/{}/complete", lp.id),
            Some(&json!({"epoch": lp.epoch, "result": 7, "provenance": {"ran_on": "cloud"}, "state": "failed"})),
            &[],
        )
        .await
        .unwrap()
        .1;
    assert_eq!(forged.state, "completed");
    assert_eq!(
        forged.provenance,
        Some(json!({"ran_on": "self-hosted", "runner": mine.id, "by": "alice", "epoch": 1}))
    );
    let failed = ws_runner
        .fail(lw.id, lw.epoch, "no docker here")
        .await
        .unwrap();
    assert_eq!(
        failed.error,
        Some(json!({"reason": "runner_failed", "message": "no docker here"}))
    );
    assert_eq!(failed.provenance.unwrap()["by"], "ws:acme");
}

#[tokio::test]
async fn a_job_no_runner_could_take_is_rejected_no_runner_and_an_old_one_queue_timeout() {
    // The test drives the sweeper itself; the replica's own would sweep only once an hour.
    let app = TestApp::spawn_with(1, |c| c.sweep_interval_ms = 3_600_000).await;
    let hub = &app.replicas[0].hub;
    let db = connect(&app.database_url).await;
    let alice = app.operator("acme", "alice", false).await;
    let mut d = wire::Dispatch::new(personal(), json!(null));
    d.no_runner_timeout_ms = Some(1000);
    let orphan = alice.dispatch(&d).await.unwrap();
    until_due(&db, orphan.id, "no_runner_check_at").await;
    sweep_once(hub).await.unwrap();
    let rejected = alice.wait_job(orphan.id, 10_000).await.unwrap();
    assert_eq!(rejected.state, "rejected");
    assert_eq!(rejected.error.unwrap()["reason"], "no_runner");

    // An online but busy runner keeps a job waiting past no_runner, but not past queue_timeout.
    let (_, r) = pair(&alice, Tier::Personal, &[], 1).await;
    dispatch(&alice, personal(), json!("occupies the only slot")).await;
    assert_eq!(lease(&r, 1000, 1).await.len(), 1);
    let mut d = wire::Dispatch::new(personal(), json!(null));
    d.no_runner_timeout_ms = Some(1000);
    d.queue_timeout_ms = Some(2500);
    let waiting = alice.dispatch(&d).await.unwrap();
    until_due(&db, waiting.id, "no_runner_check_at").await;
    sweep_once(hub).await.unwrap();
    assert_eq!(
        alice.job(waiting.id).await.unwrap().state,
        "parked",
        "a busy online runner keeps it waiting"
    );
    let checked_again_later: bool = db
        .query_one(
            "SELECT no_runner_check_at > now() FROM jobs WHERE id = $1",
            &[&waiting.id],
        )
        .await
        .unwrap()
        .get(0);
    assert!(checked_again_later, "the sweep looked, and will look again");
    until_due(&db, waiting.id, "queue_deadline").await;
    sweep_once(hub).await.unwrap();
    let timed_out = alice.wait_job(waiting.id, 10_000).await.unwrap();
    assert_eq!(timed_out.state, "rejected");
    assert_eq!(timed_out.error.unwrap()["reason"], "queue_timeout");
}

/// Wait until the job's deadline `column` has passed by the database's clock (which is the
/// one the sweeper judges by).
async fn until_due(db: &tokio_postgres::Client, id: uuid::Uuid, column: &str) {
    let sql = format!("SELECT {column} <= now() FROM jobs WHERE id = $1");
    eventually(Duration::from_secs(10), column, || async {
        let due: bool = db.query_one(&sql, &[&id]).await.unwrap().get(0);
        due.then_some(())
    })
    .await;
}

#[tokio::test]
async fn waiting_on_a_job_returns_as_soon_as_it_settles() {
    let app = TestApp::spawn().await;
    let alice = app.operator("acme", "alice", false).await;
    let (_, r) = pair(&alice, Tier::Personal, &[], 1).await;
    let job = dispatch(&alice, personal(), json!(null)).await;
    let waiter = tokio::spawn({
        let alice = alice.clone();
        async move {
            let started = Instant::now();
            (
                alice.wait_job(job.id, 30_000).await.unwrap(),
                started.elapsed(),
            )
        }
    });
    let l = lease(&r, 1000, 1).await.remove(0);
    r.complete(l.id, l.epoch, json!("done")).await.unwrap();
    let (settled, took) = waiter.await.unwrap();
    assert_eq!(settled.state, "completed");
    assert!(
        took < Duration::from_secs(10),
        "the wait ended on completion, not on its deadline"
    );
    // Without wait_ms the call answers at once.
    let parked = dispatch(&alice, personal(), json!(null)).await;
    assert_eq!(alice.job(parked.id).await.unwrap().state, "parked");
}

#[tokio::test]
async fn events_append_fenced_page_and_wait() {
    let app = TestApp::spawn().await;
    let alice = app.operator("acme", "alice", false).await;
    let (_, r) = pair(&alice, Tier::Personal, &[], 1).await;
    let job = dispatch(&alice, personal(), json!(null)).await;
    let l = lease(&r, 1000, 1).await.remove(0);
    let reader = tokio::spawn({
        let alice = alice.clone();
        async move { alice.events(job.id, 2, 30_000).await.unwrap() }
    });
    let lines: Vec<_> = (0..3)
        .map(|i| wire::NewEvent {
            kind: "stdout".into(),
            data: Some(json!({"line": i})),
        })
        .collect();
    let appended = r.append_events(job.id, l.epoch, lines).await.unwrap();
    assert_eq!(appended.next, 5, "parked=1, leased=2, then 3..5");
    let woken = reader.await.unwrap();
    assert_eq!(woken.events.first().unwrap().seq, 3);
    let page: wire::EventList = alice
        .call::<(), _>(
            reqwest::Method::GET,
            &format!("/v1/jobs/{}/events?after=1&limit=2", job.id),
            None,
            &[],
        )
        .await
        .unwrap()
        .1;
    assert_eq!(
        page.events.iter().map(|e| e.seq).collect::<Vec<_>>(),
        [2, 3]
    );
    assert_eq!(page.next, 3);
    let none = alice.events(job.id, 99, 0).await.unwrap();
    assert!(none.events.is_empty());
    assert_eq!(none.next, 99);
    // `state` is the server's own kind.
    let bad = r
        .append_events(
            job.id,
            l.epoch,
            vec![wire::NewEvent {
                kind: "state".into(),
                data: None,
            }],
        )
        .await;
    assert_eq!(code(bad), "bad_request");
    // An events wait on a terminal job answers at once: before its 30 s wait could end.
    r.complete(job.id, l.epoch, json!(null)).await.unwrap();
    let tail = tokio::time::timeout(Duration::from_secs(15), alice.events(job.id, 6, 30_000))
        .await
        .expect("an events wait on a settled job answers without waiting")
        .unwrap();
    assert!(tail.events.is_empty());
}

#[tokio::test]
async fn list_pages_by_ascending_id_with_a_state_filter() {
    let app = TestApp::spawn().await;
    let alice = app.operator("acme", "alice", false).await;
    let mut ids = Vec::new();
    for i in 0..5 {
        ids.push(dispatch(&alice, personal(), json!(i)).await.id);
    }
    alice.cancel(ids[1]).await.unwrap();
    let first = alice.jobs(None, Some(2), None).await.unwrap();
    assert_eq!(
        first.jobs.iter().map(|j| j.id).collect::<Vec<_>>(),
        &ids[..2]
    );
    assert_eq!(first.next, Some(ids[1]));
    let rest = alice.jobs(None, Some(10), first.next).await.unwrap();
    assert_eq!(
        rest.jobs.iter().map(|j| j.id).collect::<Vec<_>>(),
        &ids[2..]
    );
    assert_eq!(rest.next, None);
    let parked = alice.jobs(Some("parked"), None, None).await.unwrap();
    assert_eq!(parked.jobs.len(), 4);
    assert_eq!(
        code(alice.jobs(Some("sleeping"), None, None).await),
        "bad_request"
    );
}

/// A page of `GET /v1/jobs?q=` (issue 56 row 7), as `searched` asks for it.
async fn searched(
    client: &leasehold::client::Client,
    q: &str,
    limit: Option<u32>,
    after: Option<uuid::Uuid>,
    newest_first: bool,
) -> (Vec<uuid::Uuid>, Option<uuid::Uuid>) {
    let page = client
        .list_jobs(&leasehold::client::JobQuery {
            search: Some(q),
            limit,
            after,
            newest_first,
            ..Default::default()
        })
        .await
        .unwrap_or_else(|e| panic!("q={q:?}: {e}"));
    (page.jobs.iter().map(|j| j.id).collect(), page.next)
}

/// Issue 56 row 7: `q` finds the jobs whose command (its argv joined with spaces) holds the
/// text in any case, or whose id is the text or starts or ends with its hex digits (as the
/// page shows ids); it pages like the list, in either order, beside the other filters, and
/// only ever over the caller's workspace. A bad `q` is the contract's 400 naming it.
#[tokio::test]
async fn list_searches_by_command_text_or_id_and_pages() {
    let app = TestApp::spawn().await;
    let key = app.key("acme", "alice", false).await;
    let alice = leasehold::client::Client::new(app.url(0), Some(key.clone()));
    let argv = |words: &[&str]| json!({ "argv": words });
    let build = dispatch(&alice, personal(), argv(&["make", "Build", "--jobs=4"])).await;
    let test = dispatch(&alice, personal(), argv(&["cargo", "test"])).await;
    // Payloads a search must read past without failing: an argv that is not a list, none.
    dispatch(&alice, personal(), json!({ "argv": "make build" })).await;
    dispatch(&alice, personal(), json!(7)).await;
    let docs = dispatch(&alice, personal(), argv(&["make", "build-docs"])).await;
    let bob = app.operator("beta", "bob", false).await;
    dispatch(&bob, personal(), argv(&["make", "build"])).await;

    // The command's text, in any case; words joined with one space.
    assert_eq!(
        searched(&alice, "BUILD", None, None, false).await.0,
        [build.id, docs.id]
    );
    assert_eq!(
        searched(&alice, "make build", None, None, false).await.0,
        [build.id, docs.id]
    );
    assert_eq!(
        searched(&alice, "jobs=4", None, None, false).await.0,
        [build.id]
    );
    assert_eq!(
        searched(&alice, "no such words", None, None, false).await,
        (vec![], None)
    );

    // Paged like every list: `next` is the last id of a full page, in either order.
    let (first, next) = searched(&alice, "build", Some(1), None, false).await;
    assert_eq!((first, next), (vec![build.id], Some(build.id)));
    let (second, next) = searched(&alice, "build", Some(1), next, false).await;
    assert_eq!((second, next), (vec![docs.id], Some(docs.id)));
    assert_eq!(
        searched(&alice, "build", Some(1), next, false).await,
        (vec![], None)
    );
    let (newest, next) = searched(&alice, "build", Some(1), None, true).await;
    assert_eq!((newest, next), (vec![docs.id], Some(docs.id)));
    assert_eq!(
        searched(&alice, "build", Some(5), next, true).await.0,
        [build.id]
    );

    // An id: whole, in any case, or the start or end of its hex digits (the page shows the
    // last 8).
    let hex = test.id.simple().to_string();
    for q in [
        test.id.to_string(),
        test.id.to_string().to_uppercase(),
        hex.clone(),
        hex[24..].to_owned(),
        hex[..31].to_owned(),
        test.id.to_string()[..34].to_owned(),
    ] {
        assert_eq!(
            searched(&alice, &q, None, None, false).await.0,
            [test.id],
            "q={q}"
        );
    }

    // Beside the state filter.
    alice.cancel(docs.id).await.unwrap();
    let parked = alice
        .list_jobs(&leasehold::client::JobQuery {
            state: Some("parked"),
            search: Some("build"),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(
        parked.jobs.iter().map(|j| j.id).collect::<Vec<_>>(),
        [build.id]
    );

    // Refused, each as the contract's 400 naming `q`: empty, too long, a control character.
    for q in ["", &"x".repeat(201), "a%07b"] {
        let answer = reqwest::Client::new()
            .get(format!("{}/v1/jobs?q={q}", app.url(0)))
            .bearer_auth(&key)
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status().as_u16(), 400, "q={q}");
        let body: serde_json::Value = answer.json().await.unwrap();
        assert_eq!(body["error"]["code"], "bad_request", "{body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.starts_with("q: "), "{message}");
    }
}

/// Issue 56 row 7: a Runner names the jobs it holds leased now (`current_jobs`, ascending), in
/// the roster, a tier's list and its own heartbeat's answer; a settled job leaves it.
#[tokio::test]
async fn a_runner_names_the_jobs_it_holds_now() {
    let app = TestApp::spawn().await;
    let alice = app.operator("acme", "alice", true).await;
    let (mine, r) = pair(&alice, Tier::Personal, &[], 3).await;
    let (theirs, w) = pair(&alice, Tier::Workspace, &[], 1).await;
    assert!(mine.current_jobs.is_empty() && theirs.current_jobs.is_empty());
    for i in 0..2 {
        dispatch(&alice, personal(), json!(i)).await;
    }
    dispatch(&alice, workspace_pool(), json!(2)).await;
    let mut held: Vec<_> = lease(&r, 1000, 3)
        .await
        .iter()
        .map(|l| (l.id, l.epoch))
        .collect();
    held.sort();
    let w_held = lease(&w, 1000, 1).await.remove(0).id;

    let roster = alice.runners(Tier::Workspace).await.unwrap();
    let of = |id| roster.iter().find(|x| x.id == id).unwrap().clone();
    assert_eq!(
        of(mine.id).current_jobs,
        held.iter().map(|h| h.0).collect::<Vec<_>>()
    );
    assert_eq!(of(mine.id).active_leases, 2);
    assert_eq!(of(theirs.id).current_jobs, [w_held]);
    let personal_list = alice.runners(Tier::Personal).await.unwrap();
    assert_eq!(personal_list[0].current_jobs, of(mine.id).current_jobs);

    r.complete(held[0].0, held[0].1, json!(null)).await.unwrap();
    let beat = r
        .runner_heartbeat(&wire::RunnerHeartbeat::default())
        .await
        .unwrap();
    assert_eq!(beat.runner.current_jobs, [held[1].0]);
    assert_eq!(beat.runner.active_leases, 1);
}

#[tokio::test]
async fn pool_and_preflight_report_what_the_caller_could_target() {
    let app = TestApp::spawn().await;
    let alice = app.operator("acme", "alice", true).await;
    let pre = |caps: &[&str]| wire::Preflight {
        target: personal(),
        required_capabilities: Some(caps.iter().map(|s| s.to_string()).collect()),
        source: None,
    };
    let report = alice.preflight(&pre(&["docker"])).await.unwrap();
    assert!(!report.ok);
    assert_eq!(report.blockers[0].code, "no_matching_runner");

    let (_, r) = pair(&alice, Tier::Personal, &["docker"], 4).await;
    let (_, _never) = pair(&alice, Tier::Workspace, &[], 2).await;
    let report = alice.preflight(&pre(&["docker"])).await.unwrap();
    assert!(report.ok);
    assert_eq!(
        report.warnings[0].code, "runners_offline",
        "paired but never seen"
    );

    dispatch(&alice, personal(), json!(1)).await;
    dispatch(&alice, workspace_pool(), json!(2)).await;
    assert_eq!(lease(&r, 1000, 1).await.len(), 1);
    let report = alice.preflight(&pre(&["docker"])).await.unwrap();
    assert!(report.ok && report.warnings.is_empty());
    let pool = alice.pool().await.unwrap();
    assert_eq!(
        pool,
        wire::Pool {
            runners: wire::PoolRunners {
                online: 1,
                dormant: 0,
                never: 1
            },
            slots: wire::PoolSlots {
                capacity: 4,
                active: 1
            },
            jobs: wire::PoolJobs {
                parked: 1,
                leased: 1
            },
        }
    );
}

#[tokio::test]
async fn revoking_a_runner_kills_its_token_and_reparks_its_pool_jobs() {
    let app = TestApp::spawn().await;
    let alice = app.operator("acme", "alice", false).await;
    let (doomed, d) = pair(&alice, Tier::Personal, &[], 2).await;
    let (_, heir) = pair(&alice, Tier::Personal, &[], 2).await;
    let pool_job = dispatch(&alice, personal(), json!("pool")).await;
    let l = lease(&d, 1000, 1).await.remove(0);
    let named = dispatch(&alice, to_runner(doomed.id), json!("named")).await;
    let settled = dispatch(&alice, personal(), json!("settled")).await;
    let ls = lease(&d, 1000, 1).await.remove(0);
    assert_eq!(ls.id, named.id, "named jobs come first");
    let _ = settled;
    alice
        .revoke_runner(Tier::Personal, doomed.id)
        .await
        .unwrap();
    assert_eq!(
        code(d.complete(l.id, l.epoch, json!(null)).await),
        "unauthorized"
    );
    assert_eq!(
        code(alice.revoke_runner(Tier::Personal, doomed.id).await),
        "not_found"
    );
    let named_now = alice.job(named.id).await.unwrap();
    assert_eq!(
        (
            named_now.state.as_str(),
            named_now.error.unwrap()["reason"].as_str()
        ),
        ("rejected", Some("runner_revoked"))
    );
    let got = lease(&heir, 1000, 2).await;
    let again = got
        .iter()
        .find(|j| j.id == pool_job.id)
        .expect("re-parked pool job re-delivered");
    assert_eq!(again.epoch, 2);
    heir.complete(again.id, again.epoch, json!("finished by heir"))
        .await
        .unwrap();
    assert!(!alice
        .runners(Tier::Personal)
        .await
        .unwrap()
        .iter()
        .any(|r| r.id == doomed.id));
}

#[tokio::test]
async fn roles_and_key_revocation() {
    let app = TestApp::spawn().await;
    let admin = app.operator("acme", "root", true).await;
    let member = app.operator("acme", "bob", false).await;
    assert_eq!(
        code(member.create_key("eve", wire::Role::Admin).await),
        "forbidden"
    );
    assert_eq!(
        code(
            member
                .pair_runner(
                    Tier::Workspace,
                    &wire::CreateRunner {
                        label: "x".into(),
                        ..Default::default()
                    }
                )
                .await
        ),
        "forbidden"
    );
    assert_eq!(
        code(
            member
                .create_join_code(&wire::CreateJoinCode {
                    tier: Tier::Workspace,
                    ttl_s: None,
                    ephemeral: None
                })
                .await
        ),
        "forbidden"
    );
    let created = admin.create_key("carol", wire::Role::Member).await.unwrap();
    let carol = admin.with_token(created.key.clone());
    assert!(carol.pool().await.is_ok());
    admin.revoke_key(created.id).await.unwrap();
    assert_eq!(code(carol.pool().await), "unauthorized");
    assert_eq!(code(admin.revoke_key(created.id).await), "not_found");
    // Personal runners can't be revoked through the workspace route.
    let (mine, _) = pair(&admin, Tier::Personal, &[], 1).await;
    assert_eq!(
        code(admin.revoke_runner(Tier::Workspace, mine.id).await),
        "not_found"
    );
}

/// Dispatches of several callers that a replica coalesced are parked by one statement per API
/// key: each job is parked under its own caller's key (its workspace and owner come from that
/// key alone), a dead key parks nothing of its own and nothing of anyone else's, an idempotency
/// key used twice in one call parks once, and the answers come back in the items' order.
#[tokio::test]
async fn coalesced_dispatches_of_two_callers_park_each_under_its_own_key() {
    let app = TestApp::spawn().await;
    let hash = |key: &str| credentials::parse(Kind::ApiKey, key).unwrap();
    let alice = hash(&app.key("acme", "alice", false).await);
    let bob = hash(&app.key("globex", "bob", false).await);
    let unknown = vec![7u8; 32];
    let job = |key: &Vec<u8>, pool: &'static str, n: i64, idem: Option<&str>| NewJob {
        id: uuid::Uuid::now_v7(),
        key_hash: key.clone(),
        pool: Some(pool),
        kind: "command".into(),
        payload: json!(n),
        max_attempts: 3,
        no_runner_timeout_ms: 300_000,
        idempotency_key: idem.map(str::to_owned),
        ..NewJob::default()
    };
    let items = vec![
        job(&alice, "personal", 0, None),
        job(&bob, "personal", 1, None),
        job(&alice, "personal", 2, Some("k")),
        job(&unknown, "personal", 3, None),
        job(&bob, "workspace", 4, None),
        job(&alice, "personal", 5, Some("k")),
    ];
    let parked = app.store.insert_jobs(&items).await.unwrap();
    assert_eq!(parked.len(), items.len());
    let seen: Vec<Option<(uuid::Uuid, &str, &str, serde_json::Value)>> = parked
        .iter()
        .map(|p| {
            p.as_ref().map(|d| {
                (
                    d.job.id,
                    d.job.workspace.as_str(),
                    d.job.owner.as_str(),
                    d.job.payload.clone(),
                )
            })
        })
        .collect();
    let expected = |i: usize, workspace, owner| Some((items[i].id, workspace, owner, json!(i)));
    assert_eq!(
        seen,
        vec![
            expected(0, "acme", "alice"),
            expected(1, "globex", "bob"),
            expected(2, "acme", "alice"),
            None,
            expected(4, "globex", "ws:globex"),
            None,
        ]
    );
}

/// Batch dispatch (v1.1): every item validated and every target resolved before anything is
/// written; then all parked in one transaction, in request order, ids rising; an item's
/// idempotency key used before (earlier, or earlier in the same batch) gets the first job.
#[tokio::test]
async fn a_batch_parks_all_in_order_or_nothing() {
    let app = TestApp::spawn().await;
    let alice = app.operator("acme", "alice", false).await;
    let item = |payload: serde_json::Value, key: Option<&str>| wire::BatchItem {
        dispatch: wire::Dispatch::new(personal(), payload),
        idempotency_key: key.map(str::to_owned),
    };
    let first = alice
        .dispatch_batch(vec![
            item(json!(0), None),
            item(json!(1), Some("k")),
            item(json!(2), None),
            item(json!(3), Some("k")),
        ])
        .await
        .unwrap();
    assert_eq!(first.len(), 4);
    assert!(first[0].id < first[1].id && first[1].id < first[2].id);
    assert_eq!(first[3].id, first[1].id, "a key used earlier in the batch");
    assert_eq!(first[3].payload, json!(1));
    let again = alice
        .dispatch_batch(vec![item(json!(9), Some("k")), item(json!(4), None)])
        .await
        .unwrap();
    assert_eq!(again[0].id, first[1].id, "a key used by an earlier call");
    assert!(again[1].id > first[2].id);

    // One bad item: 400 naming the lowest bad index, and nothing parked.
    let mut bad = item(json!(5), None);
    bad.dispatch.priority = Some(5000);
    let mut worse = item(json!(6), None);
    worse.dispatch.max_attempts = Some(0);
    let before = alice
        .jobs(Some("parked"), Some(500), None)
        .await
        .unwrap()
        .jobs
        .len();
    let err = alice
        .dispatch_batch(vec![item(json!(4), None), bad, worse])
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("bad_request") && err.to_string().contains("jobs[1].priority"),
        "{err}"
    );
    // An invisible named runner: 404, nothing parked.
    let named = wire::BatchItem {
        dispatch: wire::Dispatch::new(to_runner(uuid::Uuid::now_v7()), json!(7)),
        idempotency_key: None,
    };
    assert_eq!(
        code(
            alice
                .dispatch_batch(vec![item(json!(8), None), named])
                .await
        ),
        "not_found"
    );
    let after = alice
        .jobs(Some("parked"), Some(500), None)
        .await
        .unwrap()
        .jobs
        .len();
    assert_eq!(before, after, "a refused batch parks nothing");
    assert_eq!(
        code(alice.dispatch_batch(Vec::new()).await),
        "bad_request",
        "1..1000 items"
    );
}
