//! What one connection may hold and for how long (issue 35, rows 3 and 4): the connection cap
//! ([`Slots`]), and the read and write deadlines of a connection ([`Guarded`]): a whole
//! request head within `LEASEHOLD_HEADER_TIMEOUT_MS` of its first byte (of the connection's
//! start, for its first request), at most `LEASEHOLD_IDLE_TIMEOUT_MS` idle between requests,
//! and no write blocked longer than `LEASEHOLD_REQUEST_TIMEOUT_MS` (a client that does not
//! read its answer).
//!
//! hyper's own `header_read_timeout` is not used: it starts when hyper begins to wait for the
//! next head, which is right after the previous answer, so it cannot tell an idle keep-alive
//! connection (75 s) from a head that is trickling in (30 s). Here the service tells the
//! connection's [`Phase`] when a request arrives and when its answer's body is done, and the
//! stream's reads see the bytes that start the next head.
//!
//! The stream also counts the bytes of the artifact transfer a request runs (an upload's body
//! read, a download's answer written: [`crate::api::transfer`]) and closes the connection when
//! the transfer falls under its floor, whether or not hyper is polling the transfer's body.
//!
//! Invariants: a connection past a deadline gets an I/O error from its stream, which makes
//! hyper drop it (the socket closes, its buffers are freed); a request being answered (from
//! its head to its answer's last body frame) has no read deadline (the handler's own deadline
//! covers it); every accepted connection holds one [`Slot`] until it is dropped.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use hyper::body::{Body, Frame, SizeHint};
use parking_lot::Mutex;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

use crate::api::transfer::{Direction, TransferSlot};

/// The cap on open connections (`LEASEHOLD_MAX_CONNECTIONS`).
#[derive(Clone)]
pub struct Slots {
    open: Arc<AtomicUsize>,
    max: usize,
}

/// One open connection's place under the cap, given back on drop.
pub struct Slot(Arc<AtomicUsize>);

impl Slots {
    pub fn new(max: usize) -> Self {
        Self {
            open: Arc::new(AtomicUsize::new(0)),
            max: max.max(1),
        }
    }

    /// A place for a new connection, or `None` when `max` are open.
    pub fn take(&self) -> Option<Slot> {
        self.open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.max).then_some(n + 1)
            })
            .ok()
            .map(|_| Slot(self.open.clone()))
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The deadlines every connection runs under.
#[derive(Clone, Copy)]
pub struct Deadlines {
    pub header: Duration,
    pub idle: Duration,
    pub write: Duration,
}

/// Where a connection is between its requests.
enum State {
    /// Waiting for (the rest of) a request head until this instant.
    Head(Instant),
    /// Idle since this instant, after an answer: no byte of the next head yet.
    Idle(Instant),
    /// This many requests are being answered (hyper answers one at a time, but a body may
    /// outlive the next head's arrival by a moment).
    Busy(usize),
}

/// A connection's [`State`], shared by its stream and its service.
#[derive(Clone)]
pub struct Phase {
    state: Arc<Mutex<(State, Option<Waker>)>>,
    deadlines: Deadlines,
}

impl Phase {
    /// A fresh connection: its first head is due within the header timeout.
    pub fn new(deadlines: Deadlines) -> Self {
        Self {
            state: Arc::new(Mutex::new((
                State::Head(Instant::now() + deadlines.header),
                None,
            ))),
            deadlines,
        }
    }

    /// A request head arrived: no read deadline until the [`Answering`] guard drops.
    pub fn answering(&self) -> Answering {
        let mut state = self.state.lock();
        state.0 = match state.0 {
            State::Busy(n) => State::Busy(n + 1),
            _ => State::Busy(1),
        };
        Answering(self.clone())
    }

    /// Bytes were read: the first ones after an answer start the header clock.
    fn read_some(&self) {
        let mut state = self.state.lock();
        if let State::Idle(_) = state.0 {
            state.0 = State::Head(Instant::now() + self.deadlines.header);
        }
    }

    /// When a read still waiting must give up, if it must. While a request is answered, the
    /// waiting read's waker is kept: hyper may not read again after the answer (its read for
    /// the client leaving is still pending), so the answer's end wakes it to arm the deadline.
    fn read_deadline(&self, cx: &Context<'_>) -> Option<Instant> {
        let mut state = self.state.lock();
        match state.0 {
            State::Head(at) => Some(at),
            State::Idle(since) => Some(since + self.deadlines.idle),
            State::Busy(_) => {
                if !state.1.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                    state.1 = Some(cx.waker().clone());
                }
                None
            }
        }
    }
}

/// Held while a request is answered: from its head to its answer's body's end (or drop).
pub struct Answering(Phase);

impl Drop for Answering {
    fn drop(&mut self) {
        let mut state = self.0.state.lock();
        state.0 = match state.0 {
            State::Busy(n) if n > 1 => State::Busy(n - 1),
            _ => State::Idle(Instant::now()),
        };
        if matches!(state.0, State::Idle(_)) {
            if let Some(waker) = state.1.take() {
                waker.wake();
            }
        }
    }
}

pin_project_lite::pin_project! {
    /// An answer's body, holding the request's [`Answering`] until its last frame.
    pub struct AnswerBody<B> {
        #[pin]
        body: B,
        answering: Option<Answering>,
    }
}

impl<B> AnswerBody<B> {
    pub fn new(body: B, answering: Answering) -> Self {
        Self {
            body,
            answering: Some(answering),
        }
    }
}

impl<B: Body> Body for AnswerBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.project();
        let frame = this.body.poll_frame(cx);
        if let Poll::Ready(None | Some(Err(_))) = frame {
            this.answering.take();
        }
        frame
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// A connection's stream under its [`Phase`]'s read deadline, the write deadline and the floor
/// of the artifact transfer its [`TransferSlot`] holds, if any; holding its [`Slot`].
pub struct Guarded<S> {
    inner: S,
    phase: Phase,
    transfer: TransferSlot,
    read_timer: Option<Pin<Box<Sleep>>>,
    /// When the write blocked now must give up; `None` while writes go through.
    write_by: Option<Instant>,
    write_timer: Option<Pin<Box<Sleep>>>,
    _slot: Slot,
}

impl<S> Guarded<S> {
    pub fn new(inner: S, phase: Phase, transfer: TransferSlot, slot: Slot) -> Self {
        Self {
            inner,
            phase,
            transfer,
            read_timer: None,
            write_by: None,
            write_timer: None,
            _slot: slot,
        }
    }
}

fn timed_out(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, what.to_owned())
}

/// The earlier of two deadlines, either of which may be missing.
fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The error a connection is closed with when `pace` (its transfer's deadline) has passed, else
/// the one `other` names.
fn closing(transfer: &TransferSlot, pace: Option<Instant>, other: &str) -> io::Error {
    if pace.is_some_and(|p| Instant::now() >= p) {
        transfer.closing();
        return timed_out("the transfer moved less than LEASEHOLD_TRANSFER_MIN_BYTES in a window");
    }
    timed_out(other)
}

/// Wake `cx` at `at`: `true` when `at` has passed already.
fn arm(timer: &mut Option<Pin<Box<Sleep>>>, at: Instant, cx: &mut Context<'_>) -> bool {
    if Instant::now() >= at {
        return true;
    }
    let sleep = timer.get_or_insert_with(|| Box::pin(tokio::time::sleep_until(at)));
    if sleep.deadline() != at {
        sleep.as_mut().reset(at);
    }
    sleep.as_mut().poll(cx).is_ready()
}

use std::future::Future as _;

impl<S: AsyncWrite + Unpin> Guarded<S> {
    /// A write's outcome under the write deadline.
    fn written<T>(
        &mut self,
        polled: Poll<io::Result<T>>,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<T>> {
        match polled {
            Poll::Pending => {
                let blocked = *self
                    .write_by
                    .get_or_insert_with(|| Instant::now() + self.phase.deadlines.write);
                let pace = self.transfer.deadline(Direction::Download);
                let at = earliest(Some(blocked), pace).unwrap_or(blocked);
                if arm(&mut self.write_timer, at, cx) {
                    return Poll::Ready(Err(closing(
                        &self.transfer,
                        pace,
                        "the client did not read its answer in time",
                    )));
                }
                Poll::Pending
            }
            ready => {
                self.write_by = None;
                self.write_timer = None;
                ready
            }
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Guarded<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Pending => {
                let pace = this.transfer.deadline(Direction::Upload);
                match earliest(this.phase.read_deadline(cx), pace) {
                    Some(at) => {
                        if arm(&mut this.read_timer, at, cx) {
                            return Poll::Ready(Err(closing(
                                &this.transfer,
                                pace,
                                "no whole request head in time, or idle too long",
                            )));
                        }
                        Poll::Pending
                    }
                    None => {
                        this.read_timer = None;
                        Poll::Pending
                    }
                }
            }
            Poll::Ready(Ok(())) if buf.filled().len() > before => {
                this.phase.read_some();
                this.transfer
                    .moved(Direction::Upload, buf.filled().len() - before);
                Poll::Ready(Ok(()))
            }
            ready => ready,
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Guarded<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = polled {
            this.transfer.moved(Direction::Download, n);
        }
        this.written(polled, cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        if let Poll::Ready(Ok(n)) = polled {
            this.transfer.moved(Direction::Download, n);
        }
        this.written(polled, cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_flush(cx);
        this.written(polled, cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_shutdown(cx);
        this.written(polled, cx)
    }
}
