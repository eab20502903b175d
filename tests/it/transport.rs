//! What one connection may hold and for how long (issue 35, rows 3 and 4), over real sockets
//! against a real replica: a head trickled in is closed at `LEASEHOLD_HEADER_TIMEOUT_MS`; an
//! idle keep-alive connection at `LEASEHOLD_IDLE_TIMEOUT_MS`; a head over 64 KiB gets `431`;
//! past `LEASEHOLD_MAX_CONNECTIONS` a new connection is closed at once while the held ones are
//! served; a client that never reads its pipelined answers is closed once a write has been
//! blocked for `LEASEHOLD_REQUEST_TIMEOUT_MS`; a replica out of file descriptors backs off
//! accepting, keeps serving the connections it holds, and accepts again once some are free.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::TestApp;

const HEALTHZ: &[u8] = b"GET /healthz HTTP/1.1\r\nHost: leasehold\r\n\r\n";

/// Read until the replica closes the connection (EOF or reset), failing after `within`;
/// returns what was read.
async fn until_closed(tcp: &mut TcpStream, within: Duration) -> Vec<u8> {
    let mut got = Vec::new();
    let closed = tokio::time::timeout(within, async {
        let mut chunk = [0u8; 65536];
        loop {
            match tcp.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => got.extend_from_slice(&chunk[..n]),
            }
        }
    })
    .await;
    assert!(closed.is_ok(), "the replica kept the connection open");
    got
}

/// One answer's status line off `tcp` (the answers here are small and come whole).
async fn status(tcp: &mut TcpStream) -> String {
    let mut buf = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(10), tcp.read(&mut buf))
        .await
        .expect("an answer in time")
        .unwrap();
    let text = String::from_utf8_lossy(&buf[..n]).to_string();
    text.lines().next().unwrap_or_default().to_owned()
}

async fn open(app: &TestApp) -> TcpStream {
    TcpStream::connect(app.replicas[0].addr).await.unwrap()
}

#[tokio::test]
async fn a_head_trickled_in_is_closed_at_the_header_timeout() {
    let app = TestApp::spawn_with(1, |c| c.header_timeout_ms = 500).await;
    let mut tcp = open(&app).await;
    let trickle = async {
        for byte in HEALTHZ.iter().take(HEALTHZ.len() - 2) {
            if tcp.write_all(&[*byte]).await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    trickle.await;
    // The head took ~4 s to arrive half: the replica closed it long before.
    let got = until_closed(&mut tcp, Duration::from_secs(10)).await;
    assert!(got.is_empty(), "{}", String::from_utf8_lossy(&got));
}

#[tokio::test]
async fn an_idle_keep_alive_connection_is_closed_after_the_idle_timeout() {
    let app = TestApp::spawn_with(1, |c| c.idle_timeout_ms = 500).await;
    let mut tcp = open(&app).await;
    tcp.write_all(HEALTHZ).await.unwrap();
    assert!(status(&mut tcp).await.contains(" 200 "));
    until_closed(&mut tcp, Duration::from_secs(10)).await;
}

#[tokio::test]
async fn a_head_over_64_kib_gets_431() {
    let app = TestApp::spawn().await;
    let mut tcp = open(&app).await;
    let big = "a".repeat(65 * 1024);
    let head = format!("GET /healthz HTTP/1.1\r\nHost: leasehold\r\nX-Big: {big}\r\n\r\n");
    let _ = tcp.write_all(head.as_bytes()).await;
    let line = status(&mut tcp).await;
    assert!(line.contains(" 431 "), "{line}");
    // Just under the bound is served.
    let mut tcp = open(&app).await;
    let fits = "a".repeat(60 * 1024);
    let head = format!("GET /healthz HTTP/1.1\r\nHost: leasehold\r\nX-Big: {fits}\r\n\r\n");
    tcp.write_all(head.as_bytes()).await.unwrap();
    let line = status(&mut tcp).await;
    assert!(line.contains(" 200 "), "{line}");
}

#[tokio::test]
async fn connections_past_the_cap_are_closed_while_held_ones_are_served() {
    let app = TestApp::spawn_with(1, |c| c.max_connections = 3).await;
    let mut held = Vec::new();
    for _ in 0..3 {
        let mut tcp = open(&app).await;
        tcp.write_all(HEALTHZ).await.unwrap();
        assert!(status(&mut tcp).await.contains(" 200 "));
        held.push(tcp);
    }
    let mut over = open(&app).await;
    let _ = over.write_all(HEALTHZ).await;
    let got = until_closed(&mut over, Duration::from_secs(10)).await;
    assert!(got.is_empty(), "{}", String::from_utf8_lossy(&got));
    for tcp in &mut held {
        tcp.write_all(HEALTHZ).await.unwrap();
        assert!(status(tcp).await.contains(" 200 "));
    }
    // Once one goes, a new connection takes its place.
    drop(held.pop());
    crate::support::eventually(Duration::from_secs(10), "a slot given back", || async {
        let mut tcp = open(&app).await;
        tcp.write_all(HEALTHZ).await.ok()?;
        status(&mut tcp).await.contains(" 200 ").then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_client_that_never_reads_its_answers_is_closed() {
    let app = TestApp::spawn_with(1, |c| c.request_timeout_ms = 500).await;
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut tcp = socket.connect(app.replicas[0].addr).await.unwrap();
    let one = b"GET /openapi.json HTTP/1.1\r\nHost: leasehold\r\n\r\n";
    let pipelined: Vec<u8> = one.iter().copied().cycle().take(one.len() * 200).collect();
    tcp.write_all(&pipelined).await.unwrap();
    // The scenario itself: the client reads nothing for three times the deadline.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let got = until_closed(&mut tcp, Duration::from_secs(20)).await;
    let answers = got.windows(12).filter(|w| w == b"HTTP/1.1 200").count();
    assert!(
        answers < 200,
        "every answer was written: the connection was held"
    );
}

/// Row 3, EMFILE: a real `leasehold serve` whose file-descriptor limit is lowered (`prlimit`)
/// under a flood of connections fails its accepts, backs off (said in its log), keeps
/// answering a connection it already held, and serves new connections once the flood goes.
#[tokio::test]
async fn out_of_file_descriptors_held_connections_are_served_and_accepting_resumes() {
    use crate::procs::TempDir;
    let dir = TempDir::new("emfile");
    let db = crate::support::fresh_database().await;
    let (serve, url) = crate::procs::serve(&db, &dir, &[]).await;
    let addr = url.trim_start_matches("http://").to_owned();
    let pid = serve.child.id().expect("the replica runs");

    let mut held = TcpStream::connect(&addr).await.unwrap();
    held.write_all(HEALTHZ).await.unwrap();
    assert!(status(&mut held).await.contains(" 200 "));
    // A few descriptors above what the replica has open now: the flood runs it out.
    let open_now = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count();
    let limit = open_now + 4;
    let set = std::process::Command::new("prlimit")
        .args([
            "--pid",
            &pid.to_string(),
            &format!("--nofile={limit}:{limit}"),
        ])
        .status()
        .expect("prlimit (util-linux)");
    assert!(set.success());

    let mut flood = Vec::new();
    for _ in 0..64 {
        flood.push(TcpStream::connect(&addr).await.unwrap());
    }
    crate::support::eventually(
        Duration::from_secs(30),
        "the replica's accepts fail and it backs off",
        || async {
            serve
                .log()
                .contains("accept failed; backing off")
                .then_some(())
        },
    )
    .await;
    for _ in 0..3 {
        held.write_all(HEALTHZ).await.unwrap();
        assert!(
            status(&mut held).await.contains(" 200 "),
            "a held connection is served"
        );
    }

    drop(flood);
    crate::support::eventually(
        Duration::from_secs(30),
        "a new connection is served",
        || async {
            let mut tcp = TcpStream::connect(&addr).await.ok()?;
            tcp.write_all(HEALTHZ).await.ok()?;
            let mut buf = vec![0u8; 4096];
            let n = tokio::time::timeout(Duration::from_secs(2), tcp.read(&mut buf))
                .await
                .ok()?
                .ok()?;
            String::from_utf8_lossy(&buf[..n])
                .contains(" 200 ")
                .then_some(())
        },
    )
    .await;
    assert!(
        std::fs::read_to_string(format!("/proc/{pid}/status")).is_ok(),
        "the replica is still running"
    );
}
