//! Enrolment and credentials: join codes are single use, short lived and opaque when bad;
//! ephemeral runners die with their job (or when left unseen); every authentication failure is
//! the same bytes; no plaintext secret reaches the database; failed authentication is rate
//! limited per address while valid credentials are served; a runner may advertise only the
//! capability vocabulary.

use leasehold::client::Client;
use leasehold::wire::{self, Tier};
use serde_json::{json, Value};

use crate::support::{
    code, connect, data_dump, dispatch, enrol_req, join_code, lease, pair, personal, to_runner,
    TestApp,
};

#[tokio::test]
async fn a_join_code_enrols_exactly_once_and_a_refused_request_does_not_burn_it() {
    let app = TestApp::spawn().await;
    let alice = app.operator("acme", "alice", false).await;
    let anon = Client::new(app.url(0), None);
    let code_text = join_code(&alice, Tier::Personal, false).await;
    assert!(code_text.starts_with("jc_") && code_text.len() == 46);
    // 400 first: the code survives.
    assert_eq!(
        crate::support::code(anon.enroll(&enrol_req(&code_text, "")).await),
        "bad_request"
    );
    // Ten machines race for one code: one wins.
    let requests: Vec<_> = (0..10)
        .map(|i| enrol_req(&code_text, &format!("box-{i}")))
        .collect();
    let racers = requests.iter().map(|req| anon.enroll(req));
    let results = futures_util::future::join_all(racers).await;
    let winners: Vec<_> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
    assert_eq!(winners.len(), 1, "exactly one enrolment succeeds");
    assert!(results
        .iter()
        .filter(|r| r.is_err())
        .all(|r| r.as_ref().unwrap_err().code() == Some("unauthorized")));
    let enrolled = winners[0];
    assert_eq!(enrolled.runner.owner, "alice");
    assert_eq!(enrolled.runner.approved_by.as_deref(), Some("alice"));
    assert_eq!(
        enrolled.runner.presence, "online",
        "enrolment counts as seen"
    );
    assert!(enrolled.token.starts_with("rnr_"));
    // The enrolled runner works, and shows in its owner's list.
    let r = anon.with_token(enrolled.token.clone());
    r.runner_heartbeat(&wire::RunnerHeartbeat::default())
        .await
        .unwrap();
    assert!(alice
        .runners(Tier::Personal)
        .await
        .unwrap()
        .iter()
        .any(|x| x.id == enrolled.runner.id));

    // A workspace code (admin only) enrols a workspace runner approved by the admin.
    let admin = app.operator("acme", "root", true).await;
    let ws_code = join_code(&admin, Tier::Workspace, false).await;
    let ws = anon.enroll(&enrol_req(&ws_code, "shared")).await.unwrap();
    assert_eq!(
        (ws.runner.owner.as_str(), ws.runner.approved_by.as_deref()),
        ("ws:acme", Some("root"))
    );
}

#[tokio::test]
async fn used_expired_unknown_and_malformed_codes_and_tokens_get_the_same_401_bytes() {
    let app = TestApp::spawn().await;
    let alice = app.operator("acme", "alice", false).await;
    let used = join_code(&alice, Tier::Personal, false).await;
    let anon = Client::new(app.url(0), None);
    anon.enroll(&enrol_req(&used, "first")).await.unwrap();
    let expired = join_code(&alice, Tier::Personal, false).await;
    // Expire it by moving the row's deadline (the database clock decides).
    let db = connect(&app.database_url).await;
    db.execute(
        "UPDATE join_codes SET expires_at = now() - interval '1 second' WHERE used_at IS NULL",
        &[],
    )
    .await
    .unwrap();
    let unknown = leasehold::domain::credentials::Secret::generate(
        leasehold::domain::credentials::Kind::JoinCode,
    );
    let api_key_as_code = app.key("acme", "alice", false).await;
    let http = reqwest::Client::new();
    let mut bodies = Vec::new();
    for bad in [
        used.as_str(),
        expired.as_str(),
        unknown.reveal(),
        "jc_short",
        api_key_as_code.as_str(),
    ] {
        let resp = http
            .post(format!("{}/v1/enroll", app.url(0)))
            .json(&enrol_req(bad, "x"))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), 401);
        bodies.push(resp.bytes().await.unwrap());
    }
    let revoked_runner = {
        let (runner, client) = pair(&alice, Tier::Personal, &[], 1).await;
        alice
            .revoke_runner(Tier::Personal, runner.id)
            .await
            .unwrap();
        client.token().unwrap().to_owned()
    };
    let resp = http
        .post(format!("{}/v1/runner/lease", app.url(0)))
        .bearer_auth(revoked_runner)
        .json(&json!({"wait_ms": 0}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 401);
    bodies.push(resp.bytes().await.unwrap());
    assert!(bodies.windows(2).all(|w| w[0] == w[1]), "{bodies:?}");
}

#[tokio::test]
async fn an_ephemeral_runners_token_dies_once_its_job_settles() {
    let app = TestApp::spawn().await;
    let alice = app.operator("acme", "alice", false).await;
    let code_text = join_code(&alice, Tier::Personal, true).await;
    let anon = Client::new(app.url(0), None);
    let enrolled = anon
        .enroll(&enrol_req(&code_text, "one-shot"))
        .await
        .unwrap();
    assert!(enrolled.runner.ephemeral);
    let r = anon.with_token(enrolled.token);
    let first = dispatch(&alice, personal(), json!(1)).await;
    let _second = dispatch(&alice, personal(), json!(2)).await;
    let l = lease(&r, 1000, 5).await;
    assert_eq!(l.len(), 1, "an ephemeral runner takes one job");
    assert_eq!(l[0].id, first.id);
    r.heartbeat_job(first.id, l[0].epoch).await.unwrap();
    // Settled by someone else (a cancel) still ends the token.
    alice.cancel(first.id).await.unwrap();
    assert_eq!(
        code(r.runner_heartbeat(&wire::RunnerHeartbeat::default()).await),
        "unauthorized"
    );
    assert_eq!(code(r.lease(&wire::Lease::default()).await), "unauthorized");
}

#[tokio::test]
async fn the_database_holds_no_plaintext_secret() {
    let app = TestApp::spawn().await;
    let admin = app.operator("acme", "root", true).await;
    let mut secrets = vec![admin.token().unwrap().to_owned()];
    secrets.push(
        admin
            .create_key("bob", wire::Role::Member)
            .await
            .unwrap()
            .key,
    );
    let (_, r) = pair(&admin, Tier::Workspace, &[], 1).await;
    secrets.push(r.token().unwrap().to_owned());
    let code_text = join_code(&admin, Tier::Personal, false).await;
    secrets.push(code_text.clone());
    let unused = join_code(&admin, Tier::Workspace, true).await;
    secrets.push(unused);
    let enrolled = Client::new(app.url(0), None)
        .enroll(&enrol_req(&code_text, "e"))
        .await
        .unwrap();
    secrets.push(enrolled.token);
    let dump = data_dump(&app.database_url);
    assert!(
        dump.contains("COPY public.runners"),
        "the dump has the data"
    );
    for s in &secrets {
        let body = &s[s.find('_').unwrap() + 1..];
        assert!(
            !dump.contains(body),
            "plaintext secret {}… found in the database dump",
            &s[..6]
        );
    }
}

#[tokio::test]
async fn failed_authentication_is_rate_limited_per_address_while_valid_credentials_are_served() {
    let app = TestApp::spawn_with(1, |c| {
        c.auth_burst = 3;
        c.auth_refill_per_s = 0.01;
    })
    .await;
    let alice = app.operator("acme", "alice", false).await;
    let http = reqwest::Client::new();
    let url = format!("{}/v1/pool", app.url(0));
    let mut statuses = Vec::new();
    let mut retry_after = None;
    for _ in 0..5 {
        let resp = http.get(&url).bearer_auth("ak_wrong").send().await.unwrap();
        statuses.push(resp.status().as_u16());
        if resp.status().as_u16() == 429 {
            retry_after = resp
                .headers()
                .get("retry-after")
                .map(|v| v.to_str().unwrap().parse::<u64>().unwrap());
            let body: Value = resp.json().await.unwrap();
            assert_eq!(body["error"]["code"], "rate_limited");
        }
    }
    assert_eq!(statuses, [401, 401, 401, 429, 429]);
    assert!(retry_after.is_some_and(|s| s >= 1));
    // A valid credential from the same address is still served.
    assert!(alice.pool().await.is_ok());
    // Enrolment is limited by the same bucket; health endpoints never are.
    let resp = http
        .post(format!("{}/v1/enroll", app.url(0)))
        .json(&enrol_req("jc_x", "x"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 429);
    for path in ["/healthz", "/metrics"] {
        assert_eq!(
            http.get(format!("{}{path}", app.url(0)))
                .send()
                .await
                .unwrap()
                .status()
                .as_u16(),
            200
        );
    }
}

#[tokio::test]
async fn the_capability_vocabulary_drops_unknown_advertised_names_and_refuses_unknown_required_ones(
) {
    let app =
        TestApp::spawn_with(1, |c| c.capability_vocabulary = Some("linux,docker".into())).await;
    let alice = app.operator("acme", "alice", false).await;
    let (runner, r) = pair(
        &alice,
        Tier::Personal,
        &["linux", "gpu", "Not Valid", "docker"],
        1,
    )
    .await;
    assert_eq!(runner.capabilities, ["docker", "linux"]);
    let mut d = wire::Dispatch::new(personal(), json!(null));
    d.required_capabilities = Some(vec!["gpu".into()]);
    assert_eq!(code(alice.dispatch(&d).await), "bad_request");
    let hb = r
        .runner_heartbeat(&wire::RunnerHeartbeat {
            capabilities: Some(vec!["docker".into(), "quantum".into()]),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(hb.runner.capabilities, ["docker"]);
}

#[tokio::test]
async fn an_ephemeral_runner_left_unseen_is_purged_and_its_named_jobs_rejected() {
    let app = TestApp::spawn_with(1, |c| c.ephemeral_purge_ms = 800).await;
    let alice = app.operator("acme", "alice", false).await;
    let code_text = join_code(&alice, Tier::Personal, true).await;
    let enrolled = Client::new(app.url(0), None)
        .enroll(&enrol_req(&code_text, "gone-quiet"))
        .await
        .unwrap();
    let named = dispatch(&alice, to_runner(enrolled.runner.id), json!(null)).await;
    let rejected = alice.wait_job(named.id, 15_000).await.unwrap();
    assert_eq!(rejected.error.unwrap()["reason"], "runner_revoked");
    assert!(!alice
        .runners(Tier::Personal)
        .await
        .unwrap()
        .iter()
        .any(|r| r.id == enrolled.runner.id));
    let r = Client::new(app.url(0), Some(enrolled.token));
    assert_eq!(
        code(r.runner_heartbeat(&wire::RunnerHeartbeat::default()).await),
        "unauthorized"
    );
}
