//! Slow artifact transfers (docs/api.md v1.3 "Artifact bounds", issue 46 row 4), against
//! both stores: an upload or a download that moves fewer than `LEASEHOLD_TRANSFER_MIN_BYTES` in
//! any window of `LEASEHOLD_TRANSFER_WINDOW_MS` is closed, an upload's part removed; one that
//! keeps above the floor is not; and a replica holds at most a mebibyte of any one transfer,
//! giving it back when the transfer ends (measured on a real `leasehold serve` process).
//!
//! Invariants defended: a tenant cannot grow a replica by opening transfers and moving them
//! slowly (400 uploads trickling a byte every 10 s held 664 MiB, 300 slow downloads 779 MiB,
//! neither given back); nor by opening many that each keep just above the floor (issue 52 row
//! 3): past `LEASEHOLD_MAX_TRANSFERS_PER_RUNNER` uploads of one runner token, or
//! `LEASEHOLD_MAX_TRANSFERS` transfers on a replica, a transfer is `429 rate_limited` with
//! `Retry-After`, counted in `leasehold_transfers_refused`, and a place freed is taken again.

use std::net::SocketAddr;
use std::time::Duration;

use leasehold::client::Client;
use leasehold::wire;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use uuid::Uuid;

use crate::artifacts::{self, both_stores, bytes, leased_job, nothing_stored, put, Backend};
use crate::support::{self, eventually, gauge, pair, personal};

const KIB: usize = 1024;
const MIB: usize = 1024 * 1024;

/// The head of an upload of `total` bytes to `path` of `job`, then `first` bytes of its body:
/// the connection, left open.
async fn start_upload(
    addr: SocketAddr,
    job: &wire::LeasedJob,
    token: &str,
    path: &str,
    total: usize,
    first: usize,
) -> TcpStream {
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "PUT /v1/runner/jobs/{}/artifacts/{path}?epoch={} HTTP/1.1\r\nhost: x\r\n\
         authorization: Bearer {token}\r\ncontent-length: {total}\r\n\r\n",
        job.id, job.epoch
    );
    tcp.write_all(head.as_bytes()).await.unwrap();
    tcp.write_all(&bytes(first, 9)).await.unwrap();
    tcp
}

/// A download of `path` of job `job` over a connection with a small receive buffer, of which
/// nothing past the first few bytes is read: the connection, left open.
async fn start_download(addr: SocketAddr, job: Uuid, key: &str, path: &str) -> TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4 * KIB as u32).unwrap();
    let mut tcp = socket.connect(addr).await.unwrap();
    let head = format!(
        "GET /v1/jobs/{job}/artifacts/{path} HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {key}\r\n\r\n"
    );
    tcp.write_all(head.as_bytes()).await.unwrap();
    let mut first = [0u8; 64];
    let n = tcp.read(&mut first).await.unwrap();
    assert!(first[..n].starts_with(b"HTTP/1.1 200"), "{:?}", &first[..n]);
    tcp
}

/// Read what is left on `tcp` until the server closes it (or `within` passes: a panic): the
/// bytes read.
async fn until_closed(tcp: &mut TcpStream, within: Duration) -> usize {
    let mut total = 0;
    let mut buf = vec![0u8; 64 * KIB];
    let read_all = async {
        loop {
            match tcp.read(&mut buf).await {
                Ok(0) | Err(_) => return total,
                Ok(n) => total += n,
            }
        }
    };
    tokio::time::timeout(within, read_all)
        .await
        .expect("the server closed the connection")
}

/// The value of counter or gauge `name` with labels `labels` (`{direction="upload"}`, or "")
/// on the replica at `url`; 0 while it has none.
async fn metric(url: &str, name: &str, labels: &str) -> u64 {
    gauge(url, &format!("{name}{labels}")).await.unwrap_or(0)
}

both_stores!(
    a_transfer_under_the_floor_is_closed_and_an_upload_leaves_nothing,
    slow_transfers_hold_at_most_a_mebibyte_each_and_give_it_back,
);

/// With a 1 s window: an upload above the floor (64 KiB each 250 ms) completes; one trickling
/// a byte every 50 ms after a first burst is closed and leaves nothing stored; a download whose
/// client reads nothing is closed.
async fn a_transfer_under_the_floor_is_closed_and_an_upload_leaves_nothing(
    backend: Backend,
    test: &str,
) {
    let Some((app, bucket)) =
        artifacts::app(test, backend, 1, |c| c.transfer_window_ms = 1_000).await
    else {
        return;
    };
    let (alice, runner, job) = leased_job(&app).await;
    let token = runner.token().unwrap().to_owned();
    let addr = app.replicas[0].addr;
    let url = app.url(0);
    put(&runner, &job, "big.bin", bytes(16 * MIB, 1))
        .await
        .unwrap();

    // Above the floor, paced: never closed.
    let mut paced = start_upload(addr, &job, &token, "paced.bin", 512 * KIB, 64 * KIB).await;
    for _ in 1..8 {
        tokio::time::sleep(Duration::from_millis(250)).await;
        paced.write_all(&bytes(64 * KIB, 2)).await.unwrap();
    }
    let mut answer = [0u8; 1024];
    let n = paced.read(&mut answer).await.unwrap();
    let answer = String::from_utf8_lossy(&answer[..n]);
    assert!(answer.starts_with("HTTP/1.1 201"), "{answer}");

    // A trickle after a burst of several chunks: closed once a window passes under the floor.
    let mut trickle = start_upload(addr, &job, &token, "trickle.bin", 4 * MIB, 768 * KIB).await;
    let (mut read, mut write) = trickle.split();
    // Until the server closes it: a write fails, or a read sees the end.
    let feeding = async {
        while write.write_all(b"x").await.is_ok() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    let reading = async {
        let mut buf = [0u8; 1024];
        while let Ok(n) = read.read(&mut buf).await {
            if n == 0 {
                break;
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(30), async {
        tokio::select! {
            () = feeding => {}
            () = reading => {}
        }
    })
    .await
    .expect("the trickling upload is closed");
    eventually(Duration::from_secs(30), "it is counted", || async {
        (metric(
            &url,
            "leasehold_transfers_too_slow_total",
            "{direction=\"upload\"}",
        )
        .await
            == 1)
            .then_some(())
    })
    .await;
    // Nothing of it is kept: only the two whole uploads' blobs and their bytes.
    let listed = alice.artifacts(job.id).await.unwrap();
    assert_eq!(listed.len(), 2, "{listed:?}");
    eventually(Duration::from_secs(30), "its part is removed", || async {
        let blobs = artifacts::rows(&app.database_url, "artifact_blobs").await;
        let objects = match &bucket {
            Some(b) => b.objects().await.len(),
            None => 0,
        };
        (blobs == 2 && (bucket.is_none() || objects > 0)).then_some(())
    })
    .await;

    // A download the client does not read: closed, well before its end.
    let key = alice.token().unwrap().to_owned();
    let mut stalled = start_download(addr, job.id, &key, "big.bin").await;
    eventually(
        Duration::from_secs(30),
        "the stalled download is closed",
        || async {
            (metric(
                &url,
                "leasehold_transfers_too_slow_total",
                "{direction=\"download\"}",
            )
            .await
                == 1)
                .then_some(())
        },
    )
    .await;
    let got = until_closed(&mut stalled, Duration::from_secs(30)).await;
    assert!(got < 16 * MIB, "the whole artifact came: {got} bytes");
    // The job and the rest are unharmed; then deleting it leaves nothing at all.
    runner
        .complete(job.id, job.epoch, serde_json::json!({"exit_code": 0}))
        .await
        .unwrap();
    support::connect(&app.database_url)
        .await
        .execute("DELETE FROM jobs WHERE id = $1", &[&job.id])
        .await
        .unwrap();
    nothing_stored(&app, &bucket, "every byte is removed").await;
}

/// How many slow uploads and downloads the memory case opens at once: 60 and 40, or
/// `LEASEHOLD_TEST_SLOW_TRANSFERS=UPLOADS,DOWNLOADS` (docs/security.md's figures are 400,300).
fn scale() -> (usize, usize) {
    std::env::var("LEASEHOLD_TEST_SLOW_TRANSFERS")
        .ok()
        .and_then(|v| {
            let (u, d) = v.split_once(',')?;
            Some((u.trim().parse().ok()?, d.trim().parse().ok()?))
        })
        .unwrap_or((60, 40))
}

/// A real `leasehold serve` with an 8 s window: uploads that send 512 KiB and then trickle, and
/// downloads of a 16 MiB artifact that are not read, all at once, hold at most a mebibyte each
/// of the replica's resident memory; once the floor has closed them all, its resident memory is
/// back within 20 % of what it was before them.
async fn slow_transfers_hold_at_most_a_mebibyte_each_and_give_it_back(
    backend: Backend,
    test: &str,
) {
    let bucket = match backend {
        Backend::Pg => None,
        Backend::S3 => match artifacts::bucket(test).await {
            Some(b) => Some(b),
            None => return,
        },
    };
    let (uploads, downloads) = scale();
    let window_ms = std::env::var("LEASEHOLD_TEST_SLOW_WINDOW_MS").unwrap_or("8000".into());
    let mut env: Vec<(String, String)> = vec![
        ("LEASEHOLD_TRANSFER_WINDOW_MS".into(), window_ms),
        ("LEASEHOLD_MAX_CONNECTIONS".into(), "5000".into()),
        // Every transfer at once, one runner's uploads among them: under the caps.
        (
            "LEASEHOLD_MAX_TRANSFERS_PER_RUNNER".into(),
            uploads.to_string(),
        ),
        (
            "LEASEHOLD_MAX_TRANSFERS".into(),
            (uploads + downloads).to_string(),
        ),
    ];
    if let Some(b) = &bucket {
        env.push((
            "LEASEHOLD_ARTIFACT_STORE".into(),
            format!("s3://{}/artifacts", b.name),
        ));
        for (k, v) in b.options() {
            env.push((k.to_uppercase(), v));
        }
    }
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let database_url = support::fresh_database().await;
    let replica = support::serve_process(&database_url, &env).await;
    let pid = replica.pid().unwrap();
    let url = replica.url.clone();
    let addr: SocketAddr = url.trim_start_matches("http://").parse().unwrap();
    let key = support::key_in(&database_url, "acme", "alice", false).await;
    let alice = Client::new(url.clone(), Some(key.clone()));
    let (_, runner) = pair(&alice, wire::Tier::Personal, &["linux"], 1).await;
    crate::support::dispatch(&alice, personal(), serde_json::json!({"argv": ["true"]})).await;
    let job = support::lease(&runner, 5_000, 1).await.remove(0);
    let token = runner.token().unwrap().to_owned();
    // Warm up: one whole upload and download, as the replica's steady state.
    put(&runner, &job, "big.bin", bytes(16 * MIB, 1))
        .await
        .unwrap();
    let r = alice
        .download_artifact(job.id, "big.bin", None)
        .await
        .unwrap();
    assert_eq!(r.bytes().await.unwrap().len(), 16 * MIB);
    let before = artifacts::rss_kib(pid);

    // All at once (opened one after another, the first would reach the floor before the last
    // had started).
    let ups = (0..uploads).map(|i| {
        let (job, token, path) = (&job, &token, format!("slow/{i}"));
        async move { start_upload(addr, job, token, &path, 2 * MIB, 512 * KIB).await }
    });
    let downs = (0..downloads).map(|_| start_download(addr, job.id, &key, "big.bin"));
    let (mut open, downs) = tokio::join!(
        futures_util::future::join_all(ups),
        futures_util::future::join_all(downs)
    );
    open.extend(downs);
    let all = (uploads + downloads) as u64;
    let peak = eventually(
        Duration::from_secs(60),
        "every transfer is open",
        || async {
            let rss = artifacts::rss_kib(pid);
            (metric(&url, "leasehold_transfers", "").await == all).then_some(rss)
        },
    )
    .await;
    let grew_mib = peak.saturating_sub(before) / 1024;
    eprintln!(
        "{test}: rss before {} MiB, with {uploads} slow uploads and {downloads} slow downloads \
         open {} MiB (+{grew_mib} MiB)",
        before / 1024,
        peak / 1024
    );
    assert!(
        grew_mib <= all,
        "{all} slow transfers grew the replica by {grew_mib} MiB: more than a mebibyte each"
    );
    // The floor closes them all; their memory goes back.
    eventually(
        Duration::from_secs(120),
        "every slow transfer is closed",
        || async { (metric(&url, "leasehold_transfers", "").await == 0).then_some(()) },
    )
    .await;
    drop(open);
    let given_back = tokio::time::Instant::now() + Duration::from_secs(30);
    let after = loop {
        let rss = artifacts::rss_kib(pid);
        if rss <= before + before / 5 {
            break rss;
        }
        assert!(
            tokio::time::Instant::now() < given_back,
            "30 s after every slow transfer closed the replica holds {} MiB, {} MiB before them",
            rss / 1024,
            before / 1024
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    eprintln!(
        "{test}: rss after they closed {} MiB (before {} MiB)",
        after / 1024,
        before / 1024
    );
}

/// What the server first answers on `tcp`.
async fn answer_on(tcp: &mut TcpStream) -> String {
    let mut answer = vec![0u8; 4 * KIB];
    let n = tokio::time::timeout(crate::procs::LONG, tcp.read(&mut answer))
        .await
        .expect("an answer")
        .unwrap();
    String::from_utf8_lossy(&answer[..n]).into_owned()
}

/// `GET` of artifact `path` of `job` sent on a new connection, left open.
async fn get(addr: SocketAddr, job: Uuid, key: &str, path: &str) -> TcpStream {
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "GET /v1/jobs/{job}/artifacts/{path} HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {key}\r\n\r\n"
    );
    tcp.write_all(head.as_bytes()).await.unwrap();
    tcp
}

/// A 429 of the transfer caps: `rate_limited` in the contract's shape, with `Retry-After`.
fn assert_capped(answer: &str, what: &str) {
    assert!(answer.starts_with("HTTP/1.1 429"), "{what}: {answer}");
    assert!(
        answer
            .to_ascii_lowercase()
            .contains("\r\nretry-after: 2\r\n"),
        "{what}: {answer}"
    );
    assert!(
        answer.contains(r#"{"error":{"code":"rate_limited""#),
        "{what}: {answer}"
    );
}

/// Issue 52 row 3: with at most 2 uploads per runner token and 3 transfers per replica, a
/// runner's third upload is refused while its first two run, another runner's fits until the
/// replica holds 3, then a download is refused too; each refusal is `429 rate_limited` with
/// `Retry-After`, counted by its cap in `/metrics`; once an upload completes its places are
/// free again and the download is served.
#[tokio::test]
async fn transfers_past_a_runner_or_replica_cap_are_429_with_retry_after() {
    let Some((app, _)) = artifacts::app("transfer_caps", Backend::Pg, 1, |c| {
        c.max_transfers_per_runner = 2;
        c.max_transfers = 3;
        c.transfer_window_ms = 600_000;
    })
    .await
    else {
        return;
    };
    let (alice, runner, job) = leased_job(&app).await;
    let token = runner.token().unwrap().to_owned();
    let (_, runner_b, job_b) = leased_job(&app).await;
    let token_b = runner_b.token().unwrap().to_owned();
    let addr = app.replicas[0].addr;
    let url = app.url(0);
    put(&runner, &job, "done.bin", bytes(4 * KIB, 1))
        .await
        .unwrap();
    let running = |n: u64| {
        let url = url.clone();
        move || {
            let url = url.clone();
            async move { (metric(&url, "leasehold_transfers", "").await == n).then_some(()) }
        }
    };

    let mut a1 = start_upload(addr, &job, &token, "a1.bin", 128 * KIB, 64 * KIB).await;
    let _a2 = start_upload(addr, &job, &token, "a2.bin", 128 * KIB, 64 * KIB).await;
    eventually(crate::procs::LONG, "two uploads running", running(2)).await;
    let mut a3 = start_upload(addr, &job, &token, "a3.bin", 128 * KIB, 0).await;
    assert_capped(&answer_on(&mut a3).await, "the runner's third upload");

    let _b1 = start_upload(addr, &job_b, &token_b, "b1.bin", 128 * KIB, 64 * KIB).await;
    eventually(crate::procs::LONG, "three transfers running", running(3)).await;
    let mut b2 = start_upload(addr, &job_b, &token_b, "b2.bin", 128 * KIB, 0).await;
    assert_capped(
        &answer_on(&mut b2).await,
        "an upload past the replica's cap",
    );
    let key = alice.token().unwrap().to_owned();
    let mut d1 = get(addr, job.id, &key, "done.bin").await;
    assert_capped(
        &answer_on(&mut d1).await,
        "a download past the replica's cap",
    );
    let refused = |bound: &str| format!("{{bound=\"{bound}\"}}");
    assert_eq!(
        metric(
            &url,
            "leasehold_transfers_refused_total",
            &refused("runner")
        )
        .await,
        1
    );
    assert_eq!(
        metric(
            &url,
            "leasehold_transfers_refused_total",
            &refused("replica")
        )
        .await,
        2
    );

    // An upload completes: its places are free again.
    a1.write_all(&bytes(64 * KIB, 9)).await.unwrap();
    let done = answer_on(&mut a1).await;
    assert!(done.starts_with("HTTP/1.1 201"), "{done}");
    eventually(crate::procs::LONG, "two transfers running", running(2)).await;
    let mut d2 = get(addr, job.id, &key, "done.bin").await;
    let served = answer_on(&mut d2).await;
    assert!(served.starts_with("HTTP/1.1 200"), "{served}");
}
