//! Artifacts: one file of `--artifact-mib` MiB uploaded through a replica and downloaded back,
//! against the store's raw speed on the same server: a binary `COPY` of the same bytes in
//! 1 MiB rows into a table and out of it again. The replica's peak resident memory during
//! each transfer is reported too (streaming means it stays far below the file's size).
//!
//! With `--artifact-store s3://bucket/prefix` the replica keeps the file in that bucket (as
//! 256 KiB chunk objects, v1.3), and the raw figure is the bucket's own speed: the same bytes put
//! straight to it as a multipart upload of 5 MiB parts and read back with one GET
//! (`object_store`). The bench
//! starts no S3 server: point the `AWS_*` variables at one (docs/perf.md says how).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use futures_util::{SinkExt, StreamExt};
use serde_json::json;

use super::setup::{self, ReplicaProcess};
use super::{progress, round, BenchArgs, Deployment, Report};
use crate::client::Client;
use crate::wire;

const MIB: usize = 1 << 20;

/// One MiB of bytes that do not compress (a xorshift stream), sent `n` times.
fn chunk() -> Bytes {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut b = BytesMut::with_capacity(MIB);
    while b.len() < MIB {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        b.put_u64(x);
    }
    b.freeze()
}

/// The replica's peak resident memory while `f` runs, MB (sampled every 50 ms).
async fn peak_rss<T>(pid: u32, f: impl std::future::Future<Output = T>) -> (T, f64) {
    let peak = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (peak, stop) = (peak.clone(), stop.clone());
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                peak.fetch_max(super::idle::rss_kb(pid), Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };
    let out = f.await;
    stop.store(true, Ordering::Relaxed);
    let _ = sampler.await;
    (out, peak.load(Ordering::Relaxed) as f64 / 1024.0)
}

pub async fn run(dep: &Deployment, args: &BenchArgs, report: &mut Report) -> anyhow::Result<()> {
    let Report { json: out, table } = report;
    let url = dep.fresh_database("leasehold_bench_artifacts").await?;
    let mib = args.artifact_mib.max(1);
    let size = (mib * MIB) as u64;
    let mut env = vec![
        ("LEASEHOLD_ARTIFACT_MAX_BYTES", (size + 1).to_string()),
        // The upload of a large file outlasts the default lease: no heartbeat here.
        ("LEASEHOLD_LEASE_TTL_MS", "3600000".to_owned()),
    ];
    if let Some(bucket) = &args.artifact_store {
        env.push(("LEASEHOLD_ARTIFACT_STORE", bucket.clone()));
    }
    let replica = ReplicaProcess::start(&url, &env).await?;
    let pid = replica.pid().unwrap_or(0);
    let key = setup::api_key(&url, "bench", "bench").await?;
    let operator = Client::new(&replica.url, Some(key));
    let runner = setup::runners(&operator, 1, 1).await?.remove(0);
    let target = wire::Target::Pool {
        pool: wire::PoolName::Workspace,
    };
    operator
        .dispatch(&wire::Dispatch::new(target, json!({"argv": ["true"]})))
        .await?;
    let job = runner
        .lease(&wire::Lease::waiting(5000, 1))
        .await?
        .pop()
        .ok_or_else(|| anyhow::anyhow!("the bench's job was not leased"))?;
    let data = chunk();

    // Through the replica: a streamed PUT, then a streamed GET read to the end.
    progress(&format!("artifacts: uploading {mib} MiB through a replica"));
    let body = futures_util::stream::iter(
        (0..mib).map(move |_| Ok::<Bytes, std::io::Error>(data.clone())),
    );
    let t = Instant::now();
    let (uploaded, up_rss) = peak_rss(
        pid,
        runner.upload_artifact(
            job.id,
            job.epoch,
            "bench.bin",
            reqwest::Body::wrap_stream(body),
            Some(size),
        ),
    )
    .await;
    let up_s = t.elapsed().as_secs_f64();
    anyhow::ensure!(uploaded?.size as u64 == size, "the upload's size differs");
    progress(&format!(
        "artifacts: downloading {mib} MiB through a replica"
    ));
    let t = Instant::now();
    let (read, down_rss) = peak_rss(pid, async {
        let resp = operator
            .download_artifact(job.id, "bench.bin", None)
            .await?;
        let mut stream = resp.bytes_stream();
        let mut n = 0u64;
        while let Some(b) = stream.next().await {
            n += b?.len() as u64;
        }
        anyhow::Ok(n)
    })
    .await;
    let down_s = t.elapsed().as_secs_f64();
    anyhow::ensure!(read? == size, "the download's size differs");

    let (raw_in_s, raw_out_s, raw) = match &args.artifact_store {
        Some(bucket) => {
            let (i, o) = raw_s3(bucket, mib).await?;
            (i, o, ("raw multipart PUT", "raw GET"))
        }
        None => {
            let (i, o) = raw_copy(&url, mib).await?;
            (i, o, ("raw COPY in", "raw COPY out"))
        }
    };

    let mbps = |secs: f64| size as f64 / MIB as f64 / secs;
    let rows = [
        ("artifact_upload_mib_s", mbps(up_s), mbps(raw_in_s), raw.0),
        (
            "artifact_download_mib_s",
            mbps(down_s),
            mbps(raw_out_s),
            raw.1,
        ),
    ];
    for (name, got, raw, what) in rows {
        out.insert(name.into(), round(got, 1));
        out.insert(format!("{name}_raw"), round(raw, 1));
        out.insert(format!("{name}_ratio"), round(got / raw, 2));
        table.push((
            name.into(),
            format!("{got:.1}"),
            format!("{what} {raw:.1} MiB/s ({:.2}x; goal >= 0.7x)", got / raw),
        ));
    }
    out.insert("artifact_mib".into(), json!(mib));
    out.insert(
        "artifact_store".into(),
        json!(if args.artifact_store.is_some() {
            "s3"
        } else {
            "postgres"
        }),
    );
    for (name, mb) in [
        ("artifact_upload_peak_rss_mb", up_rss),
        ("artifact_download_peak_rss_mb", down_rss),
    ] {
        out.insert(name.into(), round(mb, 1));
        table.push((
            name.into(),
            format!("{mb:.1}"),
            format!("replica, during one {mib} MiB transfer"),
        ));
    }
    Ok(())
}

/// The same `mib` MiB straight to `bucket` (`s3://bucket/prefix`) as a multipart upload of 5
/// MiB parts (S3's smallest), then one GET read to the end: seconds in, seconds out.
async fn raw_s3(bucket: &str, mib: usize) -> anyhow::Result<(f64, f64)> {
    use object_store::{path::Path, ObjectStore, WriteMultipart};
    let rest = bucket.strip_prefix("s3://").unwrap_or(bucket);
    let (name, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    let client = object_store::aws::AmazonS3Builder::from_env()
        .with_bucket_name(name)
        .build()?;
    let key = Path::from(format!(
        "{}/bench-raw-{}",
        prefix.trim_matches('/'),
        uuid::Uuid::now_v7()
    ));
    progress(&format!("artifacts: raw multipart PUT of {mib} MiB"));
    let data = chunk();
    let t = Instant::now();
    let mut upload =
        WriteMultipart::new_with_chunk_size(client.put_multipart(&key).await?, 5 * MIB);
    for _ in 0..mib {
        // One part in flight at most, besides the one being filled.
        upload.wait_for_capacity(1).await?;
        upload.put(data.clone());
    }
    upload.finish().await?;
    let put_s = t.elapsed().as_secs_f64();
    progress(&format!("artifacts: raw GET of {mib} MiB"));
    let t = Instant::now();
    let mut stream = client.get(&key).await?.into_stream();
    let mut n = 0u64;
    while let Some(b) = stream.next().await {
        n += b?.len() as u64;
    }
    let get_s = t.elapsed().as_secs_f64();
    anyhow::ensure!(n == (mib * MIB) as u64, "the raw GET read {n} bytes");
    let _ = client.delete(&key).await;
    Ok((put_s, get_s))
}

/// The same `mib` MiB by binary `COPY` into 1 MiB rows of a table of `url`, and out again:
/// seconds in, seconds out.
async fn raw_copy(url: &str, mib: usize) -> anyhow::Result<(f64, f64)> {
    let size = (mib * MIB) as u64;
    let db = setup::connect(url).await?;
    // Logged and uncompressed, as the artifact store's chunk rows are.
    db.batch_execute(
        "CREATE TABLE bench_raw_chunks (n int, data bytea); \
         ALTER TABLE bench_raw_chunks ALTER data SET STORAGE EXTERNAL",
    )
    .await?;
    progress(&format!("artifacts: raw COPY of {mib} MiB in"));
    let data = chunk();
    let t = Instant::now();
    let sink = db
        .copy_in("COPY bench_raw_chunks (n, data) FROM STDIN (FORMAT binary)")
        .await?;
    futures_util::pin_mut!(sink);
    let mut head = BytesMut::new();
    head.put_slice(b"PGCOPY\n\xff\r\n\0");
    head.put_i32(0);
    head.put_i32(0);
    sink.send(head.freeze()).await?;
    for i in 0..mib {
        let mut row = BytesMut::with_capacity(14);
        row.put_i16(2);
        row.put_i32(4);
        row.put_i32(i as i32);
        row.put_i32(MIB as i32);
        sink.send(row.freeze()).await?;
        sink.send(data.clone()).await?;
    }
    sink.send(Bytes::from_static(&[0xff, 0xff])).await?;
    sink.as_mut().finish().await?;
    let raw_in_s = t.elapsed().as_secs_f64();
    progress(&format!("artifacts: raw COPY of {mib} MiB out"));
    let t = Instant::now();
    let stream = db
        .copy_out("COPY (SELECT data FROM bench_raw_chunks ORDER BY n) TO STDOUT (FORMAT binary)")
        .await?;
    futures_util::pin_mut!(stream);
    let mut n = 0u64;
    while let Some(b) = stream.next().await {
        n += b?.len() as u64;
    }
    let raw_out_s = t.elapsed().as_secs_f64();
    anyhow::ensure!(n >= size, "the raw COPY out read {n} bytes");
    Ok((raw_in_s, raw_out_s))
}
