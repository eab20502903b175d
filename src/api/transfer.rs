//! The floor under an artifact transfer's rate (contract v1.3): an upload or a download that
//! moves fewer than `LEASEHOLD_TRANSFER_MIN_BYTES` bytes in any window of
//! `LEASEHOLD_TRANSFER_WINDOW_MS` is closed.
//!
//! A connection has one [`TransferSlot`], shared by its stream (`replica::limits::Guarded`,
//! which counts the bytes it reads and writes and closes the connection at the slot's deadline)
//! and by each request it serves (a request extension). A handler that moves an artifact starts
//! a [`Pace`] in the slot for as long as its transfer lasts ([`TransferSlot::start`]: while an
//! upload's body is read, while a download's body is written). The bytes are counted where they
//! cross the socket, so a download whose client does not read is closed even though hyper has
//! stopped asking its body for more.
//!
//! When a transfer ends, the memory it held goes back to the system ([`give_back_soon`]):
//! glibc keeps freed memory in its arenas, and 700 slow transfers left a replica at 285 MiB
//! after they had all closed (27 MiB before them) until `malloc_trim` (docs/security.md).
//!
//! How many transfers run at once is capped (issue 52 row 3): per runner token
//! (`LEASEHOLD_MAX_TRANSFERS_PER_RUNNER`, its uploads) and per replica
//! (`LEASEHOLD_MAX_TRANSFERS`, uploads and downloads), each transfer at about 0.4 MiB of
//! buffers; past a cap a transfer is refused `429 rate_limited` with `Retry-After` before any
//! database work ([`TransferCaps`]), so the floor alone no longer decides how many may run.
//!
//! Invariant: a pace is only ever behind the real rate by one grain of its window (a sixteenth),
//! never ahead of it: a transfer that keeps above the floor is never closed, one under it is
//! closed at most a grain late. A pace holds at most 18 marks whatever the transfer's length.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use super::error::ApiError;
use super::poll_limit::{PollSlot, PollSlots};
use crate::telemetry::metrics::BoundLabel;

/// Which way a transfer's bytes go, as the replica's socket sees them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Read from the client (an artifact upload's body).
    Upload,
    /// Written to the client (a download's answer).
    Download,
}

impl Direction {
    pub fn label(self) -> &'static str {
        match self {
            Direction::Upload => "upload",
            Direction::Download => "download",
        }
    }
}

/// The floor: at least `min_bytes` in any `window`.
#[derive(Debug, Clone, Copy)]
pub struct Floor {
    pub min_bytes: u64,
    pub window: Duration,
}

/// Grains per window: how finely a pace remembers when its bytes came.
const GRAINS: u32 = 16;

/// One transfer's bytes over time.
#[derive(Debug)]
pub struct Pace {
    direction: Direction,
    floor: Floor,
    started: Instant,
    moved: u64,
    /// `(grain, last, total)`: in grain number `grain` of the transfer (a sixteenth of the
    /// window each), the last bytes moved at `last`, making `total` in all. Only the marks a
    /// deadline may still be read from are kept.
    marks: VecDeque<(u64, Instant, u64)>,
}

impl Pace {
    pub fn new(direction: Direction, floor: Floor, now: Instant) -> Self {
        Self {
            direction,
            floor,
            started: now,
            moved: 0,
            marks: VecDeque::new(),
        }
    }

    fn grain(&self) -> Duration {
        (self.floor.window / GRAINS).max(Duration::from_millis(1))
    }

    /// `n` more bytes moved at `now`.
    pub fn moved(&mut self, n: u64, now: Instant) {
        if n == 0 {
            return;
        }
        self.moved += n;
        let grain = (now.saturating_duration_since(self.started).as_nanos()
            / self.grain().as_nanos().max(1)) as u64;
        match self.marks.back_mut() {
            Some(last) if last.0 == grain => {
                last.1 = now;
                last.2 = self.moved;
            }
            _ => self.marks.push_back((grain, now, self.moved)),
        }
        // A mark whose total is at most `moved - min` can no longer be the one a deadline is
        // read from (that bound only rises).
        let settled = self.moved.saturating_sub(self.floor.min_bytes);
        while self.marks.front().is_some_and(|m| m.2 <= settled) {
            self.marks.pop_front();
        }
        // Marks older than a window mean the deadline has passed; the connection is closing.
        while self.marks.len() > (GRAINS as usize) + 2 {
            self.marks.pop_front();
        }
    }

    /// When the transfer falls under the floor if no byte moves before: the first instant `t`
    /// such that fewer than `min_bytes` moved in `(t - window, t]` (counting from the start,
    /// before which nothing moved).
    pub fn deadline(&self) -> Instant {
        let Floor { min_bytes, window } = self.floor;
        if self.moved < min_bytes {
            return self.started + window;
        }
        // The bytes since the moment the total passed `moved - min_bytes` are fewer than the
        // floor once that moment is a window old.
        let settled = self.moved - min_bytes;
        self.marks
            .iter()
            .find(|m| m.2 > settled)
            .map_or(self.started + window, |m| m.1 + window)
    }
}

/// A connection's transfer, if one is running: shared by its stream and its requests.
#[derive(Clone, Default)]
pub struct TransferSlot(Arc<SlotInner>);

#[derive(Default)]
struct SlotInner {
    /// A pace is in the slot (read without the lock on every I/O of the connection).
    active: AtomicBool,
    pace: Mutex<Option<Pace>>,
    /// The stream closed the connection at the pace's deadline.
    closed: AtomicBool,
}

impl TransferSlot {
    /// Start timing a transfer going `direction` under `floor`, until the guard drops. `open`
    /// counts transfers running; `too_slow` those closed under the floor.
    pub fn start(
        &self,
        direction: Direction,
        floor: Floor,
        open: &Gauge,
        too_slow: Counter,
    ) -> TransferGuard {
        *self.0.pace.lock() = Some(Pace::new(direction, floor, Instant::now()));
        self.0.closed.store(false, Ordering::Relaxed);
        self.0.active.store(true, Ordering::Release);
        open.inc();
        TransferGuard {
            slot: self.clone(),
            open: open.clone(),
            too_slow,
        }
    }

    /// The stream moved `n` bytes going `direction`.
    pub fn moved(&self, direction: Direction, n: usize) {
        if n == 0 || !self.0.active.load(Ordering::Acquire) {
            return;
        }
        if let Some(p) = self.0.pace.lock().as_mut() {
            if p.direction == direction {
                p.moved(n as u64, Instant::now());
            }
        }
    }

    /// When a transfer going `direction` falls under its floor, if one runs.
    pub fn deadline(&self, direction: Direction) -> Option<Instant> {
        if !self.0.active.load(Ordering::Acquire) {
            return None;
        }
        self.0
            .pace
            .lock()
            .as_ref()
            .filter(|p| p.direction == direction)
            .map(Pace::deadline)
    }

    /// The stream closes the connection: its transfer fell under the floor.
    pub fn closing(&self) {
        self.0.closed.store(true, Ordering::Relaxed);
    }
}

/// A running transfer: the slot's pace goes when it drops.
pub struct TransferGuard {
    slot: TransferSlot,
    open: Gauge,
    too_slow: Counter,
}

impl Drop for TransferGuard {
    fn drop(&mut self) {
        let inner = &self.slot.0;
        inner.active.store(false, Ordering::Release);
        inner.pace.lock().take();
        self.open.dec();
        if inner.closed.swap(false, Ordering::Relaxed) {
            self.too_slow.inc();
        }
        give_back_soon();
    }
}

/// How long after a transfer ends the allocator gives back what was freed: the transfers that
/// end meanwhile share one trim.
const GIVE_BACK_AFTER: Duration = Duration::from_secs(1);

/// A trim is scheduled (one per process: the allocator is the process's).
static GIVE_BACK_SCHEDULED: AtomicBool = AtomicBool::new(false);

/// A transfer ended (or a burst of long-polls, `replica::give_back_after_bursts`): within
/// [`GIVE_BACK_AFTER`], the allocator returns the memory freed since to the system, on a
/// blocking thread.
pub(crate) fn give_back_soon() {
    if GIVE_BACK_SCHEDULED.swap(true, Ordering::AcqRel) {
        return;
    }
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        GIVE_BACK_SCHEDULED.store(false, Ordering::Release);
        return;
    };
    runtime.spawn(async {
        // Unscheduled however the task ends (its runtime may stop while it sleeps).
        let unschedule = Unschedule;
        tokio::time::sleep(GIVE_BACK_AFTER).await;
        drop(unschedule);
        let _ = tokio::task::spawn_blocking(leasehold_alloc::trim).await;
    });
}

/// Clears [`GIVE_BACK_SCHEDULED`] when dropped.
struct Unschedule;

impl Drop for Unschedule {
    fn drop(&mut self) {
        GIVE_BACK_SCHEDULED.store(false, Ordering::Release);
    }
}

/// What a client refused at a transfer cap is told to wait: a transfer lasts seconds to
/// minutes, so sooner would mostly be refused again.
pub const TRANSFER_RETRY_AFTER_S: u64 = 2;

/// The caps on transfers running at once: per runner token (a slot of its own count, kept by
/// token hash only while a transfer runs, as the lease calls' [`PollSlots`]) and per replica.
pub struct TransferCaps {
    per_runner: PollSlots,
    replica: Arc<Semaphore>,
}

/// A running transfer's places under the caps, given back when it drops (however the transfer
/// ends: answered, failed, cut off, closed under the floor).
pub struct TransferPermit {
    _runner: Option<PollSlot>,
    _replica: OwnedSemaphorePermit,
}

impl TransferCaps {
    /// At most `per_runner` transfers of one runner token, `replica` in all (each at least 1).
    pub fn new(per_runner: usize, replica: usize) -> Self {
        Self {
            per_runner: PollSlots::new(per_runner),
            replica: Arc::new(Semaphore::new(replica.max(1))),
        }
    }

    /// Places for a transfer, of the runner of `token_hash` when a runner moves it; a refusal
    /// is counted in `refused` by the cap that refused it.
    ///
    /// # Errors
    /// A cap is reached: 429 with `Retry-After`.
    pub fn take(
        &self,
        token_hash: Option<&[u8]>,
        refused: &Family<BoundLabel, Counter>,
    ) -> Result<TransferPermit, ApiError> {
        let limited = |bound: &'static str| {
            refused.get_or_create(&BoundLabel { bound }).inc();
            ApiError::RateLimited {
                retry_after_s: TRANSFER_RETRY_AFTER_S,
            }
        };
        let runner = match token_hash {
            Some(hash) => Some(self.per_runner.take(hash).map_err(|_| limited("runner"))?),
            None => None,
        };
        let replica = self
            .replica
            .clone()
            .try_acquire_owned()
            .map_err(|_| limited("replica"))?;
        Ok(TransferPermit {
            _runner: runner,
            _replica: replica,
        })
    }
}

#[cfg(test)]
mod caps_tests {
    use super::*;

    #[test]
    fn each_cap_refuses_past_its_bound_counts_why_and_every_drop_frees_a_place() {
        let caps = TransferCaps::new(2, 3);
        let refused = Family::<BoundLabel, Counter>::default();
        let a1 = caps.take(Some(b"a"), &refused).unwrap();
        let _a2 = caps.take(Some(b"a"), &refused).unwrap();
        assert!(matches!(
            caps.take(Some(b"a"), &refused),
            Err(ApiError::RateLimited {
                retry_after_s: TRANSFER_RETRY_AFTER_S
            })
        ));
        let _b = caps.take(Some(b"b"), &refused).unwrap();
        assert!(caps.take(None, &refused).is_err(), "the replica holds 3");
        assert!(
            caps.take(Some(b"c"), &refused).is_err(),
            "the replica holds 3"
        );
        assert_eq!(
            caps.per_runner.held(b"c"),
            0,
            "a refused runner keeps no slot"
        );
        drop(a1);
        let _d = caps
            .take(None, &refused)
            .expect("a dropped permit frees a place");
        let count = |bound| refused.get_or_create(&BoundLabel { bound }).get();
        assert_eq!((count("runner"), count("replica")), (1, 2));
    }
}
