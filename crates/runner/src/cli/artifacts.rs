//! `leasehold job artifacts ID [--epoch N] [--download DIR [PATH...]]`: list a job's
//! artifacts (every attempt's, newest epoch first, with an EPOCH column), or download them under
//! a directory with a progress line on long transfers and each file's sha256 checked against
//! the listing before it takes its name. A download takes each path's newest epoch's file, or
//! with `--epoch N` attempt N's files.
//!
//! Invariant: a download is streamed to `DIR/<path>.part` and renamed only once its size and
//! sha256 match what the service listed (the file of the epoch listed is asked for, so a newer
//! attempt's upload meanwhile changes nothing), so a file under its own name is always whole;
//! the path rule keeps every file inside `DIR`.

use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;
use futures_util::StreamExt;
use sha2::{Digest, Sha256};
use tokio::io::AsyncWriteExt;
use uuid::Uuid;

use super::{print_json, print_table, when};
use crate::client::Client;
use crate::wire::{self, artifacts::is_valid_path};

/// After how long a transfer shows a progress line.
const PROGRESS_AFTER: Duration = Duration::from_secs(1);

/// List (a table, or `--json`), or download `paths` (all when empty) under `download`: of
/// epoch `epoch` only, or each path's newest.
///
/// # Errors
/// The service refused a call, a path was not listed, a file could not be written, or a
/// download's size or sha256 did not match.
pub async fn run(
    client: &Client,
    json: bool,
    id: Uuid,
    epoch: Option<i64>,
    download: Option<&Path>,
    paths: &[String],
) -> anyhow::Result<i32> {
    let mut listed = client.artifacts(id).await?;
    if let Some(e) = epoch {
        listed.retain(|a| a.epoch == e);
    }
    let Some(dir) = download else {
        if json {
            print_json(&wire::ArtifactList {
                artifacts: listed,
                next: None,
            });
        } else {
            let rows: Vec<Vec<String>> = listed
                .iter()
                .map(|a| {
                    vec![
                        a.path.clone(),
                        a.epoch.to_string(),
                        a.size.to_string(),
                        a.sha256.clone(),
                        when(Some(a.created_at)),
                    ]
                })
                .collect();
            print_table(&["PATH", "EPOCH", "SIZE", "SHA256", "CREATED"], &rows);
        }
        return Ok(0);
    };
    // Newest epoch first: the first of each path is its newest file.
    let mut newest: Vec<&wire::Artifact> = Vec::new();
    for a in &listed {
        if !newest.iter().any(|n| n.path == a.path) {
            newest.push(a);
        }
    }
    let wanted: Vec<&wire::Artifact> = if paths.is_empty() {
        newest
    } else {
        paths
            .iter()
            .map(|p| {
                newest
                    .iter()
                    .copied()
                    .find(|a| &a.path == p)
                    .with_context(|| format!("job {id} has no artifact {p}"))
            })
            .collect::<anyhow::Result<_>>()?
    };
    for a in wanted {
        fetch(client, id, a, dir).await?;
        if !json {
            println!("{}  {}", a.sha256, dir.join(&a.path).display());
        }
    }
    Ok(0)
}

async fn fetch(client: &Client, id: Uuid, a: &wire::Artifact, dir: &Path) -> anyhow::Result<()> {
    anyhow::ensure!(
        is_valid_path(&a.path),
        "refusing artifact path {:?}",
        a.path
    );
    let target = dir.join(&a.path);
    if let Some(parent) = target.parent() {
        tokio::fs::create_dir_all(parent)
            .await
            .with_context(|| format!("create {}", parent.display()))?;
    }
    let part = target.with_file_name(format!(
        "{}.part",
        target
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("artifact")
    ));
    let mut out = tokio::fs::File::create(&part)
        .await
        .with_context(|| format!("create {}", part.display()))?;
    let response = client
        .download_artifact_at(id, &a.path, Some(a.epoch), None)
        .await?;
    let mut body = response.bytes_stream();
    let (mut hasher, mut got, started) = (Sha256::new(), 0u64, Instant::now());
    let mut shown = Instant::now();
    while let Some(piece) = body.next().await {
        let piece = piece.with_context(|| format!("download {}", a.path))?;
        hasher.update(&piece);
        got += piece.len() as u64;
        out.write_all(&piece).await?;
        if started.elapsed() >= PROGRESS_AFTER && shown.elapsed() >= Duration::from_millis(200) {
            shown = Instant::now();
            progress(&a.path, got, a.size.max(0) as u64, started.elapsed());
        }
    }
    out.flush().await?;
    drop(out);
    if started.elapsed() >= PROGRESS_AFTER {
        progress(&a.path, got, a.size.max(0) as u64, started.elapsed());
        eprintln!();
    }
    let sha: String = hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    if got != a.size as u64 || sha != a.sha256 {
        let _ = tokio::fs::remove_file(&part).await;
        anyhow::bail!(
            "{}: got {got} bytes with sha256 {sha}, the service lists {} bytes with {}",
            a.path,
            a.size,
            a.sha256
        );
    }
    tokio::fs::rename(&part, &target)
        .await
        .with_context(|| format!("rename to {}", target.display()))?;
    Ok(())
}

/// A progress bar on standard error, redrawn in place.
fn progress(path: &str, got: u64, size: u64, elapsed: Duration) {
    const WIDTH: u64 = 30;
    let filled = (got * WIDTH).checked_div(size).unwrap_or(WIDTH).min(WIDTH) as usize;
    let mib_s = got as f64 / 1_048_576.0 / elapsed.as_secs_f64().max(0.001);
    let mut err = std::io::stderr();
    let _ = write!(
        err,
        "\r{path} [{}{}] {}/{} MiB {mib_s:.1} MiB/s",
        "#".repeat(filled),
        " ".repeat(WIDTH as usize - filled),
        got / 1_048_576,
        size / 1_048_576
    );
    let _ = err.flush();
}
