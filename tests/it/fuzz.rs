//! Hostile input: a few thousand malformed requests across every route (bodies mutated from
//! valid ones, wrong methods, bad credentials) produce no 5xx and leave the service live.

use std::time::Duration;

use leasehold::wire::Tier;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use reqwest::Method;
use serde_json::{json, Value};

use crate::support::{dispatch, enrol_req, join_code, lease, pair, personal, TestApp};

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
        // The workspace feed and webhooks (v1.4).
        (
            Method::GET,
            "/v1/events?limit=5&kinds=state,stdout&wait_ms=5",
            Value::Null,
        ),
        (
            Method::PUT,
            "/v1/webhooks/fuzz-hook",
            json!({"url": "https://example.com/hook", "kinds": ["state"], "states": ["failed"]}),
        ),
        (Method::GET, "/v1/webhooks", Value::Null),
        (
            Method::GET,
            "/v1/webhooks/fuzz-hook/deliveries?limit=5",
            Value::Null,
        ),
        (
            Method::POST,
            "/v1/webhooks/fuzz-hook/deliveries/{id}/redeliver",
            Value::Null,
        ),
        (Method::DELETE, "/v1/webhooks/fuzz-hook", Value::Null),
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
    assert_eq!(routes_hit.len(), 27, "every route path was exercised");
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
