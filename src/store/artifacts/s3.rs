//! The S3 blob store (`LEASEHOLD_ARTIFACT_STORE=s3://bucket/prefix`): a blob is one object,
//! `<prefix>/<job id>/<blob id>`, written as a multipart upload of [`PART`]-byte parts as the
//! bytes arrive, read back with ranged GETs. Credentials, region and endpoint come from the
//! standard `AWS_*` variables (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`,
//! `AWS_ENDPOINT_URL`, `AWS_ALLOW_HTTP` for a plain-HTTP endpoint), through `object_store`.
//!
//! Invariant: an upload holds at most one part it is filling and one in flight; an upload
//! given up is aborted, and an object whose blob row is deleted is removed by the garbage
//! sweep ([`super::sweep`]).

use std::ops::Range;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use futures_util::stream::{self, StreamExt, TryStreamExt};
use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use object_store::path::Path;
use object_store::{GetOptions, GetRange, ObjectStore, WriteMultipart};
use uuid::Uuid;

use super::{BlobStore, BlobWriter, ByteStream, StoredBlob};
use crate::store::{Result, StoreError};

/// Bytes per part of a multipart upload (S3's smallest allowed part is 5 MiB).
pub const PART: usize = 5 * 1024 * 1024;

/// Blobs as objects of one bucket, under one prefix.
pub struct S3Blobs {
    bucket: Arc<dyn ObjectStore>,
    prefix: String,
}

fn unavailable(e: object_store::Error) -> StoreError {
    StoreError::Unavailable(format!("artifact bucket: {e}"))
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
            format!("{job}/{blob}")
        } else {
            format!("{}/{job}/{blob}", self.prefix)
        })
    }

    async fn writer(&self, _blob: Uuid, key: Option<String>) -> Result<Box<dyn BlobWriter>> {
        let key = key.ok_or_else(|| StoreError::Invalid("an S3 blob without a key".into()))?;
        let upload = self
            .bucket
            .put_multipart(&Path::from(key))
            .await
            .map_err(unavailable)?;
        Ok(Box::new(S3Writer {
            upload: Some(WriteMultipart::new_with_chunk_size(upload, PART)),
        }))
    }

    async fn read(&self, blob: &StoredBlob, range: Range<u64>) -> Result<ByteStream> {
        if range.is_empty() {
            return Ok(stream::empty().boxed());
        }
        let key = blob
            .key
            .clone()
            .ok_or_else(|| StoreError::Invalid("an S3 blob without a key".into()))?;
        let got = self
            .bucket
            .get_opts(
                &Path::from(key),
                GetOptions {
                    range: Some(GetRange::Bounded(range)),
                    ..GetOptions::default()
                },
            )
            .await
            .map_err(unavailable)?;
        Ok(got.into_stream().map_err(unavailable).boxed())
    }

    async fn remove(&self, keys: &[String]) -> Result<()> {
        for key in keys {
            match self.bucket.delete(&Path::from(key.as_str())).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(unavailable(e)),
            }
        }
        Ok(())
    }
}

/// A multipart upload on its way.
struct S3Writer {
    /// `None` once finished or aborted.
    upload: Option<WriteMultipart>,
}

impl S3Writer {
    fn upload(&mut self) -> Result<&mut WriteMultipart> {
        self.upload
            .as_mut()
            .ok_or_else(|| StoreError::Invalid("an S3 upload used after it ended".into()))
    }
}

#[async_trait]
impl BlobWriter for S3Writer {
    async fn write(&mut self, bytes: Bytes) -> Result<()> {
        let upload = self.upload()?;
        // One part in flight at most, besides the one being filled.
        upload.wait_for_capacity(1).await.map_err(unavailable)?;
        upload.put(bytes);
        Ok(())
    }

    async fn finish(&mut self) -> Result<i32> {
        let upload = self
            .upload
            .take()
            .ok_or_else(|| StoreError::Invalid("an S3 upload finished twice".into()))?;
        upload.finish().await.map_err(unavailable)?;
        Ok(PART as i32)
    }

    async fn abort(&mut self) {
        if let Some(upload) = self.upload.take() {
            if let Err(e) = upload.abort().await {
                tracing::warn!(error = %e, "could not abort an S3 multipart upload");
            }
        }
    }
}
