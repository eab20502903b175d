//! Enrolment and hostile input: join codes are single use, short lived and opaque when bad;
//! ephemeral runners die with their job; every authentication failure is the same bytes;
//! no plaintext secret reaches the database; failed authentication is rate limited per address
//! while valid credentials are served; tenants never see each other; a few thousand malformed
//! requests across every route produce no 5xx and leave the service live.

use std::time::Duration;

use leasehold::client::Client;
use leasehold::wire::{self, Tier};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use reqwest::Method;
use serde_json::{json, Value};

use crate::support::{code, connect, dispatch, lease, pair, personal, TestApp};

fn enrol_req(code: &str, label: &str) -> wire::Enroll {
    wire::Enroll {
        code: code.into(),
        label: label.into(),
        os: Some("linux".into()),
        version: Some("0.1.0".into()),
        capabilities: Some(vec!["linux".into()]),
        capacity: Some(1),
        ..Default::default()
    }
}

async fn join_code(operator: &Client, tier: Tier, ephemeral: bool) -> String {
    operator
        .create_join_code(&wire::CreateJoinCode {
            tier,
            ttl_s: Some(600),
            ephemeral: Some(ephemeral),
        })
        .await
        .unwrap()
        .code
}

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
    let pg_dump = leasehold::embedded_pg::find_tool("pg_dump")
        .expect("pg_dump installed with the server binaries");
    let out = std::process::Command::new(pg_dump)
        .arg("--data-only")
        .arg(&app.database_url)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dump = String::from_utf8_lossy(&out.stdout);
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
async fn tenants_never_reach_each_others_objects() {
    let app = TestApp::spawn().await;
    let acme = app.operator("acme", "alice", true).await;
    let globex = app.operator("globex", "alice2", true).await;
    let (acme_runner, acme_r) = pair(&acme, Tier::Workspace, &[], 1).await;
    let (_, globex_r) = pair(&globex, Tier::Workspace, &[], 1).await;
    let job = dispatch(
        &acme,
        wire::Target::Pool {
            pool: leasehold::wire::PoolName::Workspace,
        },
        json!("acme only"),
    )
    .await;
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
    let named = wire::Target::Runner {
        runner_id: acme_runner.id,
    };
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

// ---- random input ------------------------------------------------------------------------

fn random_value(rng: &mut StdRng, depth: u32) -> Value {
    match rng.random_range(0..if depth == 0 { 7 } else { 9 }) {
        0 => Value::Null,
        1 => json!(rng.random::<bool>()),
        2 => json!(rng.random::<i64>()),
        3 => json!(
            [
                0,
                -1,
                1,
                256,
                257,
                1000,
                1001,
                -1001,
                60_001,
                i64::MAX,
                i64::MIN
            ][rng.random_range(0..11)]
        ),
        4 => json!(rng.random::<f64>() * 1e6),
        5 => json!(random_string(rng)),
        6 => json!(
            [
                "",
                "personal",
                "workspace",
                "admin",
                "member",
                "command",
                "stdout",
                "state",
                "*"
            ][rng.random_range(0..9)]
        ),
        7 => Value::Array(
            (0..rng.random_range(0..4))
                .map(|_| random_value(rng, depth - 1))
                .collect(),
        ),
        _ => {
            let mut map = serde_json::Map::new();
            for _ in 0..rng.random_range(0..4) {
                map.insert(random_string(rng), random_value(rng, depth - 1));
            }
            Value::Object(map)
        }
    }
}

fn random_string(rng: &mut StdRng) -> String {
    let choices = [
        "a", "Z", "\u{0}", "é", "💥", " ", "/", "%", "\"", "\\", "-", "_", ":", "\n", "ws:", "0",
    ];
    let len = if rng.random_range(0..20) == 0 {
        300
    } else {
        rng.random_range(0..12)
    };
    (0..len)
        .map(|_| choices[rng.random_range(0..choices.len())])
        .collect()
}

/// Mutate a valid body: replace, drop or add a field, or swap the whole thing.
fn mutate(rng: &mut StdRng, valid: &Value) -> Value {
    let mut v = valid.clone();
    match rng.random_range(0..5) {
        0 => random_value(rng, 3),
        1 => {
            if let Value::Object(map) = &mut v {
                if let Some(k) = map
                    .keys()
                    .nth(rng.random_range(0..map.len().max(1)))
                    .cloned()
                {
                    map.remove(&k);
                }
            }
            v
        }
        2 => {
            if let Value::Object(map) = &mut v {
                let r = random_value(rng, 2);
                map.insert("unknown_field".into(), r);
            }
            v
        }
        _ => {
            if let Value::Object(map) = &mut v {
                let keys: Vec<String> = map.keys().cloned().collect();
                if !keys.is_empty() {
                    let k = &keys[rng.random_range(0..keys.len())];
                    map.insert(k.clone(), random_value(rng, 3));
                }
            }
            v
        }
    }
}

#[tokio::test]
async fn a_few_thousand_malformed_requests_across_every_route_produce_no_5xx() {
    let app = TestApp::spawn_with(1, |c| c.max_wait_ms = 20).await;
    let admin = app.operator("acme", "root", true).await;
    let member_key = app.key("acme", "bob", false).await;
    let foreign_key = app.key("globex", "eve", true).await;
    let (runner, r) = pair(&admin, Tier::Personal, &["linux"], 4).await;
    let runner_token = r.token().unwrap().to_owned();
    let admin_key = admin.token().unwrap().to_owned();
    let job = dispatch(&admin, personal(), json!("target")).await;
    let leased_job = dispatch(&admin, personal(), json!("leased")).await;
    let held = lease(&r, 1000, 2).await;
    let epoch = held[0].epoch;
    let code_text = join_code(&admin, Tier::Personal, false).await;

    let ids = [
        job.id.to_string(),
        leased_job.id.to_string(),
        runner.id.to_string(),
        uuid::Uuid::now_v7().to_string(),
        "not-a-uuid".into(),
        "%FF%FE".into(),
        "..%2F..".into(),
        "x".repeat(500),
        String::new(),
    ];
    // (method, path with {id}, a valid body)
    let routes: Vec<(Method, &str, Value)> = vec![
        (
            Method::POST,
            "/v1/enroll",
            serde_json::to_value(enrol_req(&code_text, "fuzz")).unwrap(),
        ),
        (
            Method::POST,
            "/v1/runners",
            json!({"label": "x", "os": "linux", "capabilities": ["linux"], "capacity": 2}),
        ),
        (Method::GET, "/v1/runners", Value::Null),
        (Method::DELETE, "/v1/runners/{id}", Value::Null),
        (
            Method::POST,
            "/v1/workspace/runners",
            json!({"label": "x", "capacity": 1}),
        ),
        (Method::GET, "/v1/workspace/runners", Value::Null),
        (Method::DELETE, "/v1/workspace/runners/{id}", Value::Null),
        (
            Method::POST,
            "/v1/join-codes",
            json!({"tier": "personal", "ttl_s": 60, "ephemeral": false}),
        ),
        (
            Method::POST,
            "/v1/keys",
            json!({"subject": "s", "role": "member"}),
        ),
        (Method::DELETE, "/v1/keys/{id}", Value::Null),
        (
            Method::POST,
            "/v1/jobs",
            json!({"target": {"pool": "personal"}, "kind": "command", "payload": {"argv": ["x"]},
                   "required_capabilities": ["linux"], "priority": 1, "max_attempts": 2,
                   "no_runner_timeout_ms": 60000, "queue_timeout_ms": 60000}),
        ),
        (Method::GET, "/v1/jobs/{id}?wait_ms=5", Value::Null),
        (Method::GET, "/v1/jobs?state=parked&limit=5", Value::Null),
        (Method::POST, "/v1/jobs/{id}/cancel", Value::Null),
        (
            Method::GET,
            "/v1/jobs/{id}/events?after=0&limit=10&wait_ms=5",
            Value::Null,
        ),
        (
            Method::POST,
            "/v1/preflight",
            json!({"target": {"runner_id": runner.id}, "required_capabilities": ["linux"]}),
        ),
        (Method::GET, "/v1/pool", Value::Null),
        (
            Method::POST,
            "/v1/runner/heartbeat",
            json!({"version": "1", "capabilities": ["linux"], "capacity": 4, "running": [{"id": job.id, "epoch": 1}]}),
        ),
        (
            Method::POST,
            "/v1/runner/lease",
            json!({"wait_ms": 5, "max_jobs": 2, "capabilities": ["linux"]}),
        ),
        (
            Method::POST,
            "/v1/runner/jobs/{id}/heartbeat",
            json!({"epoch": epoch}),
        ),
        (
            Method::POST,
            "/v1/runner/jobs/{id}/events",
            json!({"epoch": epoch, "events": [{"kind": "stdout", "data": "x"}]}),
        ),
        (
            Method::POST,
            "/v1/runner/jobs/{id}/complete",
            json!({"epoch": epoch, "result": {"exit_code": 0}}),
        ),
        (
            Method::POST,
            "/v1/runner/jobs/{id}/fail",
            json!({"epoch": epoch, "message": "m"}),
        ),
        (
            Method::POST,
            "/v1/runner/jobs/{id}/release",
            json!({"epoch": epoch}),
        ),
    ];
    let tokens = [
        Some(admin_key.as_str()),
        Some(member_key.as_str()),
        Some(foreign_key.as_str()),
        Some(runner_token.as_str()),
        Some("garbage"),
        None,
    ];
    let queries = [
        "",
        "?wait_ms=-1",
        "?wait_ms=abc",
        "?limit=0",
        "?limit=501",
        "?after=zzz",
        "?state=nope",
        "?after=-5",
        "?wait_ms=99999999",
        "?%ZZ=1",
    ];
    let methods = [
        Method::GET,
        Method::POST,
        Method::DELETE,
        Method::PUT,
        Method::PATCH,
    ];
    let mut rng = StdRng::seed_from_u64(0x1ea5e);
    let http = reqwest::Client::new();
    let base = app.url(0);
    let total = 3000;
    let mut sent = 0;
    let mut by_status = std::collections::BTreeMap::new();
    let mut routes_hit = std::collections::BTreeSet::new();
    while sent < total {
        let mut batch = Vec::new();
        for _ in 0..50 {
            let (method, path, valid) = &routes[rng.random_range(0..routes.len())];
            routes_hit.insert(*path);
            let method = if rng.random_range(0..10) == 0 {
                methods[rng.random_range(0..methods.len())].clone()
            } else {
                method.clone()
            };
            let mut path = path.replace("{id}", &ids[rng.random_range(0..ids.len())]);
            if rng.random_range(0..4) == 0 && !path.contains('?') {
                path.push_str(queries[rng.random_range(0..queries.len())]);
            }
            // Mostly the right kind of credential, so most requests get past authentication.
            let token = match rng.random_range(0..10) {
                0..=2 => tokens[rng.random_range(0..tokens.len())],
                _ if path.starts_with("/v1/runner/") => Some(runner_token.as_str()),
                _ => tokens[rng.random_range(0..3)],
            };
            let mut req = http
                .request(method.clone(), format!("{base}{path}"))
                .timeout(Duration::from_secs(30));
            if let Some(t) = token {
                req = req.bearer_auth(t);
            }
            let body: Option<Vec<u8>> = match rng.random_range(0..8) {
                0 => None,
                1 => Some(b"{\"truncated\": [1, 2".to_vec()),
                2 => Some(
                    (0..rng.random_range(1..64))
                        .map(|_| rng.random::<u8>())
                        .collect(),
                ),
                3 => Some(serde_json::to_vec(valid).unwrap()),
                _ => Some(serde_json::to_vec(&mutate(&mut rng, valid)).unwrap()),
            };
            if let Some(b) = body {
                let ct = [
                    "application/json",
                    "application/json; charset=utf-8",
                    "text/plain",
                    "",
                ][rng.random_range(0..4)];
                if !ct.is_empty() {
                    req = req.header("content-type", ct);
                }
                req = req.body(b);
            }
            if rng.random_range(0..10) == 0 {
                req = req.header(
                    "Idempotency-Key",
                    random_string(&mut rng).replace(['\u{0}', '\n'], "k"),
                );
            }
            batch.push(async move {
                let resp = req.send().await.expect("the server answers");
                let status = resp.status().as_u16();
                let bytes = resp.bytes().await.unwrap();
                (method, path, status, bytes)
            });
        }
        for (method, path, status, bytes) in futures_util::future::join_all(batch).await {
            sent += 1;
            *by_status.entry(status).or_insert(0) += 1;
            assert!(
                status < 500,
                "{method} {path} answered {status}: {}",
                String::from_utf8_lossy(&bytes)
            );
            if status >= 400 {
                let v: Value = serde_json::from_slice(&bytes).unwrap_or_else(|_| {
                    panic!(
                        "{method} {path} {status}: not JSON: {}",
                        String::from_utf8_lossy(&bytes)
                    )
                });
                assert!(
                    v["error"]["code"].is_string() && v["error"]["message"].is_string(),
                    "{method} {path}: {v}"
                );
            }
        }
    }
    println!(
        "random input: {sent} requests over {} route paths, statuses {by_status:?}",
        routes_hit.len()
    );
    assert_eq!(routes_hit.len(), 22, "every route path was exercised");
    // Still live and still correct.
    let fresh = dispatch(&admin, personal(), json!("after the storm")).await;
    assert_eq!(admin.job(fresh.id).await.unwrap().state, "parked");
    assert_eq!(
        reqwest::get(format!("{base}/healthz"))
            .await
            .unwrap()
            .status()
            .as_u16(),
        200
    );
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
    let named = dispatch(
        &alice,
        wire::Target::Runner {
            runner_id: enrolled.runner.id,
        },
        json!(null),
    )
    .await;
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
