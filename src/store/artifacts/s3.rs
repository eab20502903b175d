//! The S3 blob store (`LEASEHOLD_ARTIFACT_STORE=s3://bucket/prefix`): a blob is a run of
//! objects of [`chunks::CHUNK`] bytes (the last may be shorter), `<prefix>/<job id>/<blob id>/<n>` for
//! n from 0, each written by one PUT as the bytes arrive and read back by ranged GETs.
//! Credentials, region and endpoint come from the standard `AWS_*` variables
//! (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`, `AWS_ENDPOINT_URL`,
//! `AWS_ALLOW_HTTP` for a plain-HTTP endpoint), through `object_store`.
//!
//! Chunk objects rather than one multipart upload: S3's smallest part is 5 MiB, and a replica
//! keeps at most a mebibyte of any one transfer in memory (contract v1.3). A blob's key, as
//! `artifact_blobs.key` records it, ends with `/`: its chunks are the objects under it. A key
//! without the slash is one whole object, as blobs written before v1.3 are.
//!
//! Invariant: an upload holds at most one chunk it is filling and one being PUT, a download one
//! slice at a time ([`super::chunks`]). An upload given up stops its PUT; the chunks it left,
//! like those of any deleted blob, are removed by the garbage sweep ([`super::sweep`]).

use std::ops::Range;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use futures_util::stream::{StreamExt, TryStreamExt};
use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use object_store::path::Path;
use object_store::{ObjectStore, PutPayload};
use uuid::Uuid;

use super::chunks::{self, ChunkSink, Chunked};
use super::{BlobStore, BlobWriter, ByteStream, StoredBlob};
use crate::store::{Result, StoreError};

/// Blobs as objects of one bucket, under one prefix.
pub struct S3Blobs {
    bucket: Arc<dyn ObjectStore>,
    prefix: String,
}

fn unavailable(e: object_store::Error) -> StoreError {
    StoreError::Unavailable(format!("artifact bucket: {e}"))
}

/// The object of chunk `seq` of the blob under `key` (which ends with `/`).
fn chunk_path(key: &str, seq: u64) -> Path {
    Path::from(format!("{key}{seq:010}"))
}

impl S3Blobs {
    /// The bucket and prefix of `s3://bucket/prefix`, with the `AWS_*` environment and then
    /// `options` (`object_store`'s names, such as `aws_endpoint`).
    ///
    /// # Errors
    /// No bucket is named, an option is unknown, or the client does not build.
    pub fn from_url(url: &str, options: &[(String, String)]) -> anyhow::Result<Self> {
        let rest = url.strip_prefix("s3://").unwrap_or(url);
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        anyhow::ensure!(
            !bucket.is_empty(),
            "LEASEHOLD_ARTIFACT_STORE: '{url}' names no bucket (s3://bucket/prefix)"
        );
        let mut builder = AmazonS3Builder::from_env();
        for (key, value) in options {
            let key: AmazonS3ConfigKey = key
                .parse()
                .map_err(|e| anyhow::anyhow!("artifact bucket option {key}: {e}"))?;
            builder = builder.with_config(key, value);
        }
        let client = builder
            .with_bucket_name(bucket)
            .build()
            .map_err(|e| anyhow::anyhow!("LEASEHOLD_ARTIFACT_STORE: {e}"))?;
        Ok(Self {
            bucket: Arc::new(client),
            prefix: prefix.trim_matches('/').to_owned(),
        })
    }
}

#[async_trait]
impl BlobStore for S3Blobs {
    fn kind(&self) -> &'static str {
        "s3"
    }

    fn key(&self, job: Uuid, blob: Uuid) -> Option<String> {
        Some(if self.prefix.is_empty() {
            format!("{job}/{blob}/")
        } else {
            format!("{}/{job}/{blob}/", self.prefix)
        })
    }

    async fn writer(&self, _blob: Uuid, key: Option<String>) -> Result<Box<dyn BlobWriter>> {
        let key = key.ok_or_else(|| StoreError::Invalid("an S3 blob without a key".into()))?;
        Ok(Box::new(Chunked::new(S3Chunks {
            bucket: self.bucket.clone(),
            key,
        })))
    }

    async fn read(&self, blob: &StoredBlob, range: Range<u64>) -> Result<ByteStream> {
        let key = blob
            .key
            .clone()
            .ok_or_else(|| StoreError::Invalid("an S3 blob without a key".into()))?;
        let bucket = self.bucket.clone();
        // A blob of chunk objects, or a whole object (from before v1.3) read as one chunk.
        let chunked = key.ends_with('/');
        let chunk = if chunked { blob.chunk_size } else { u64::MAX };
        Ok(chunks::read(range, chunk, move |seq, within| {
            let bucket = bucket.clone();
            let path = if chunked {
                chunk_path(&key, seq)
            } else {
                Path::from(key.as_str())
            };
            async move { bucket.get_range(&path, within).await.map_err(unavailable) }
        }))
    }

    async fn remove(&self, keys: &[String]) -> Result<()> {
        for key in keys {
            if key.ends_with('/') {
                let prefix = Path::from(key.as_str());
                let listed = self
                    .bucket
                    .list(Some(&prefix))
                    .map_ok(|o| o.location)
                    .boxed();
                let mut deleted = self.bucket.delete_stream(listed);
                while let Some(r) = deleted.next().await {
                    match r {
                        Ok(_) | Err(object_store::Error::NotFound { .. }) => {}
                        Err(e) => return Err(unavailable(e)),
                    }
                }
                continue;
            }
            match self.bucket.delete(&Path::from(key.as_str())).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(unavailable(e)),
            }
        }
        Ok(())
    }
}

/// Where an upload's chunks go: the objects under its blob's key.
struct S3Chunks {
    bucket: Arc<dyn ObjectStore>,
    /// The blob's key (ending with `/`).
    key: String,
}

#[async_trait]
impl ChunkSink for S3Chunks {
    async fn put(&self, seq: u64, chunk: Bytes) -> Result<()> {
        self.bucket
            .put(&chunk_path(&self.key, seq), PutPayload::from_bytes(chunk))
            .await
            .map(drop)
            .map_err(unavailable)
    }
}
