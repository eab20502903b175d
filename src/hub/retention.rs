//! Retention (contract v1.2): jobs settled longer ago than the window
//! ([`crate::config::Config::retention`]) are deleted with their events and artifacts, in the
//! background; their ids then answer 404, and their idempotency keys are free again. Settled
//! webhook deliveries made longer ago than the window leave the delivery log too (v1.4).
//!
//! Invariants: each batch is one short statement over at most [`BATCH`] jobs taken with
//! `FOR UPDATE SKIP LOCKED` (`sweep_retention.sql`), so replicas sweeping at once delete each
//! job once and never wait on each other or on a report; a job some transaction holds is left
//! for a later sweep. Between batches the loop rests as long as the batch took (and at least
//! [`REST`]), so a backlog after a long outage drains without holding the database's attention
//! for more than half the time, and the hot path's locks are never held for long.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::Hub;
use crate::store::Result;

/// Jobs per statement. Each takes its events and artifact chunks along, so it stays small.
pub const BATCH: i64 = 100;

/// The least rest between two full batches.
const REST: Duration = Duration::from_millis(20);

/// Run until `cancel` fires; a window of `None` (retention 0) keeps every job and runs nothing.
pub async fn run(hub: Arc<Hub>, cancel: CancellationToken) {
    let Some(window) = hub.config.retention() else {
        return;
    };
    let period = hub.config.retention_interval();
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tick.tick() => {}
        }
        match retain(&hub, window, &cancel).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(
                deleted = n,
                "settled jobs past the retention window deleted"
            ),
            Err(e) => {
                hub.metrics.background_failure("retention");
                tracing::warn!(error = %e, "retention sweep failed; the next interval retries");
            }
        }
    }
}

/// Delete, batch by batch, every job settled more than `window` ago; answers how many.
///
/// # Errors
/// The database failed; the batches before stay deleted.
pub async fn retain(hub: &Hub, window: Duration, cancel: &CancellationToken) -> Result<i64> {
    let older_than_ms = i64::try_from(window.as_millis()).unwrap_or(i64::MAX);
    let mut total = 0;
    loop {
        let started = Instant::now();
        let deleted = hub.store.sweep_retention(BATCH, older_than_ms).await?;
        let log = hub
            .store
            .sweep_webhook_deliveries(BATCH * 10, older_than_ms)
            .await?;
        hub.metrics.sweep_batch("retention");
        total += deleted;
        if deleted < BATCH && log < BATCH * 10 {
            return Ok(total);
        }
        let rest = started.elapsed().max(REST);
        tokio::select! {
            _ = cancel.cancelled() => return Ok(total),
            _ = tokio::time::sleep(rest) => {}
        }
    }
}
