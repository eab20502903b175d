//! Where a lease answer's time goes (issue 55): the stages of an answer with jobs, from the
//! park that woke its tick to the answer handed to the connection.
//!
//! - `heard_to_tick`: the first park heard since the workspace's last tick (a NOTIFY, or a
//!   park on this replica) until the tick that claims for it starts; a tick in flight makes a
//!   park heard meanwhile wait here. A first look (a new lease call) has no park heard. The
//!   log line has the last park heard before the tick too: a job's own is between the two.
//! - `claim`: the tick's statements (reports, runner locks, claims), until they answered.
//! - `commit`: until its commit answered (durable, when the tick leased or applied reports).
//! - `answer`: until the answer's body was handed to the connection (the waiter's task woken,
//!   secrets read, the JSON written).
//!
//! Each answer observes `leasehold_lease_stage_seconds{stage}`; with `LEASEHOLD_LOG` at
//! `leasehold::wake=debug` each job of it is also a line with the wall-clock times (unix µs),
//! which `leasehold bench --scenario wake` joins with the dispatch's commit time.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use uuid::Uuid;

use crate::telemetry::metrics::{Metrics, StageLabel};

/// When a tick's stages ended, for the answers it gives.
#[derive(Debug, Clone, Copy)]
pub struct WakeStages {
    /// The first and the last park heard since the last tick, if one made this tick due.
    pub heard: Option<(SystemTime, SystemTime)>,
    pub started: SystemTime,
    /// The tick's statements had answered.
    pub claimed: SystemTime,
    /// Its commit had answered.
    pub durable: SystemTime,
}

impl WakeStages {
    /// The answer carrying `jobs` was handed to its connection now.
    pub fn written(&self, metrics: &Metrics, jobs: &[(Uuid, i64)]) {
        let written = SystemTime::now();
        let stages = [
            ("heard_to_tick", self.heard.map(|h| h.0), self.started),
            ("claim", Some(self.started), self.claimed),
            ("commit", Some(self.claimed), self.durable),
            ("answer", Some(self.durable), written),
        ];
        for (stage, from, to) in stages {
            if let Some(from) = from {
                let took = to.duration_since(from).unwrap_or(Duration::ZERO);
                metrics
                    .lease_stages
                    .get_or_create(&StageLabel { stage })
                    .observe(took.as_secs_f64());
            }
        }
        if tracing::enabled!(target: "leasehold::wake", tracing::Level::DEBUG) {
            let (heard, last) = self.heard.map_or((0, 0), |(f, l)| (micros(f), micros(l)));
            for (job, epoch) in jobs {
                tracing::debug!(target: "leasehold::wake", %job, epoch, heard_us = heard,
                    heard_last_us = last,
                    started_us = micros(self.started), claimed_us = micros(self.claimed),
                    durable_us = micros(self.durable), written_us = micros(written),
                    "lease stages");
            }
        }
    }
}

/// Unix microseconds.
fn micros(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}
