//! This replica's parked reads of a job, in memory: `GET /v1/jobs/{id}?wait_ms` and events
//! reads wait here until something happens to their job. (A runner's lease long-poll waits in
//! the dispatcher, hub::dispatcher.) A waiter holds no database connection. Invariants: a waiter
//! is woken at most once per registration, and waking removes it.
//!
//! The locks are `parking_lot`'s, which do not poison: a panic while one is held (there is no
//! code that should panic under them; a bug or an allocation failure could) releases it, and
//! every critical section leaves the map consistent at each step, so later reads keep working
//! instead of answering 500 until a restart.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::Notify;
use uuid::Uuid;

struct Slot {
    woken: Mutex<bool>,
    notify: Notify,
}

#[derive(Default)]
struct Inner {
    next_id: u64,
    jobs: HashMap<Uuid, BTreeMap<u64, Arc<Slot>>>,
    count: usize,
}

/// The registry. Critical sections are a few map operations; no await under the lock.
#[derive(Default)]
pub struct Waiters {
    inner: Mutex<Inner>,
}

/// A registered waiter; dropping it deregisters.
pub struct Registration<'a> {
    waiters: &'a Waiters,
    job: Uuid,
    id: u64,
    slot: Arc<Slot>,
}

impl Registration<'_> {
    /// Resolves once woken (immediately if the wake came before the await).
    pub async fn woken(&self) {
        loop {
            if *self.slot.woken.lock() {
                return;
            }
            self.slot.notify.notified().await;
        }
    }
}

impl Drop for Registration<'_> {
    fn drop(&mut self) {
        let mut inner = self.waiters.inner.lock();
        if let Some(q) = inner.jobs.get_mut(&self.job) {
            if q.remove(&self.id).is_some() {
                if q.is_empty() {
                    inner.jobs.remove(&self.job);
                }
                inner.count = inner.count.saturating_sub(1);
            }
        }
    }
}

impl Waiters {
    /// Register a waiter on `job`. Register *before* reading the job, so a change that lands
    /// between the read and the wait is not lost.
    pub fn register(&self, job: Uuid) -> Registration<'_> {
        let slot = Arc::new(Slot {
            woken: Mutex::new(false),
            notify: Notify::new(),
        });
        let mut inner = self.inner.lock();
        inner.next_id += 1;
        let id = inner.next_id;
        inner.jobs.entry(job).or_default().insert(id, slot.clone());
        inner.count += 1;
        Registration {
            waiters: self,
            job,
            id,
            slot,
        }
    }

    /// Wake every waiter on `job`.
    pub fn wake_all(&self, job: Uuid) -> usize {
        let q = {
            let mut inner = self.inner.lock();
            let Some(q) = inner.jobs.remove(&job) else {
                return 0;
            };
            inner.count = inner.count.saturating_sub(q.len());
            q
        };
        for slot in q.values() {
            *slot.woken.lock() = true;
            slot.notify.notify_one();
        }
        q.len()
    }

    /// Wake every waiter: after the LISTEN connection reconnects, each reads its job again.
    pub fn wake_everyone(&self) -> usize {
        let jobs: Vec<Uuid> = self.inner.lock().jobs.keys().copied().collect();
        jobs.into_iter().map(|j| self.wake_all(j)).sum()
    }

    /// How many waiters are registered.
    pub fn len(&self) -> usize {
        self.inner.lock().count
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_wake_reaches_every_waiter_of_the_job_once() {
        let w = Waiters::default();
        let job = Uuid::now_v7();
        let a = w.register(job);
        let b = w.register(job);
        let other = w.register(Uuid::now_v7());
        assert_eq!(w.wake_all(job), 2);
        a.woken().await;
        b.woken().await;
        assert_eq!(w.len(), 1, "only the other job's waiter is left");
        assert_eq!(w.wake_all(job), 0, "woken once");
        drop(other);
        assert!(w.is_empty());
    }

    /// A panic while the registry's lock is held (issue 18, row 12) must not stop later
    /// registrations and wakes: with `std`'s poisoning locks every later read answered 500.
    #[tokio::test]
    async fn a_panic_under_the_lock_leaves_the_registry_working() {
        let w = Waiters::default();
        let job = Uuid::now_v7();
        let before = w.register(job);
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _held = w.inner.lock();
            panic!("a bug while the waiters lock is held");
        }));
        assert!(panicked.is_err());
        assert_eq!(w.len(), 1);
        assert_eq!(w.wake_all(job), 1, "the waiter registered before is woken");
        before.woken().await;
        let after = w.register(job);
        assert_eq!(w.wake_everyone(), 1);
        after.woken().await;
        drop((before, after));
        assert!(w.is_empty());
    }
}
