//! The pace of the periodic reads that walk a whole index: the re-check of waited-on queues
//! and the queue-depth count behind `/metrics`. Under an old snapshot such a read walks an entry
//! for every job since that snapshot, so it grows from milliseconds to seconds (1.9 s for the
//! depth count after ten minutes of the soak, docs/perf.md, History, round 10).
//!
//! Invariant: a paced read waits at least [`DUTY`] times as long as it last took before it runs
//! again, so it occupies at most a [`DUTY`]th of one connection's time, however slow it grows;
//! a fast one keeps its interval.

use std::time::Duration;

use tokio::time::Interval;

/// How many times its own duration a paced read rests.
pub const DUTY: u32 = 20;

/// The rest after a read that `took` this long, when it is longer than the interval `period`.
pub fn rest_after(took: Duration, period: Duration) -> Option<Duration> {
    let rest = took.saturating_mul(DUTY);
    (rest > period).then_some(rest)
}

/// Push `tick` back after a read that `took` this long.
pub fn pace(tick: &mut Interval, took: Duration) {
    if let Some(rest) = rest_after(took, tick.period()) {
        tick.reset_after(rest);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_read_rests_twenty_times_its_duration_only_once_that_is_longer_than_its_interval() {
        let second = Duration::from_secs(1);
        assert_eq!(rest_after(Duration::from_millis(10), second), None);
        assert_eq!(rest_after(Duration::from_millis(50), second), None);
        assert_eq!(
            rest_after(Duration::from_millis(51), second),
            Some(Duration::from_millis(1020))
        );
        assert_eq!(
            rest_after(Duration::from_millis(1900), Duration::from_secs(15)),
            Some(Duration::from_secs(38))
        );
    }
}
