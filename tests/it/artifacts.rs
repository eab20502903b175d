//! Artifacts (docs/api.md v1.2 B "Artifacts"), every case against both stores: chunk
//! rows in the test's PostgreSQL, and a real S3-protocol server (moto's, started once per test
//! binary; `.ci/run` installs it) through `LEASEHOLD_ARTIFACT_STORE=s3://...`.
//!
//! Invariants defended: an upload needs the lease at its epoch, at the start and again when the
//! last byte is stored (a runner superseded mid-upload leaves nothing); the path rule and the
//! size limit hold (400, 413 `too_large`, 409 `artifact_exists`); an upload is visible only
//! once complete, and one cut off leaves no listed artifact and no stored bytes; downloads are
//! whole or by `Range` (206), with the sha256 as `ETag`, from any replica; deleting a job
//! deletes its artifacts' bytes in both stores; a replica streams, holding no file in memory;
//! a chunked upload refused while its client still sends reads its `413`, never a reset (the
//! replica closes a connection lingering: issue 52 row 4).

use std::process::Stdio;
use std::sync::OnceLock;
use std::time::Duration;

use futures_util::StreamExt;
use leasehold::client::Client;
use leasehold::config::Config;
use leasehold::wire;
use object_store::ObjectStore;
use sha2::{Digest, Sha256};
use tokio::io::AsyncWriteExt;
use uuid::Uuid;

use crate::support::{
    self, code, connect, dispatch, eventually, lease, pair, personal, require, TestApp,
};

/// Where a test's artifact bytes go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Pg,
    S3,
}

/// One S3-protocol server per test binary: moto's (`moto_server`), on a free port, stopped by
/// its watchdog shell when the test binary exits.
struct S3Server {
    endpoint: String,
}

fn s3_server() -> Option<&'static S3Server> {
    static SERVER: OnceLock<Option<S3Server>> = OnceLock::new();
    SERVER
        .get_or_init(|| {
            let bin = which("moto_server")?;
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .ok()?
                .local_addr()
                .ok()?
                .port();
            // The shell stops the server once this test binary (its parent) is gone.
            let script = format!(
                "{bin} -H 127.0.0.1 -p {port} >/dev/null 2>&1 & m=$!; \
                 while kill -0 {parent} 2>/dev/null; do sleep 1; done; kill $m",
                parent = std::process::id()
            );
            std::process::Command::new("sh")
                .args(["-c", &script])
                .stdin(Stdio::null())
                .spawn()
                .ok()?;
            let endpoint = format!("http://127.0.0.1:{port}");
            let deadline = std::time::Instant::now() + Duration::from_secs(60);
            while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
                assert!(
                    std::time::Instant::now() < deadline,
                    "moto_server did not listen"
                );
                std::thread::sleep(Duration::from_millis(100));
            }
            Some(S3Server { endpoint })
        })
        .as_ref()
}

fn which(tool: &str) -> Option<String> {
    let out = std::process::Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .ok()?;
    let path = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    (out.status.success() && !path.is_empty()).then_some(path)
}

/// A bucket of the test's own on the S3 server.
pub struct Bucket {
    pub endpoint: String,
    pub name: String,
}

impl Bucket {
    async fn create(server: &S3Server) -> Self {
        let name = format!("t-{}", Uuid::now_v7().simple());
        let r = reqwest::Client::new()
            .put(format!("{}/{name}", server.endpoint))
            .send()
            .await
            .expect("create a bucket");
        assert!(r.status().is_success(), "create bucket: {}", r.status());
        Self {
            endpoint: server.endpoint.clone(),
            name,
        }
    }

    /// The client options a replica is given for it.
    pub fn options(&self) -> Vec<(String, String)> {
        [
            ("aws_endpoint", self.endpoint.as_str()),
            ("aws_allow_http", "true"),
            ("aws_access_key_id", "test"),
            ("aws_secret_access_key", "test"),
            ("aws_region", "us-east-1"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
    }

    fn client(&self) -> object_store::aws::AmazonS3 {
        let mut b = object_store::aws::AmazonS3Builder::new().with_bucket_name(&self.name);
        for (k, v) in self.options() {
            b = b.with_config(k.parse().unwrap(), v);
        }
        b.build().unwrap()
    }

    /// Keys of the objects in the bucket.
    pub async fn objects(&self) -> Vec<String> {
        let listed: Vec<_> = self.client().list(None).collect().await;
        listed
            .into_iter()
            .map(|o| o.expect("list the bucket").location.to_string())
            .collect()
    }
}

/// A new bucket on the test binary's S3 server (`None` when the server is missing outside
/// CI: the test says so and returns).
pub async fn bucket(test: &str) -> Option<Bucket> {
    let server = s3_server();
    let missing = server.is_none().then(|| {
        "moto_server is not installed (pip install 'moto[server]'; .ci/run does)".to_owned()
    });
    if !require(test, missing) {
        return None;
    }
    Some(Bucket::create(server?).await)
}

/// An app whose replicas keep artifacts in `backend` (`None` when the S3 server is missing
/// outside CI: the test says so and returns).
pub async fn app(
    test: &str,
    backend: Backend,
    replicas: usize,
    tweak: impl FnOnce(&mut Config),
) -> Option<(TestApp, Option<Bucket>)> {
    let bucket = match backend {
        Backend::Pg => None,
        Backend::S3 => Some(bucket(test).await?),
    };
    let options = bucket.as_ref().map(Bucket::options);
    let store = bucket
        .as_ref()
        .map(|b| format!("s3://{}/artifacts", b.name));
    let app = TestApp::spawn_with(replicas, |c| {
        if let (Some(store), Some(options)) = (store, options) {
            c.artifact_store = store;
            c.artifact_s3_options = options;
        }
        tweak(c);
    })
    .await;
    Some((app, bucket))
}

/// A job of alice's leased by her personal runner: the operator, the runner, the job.
pub async fn leased_job(app: &TestApp) -> (Client, Client, wire::LeasedJob) {
    let alice = app.operator("acme", "alice", false).await;
    let (_, runner) = pair(&alice, wire::Tier::Personal, &["linux"], 4).await;
    let job = dispatch(&alice, personal(), serde_json::json!({"argv": ["true"]})).await;
    let mut leased = lease(&runner, 5_000, 1).await;
    assert_eq!(leased.len(), 1);
    let leased = leased.remove(0);
    assert_eq!(leased.id, job.id);
    (alice, runner, leased)
}

/// `n` bytes that differ from chunk to chunk (so a misplaced chunk shows).
pub fn bytes(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| {
            (i as u64)
                .wrapping_mul(2_654_435_761)
                .wrapping_add(u64::from(seed)) as u8
                ^ (i >> 20) as u8
        })
        .collect()
}

pub fn sha(data: &[u8]) -> String {
    Sha256::digest(data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

pub async fn put(
    runner: &Client,
    job: &wire::LeasedJob,
    path: &str,
    data: Vec<u8>,
) -> leasehold::client::Result<wire::ArtifactUploaded> {
    let len = data.len() as u64;
    runner
        .upload_artifact(job.id, job.epoch, path, data.into(), Some(len))
        .await
}

/// A body fed through a channel, sent chunked: the test decides when each piece goes.
fn channel_body() -> (
    tokio::sync::mpsc::Sender<Result<Vec<u8>, std::io::Error>>,
    reqwest::Body,
) {
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Vec<u8>, std::io::Error>>(4);
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    });
    (tx, reqwest::Body::wrap_stream(stream))
}

pub async fn rows(database_url: &str, table: &str) -> i64 {
    connect(database_url)
        .await
        .query_one(&format!("SELECT count(*) FROM {table}"), &[])
        .await
        .unwrap()
        .get(0)
}

/// Both stores hold nothing of any upload: no blob, no chunk, (S3) no object.
pub async fn nothing_stored(app: &TestApp, bucket: &Option<Bucket>, what: &str) {
    eventually(Duration::from_secs(30), what, || async {
        let blobs = rows(&app.database_url, "artifact_blobs").await;
        let chunks = rows(&app.database_url, "artifact_chunks").await;
        let objects = match bucket {
            Some(b) => b.objects().await.len(),
            None => 0,
        };
        (blobs == 0 && chunks == 0 && objects == 0).then_some(())
    })
    .await;
}

/// Each case `$case(backend, test name)` as two tests, `$case::postgres` and `$case::s3`.
macro_rules! both_stores {
    ($($case:ident),* $(,)?) => {
        $(
            mod $case {
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn postgres() {
                    super::$case(super::Backend::Pg, concat!(stringify!($case), "::postgres")).await
                }
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn s3() {
                    super::$case(super::Backend::S3, concat!(stringify!($case), "::s3")).await
                }
            }
        )*
    };
}
pub(crate) use both_stores;

both_stores!(
    upload_list_and_download_whole_and_by_range_from_any_replica,
    paths_epochs_and_sizes_are_checked_as_the_contract_says,
    a_runner_superseded_mid_upload_leaves_nothing,
    an_upload_cut_off_leaves_no_artifact_and_no_bytes,
    deleting_a_job_deletes_its_artifacts,
    each_attempt_keeps_its_own_artifacts_and_the_newest_is_served,
    the_list_pages_newest_epoch_first_like_the_job_list,
    quotas_refuse_past_each_bound_over_every_attempt_and_keep_nothing,
    concurrent_uploads_of_one_job_never_pass_its_bound_together,
);

async fn upload_list_and_download_whole_and_by_range_from_any_replica(
    backend: Backend,
    test: &str,
) {
    let Some((app, _bucket)) = app(test, backend, 2, |_| {}).await else {
        return;
    };
    let (alice, runner, job) = leased_job(&app).await;
    // Larger than a multipart part and than several chunk rows, not a multiple of either.
    let big = bytes(11 * 1024 * 1024 + 12_345, 7);
    let small = b"<testsuite tests=\"1\"/>".to_vec();
    let up = put(&runner, &job, "dist/app.bin", big.clone())
        .await
        .unwrap();
    assert_eq!(
        up,
        wire::ArtifactUploaded {
            path: "dist/app.bin".into(),
            size: big.len() as i64,
            sha256: sha(&big),
        }
    );
    // Chunked (no Content-Length), and empty.
    let (tx, body) = channel_body();
    let feed = tokio::spawn(async move {
        for piece in small.chunks(5) {
            tx.send(Ok(piece.to_vec())).await.unwrap();
        }
    });
    let up2 = runner
        .upload_artifact(job.id, job.epoch, "report.xml", body, None)
        .await
        .unwrap();
    feed.await.unwrap();
    assert_eq!(up2.sha256, sha(b"<testsuite tests=\"1\"/>"));
    let empty = put(&runner, &job, "empty", Vec::new()).await.unwrap();
    assert_eq!(empty.size, 0);

    // Listed by path, with what the uploads answered, on the other replica too.
    let other = alice.with_token(alice.token().unwrap().to_owned());
    let other = Client::new(app.url(1), other.token().map(str::to_owned));
    let listed = other.artifacts(job.id).await.unwrap();
    let paths: Vec<&str> = listed.iter().map(|a| a.path.as_str()).collect();
    assert_eq!(paths, ["dist/app.bin", "empty", "report.xml"]);
    assert_eq!(listed[0].size, big.len() as i64);
    assert_eq!(listed[0].sha256, sha(&big));
    assert_eq!(listed[2].sha256, up2.sha256);

    // Whole, from replica 1.
    let r = other
        .download_artifact(job.id, "dist/app.bin", None)
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "application/octet-stream");
    assert_eq!(
        r.headers()["etag"].to_str().unwrap(),
        format!("\"{}\"", sha(&big))
    );
    assert_eq!(r.headers()["accept-ranges"], "bytes");
    let got = r.bytes().await.unwrap();
    assert!(got[..] == big[..], "the whole download differs");
    let r = other
        .download_artifact(job.id, "empty", None)
        .await
        .unwrap();
    assert_eq!(r.bytes().await.unwrap().len(), 0);

    // By range: across a chunk boundary, open-ended, a suffix, past the end.
    let mib = 1024 * 1024;
    for (spec, from, to) in [
        (
            format!("bytes={}-{}", mib - 10, mib + 9),
            mib - 10,
            mib + 10,
        ),
        (
            format!("bytes={}-", big.len() - 100),
            big.len() - 100,
            big.len(),
        ),
        ("bytes=-3".to_owned(), big.len() - 3, big.len()),
        (format!("bytes=5-{}", big.len() * 2), 5, big.len()),
        ("bytes=0-0".to_owned(), 0, 1),
    ] {
        let r = alice
            .download_artifact(job.id, "dist/app.bin", Some(&spec))
            .await
            .unwrap();
        assert_eq!(r.status(), 206, "{spec}");
        assert_eq!(
            r.headers()["content-range"].to_str().unwrap(),
            format!("bytes {from}-{}/{}", to - 1, big.len()),
            "{spec}"
        );
        assert_eq!(
            r.headers()["etag"].to_str().unwrap(),
            format!("\"{}\"", sha(&big))
        );
        let got = r.bytes().await.unwrap();
        assert!(got[..] == big[from..to], "{spec}: the bytes differ");
    }
    let past = format!("bytes={}-", big.len());
    let r = alice
        .download_artifact(job.id, "dist/app.bin", Some(&past))
        .await;
    let err = r.unwrap_err();
    assert_eq!(err.status().map(|s| s.as_u16()), Some(416));
    assert_eq!(err.code(), Some("range_not_satisfiable"));
    // A conditional GET with the ETag is 304.
    let r = reqwest::Client::new()
        .get(format!(
            "{}/v1/jobs/{}/artifacts/dist/app.bin",
            app.url(0),
            job.id
        ))
        .bearer_auth(alice.token().unwrap())
        .header("if-none-match", format!("\"{}\"", sha(&big)))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 304);

    // Unknown paths and jobs are 404; another workspace sees nothing.
    assert_eq!(
        code(alice.download_artifact(job.id, "nope", None).await),
        "not_found"
    );
    assert_eq!(code(alice.artifacts(Uuid::now_v7()).await), "not_found");
    let mallory = app.operator("evil", "mallory", true).await;
    assert_eq!(code(mallory.artifacts(job.id).await), "not_found");
    assert_eq!(
        code(mallory.download_artifact(job.id, "report.xml", None).await),
        "not_found"
    );
    // A job without artifacts lists none.
    let bare = dispatch(&alice, personal(), serde_json::json!({"argv": ["true"]})).await;
    assert!(alice.artifacts(bare.id).await.unwrap().is_empty());
}

async fn paths_epochs_and_sizes_are_checked_as_the_contract_says(backend: Backend, test: &str) {
    let Some((app, bucket)) =
        app(test, backend, 1, |c| c.artifact_max_bytes = 6 * 1024 * 1024).await
    else {
        return;
    };
    let (alice, runner, job) = leased_job(&app).await;
    let token = runner.token().unwrap().to_owned();
    let raw = |path: &str, query: &str| {
        format!(
            "{}/v1/runner/jobs/{}/artifacts/{path}{query}",
            app.url(0),
            job.id
        )
    };
    let http = reqwest::Client::new();
    let status_code = |r: reqwest::Response| async move {
        let status = r.status().as_u16();
        let body: serde_json::Value = r.json().await.unwrap_or_default();
        (
            status,
            body["error"]["code"].as_str().unwrap_or("").to_owned(),
        )
    };
    let epoch = format!("?epoch={}", job.epoch);
    // The path rule: only [A-Za-z0-9._-] segments, no '.' or '..', 1..255 characters.
    // Sent by hand: an HTTP client library would normalise the dot segments away.
    let long = "a".repeat(256);
    for bad in [
        "a/../b",
        "./a",
        "a//b",
        "a%20b",
        "a/.",
        "%2E%2E/x",
        "caf%C3%A9",
        "a\\b",
        long.as_str(),
    ] {
        let target = format!("/v1/runner/jobs/{}/artifacts/{bad}{epoch}", job.id);
        let (status, body) = raw_put(app.replicas[0].addr, &target, &token, b"x").await;
        assert_eq!(status, 400, "{bad}: {body}");
        assert!(
            body.contains("\"bad_request\"") && body.contains("path"),
            "{bad}: {body}"
        );
    }
    let ok255 = "b".repeat(255);
    let r = http
        .put(raw(&ok255, &epoch))
        .bearer_auth(&token)
        .body("x")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201, "a 255-character path is fine");
    // The epoch is required and must be the lease's.
    let r = http
        .put(raw("a", ""))
        .bearer_auth(&token)
        .body("x")
        .send()
        .await
        .unwrap();
    assert_eq!(status_code(r).await, (400, "bad_request".to_owned()));
    let stale = format!("?epoch={}", job.epoch + 1);
    let r = http
        .put(raw("a", &stale))
        .bearer_auth(&token)
        .body("x")
        .send()
        .await
        .unwrap();
    assert_eq!(status_code(r).await, (409, "lease_superseded".to_owned()));
    // Only a runner token; an unknown job is 404.
    let r = http
        .put(raw("a", &epoch))
        .bearer_auth(alice.token().unwrap())
        .body("x")
        .send()
        .await
        .unwrap();
    assert_eq!(status_code(r).await, (401, "unauthorized".to_owned()));
    let r = http
        .put(format!(
            "{}/v1/runner/jobs/{}/artifacts/a{epoch}",
            app.url(0),
            Uuid::now_v7()
        ))
        .bearer_auth(&token)
        .body("x")
        .send()
        .await
        .unwrap();
    assert_eq!(status_code(r).await, (404, "not_found".to_owned()));

    // Too large: by its declared length (before anything is stored), and chunked.
    // (The head alone, by hand: a client sending the body may see the connection close
    // under it before it reads the answer.)
    let over = bytes(6 * 1024 * 1024 + 1, 1);
    let answer = head_only_answer(&app, &runner, &job, over.len()).await;
    assert!(
        answer.starts_with("HTTP/1.1 413") && answer.contains("\"too_large\""),
        "{answer}"
    );
    let err = put_chunked(&runner, &job, "big", over).await.unwrap_err();
    // The server answers 413 before it has read the whole body; the client may see the
    // answer or the connection closing under it, never a success.
    if let Some(status) = err.status() {
        assert_eq!((status.as_u16(), err.code()), (413, Some("too_large")));
    }
    // Exactly the limit is fine.
    let exact = bytes(6 * 1024 * 1024, 2);
    put(&runner, &job, "exact", exact).await.unwrap();

    // An existing path is 409 artifact_exists, and its bytes stay the first upload's.
    let first = put(&runner, &job, "dup.txt", b"first".to_vec())
        .await
        .unwrap();
    let err = put(&runner, &job, "dup.txt", b"second".to_vec())
        .await
        .unwrap_err();
    assert_eq!(
        (err.status().map(|s| s.as_u16()), err.code()),
        (Some(409), Some("artifact_exists"))
    );
    let r = alice
        .download_artifact(job.id, "dup.txt", None)
        .await
        .unwrap();
    assert_eq!(&r.bytes().await.unwrap()[..], b"first");
    let listed = alice.artifacts(job.id).await.unwrap();
    let paths: Vec<&str> = listed.iter().map(|a| a.path.as_str()).collect();
    assert_eq!(paths, [ok255.as_str(), "dup.txt", "exact"]);
    assert_eq!(listed[1].sha256, first.sha256);

    // A settled job takes no more: 409 job_terminal.
    runner
        .complete(job.id, job.epoch, serde_json::json!({"exit_code": 0}))
        .await
        .unwrap();
    let err = put(&runner, &job, "late", b"x".to_vec()).await.unwrap_err();
    assert_eq!(err.code(), Some("job_terminal"));
    // Nothing of the refused uploads is stored: only the three artifacts' blobs.
    holds_only(&app, &bucket, 3, (1 + 6 * MIB + 5) as i64).await;
}

/// A PUT sent by hand over one connection: the status and the body.
async fn raw_put(
    addr: std::net::SocketAddr,
    target: &str,
    token: &str,
    body: &[u8],
) -> (u16, String) {
    let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "PUT {target} HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {token}\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    tcp.write_all(head.as_bytes()).await.unwrap();
    tcp.write_all(body).await.unwrap();
    let mut answer = Vec::new();
    tokio::io::AsyncReadExt::read_to_end(&mut tcp, &mut answer)
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&answer).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, text)
}

async fn a_runner_superseded_mid_upload_leaves_nothing(backend: Backend, test: &str) {
    let Some((app, bucket)) = app(test, backend, 1, |_| {}).await else {
        return;
    };
    let (alice, runner, job) = leased_job(&app).await;
    let (tx, body) = channel_body();
    let upload = {
        let runner = runner.clone();
        let (id, epoch) = (job.id, job.epoch);
        tokio::spawn(async move {
            runner
                .upload_artifact(id, epoch, "dist/half.bin", body, None)
                .await
        })
    };
    // Several chunks in, so bytes are stored when the lease moves on.
    for i in 0..8u8 {
        tx.send(Ok(bytes(1024 * 1024, i))).await.unwrap();
    }
    eventually(
        Duration::from_secs(30),
        "the upload has stored bytes",
        || async {
            let stored = match &bucket {
                None => rows(&app.database_url, "artifact_chunks").await,
                Some(_) => rows(&app.database_url, "artifact_blobs").await,
            };
            (stored > 0).then_some(())
        },
    )
    .await;
    // The runner gives the job back and another runner leases it at the next epoch.
    runner.release(job.id, job.epoch).await.unwrap();
    let (_, second) = pair(&alice, wire::Tier::Personal, &["linux"], 1).await;
    let again = lease(&second, 5_000, 1).await;
    assert_eq!(again[0].epoch, job.epoch + 1);
    for i in 0..4u8 {
        tx.send(Ok(bytes(1024 * 1024, i))).await.unwrap();
    }
    drop(tx);
    let answer = upload.await.unwrap();
    assert_eq!(code(answer), "lease_superseded");
    assert!(alice.artifacts(job.id).await.unwrap().is_empty());
    nothing_stored(&app, &bucket, "the superseded upload's bytes are removed").await;
}

async fn an_upload_cut_off_leaves_no_artifact_and_no_bytes(backend: Backend, test: &str) {
    let Some((app, bucket)) = app(test, backend, 1, |_| {}).await else {
        return;
    };
    let (alice, runner, job) = leased_job(&app).await;
    // By hand over TCP: a declared length, half of it sent, then the connection closes.
    let addr = app.replicas[0].addr;
    let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let total = 12 * 1024 * 1024;
    let head = format!(
        "PUT /v1/runner/jobs/{}/artifacts/cut.bin?epoch={} HTTP/1.1\r\nhost: x\r\n\
         authorization: Bearer {}\r\ncontent-length: {total}\r\n\r\n",
        job.id,
        job.epoch,
        runner.token().unwrap()
    );
    tcp.write_all(head.as_bytes()).await.unwrap();
    tcp.write_all(&bytes(total / 2, 3)).await.unwrap();
    eventually(
        Duration::from_secs(30),
        "the upload has stored bytes",
        || async {
            let stored = match &bucket {
                None => rows(&app.database_url, "artifact_chunks").await,
                Some(_) => rows(&app.database_url, "artifact_blobs").await,
            };
            (stored > 0).then_some(())
        },
    )
    .await;
    drop(tcp);
    nothing_stored(&app, &bucket, "the cut-off upload's bytes are removed").await;
    assert!(alice.artifacts(job.id).await.unwrap().is_empty());
    // The path is still free.
    put(&runner, &job, "cut.bin", b"whole".to_vec())
        .await
        .unwrap();
}

/// `GET` of a job's artifacts (one page, as the API answers it): the status and the JSON.
async fn list_answer(
    app: &TestApp,
    alice: &Client,
    job: Uuid,
    query: &str,
) -> (u16, serde_json::Value) {
    let r = reqwest::Client::new()
        .get(format!("{}/v1/jobs/{job}/artifacts{query}", app.url(0)))
        .bearer_auth(alice.token().unwrap())
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap())
}

/// A page of a job's artifacts, as JSON.
async fn list_json(app: &TestApp, alice: &Client, job: Uuid, query: &str) -> serde_json::Value {
    let (status, body) = list_answer(app, alice, job, query).await;
    assert_eq!(status, 200, "{query}: {body}");
    body
}

/// The body (or the error code) of `GET .../artifacts/{path}{query}`.
async fn fetch(app: &TestApp, alice: &Client, job: Uuid, path_query: &str) -> (u16, String) {
    let r = reqwest::Client::new()
        .get(format!(
            "{}/v1/jobs/{job}/artifacts/{path_query}",
            app.url(0)
        ))
        .bearer_auth(alice.token().unwrap())
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let text = r.text().await.unwrap();
    if status >= 400 {
        let body: serde_json::Value = serde_json::from_str(&text).unwrap();
        return (status, body["error"]["code"].as_str().unwrap().to_owned());
    }
    (status, text)
}

/// v1.3 "Artifacts per attempt": after a retry the next attempt uploads the same paths as its
/// own files; `409 artifact_exists` holds within one epoch only; the list names each file's
/// epoch, newest epoch first, then by path; a download serves the newest epoch's file of a
/// path, `?epoch=N` an older one.
async fn each_attempt_keeps_its_own_artifacts_and_the_newest_is_served(
    backend: Backend,
    test: &str,
) {
    let Some((app, _bucket)) = app(test, backend, 1, |_| {}).await else {
        return;
    };
    let (alice, runner, first) = leased_job(&app).await;
    put(&runner, &first, "out.txt", b"one".to_vec())
        .await
        .unwrap();
    put(&runner, &first, "first-only.txt", b"only in 1".to_vec())
        .await
        .unwrap();
    // A retry supersedes the lease (epoch + 1) and parks the job; the next lease is the next
    // attempt, at a later epoch still.
    alice.retry_job(first.id, None).await.unwrap();
    let second = lease(&runner, 5_000, 1).await.remove(0);
    assert_eq!(second.id, first.id);
    assert!(second.epoch > first.epoch);
    let up = put(&runner, &second, "out.txt", b"two".to_vec())
        .await
        .expect("attempt 2 uploads its own out.txt");
    assert_eq!(up.sha256, sha(b"two"));
    put(&runner, &second, "b.txt", b"b".to_vec()).await.unwrap();
    // Within one epoch a path is still taken.
    let err = put(&runner, &second, "out.txt", b"again".to_vec())
        .await
        .unwrap_err();
    assert_eq!(
        (err.status().map(|s| s.as_u16()), err.code()),
        (Some(409), Some("artifact_exists"))
    );
    // The superseded attempt uploads nothing more.
    let err = put(&runner, &first, "late.txt", b"x".to_vec())
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some("lease_superseded"));

    // Newest epoch first, then by path; each with its epoch.
    let seen = listed(&list_json(&app, &alice, first.id, "").await);
    let (e1, e2) = (first.epoch, second.epoch);
    assert_eq!(
        seen,
        [
            (e2, "b.txt".to_owned(), sha(b"b")),
            (e2, "out.txt".to_owned(), sha(b"two")),
            (e1, "first-only.txt".to_owned(), sha(b"only in 1")),
            (e1, "out.txt".to_owned(), sha(b"one")),
        ]
    );
    // The newest epoch's file of a path, an older one by ?epoch=N; a path only an older
    // attempt uploaded is served from it.
    let job = first.id;
    for (asked, want) in [
        ("out.txt".to_owned(), (200, "two")),
        (format!("out.txt?epoch={e1}"), (200, "one")),
        (format!("out.txt?epoch={e2}"), (200, "two")),
        ("first-only.txt".to_owned(), (200, "only in 1")),
        (format!("first-only.txt?epoch={e2}"), (404, "not_found")),
        ("out.txt?epoch=x".to_owned(), (400, "bad_request")),
    ] {
        let got = fetch(&app, &alice, job, &asked).await;
        assert_eq!((got.0, got.1.as_str()), want, "{asked}");
    }
    // The ETag and a Range follow the epoch asked for.
    let r = reqwest::Client::new()
        .get(format!(
            "{}/v1/jobs/{job}/artifacts/out.txt?epoch={e1}",
            app.url(0)
        ))
        .bearer_auth(alice.token().unwrap())
        .header("range", "bytes=1-")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 206);
    assert_eq!(
        r.headers()["etag"].to_str().unwrap(),
        format!("\"{}\"", sha(b"one"))
    );
    assert_eq!(r.text().await.unwrap(), "ne");
}

/// `(epoch, path, sha256)` of each listed artifact of a page.
fn listed(page: &serde_json::Value) -> Vec<(i64, String, String)> {
    page["artifacts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            (
                a["epoch"].as_i64().unwrap_or(-1),
                a["path"].as_str().unwrap().to_owned(),
                a["sha256"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect()
}

/// `(epoch, path)` of each listed artifact of a page.
fn epochs_and_paths(page: &serde_json::Value) -> Vec<(i64, String)> {
    listed(page).into_iter().map(|(e, p, _)| (e, p)).collect()
}

/// v1.3: the list pages like `GET /v1/jobs` (`limit` 1..1000, default 100; `after` the `next`
/// of the last page, set when the page is full) in its order, newest epoch first then by
/// path; the client and MCP's `list_artifacts` follow it.
async fn the_list_pages_newest_epoch_first_like_the_job_list(backend: Backend, test: &str) {
    let Some((app, _bucket)) = app(test, backend, 1, |_| {}).await else {
        return;
    };
    let (alice, runner, first) = leased_job(&app).await;
    // 101 files at the first epoch, two at the next.
    let names: Vec<String> = (0..=100).map(|i| format!("f{i:03}")).collect();
    futures_util::stream::iter(names.iter())
        .for_each_concurrent(8, |name| {
            let (runner, first) = (&runner, &first);
            async move {
                put(runner, first, name, name.as_bytes().to_vec())
                    .await
                    .unwrap();
            }
        })
        .await;
    alice.retry_job(first.id, None).await.unwrap();
    let second = lease(&runner, 5_000, 1).await.remove(0);
    for name in ["f000", "d/zz"] {
        put(&runner, &second, name, b"2".to_vec()).await.unwrap();
    }
    let mut all = vec![
        (second.epoch, "d/zz".to_owned()),
        (second.epoch, "f000".to_owned()),
    ];
    all.extend(names.iter().map(|n| (first.epoch, n.clone())));
    let job = first.id;

    // The default page: 100, with `next`; after it the rest, and `next` null.
    let page = list_json(&app, &alice, job, "").await;
    assert_eq!(epochs_and_paths(&page), all[..100]);
    let next = page["next"]
        .as_str()
        .expect("a full page has next")
        .to_owned();
    let page = list_json(&app, &alice, job, &format!("?after={next}")).await;
    assert_eq!(epochs_and_paths(&page), all[100..]);
    assert!(page["next"].is_null(), "{page}");
    // Small pages walk the same order; a page that ends exactly at the end is full (next
    // set) and the one after it is empty.
    for limit in [2, 7, 103] {
        let (mut seen, mut after) = (Vec::new(), String::new());
        loop {
            let page = list_json(&app, &alice, job, &format!("?limit={limit}{after}")).await;
            let got = epochs_and_paths(&page);
            assert!(got.len() <= limit);
            seen.extend(got.iter().cloned());
            match page["next"].as_str() {
                Some(n) => {
                    assert_eq!(got.len(), limit, "next only on a full page");
                    after = format!("&after={}", urlencoding(n));
                }
                None => break,
            }
        }
        assert_eq!(seen, all, "limit {limit}");
    }
    // Bounds: the contract's error for anything outside them.
    for bad in [
        "limit=0",
        "limit=1001",
        "limit=x",
        "after=nonsense",
        "after=1",
    ] {
        let (status, body) = list_answer(&app, &alice, job, &format!("?{bad}")).await;
        assert_eq!(
            (status, body["error"]["code"].as_str()),
            (400, Some("bad_request")),
            "{bad}: {body}"
        );
        let field = bad.split('=').next().unwrap();
        assert!(
            body["error"]["message"].as_str().unwrap().contains(field),
            "{bad}: {body}"
        );
    }
    let page = list_json(&app, &alice, job, "?limit=1000").await;
    assert_eq!(epochs_and_paths(&page), all);
    assert!(page["next"].is_null());

    // The client follows the pages.
    let listed = alice.artifacts(job).await.unwrap();
    let got: Vec<(i64, String)> = listed.iter().map(|a| (a.epoch, a.path.clone())).collect();
    assert_eq!(got, all);
    // MCP's list_artifacts takes limit and after.
    let key = alice.token().unwrap();
    let call = |args: serde_json::Value| {
        serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                           "params": {"name": "list_artifacts", "arguments": args}})
    };
    let body: serde_json::Value = crate::mcp::rpc(
        &app.url(0),
        key,
        call(serde_json::json!({"id": job, "limit": 2})),
    )
    .await
    .json()
    .await
    .unwrap();
    let page = &body["result"]["structuredContent"];
    assert_eq!(epochs_and_paths(page), all[..2], "{body}");
    let next = page["next"].as_str().unwrap().to_owned();
    let body: serde_json::Value = crate::mcp::rpc(
        &app.url(0),
        key,
        call(serde_json::json!({"id": job, "limit": 2, "after": next})),
    )
    .await
    .json()
    .await
    .unwrap();
    assert_eq!(
        epochs_and_paths(&body["result"]["structuredContent"]),
        all[2..4],
        "{body}"
    );
}

/// `s` percent-encoded for a query string.
fn urlencoding(s: &str) -> String {
    form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

const MIB: usize = 1024 * 1024;

/// `(status, code)` of an upload's answer: `(0, "")` when the connection closed under it (a
/// refused chunked upload may see that instead of its answer).
fn refusal<T: std::fmt::Debug>(r: leasehold::client::Result<T>) -> (u16, String) {
    let err = r.unwrap_err();
    (
        err.status().map_or(0, |s| s.as_u16()),
        err.code().unwrap_or("").to_owned(),
    )
}

/// A chunked upload of `data` in 64 KiB pieces, fed as the server reads them.
async fn put_chunked(
    runner: &Client,
    job: &wire::LeasedJob,
    path: &str,
    data: Vec<u8>,
) -> leasehold::client::Result<wire::ArtifactUploaded> {
    let (tx, body) = channel_body();
    let feed = tokio::spawn(async move {
        for piece in data.chunks(64 * 1024) {
            if tx.send(Ok(piece.to_vec())).await.is_err() {
                return;
            }
        }
    });
    let answer = runner
        .upload_artifact(job.id, job.epoch, path, body, None)
        .await;
    let _ = feed.await;
    answer
}

/// The answer to the head of an upload declaring `length` bytes, sent alone: a refusal comes
/// before any byte of the body.
async fn head_only_answer(
    app: &TestApp,
    runner: &Client,
    job: &wire::LeasedJob,
    length: usize,
) -> String {
    let mut tcp = tokio::net::TcpStream::connect(app.replicas[0].addr)
        .await
        .unwrap();
    let head = format!(
        "PUT /v1/runner/jobs/{}/artifacts/declared?epoch={} HTTP/1.1\r\nhost: x\r\n\
         authorization: Bearer {}\r\ncontent-length: {length}\r\n\r\n",
        job.id,
        job.epoch,
        runner.token().unwrap()
    );
    tcp.write_all(head.as_bytes()).await.unwrap();
    let mut answer = vec![0u8; 4096];
    let n = tokio::io::AsyncReadExt::read(&mut tcp, &mut answer)
        .await
        .unwrap();
    String::from_utf8_lossy(&answer[..n]).into_owned()
}

/// Blobs (stored or being stored) and, for S3, objects: what the stores hold.
async fn stored(app: &TestApp, bucket: &Option<Bucket>) -> (i64, usize) {
    let blobs = rows(&app.database_url, "artifact_blobs").await;
    let objects = match bucket {
        Some(b) => b.objects().await.len(),
        None => 0,
    };
    (blobs, objects)
}

/// Wait until the stores hold exactly `files` published files (and nothing of any other
/// upload), `bytes` bytes in all.
async fn holds_only(app: &TestApp, bucket: &Option<Bucket>, files: i64, bytes: i64) {
    eventually(
        Duration::from_secs(30),
        "only published files are stored",
        || async {
            let (blobs, objects) = stored(app, bucket).await;
            let row = connect(&app.database_url)
                .await
                .query_one(
                    "SELECT count(*), COALESCE(sum(size), 0)::bigint, \
                            COALESCE(sum(ceil(size::numeric / chunk_size)), 0)::bigint \
                       FROM artifacts",
                    &[],
                )
                .await
                .unwrap();
            let (published, total, chunks): (i64, i64, i64) = (row.get(0), row.get(1), row.get(2));
            // In a bucket, one object per chunk of each published file and no other.
            let objects_ok = bucket.is_none() || objects as i64 == chunks;
            (blobs == files && published == files && total == bytes && objects_ok).then_some(())
        },
    )
    .await;
}

/// v1.3 "Artifact bounds": files and bytes per job over all its attempts, bytes per workspace;
/// past one, `413 quota_exceeded`, before anything is stored when the length is declared and as
/// soon as the bound is crossed when it is not, and nothing of the refused upload is kept.
async fn quotas_refuse_past_each_bound_over_every_attempt_and_keep_nothing(
    backend: Backend,
    test: &str,
) {
    let Some((app, bucket)) = app(test, backend, 1, |c| {
        c.artifact_max_files = 4;
        c.artifact_job_max_bytes = 3 * MIB as u64;
        c.artifact_workspace_max_bytes = Some(5 * MIB as u64);
    })
    .await
    else {
        return;
    };
    let (alice, runner, job) = leased_job(&app).await;
    put(&runner, &job, "a", bytes(MIB, 1)).await.unwrap();
    put_chunked(&runner, &job, "b", bytes(MIB, 2))
        .await
        .unwrap();
    // Declared past the job's bytes: refused from the head alone.
    let answer = head_only_answer(&app, &runner, &job, MIB + MIB / 2).await;
    assert!(
        answer.starts_with("HTTP/1.1 413") && answer.contains("\"quota_exceeded\""),
        "{answer}"
    );
    assert!(
        answer.contains("LEASEHOLD_ARTIFACT_JOB_MAX_BYTES"),
        "{answer}"
    );
    assert_eq!(stored(&app, &bucket).await.0, 2, "nothing of it was stored");
    // Chunked past it: refused once the bound is crossed, and what it sent is removed.
    assert_eq!(
        refusal(put_chunked(&runner, &job, "c", bytes(MIB + MIB / 2, 3)).await),
        (413, "quota_exceeded".into())
    );
    holds_only(&app, &bucket, 2, 2 * MIB as i64).await;
    // Up to the bound exactly is fine; then only empty files, up to the file count.
    put_chunked(&runner, &job, "c", bytes(MIB, 3))
        .await
        .unwrap();
    assert_eq!(
        refusal(put(&runner, &job, "d", vec![0]).await),
        (413, "quota_exceeded".into())
    );
    put(&runner, &job, "d", Vec::new()).await.unwrap();
    let err = put(&runner, &job, "e", Vec::new()).await.unwrap_err();
    assert_eq!(err.code(), Some("quota_exceeded"));
    assert!(
        err.to_string().contains("LEASEHOLD_ARTIFACT_MAX_FILES"),
        "{err}"
    );
    // Over all its attempts: the next attempt has no room either.
    alice.retry_job(job.id, None).await.unwrap();
    let second = lease(&runner, 5_000, 1).await.remove(0);
    assert_eq!(
        refusal(put(&runner, &second, "a", Vec::new()).await),
        (413, "quota_exceeded".into())
    );
    holds_only(&app, &bucket, 4, 3 * MIB as i64).await;

    // The workspace's bytes: another job of it has 2 MiB left, whatever its own bound.
    let job2 = dispatch(&alice, personal(), serde_json::json!({"argv": ["true"]})).await;
    let other = lease(&runner, 5_000, 1).await.remove(0);
    assert_eq!(other.id, job2.id);
    assert_eq!(
        refusal(put_chunked(&runner, &other, "x", bytes(2 * MIB + 1, 4)).await),
        (413, "quota_exceeded".into())
    );
    let err = put(&runner, &other, "x", bytes(2 * MIB + 1, 4))
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("LEASEHOLD_ARTIFACT_WORKSPACE_MAX_BYTES"),
        "{err}"
    );
    put(&runner, &other, "x", bytes(2 * MIB, 4)).await.unwrap();
    holds_only(&app, &bucket, 5, 5 * MIB as i64).await;
    // Another workspace is not bound by this one's bytes.
    let bob = app.operator("beta", "bob", false).await;
    let (_, bobs_runner) = pair(&bob, wire::Tier::Personal, &["linux"], 1).await;
    dispatch(&bob, personal(), serde_json::json!({"argv": ["true"]})).await;
    let bobs = lease(&bobs_runner, 5_000, 1).await.remove(0);
    put(&bobs_runner, &bobs, "y", bytes(MIB, 5)).await.unwrap();
    // Deleting a job gives its room back.
    runner
        .complete(other.id, other.epoch, serde_json::json!({"exit_code": 0}))
        .await
        .unwrap();
    connect(&app.database_url)
        .await
        .execute("DELETE FROM jobs WHERE id = $1", &[&other.id])
        .await
        .unwrap();
    let job3 = dispatch(&alice, personal(), serde_json::json!({"argv": ["true"]})).await;
    let third = lease(&runner, 5_000, 1).await.remove(0);
    assert_eq!(third.id, job3.id);
    put(&runner, &third, "z", bytes(2 * MIB, 6)).await.unwrap();
}

/// Concurrent chunked uploads of one job (through two replicas) together never hold more than
/// its bound: the room is reserved in the database before bytes are stored, not checked and
/// then written.
async fn concurrent_uploads_of_one_job_never_pass_its_bound_together(backend: Backend, test: &str) {
    let Some((app, bucket)) = app(test, backend, 2, |c| {
        c.artifact_job_max_bytes = 4 * MIB as u64;
    })
    .await
    else {
        return;
    };
    let (_alice, runner, job) = leased_job(&app).await;
    let other = Client::new(app.url(1), runner.token().map(str::to_owned));
    let uploads = (0..8).map(|i| {
        let client = if i % 2 == 0 {
            runner.clone()
        } else {
            other.clone()
        };
        let job = job.clone();
        async move { put_chunked(&client, &job, &format!("part{i}"), bytes(MIB, i as u8)).await }
    });
    let answers = futures_util::future::join_all(uploads).await;
    let ok = answers.iter().filter(|a| a.is_ok()).count();
    for a in answers.iter().filter_map(|a| a.as_ref().err()) {
        // A refusal the client reads (the replica closes lingering: issue 52 row 4).
        assert_eq!(a.code(), Some("quota_exceeded"), "{a:?}");
    }
    assert!(
        (1..=4).contains(&ok),
        "{ok} of 8 uploads of 1 MiB fit a 4 MiB bound"
    );
    holds_only(&app, &bucket, ok as i64, (ok * MIB) as i64).await;
}

/// A chunked upload of `data` to `path` sent as a client that writes its whole body before it
/// reads does (Python's `http.client`): every byte written through a small send buffer, then
/// everything the server sent read until it closes. What was read; the error of a write (such
/// a client never reads an answer after one) or of the read.
async fn write_all_then_read(
    app: &TestApp,
    runner: &Client,
    job: &wire::LeasedJob,
    path: &str,
    data: &[u8],
) -> Result<String, String> {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_send_buffer_size(64 * 1024).unwrap();
    let mut tcp = socket
        .connect(app.replicas[0].addr)
        .await
        .map_err(|e| e.to_string())?;
    let head = format!(
        "PUT /v1/runner/jobs/{}/artifacts/{path}?epoch={} HTTP/1.1\r\nhost: x\r\n\
         authorization: Bearer {}\r\ntransfer-encoding: chunked\r\n\r\n",
        job.id,
        job.epoch,
        runner.token().unwrap()
    );
    let mut wire = head.into_bytes();
    for piece in data.chunks(64 * 1024) {
        wire.extend_from_slice(format!("{:x}\r\n", piece.len()).as_bytes());
        wire.extend_from_slice(piece);
        wire.extend_from_slice(b"\r\n");
    }
    wire.extend_from_slice(b"0\r\n\r\n");
    tcp.write_all(&wire)
        .await
        .map_err(|e| format!("writing the body: {e}"))?;
    let mut answer = Vec::new();
    tokio::io::AsyncReadExt::read_to_end(&mut tcp, &mut answer)
        .await
        .map_err(|e| format!("reading the answer: {e}"))?;
    Ok(String::from_utf8_lossy(&answer).into_owned())
}

/// Issue 52 row 4: 40 concurrent chunked uploads of 6 MiB to one job of a 4 MiB bound, each
/// client writing its whole body before it reads: every one reads its `413 quota_exceeded`;
/// none has its connection reset under its writes or closed without an answer (39 of 40 did):
/// the replica answers, then reads on past its answer until the client closes (a lingering
/// close, at most 2 s and 16 MiB) instead of resetting the connection.
#[tokio::test]
async fn a_refused_chunked_upload_reads_its_413_not_a_reset() {
    let Some((app, bucket)) = app("refused_chunked", Backend::Pg, 1, |c| {
        c.artifact_job_max_bytes = 4 * MIB as u64;
        c.max_transfers_per_runner = 64;
    })
    .await
    else {
        return;
    };
    let (_alice, runner, job) = leased_job(&app).await;
    let uploads = (0..40).map(|i| {
        let (app, runner, job) = (&app, &runner, &job);
        async move {
            let data = bytes(6 * MIB, i as u8);
            write_all_then_read(app, runner, job, &format!("part{i}"), &data).await
        }
    });
    let answers = futures_util::future::join_all(uploads).await;
    let other: Vec<String> = answers
        .iter()
        .filter(|a| {
            !a.as_ref()
                .is_ok_and(|t| t.starts_with("HTTP/1.1 413") && t.contains("quota_exceeded"))
        })
        .map(|a| format!("{:?}", a.as_ref().map(|t| &t[..t.len().min(100)])))
        .collect();
    assert!(
        other.is_empty(),
        "{} of 40 refused uploads did not read their 413: {:?}",
        other.len(),
        &other[..other.len().min(3)]
    );
    holds_only(&app, &bucket, 0, 0).await;
}

async fn deleting_a_job_deletes_its_artifacts(backend: Backend, test: &str) {
    let Some((app, bucket)) = app(test, backend, 1, |_| {}).await else {
        return;
    };
    let (alice, runner, job) = leased_job(&app).await;
    put(&runner, &job, "a.bin", bytes(3 * 1024 * 1024, 1))
        .await
        .unwrap();
    put(&runner, &job, "b/c.txt", b"c".to_vec()).await.unwrap();
    // In chunks: 3 MiB is 12 of 256 KiB, and the 1-byte file one.
    let chunks = (3 * 1024 * 1024usize).div_ceil(leasehold::store::artifacts::chunks::CHUNK) + 1;
    if let Some(b) = &bucket {
        assert_eq!(b.objects().await.len(), chunks);
    } else {
        assert_eq!(
            rows(&app.database_url, "artifact_chunks").await,
            chunks as i64
        );
    }
    runner
        .complete(job.id, job.epoch, serde_json::json!({"exit_code": 0}))
        .await
        .unwrap();
    // Whoever deletes the job (the retention sweep, an operator) needs to know nothing of
    // artifacts.
    connect(&app.database_url)
        .await
        .execute("DELETE FROM jobs WHERE id = $1", &[&job.id])
        .await
        .unwrap();
    assert_eq!(code(alice.artifacts(job.id).await), "not_found");
    nothing_stored(
        &app,
        &bucket,
        "the deleted job's artifact bytes are removed",
    )
    .await;
    assert_eq!(rows(&app.database_url, "artifacts").await, 0);
    eventually(
        Duration::from_secs(30),
        "the garbage list is emptied",
        || async { (rows(&app.database_url, "artifact_garbage").await == 0).then_some(()) },
    )
    .await;
}

/// An upload whose replica died mid-way (its blob left incomplete and untouched) is deleted
/// by the stale-upload sweep of another replica.
#[tokio::test]
async fn a_dead_replicas_partial_upload_is_swept() {
    let app = TestApp::spawn_with(1, |c| c.artifact_stale_ms = 1_000).await;
    let (_alice, _runner, job) = leased_job(&app).await;
    let db = connect(&app.database_url).await;
    let (stale, live) = (Uuid::now_v7(), Uuid::now_v7());
    for blob in [stale, live] {
        db.execute(
            "INSERT INTO artifact_blobs (id, job_id, workspace, store) VALUES ($1, $2, 'acme', 'pg')",
            &[&blob, &job.id],
        )
        .await
        .unwrap();
        db.execute(
            "INSERT INTO artifact_chunks (blob_id, seq, data) VALUES ($1, 0, '\\x00'::bytea)",
            &[&blob],
        )
        .await
        .unwrap();
    }
    db.execute(
        "UPDATE artifact_blobs SET touched_at = now() - interval '1 hour' WHERE id = $1",
        &[&stale],
    )
    .await
    .unwrap();
    eventually(
        Duration::from_secs(30),
        "the stale blob is swept",
        || async {
            let left: Vec<Uuid> = db
                .query("SELECT id FROM artifact_blobs", &[])
                .await
                .unwrap()
                .iter()
                .map(|r| r.get(0))
                .collect();
            (!left.contains(&stale)).then_some(left)
        },
    )
    .await;
    let chunks: i64 = db
        .query_one(
            "SELECT count(*) FROM artifact_chunks WHERE blob_id = $1",
            &[&stale],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(chunks, 0);
}

/// A replica streams: several concurrent 64 MiB uploads, then downloads, through a real
/// `leasehold serve` process grow its resident memory by far less than one file. (The full
/// scale, ten 1 GiB transfers each way, is `leasehold bench`'s `artifacts` scenario.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_large_transfers_keep_a_replica_small() {
    let database_url = support::fresh_database().await;
    let replica = support::serve_process(&database_url, &[]).await;
    let pid = replica.pid().unwrap();
    let key = support::key_in(&database_url, "acme", "alice", false).await;
    let alice = Client::new(replica.url.clone(), Some(key));
    let (_, runner) = pair(&alice, wire::Tier::Personal, &["linux"], 8).await;
    const N: usize = 4;
    const SIZE: usize = 64 * 1024 * 1024;
    let mut jobs = Vec::new();
    for _ in 0..N {
        dispatch(&alice, personal(), serde_json::json!({"argv": ["true"]})).await;
    }
    while jobs.len() < N {
        jobs.extend(lease(&runner, 5_000, N as i64).await);
    }
    let rss = move || rss_kib(pid);
    let before = rss();
    let peak = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(before));
    let sampler = {
        let peak = peak.clone();
        tokio::spawn(async move {
            loop {
                peak.fetch_max(rss_kib(pid), std::sync::atomic::Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    // Each upload is generated as it is sent: the test holds no file either.
    let uploads = jobs.iter().map(|job| {
        let runner = runner.clone();
        let (id, epoch) = (job.id, job.epoch);
        async move {
            let pieces = futures_util::stream::iter(0..SIZE / (256 * 1024))
                .map(|i| Ok::<_, std::io::Error>(bytes(256 * 1024, i as u8)));
            runner
                .upload_artifact(
                    id,
                    epoch,
                    "big.bin",
                    reqwest::Body::wrap_stream(pieces),
                    Some(SIZE as u64),
                )
                .await
                .unwrap()
        }
    });
    let uploaded = futures_util::future::join_all(uploads).await;
    let downloads = jobs.iter().map(|job| {
        let alice = alice.clone();
        let id = job.id;
        async move {
            let r = alice.download_artifact(id, "big.bin", None).await.unwrap();
            let mut hasher = Sha256::new();
            let mut stream = r.bytes_stream();
            let mut n = 0;
            while let Some(piece) = stream.next().await {
                let piece = piece.unwrap();
                n += piece.len();
                hasher.update(&piece);
            }
            (
                n,
                hasher
                    .finalize()
                    .iter()
                    .map(|b| format!("{b:02x}"))
                    .collect::<String>(),
            )
        }
    });
    let downloaded = futures_util::future::join_all(downloads).await;
    sampler.abort();
    for (up, (n, sha)) in uploaded.iter().zip(&downloaded) {
        assert_eq!(*n, SIZE);
        assert_eq!(&up.sha256, sha);
    }
    let grew_mib = peak
        .load(std::sync::atomic::Ordering::Relaxed)
        .saturating_sub(before)
        / 1024;
    eprintln!(
        "rss before {} MiB, peak growth {grew_mib} MiB over {N} x 64 MiB each way",
        before / 1024
    );
    assert!(
        grew_mib < 64,
        "the replica's RSS grew {grew_mib} MiB moving {N} x 64 MiB files: it holds whole files"
    );
}

pub fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// The reference runner uploads a command job's `artifacts` globs after the command ends,
/// whatever its exit, with progress as `artifact` events; a symbolic link, a hard link or a
/// directory link that leaves the work directory is never followed: a root runner does not
/// upload a root-only file because the job linked it. Run as root (as CI does) it runs once
/// unconfined (the job is root and can hard-link anything) and once with `--job-user nobody`
/// (files opened as the job's user).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_runner_uploads_matches_and_never_follows_a_link() {
    let root = nix::unistd::Uid::effective().is_root();
    let modes: &[&[&str]] = if root {
        &[&["--unconfined"], &["--job-user", "nobody"]]
    } else {
        &[&["--unconfined"]]
    };
    for run in modes {
        let rig = crate::procs::RunnerRig::new(TestApp::spawn().await, "artifacts-runner").await;
        // A file only the runner's user may read, beside the work directory (same file
        // system, so a hard link to it can be made).
        let secret = rig.dir.join("secret");
        std::fs::write(&secret, "TOP-SECRET").unwrap();
        std::fs::set_permissions(&secret, std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .unwrap();
        let (_config, _runner) = rig.start_runner(&[], run).await;
        let script = format!(
            "mkdir -p dist/sub && echo app > dist/app.txt && head -c 3000000 /dev/zero > dist/sub/b.bin \
             && echo '<r/>' > report.xml && ln -s {s} dist/shadow-sym && ln -s / dist/root \
             && (ln {s} dist/shadow-hard || true) && echo own > dist/own && ln dist/own dist/own-too \
             && mkfifo dist/fifo; exit 3",
            s = secret.display()
        );
        let job = rig
            .alice
            .dispatch(&wire::Dispatch::new(
                personal(),
                serde_json::json!({"argv": ["sh", "-c", script],
                                   "artifacts": ["dist/**", "report.xml", "missing.txt"]}),
            ))
            .await
            .unwrap();
        let done = eventually(Duration::from_secs(90), "the job settles", || async {
            let j = rig.alice.wait_job(job.id, 5_000).await.ok()?;
            j.state.is_terminal().then_some(j)
        })
        .await;
        assert_eq!(done.state, "completed", "{run:?}: {done:?}");
        assert_eq!(done.result.as_ref().unwrap()["exit_code"], 3);
        let listed = rig.alice.artifacts(job.id).await.unwrap();
        let paths: Vec<&str> = listed.iter().map(|a| a.path.as_str()).collect();
        assert_eq!(
            paths,
            ["dist/app.txt", "dist/sub/b.bin", "report.xml"],
            "{run:?}"
        );
        assert_eq!(listed[1].size, 3_000_000);
        let r = rig
            .alice
            .download_artifact(job.id, "dist/app.txt", None)
            .await
            .unwrap();
        assert_eq!(&r.bytes().await.unwrap()[..], b"app\n");
        // Nothing of the secret anywhere in what was stored.
        let dump = support::data_dump(&rig.app.database_url);
        assert!(
            !dump.contains("TOP-SECRET"),
            "{run:?}: the secret was uploaded"
        );
        // Each skip and each upload is an event.
        let events = rig.alice.events(job.id, 0, 0).await.unwrap().events;
        let artifact: Vec<&serde_json::Value> = events
            .iter()
            .filter(|e| e.kind == "artifact")
            .map(|e| &e.data)
            .collect();
        let state_of = |path: &str| {
            artifact
                .iter()
                .find(|d| d["path"] == path && d["state"] != "uploading")
                .map(|d| d["state"].as_str().unwrap_or("").to_owned())
        };
        for skipped in [
            "dist/shadow-sym",
            "dist/root",
            "dist/own",
            "dist/own-too",
            "dist/fifo",
        ] {
            assert_eq!(
                state_of(skipped).as_deref(),
                Some("skipped"),
                "{run:?}: {skipped}: {artifact:?}"
            );
        }
        // A root job can hard-link the secret (a job as nobody cannot: protected hard links).
        if root && run == &["--unconfined"] {
            assert_eq!(
                state_of("dist/shadow-hard").as_deref(),
                Some("skipped"),
                "{run:?}"
            );
        }
        assert_eq!(state_of("report.xml").as_deref(), Some("uploaded"));
    }
}

/// The reference runner stops uploading a job's artifacts at the first `quota_exceeded`: the
/// bound is the job's (or its workspace's), so the files after it would be refused too. The
/// refused file is reported `failed` with the code, and nothing after it is tried.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_runner_stops_uploading_at_the_first_quota_exceeded() {
    let app = TestApp::spawn_with(1, |c| c.artifact_max_files = 2).await;
    let rig = crate::procs::RunnerRig::new(app, "artifacts-quota").await;
    let (_config, _runner) = rig.start_runner(&[], &["--unconfined"]).await;
    let out = rig
        .submit_wait(&[
            "--artifact",
            "out/*",
            "--",
            "sh",
            "-c",
            "mkdir out && for f in 1 2 3 4 5 6; do echo $f > out/$f; done",
        ])
        .await;
    assert_eq!(out.code, Some(0), "{out:?}");
    let id = rig.alice.jobs(None, None, None).await.unwrap().jobs[0].id;
    assert_eq!(rig.alice.artifacts(id).await.unwrap().len(), 2);
    let events = rig.alice.events(id, 0, 0).await.unwrap().events;
    let outcomes: Vec<(String, Option<String>)> = events
        .iter()
        .filter(|e| e.kind == "artifact")
        .map(|e| {
            (
                e.data["state"].as_str().unwrap_or("").to_owned(),
                e.data["code"].as_str().map(str::to_owned),
            )
        })
        .collect();
    assert_eq!(
        outcomes,
        [
            ("uploaded".to_owned(), None),
            ("uploaded".to_owned(), None),
            ("failed".to_owned(), Some("quota_exceeded".to_owned())),
        ],
        "{events:?}"
    );
}

/// `leasehold job artifacts ID ARGS...` as alice.
async fn job_artifacts(
    rig: &crate::procs::RunnerRig,
    id: &str,
    args: &[&str],
) -> crate::procs::Output {
    let all = [&["job", "artifacts", id], args].concat();
    crate::procs::cli(&rig.url(), &rig.key, &all, crate::procs::LONG).await
}

/// `job artifacts ID --json ARGS...`, parsed.
async fn job_artifacts_json(rig: &crate::procs::RunnerRig, id: &str) -> serde_json::Value {
    let out = job_artifacts(rig, id, &["--json"]).await;
    serde_json::from_str(&out.stdout).unwrap_or_else(|_| panic!("{out:?}"))
}

/// The CLI: `job submit --artifact GLOB` (repeatable) reaches the runner, `job artifacts ID`
/// lists (table and `--json`), and `--download DIR [PATH...]` writes the files, sha256
/// checked; after a retry it lists both attempts' files, downloads the newest, and `--epoch N`
/// the attempt asked for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_submits_globs_lists_and_downloads() {
    use crate::procs::{cli, LONG};
    let rig = crate::procs::RunnerRig::new(TestApp::spawn().await, "artifacts-cli").await;
    let (_config, _runner) = rig.start_runner(&[], &["--unconfined"]).await;
    let out = rig
        .submit_wait(&[
            "--artifact",
            "out/*.txt",
            "--artifact",
            "big.bin",
            "--",
            "sh",
            "-c",
            "mkdir out && echo one > out/a.txt && echo two > out/b.txt && echo no > out/c.log \
             && head -c 2500000 /dev/urandom > big.bin",
        ])
        .await;
    assert_eq!(out.code, Some(0), "{out:?}");
    let listed = cli(&rig.url(), &rig.key, &["job", "list", "--json"], LONG).await;
    let jobs: serde_json::Value = serde_json::from_str(&listed.stdout).unwrap();
    let id = jobs["jobs"][0]["id"].as_str().unwrap().to_owned();
    let table = job_artifacts(&rig, &id, &[]).await;
    assert_eq!(table.code, Some(0), "{table:?}");
    let header = table.stdout.lines().next().unwrap_or("");
    assert!(
        header.starts_with("PATH") && header.contains("EPOCH"),
        "{}",
        table.stdout
    );
    for p in ["big.bin", "out/a.txt", "out/b.txt"] {
        assert!(table.stdout.contains(p), "{}", table.stdout);
    }
    assert!(!table.stdout.contains("c.log"));
    let json = job_artifacts_json(&rig, &id).await;
    let sha_big = json["artifacts"][0]["sha256"].as_str().unwrap().to_owned();
    let dir = rig.dir.join("down");
    let got = job_artifacts(&rig, &id, &["--download", dir.to_str().unwrap()]).await;
    assert_eq!(got.code, Some(0), "{got:?}");
    assert_eq!(
        std::fs::read_to_string(dir.join("out/a.txt")).unwrap(),
        "one\n"
    );
    assert_eq!(sha(&std::fs::read(dir.join("big.bin")).unwrap()), sha_big);
    // Only the paths named; an unknown one fails.
    let one = rig.dir.join("one");
    let got = job_artifacts(
        &rig,
        &id,
        &["--download", one.to_str().unwrap(), "out/b.txt"],
    )
    .await;
    assert_eq!(got.code, Some(0), "{got:?}");
    assert!(one.join("out/b.txt").exists() && !one.join("big.bin").exists());
    let bad = job_artifacts(&rig, &id, &["--download", one.to_str().unwrap(), "nope"]).await;
    assert_ne!(bad.code, Some(0));

    // Run again (v1.3): the new attempt uploads its own big.bin (other random bytes).
    let first_epoch = json["artifacts"][0]["epoch"].as_i64().unwrap();
    let job_id: Uuid = id.parse().unwrap();
    let again = cli(&rig.url(), &rig.key, &["job", "retry", &id], LONG).await;
    assert_eq!(again.code, Some(0), "{again:?}");
    eventually(
        Duration::from_secs(90),
        "the retried job completes",
        || async {
            let j = rig.alice.wait_job(job_id, 5_000).await.ok()?;
            (j.state == "completed" && j.epoch > first_epoch).then_some(())
        },
    )
    .await;
    let json = job_artifacts_json(&rig, &id).await;
    let bigs: Vec<(i64, &str)> = json["artifacts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["path"] == "big.bin")
        .map(|a| (a["epoch"].as_i64().unwrap(), a["sha256"].as_str().unwrap()))
        .collect();
    assert_eq!(bigs.len(), 2, "{json}");
    assert!(bigs[0].0 > bigs[1].0, "newest epoch first: {bigs:?}");
    assert_eq!(bigs[1], (first_epoch, sha_big.as_str()));
    let table = job_artifacts(&rig, &id, &[]).await;
    assert_eq!(
        table.stdout.matches("big.bin").count(),
        2,
        "{}",
        table.stdout
    );
    // The newest by default; --epoch N the attempt asked for.
    let newest = rig.dir.join("newest");
    let got = job_artifacts(&rig, &id, &["--download", newest.to_str().unwrap()]).await;
    assert_eq!(got.code, Some(0), "{got:?}");
    assert_eq!(
        sha(&std::fs::read(newest.join("big.bin")).unwrap()),
        bigs[0].1
    );
    let older = rig.dir.join("older");
    let first = first_epoch.to_string();
    let got = job_artifacts(
        &rig,
        &id,
        &[
            "--epoch",
            &first,
            "--download",
            older.to_str().unwrap(),
            "big.bin",
        ],
    )
    .await;
    assert_eq!(got.code, Some(0), "{got:?}");
    assert_eq!(sha(&std::fs::read(older.join("big.bin")).unwrap()), sha_big);
}
