//! Every error is the contract's JSON shape with the contract's status; authentication
//! failures are byte-identical whatever the cause.

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use crate::support::TestApp;

async fn raw(
    method: Method,
    url: &str,
    token: Option<&str>,
    content_type: Option<&str>,
    body: Option<Vec<u8>>,
) -> (StatusCode, Vec<u8>) {
    let mut req = reqwest::Client::new().request(method, url);
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    if let Some(ct) = content_type {
        req = req.header("content-type", ct);
    }
    if let Some(b) = body {
        req = req.body(b);
    }
    let resp = req.send().await.unwrap();
    (resp.status(), resp.bytes().await.unwrap().to_vec())
}

/// method, url, token, content type, body, expected status, expected code.
type Case<'a> = (
    Method,
    String,
    Option<&'a str>,
    Option<&'a str>,
    Option<Vec<u8>>,
    u16,
    &'a str,
);

fn error_code(body: &[u8]) -> String {
    let v: Value = serde_json::from_slice(body)
        .unwrap_or_else(|_| panic!("not JSON: {}", String::from_utf8_lossy(body)));
    v["error"]["code"]
        .as_str()
        .unwrap_or_else(|| panic!("no error.code in {v}"))
        .to_owned()
}

#[tokio::test]
async fn every_error_has_the_contract_shape_and_status() {
    let app = TestApp::spawn().await;
    let base = app.url(0);
    let key = app.key("acme", "alice", false).await;
    let json_ct = Some("application/json");
    let cases: Vec<Case> = vec![
        (
            Method::GET,
            format!("{base}/nope"),
            None,
            None,
            None,
            404,
            "not_found",
        ),
        (
            Method::PUT,
            format!("{base}/v1/jobs"),
            Some(&key),
            None,
            None,
            405,
            "method_not_allowed",
        ),
        (
            Method::POST,
            format!("{base}/v1/jobs"),
            Some(&key),
            Some("text/plain"),
            Some(b"{}".to_vec()),
            415,
            "unsupported_media_type",
        ),
        (
            Method::POST,
            format!("{base}/v1/jobs"),
            Some(&key),
            json_ct,
            Some(b"{not json".to_vec()),
            400,
            "bad_request",
        ),
        (
            Method::POST,
            format!("{base}/v1/jobs"),
            None,
            json_ct,
            Some(vec![b' '; 2 * 1024 * 1024]),
            413,
            "payload_too_large",
        ),
        (
            Method::GET,
            format!("{base}/v1/jobs/not-a-uuid"),
            Some(&key),
            None,
            None,
            400,
            "bad_request",
        ),
        (
            Method::GET,
            format!("{base}/v1/jobs?limit=0"),
            Some(&key),
            None,
            None,
            400,
            "bad_request",
        ),
        (
            Method::GET,
            format!("{base}/v1/jobs/{}", uuid::Uuid::now_v7()),
            Some(&key),
            None,
            None,
            404,
            "not_found",
        ),
    ];
    for (method, url, token, ct, body, status, expected) in cases {
        let (got, bytes) = raw(method.clone(), &url, token, ct, body).await;
        assert_eq!(
            got.as_u16(),
            status,
            "{method} {url}: {}",
            String::from_utf8_lossy(&bytes)
        );
        assert_eq!(error_code(&bytes), expected, "{method} {url}");
    }
}

#[tokio::test]
async fn bad_request_messages_name_the_field() {
    let app = TestApp::spawn().await;
    let key = app.key("acme", "alice", false).await;
    let url = format!("{}/v1/jobs", app.url(0));
    let cases = [
        (json!({"target": {"pool": "personal"}}), "payload"),
        (
            json!({"target": {"pool": "personal"}, "payload": 1, "priority": "high"}),
            "priority",
        ),
        (
            json!({"target": {"pool": "personal"}, "payload": 1, "priority": 1001}),
            "priority",
        ),
        (
            json!({"target": {"pool": "personal"}, "payload": 1, "max_attempts": 0}),
            "max_attempts",
        ),
        (
            json!({"target": {"pool": "personal"}, "payload": 1, "kind": "Bad Kind"}),
            "kind",
        ),
        (
            json!({"target": {"pool": "personal"}, "payload": 1, "required_capabilities": ["NO"]}),
            "required_capabilities",
        ),
        (json!({"target": {"pool": "moon"}, "payload": 1}), "target"),
        (
            json!({"target": {"pool": "personal", "runner_id": uuid::Uuid::nil()}, "payload": 1}),
            "target",
        ),
        (
            json!({"target": {"pool": "personal"}, "payload": 1, "queue_timeout_ms": 5}),
            "queue_timeout_ms",
        ),
    ];
    for (body, field) in cases {
        let (status, bytes) = raw(
            Method::POST,
            &url,
            Some(&key),
            Some("application/json"),
            Some(body.to_string().into_bytes()),
        )
        .await;
        assert_eq!(status.as_u16(), 400, "{body}");
        let v: Value = serde_json::from_slice(&bytes).unwrap();
        let message = v["error"]["message"].as_str().unwrap();
        assert!(
            message.starts_with(field),
            "message for {body} should name {field}: {message}"
        );
    }
}

#[tokio::test]
async fn authentication_failures_are_byte_identical() {
    let app = TestApp::spawn().await;
    let base = app.url(0);
    let key = app.key("acme", "alice", true).await;
    let revoked = {
        let client = leasehold::client::Client::new(&base, Some(key.clone()));
        let made = client
            .create_key("gone", leasehold::wire::Role::Member)
            .await
            .unwrap();
        client.revoke_key(made.id).await.unwrap();
        made.key
    };
    let runner_token = {
        let client = leasehold::client::Client::new(&base, Some(key.clone()));
        client
            .pair_runner(
                leasehold::wire::Tier::Personal,
                &leasehold::wire::CreateRunner {
                    label: "r".into(),
                    ..Default::default()
                },
            )
            .await
            .unwrap()
            .token
    };
    let unknown = leasehold::domain::credentials::Secret::generate(
        leasehold::domain::credentials::Kind::ApiKey,
    );
    let mut bodies = Vec::new();
    for (url, token) in [
        (format!("{base}/v1/pool"), None),
        (format!("{base}/v1/pool"), Some("garbage")),
        (format!("{base}/v1/pool"), Some(unknown.reveal())),
        (format!("{base}/v1/pool"), Some(revoked.as_str())),
        (format!("{base}/v1/pool"), Some(runner_token.as_str())),
        (format!("{base}/v1/runner/heartbeat"), Some(key.as_str())),
    ] {
        let (status, bytes) = raw(Method::GET, &url, token, None, None).await;
        let (status, bytes) = if url.ends_with("heartbeat") {
            raw(
                Method::POST,
                &url,
                token,
                Some("application/json"),
                Some(b"{}".to_vec()),
            )
            .await
        } else {
            (status, bytes)
        };
        assert_eq!(status.as_u16(), 401, "{url} {token:?}");
        bodies.push(bytes);
    }
    assert!(
        bodies.windows(2).all(|w| w[0] == w[1]),
        "401 bodies differ: {bodies:?}"
    );
    assert_eq!(
        bodies[0],
        br#"{"error":{"code":"unauthorized","message":"unauthorized"}}"#
    );
}

#[tokio::test]
async fn health_and_readiness() {
    let app = TestApp::spawn().await;
    let base = app.url(0);
    assert_eq!(
        raw(Method::GET, &format!("{base}/healthz"), None, None, None)
            .await
            .0,
        200
    );
    crate::support::eventually(std::time::Duration::from_secs(5), "ready", || async {
        (raw(Method::GET, &format!("{base}/readyz"), None, None, None)
            .await
            .0
            == 200)
            .then_some(())
    })
    .await;
    let (status, body) = raw(Method::GET, &format!("{base}/metrics"), None, None, None).await;
    assert_eq!(status, 200);
    assert!(String::from_utf8_lossy(&body).contains("leasehold_waiters"));
}
