//! Webhooks (contract v1.4, "Webhooks"), against a real HTTP receiver.
//!
//! Invariants defended: a webhook is made once with its `whsec_` secret (201), kept sealed
//! when the replicas have a key, and replaced without it (200); every matching feed event is POSTed with `Leasehold-Delivery` and a
//! `Leasehold-Signature` that Python's standard `hmac` verifies as a receiver would, the body's
//! event being the feed's own; `states` filters; a failing endpoint is retried with a delay
//! that doubles from the first up to the cap (read from the delivery log, computed on the
//! database clock), the delivery is `failed` once the retry window passes, and redelivery sends
//! it again as a new delivery; a webhook failing longer than the disable window is `disabled`
//! and a PUT enables it; loopback, private and link-local address literals are refused when
//! saved, and a name that resolves to loopback is refused at delivery time; a slow endpoint
//! delays only its own webhook; a replica killed mid-delivery leaves the delivery to another.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use leasehold::client::Client;
use leasehold::wire;
use parking_lot::Mutex;
use serde_json::{json, Value};
use uuid::Uuid;

use crate::procs::{serve, TempDir};
use crate::support::{code, dispatch, eventually, personal, start_replica, test_config, TestApp};

/// What a receiver answers, and what it got.
#[derive(Default)]
struct Script {
    /// Statuses to answer, in turn; then `otherwise`.
    next: VecDeque<u16>,
    otherwise: u16,
    /// Never answer (hold the request) while set.
    hang: bool,
    got: Vec<(HeaderMap, Bytes)>,
}

#[derive(Clone)]
struct Receiver {
    script: Arc<Mutex<Script>>,
    addr: SocketAddr,
}

impl Receiver {
    async fn start(otherwise: u16) -> Self {
        let script = Arc::new(Mutex::new(Script {
            otherwise,
            ..Script::default()
        }));
        let app = axum::Router::new()
            .route("/hook", post(receive))
            .with_state(script.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        Self { script, addr }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/hook", self.addr.port())
    }

    fn got(&self) -> Vec<(HeaderMap, Value)> {
        self.script
            .lock()
            .got
            .iter()
            .map(|(h, b)| (h.clone(), serde_json::from_slice(b).unwrap()))
            .collect()
    }

    fn raw(&self, i: usize) -> (HeaderMap, Bytes) {
        self.script.lock().got[i].clone()
    }

    fn set(&self, f: impl FnOnce(&mut Script)) {
        f(&mut self.script.lock());
    }
}

async fn receive(
    State(script): State<Arc<Mutex<Script>>>,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    let (status, hang) = {
        let mut s = script.lock();
        s.got.push((headers, body));
        let hang = s.hang;
        let status = s.next.pop_front().unwrap_or(s.otherwise);
        (status, hang)
    };
    if hang {
        std::future::pending::<()>().await;
    }
    StatusCode::from_u16(status).unwrap()
}

fn hook(url: &str) -> wire::PutWebhook {
    wire::PutWebhook {
        url: url.to_owned(),
        kinds: None,
        states: None,
    }
}

/// Local deliveries allowed, fast polls.
fn local(c: &mut leasehold::config::Config) {
    c.webhook_allow_http = true;
    c.webhook_allow_private = true;
    c.webhook_poll_ms = 20;
}

async fn deliveries(admin: &Client, name: &str) -> Vec<wire::WebhookDelivery> {
    admin
        .webhook_deliveries(name, None, Some(100))
        .await
        .unwrap()
        .deliveries
}

#[tokio::test]
async fn webhook_deliveries_are_signed_and_verify_in_python() {
    let app = TestApp::spawn_with(1, |c| {
        local(c);
        c.secrets_key = Some(leasehold::domain::sealing::SealKey::generate());
    })
    .await;
    let admin = app.operator("acme", "ada", true).await;
    let member = app.operator("acme", "alice", false).await;
    let rx = Receiver::start(200).await;

    assert_eq!(
        code(member.put_webhook("ci", &hook(&rx.url())).await),
        "forbidden"
    );
    let (status, made) = admin.put_webhook("ci", &hook(&rx.url())).await.unwrap();
    assert_eq!(status.as_u16(), 201);
    let secret = made.secret.clone().expect("the secret, once");
    assert!(secret.starts_with("whsec_"), "{secret}");
    assert_eq!(made.kinds, ["state"]);
    let (status, again) = admin.put_webhook("ci", &hook(&rx.url())).await.unwrap();
    assert_eq!(status.as_u16(), 200);
    assert!(again.secret.is_none(), "never shown again");
    // Kept sealed with the replicas' key, never as shown.
    let kept: String = crate::support::connect(&app.database_url)
        .await
        .query_one("SELECT secret FROM webhooks", &[])
        .await
        .unwrap()
        .get(0);
    assert!(
        kept.starts_with("sealed:") && !kept.contains(&secret[6..]),
        "{kept}"
    );
    let listed = admin.webhooks().await.unwrap().webhooks;
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].status, "active");
    assert!(listed[0].secret.is_none());

    let job = dispatch(&member, personal(), json!(null)).await;
    eventually(
        Duration::from_secs(10),
        "the parked event is delivered",
        || async { (!rx.got().is_empty()).then_some(()) },
    )
    .await;
    let (headers, body) = &rx.got()[0];
    let feed = member.feed(None, &[], None, 0).await.unwrap();
    assert_eq!(
        body["event"],
        serde_json::to_value(&feed.events[0]).unwrap()
    );
    assert_eq!(body["event"]["job_id"], json!(job.id));
    assert_eq!(body["webhook"], "ci");
    assert_eq!(
        headers["leasehold-delivery"].to_str().unwrap(),
        body["delivery"].as_str().unwrap()
    );

    // A receiver's check, in Python's standard library.
    let (headers, raw) = rx.raw(0);
    let signature = headers["leasehold-signature"].to_str().unwrap().to_owned();
    let dir = TempDir::new("whsig");
    std::fs::write(dir.join("body"), &raw).unwrap();
    let script = r#"
import hashlib, hmac, sys
secret, header, path = sys.argv[1], sys.argv[2], sys.argv[3]
parts = dict(p.split("=", 1) for p in header.split(","))
body = open(path, "rb").read()
expected = hmac.new(secret.encode(), parts["t"].encode() + b"." + body, hashlib.sha256).hexdigest()
sys.exit(0 if hmac.compare_digest(expected, parts["v1"]) else 1)
"#;
    let verify = |secret: &str| {
        std::process::Command::new("python3")
            .args(["-c", script, secret, &signature])
            .arg(dir.join("body"))
            .status()
            .expect("python3 runs")
            .success()
    };
    assert!(verify(&secret), "Python's hmac verifies {signature}");
    assert!(!verify("whsec_wrong"), "and refuses another secret");

    let log = deliveries(&admin, "ci").await;
    assert_eq!(log[0].status, "delivered");
    assert_eq!(log[0].attempts, 1);
    assert_eq!(log[0].last_status_code, Some(200));
    assert_eq!(log[0].event_cursor, feed.events[0].cursor);
}

#[tokio::test]
async fn webhook_states_filter_and_limits() {
    let app = TestApp::spawn_with(1, local).await;
    let admin = app.operator("acme", "ada", true).await;
    let rx = Receiver::start(200).await;
    // By name, through the deliveries' resolver (private addresses allowed here).
    let only = wire::PutWebhook {
        states: Some(vec!["cancelled".into()]),
        ..hook(&format!("http://localhost:{}/hook", rx.addr.port()))
    };
    admin.put_webhook("ends", &only).await.unwrap();
    let job = dispatch(&admin, personal(), json!(null)).await;
    admin.cancel(job.id).await.unwrap();
    eventually(Duration::from_secs(10), "the cancelled event", || async {
        (!rx.got().is_empty()).then_some(())
    })
    .await;
    let got = rx.got();
    assert_eq!(got.len(), 1, "the parked event is not one of its states");
    assert_eq!(got[0].1["event"]["data"]["state"], "cancelled");

    for (name, body, field) in [
        ("Bad_Name", hook(&rx.url()), "name"),
        ("ok", hook("ftp://example.com/"), "url"),
        (
            "ok",
            wire::PutWebhook {
                states: Some(vec!["done".into()]),
                ..hook(&rx.url())
            },
            "states",
        ),
        (
            "ok",
            wire::PutWebhook {
                kinds: Some(vec![]),
                ..hook(&rx.url())
            },
            "kinds",
        ),
    ] {
        match admin.put_webhook(name, &body).await {
            Err(leasehold::client::ClientError::Api {
                status, message, ..
            }) => {
                assert_eq!(status.as_u16(), 400, "{name}: {message}");
                assert!(message.starts_with(field), "{field}: {message}");
            }
            other => panic!("{name}: {other:?}"),
        }
    }
    for i in 1..20 {
        admin
            .put_webhook(&format!("h{i}"), &hook(&rx.url()))
            .await
            .unwrap();
    }
    assert_eq!(
        code(admin.put_webhook("one-too-many", &hook(&rx.url())).await),
        "bad_request"
    );
    admin.delete_webhook("h1").await.unwrap();
    assert_eq!(code(admin.delete_webhook("h1").await), "not_found");
    admin
        .put_webhook("one-more", &hook(&rx.url()))
        .await
        .unwrap();
}

#[tokio::test]
async fn webhook_retries_back_off_fail_and_redeliver() {
    let app = TestApp::spawn_with(1, |c| {
        local(c);
        c.webhook_retry_first_ms = 100;
        c.webhook_retry_cap_ms = 400;
        c.webhook_retry_for_ms = 2_000;
    })
    .await;
    let admin = app.operator("acme", "ada", true).await;
    let rx = Receiver::start(500).await;
    admin.put_webhook("flaky", &hook(&rx.url())).await.unwrap();
    dispatch(&admin, personal(), json!(null)).await;

    // The wait after each try, by when the try ended (a delivery read while its next try is in
    // flight shows that try counted but the previous one's times).
    let waits = Mutex::new(std::collections::BTreeMap::new());
    let failed = eventually(
        Duration::from_secs(20),
        "the delivery fails for good",
        || async {
            let d = deliveries(&admin, "flaky").await.pop()?;
            if let (Some(last), Some(next)) = (d.last_attempt_at, d.next_try_at) {
                waits.lock().insert(last, (next - last).num_milliseconds());
            }
            (d.status == "failed").then_some(d)
        },
    )
    .await;
    assert!(failed.attempts >= 4, "{failed:?}");
    assert_eq!(failed.last_status_code, Some(500));
    // Computed on the database clock from the first delay, doubling, capped.
    let waits: Vec<i64> = waits.into_inner().into_values().collect();
    assert!(
        waits.iter().all(|ms| [100, 200, 400].contains(ms)),
        "{waits:?}"
    );
    assert!(waits.windows(2).all(|w| w[0] <= w[1]), "{waits:?}");
    assert_eq!(waits.last(), Some(&400), "{waits:?}");
    assert_eq!(rx.got().len() as i32, failed.attempts);
    let ids: Vec<String> = rx
        .got()
        .iter()
        .map(|(h, _)| h["leasehold-delivery"].to_str().unwrap().to_owned())
        .collect();
    assert!(
        ids.iter().all(|id| *id == failed.id.to_string()),
        "one delivery id over its tries"
    );

    rx.set(|s| s.otherwise = 200);
    let again = admin.redeliver("flaky", failed.id).await.unwrap();
    assert_eq!(again.redelivery_of, Some(failed.id));
    assert_ne!(again.id, failed.id);
    eventually(
        Duration::from_secs(10),
        "the redelivery arrives",
        || async {
            let log = deliveries(&admin, "flaky").await;
            log.iter()
                .find(|d| d.id == again.id && d.status == "delivered")
                .cloned()
        },
    )
    .await;
    assert_eq!(
        code(admin.redeliver("flaky", Uuid::now_v7()).await),
        "not_found"
    );
}

#[tokio::test]
async fn a_webhook_failing_too_long_is_disabled_and_a_put_enables_it() {
    let app = TestApp::spawn_with(1, |c| {
        local(c);
        c.webhook_retry_first_ms = 50;
        c.webhook_retry_cap_ms = 50;
        c.webhook_disable_after_ms = 300;
    })
    .await;
    let admin = app.operator("acme", "ada", true).await;
    let rx = Receiver::start(503).await;
    admin.put_webhook("dead", &hook(&rx.url())).await.unwrap();
    dispatch(&admin, personal(), json!(null)).await;
    let hook_now = eventually(
        Duration::from_secs(20),
        "the webhook is disabled",
        || async {
            let hooks = admin.webhooks().await.unwrap().webhooks;
            hooks.into_iter().find(|h| h.status == "disabled")
        },
    )
    .await;
    assert!(hook_now.disabled_at.is_some());
    assert!(hook_now.disabled_reason.is_some());
    let (status, enabled) = admin.put_webhook("dead", &hook(&rx.url())).await.unwrap();
    assert_eq!(status.as_u16(), 200);
    assert_eq!(enabled.status, "active");
    rx.set(|s| s.otherwise = 200);
    eventually(
        Duration::from_secs(10),
        "the pending delivery goes out",
        || async {
            let d = deliveries(&admin, "dead").await.pop()?;
            (d.status == "delivered").then_some(())
        },
    )
    .await;
}

#[tokio::test]
async fn private_addresses_are_refused_when_saved_and_when_resolved() {
    let app = TestApp::spawn_with(1, |c| {
        c.webhook_allow_http = true;
        c.webhook_poll_ms = 20;
    })
    .await;
    let admin = app.operator("acme", "ada", true).await;
    let rx = Receiver::start(200).await;
    for url in [
        rx.url(),
        "http://10.1.2.3/hook".to_owned(),
        "http://192.168.0.1/hook".to_owned(),
        "http://169.254.169.254/latest".to_owned(),
        "http://[::1]:9/hook".to_owned(),
        "http://0.0.0.0/".to_owned(),
    ] {
        match admin.put_webhook("x", &hook(&url)).await {
            Err(leasehold::client::ClientError::Api {
                status, message, ..
            }) => {
                assert_eq!(status.as_u16(), 400, "{url}");
                assert!(message.starts_with("url"), "{message}");
            }
            other => panic!("{url}: {other:?}"),
        }
    }
    // A name is judged when a delivery connects: `localhost` resolves to loopback.
    let by_name = format!("http://localhost:{}/hook", rx.addr.port());
    admin.put_webhook("rebind", &hook(&by_name)).await.unwrap();
    dispatch(&admin, personal(), json!(null)).await;
    let d = eventually(Duration::from_secs(10), "a refused try", || async {
        let d = deliveries(&admin, "rebind").await.pop()?;
        (d.attempts >= 1 && d.last_error.is_some()).then_some(d)
    })
    .await;
    assert!(
        d.last_error.as_deref().unwrap().contains("refused"),
        "{d:?}"
    );
    assert_eq!(d.last_status_code, None);
    assert!(rx.got().is_empty(), "nothing reached the loopback receiver");
}

#[tokio::test]
async fn a_slow_endpoint_delays_only_its_own_webhook() {
    let app = TestApp::spawn_with(1, |c| {
        local(c);
        c.webhook_concurrency = 2;
    })
    .await;
    let admin = app.operator("acme", "ada", true).await;
    let slow = Receiver::start(200).await;
    slow.set(|s| s.hang = true);
    let fast = Receiver::start(200).await;
    admin.put_webhook("slow", &hook(&slow.url())).await.unwrap();
    admin.put_webhook("fast", &hook(&fast.url())).await.unwrap();
    for _ in 0..20 {
        dispatch(&admin, personal(), json!(null)).await;
    }
    eventually(
        Duration::from_secs(15),
        "every event reaches the fast endpoint",
        || async { (fast.got().len() >= 20).then_some(()) },
    )
    .await;
    assert!(
        slow.got().len() <= 2,
        "the slow one holds at most its own senders"
    );
}

#[tokio::test]
async fn a_replica_killed_mid_delivery_leaves_it_to_another() {
    let app = TestApp::spawn_with(0, local).await;
    let rx = Receiver::start(200).await;
    rx.set(|s| s.hang = true);
    let dir = TempDir::new("webhook-kill");
    let (mut doomed, url) = serve(
        &app.database_url,
        &dir,
        &[
            ("LEASEHOLD_WEBHOOK_ALLOW_HTTP", "1"),
            ("LEASEHOLD_WEBHOOK_ALLOW_PRIVATE", "1"),
            ("LEASEHOLD_WEBHOOK_POLL_MS", "20"),
            ("LEASEHOLD_WEBHOOK_LEASE_MS", "1500"),
        ],
    )
    .await;
    let admin = Client::new(url, Some(app.key("acme", "ada", true).await));
    admin.put_webhook("ci", &hook(&rx.url())).await.unwrap();
    dispatch(&admin, personal(), json!(null)).await;
    eventually(
        Duration::from_secs(10),
        "the doomed replica is sending",
        || async { (!rx.got().is_empty()).then_some(()) },
    )
    .await;
    doomed.child.kill().await.unwrap();
    rx.set(|s| s.hang = false);

    let mut config = test_config(&app.database_url);
    local(&mut config);
    let survivor = start_replica(config).await;
    let admin = Client::new(
        format!("http://{}", survivor.addr),
        Some(app.key("acme", "ada", true).await),
    );
    let d = eventually(
        Duration::from_secs(15),
        "another replica delivers it",
        || async {
            let d = deliveries(&admin, "ci").await.pop()?;
            (d.status == "delivered").then_some(d)
        },
    )
    .await;
    assert_eq!(d.attempts, 2, "the killed try and the one that succeeded");
    let got = rx.got();
    assert_eq!(got.len(), 2);
    assert_eq!(
        got[0].1["delivery"], got[1].1["delivery"],
        "the same delivery id"
    );
}

#[tokio::test]
async fn settled_deliveries_leave_the_log_with_retention() {
    let app = TestApp::spawn_with(1, |c| {
        local(c);
        c.retention_ms = Some(1);
        c.retention_interval_ms = 50;
    })
    .await;
    let admin = app.operator("acme", "ada", true).await;
    let rx = Receiver::start(200).await;
    admin.put_webhook("ci", &hook(&rx.url())).await.unwrap();
    dispatch(&admin, personal(), json!(null)).await;
    eventually(Duration::from_secs(10), "a delivery", || async {
        (!rx.got().is_empty()).then_some(())
    })
    .await;
    eventually(
        Duration::from_secs(10),
        "the log emptied by retention",
        || async { deliveries(&admin, "ci").await.is_empty().then_some(()) },
    )
    .await;
}
