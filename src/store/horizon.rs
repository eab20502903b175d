//! The database's snapshot horizon: how many transactions old the oldest snapshot is that keeps
//! this database's dead row versions (and the claim index entries of jobs already taken) from
//! going (`snapshot_horizon_age.sql`).
//!
//! While it is young, a claim from the head of a lane walks a handful of entries; while a
//! session holds an old snapshot (an analytics query, a replication slot with
//! `hot_standby_feedback`, a prepared transaction), a claim from the head walks one entry per job
//! taken since. So each replica reads the age once a second, and while it is at least
//! `LEASEHOLD_CLAIM_PLACES_AGE` transactions old its dispatcher starts claims from the places it
//! remembers (hub::dispatcher) and its sweeps read only the checks due since their last sweep
//! (hub::sweeper).

use std::sync::atomic::{AtomicBool, Ordering};

use super::{sql, Result, Store};

/// From how many transactions of horizon age the horizon counts as old: the default of
/// `LEASEHOLD_CLAIM_PLACES_AGE`.
pub const OLD_FROM: u64 = 5_000;

/// What a store last read of the horizon.
#[derive(Debug)]
pub struct Horizon {
    old_from: u64,
    old: AtomicBool,
}

impl Default for Horizon {
    fn default() -> Self {
        Self::new(OLD_FROM)
    }
}

impl Horizon {
    /// Old from an age of `old_from` transactions (0: always).
    pub fn new(old_from: u64) -> Self {
        Self {
            old_from,
            old: AtomicBool::new(old_from == 0),
        }
    }
}

impl Store {
    /// Read the server's horizon age and remember whether it is old.
    ///
    /// # Errors
    /// The database failed; what was last read stands.
    pub async fn watch_horizon(&self) -> Result<u64> {
        let row = self.query_opt(sql::SNAPSHOT_HORIZON_AGE, &[]).await?;
        let age = row.map_or(0, |r| r.get::<_, i64>("age").max(0) as u64);
        self.horizon
            .old
            .store(age >= self.horizon.old_from, Ordering::Relaxed);
        Ok(age)
    }

    /// Whether the horizon was old when last read: claims start from remembered places, and
    /// sweeps read only recent due checks.
    pub fn horizon_is_old(&self) -> bool {
        self.horizon.old.load(Ordering::Relaxed)
    }
}
