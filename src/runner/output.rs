//! A job's output: split into lines, buffered, shipped to the server as `stdout` / `stderr`
//! events in batches, and remembered as a short tail for the result.
//!
//! Invariants: memory is bounded whatever the command prints or however slow the server is.
//! Reading the pipes never waits for the network (a command never stalls because the server
//! is slow); when the pending buffer is full, or the job has streamed its allowance, lines are
//! dropped and counted, and one `output.dropped` event says how many. Every event fits the
//! contract's 64 KiB: a line longer than [`MAX_LINE_BYTES`] is split. Lines keep their order
//! within the job, across both streams, as the runner read them. Every value the job was
//! given as a secret, and its base64 forms, is replaced by `***` in every line shipped and in
//! the tails (a value split across an 8 KiB line cut or the start of a tail cannot be seen
//! whole there, and is not masked).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::Notify;
use tokio::time::Instant;
use uuid::Uuid;

use super::servers::{CallError, Servers};
use crate::wire::NewEvent;

/// Longest line sent as one event; JSON escaping can grow it up to six times, still < 64 KiB.
pub const MAX_LINE_BYTES: usize = 8 * 1024;
/// Bytes of each stream kept for the result's `stdout_tail` / `stderr_tail`.
pub const TAIL_BYTES: usize = 4 * 1024;
/// Output waiting to be shipped; beyond it lines are dropped.
const MAX_PENDING_BYTES: usize = 1024 * 1024;
/// Output one job may stream in total; beyond it lines are dropped (the tail still follows).
const MAX_STREAMED_BYTES: u64 = 64 * 1024 * 1024;
/// At most this much line text per events call (the server takes 1 MiB bodies).
const MAX_BATCH_BYTES: usize = 256 * 1024;
/// At most this many events per call (the contract's limit is 1000).
const MAX_BATCH_EVENTS: usize = 500;
/// Pending lines are shipped at least this often.
const FLUSH_EVERY: Duration = Duration::from_millis(200);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

impl Stream {
    pub fn kind(self) -> &'static str {
        match self {
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
        }
    }
}

#[derive(Default)]
struct Pending {
    lines: VecDeque<(Stream, String)>,
    bytes: usize,
    streamed: u64,
    dropped_lines: u64,
    dropped_bytes: u64,
    tails: [Vec<u8>; 2],
}

/// The shared buffer between a job's pipe readers and its shipper.
#[derive(Default)]
pub struct Output {
    pending: Mutex<Pending>,
    wake: Notify,
    /// Texts replaced by `***`, longest first.
    masks: Vec<String>,
}

/// What stands in for a secret in output.
pub const MASK: &str = "***";

impl Output {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// A buffer that masks each of `secrets`, and its standard and URL-safe base64 forms (with
    /// and without padding), wherever they appear.
    pub fn masking<'a>(secrets: impl IntoIterator<Item = &'a str>) -> Arc<Self> {
        use base64::engine::general_purpose::{
            STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD,
        };
        use base64::Engine;
        let mut masks: Vec<String> = Vec::new();
        for s in secrets.into_iter().filter(|s| !s.is_empty()) {
            masks.push(s.to_owned());
            for engine in [STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD] {
                masks.push(engine.encode(s));
            }
        }
        masks.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        masks.dedup();
        Arc::new(Self {
            masks,
            ..Self::default()
        })
    }

    /// `text` with every mask replaced.
    fn mask(&self, text: String) -> String {
        if self.masks.iter().all(|m| !text.contains(m.as_str())) {
            return text;
        }
        let mut text = text;
        for m in &self.masks {
            if text.contains(m.as_str()) {
                text = text.replace(m.as_str(), MASK);
            }
        }
        text
    }

    fn push_line(&self, stream: Stream, line: String) {
        let line = self.mask(line);
        let mut p = self.pending.lock().expect("output lock");
        let n = line.len();
        if p.bytes + n > MAX_PENDING_BYTES || p.streamed + n as u64 > MAX_STREAMED_BYTES {
            p.dropped_lines += 1;
            p.dropped_bytes += n as u64;
            return;
        }
        p.bytes += n;
        p.streamed += n as u64;
        p.lines.push_back((stream, line));
        let big = p.bytes >= MAX_BATCH_BYTES || p.lines.len() >= MAX_BATCH_EVENTS;
        drop(p);
        if big {
            self.wake.notify_one();
        }
    }

    fn push_tail(&self, stream: Stream, bytes: &[u8]) {
        let mut p = self.pending.lock().expect("output lock");
        let tail = &mut p.tails[stream as usize];
        tail.extend_from_slice(bytes);
        if tail.len() > 2 * TAIL_BYTES {
            let cut = tail.len() - TAIL_BYTES;
            tail.drain(..cut);
        }
    }

    /// A line from the runner itself about the job, shown with the command's own output.
    pub fn note(&self, stream: Stream, text: &str) {
        self.push_tail(stream, format!("{text}\n").as_bytes());
        self.push_line(stream, text.to_owned());
    }

    /// The last [`TAIL_BYTES`] of a stream, as text (invalid UTF-8 replaced).
    pub fn tail(&self, stream: Stream) -> String {
        let p = self.pending.lock().expect("output lock");
        // Mask the whole kept buffer before cutting, so a secret near the cut is still seen.
        let text = self.mask(String::from_utf8_lossy(&p.tails[stream as usize]).into_owned());
        drop(p);
        let mut start = text.len().saturating_sub(TAIL_BYTES);
        // Do not begin in the middle of a character.
        while !text.is_char_boundary(start) {
            start += 1;
        }
        text[start..].to_owned()
    }

    /// Take the next batch to ship: whole lines up to the batch limits, plus an
    /// `output.dropped` event when lines were dropped since the last batch.
    fn take_batch(&self) -> Vec<NewEvent> {
        let mut p = self.pending.lock().expect("output lock");
        let mut events = Vec::new();
        let mut bytes = 0;
        while let Some((_, line)) = p.lines.front() {
            if !events.is_empty()
                && (bytes + line.len() > MAX_BATCH_BYTES || events.len() >= MAX_BATCH_EVENTS)
            {
                break;
            }
            let (stream, line) = p.lines.pop_front().expect("front exists");
            bytes += line.len();
            p.bytes -= line.len();
            events.push(NewEvent {
                kind: stream.kind().into(),
                data: Some(json!({ "line": line })),
            });
        }
        if p.dropped_lines > 0 && events.len() < MAX_BATCH_EVENTS {
            events.push(NewEvent {
                kind: "output.dropped".into(),
                data: Some(json!({"lines": p.dropped_lines, "bytes": p.dropped_bytes})),
            });
            p.dropped_lines = 0;
            p.dropped_bytes = 0;
        }
        events
    }

    fn is_empty(&self) -> bool {
        let p = self.pending.lock().expect("output lock");
        p.lines.is_empty() && p.dropped_lines == 0
    }
}

/// The start of `bytes` up to `max`, not splitting a UTF-8 character when it can help it.
fn cut_point(bytes: &[u8], max: usize) -> usize {
    let mut cut = max.min(bytes.len());
    let floor = cut.saturating_sub(3);
    while cut > floor && cut < bytes.len() && (bytes[cut] & 0xC0) == 0x80 {
        cut -= 1;
    }
    if cut == floor && floor > 0 {
        max.min(bytes.len())
    } else {
        cut
    }
}

fn emit(output: &Output, stream: Stream, mut line: &[u8]) {
    if line.last() == Some(&b'\n') {
        line = &line[..line.len() - 1];
    }
    if line.last() == Some(&b'\r') {
        line = &line[..line.len() - 1];
    }
    output.push_line(stream, String::from_utf8_lossy(line).into_owned());
}

/// Read `reader` to its end, splitting lines into `output`. Never waits for the network.
pub async fn pump<R: AsyncRead + Unpin>(mut reader: R, stream: Stream, output: Arc<Output>) {
    let mut buf: Vec<u8> = Vec::with_capacity(16 * 1024);
    let mut chunk = vec![0u8; 16 * 1024];
    loop {
        let n = match reader.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        output.push_tail(stream, &chunk[..n]);
        buf.extend_from_slice(&chunk[..n]);
        let mut start = 0;
        loop {
            let rest = &buf[start..];
            if let Some(pos) = rest.iter().position(|&b| b == b'\n') {
                if pos < MAX_LINE_BYTES {
                    emit(&output, stream, &rest[..=pos]);
                    start += pos + 1;
                    continue;
                }
            }
            if rest.len() >= MAX_LINE_BYTES {
                let cut = cut_point(rest, MAX_LINE_BYTES);
                emit(&output, stream, &rest[..cut]);
                start += cut;
                continue;
            }
            break;
        }
        buf.drain(..start);
    }
    if !buf.is_empty() {
        emit(&output, stream, &buf);
    }
}

/// Why shipping stopped early.
#[derive(Debug)]
pub enum ShipError {
    /// The server answered 409: the job is no longer ours.
    Lost,
}

/// Ship `output` as job events until `finished` fires and everything pending is sent.
///
/// A batch the service refuses for another reason, or that no replica accepts within a
/// minute, is dropped (and logged): output is best-effort, the result is not.
///
/// # Errors
/// [`ShipError::Lost`] when the server says the job is not this runner's any more.
pub async fn ship(
    output: Arc<Output>,
    servers: Arc<Servers>,
    job: Uuid,
    epoch: i64,
    finished: tokio_util::sync::CancellationToken,
) -> Result<(), ShipError> {
    loop {
        let done = finished.is_cancelled();
        let batch = output.take_batch();
        if !batch.is_empty() {
            let deadline = Instant::now() + Duration::from_secs(60);
            let sent = servers
                .call(deadline, Duration::from_secs(20), |c| {
                    let batch = batch.clone();
                    async move { c.append_events(job, epoch, batch).await }
                })
                .await;
            match sent {
                Ok(_) => {}
                Err(e) if e.is_conflict() => return Err(ShipError::Lost),
                Err(CallError::Api(e)) => {
                    tracing::warn!(%job, error = %e, "output batch refused; dropped");
                }
                Err(e) => tracing::warn!(%job, error = %e, "output batch not delivered; dropped"),
            }
            continue;
        }
        if done && output.is_empty() {
            return Ok(());
        }
        tokio::select! {
            _ = finished.cancelled(), if !done => {}
            _ = output.wake.notified() => {}
            _ = tokio::time::sleep(FLUSH_EVERY) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn lines_of(input: &[u8]) -> Vec<String> {
        let out = Output::new();
        pump(input, Stream::Stdout, out.clone()).await;
        let mut lines = Vec::new();
        loop {
            let batch = out.take_batch();
            if batch.is_empty() {
                break;
            }
            for e in batch {
                lines.push(e.data.unwrap()["line"].as_str().unwrap().to_owned());
            }
        }
        lines
    }

    #[tokio::test]
    async fn splits_lines_and_keeps_a_last_partial_line() {
        assert_eq!(lines_of(b"a\nb\r\n\nc").await, ["a", "b", "", "c"]);
    }

    #[tokio::test]
    async fn long_lines_are_split_into_bounded_events() {
        let long = "é".repeat(MAX_LINE_BYTES); // two bytes each
        let lines = lines_of(format!("{long}\n").as_bytes()).await;
        assert!(lines.len() >= 2);
        assert!(lines.iter().all(|l| l.len() <= MAX_LINE_BYTES));
        assert_eq!(lines.concat(), long, "no character was split");
    }

    #[tokio::test]
    async fn the_tail_keeps_the_end() {
        let out = Output::new();
        let input = format!("{}end\n", "x".repeat(3 * TAIL_BYTES));
        pump(input.as_bytes(), Stream::Stderr, out.clone()).await;
        let tail = out.tail(Stream::Stderr);
        assert!(tail.len() <= TAIL_BYTES);
        assert!(tail.ends_with("end\n"));
        assert_eq!(out.tail(Stream::Stdout), "");
    }

    #[tokio::test]
    async fn secrets_and_their_base64_forms_are_masked_in_lines_and_tails() {
        use base64::Engine;
        let b64 = base64::engine::general_purpose::STANDARD.encode("s3cr3t?");
        let out = Output::masking(["s3cr3t?"]);
        let input = format!("token=s3cr3t? encoded={b64}\nplain\n");
        pump(input.as_bytes(), Stream::Stdout, out.clone()).await;
        let batch = out.take_batch();
        let lines: Vec<&str> = batch
            .iter()
            .map(|e| e.data.as_ref().unwrap()["line"].as_str().unwrap())
            .collect();
        assert_eq!(lines, ["token=*** encoded=***", "plain"]);
        assert_eq!(out.tail(Stream::Stdout), "token=*** encoded=***\nplain\n");
    }

    #[test]
    fn a_full_buffer_drops_and_counts() {
        let out = Output::new();
        let line = "y".repeat(MAX_LINE_BYTES);
        for _ in 0..(2 * MAX_PENDING_BYTES / MAX_LINE_BYTES) {
            out.push_line(Stream::Stdout, line.clone());
        }
        let mut dropped = None;
        loop {
            let batch = out.take_batch();
            if batch.is_empty() {
                break;
            }
            for e in batch {
                if e.kind == "output.dropped" {
                    dropped = e.data;
                }
            }
        }
        let dropped = dropped.expect("a dropped event");
        assert_eq!(
            dropped["lines"].as_u64().unwrap(),
            (MAX_PENDING_BYTES / MAX_LINE_BYTES) as u64
        );
    }
}
