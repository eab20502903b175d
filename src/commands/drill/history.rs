//! The drill's record of what it saw: events stamped on one clock, appended from any task, and
//! handed to the pure checker ([`super::check`]) at the end.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use uuid::Uuid;

use super::check::{Event, Outcome};
use crate::client::ClientError;

/// A shared, append-only history. Cheap to clone.
#[derive(Clone)]
pub struct Recorder {
    start: Instant,
    events: Arc<Mutex<Vec<Event>>>,
}

impl Default for Recorder {
    fn default() -> Self {
        Self::new()
    }
}

impl Recorder {
    pub fn new() -> Self {
        Self {
            start: Instant::now(),
            events: Arc::new(Mutex::new(Vec::new())),
        }
    }

    /// Milliseconds since the recorder started.
    pub fn now(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }

    /// The drill clock's reading for a wall-clock time in Unix milliseconds (worker processes
    /// stamp their events with the wall clock of this same machine).
    pub fn from_unix_ms(&self, unix_ms: u64) -> u64 {
        let now_unix = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        (self.now() + unix_ms).saturating_sub(now_unix)
    }

    pub fn push(&self, e: Event) {
        self.events.lock().expect("history lock").push(e);
    }

    pub fn dispatched(&self, job: Uuid) {
        self.push(Event::Dispatched {
            job,
            at_ms: self.now(),
        });
    }

    pub fn leased(&self, job: Uuid, epoch: i64, runner: &str) {
        self.push(Event::Leased {
            job,
            epoch,
            runner: runner.to_owned(),
            at_ms: self.now(),
        });
    }

    pub fn reported(&self, job: Uuid, epoch: i64, runner: &str, outcome: Outcome, at_ms: u64) {
        self.push(Event::Reported {
            job,
            epoch,
            runner: runner.to_owned(),
            outcome,
            at_ms,
        });
    }

    /// Record a 5xx answer (others are the caller's business).
    pub fn error(&self, what: &str, e: &ClientError) {
        if let Some(status) = e.status().filter(|s| s.is_server_error()) {
            self.push(Event::ServerError {
                status: status.as_u16(),
                what: what.to_owned(),
                at_ms: self.now(),
            });
        }
    }

    /// Everything recorded so far.
    pub fn snapshot(&self) -> Vec<Event> {
        self.events.lock().expect("history lock").clone()
    }

    /// Every job whose dispatch was acknowledged, in order.
    pub fn dispatched_jobs(&self) -> Vec<Uuid> {
        self.events
            .lock()
            .expect("history lock")
            .iter()
            .filter_map(|e| match e {
                Event::Dispatched { job, .. } => Some(*job),
                _ => None,
            })
            .collect()
    }

    /// How many events match `f`.
    pub fn count(&self, f: impl Fn(&Event) -> bool) -> usize {
        self.events
            .lock()
            .expect("history lock")
            .iter()
            .filter(|e| f(e))
            .count()
    }
}
