//! What both blob stores share: a blob is a run of chunks of [`CHUNK`] bytes (the last may be
//! shorter), numbered from 0; an upload fills one chunk while the one before it is being stored
//! ([`Chunked`], over a store's [`ChunkSink`]), and a download reads one slice of a chunk at a
//! time ([`read`], over a store's fetch of one slice).
//!
//! Invariant: a replica keeps at most a mebibyte of any one transfer in memory (contract v1.3):
//! an upload holds at most the chunk it fills and the one in flight (2 × [`CHUNK`]), a download
//! the one slice it has read and not yet handed on (at most [`CHUNK`]); hyper's own buffer of
//! the connection (`replica::connections::MAX_BUF`) is the rest. No chunk buffer is allocated
//! before its first byte, so a transfer that trickles holds what it sent.

use std::future::Future;
use std::ops::Range;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
use futures_util::stream::{self, StreamExt};
use tokio::task::JoinHandle;

use super::{BlobWriter, ByteStream};
use crate::store::{Result, StoreError};

/// Bytes per chunk of the blobs a replica writes (blobs written before v1.3 keep theirs: each
/// artifact records its chunk size).
pub const CHUNK: usize = 256 * 1024;

/// The slices of `range` of a blob of `chunk`-byte chunks, each at most [`CHUNK`] bytes within
/// one chunk: `(chunk number, byte range within that chunk)`, in order.
pub fn slices(range: Range<u64>, chunk: u64) -> impl Iterator<Item = (u64, Range<u64>)> + Send {
    let chunk = chunk.max(1);
    let step = chunk.min(CHUNK as u64);
    let mut at = range.start;
    std::iter::from_fn(move || {
        if at >= range.end {
            return None;
        }
        let (seq, from) = (at / chunk, at % chunk);
        // To the end of this slice of the chunk, the chunk or the range, whichever is first.
        let to = (from / step + 1) * step;
        let to = to.min(chunk).min(from + (range.end - at));
        at += to - from;
        Some((seq, from..to))
    })
}

/// The bytes of `range` of a blob of `chunk`-byte chunks, one slice at a time, each fetched by
/// `fetch(chunk number, range within it)` when the one before has been taken, and checked to be
/// as long as asked.
pub fn read<F, Fut>(range: Range<u64>, chunk: u64, fetch: F) -> ByteStream
where
    F: Fn(u64, Range<u64>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Bytes>> + Send + 'static,
{
    let fetch = Arc::new(fetch);
    stream::iter(slices(range, chunk))
        .then(move |(seq, within)| {
            let fetch = fetch.clone();
            async move {
                let want = within.end - within.start;
                let bytes = fetch(seq, within).await?;
                if bytes.len() as u64 != want {
                    return Err(StoreError::Invalid(format!(
                        "chunk {seq} is shorter than its artifact says ({} of {want} bytes)",
                        bytes.len()
                    )));
                }
                Ok(bytes)
            }
        })
        .boxed()
}

/// Where a [`Chunked`] writer stores each chunk.
#[async_trait]
pub trait ChunkSink: Send + Sync + 'static {
    /// Store chunk `seq` (from 0).
    ///
    /// # Errors
    /// The store failed: the upload is lost.
    async fn put(&self, seq: u64, chunk: Bytes) -> Result<()>;
}

/// An upload cut into chunks as it arrives: one being filled, at most one being stored.
pub struct Chunked<S: ChunkSink> {
    sink: Arc<S>,
    /// The chunk being filled (no allocation until its first byte).
    filling: BytesMut,
    /// The number of the next chunk stored.
    seq: u64,
    /// The chunk being stored, if one is.
    in_flight: Option<JoinHandle<Result<()>>>,
}

impl<S: ChunkSink> Chunked<S> {
    pub fn new(sink: S) -> Self {
        Self {
            sink: Arc::new(sink),
            filling: BytesMut::new(),
            seq: 0,
            in_flight: None,
        }
    }

    /// Wait for the chunk in flight, then send `chunk` on its way.
    async fn send(&mut self, chunk: Bytes) -> Result<()> {
        self.settle().await?;
        let (sink, seq) = (self.sink.clone(), self.seq);
        self.seq += 1;
        self.in_flight = Some(tokio::spawn(async move { sink.put(seq, chunk).await }));
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
impl<S: ChunkSink> BlobWriter for Chunked<S> {
    async fn write(&mut self, mut bytes: Bytes) -> Result<()> {
        while !bytes.is_empty() {
            if self.filling.is_empty() && bytes.len() >= CHUNK {
                // A whole chunk in one piece: sent as it is, no copy.
                let chunk = bytes.split_to(CHUNK);
                self.send(chunk).await?;
                continue;
            }
            if self.filling.capacity() == 0 {
                self.filling.reserve(CHUNK);
            }
            let take = (CHUNK - self.filling.len()).min(bytes.len());
            self.filling.extend_from_slice(&bytes.split_to(take));
            if self.filling.len() == CHUNK {
                let chunk = std::mem::take(&mut self.filling).freeze();
                self.send(chunk).await?;
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

impl<S: ChunkSink> Drop for Chunked<S> {
    fn drop(&mut self) {
        if let Some(h) = self.in_flight.take() {
            h.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const K: u64 = CHUNK as u64;

    #[test]
    fn slices_stay_within_a_chunk_and_a_slice_and_cover_the_range() {
        // Chunks of this store's size: one slice a chunk, the ends cut.
        let got: Vec<_> = slices(10..2 * K + 5, K).collect();
        assert_eq!(got, [(0, 10..K), (1, 0..K), (2, 0..5)]);
        // Larger chunks of an older blob: several slices each.
        let big = 4 * K;
        let got: Vec<_> = slices(K - 1..big + 1, big).collect();
        assert_eq!(
            got,
            [
                (0, K - 1..K),
                (0, K..2 * K),
                (0, 2 * K..3 * K),
                (0, 3 * K..4 * K),
                (1, 0..1)
            ]
        );
        assert_eq!(slices(5..5, K).count(), 0);
        // A whole object read as a blob of one huge chunk.
        let got: Vec<_> = slices(0..K + 1, u64::MAX).collect();
        assert_eq!(got, [(0, 0..K), (0, K..K + 1)]);
    }
}
