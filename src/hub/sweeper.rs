//! Maintenance that every replica runs: lapsed leases back to parked (or failed `lease_lost`,
//! or parked as a retry), `no_runner` and `queue_timeout` rejections, retries whose delay has
//! passed (a runner woken for each), dead join codes, stale ephemeral runners, and
//! runners past the dormancy ceiling. At start it re-judges every runner's version against this
//! replica's minimum, so a changed `LEASEHOLD_MIN_RUNNER_VERSION` takes effect everywhere.
//!
//! Idempotent and concurrent: each statement works in small batches with
//! `FOR UPDATE SKIP LOCKED`, so any number of replicas sweep at once without a leader.
//!
//! While the database's oldest snapshot is old (while claims start from remembered places:
//! [`Store::horizon_is_old`]), the lapsed-lease
//! and no-runner sweeps read only the checks that fell due since this replica's last sweep
//! began, and `MARGIN` before (`Windows`): their indexes then keep an entry for every lease
//! and every dispatch since that snapshot, long judged, and a sweep from the start of the index
//! walked all of them, twice a second per replica. Invariant: a due check is judged by a sweep
//! within `MARGIN` of falling due, or by the next whole walk (`LEASEHOLD_SWEEP_FULL_WALK_MS`):
//! a sequence of batches ends only on one that was not full, so it judged every due check in its
//! window that no other transaction held locked; one held locked for longer than the margin, or
//! one written already due (a job re-parked with its no-runner check long past), waits for the
//! whole walk. With a young horizon every sweep reads every due check, as before.
//!
//! [`Store::horizon_is_old`]: crate::store::Store::horizon_is_old

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::Hub;
use crate::domain::state::JobState;
use crate::domain::version;
use crate::store::Result;

/// Rows per statement; a full batch is followed at once by another.
const BATCH: i64 = 500;

/// How far before its last sweep began a windowed sweep still reads due checks.
const MARGIN: Duration = Duration::from_secs(5);

/// How far back each windowed sweep reads: when this replica last swept, and last walked whole.
#[derive(Debug, Default)]
struct Windows {
    lapsed: Window,
    no_runner: Window,
}

#[derive(Debug, Default)]
struct Window {
    /// When the last sequence of batches that ended well began.
    swept: Option<Instant>,
    /// When the last one that read every due check began.
    walked: Option<Instant>,
}

impl Window {
    /// How far back (ms) a sequence beginning `now` reads: `None` for every due check.
    fn lookback(&self, horizon_is_old: bool, walk_every: Duration, now: Instant) -> Option<i64> {
        match (self.swept, self.walked) {
            (Some(swept), Some(walked))
                if horizon_is_old && now.duration_since(walked) < walk_every =>
            {
                let back = now.duration_since(swept) + MARGIN;
                Some(i64::try_from(back.as_millis()).unwrap_or(i64::MAX))
            }
            _ => None,
        }
    }

    /// A sequence that began `at`, reading `lookback`, ended well.
    fn swept(&mut self, at: Instant, lookback: Option<i64>) {
        self.swept = Some(at);
        if lookback.is_none() {
            self.walked = Some(at);
        }
    }
}

/// Run until `cancel` fires.
pub async fn run(hub: Arc<Hub>, cancel: CancellationToken) {
    let min = hub.config.min_runner_version.clone();
    match hub
        .store
        .rejudge_versions(|v| version::is_outdated(v, min.as_ref()))
        .await
    {
        Ok(0) => {}
        Ok(n) => tracing::info!(changed = n, "runner versions re-judged against the minimum"),
        Err(e) => tracing::warn!(error = %e, "could not re-judge runner versions"),
    }
    // The first sweep one interval after start, not at once: a test that drives the sweeper
    // itself (with an interval of an hour) must not race the replica's own first sweep, which
    // could hold the rows it judges locked while the test reads them.
    let period = hub.config.sweep_interval();
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut windows = Windows::default();
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tick.tick() => {}
        }
        let started = std::time::Instant::now();
        match sweep(&hub, &mut windows).await {
            Ok(()) => hub
                .metrics
                .sweep_duration
                .observe(started.elapsed().as_secs_f64()),
            Err(e) => {
                hub.metrics.background_failure("sweep");
                tracing::warn!(error = %e, "sweep failed; the next tick retries");
            }
        }
    }
}

/// One sweep that reads every due check.
///
/// # Errors
/// The database failed; whatever batches committed stay committed.
pub async fn sweep_once(hub: &Hub) -> Result<()> {
    sweep(hub, &mut Windows::default()).await
}

/// One sweep, windowed by what this replica swept before.
///
/// # Errors
/// The database failed; whatever batches committed stay committed.
async fn sweep(hub: &Hub, windows: &mut Windows) -> Result<()> {
    let store = &hub.store;
    let old = store.horizon_is_old();
    let walk_every = hub.config.sweep_full_walk();
    let began = Instant::now();
    let lookback = windows.lapsed.lookback(old, walk_every, began);
    loop {
        let judged = store.sweep_lapsed_leases(BATCH, lookback).await?;
        hub.metrics.sweep_batch("lapsed_leases");
        let full = judged.len() as i64 == BATCH;
        // A lease still leased only had its check moved.
        let moved: Vec<_> = judged
            .into_iter()
            .filter(|m| m.state != JobState::Leased)
            .collect();
        let parked = moved.iter().filter(|m| m.state == JobState::Parked);
        hub.metrics.redeliveries.inc_by(parked.count() as u64);
        hub.after_moves(&moved);
        if !full {
            break;
        }
    }
    windows.lapsed.swept(began, lookback);
    let began = Instant::now();
    let lookback = windows.no_runner.lookback(old, walk_every, began);
    loop {
        let judged = store.sweep_no_runner(BATCH, lookback).await?;
        hub.metrics.sweep_batch("no_runner");
        let full = judged.len() as i64 == BATCH;
        // A job still parked only had its check moved.
        let rejected: Vec<_> = judged
            .into_iter()
            .filter(|m| m.state != JobState::Parked)
            .collect();
        hub.after_moves(&rejected);
        if !full {
            break;
        }
    }
    windows.no_runner.swept(began, lookback);
    loop {
        let moved = store.sweep_queue_timeout(BATCH).await?;
        hub.metrics.sweep_batch("queue_timeout");
        let full = moved.len() as i64 == BATCH;
        hub.after_moves(&moved);
        if !full {
            break;
        }
    }
    // Retries whose delay has passed: nothing else wakes a runner for them (v1.2).
    loop {
        let moved = store.sweep_retry_due(BATCH).await?;
        hub.metrics.sweep_batch("retry_due");
        let full = moved.len() as i64 == BATCH;
        hub.after_moves(&moved);
        if !full {
            break;
        }
    }
    store.sweep_join_codes(BATCH).await?;
    hub.metrics.sweep_batch("join_codes");
    let moved = store
        .sweep_ephemeral_runners(BATCH, hub.config.ephemeral_purge_ms as i64)
        .await?;
    hub.metrics.sweep_batch("ephemeral_runners");
    hub.after_moves(&moved);
    // One batch of runners per sweep: a backlog drains over the next ticks.
    let moved = store
        .sweep_dormant_runners(BATCH, hub.config.dormancy_ceiling_ms as i64)
        .await?;
    hub.after_moves(&moved);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const WALK: Duration = Duration::from_secs(30);

    #[test]
    fn a_window_reads_back_to_its_last_sweep_and_the_margin_only_while_the_horizon_is_old() {
        let t0 = Instant::now();
        let mut w = Window::default();
        // Nothing swept yet: every due check.
        assert_eq!(w.lookback(true, WALK, t0), None);
        w.swept(t0, None);
        let t1 = t0 + Duration::from_secs(1);
        assert_eq!(w.lookback(true, WALK, t1), Some(6_000));
        // A young horizon: every due check, always.
        assert_eq!(w.lookback(false, WALK, t1), None);
        w.swept(t1, Some(6_000));
        let t2 = t1 + Duration::from_millis(500);
        assert_eq!(w.lookback(true, WALK, t2), Some(5_500));
        // A windowed sequence does not count as a whole walk: one is due WALK after the last.
        assert_eq!(w.lookback(true, WALK, t0 + WALK), None);
    }

    #[test]
    fn a_sequence_that_failed_leaves_the_window_where_it_was() {
        let t0 = Instant::now();
        let mut w = Window::default();
        w.swept(t0, None);
        // Sequences at t0 + 1 s and t0 + 2 s failed (never recorded): the one at t0 + 3 s still
        // reads back to t0, and the margin before it.
        assert_eq!(
            w.lookback(true, WALK, t0 + Duration::from_secs(3)),
            Some(8_000)
        );
    }
}
