//! The PostgreSQL blob store (the default): a blob is rows of `artifact_chunks`, each
//! [`chunks::CHUNK`] bytes but the last, written as they arrive, each in its own short
//! transaction (no transaction stays open across an upload, so none holds back the database's
//! horizon), and read back a slice of a row per statement (the column is stored uncompressed,
//! so only the slice is read).
//!
//! Invariant: an upload holds at most one chunk it is filling and one being written, a download
//! one slice at a time ([`super::chunks`]).

use std::ops::Range;

use async_trait::async_trait;
use bytes::Bytes;
use uuid::Uuid;

use super::chunks::{self, ChunkSink, Chunked};
use super::{BlobStore, BlobWriter, ByteStream, StoredBlob};
use crate::store::{Result, Store, StoreError};

/// Blobs as chunk rows of the service's own database.
pub struct PgBlobs {
    store: Store,
}

impl PgBlobs {
    pub fn new(store: Store) -> Self {
        Self { store }
    }
}

/// A chunk number or an offset within a chunk, as the statements take it.
fn int(v: u64) -> Result<i32> {
    i32::try_from(v).map_err(|_| StoreError::Invalid("chunk bounds".into()))
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
        Ok(Box::new(Chunked::new(PgChunks {
            store: self.store.clone(),
            blob,
        })))
    }

    async fn read(&self, blob: &StoredBlob, range: Range<u64>) -> Result<ByteStream> {
        let (store, id) = (self.store.clone(), blob.id);
        Ok(chunks::read(range, blob.chunk_size, move |seq, within| {
            let store = store.clone();
            async move {
                let seq = int(seq)?;
                let (from, to) = (int(within.start)?, int(within.end)?);
                store.artifact_chunk_read(id, seq, from, to).await
            }
        }))
    }

    async fn remove(&self, _keys: &[String]) -> Result<()> {
        Ok(())
    }
}

/// Where an upload's chunks go: rows of its blob.
struct PgChunks {
    store: Store,
    blob: Uuid,
}

#[async_trait]
impl ChunkSink for PgChunks {
    async fn put(&self, seq: u64, chunk: Bytes) -> Result<()> {
        self.store
            .artifact_chunk(self.blob, int(seq)?, &chunk)
            .await
    }
}
