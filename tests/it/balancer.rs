//! Behind a load balancer every client keeps its own rate-limit bucket: the client is named by a
//! trusted proxy's PROXY header or `X-Forwarded-For` entry, never by an untrusted peer's. With a
//! real HAProxy running the shipped `deploy/haproxy.cfg` in front of two replicas: one client's
//! bad tokens exhaust its bucket while another still enrols, a long-poll lasts its full wait,
//! and a killed replica is taken out of rotation by its health checks.

use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use leasehold::client::Client;
use leasehold::wire::{self, Tier};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpSocket;

use crate::procs::TempDir;
use crate::support::{
    eventually, fresh_database, key_in, lease, pair, serve_process, ServeProcess, TestApp,
};

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// An HTTP client whose connections come from `local` (any of 127.0.0.0/8 is this machine).
fn http_from(local: &str) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(ip(local))
        .pool_max_idle_per_host(0)
        .build()
        .unwrap()
}

/// The status of `GET {url}/v1/pool` with a bad key and these `X-Forwarded-For` values.
async fn bad_key(http: &reqwest::Client, url: &str, forwarded_for: &[&str]) -> u16 {
    let mut req = http.get(format!("{url}/v1/pool")).bearer_auth("ak_wrong");
    for value in forwarded_for {
        req = req.header("x-forwarded-for", *value);
    }
    req.send().await.unwrap().status().as_u16()
}

/// Send `bytes` from `local` to `server` and read until the server closes.
async fn raw(local: &str, server: SocketAddr, bytes: &[u8]) -> String {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(SocketAddr::new(ip(local), 0)).unwrap();
    let mut stream = socket.connect(server).await.unwrap();
    stream.write_all(bytes).await.unwrap();
    let mut out = Vec::new();
    // A reset counts as a close: what was read before it is the answer.
    let _ = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut out))
        .await
        .expect("the server answers or closes");
    String::from_utf8_lossy(&out).into_owned()
}

const BAD_KEY_REQUEST: &str =
    "GET /v1/pool HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer ak_wrong\r\nConnection: close\r\n\r\n";

/// The status code of a raw HTTP/1.1 answer, 0 when there was none.
fn status(answer: &str) -> u16 {
    answer
        .strip_prefix("HTTP/1.1 ")
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse().ok())
        .unwrap_or(0)
}

/// A raw answer is the contract's 400: status line, JSON content type and length, connection
/// closed, and an `{"error":{"code":"bad_request","message"}}` body.
#[track_caller]
fn assert_bad_request(answer: &str) {
    assert_eq!(status(answer), 400, "answer: {answer:?}");
    let (head, body) = answer.split_once("\r\n\r\n").expect("headers end");
    let head = head.to_ascii_lowercase();
    assert!(
        head.contains("\r\ncontent-type: application/json"),
        "{head}"
    );
    assert!(head.contains("\r\nconnection: close"), "{head}");
    assert!(
        head.contains(&format!("\r\ncontent-length: {}", body.len())),
        "{head}"
    );
    let body: serde_json::Value = serde_json::from_str(body).expect("a JSON body");
    assert_eq!(body["error"]["code"], "bad_request");
    assert!(body["error"]["message"]
        .as_str()
        .is_some_and(|m| m.contains("PROXY")));
}

fn proxy_v2(client: [u8; 4], port: u16) -> Vec<u8> {
    let mut h = b"\r\n\r\n\0\r\nQUIT\n\x21\x11\x00\x0c".to_vec();
    h.extend_from_slice(&client);
    h.extend_from_slice(&[127, 0, 0, 1]);
    h.extend_from_slice(&port.to_be_bytes());
    h.extend_from_slice(&8080u16.to_be_bytes());
    h
}

#[tokio::test]
async fn x_forwarded_for_names_the_client_only_when_a_trusted_proxy_sent_it() {
    let app = TestApp::spawn_with(1, |c| {
        c.auth_burst = 2;
        c.auth_refill_per_s = 0.001;
        c.trusted_proxies = "127.0.0.1".parse().unwrap();
    })
    .await;
    let url = app.url(0);
    let balancer = http_from("127.0.0.1");
    // Through the trusted balancer, the client it appended is the bucket's key.
    let mut statuses = Vec::new();
    for _ in 0..3 {
        statuses.push(bad_key(&balancer, &url, &["192.0.2.1"]).await);
    }
    assert_eq!(statuses, [401, 401, 429]);
    assert_eq!(bad_key(&balancer, &url, &["192.0.2.2"]).await, 401);
    // What a client writes into the header itself is left of the balancer's entry: ignored.
    assert_eq!(
        bad_key(&balancer, &url, &["192.0.2.2, 192.0.2.1"]).await,
        429
    );
    // A peer that is not a trusted proxy is its own client, whatever it forwards.
    let forger = http_from("127.0.0.2");
    let mut statuses = Vec::new();
    for n in 10..13 {
        statuses.push(bad_key(&forger, &url, &[&format!("192.0.2.{n}")]).await);
    }
    assert_eq!(statuses, [401, 401, 429]);
}

#[tokio::test]
async fn a_trusted_proxys_proxy_header_names_the_client_and_nobody_elses_is_believed() {
    let app = TestApp::spawn_with(1, |c| {
        c.auth_burst = 2;
        c.auth_refill_per_s = 0.001;
        c.trusted_proxies = "127.0.0.1".parse().unwrap();
        c.proxy_protocol = true;
    })
    .await;
    let server = app.replicas[0].addr;
    let v1 = |client: &str| {
        format!("PROXY TCP4 {client} 127.0.0.1 40000 8080\r\n{BAD_KEY_REQUEST}").into_bytes()
    };
    let mut statuses = Vec::new();
    for _ in 0..3 {
        statuses.push(status(&raw("127.0.0.1", server, &v1("192.0.2.1")).await));
    }
    assert_eq!(statuses, [401, 401, 429], "v1 header: one client's bucket");
    let mut v2 = proxy_v2([192, 0, 2, 2], 40000);
    v2.extend_from_slice(BAD_KEY_REQUEST.as_bytes());
    assert_eq!(
        status(&raw("127.0.0.1", server, &v2).await),
        401,
        "v2 header: another client's bucket"
    );
    // A trusted proxy without a header, or with a broken one, is answered with the contract's
    // 400 error JSON and the connection closed (issue 18, row 10).
    assert_bad_request(&raw("127.0.0.1", server, BAD_KEY_REQUEST.as_bytes()).await);
    assert_bad_request(&raw("127.0.0.1", server, &v1("192.0.2.999")).await);
    let mut truncated = proxy_v2([192, 0, 2, 3], 1);
    truncated.truncate(20);
    assert_bad_request(&raw("127.0.0.1", server, &truncated).await);
    // Any other peer is its own client: its PROXY header (v1 or v2) is never believed but
    // answered with the contract's 400 error JSON, and its plain requests are served.
    assert_bad_request(&raw("127.0.0.2", server, &v1("192.0.2.9")).await);
    let mut forged_v2 = proxy_v2([192, 0, 2, 9], 40000);
    forged_v2.extend_from_slice(BAD_KEY_REQUEST.as_bytes());
    assert_bad_request(&raw("127.0.0.2", server, &forged_v2).await);
    assert_bad_request(&raw("127.0.0.2", server, b"PROXY garbage\r\n\r\n").await);
    let health = "GET /healthz HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n";
    assert_eq!(
        status(&raw("127.0.0.2", server, health.as_bytes()).await),
        200
    );
    // The health check a balancer sends for itself (v2 LOCAL) is served too.
    let mut local = b"\r\n\r\n\0\r\nQUIT\n\x20\x00\x00\x00".to_vec();
    local.extend_from_slice(health.as_bytes());
    assert_eq!(status(&raw("127.0.0.1", server, &local).await), 200);
}

fn shipped_config() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/haproxy.cfg"))
        .unwrap()
}

/// The shipped `deploy/haproxy.cfg` with its `bind` on `port` and its first two servers at
/// `replicas` (the third dropped), plus an admin socket for the test to read server states, and
/// a `maxconn` this machine's file limit allows.
fn haproxy_config(port: u16, replicas: &[SocketAddr; 2], socket: &Path) -> String {
    let shipped = shipped_config();
    let mut out = String::new();
    for line in shipped.lines() {
        let trimmed = line.trim_start();
        if trimmed == "global" {
            out.push_str(&format!(
                "global\n    stats socket {} level admin\n",
                socket.display()
            ));
        } else if trimmed.starts_with("maxconn ") {
            out.push_str("    maxconn 1000\n");
        } else if trimmed.starts_with("bind ") {
            out.push_str(&format!("    bind 127.0.0.1:{port}\n"));
        } else if let Some(rest) = trimmed.strip_prefix("server replica") {
            let n: usize = rest[..1].parse().unwrap();
            if let Some(addr) = replicas.get(n - 1) {
                let host = format!("leasehold-{n}:8080");
                assert!(line.contains(&host), "server line names {host}");
                out.push_str(&line.replace(&host, &addr.to_string()));
                out.push('\n');
            }
        } else {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// A `timeout NAME` of the shipped config, in milliseconds.
fn shipped_timeout_ms(name: &str) -> u64 {
    let shipped = shipped_config();
    let value = shipped
        .lines()
        .find_map(|l| l.trim().strip_prefix(&format!("timeout {name} ")))
        .unwrap_or_else(|| panic!("deploy/haproxy.cfg sets timeout {name}"))
        .trim();
    let (digits, unit) = value.split_at(
        value
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(value.len()),
    );
    let n: u64 = digits.parse().unwrap();
    match unit {
        "" | "ms" => n,
        "s" => n * 1000,
        "m" => n * 60_000,
        other => panic!("unit {other}"),
    }
}

/// The state HAProxy gives each server of `replicas` (`UP`, `DOWN`, …), from its admin socket.
async fn server_states(socket: &Path) -> Vec<(String, String)> {
    let Ok(mut s) = tokio::net::UnixStream::connect(socket).await else {
        return Vec::new();
    };
    s.write_all(b"show stat\n").await.unwrap();
    let mut csv = String::new();
    s.read_to_string(&mut csv).await.unwrap();
    let header: Vec<&str> = csv
        .lines()
        .next()
        .unwrap_or("")
        .trim_start_matches("# ")
        .split(',')
        .collect();
    let Some(status) = header.iter().position(|f| *f == "status") else {
        return Vec::new();
    };
    csv.lines()
        .skip(1)
        .map(|l| l.split(',').collect::<Vec<_>>())
        .filter(|f| f.first() == Some(&"replicas") && f[1].starts_with("replica"))
        .map(|f| (f[1].to_owned(), f[status].to_owned()))
        .collect()
}

/// HAProxy gives each `(server, state)` of `want` that state.
async fn has_states(socket: &Path, want: &[(&str, &str)]) -> bool {
    let states = server_states(socket).await;
    want.iter()
        .all(|(server, state)| states.iter().any(|(s, st)| s == server && st == state))
}

/// A real HAProxy running the shipped `deploy/haproxy.cfg` in front of two replicas, started
/// and waited for until it reports both UP; killed when dropped.
pub(crate) struct Balancer {
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    /// Its admin socket ([`has_states`] reads server states from it).
    pub socket: std::path::PathBuf,
    _haproxy: tokio::process::Child,
    _dir: TempDir,
}

impl Balancer {
    pub(crate) async fn start(haproxy: &str, replicas: [SocketAddr; 2]) -> Self {
        let dir = TempDir::new("haproxy");
        let socket = dir.join("admin.sock");
        let port = {
            let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            probe.local_addr().unwrap().port()
        };
        let config = dir.join("haproxy.cfg");
        std::fs::write(&config, haproxy_config(port, &replicas, &socket)).unwrap();
        let mut child = tokio::process::Command::new(haproxy)
            .arg("-db")
            .arg("-f")
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("start haproxy");
        let up = [("replica1", "UP"), ("replica2", "UP")];
        let deadline = Instant::now() + Duration::from_secs(30);
        while !has_states(&socket, &up).await {
            if let Some(status) = child.try_wait().unwrap() {
                panic!("haproxy exited: {status}");
            }
            assert!(
                Instant::now() < deadline,
                "haproxy reports both replicas UP"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Self {
            url: format!("http://127.0.0.1:{port}"),
            socket,
            _haproxy: child,
            _dir: dir,
        }
    }
}

#[tokio::test]
async fn haproxy_in_front_of_two_replicas_keeps_clients_apart_holds_long_polls_and_drops_a_dead_replica(
) {
    let Some(haproxy) = crate::support::haproxy("haproxy_in_front") else {
        return;
    };
    // The shipped timeouts outlast the longest long-poll the contract allows.
    let max_wait_ms = leasehold::config::Config::new("").max_wait_ms;
    for name in ["client", "server"] {
        assert!(
            shipped_timeout_ms(name) > max_wait_ms,
            "timeout {name} must outlast a {max_wait_ms} ms long-poll"
        );
    }

    let database_url = fresh_database().await;
    let env = [
        ("LEASEHOLD_PROXY_PROTOCOL", "true"),
        ("LEASEHOLD_TRUSTED_PROXIES", "127.0.0.1"),
        ("LEASEHOLD_AUTH_BURST", "3"),
        ("LEASEHOLD_AUTH_REFILL_PER_S", "0.001"),
        ("LEASEHOLD_MAX_WAIT_MS", "3000"),
    ];
    let mut replica1 = serve_process(&database_url, &env).await;
    let replica2 = serve_process(&database_url, &env).await;
    let addr =
        |p: &ServeProcess| -> SocketAddr { p.url.trim_start_matches("http://").parse().unwrap() };
    let balancer = Balancer::start(haproxy, [addr(&replica1), addr(&replica2)]).await;
    let socket = balancer.socket.clone();
    let lb = balancer.url.clone();

    let admin = Client::new(
        &lb,
        Some(key_in(&database_url, "acme", "admin", true).await),
    );

    // Per-client buckets: A's bad tokens exhaust A's bucket on each replica it reaches...
    let a = http_from("127.0.0.2");
    let mut statuses = Vec::new();
    for _ in 0..8 {
        statuses.push(bad_key(&a, &lb, &[]).await);
    }
    assert!(
        statuses.iter().filter(|s| **s == 401).count() <= 6 && statuses.last() == Some(&429),
        "client A is limited: {statuses:?}"
    );
    // ...while B, through the same balancer, is still welcome: bad tokens get 401 and a join
    // code enrols.
    let b = http_from("127.0.0.3");
    assert_eq!(bad_key(&b, &lb, &[]).await, 401);
    let code = admin
        .create_join_code(&wire::CreateJoinCode {
            tier: Tier::Workspace,
            ttl_s: Some(600),
            ephemeral: Some(false),
        })
        .await
        .unwrap()
        .code;
    let enrolled = b
        .post(format!("{lb}/v1/enroll"))
        .json(&wire::Enroll {
            code,
            label: "b".into(),
            os: None,
            version: None,
            capabilities: None,
            capacity: Some(1),
            ..Default::default()
        })
        .send()
        .await
        .unwrap();
    assert_eq!(enrolled.status().as_u16(), 201, "client B enrols");

    // A long-poll lasts its full wait through the balancer.
    let (_, runner) = pair(&admin, Tier::Workspace, &[], 1).await;
    let started = Instant::now();
    let got = lease(&runner, 60_000, 1).await;
    let waited = started.elapsed();
    assert!(got.is_empty());
    assert!(
        waited >= Duration::from_millis(3000),
        "the long-poll answered after {waited:?}, before its 3 s wait"
    );

    // A killed replica is taken out of rotation by its health checks; the balancer serves on.
    replica1.kill9().await.unwrap();
    let killed = Instant::now();
    let down = [("replica1", "DOWN"), ("replica2", "UP")];
    eventually(
        Duration::from_secs(20),
        "haproxy marks replica1 DOWN",
        || async { has_states(&socket, &down).await.then_some(()) },
    )
    .await;
    eprintln!(
        "haproxy marked the killed replica DOWN after {:?} (inter 1s, fall 2)",
        killed.elapsed()
    );
    for _ in 0..10 {
        let health = http_from("127.0.0.4")
            .get(format!("{lb}/readyz"))
            .send()
            .await
            .expect("the balancer answers");
        assert_eq!(health.status().as_u16(), 200);
    }
    assert!(admin.pool().await.is_ok());
    drop(replica2);
}
