//! HTTP/1.1 on one connection, spoken byte by byte (issue 19, idle memory).
//!
//! The replica's hyper gives a connection's read and write buffers back while its request is
//! answered, and watches for the client leaving with a small probe read instead of its read
//! buffer (vendor/README.md). Invariants defended: a request pipelined behind a parked
//! long-poll, longer than that probe, is kept whole and answered after it, in order; a
//! connection stays usable for request after request, with bodies larger than the buffers.

use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use leasehold::client::Client;
use leasehold::wire::Tier;

use crate::support::{dispatch, pair, personal, until_waiters, TestApp};

/// One response read off the connection: status and body.
struct Answer {
    status: u16,
    body: Vec<u8>,
}

/// Reads whole responses (`Content-Length` bodies, which is all the replica sends) off a
/// connection, keeping what arrived beyond the one it returns.
struct Responses {
    tcp: TcpStream,
    buffered: Vec<u8>,
}

impl Responses {
    async fn next(&mut self, within: Duration) -> Answer {
        tokio::time::timeout(within, self.read_one())
            .await
            .expect("a whole response in time")
    }

    /// The next response, which must be a 200 with a JSON body.
    async fn next_ok(&mut self, within: Duration) -> Value {
        let answer = self.next(within).await;
        let body = String::from_utf8_lossy(&answer.body).to_string();
        assert_eq!(answer.status, 200, "{body}");
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"))
    }

    async fn read_one(&mut self) -> Answer {
        loop {
            if let Some(end) = self.buffered.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&self.buffered[..end]).to_string();
                let status: u16 = head.split(' ').nth(1).unwrap().parse().unwrap();
                let length: usize = head
                    .lines()
                    .find_map(|l| {
                        let (name, value) = l.split_once(':')?;
                        name.eq_ignore_ascii_case("content-length")
                            .then(|| value.trim().parse().unwrap())
                    })
                    .unwrap_or_else(|| panic!("a Content-Length in\n{head}"));
                if self.buffered.len() >= end + 4 + length {
                    let body = self.buffered[end + 4..end + 4 + length].to_vec();
                    self.buffered.drain(..end + 4 + length);
                    return Answer { status, body };
                }
            }
            let mut chunk = [0u8; 4096];
            let n = self.tcp.read(&mut chunk).await.unwrap();
            assert!(n > 0, "the replica closed the connection");
            self.buffered.extend_from_slice(&chunk[..n]);
        }
    }
}

fn post(path: &str, token: &str, body: &Value) -> Vec<u8> {
    let body = body.to_string();
    format!(
        "POST {path} HTTP/1.1\r\nHost: leasehold\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// A replica, an operator, a personal runner's token and a raw connection to the replica.
struct Paired {
    app: TestApp,
    alice: Client,
    token: String,
    conn: Responses,
}

impl Paired {
    async fn new() -> Self {
        let app = TestApp::spawn().await;
        let alice = app.operator("acme", "alice", false).await;
        let (_, runner) = pair(&alice, Tier::Personal, &[], 1).await;
        let token = runner.token().unwrap().to_owned();
        let url = app.url(0);
        let addr = url.strip_prefix("http://").unwrap();
        let conn = Responses {
            tcp: TcpStream::connect(addr).await.unwrap(),
            buffered: Vec::new(),
        };
        Self {
            app,
            alice,
            token,
            conn,
        }
    }
}

#[tokio::test]
async fn a_request_pipelined_behind_a_parked_long_poll_is_answered_after_it() {
    let Paired {
        app,
        alice,
        token,
        mut conn,
    } = Paired::new().await;
    conn.tcp
        .write_all(&post(
            "/v1/runner/lease",
            &token,
            &json!({"wait_ms": 30_000}),
        ))
        .await
        .unwrap();
    until_waiters(&app.url(0), 1, Duration::from_secs(10)).await;
    // While the lease waits: a second request, far longer than the probe that watches for
    // the client leaving.
    let padding = "x".repeat(3000);
    let second =
        format!("GET /healthz HTTP/1.1\r\nHost: leasehold\r\nX-Padding: {padding}\r\n\r\n");
    conn.tcp.write_all(second.as_bytes()).await.unwrap();
    let job = dispatch(&alice, personal(), json!({"n": 1})).await;
    let leased = conn.next_ok(Duration::from_secs(10)).await;
    assert_eq!(leased["jobs"][0]["id"], json!(job.id), "{leased}");
    let health = conn.next(Duration::from_secs(10)).await;
    assert_eq!(
        health.status,
        200,
        "{}",
        String::from_utf8_lossy(&health.body)
    );
    assert!(conn.buffered.is_empty(), "nothing more was answered");
}

#[tokio::test]
async fn one_connection_serves_request_after_request_with_bodies_larger_than_its_buffers() {
    let Paired {
        app: _app,
        alice,
        token,
        mut conn,
    } = Paired::new().await;
    for round in 0..3 {
        let payload = "y".repeat(20_000 * (round + 1));
        let job = dispatch(&alice, personal(), json!({ "blob": payload })).await;
        conn.tcp
            .write_all(&post("/v1/runner/lease", &token, &json!({"wait_ms": 0})))
            .await
            .unwrap();
        let leased = conn.next_ok(Duration::from_secs(10)).await;
        let got = &leased["jobs"][0];
        assert_eq!(got["id"], json!(job.id), "round {round}");
        assert_eq!(
            got["payload"]["blob"].as_str().map(str::len),
            Some(payload.len())
        );
        // The report carries a body larger than the read buffer's 8 KB.
        let path = format!("/v1/runner/jobs/{}/complete", job.id);
        let report = json!({"epoch": got["epoch"], "result": {"log": "z".repeat(12_000)}});
        conn.tcp
            .write_all(&post(&path, &token, &report))
            .await
            .unwrap();
        let done = conn.next(Duration::from_secs(10)).await;
        assert_eq!(
            done.status,
            200,
            "round {round}: {}",
            String::from_utf8_lossy(&done.body)
        );
    }
}
