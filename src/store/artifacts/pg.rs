//! The PostgreSQL blob store (the default): a blob is rows of `artifact_chunks`, each
//! [`CHUNK`] bytes but the last, written as they arrive, each in its own short transaction (no
//! transaction stays open across an upload, so none holds back the database's horizon).
//!
//! Invariant: an upload holds at most one chunk it is filling and one being written; a
//! download one chunk at a time, read as a slice when a range starts or ends inside it.

use std::ops::Range;

use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
use futures_util::stream::{self, StreamExt};
use tokio::task::JoinHandle;
use uuid::Uuid;

use super::{BlobStore, BlobWriter, ByteStream, StoredBlob};
use crate::store::{Result, Store, StoreError};

/// Bytes per chunk row.
pub const CHUNK: usize = 1024 * 1024;

/// Blobs as chunk rows of the service's own database.
pub struct PgBlobs {
    store: Store,
}

impl PgBlobs {
    pub fn new(store: Store) -> Self {
        Self { store }
    }
}

#[async_trait]
impl BlobStore for PgBlobs {
    fn kind(&self) -> &'static str {
        "pg"
    }

    fn key(&self, _job: Uuid, _blob: Uuid) -> Option<String> {
        None
    }

    async fn writer(&self, blob: Uuid, _key: Option<String>) -> Result<Box<dyn BlobWriter>> {
        Ok(Box::new(PgWriter {
            store: self.store.clone(),
            blob,
            filling: BytesMut::with_capacity(CHUNK),
            seq: 0,
            in_flight: None,
        }))
    }

    async fn read(&self, blob: &StoredBlob, range: Range<u64>) -> Result<ByteStream> {
        let store = self.store.clone();
        let (id, chunk) = (blob.id, blob.chunk_size.max(1));
        let reads = stream::try_unfold(range.start, move |at| {
            let store = store.clone();
            async move {
                if at >= range.end {
                    return Ok(None);
                }
                let seq = at / chunk;
                let offset = at % chunk;
                let len = (chunk - offset).min(range.end - at);
                let part = |v: u64| {
                    i32::try_from(v).map_err(|_| StoreError::Invalid("chunk bounds".into()))
                };
                let bytes = store
                    .artifact_chunk_read(id, part(seq)?, part(offset)?, part(len)?)
                    .await?;
                if bytes.len() as u64 != len {
                    return Err(StoreError::Invalid(format!(
                        "chunk {seq} of blob {id} is shorter than its artifact says"
                    )));
                }
                Ok(Some((bytes, at + len)))
            }
        });
        Ok(reads.boxed())
    }

    async fn remove(&self, _keys: &[String]) -> Result<()> {
        Ok(())
    }
}

/// An upload into chunk rows.
struct PgWriter {
    store: Store,
    blob: Uuid,
    /// The chunk being filled.
    filling: BytesMut,
    /// The number of the next chunk written.
    seq: i32,
    /// The chunk being written, if one is.
    in_flight: Option<JoinHandle<Result<()>>>,
}

impl PgWriter {
    /// Wait for the chunk in flight, then send `chunk` on its way.
    async fn send(&mut self, chunk: Bytes) -> Result<()> {
        self.settle().await?;
        let (store, blob, seq) = (self.store.clone(), self.blob, self.seq);
        self.seq += 1;
        self.in_flight = Some(tokio::spawn(async move {
            store.artifact_chunk(blob, seq, &chunk).await
        }));
        Ok(())
    }

    async fn settle(&mut self) -> Result<()> {
        match self.in_flight.take() {
            Some(h) => h
                .await
                .map_err(|_| StoreError::Invalid("a chunk write was lost".into()))?,
            None => Ok(()),
        }
    }
}

#[async_trait]
impl BlobWriter for PgWriter {
    async fn write(&mut self, mut bytes: Bytes) -> Result<()> {
        while !bytes.is_empty() {
            let room = CHUNK - self.filling.len();
            if self.filling.is_empty() && bytes.len() >= CHUNK {
                // A whole chunk in one piece: sent as it is, no copy.
                let chunk = bytes.split_to(CHUNK);
                self.send(chunk).await?;
                continue;
            }
            let take = room.min(bytes.len());
            self.filling.extend_from_slice(&bytes.split_to(take));
            if self.filling.len() == CHUNK {
                let chunk = std::mem::replace(&mut self.filling, BytesMut::with_capacity(CHUNK));
                self.send(chunk.freeze()).await?;
            }
        }
        Ok(())
    }

    async fn finish(&mut self) -> Result<i32> {
        if !self.filling.is_empty() {
            let chunk = std::mem::take(&mut self.filling).freeze();
            self.send(chunk).await?;
        }
        self.settle().await?;
        Ok(CHUNK as i32)
    }

    async fn abort(&mut self) {
        if let Some(h) = self.in_flight.take() {
            h.abort();
        }
    }
}

impl Drop for PgWriter {
    fn drop(&mut self) {
        if let Some(h) = self.in_flight.take() {
            h.abort();
        }
    }
}
