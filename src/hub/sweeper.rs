//! Maintenance that every replica runs: lapsed leases back to parked (or failed `lease_lost`),
//! `no_runner` and `queue_timeout` rejections, dead join codes, stale ephemeral runners, and
//! runners past the dormancy ceiling. At start it re-judges every runner's version against this
//! replica's minimum, so a changed `LEASEHOLD_MIN_RUNNER_VERSION` takes effect everywhere.
//!
//! Idempotent and concurrent: each statement works in small batches with
//! `FOR UPDATE SKIP LOCKED`, so any number of replicas sweep at once without a leader.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::Hub;
use crate::domain::state::JobState;
use crate::domain::version;
use crate::store::Result;

/// Rows per statement; a full batch is followed at once by another.
const BATCH: i64 = 500;

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
    let mut tick = tokio::time::interval(hub.config.sweep_interval());
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tick.tick() => {}
        }
        let started = std::time::Instant::now();
        match sweep_once(&hub).await {
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

/// One full sweep.
///
/// # Errors
/// The database failed; whatever batches committed stay committed.
pub async fn sweep_once(hub: &Hub) -> Result<()> {
    let store = &hub.store;
    loop {
        let moved = store.sweep_lapsed_leases(BATCH).await?;
        hub.metrics.sweep_batch("lapsed_leases");
        let parked = moved.iter().filter(|m| m.state == JobState::Parked);
        hub.metrics.redeliveries.inc_by(parked.count() as u64);
        let full = moved.len() as i64 == BATCH;
        hub.after_moves(&moved);
        if !full {
            break;
        }
    }
    loop {
        let moved = store.sweep_no_runner(BATCH).await?;
        hub.metrics.sweep_batch("no_runner");
        let full = moved.len() as i64 == BATCH;
        hub.after_moves(&moved);
        if !full {
            break;
        }
    }
    loop {
        let moved = store.sweep_queue_timeout(BATCH).await?;
        hub.metrics.sweep_batch("queue_timeout");
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
