//! A job's output: shipped to the server as `stdout` / `stderr` events carrying chunks of
//! text (many lines per event), and remembered as a short tail for the result.
//!
//! Invariants: memory is bounded whatever the command prints or however slow the server is:
//! at most [`MAX_PENDING`] (in serialised JSON bytes) waits to be shipped, and while it is full
//! the pipe readers stop reading, so the command blocks on its own writes instead of losing
//! output (backpressure). Output is dropped only past [`MAX_STREAMED_BYTES`] per job, or when
//! no replica takes a batch within a minute; either way the bytes are counted and an
//! `output.dropped` event says how many. Every event's data fits the contract's 64 KiB
//! serialised (chunks are cut on character boundaries by their escaped size). Chunks keep the
//! order in which the runner read them, across both streams, and their concatenation per
//! stream is exactly what the command wrote (invalid UTF-8 replaced by U+FFFD), except that
//! every value the job was given as a secret, and its base64 forms, reads `***`, and so does
//! each line of a multi-line secret that is not trivial (at least [`MIN_MASKED_LINE`]
//! characters once surrounding whitespace is trimmed), wherever it appears: lines are
//! masked as they are queued (a value inside a run of more than [`MAX_LINE_BYTES`] without a
//! newline may be cut and not seen whole), and tails as they are read.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::{Notify, Semaphore};
use tokio::time::Instant;
use uuid::Uuid;

use super::servers::{CallError, Servers};
use crate::wire::NewEvent;

/// Longest run of bytes without a newline the reader holds back before shipping it anyway.
pub const MAX_LINE_BYTES: usize = 8 * 1024;
/// Bytes of each stream kept for the result's `stdout_tail` / `stderr_tail`.
pub const TAIL_BYTES: usize = 4 * 1024;
/// Largest chunk, as escaped JSON text: `{"text": ...}` stays well inside the 64 KiB limit.
pub const MAX_CHUNK: usize = 60 * 1024;
/// Output waiting to be shipped (escaped size); while it is full the pipes are not read.
pub const MAX_PENDING: usize = 1024 * 1024;
/// Output one job may stream in total (raw bytes); beyond it output is dropped and counted.
pub const MAX_STREAMED_BYTES: u64 = 64 * 1024 * 1024;
/// At most this much (escaped) text per events call (the server takes 1 MiB bodies).
const MAX_BATCH: usize = 512 * 1024;
/// At most this many events per call (the contract's limit is 1000).
const MAX_BATCH_EVENTS: usize = 500;
/// Pending output is shipped at least this often.
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

/// The size of `c` once escaped in a JSON string, as serde_json writes it.
fn escaped_len(c: char) -> usize {
    match c {
        '"' | '\\' | '\n' | '\r' | '\t' | '\u{8}' | '\u{c}' => 2,
        c if (c as u32) < 0x20 => 6,
        c => c.len_utf8(),
    }
}

/// The escaped size of `text`.
fn cost(text: &str) -> usize {
    text.chars().map(escaped_len).sum()
}

/// One event's worth of text of one stream; `cost` is its escaped size.
struct Chunk {
    stream: Stream,
    text: String,
    cost: usize,
    /// No more text goes in (the next character would not fit).
    full: bool,
}

#[derive(Default)]
struct Pending {
    chunks: VecDeque<Chunk>,
    /// Escaped size of everything in `chunks`.
    cost: usize,
    streamed: u64,
    /// Bytes dropped so far, and how many of them an `output.dropped` event has announced.
    dropped_bytes: u64,
    announced_bytes: u64,
    tails: [Vec<u8>; 2],
}

impl Pending {
    /// Append `text` to the newest chunk of `stream`, opening new chunks at [`MAX_CHUNK`].
    fn append(&mut self, stream: Stream, mut text: &str) {
        while !text.is_empty() {
            let open = self
                .chunks
                .back()
                .is_some_and(|c| c.stream == stream && !c.full);
            if !open {
                self.chunks.push_back(Chunk {
                    stream,
                    text: String::new(),
                    cost: 0,
                    full: false,
                });
            }
            let chunk = self.chunks.back_mut().expect("a chunk is open");
            let room = MAX_CHUNK - chunk.cost;
            let (mut end, mut added) = (0, 0);
            for (i, c) in text.char_indices() {
                let n = escaped_len(c);
                if added + n > room {
                    break;
                }
                added += n;
                end = i + c.len_utf8();
            }
            if end == 0 {
                chunk.full = true;
                continue;
            }
            chunk.text.push_str(&text[..end]);
            chunk.cost += added;
            self.cost += added;
            text = &text[end..];
        }
    }
}

/// The shared buffer between a job's pipe readers and its shipper.
pub struct Output {
    pending: Mutex<Pending>,
    /// Escaped bytes that may still be buffered; a reader waits here while it is empty.
    room: Semaphore,
    /// Readers now waiting for room (the command is being held back, not stuck).
    waiting: AtomicUsize,
    /// Bytes read from the command's pipes so far.
    read: AtomicU64,
    wake: Notify,
    /// Texts replaced by [`MASK`], longest first.
    masks: Vec<String>,
}

/// What stands in for a secret in output.
pub const MASK: &str = "***";

/// A line of a multi-line secret is masked on its own when, trimmed of surrounding
/// whitespace, it has at least this many characters; shorter lines (a `}`, an empty line)
/// would mask ordinary output and are left alone.
pub const MIN_MASKED_LINE: usize = 4;

impl Default for Output {
    fn default() -> Self {
        Self {
            pending: Mutex::default(),
            room: Semaphore::new(MAX_PENDING),
            waiting: AtomicUsize::new(0),
            read: AtomicU64::new(0),
            wake: Notify::new(),
            masks: Vec::new(),
        }
    }
}

impl Output {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// A buffer that masks each of `secrets`, and its standard and URL-safe base64 forms (with
    /// and without padding), and each non-trivial line of a multi-line one (see
    /// [`MIN_MASKED_LINE`]), wherever they appear.
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
            if s.contains(['\n', '\r']) {
                masks.extend(
                    s.split(['\n', '\r'])
                        .map(str::trim)
                        .filter(|l| l.chars().count() >= MIN_MASKED_LINE)
                        .map(str::to_owned),
                );
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
        let mut text = text;
        for m in &self.masks {
            if text.contains(m.as_str()) {
                text = text.replace(m.as_str(), MASK);
            }
        }
        text
    }

    /// Queue `bytes` the command wrote to `stream`, waiting for room while the buffer is full.
    /// Past [`MAX_STREAMED_BYTES`] the bytes are dropped and counted instead.
    async fn push(&self, stream: Stream, mut bytes: &[u8]) {
        {
            let mut p = self.pending.lock().expect("output lock");
            let left = MAX_STREAMED_BYTES.saturating_sub(p.streamed);
            if bytes.len() as u64 > left {
                let keep = whole_chars(&bytes[..left as usize]);
                p.dropped_bytes += (bytes.len() - keep) as u64;
                bytes = &bytes[..keep];
            }
            p.streamed += bytes.len() as u64;
        }
        if bytes.is_empty() {
            return;
        }
        let text = self.mask(String::from_utf8_lossy(bytes).into_owned());
        let need = cost(&text).min(MAX_PENDING);
        self.waiting.fetch_add(1, Ordering::SeqCst);
        let permits = self
            .room
            .acquire_many(u32::try_from(need).expect("bounded by MAX_PENDING"))
            .await;
        self.waiting.fetch_sub(1, Ordering::SeqCst);
        // The semaphore is never closed.
        permits.expect("the output semaphore stays open").forget();
        let mut p = self.pending.lock().expect("output lock");
        p.append(stream, &text);
        let big = p.cost >= MAX_BATCH;
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
    /// It never waits: a note may exceed the buffer's bound by its own few bytes.
    pub fn note(&self, stream: Stream, text: &str) {
        let text = self.mask(format!("{text}\n"));
        self.push_tail(stream, text.as_bytes());
        self.pending
            .lock()
            .expect("output lock")
            .append(stream, &text);
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

    /// True while a reader waits for the shipper: the command is held back, not silent.
    pub fn is_held_back(&self) -> bool {
        self.waiting.load(Ordering::SeqCst) > 0
    }

    /// Bytes read from the command so far.
    pub fn bytes_read(&self) -> u64 {
        self.read.load(Ordering::SeqCst)
    }

    /// Take the next batch to ship: whole chunks up to the batch limits, plus an
    /// `output.dropped` event (the running total) when dropping starts and, with `last`, when
    /// more was dropped since. The room the chunks took in the buffer is given back.
    fn take_batch(&self, last: bool) -> Vec<NewEvent> {
        let mut p = self.pending.lock().expect("output lock");
        let mut events = Vec::new();
        let mut taken = 0;
        while let Some(chunk) = p.chunks.front() {
            if !events.is_empty()
                && (taken + chunk.cost > MAX_BATCH || events.len() >= MAX_BATCH_EVENTS)
            {
                break;
            }
            let chunk = p.chunks.pop_front().expect("front exists");
            taken += chunk.cost;
            events.push(NewEvent {
                kind: chunk.stream.kind().into(),
                data: Some(json!({ "text": chunk.text })),
            });
        }
        p.cost -= taken;
        if p.dropped_bytes > p.announced_bytes && (p.announced_bytes == 0 || last) {
            events.push(NewEvent {
                kind: "output.dropped".into(),
                data: Some(json!({
                    "bytes": p.dropped_bytes,
                    "limit_bytes": MAX_STREAMED_BYTES,
                })),
            });
            p.announced_bytes = p.dropped_bytes;
        }
        drop(p);
        // Give back what the chunks held, but never more than the bound: notes are not
        // counted when queued.
        let back = taken.min(MAX_PENDING - self.room.available_permits());
        self.room.add_permits(back);
        events
    }

    /// Count a batch that could not be delivered as dropped, to be announced next.
    fn count_lost(&self, batch: &[NewEvent]) {
        let lost: u64 = batch
            .iter()
            .filter_map(|e| e.data.as_ref()?["text"].as_str())
            .map(|t| t.len() as u64)
            .sum();
        let mut p = self.pending.lock().expect("output lock");
        p.dropped_bytes += lost;
    }

    fn is_empty(&self) -> bool {
        let p = self.pending.lock().expect("output lock");
        p.chunks.is_empty() && p.announced_bytes == p.dropped_bytes
    }
}

/// The length of the longest prefix of `bytes` that does not end inside a UTF-8 character
/// (bytes that cannot begin a valid character count as whole: they are replaced anyway).
fn whole_chars(bytes: &[u8]) -> usize {
    let len = bytes.len();
    for back in 1..=len.min(3) {
        let b = bytes[len - back];
        if b & 0xC0 == 0x80 {
            continue; // a continuation byte: look further back for the lead
        }
        let need = match b {
            0xC0..=0xDF => 2,
            0xE0..=0xEF => 3,
            0xF0..=0xF7 => 4,
            _ => 1,
        };
        return if need > back { len - back } else { len };
    }
    len
}

/// Read `reader` to its end into `output`: whole lines as they come (a run of more than
/// [`MAX_LINE_BYTES`] without a newline is passed on anyway, cut between characters). While
/// the buffer is full this stops reading, so the command waits on its pipe.
pub async fn pump<R: AsyncRead + Unpin>(mut reader: R, stream: Stream, output: Arc<Output>) {
    let mut buf: Vec<u8> = Vec::with_capacity(32 * 1024);
    let mut chunk = vec![0u8; 16 * 1024];
    loop {
        let n = match reader.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        output.read.fetch_add(n as u64, Ordering::SeqCst);
        output.push_tail(stream, &chunk[..n]);
        buf.extend_from_slice(&chunk[..n]);
        let ready = match buf.iter().rposition(|&b| b == b'\n') {
            Some(pos) => pos + 1,
            None if buf.len() >= MAX_LINE_BYTES => whole_chars(&buf),
            None => 0,
        };
        if ready > 0 {
            output.push(stream, &buf[..ready]).await;
            buf.drain(..ready);
        }
    }
    if !buf.is_empty() {
        output.push(stream, &buf).await;
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
/// minute, is dropped (logged, and counted in the next `output.dropped` event): output is
/// best-effort, the result is not.
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
        // The token is dead (revoked): no batch can be taken any more, and the job is stopped.
        if servers.revoked().is_cancelled() {
            return Err(ShipError::Lost);
        }
        let done = finished.is_cancelled();
        let batch = output.take_batch(done);
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
                    output.count_lost(&batch);
                }
                Err(e) => {
                    tracing::warn!(%job, error = %e, "output batch not delivered; dropped");
                    output.count_lost(&batch);
                }
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

    /// Everything `out` ships, as (kind, data) pairs, taking batches until `reader` is done.
    async fn drain_while(out: &Arc<Output>, reader: tokio::task::JoinHandle<()>) -> Vec<NewEvent> {
        let mut events = Vec::new();
        loop {
            let finished = reader.is_finished();
            let batch = out.take_batch(finished);
            if batch.is_empty() && finished {
                return events;
            }
            if batch.is_empty() {
                tokio::task::yield_now().await;
            }
            events.extend(batch);
        }
    }

    async fn shipped(input: Vec<u8>) -> Vec<NewEvent> {
        let out = Output::new();
        let reader = tokio::spawn(pump(
            std::io::Cursor::new(input),
            Stream::Stdout,
            out.clone(),
        ));
        drain_while(&out, reader).await
    }

    fn text_of(events: &[NewEvent]) -> String {
        events
            .iter()
            .filter(|e| e.kind == "stdout")
            .map(|e| e.data.as_ref().unwrap()["text"].as_str().unwrap())
            .collect()
    }

    #[tokio::test]
    async fn chunks_carry_exactly_the_bytes_written_many_lines_each() {
        let input = "a\nb\r\n\nc".to_owned();
        let events = shipped(input.clone().into_bytes()).await;
        assert_eq!(text_of(&events), input);
        assert_eq!(events.len(), 1, "one event for many lines: {events:?}");
    }

    #[tokio::test]
    async fn every_event_fits_64_kib_however_the_text_escapes() {
        // Control characters escape to six bytes each, quotes to two; é is two bytes raw.
        let mut input = String::new();
        for i in 0..40_000 {
            input.push_str(&format!("\u{1}\"é{i}\n"));
        }
        input.push_str(&"é".repeat(3 * MAX_LINE_BYTES)); // one long line, no newline
        let events = shipped(input.clone().into_bytes()).await;
        for e in &events {
            let size = serde_json::to_vec(e.data.as_ref().unwrap()).unwrap().len();
            assert!(size <= 64 * 1024, "an event of {size} bytes");
        }
        assert_eq!(text_of(&events), input, "no byte lost, no character split");
    }

    #[tokio::test]
    async fn a_full_buffer_holds_the_command_back_instead_of_dropping() {
        let out = Output::new();
        let input: Vec<u8> = (0..400_000)
            .flat_map(|i| format!("{i}\n").into_bytes())
            .collect();
        assert!(input.len() > 2 * MAX_PENDING);
        let reader = tokio::spawn(pump(
            std::io::Cursor::new(input.clone()),
            Stream::Stdout,
            out.clone(),
        ));
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while !out.is_held_back() {
            assert!(
                std::time::Instant::now() < deadline,
                "the reader never waited"
            );
            tokio::task::yield_now().await;
        }
        assert!(out.bytes_read() < input.len() as u64, "reading stopped");
        let events = drain_while(&out, reader).await;
        assert!(events.iter().all(|e| e.kind == "stdout"), "nothing dropped");
        assert_eq!(text_of(&events).as_bytes(), &input[..]);
    }

    #[tokio::test]
    async fn only_output_past_the_total_is_dropped_and_it_is_said() {
        let line = format!("{}\n", "z".repeat(1023));
        let lines = (MAX_STREAMED_BYTES / 1024) as usize + 100;
        let events = shipped(line.repeat(lines).into_bytes()).await;
        let text = text_of(&events);
        assert_eq!(
            text.len() as u64,
            MAX_STREAMED_BYTES,
            "everything up to the total"
        );
        let dropped: Vec<_> = events
            .iter()
            .filter(|e| e.kind == "output.dropped")
            .collect();
        let last = dropped.last().expect("an output.dropped event");
        assert_eq!(last.data.as_ref().unwrap()["bytes"], json!(100 * 1024));
        assert!(
            dropped.len() <= 2,
            "announced when it starts and at the end"
        );
    }

    #[tokio::test]
    async fn secrets_and_their_base64_forms_are_masked_in_chunks_and_tails() {
        use base64::Engine;
        let b64 = base64::engine::general_purpose::STANDARD.encode("s3cr3t?");
        let out = Output::masking(["s3cr3t?"]);
        let input = format!("token=s3cr3t? encoded={b64}\nplain\n");
        pump(input.as_bytes(), Stream::Stdout, out.clone()).await;
        out.note(Stream::Stdout, "leasehold: s3cr3t?");
        assert_eq!(
            text_of(&out.take_batch(true)),
            "token=*** encoded=***\nplain\nleasehold: ***\n"
        );
        assert_eq!(
            out.tail(Stream::Stdout),
            "token=*** encoded=***\nplain\nleasehold: ***\n"
        );
    }

    #[tokio::test]
    async fn each_line_of_a_multi_line_secret_is_masked_but_not_its_trivial_lines() {
        let key = "-----BEGIN KEY-----\r\n  MIIEvQIBADANBgkq  \n}\n\nabc\n-----END KEY-----\n";
        let out = Output::masking([key]);
        // Line by line, out of order, one line amid other text: never the whole value at once.
        let input = "x MIIEvQIBADANBgkq y\n-----END KEY-----\n}\nabc\n-----BEGIN KEY-----\n";
        pump(input.as_bytes(), Stream::Stdout, out.clone()).await;
        let expected = "x *** y\n***\n}\nabc\n***\n";
        assert_eq!(text_of(&out.take_batch(true)), expected);
        assert_eq!(out.tail(Stream::Stdout), expected);
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

    #[test]
    fn whole_chars_never_ends_inside_a_character() {
        let e = "é".as_bytes(); // C3 A9
        assert_eq!(whole_chars(b"ab"), 2);
        assert_eq!(whole_chars(&[b'a', e[0]]), 1);
        assert_eq!(whole_chars(&[b'a', e[0], e[1]]), 3);
        let euro = "€".as_bytes(); // three bytes
        assert_eq!(whole_chars(&[b'a', euro[0], euro[1]]), 1);
    }
}
