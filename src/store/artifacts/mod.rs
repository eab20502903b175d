//! Artifacts in the store: their metadata (always in PostgreSQL) and the one interface their
//! bytes go through ([`BlobStore`]), with two implementations: chunk rows in PostgreSQL
//! ([`pg::PgBlobs`], the default) and objects in an S3-compatible bucket ([`s3::S3Blobs`],
//! `LEASEHOLD_ARTIFACT_STORE=s3://bucket/prefix`).
//!
//! Invariants: bytes stream both ways, a bounded number of chunks at a time, never a whole
//! file in memory. An artifact is visible only once every byte is stored and the job is still
//! held at the upload's epoch, checked in the statement that publishes it
//! (`artifact_publish.sql`). Every blob hangs off its job (`ON DELETE CASCADE`), so deleting a
//! job deletes its artifacts in both stores: an S3 blob's key goes to `artifact_garbage` by
//! trigger and [`Store::collect_artifact_garbage`] removes its objects. A blob that never
//! completes is deleted by the replica that wrote it, or by the stale-upload sweep.

pub mod chunks;
pub mod pg;
pub mod s3;

use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use chrono::{DateTime, Utc};
use futures_util::stream::BoxStream;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::jobs::Fenced;
use super::{sql, At, Result, Store, StoreError};

/// A stream of a blob's bytes.
pub type ByteStream = BoxStream<'static, Result<Bytes>>;

/// Where artifact bytes are kept. One per replica, shared by every call.
#[async_trait]
pub trait BlobStore: Send + Sync + 'static {
    /// `artifact_blobs.store` of the blobs it writes: `pg` or `s3`.
    fn kind(&self) -> &'static str;
    /// The object key of blob `blob` of job `job` (`None`: kept in PostgreSQL rows).
    fn key(&self, job: Uuid, blob: Uuid) -> Option<String>;
    /// Start writing blob `blob` (its row exists), stored under `key`.
    ///
    /// # Errors
    /// The store cannot be reached.
    async fn writer(&self, blob: Uuid, key: Option<String>) -> Result<Box<dyn BlobWriter>>;
    /// Bytes `range` of a stored blob (`range` within its size).
    ///
    /// # Errors
    /// The store cannot be reached (later failures end the stream with an error).
    async fn read(&self, blob: &StoredBlob, range: Range<u64>) -> Result<ByteStream>;
    /// Remove the objects of deleted blobs (PostgreSQL chunks go with their rows: nothing).
    ///
    /// # Errors
    /// The store cannot be reached; what was not removed is tried again.
    async fn remove(&self, keys: &[String]) -> Result<()>;
}

/// An upload on its way into a [`BlobStore`].
#[async_trait]
pub trait BlobWriter: Send {
    /// Store `bytes` after what came before (buffered up to one chunk, and at most one more in
    /// flight).
    ///
    /// # Errors
    /// The store failed: the upload is lost.
    async fn write(&mut self, bytes: Bytes) -> Result<()>;
    /// Every byte is stored; the chunk size it was stored in.
    ///
    /// # Errors
    /// The store failed: the upload is lost.
    async fn finish(&mut self) -> Result<i32>;
    /// Give up: what the store holds of it is removed where it can be (best effort; the
    /// blob's row going takes care of the rest).
    async fn abort(&mut self);
}

/// A stored blob, as a download reads it.
#[derive(Debug, Clone)]
pub struct StoredBlob {
    pub id: Uuid,
    pub store: String,
    pub key: Option<String>,
    pub size: u64,
    pub chunk_size: u64,
}

/// An artifact as listed.
#[derive(Debug, Clone)]
pub struct ArtifactInfo {
    pub path: String,
    /// The epoch it was uploaded at (v1.3: each attempt has its own files).
    pub epoch: i64,
    pub size: i64,
    pub sha256: String,
    pub created_at: DateTime<Utc>,
}

/// An artifact with where its bytes are.
#[derive(Debug, Clone)]
pub struct StoredArtifact {
    pub epoch: i64,
    pub sha256: String,
    pub created_at: DateTime<Utc>,
    pub blob: StoredBlob,
}

/// What publishing an upload did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Published {
    /// Visible from now on.
    Visible(DateTime<Utc>),
    /// Another upload of the same path was published first.
    Taken,
}

/// The artifact bounds (v1.3): per job over all its attempts, and per workspace.
#[derive(Debug, Clone, Copy)]
pub struct ArtifactBounds {
    /// `LEASEHOLD_ARTIFACT_MAX_FILES`.
    pub max_files: u32,
    /// `LEASEHOLD_ARTIFACT_JOB_MAX_BYTES`.
    pub job_max_bytes: u64,
    /// `LEASEHOLD_ARTIFACT_WORKSPACE_MAX_BYTES` (`None`: no bound).
    pub workspace_max_bytes: Option<u64>,
}

/// A move of an upload's reservation: blob `blob` of job `job` to `want` bytes, and at least
/// `need` (less than it holds gives the rest back).
#[derive(Debug, Clone)]
pub struct Reservation<'a> {
    pub blob: Uuid,
    pub job: Uuid,
    /// The upload starts: its blob is recorded (in the store of this kind, under this key)
    /// holding one of the job's files.
    pub start: Option<(&'a str, Option<&'a str>)>,
    pub need: u64,
    pub want: u64,
}

/// Which bound refused a reservation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    Files,
    JobBytes,
    WorkspaceBytes,
    /// The job, or the blob to grow, is gone.
    Gone,
}

/// An upload ready to publish.
#[derive(Debug, Clone)]
pub struct Upload<'a> {
    pub job: Uuid,
    pub epoch: i64,
    pub token_hash: &'a [u8],
    pub path: &'a str,
    pub blob: Uuid,
    pub size: i64,
    pub sha256: &'a str,
    pub chunk_size: i32,
}

impl Store {
    /// Does the runner of `token_hash` hold job `job` at `epoch`, and is `path` taken?
    ///
    /// # Errors
    /// The database failed.
    pub async fn artifact_fence(
        &self,
        job: Uuid,
        epoch: i64,
        token_hash: &[u8],
        path: &str,
    ) -> Result<Fenced<bool>> {
        let row = self
            .query_opt(sql::ARTIFACT_FENCE, &[&job, &epoch, &token_hash, &path])
            .await?;
        let taken = row.map(|r| r.get::<_, bool>("taken"));
        self.fenced(job, token_hash, taken).await
    }

    /// Move an upload's reservation under `bounds` (`artifact_reserve.sql`): the bytes its blob
    /// now holds, or the bound that refused it.
    ///
    /// # Errors
    /// The database failed.
    pub async fn artifact_reserve(
        &self,
        r: &Reservation<'_>,
        bounds: &ArtifactBounds,
    ) -> Result<std::result::Result<u64, Refused>> {
        let (start, kind, key) = match r.start {
            Some((kind, key)) => (true, Some(kind), key),
            None => (false, None, None),
        };
        let int = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        let max_files = i32::try_from(bounds.max_files).unwrap_or(i32::MAX);
        let workspace = bounds.workspace_max_bytes.map(int);
        let row = self
            .query_opt(
                sql::ARTIFACT_RESERVE,
                &[
                    &r.blob,
                    &r.job,
                    &start,
                    &kind,
                    &key,
                    &int(r.need),
                    &int(r.want),
                    &max_files,
                    &int(bounds.job_max_bytes),
                    &workspace,
                ],
            )
            .await?
            .ok_or_else(|| StoreError::Invalid("artifact_reserve.sql returned no row".into()))?;
        Ok(match row.get::<_, Option<i64>>("reserved") {
            Some(n) => Ok(n.max(0) as u64),
            None => Err(match row.get::<_, Option<String>>("refused").as_deref() {
                Some("files") => Refused::Files,
                Some("job_bytes") => Refused::JobBytes,
                Some("workspace_bytes") => Refused::WorkspaceBytes,
                _ => Refused::Gone,
            }),
        })
    }

    /// Store chunk `seq` of blob `blob`.
    ///
    /// # Errors
    /// The database failed.
    pub async fn artifact_chunk(&self, blob: Uuid, seq: i32, data: &[u8]) -> Result<()> {
        self.execute(sql::ARTIFACT_CHUNK_INSERT, &[&blob, &seq, &data])
            .await
            .map(drop)
    }

    /// An upload of blob `blob` still runs.
    ///
    /// # Errors
    /// The database failed.
    pub async fn artifact_blob_touch(&self, blob: Uuid) -> Result<()> {
        self.execute(sql::ARTIFACT_BLOB_TOUCH, &[&blob])
            .await
            .map(drop)
    }

    /// Make an upload visible, fenced by its epoch in the same statement.
    ///
    /// # Errors
    /// The database failed.
    pub async fn artifact_publish(&self, up: &Upload<'_>) -> Result<Fenced<Published>> {
        let row = self
            .query_opt(
                sql::ARTIFACT_PUBLISH,
                &[
                    &up.job,
                    &up.epoch,
                    &up.token_hash,
                    &up.path,
                    &up.blob,
                    &up.size,
                    &up.sha256,
                    &up.chunk_size,
                ],
            )
            .await?
            .ok_or_else(|| StoreError::Invalid("artifact_publish.sql returned no row".into()))?;
        let done = row.get::<_, bool>("held").then(|| {
            match row.get::<_, Option<DateTime<Utc>>>("created_at") {
                Some(at) => Published::Visible(at),
                None => Published::Taken,
            }
        });
        self.fenced(up.job, up.token_hash, done).await
    }

    /// An upload that will not complete: its blob row (and chunks, and for S3 its object, by
    /// the garbage sweep) go.
    ///
    /// # Errors
    /// The database failed.
    pub async fn artifact_blob_delete(&self, blob: Uuid) -> Result<()> {
        self.execute(sql::ARTIFACT_BLOB_DELETE, &[&blob])
            .await
            .map(drop)
    }

    /// A page of job `job`'s artifacts as `workspace` sees it, newest epoch first, then by
    /// path: at most `limit` after the artifact `after` names (`(epoch, path)`, exclusive);
    /// `None` when the job is not visible.
    ///
    /// # Errors
    /// The database failed.
    pub async fn artifacts(
        &self,
        job: Uuid,
        workspace: &str,
        after: Option<(i64, &str)>,
        limit: i64,
    ) -> Result<Option<Vec<ArtifactInfo>>> {
        // The first page starts after an epoch above any (and a path below any).
        let (epoch, path) = after.unwrap_or((i64::MAX, ""));
        let rows = self
            .query(
                sql::ARTIFACTS_LIST,
                &[&job, &workspace, &epoch, &path, &limit],
            )
            .await?;
        if rows.is_empty() {
            return Ok(None);
        }
        Ok(Some(
            rows.iter()
                .filter_map(|r| {
                    Some(ArtifactInfo {
                        path: r.get::<_, Option<String>>("path")?,
                        epoch: r.get("epoch"),
                        size: r.get("size"),
                        sha256: r.get("sha256"),
                        created_at: r.get("created_at"),
                    })
                })
                .collect(),
        ))
    }

    /// Artifact `path` of job `job` as `workspace` sees it: the file of `epoch`, or the newest
    /// epoch's.
    ///
    /// # Errors
    /// The database failed.
    pub async fn artifact(
        &self,
        job: Uuid,
        path: &str,
        epoch: Option<i64>,
        workspace: &str,
    ) -> Result<Option<StoredArtifact>> {
        let row = self
            .query_opt(sql::ARTIFACT_GET, &[&job, &path, &workspace, &epoch])
            .await?;
        Ok(row.map(|r| StoredArtifact {
            epoch: r.get("epoch"),
            sha256: r.get("sha256"),
            created_at: r.get("created_at"),
            blob: StoredBlob {
                id: r.get("blob_id"),
                store: r.get("store"),
                key: r.get("key"),
                size: r.get::<_, i64>("size").max(0) as u64,
                chunk_size: r.get::<_, i32>("chunk_size").max(1) as u64,
            },
        }))
    }

    /// Bytes `from..to` of chunk `seq` of blob `blob` (empty when there is no such chunk).
    ///
    /// # Errors
    /// The database failed.
    pub async fn artifact_chunk_read(
        &self,
        blob: Uuid,
        seq: i32,
        from: i32,
        to: i32,
    ) -> Result<Bytes> {
        let row = self
            .query_opt(sql::ARTIFACT_CHUNK_READ, &[&blob, &seq, &from, &to])
            .await?;
        Ok(row.map_or_else(Bytes::new, |r| Bytes::from(r.get::<_, Vec<u8>>("data"))))
    }

    /// Delete up to a batch of uploads untouched for `stale_ms`; how many.
    ///
    /// # Errors
    /// The database failed.
    pub async fn sweep_artifact_uploads(&self, stale_ms: i64) -> Result<u64> {
        self.execute(sql::SWEEP_ARTIFACT_UPLOADS, &[&stale_ms])
            .await
    }

    /// Remove up to `batch` objects of deleted S3 blobs from `blobs`, then forget their keys,
    /// in one transaction whose rows stay locked meanwhile (another replica's sweep takes
    /// others); how many.
    ///
    /// # Errors
    /// The database or the bucket failed: nothing is forgotten, the keys are tried again.
    pub async fn collect_artifact_garbage(
        &self,
        blobs: &dyn BlobStore,
        batch: i64,
    ) -> Result<usize> {
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        let take = tx
            .prepare_cached(sql::ARTIFACT_GARBAGE_TAKE)
            .await
            .at(sql::ARTIFACT_GARBAGE_TAKE)?;
        let keys: Vec<String> = tx
            .query(&take, &[&batch])
            .await
            .at(sql::ARTIFACT_GARBAGE_TAKE)?
            .iter()
            .map(|r| r.get("key"))
            .collect();
        if keys.is_empty() {
            tx.rollback().await?;
            client.release();
            return Ok(0);
        }
        blobs.remove(&keys).await?;
        let forget = tx
            .prepare_cached(sql::ARTIFACT_GARBAGE_FORGET)
            .await
            .at(sql::ARTIFACT_GARBAGE_FORGET)?;
        tx.execute(&forget, &[&keys])
            .await
            .at(sql::ARTIFACT_GARBAGE_FORGET)?;
        tx.commit().await?;
        self.count(4);
        client.release();
        Ok(keys.len())
    }
}

/// How often a running upload touches its blob, so the stale-upload sweep (after `stale`)
/// leaves it alone: six times within `stale`, at most every ten seconds.
pub fn touch_every(stale: Duration) -> Duration {
    (stale / 6).min(Duration::from_secs(10))
}

/// The artifact maintenance of one replica, until `cancel`: every `interval`, uploads
/// untouched for `stale` go, and (S3) objects of deleted blobs are removed from the bucket, a
/// paced batch at a time. Safe on every replica at once (`SKIP LOCKED`).
pub async fn sweep(
    store: Store,
    blobs: Arc<dyn BlobStore>,
    interval: Duration,
    stale: Duration,
    cancel: CancellationToken,
) {
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tokio::select! {
            () = cancel.cancelled() => return,
            _ = tick.tick() => {}
        }
        let stale_ms = i64::try_from(stale.as_millis()).unwrap_or(i64::MAX);
        if let Err(e) = store.sweep_artifact_uploads(stale_ms).await {
            tracing::warn!(error = %e, "the stale-upload sweep failed; it runs again");
        }
        if blobs.kind() == "s3" {
            match store.collect_artifact_garbage(blobs.as_ref(), 100).await {
                Ok(n) if n > 0 => tracing::debug!(n, "removed deleted artifacts from the bucket"),
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "the artifact garbage sweep failed; it runs again")
                }
            }
        }
    }
}

/// The blob store `LEASEHOLD_ARTIFACT_STORE` names: `postgres` (or unset) for chunk rows,
/// `s3://bucket/prefix` for a bucket (credentials and endpoint from the standard `AWS_*`
/// variables, then `s3_options`).
///
/// # Errors
/// The value is neither, or the bucket's configuration does not build.
pub fn open(
    spec: Option<&str>,
    s3_options: &[(String, String)],
    store: &Store,
) -> anyhow::Result<Arc<dyn BlobStore>> {
    match spec.map(str::trim) {
        None | Some("" | "postgres" | "postgresql" | "pg") => {
            Ok(Arc::new(pg::PgBlobs::new(store.clone())))
        }
        Some(url) if url.starts_with("s3://") => {
            Ok(Arc::new(s3::S3Blobs::from_url(url, s3_options)?))
        }
        Some(other) => anyhow::bail!(
            "LEASEHOLD_ARTIFACT_STORE: '{other}' is neither 'postgres' nor s3://bucket/prefix"
        ),
    }
}
