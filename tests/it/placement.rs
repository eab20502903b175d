//! Placement and trust (docs/api.md v1.1 "Placement", "Repository sources"): runner
//! versions, the dormancy ceiling and repository targets, over real HTTP on PostgreSQL.
//!
//! Invariants defended: an outdated runner (below the minimum by semver precedence, or with no
//! or a non-semver version) is refused leases with 409 `runner_outdated` and `min_version`
//! after its lease call's version is recorded, while its other calls keep working; it stops no
//! no-runner clock and counts for no preflight match (`runners_outdated` says why); a replica
//! started with a new minimum re-judges every runner. A runner unseen (or never seen) past the
//! dormancy ceiling is revoked with a revocation's effect on its jobs; a dormant one within it
//! keeps its pairing. Repository targets a runner advertises are recorded `pending`; only an
//! admin of its workspace or a personal runner's owner approves or revokes one; a revoked
//! target stays revoked when advertised again.

use std::time::Duration;

use leasehold::client::Client;
use leasehold::domain::version;
use leasehold::wire::{self, Tier};
use reqwest::Method;
use serde_json::{json, Value};

use crate::secrets::call;
use crate::support::{
    code, connect, dispatch, eventually, lease, pair, pair_as, personal, start_replica, to_runner,
    workspace_pool, TestApp,
};

const WAIT: Duration = Duration::from_secs(20);

async fn heartbeat(runner: &Client, version: Option<&str>) -> wire::Runner {
    runner
        .runner_heartbeat(&wire::RunnerHeartbeat {
            version: version.map(str::to_owned),
            ..Default::default()
        })
        .await
        .expect("runner heartbeat")
        .runner
}

fn lease_body(version: Option<&str>) -> Value {
    json!({"wait_ms": 0, "max_jobs": 1, "version": version})
}

#[tokio::test]
async fn an_outdated_runner_is_refused_leases_but_finishes_and_reports_what_it_holds() {
    let app = TestApp::spawn_with(1, |c| c.min_runner_version = version::parse("1.10.0")).await;
    let alice = app.operator("acme", "alice", false).await;
    let (paired, runner) = pair(&alice, Tier::Personal, &[], 2).await;
    assert!(
        paired.outdated,
        "no version yet: outdated while a minimum is set"
    );
    let token = runner.token().unwrap().to_owned();

    // 1.10.0 is not below 1.10.0 by precedence (as text it would sort below 1.9.0).
    let (status, body) = call(
        &app.url(0),
        &token,
        Method::POST,
        "/v1/runner/lease",
        Some(lease_body(Some("1.10.0"))),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let job = dispatch(&alice, personal(), json!("held")).await;
    let held = lease(&runner, 1000, 1).await;
    assert_eq!(held.len(), 1);
    assert_eq!(held[0].id, job.id);

    for v in ["1.9.0", "1.10.0-rc.1", "v1.10.0", "1.10"] {
        let (status, body) = call(
            &app.url(0),
            &token,
            Method::POST,
            "/v1/runner/lease",
            Some(lease_body(Some(v))),
        )
        .await;
        assert_eq!(status, 409, "{v}: {body}");
        assert_eq!(body["error"]["code"], json!("runner_outdated"), "{v}");
        assert_eq!(body["error"]["min_version"], json!("1.10.0"));
        let message = body["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("upgrade") && message.contains("1.10.0"),
            "{message}"
        );
        // The lease call's version was recorded before the check.
        let me = alice
            .runners(Tier::Personal)
            .await
            .unwrap()
            .into_iter()
            .find(|r| r.id == paired.id)
            .unwrap();
        assert_eq!(me.version.as_deref(), Some(v));
        assert!(me.outdated);
    }
    // Everything else still works: heartbeats, the held job's heartbeat, events, complete.
    let hb = heartbeat(&runner, None).await;
    assert!(
        hb.outdated,
        "a heartbeat without a version keeps the verdict"
    );
    runner.heartbeat_job(job.id, held[0].epoch).await.unwrap();
    runner
        .append_events(
            job.id,
            held[0].epoch,
            vec![wire::NewEvent {
                kind: "log".into(),
                data: Some(json!("x")),
            }],
        )
        .await
        .unwrap();
    let done = runner
        .complete(job.id, held[0].epoch, json!({"ok": true}))
        .await
        .unwrap();
    assert_eq!(done.state, "completed");

    // Upgraded: a heartbeat with a good version lifts the verdict, and leases work again.
    let hb = heartbeat(&runner, Some("1.10.1+build.5")).await;
    assert!(!hb.outdated);
    let (status, _) = call(
        &app.url(0),
        &token,
        Method::POST,
        "/v1/runner/lease",
        Some(lease_body(None)),
    )
    .await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn outdated_runners_stop_no_clock_and_preflight_says_why() {
    let app = TestApp::spawn_with(1, |c| c.min_runner_version = version::parse("2.0.0")).await;
    let alice = app.operator("acme", "alice", false).await;
    let (_, runner) = pair(&alice, Tier::Personal, &["docker"], 1).await;
    let hb = heartbeat(&runner, Some("1.99.0")).await;
    assert_eq!(hb.presence, "online");
    assert!(hb.outdated);

    let pre = wire::Preflight {
        target: personal(),
        required_capabilities: Some(vec!["docker".into()]),
        source: None,
    };
    let report = alice.preflight(&pre).await.unwrap();
    assert!(!report.ok);
    assert_eq!(report.blockers[0].code, "no_matching_runner");
    assert_eq!(report.warnings.len(), 1);
    assert_eq!(report.warnings[0].code, "runners_outdated");

    // Online but outdated: it does not keep a job waiting.
    let mut d = wire::Dispatch::new(personal(), json!("x"));
    d.required_capabilities = Some(vec!["docker".into()]);
    d.no_runner_timeout_ms = Some(1000);
    let job = alice.dispatch(&d).await.unwrap();
    let rejected = eventually(WAIT, "rejected no_runner", || async {
        let j = alice.job(job.id).await.ok()?;
        (j.state == "rejected").then_some(j)
    })
    .await;
    assert_eq!(rejected.error.unwrap()["reason"], json!("no_runner"));

    // Upgraded, it counts again.
    heartbeat(&runner, Some("2.0.0")).await;
    let report = alice.preflight(&pre).await.unwrap();
    assert!(report.ok, "{report:?}");
    assert!(report.warnings.is_empty());
}

#[tokio::test]
async fn a_replica_with_a_new_minimum_re_judges_every_runner() {
    let app = TestApp::spawn().await;
    let alice = app.operator("acme", "alice", false).await;
    let (_, runner) = pair(&alice, Tier::Personal, &[], 1).await;
    assert!(
        !heartbeat(&runner, Some("1.2.0")).await.outdated,
        "no minimum set"
    );
    let mut config = app.config.clone();
    config.min_runner_version = version::parse("1.10.0");
    let strict = start_replica(config).await;
    let strict_alice = Client::new(
        format!("http://{}", strict.addr),
        alice.token().map(str::to_owned),
    );
    eventually(WAIT, "re-judged outdated", || async {
        let rs = strict_alice.runners(Tier::Personal).await.ok()?;
        rs[0].outdated.then_some(())
    })
    .await;
}

#[tokio::test]
async fn the_dormancy_ceiling_revokes_gone_runners_and_keeps_dormant_ones() {
    let app = TestApp::spawn_with(1, |c| {
        c.dormancy_ceiling_ms = 60_000;
        c.presence_window_ms = 1_000;
    })
    .await;
    let admin = app.operator("acme", "root", true).await;
    let (gone, gone_client) = pair(&admin, Tier::Workspace, &[], 2).await;
    let (asleep, asleep_client) = pair(&admin, Tier::Workspace, &[], 1).await;
    let (never, _) = pair(&admin, Tier::Workspace, &[], 1).await;
    let (fresh, _) = pair(&admin, Tier::Workspace, &[], 1).await;

    let pool_job = dispatch(&admin, workspace_pool(), json!("pool")).await;
    let named = dispatch(&admin, to_runner(gone.id), json!("named")).await;
    let held = lease(&gone_client, 1000, 2).await;
    assert_eq!(held.len(), 2);
    heartbeat(&asleep_client, None).await;

    let db = connect(&app.database_url).await;
    db.execute(
        "UPDATE runners SET last_seen_at = now() - interval '2 minutes' WHERE id = $1",
        &[&gone.id],
    )
    .await
    .unwrap();
    db.execute(
        "UPDATE runners SET last_seen_at = now() - interval '30 seconds' WHERE id = $1",
        &[&asleep.id],
    )
    .await
    .unwrap();
    db.execute(
        "UPDATE runners SET created_at = now() - interval '2 minutes' WHERE id = $1",
        &[&never.id],
    )
    .await
    .unwrap();

    let roster = eventually(
        WAIT,
        "the gone and never-seen runners are reaped",
        || async {
            let rs = admin.runners(Tier::Workspace).await.ok()?;
            (rs.len() == 2).then_some(rs)
        },
    )
    .await;
    let ids: Vec<_> = roster.iter().map(|r| r.id).collect();
    assert!(
        ids.contains(&asleep.id) && ids.contains(&fresh.id),
        "{roster:?}"
    );
    let kept = roster.iter().find(|r| r.id == asleep.id).unwrap();
    assert_eq!(
        kept.presence, "dormant",
        "dormant within the ceiling keeps its pairing"
    );
    assert_eq!(
        code(
            gone_client
                .runner_heartbeat(&wire::RunnerHeartbeat::default())
                .await
        ),
        "unauthorized"
    );
    heartbeat(&asleep_client, None).await;

    // A revocation's effect: the named job is rejected, the pool job parked for another runner.
    let named = admin.job(named.id).await.unwrap();
    assert_eq!(named.state, "rejected");
    assert_eq!(named.error.unwrap()["reason"], json!("runner_revoked"));
    let pool_job = admin.job(pool_job.id).await.unwrap();
    assert_eq!(pool_job.state, "parked");
    let again = lease(&asleep_client, 1000, 1).await;
    assert_eq!(again[0].id, pool_job.id);
    assert!(again[0].epoch > held.iter().find(|j| j.id == pool_job.id).unwrap().epoch);
}

fn target(repository: &str) -> wire::AdvertisedTarget {
    wire::AdvertisedTarget::git(repository)
}

fn status_of(runner: &wire::Runner, repository: &str) -> String {
    runner
        .repo_targets
        .iter()
        .find(|t| t.repository == repository)
        .unwrap_or_else(|| panic!("{repository} not in {:?}", runner.repo_targets))
        .status
        .to_string()
}

#[tokio::test]
async fn repository_targets_are_advertised_pending_and_only_operators_change_them() {
    let app = TestApp::spawn().await;
    let admin = app.operator("acme", "root", true).await;
    let alice = app.operator("acme", "alice", false).await;
    let bob = app.operator("acme", "bob", false).await;
    const A: &str = "https://git.example.com/acme/a.git";
    const B: &str = "https://git.example.com/acme/b.git";
    const C: &str = "file:///srv/git/c.git";

    let (created, ws_runner) = pair_as(
        &admin,
        Tier::Workspace,
        &wire::CreateRunner {
            label: "builder".into(),
            repo_targets: Some(vec![target(A), target(B), target(A)]),
            ..Default::default()
        },
    )
    .await;
    assert_eq!(created.repo_targets.len(), 2, "a repeat is recorded once");
    assert!(created
        .repo_targets
        .iter()
        .all(|t| t.status == "pending" && t.provider == "git"));
    let a_id = created
        .repo_targets
        .iter()
        .find(|t| t.repository == A)
        .unwrap()
        .id;

    // The runner's own calls only add pending targets.
    let hb = ws_runner
        .runner_heartbeat(&wire::RunnerHeartbeat {
            repo_targets: Some(vec![target(A), target(C)]),
            ..Default::default()
        })
        .await
        .unwrap()
        .runner;
    assert_eq!(
        hb.repo_targets.len(),
        3,
        "a target no longer advertised keeps its record"
    );
    assert_eq!(status_of(&hb, C), "pending");

    assert_eq!(
        code(alice.set_repo_target(hb.id, a_id, true).await),
        "forbidden",
        "member, workspace runner"
    );
    let approved = admin.set_repo_target(hb.id, a_id, true).await.unwrap();
    assert_eq!(status_of(&approved, A), "approved");
    assert_eq!(status_of(&approved, B), "pending");
    let hb = ws_runner
        .runner_heartbeat(&wire::RunnerHeartbeat {
            repo_targets: Some(vec![target(A)]),
            ..Default::default()
        })
        .await
        .unwrap()
        .runner;
    assert_eq!(
        status_of(&hb, A),
        "approved",
        "re-advertising changes no status"
    );
    let revoked = admin.set_repo_target(hb.id, a_id, false).await.unwrap();
    assert_eq!(status_of(&revoked, A), "revoked");
    // A lease call advertises too: A stays revoked, D arrives pending.
    const D: &str = "https://git.example.com/acme/d.git";
    let (status, body) = call(
        &app.url(0),
        ws_runner.token().unwrap(),
        Method::POST,
        "/v1/runner/lease",
        Some(json!({"wait_ms": 0, "repo_targets": [{"provider": "git", "repository": A}, {"provider": "git", "repository": D, "label": "d"}]})),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let listed = alice.runners(Tier::Workspace).await.unwrap();
    let seen = listed.iter().find(|r| r.id == hb.id).unwrap();
    assert_eq!(
        status_of(seen, A),
        "revoked",
        "revoked stays revoked when advertised again"
    );
    assert_eq!(status_of(seen, D), "pending");
    assert_eq!(
        seen.repo_targets
            .iter()
            .find(|t| t.repository == D)
            .unwrap()
            .label
            .as_deref(),
        Some("d")
    );
    let again = admin.set_repo_target(hb.id, a_id, true).await.unwrap();
    assert_eq!(
        status_of(&again, A),
        "approved",
        "an admin may approve again"
    );

    // Personal runners: the owner or an admin; another member sees nothing (404).
    let code_text = alice
        .create_join_code(&wire::CreateJoinCode {
            tier: Tier::Personal,
            ttl_s: None,
            ephemeral: None,
        })
        .await
        .unwrap()
        .code;
    let enrolled = Client::new(app.url(0), None)
        .enroll(&wire::Enroll {
            code: code_text,
            label: "laptop".into(),
            repo_targets: Some(vec![target(B)]),
            ..Default::default()
        })
        .await
        .unwrap()
        .runner;
    let b_id = enrolled.repo_targets[0].id;
    assert_eq!(enrolled.repo_targets[0].status, "pending");
    assert_eq!(
        code(bob.set_repo_target(enrolled.id, b_id, true).await),
        "not_found"
    );
    assert_eq!(
        status_of(
            &alice
                .set_repo_target(enrolled.id, b_id, true)
                .await
                .unwrap(),
            B
        ),
        "approved"
    );
    assert_eq!(
        status_of(
            &admin
                .set_repo_target(enrolled.id, b_id, false)
                .await
                .unwrap(),
            B
        ),
        "revoked"
    );
    // Another workspace's admin, an unknown target, a malformed id.
    let globex = app.operator("globex", "root", true).await;
    assert_eq!(
        code(globex.set_repo_target(enrolled.id, b_id, true).await),
        "not_found"
    );
    assert_eq!(
        code(admin.set_repo_target(enrolled.id, a_id, true).await),
        "not_found"
    );
    let (status, _) = call(
        &app.url(0),
        admin.token().unwrap(),
        Method::POST,
        &format!("/v1/runners/{}/repo-targets/nope/approve", enrolled.id),
        None,
    )
    .await;
    assert_eq!(status, 400);
}

#[tokio::test]
async fn more_than_a_hundred_targets_or_a_malformed_one_is_400_naming_it() {
    let app = TestApp::spawn().await;
    let alice = app.operator("acme", "alice", false).await;
    let (_, runner) = pair(&alice, Tier::Personal, &[], 1).await;
    let many: Vec<Value> = (0..101)
        .map(|i| json!({"provider": "git", "repository": format!("https://h/r{i}.git")}))
        .collect();
    let hundred: Vec<Value> = many[..100].to_vec();
    let token = runner.token().unwrap();
    let refused = [
        (json!(many), "repo_targets"),
        (
            json!([{"provider": "Git!", "repository": "x"}]),
            "repo_targets[0].provider",
        ),
    ];
    for path in ["/v1/runner/heartbeat", "/v1/runner/lease"] {
        for (targets, field) in &refused {
            let (status, body) = call(
                &app.url(0),
                token,
                Method::POST,
                path,
                Some(json!({"wait_ms": 0, "repo_targets": targets})),
            )
            .await;
            assert_eq!(status, 400, "{path}");
            assert!(
                body["error"]["message"]
                    .as_str()
                    .unwrap()
                    .starts_with(field),
                "{body}"
            );
        }
    }
    let (status, body) = call(
        &app.url(0),
        token,
        Method::POST,
        "/v1/runner/heartbeat",
        Some(json!({"repo_targets": hundred})),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["runner"]["repo_targets"].as_array().unwrap().len(),
        100
    );
    let (status, _) = call(
        &app.url(0),
        alice.token().unwrap(),
        Method::POST,
        "/v1/runners",
        Some(json!({"label": "x", "repo_targets": many})),
    )
    .await;
    assert_eq!(status, 400);
}

fn any_pool() -> wire::Target {
    wire::Target::Pool {
        pool: wire::PoolName::Any,
    }
}

#[tokio::test]
async fn an_any_job_goes_to_either_tier_and_is_billed_by_who_held_the_lease() {
    let app = TestApp::spawn().await;
    let admin = app.operator("acme", "root", true).await;
    let alice = app.operator("acme", "alice", false).await;

    let pre = wire::Preflight {
        target: any_pool(),
        required_capabilities: None,
        source: None,
    };
    assert!(!alice.preflight(&pre).await.unwrap().ok, "no runner yet");
    let (_, ws_runner) = pair(&admin, Tier::Workspace, &[], 1).await;
    heartbeat(&ws_runner, None).await;
    let report = alice.preflight(&pre).await.unwrap();
    assert!(
        report.ok && report.warnings.is_empty(),
        "a workspace runner counts: {report:?}"
    );

    let first = dispatch(&alice, any_pool(), json!("first")).await;
    assert_eq!(first.pool.as_deref(), Some("any"));
    assert_eq!(first.owner, "alice");
    assert_eq!(first.billing_tenant, None, "null until leased");
    assert_eq!(
        alice.pool().await.unwrap().jobs.parked,
        1,
        "pool counts count it"
    );

    // The workspace runner takes it: billed to the workspace, provenance names its owner.
    let held = lease(&ws_runner, 1000, 1).await;
    assert_eq!(held[0].id, first.id);
    assert_eq!(
        alice.job(first.id).await.unwrap().billing_tenant.as_deref(),
        Some("acme")
    );
    ws_runner
        .heartbeat_job(first.id, held[0].epoch)
        .await
        .unwrap();
    let done = ws_runner
        .complete(first.id, held[0].epoch, json!(1))
        .await
        .unwrap();
    assert_eq!(done.billing_tenant.as_deref(), Some("acme"));
    assert_eq!(done.provenance.unwrap()["by"], json!("ws:acme"));

    // Alice's own runner takes the next one: own-pays.
    let (_, mine) = pair(&alice, Tier::Personal, &[], 1).await;
    let second = dispatch(&alice, any_pool(), json!("second")).await;
    let held = lease(&mine, 1000, 1).await;
    assert_eq!(held[0].id, second.id);
    let done = mine
        .complete(second.id, held[0].epoch, json!(2))
        .await
        .unwrap();
    assert_eq!(done.billing_tenant, None);
    assert_eq!(done.provenance.unwrap()["by"], json!("alice"));

    // `pool` is on every job.
    let p = dispatch(&alice, personal(), json!("p")).await;
    let w = dispatch(&alice, workspace_pool(), json!("w")).await;
    let (named_runner, _) = pair(&alice, Tier::Personal, &[], 1).await;
    let n = dispatch(&alice, to_runner(named_runner.id), json!("n")).await;
    assert_eq!(p.pool.as_deref(), Some("personal"));
    assert_eq!(w.pool.as_deref(), Some("workspace"));
    assert_eq!(n.pool, None);
    let raw = call(
        &app.url(0),
        alice.token().unwrap(),
        Method::GET,
        &format!("/v1/jobs/{}", n.id),
        None,
    )
    .await;
    assert!(
        raw.1.as_object().unwrap().contains_key("pool"),
        "present, null: {}",
        raw.1
    );
    assert_eq!(raw.1["secrets"], json!([]));
    assert_eq!(raw.1["source"], Value::Null);
}

#[tokio::test]
async fn a_canary_runner_skips_untagged_pool_jobs_and_rejects_untagged_named_ones() {
    let app = TestApp::spawn().await;
    let admin = app.operator("acme", "root", true).await;
    let (created, canary) = pair_as(
        &admin,
        Tier::Workspace,
        &wire::CreateRunner {
            label: "canary".into(),
            capabilities: Some(vec!["linux".into()]),
            exclusive: Some(vec!["canary".into()]),
            ..Default::default()
        },
    )
    .await;
    assert_eq!(created.exclusive, ["canary"]);
    assert_eq!(
        created.capabilities,
        ["canary", "linux"],
        "an exclusive name is a capability"
    );
    let canary_id = created.id;

    // Pool: an untagged job is skipped (it stays parked for another runner).
    let untagged = dispatch(&admin, workspace_pool(), json!("untagged")).await;
    assert!(lease(&canary, 0, 1).await.is_empty(), "skipped");
    assert_eq!(admin.job(untagged.id).await.unwrap().state, "parked");
    let mut d = wire::Dispatch::new(workspace_pool(), json!("tagged"));
    d.required_capabilities = Some(vec!["canary".into(), "linux".into()]);
    let tagged = admin.dispatch(&d).await.unwrap();
    let got = lease(&canary, 0, 1).await;
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].id, tagged.id);

    // Preflight sees a canary runner only for jobs that require its names.
    let pre = |caps: &[&str]| wire::Preflight {
        target: workspace_pool(),
        required_capabilities: Some(caps.iter().map(|s| s.to_string()).collect()),
        source: None,
    };
    assert_eq!(
        admin.preflight(&pre(&["linux"])).await.unwrap().blockers[0].code,
        "no_matching_runner"
    );
    assert!(admin.preflight(&pre(&["canary"])).await.unwrap().ok);

    // Named: 422 at dispatch where known...
    let named = to_runner(canary_id);
    assert_eq!(
        code(
            admin
                .dispatch(&wire::Dispatch::new(named.clone(), json!("x")))
                .await
        ),
        "capability_mismatch"
    );
    // ...and rejected at lease for a job dispatched before the runner turned canary.
    let (plain, plain_client) = pair(&admin, Tier::Workspace, &["linux"], 1).await;
    let before = dispatch(&admin, to_runner(plain.id), json!("before")).await;
    plain_client
        .runner_heartbeat(&wire::RunnerHeartbeat {
            exclusive: Some(vec!["canary".into()]),
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(lease(&plain_client, 0, 1).await.is_empty());
    let rejected = admin.job(before.id).await.unwrap();
    assert_eq!(rejected.state, "rejected");
    assert_eq!(
        rejected.error.unwrap()["reason"],
        json!("capability_mismatch")
    );
    // The untagged pool job still waits for an ordinary runner.
    let (_, ordinary) = pair(&admin, Tier::Workspace, &[], 1).await;
    assert_eq!(lease(&ordinary, 0, 1).await[0].id, untagged.id);
}

/// The claim reads plain and constrained pool jobs by separate scans (migration 0012): a runner
/// that can run both still takes them in one order, highest priority first, FIFO by id across
/// both, and passes by a job it cannot run without taking or touching it.
#[tokio::test]
async fn plain_and_constrained_pool_jobs_are_taken_in_one_priority_order() {
    let app = TestApp::spawn().await;
    let admin = app.operator("acme", "root", true).await;
    let job = |caps: &[&str], priority: i64, tag: &str| {
        let mut d = wire::Dispatch::new(workspace_pool(), json!(tag));
        d.required_capabilities = Some(caps.iter().map(|c| c.to_string()).collect());
        d.priority = Some(priority);
        d
    };
    let mut ids = Vec::new();
    for d in [
        job(&["gpu"], 9, "unfit"),
        job(&[], 0, "plain low"),
        job(&["linux"], 0, "linux low"),
        job(&[], 5, "plain high"),
        job(&["linux"], 5, "linux high"),
    ] {
        ids.push(admin.dispatch(&d).await.unwrap().id);
    }
    let (_, runner) = pair(&admin, Tier::Workspace, &["linux"], 4).await;
    let mut order = Vec::new();
    for _ in 0..4 {
        let got = lease(&runner, 0, 1).await;
        assert_eq!(got.len(), 1);
        order.push(got[0].id);
    }
    assert_eq!(order, [ids[3], ids[4], ids[1], ids[2]]);
    assert!(
        lease(&runner, 0, 1).await.is_empty(),
        "the gpu job is not taken"
    );
    let unfit = admin.job(ids[0]).await.unwrap();
    assert_eq!((unfit.state.as_str(), unfit.attempts), ("parked", 0));
}

const REPO: &str = "https://git.example.com/acme/app.git";
const SHA: &str = "0123456789abcdef0123456789abcdef01234567";

fn source_json(credential: Option<&str>) -> Value {
    let mut s = json!({"provider": "git", "repository": REPO, "commit_sha": SHA, "ref": "main"});
    if let Some(c) = credential {
        s["credential_secret"] = json!(c);
    }
    s
}

#[tokio::test]
async fn a_source_job_reaches_only_a_runner_holding_an_approved_target() {
    let app = TestApp::spawn().await;
    let admin = app.operator("acme", "root", true).await;
    let (created, builder) = pair_as(
        &admin,
        Tier::Workspace,
        &wire::CreateRunner {
            label: "builder".into(),
            repo_targets: Some(vec![target(REPO)]),
            ..Default::default()
        },
    )
    .await;
    let (builder_id, target_id) = (created.id, created.repo_targets[0].id);
    let (_, other) = pair(&admin, Tier::Workspace, &[], 1).await;
    heartbeat(&builder, None).await;

    let mut d = wire::Dispatch::new(workspace_pool(), json!({"argv": ["make"]}));
    d.source = Some(source_json(None));
    let pre = wire::Preflight {
        target: workspace_pool(),
        required_capabilities: None,
        source: Some(source_json(None)),
    };
    let report = admin.preflight(&pre).await.unwrap();
    assert_eq!(report.blockers[0].code, "no_approved_target", "{report:?}");
    let job = admin.dispatch(&d).await.unwrap();
    assert_eq!(job.source.as_ref().unwrap().commit_sha, SHA);
    assert!(lease(&builder, 0, 1).await.is_empty(), "pending: refused");
    assert!(lease(&other, 0, 1).await.is_empty(), "no target: refused");
    let named = to_runner(builder_id);
    let mut nd = wire::Dispatch::new(named.clone(), json!({"argv": ["make"]}));
    nd.source = Some(source_json(None));
    assert_eq!(
        code(admin.dispatch(&nd).await),
        "capability_mismatch",
        "422 while pending"
    );

    admin
        .set_repo_target(builder_id, target_id, true)
        .await
        .unwrap();
    assert!(admin.preflight(&pre).await.unwrap().ok);
    let got = lease(&builder, 0, 1).await;
    assert_eq!(got[0].id, job.id);
    let src = got[0].source.as_ref().unwrap();
    assert_eq!(
        (src.repository.as_str(), src.commit_sha.as_str()),
        (REPO, SHA)
    );
    assert_eq!(src.git_ref.as_deref(), Some("main"));
    assert!(src.credential.is_none());

    // A job named for it while approved, then the target revoked: rejected at lease, and new
    // pool jobs with that source are not taken. Settled jobs do not change.
    builder
        .complete(job.id, got[0].epoch, json!(0))
        .await
        .unwrap();
    let named_job = admin.dispatch(&nd).await.unwrap();
    let pooled = admin.dispatch(&d).await.unwrap();
    admin
        .set_repo_target(builder_id, target_id, false)
        .await
        .unwrap();
    assert!(lease(&builder, 0, 2).await.is_empty());
    let rejected = admin.job(named_job.id).await.unwrap();
    assert_eq!(rejected.state, "rejected");
    assert_eq!(
        rejected.error.unwrap()["reason"],
        json!("capability_mismatch")
    );
    assert_eq!(admin.job(pooled.id).await.unwrap().state, "parked");
    assert_eq!(admin.job(job.id).await.unwrap().state, "completed");
    let (status, body) = call(&app.url(0), admin.token().unwrap(), Method::POST, "/v1/jobs",
        Some(json!({"target": {"pool": "workspace"}, "payload": 1, "source": {"provider": "git", "repository": REPO, "commit_sha": "ABC"}}))).await;
    assert_eq!(status, 400);
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("source.commit_sha"),
        "{body}"
    );
}

/// Whether the sweeper judged `job` and kept it parked: its next no-runner check moved past
/// its first deadline (dispatch + timeout), which happens only when a runner that could take it
/// was online.
async fn kept_waiting(app: &TestApp, job: uuid::Uuid) -> bool {
    let db = connect(&app.database_url).await;
    let row = db
        .query_one(
            "SELECT state, no_runner_check_at > created_at + no_runner_timeout_ms * interval '1 millisecond' AS moved FROM jobs WHERE id = $1",
            &[&job],
        )
        .await
        .unwrap();
    row.get::<_, &str>("state") == "parked" && row.get::<_, bool>("moved")
}

#[tokio::test]
async fn the_no_runner_clock_counts_both_tiers_for_any_jobs_and_only_approved_targets_for_sources()
{
    let app = TestApp::spawn_with(1, |c| c.presence_window_ms = 60_000).await;
    let admin = app.operator("acme", "root", true).await;
    let alice = app.operator("acme", "alice", false).await;
    let (created, ws) = pair_as(
        &admin,
        Tier::Workspace,
        &wire::CreateRunner {
            label: "ws".into(),
            capacity: Some(1),
            repo_targets: Some(vec![target(REPO)]),
            ..Default::default()
        },
    )
    .await;
    // Busy: it holds a job, so it takes nothing else but stays online.
    dispatch(&admin, workspace_pool(), json!("busy")).await;
    assert_eq!(lease(&ws, 1000, 1).await.len(), 1);

    let mut any = wire::Dispatch::new(any_pool(), json!("any"));
    any.no_runner_timeout_ms = Some(1000);
    let any = alice.dispatch(&any).await.unwrap();
    let mut sourced = wire::Dispatch::new(workspace_pool(), json!("sourced"));
    sourced.no_runner_timeout_ms = Some(1000);
    sourced.source = Some(source_json(None));
    let pending = admin.dispatch(&sourced).await.unwrap();

    // The workspace runner is online: it keeps alice's any job waiting; its target is only
    // pending, so the sourced job is rejected no_runner.
    eventually(WAIT, "the any job judged and kept", || async {
        kept_waiting(&app, any.id).await.then_some(())
    })
    .await;
    let rejected = eventually(WAIT, "the sourced job rejected", || async {
        let j = admin.job(pending.id).await.ok()?;
        (j.state == "rejected").then_some(j)
    })
    .await;
    assert_eq!(rejected.error.unwrap()["reason"], json!("no_runner"));

    admin
        .set_repo_target(created.id, created.repo_targets[0].id, true)
        .await
        .unwrap();
    let approved = admin.dispatch(&sourced).await.unwrap();
    eventually(WAIT, "the sourced job judged and kept", || async {
        kept_waiting(&app, approved.id).await.then_some(())
    })
    .await;
}

/// The statements placement adds around the claim reach their rows by key in generic plans
/// (as the replicas run them), on the table `plans.rs` loads: the lease call's advertisement by
/// token, the secret-missing rejection and the give-back by primary key, secrets by their key.
#[tokio::test]
async fn placement_statements_reach_their_rows_by_key_in_generic_plans() {
    use crate::plans::{assert_plan, realistic_table};
    use leasehold::store::sql;
    let app = TestApp::spawn().await;
    connect(&app.database_url)
        .await
        .batch_execute(
            "INSERT INTO secrets (workspace, name, nonce, ciphertext)
             SELECT 'ws' || (g % 50), 'S' || g, substring(sha256(g::text::bytea) FROM 1 FOR 12),
                    '\\x00'::bytea
               FROM generate_series(1, 5000) g",
        )
        .await
        .unwrap();
    realistic_table(&app.database_url).await;
    let job = "'00000000-0000-7000-8000-000000000001'::uuid";
    let token = "sha256('token1'::bytea)";
    let statements: Vec<(&'static str, String)> = vec![
        (sql::RUNNER_ADVERTISE, format!("{token}, '1.0.0', false, ARRAY[]::uuid[], ARRAY[]::text[], ARRAY[]::text[], ARRAY[]::text[]")),
        (sql::LEASE_REJECT_SECRET, format!("{job}, 1, {token}, 'X', 'secret_missing'")),
        (sql::LEASE_GIVE_BACK, format!("ARRAY[{job}], ARRAY[1::bigint], {token}, 'caller_gone'")),
        (sql::SECRETS_SEALED, "'acme', ARRAY['X']".to_owned()),
    ];
    let plans = app
        .store
        .generic_plans(
            &statements
                .iter()
                .map(|(s, a)| (*s, a.as_str()))
                .collect::<Vec<_>>(),
        )
        .await
        .unwrap();
    assert_plan(
        "runner_advertise",
        &plans[0],
        &["runners_token_hash_key"],
        &["Seq Scan on runners"],
    );
    for (name, plan) in [
        ("lease_reject_secret", &plans[1]),
        ("lease_give_back", &plans[2]),
    ] {
        assert_plan(
            name,
            plan,
            &["jobs_pkey", "runners_token_hash_key"],
            &["Seq Scan on jobs", "jobs_leased_since"],
        );
    }
    assert_plan(
        "secrets_sealed",
        &plans[3],
        &["secrets_pkey"],
        &["Seq Scan on secrets"],
    );
}
