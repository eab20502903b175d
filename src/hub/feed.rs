//! The workspace feed's reads (contract v1.4): a page, how far retention pruned it, and the
//! long-poll that waits for an event past a cursor.
//!
//! Wakes: every change this replica makes or hears of (a job changed or parked, any
//! notification, the LISTEN connection back up) bumps one counter, [`Hub::feed_pulse`]; a
//! waiting read looks again when it moves. The counter names no workspace (a job's notice
//! carries only its id), so a wake is a hint to look, as everywhere in the hub: a read that
//! finds nothing after a wake looks again soon (the event may wait behind an older transaction
//! still open: the snapshot's xmin), then at the re-check interval, so nothing depends on a
//! notification arriving.

use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::Hub;
use crate::domain::feed::Cursor;
use crate::store::feed::FeedEvent;
use crate::store::Result;

/// How soon a read looks again after a wake that found nothing readable yet; doubled up to
/// the re-check interval.
const FIRST_RELOOK: Duration = Duration::from_millis(5);

/// Least time between two looks of one waiting read: pulses come from every workspace's
/// changes, so under load a read looks at most this often rather than at every change.
const SPACING: Duration = Duration::from_millis(10);

/// How long a read whose page is short waits, beyond its `wait_ms`, for events it sees
/// committed but that an older open transaction holds back (so a caller reads its own
/// writes); past it the page is answered as it is (nothing is skipped: the next read finds
/// them).
const SETTLE: Duration = Duration::from_millis(500);

/// What a feed read asks for.
#[derive(Debug, Clone)]
pub struct FeedQuery {
    pub workspace: String,
    pub kinds: Vec<String>,
    pub after: Cursor,
    pub limit: i64,
}

impl Hub {
    /// Something may have been appended to some workspace's feed: wake its readers.
    pub fn feed_pulse(&self) {
        self.feed.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// A handle that sees every [`Self::feed_pulse`] from now on.
    pub fn feed_pulses(&self) -> tokio::sync::watch::Receiver<u64> {
        self.feed.subscribe()
    }

    /// The transaction id up to which retention deleted `workspace`'s events, if it did.
    ///
    /// # Errors
    /// The database failed.
    pub async fn feed_pruned(&self, workspace: &str) -> Result<Option<i64>> {
        self.store.feed_pruned(workspace).await
    }

    /// One page of the feed past `q.after`, waiting up to `wait` for one event (or until
    /// `shutdown`): an empty page when none came.
    ///
    /// # Errors
    /// The database failed.
    pub async fn wait_feed(
        &self,
        q: &FeedQuery,
        wait: Duration,
        shutdown: &CancellationToken,
    ) -> Result<Vec<FeedEvent>> {
        let started = Instant::now();
        let deadline = started + wait;
        let mut pulses = self.feed.subscribe();
        let recheck = self.config.recheck_interval();
        let mut relook: Option<Duration> = None;
        let mut settle = FIRST_RELOOK;
        let mut last_look: Option<Instant> = None;
        loop {
            if let Some(at) = last_look {
                tokio::time::sleep_until((at + SPACING).min(deadline.max(at))).await;
            }
            last_look = Some(Instant::now());
            pulses.borrow_and_update();
            let events = self
                .store
                .feed_page(&q.workspace, &q.kinds, q.after, q.limit)
                .await?;
            let full = events.len() as i64 >= q.limit;
            if !full && !shutdown.is_cancelled() && started.elapsed() < SETTLE {
                let from = events.last().map_or(q.after, |e| e.position);
                if self.store.feed_held(&q.workspace, &q.kinds, from).await? {
                    tokio::time::sleep(settle).await;
                    settle = (settle * 2).min(Duration::from_millis(50));
                    continue;
                }
            }
            if !events.is_empty() || Instant::now() >= deadline || shutdown.is_cancelled() {
                return Ok(events);
            }
            let next = Instant::now() + relook.unwrap_or(recheck).min(recheck);
            tokio::select! {
                changed = pulses.changed() => {
                    if changed.is_err() {
                        return Ok(events);
                    }
                    relook = Some(FIRST_RELOOK);
                }
                _ = tokio::time::sleep_until(next.min(deadline)) => {
                    relook = relook.map(|d| d * 2);
                }
                _ = shutdown.cancelled() => {}
            }
        }
    }
}
