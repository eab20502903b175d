//! Tenancy: tenants never reach each other's objects, personal runners, and who counts as
//! online (PROTOCOL.md v1.1, Words: queue key).
//!
//! Invariants: no workspace reads, cancels, revokes, targets or feeds another's jobs, keys or
//! runners (it gets `not_found`, as for what does not exist); a personal runner serves its owner only in the workspace it was paired in, so a
//! subject of the same name in another workspace (whose key any admin there may mint) can
//! neither list, target, revoke, feed nor count it; a runner never seen was never online, so a
//! job that only it could take is rejected `no_runner` after its timeout.

use std::time::Duration;

use leasehold::wire::{self, Tier};
use serde_json::json;

use crate::support::{code, dispatch, lease, pair, personal, to_runner, workspace_pool, TestApp};

#[tokio::test]
async fn a_personal_runner_serves_its_owner_only_in_its_own_workspace() {
    let app = TestApp::spawn().await;
    // dana in `dev` pairs a personal runner; an admin of `acme` mints a key for a `dana` of acme.
    let dev_dana = app.operator("dev", "dana", false).await;
    let (runner, runner_client) = pair(&dev_dana, Tier::Personal, &[], 1).await;
    let acme_admin = app.operator("acme", "root", true).await;
    let minted = acme_admin
        .create_key("dana", wire::Role::Member)
        .await
        .unwrap();
    let acme_dana = acme_admin.with_token(minted.key);

    assert!(
        acme_dana.runners(Tier::Personal).await.unwrap().is_empty(),
        "acme's dana lists no runner of dev's dana"
    );
    let named = to_runner(runner.id);
    assert_eq!(
        code(
            acme_dana
                .dispatch(&wire::Dispatch::new(named, json!(1)))
                .await
        ),
        "not_found"
    );
    assert_eq!(
        code(acme_dana.revoke_runner(Tier::Personal, runner.id).await),
        "not_found"
    );
    let pool = acme_dana.pool().await.unwrap();
    assert_eq!(
        (
            pool.runners.online,
            pool.runners.dormant,
            pool.runners.never
        ),
        (0, 0, 0),
        "acme's dana counts no runner of dev's dana"
    );
    let report = acme_dana
        .preflight(&wire::Preflight {
            target: personal(),
            required_capabilities: None,
            source: None,
        })
        .await
        .unwrap();
    assert!(!report.ok, "no runner of acme's dana exists: {report:?}");

    // A job in acme's dana's personal pool never reaches dev's dana's runner...
    let foreign = dispatch(&acme_dana, personal(), json!("acme")).await;
    assert!(lease(&runner_client, 0, 10).await.is_empty());
    // ...while a job of its own owner in its own workspace does.
    let own = dispatch(&dev_dana, personal(), json!("dev")).await;
    let got = lease(&runner_client, 1000, 10).await;
    assert_eq!(got.iter().map(|j| j.id).collect::<Vec<_>>(), [own.id]);
    assert_eq!(acme_dana.job(foreign.id).await.unwrap().state, "parked");
    // And dev's dana still holds her runner.
    assert_eq!(dev_dana.runners(Tier::Personal).await.unwrap().len(), 1);
}

#[tokio::test]
async fn a_runner_never_seen_does_not_keep_a_job_from_no_runner() {
    let app = TestApp::spawn().await;
    let alice = app.operator("acme", "alice", false).await;
    // Paired by key, never connected: presence `never`.
    let (runner, _) = pair(&alice, Tier::Personal, &[], 1).await;
    assert_eq!(runner.presence, "never");
    let mut pool_job = wire::Dispatch::new(personal(), json!("pool"));
    pool_job.no_runner_timeout_ms = Some(1000);
    let mut named_job = wire::Dispatch::new(to_runner(runner.id), json!("named"));
    named_job.no_runner_timeout_ms = Some(1000);
    let pool_job = alice.dispatch(&pool_job).await.unwrap();
    let named_job = alice.dispatch(&named_job).await.unwrap();
    for id in [pool_job.id, named_job.id] {
        let settled = alice.wait_job(id, 15_000).await.unwrap();
        assert_eq!(settled.state, "rejected", "{settled:?}");
        assert_eq!(settled.error.unwrap()["reason"], "no_runner");
        let age = settled.finished_at.unwrap() - settled.created_at;
        assert!(
            age < chrono::Duration::from_std(Duration::from_secs(10)).unwrap(),
            "rejected at its timeout, not by luck much later: {age}"
        );
    }
}

#[tokio::test]
async fn tenants_never_reach_each_others_objects() {
    let app = TestApp::spawn().await;
    let acme = app.operator("acme", "alice", true).await;
    let globex = app.operator("globex", "alice2", true).await;
    let (acme_runner, acme_r) = pair(&acme, Tier::Workspace, &[], 1).await;
    let (_, globex_r) = pair(&globex, Tier::Workspace, &[], 1).await;
    let job = dispatch(&acme, workspace_pool(), json!("acme only")).await;
    let acme_key = acme.create_key("bob", wire::Role::Member).await.unwrap();
    // Reads and writes by id.
    assert_eq!(code(globex.job(job.id).await), "not_found");
    assert_eq!(code(globex.wait_job(job.id, 10).await), "not_found");
    assert_eq!(code(globex.cancel(job.id).await), "not_found");
    assert_eq!(code(globex.events(job.id, 0, 10).await), "not_found");
    assert_eq!(code(globex.revoke_key(acme_key.id).await), "not_found");
    assert_eq!(
        code(globex.revoke_runner(Tier::Workspace, acme_runner.id).await),
        "not_found"
    );
    assert_eq!(
        code(globex.revoke_runner(Tier::Personal, acme_runner.id).await),
        "not_found"
    );
    let named = to_runner(acme_runner.id);
    assert_eq!(
        code(
            globex
                .dispatch(&wire::Dispatch::new(named.clone(), json!(1)))
                .await
        ),
        "not_found"
    );
    assert_eq!(
        code(
            globex
                .preflight(&wire::Preflight {
                    target: named,
                    required_capabilities: None,
                    source: None,
                })
                .await
        ),
        "not_found"
    );
    // Lists and counts.
    assert!(globex.jobs(None, None, None).await.unwrap().jobs.is_empty());
    assert!(globex
        .runners(Tier::Workspace)
        .await
        .unwrap()
        .iter()
        .all(|r| r.workspace == "globex"));
    assert_eq!(globex.pool().await.unwrap().jobs.parked, 0);
    // Runner calls: another owner's job is 404, and it never leases it.
    assert!(lease(&globex_r, 0, 1).await.is_empty());
    let l = lease(&acme_r, 1000, 1).await.remove(0);
    assert_eq!(
        code(globex_r.heartbeat_job(job.id, l.epoch).await),
        "not_found"
    );
    assert_eq!(
        code(globex_r.complete(job.id, l.epoch, json!("forged")).await),
        "not_found"
    );
    assert_eq!(code(globex_r.release(job.id, l.epoch).await), "not_found");
    let hb = globex_r
        .runner_heartbeat(&wire::RunnerHeartbeat {
            running: Some(vec![wire::Running {
                id: job.id,
                epoch: l.epoch,
            }]),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(
        hb.cancelled,
        [job.id],
        "a foreign job in `running` is listed as cancelled"
    );
    assert_eq!(acme.job(job.id).await.unwrap().state, "leased");
}
