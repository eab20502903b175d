//! How many lease calls one runner token holds open on this replica at once
//! (`LEASEHOLD_MAX_POLLS_PER_RUNNER`). The same count per token bounds its artifact uploads
//! (`LEASEHOLD_MAX_TRANSFERS_PER_RUNNER`, in `transfer::TransferCaps`).
//!
//! Invariant: a lease call takes a slot before any database work and holds it until its
//! answer, and the slot is given back on every way out (answer, error, deadline, client gone)
//! because it is a guard dropped with the call's future. A call without a free slot answers
//! 429 `rate_limited` at the cost of one map lookup, so one runner's flood of long-polls
//! cannot queue on its runner row lock and hold the pool's connections while other tenants
//! wait. Counts are kept by token hash (never the token), only while a call is open, so the
//! map holds at most one entry per open call.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use super::error::ApiError;

/// The open lease calls of this replica, by token hash.
pub struct PollSlots {
    max: usize,
    open: Arc<Mutex<HashMap<Vec<u8>, usize>>>,
}

/// One open lease call; dropping it frees the slot.
pub struct PollSlot {
    open: Arc<Mutex<HashMap<Vec<u8>, usize>>>,
    token_hash: Vec<u8>,
}

impl PollSlots {
    /// At most `max` (at least 1) open calls per token.
    pub fn new(max: usize) -> Self {
        Self {
            max: max.max(1),
            open: Arc::default(),
        }
    }

    /// A slot for a lease call of `token_hash`.
    ///
    /// # Errors
    /// The token holds `max` open calls already: 429 with `Retry-After`.
    pub fn take(&self, token_hash: &[u8]) -> Result<PollSlot, ApiError> {
        // A panic never happens between a read and a write of a count, so a poisoned lock
        // still holds consistent counts.
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        let held = open.entry(token_hash.to_vec()).or_insert(0);
        if *held >= self.max {
            return Err(ApiError::RateLimited { retry_after_s: 1 });
        }
        *held += 1;
        Ok(PollSlot {
            open: self.open.clone(),
            token_hash: token_hash.to_vec(),
        })
    }

    /// Open calls of `token_hash` now (for tests and metrics).
    pub fn held(&self, token_hash: &[u8]) -> usize {
        let open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        open.get(token_hash).copied().unwrap_or(0)
    }
}

impl Drop for PollSlot {
    fn drop(&mut self) {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(held) = open.get_mut(&self.token_hash) {
            *held = held.saturating_sub(1);
            if *held == 0 {
                open.remove(&self.token_hash);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_holds_at_most_max_and_every_drop_frees_one() {
        let slots = PollSlots::new(2);
        let a = slots.take(b"a").unwrap();
        let _b = slots.take(b"a").unwrap();
        assert!(matches!(
            slots.take(b"a"),
            Err(ApiError::RateLimited { retry_after_s: 1 })
        ));
        let _other = slots.take(b"z").expect("another token has its own count");
        drop(a);
        let _c = slots.take(b"a").expect("a dropped slot is free again");
        assert_eq!(slots.held(b"a"), 2);
        drop(_c);
        drop(_b);
        assert_eq!(slots.held(b"a"), 0);
        assert!(
            !slots.open.lock().unwrap().contains_key(b"a".as_slice()),
            "no entry is kept for a token without open calls"
        );
    }
}
