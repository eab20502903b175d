//! Workspace secrets (docs/api.md v1.1 "Secrets").
//!
//! Invariants defended: admins write and delete, members list names only, ordered by name;
//! names and values are validated (400 naming the field); without a sealing key a write is 503
//! naming `LEASEHOLD_SECRETS_KEY`; a value is sealed with a fresh nonce each time and appears in
//! no answer, no log line and no `pg_dump` of the database.

use leasehold::client::Client;
use leasehold::domain::sealing::SealKey;
use reqwest::Method;
use serde_json::{json, Value};

use crate::procs::{serve, TempDir};
use crate::support::{code, connect, fresh_database, TestApp};

/// An HTTP call whose status and JSON body (or `null`) the test reads as they are.
pub async fn call(
    base: &str,
    token: &str,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let mut req = reqwest::Client::new()
        .request(method, format!("{base}{path}"))
        .bearer_auth(token);
    if let Some(b) = body {
        req = req.json(&b);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    let bytes = resp.bytes().await.unwrap();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

/// A test app whose replicas seal secrets with a fresh key.
pub async fn app_with_secrets() -> TestApp {
    TestApp::spawn_with(1, |c| c.secrets_key = Some(SealKey::generate())).await
}

#[tokio::test]
async fn admins_write_members_list_names_and_bad_input_is_named() {
    let app = app_with_secrets().await;
    let admin = app.operator("acme", "root", true).await;
    let member = app.operator("acme", "alice", false).await;
    admin.put_secret("NPM_TOKEN", "npm-s3cret").await.unwrap();
    admin.put_secret("A_FIRST", "one").await.unwrap();
    // Replacing keeps one entry and moves updated_at.
    let before = member.secrets().await.unwrap();
    admin.put_secret("NPM_TOKEN", "npm-s3cret-2").await.unwrap();
    let listed = member.secrets().await.unwrap();
    let names: Vec<&str> = listed.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["A_FIRST", "NPM_TOKEN"], "ordered by name");
    assert!(listed[1].updated_at > before[1].updated_at);
    assert_eq!(listed[1].created_at, before[1].created_at);

    let raw = call(
        &app.url(0),
        member.token().unwrap(),
        Method::GET,
        "/v1/secrets",
        None,
    )
    .await;
    assert_eq!(raw.0, 200);
    let text = raw.1.to_string();
    assert!(
        !text.contains("npm-s3cret"),
        "a list never carries a value: {text}"
    );
    assert_eq!(raw.1["secrets"][0]["name"], json!("A_FIRST"));

    assert_eq!(code(member.put_secret("X", "v").await), "forbidden");
    assert_eq!(code(member.delete_secret("A_FIRST").await), "forbidden");
    let admin_key = admin.token().unwrap();
    for (path, body, field) in [
        ("/v1/secrets/lower", json!({"value": "v"}), "name"),
        ("/v1/secrets/1ABC", json!({"value": "v"}), "name"),
        ("/v1/secrets/OK", json!({"value": ""}), "value"),
        ("/v1/secrets/OK", json!({"value": "a\u{0}b"}), "value"),
        (
            "/v1/secrets/OK",
            json!({"value": "x".repeat(65_537)}),
            "value",
        ),
        ("/v1/secrets/OK", json!({"value": 5}), "value"),
    ] {
        let (status, body) = call(&app.url(0), admin_key, Method::PUT, path, Some(body)).await;
        assert_eq!(status, 400, "{path}: {body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.starts_with(field), "{path}: {message}");
        assert!(!message.contains("a\u{0}b"));
    }
    let (status, _) = call(
        &app.url(0),
        admin_key,
        Method::PUT,
        "/v1/secrets/BIG",
        Some(json!({"value": "x".repeat(65_536)})),
    )
    .await;
    assert_eq!(status, 204, "65536 bytes is within the limit");

    admin.delete_secret("A_FIRST").await.unwrap();
    assert_eq!(code(admin.delete_secret("A_FIRST").await), "not_found");
    assert_eq!(
        call(
            &app.url(0),
            admin_key,
            Method::DELETE,
            "/v1/secrets/bad-name",
            None
        )
        .await
        .0,
        400
    );
    // Another workspace sees none of them.
    let other = app.operator("globex", "root", true).await;
    assert!(other.secrets().await.unwrap().is_empty());
    assert_eq!(code(other.delete_secret("NPM_TOKEN").await), "not_found");
}

#[tokio::test]
async fn without_a_key_a_secret_write_is_503_naming_the_variable() {
    let app = TestApp::spawn().await;
    let admin = app.operator("acme", "root", true).await;
    let (status, body) = call(
        &app.url(0),
        admin.token().unwrap(),
        Method::PUT,
        "/v1/secrets/TOKEN",
        Some(json!({"value": "v"})),
    )
    .await;
    assert_eq!(status, 503);
    assert_eq!(body["error"]["code"], json!("unavailable"));
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("LEASEHOLD_SECRETS_KEY"),
        "{body}"
    );
    assert!(admin.secrets().await.unwrap().is_empty(), "nothing stored");
}

#[tokio::test]
async fn a_value_is_sealed_with_a_fresh_nonce_and_absent_from_logs_and_the_dump() {
    let database_url = fresh_database().await;
    let dir = TempDir::new("secrets-dump");
    let key = SealKey::generate().to_base64();
    let (server, url) = serve(
        &database_url,
        &dir,
        &[("LEASEHOLD_SECRETS_KEY", &key), ("LEASEHOLD_LOG", "debug")],
    )
    .await;
    let admin = Client::new(
        &url,
        Some(crate::support::key_in(&database_url, "acme", "root", true).await),
    );
    let value = "plaintext-Zq8vW3-value";
    admin.put_secret("DEPLOY_TOKEN", value).await.unwrap();
    admin.put_secret("SAME_VALUE", value).await.unwrap();
    admin.secrets().await.unwrap();

    let db = connect(&database_url).await;
    let rows = db
        .query("SELECT nonce, ciphertext FROM secrets ORDER BY name", &[])
        .await
        .unwrap();
    let (n0, c0): (Vec<u8>, Vec<u8>) = (rows[0].get(0), rows[0].get(1));
    let (n1, c1): (Vec<u8>, Vec<u8>) = (rows[1].get(0), rows[1].get(1));
    assert_ne!(n0, n1, "a fresh nonce per value");
    assert_ne!(c0, c1);

    let dump = crate::support::data_dump(&database_url);
    assert!(
        dump.contains("COPY public.secrets"),
        "the dump has the data"
    );
    let hex: String = value.bytes().map(|b| format!("{b:02x}")).collect();
    assert!(!dump.contains(value), "plaintext value in the dump");
    assert!(!dump.contains(&hex), "hex of the value in the dump");
    assert!(!dump.contains(&key), "the key in the dump");
    drop(server);
    let log = std::fs::read_to_string(
        std::fs::read_dir(dir.path())
            .unwrap()
            .flatten()
            .find(|e| e.file_name().to_string_lossy().starts_with("serve-"))
            .unwrap()
            .path(),
    )
    .unwrap();
    assert!(!log.is_empty(), "the server logged at debug level");
    assert!(!log.contains(value), "the value in a log line");
    assert!(!log.contains(&key), "the key in a log line");
}

/// A workspace-pool dispatch of `secrets` by `who`, with this retry policy.
async fn naming(who: &Client, secrets: &[&str], retry: Option<Value>) -> leasehold::wire::Job {
    let mut d = leasehold::wire::Dispatch::new(crate::support::workspace_pool(), json!(null));
    d.secrets = Some(secrets.iter().map(|s| (*s).to_owned()).collect());
    d.retry = retry;
    who.dispatch(&d).await.unwrap()
}

/// Issue 46 row 1 (v1.3 "Secrets at every hand-over"): a member's job naming a secret that has
/// since become `dispatch: admin` is never handed over again. The member's retry call is 403
/// `forbidden` and changes nothing; a parked job, a re-delivery after a lapsed lease and an
/// automatic retry are each settled `rejected` / `secret_forbidden` at the lease, without the
/// value. An admin's retry makes the admin the job's dispatcher, and the job is handed over.
#[tokio::test]
async fn a_secret_made_admin_only_is_checked_at_the_retry_call_and_at_every_hand_over() {
    let app = TestApp::spawn_with(1, |c| {
        c.secrets_key = Some(SealKey::generate());
        c.lease_ttl_ms = 1000;
    })
    .await;
    let admin = app.operator("acme", "root", true).await;
    let alice = app.operator("acme", "alice", false).await;
    admin.put_secret("PROD_KEY", "prod-value-1").await.unwrap();
    let (_, runner) = crate::support::pair(&admin, leasehold::wire::Tier::Workspace, &[], 4).await;
    let lease = |wait| crate::support::lease(&runner, wait, 4);

    // Dispatched and run while a member could name it.
    let done = naming(&alice, &["PROD_KEY"], None).await;
    let taken = lease(5000).await;
    assert_eq!(taken.len(), 1);
    assert_eq!(taken[0].secrets.0["PROD_KEY"], "prod-value-1");
    runner
        .complete(done.id, taken[0].epoch, json!({"exit_code": 0}))
        .await
        .unwrap();
    let lapsing = naming(&alice, &["PROD_KEY"], None).await;
    let retrying = naming(
        &alice,
        &["PROD_KEY"],
        Some(json!({"limit": 1, "on": ["runner_failed"]})),
    )
    .await;
    let mut held = lease(5000).await;
    if held.len() < 2 {
        held.extend(lease(5000).await);
    }
    assert_eq!(held.len(), 2, "both handed over once");
    assert!(held
        .iter()
        .all(|l| l.secrets.0["PROD_KEY"] == "prod-value-1"));
    let retrying_epoch = held.iter().find(|l| l.id == retrying.id).unwrap().epoch;
    let parked = naming(&alice, &["PROD_KEY"], None).await;

    // Now only admins may name it, with a value members must not read.
    admin
        .put_secret_scoped("PROD_KEY", "prod-value-2", None, Some("admin"))
        .await
        .unwrap();

    // The retry call: 403, and the job is as it was.
    let before = alice.job(done.id).await.unwrap();
    let (status, err) = call(
        &app.url(0),
        alice.token().unwrap(),
        Method::POST,
        &format!("/v1/jobs/{}/retry", done.id),
        Some(json!({})),
    )
    .await;
    assert_eq!(
        (status, err["error"]["code"].as_str()),
        (403, Some("forbidden")),
        "{err}"
    );
    let after = alice.job(done.id).await.unwrap();
    assert_eq!(
        (after.state.to_string(), after.epoch, after.retries),
        (before.state.to_string(), before.epoch, before.retries)
    );

    // The automatic retry: failed, parked again, then rejected at the next lease.
    runner
        .fail(retrying.id, retrying_epoch, "runner broke")
        .await
        .unwrap();
    // The lease lapses and the job is re-delivered; the parked one is leased: each rejected.
    let settled = crate::support::eventually(
        std::time::Duration::from_secs(20),
        "every member job settled",
        || async {
            let got = lease(200).await;
            assert!(got.is_empty(), "nothing handed over: {got:?}");
            let mut jobs = Vec::new();
            for id in [parked.id, lapsing.id, retrying.id] {
                jobs.push(alice.job(id).await.unwrap());
            }
            jobs.iter().all(|j| j.state == "rejected").then_some(jobs)
        },
    )
    .await;
    for j in &settled {
        let e = j.error.as_ref().unwrap();
        assert_eq!(e["reason"], "secret_forbidden", "{e}");
        assert!(e["message"].as_str().unwrap().contains("PROD_KEY"), "{e}");
    }

    // An admin's retry: the admin is the dispatcher now, and the value is handed over.
    let again = admin.retry_job(parked.id, None).await.unwrap();
    assert_eq!(again.state, "parked");
    let taken = lease(5000).await;
    assert_eq!(taken.len(), 1);
    assert_eq!(taken[0].secrets.0["PROD_KEY"], "prod-value-2");
}
