//! This replica's parked long-polls, in memory, keyed by what could satisfy them.
//!
//! A lease long-poll waits on its named queue ([`Key::Runner`]) and its owner's pool in its
//! workspace ([`Key::Pool`]), and a workspace runner also on its workspace's `any` pool
//! ([`Key::Any`]); a job or events read waits on [`Key::Job`]. A waiter holds no database
//! connection. Invariants: a waiter is woken at most once per registration, and waking removes
//! it from every key it waits on; within a key waiters are woken oldest first, so runners that
//! just got work queue up behind those that did not (round-robin across runners).
//!
//! The locks are `parking_lot`'s, which do not poison: a panic while one is held (there is no
//! code that should panic under them; a bug or an allocation failure could) releases it, and
//! every critical section leaves the maps consistent at each step, so later long-polls keep
//! working instead of answering 500 until a restart.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use parking_lot::Mutex;

use tokio::sync::Notify;
use uuid::Uuid;

use crate::store::queues::WaitedQueues;
use crate::store::records::{LeaseIdentity, Queue};

/// What a waiter waits for.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Key {
    /// A pool job parked for this owner in this workspace: (workspace, owner).
    Pool(String, String),
    /// An `any` job parked in this workspace (workspace runners take them).
    Any(String),
    /// A job parked for this named runner.
    Runner(Uuid),
    /// Anything happened to this job (state change, events).
    Job(Uuid),
}

impl Key {
    /// The keys a parked job of this queue can satisfy, the most specific first (an `any` job
    /// that needs a workspace runner wakes only workspace runners).
    pub fn for_queue(q: &Queue) -> Vec<Key> {
        match (q.runner_id, q.pool.as_deref()) {
            (Some(id), _) => vec![Key::Runner(id)],
            (None, Some("any")) if q.needs_workspace_runner => vec![Key::Any(q.workspace.clone())],
            (None, Some("any")) => vec![
                Key::Pool(q.workspace.clone(), q.owner.clone()),
                Key::Any(q.workspace.clone()),
            ],
            (None, _) => vec![Key::Pool(q.workspace.clone(), q.owner.clone())],
        }
    }

    /// The keys a runner's lease long-poll waits on.
    pub fn for_runner(me: &LeaseIdentity) -> Vec<Key> {
        let mut keys = vec![
            Key::Runner(me.id),
            Key::Pool(me.workspace.clone(), me.owner.clone()),
        ];
        if me.owner.starts_with("ws:") {
            keys.push(Key::Any(me.workspace.clone()));
        }
        keys
    }

    /// Wire form in a notification payload.
    pub fn encode(&self) -> String {
        match self {
            // Workspace ids and subjects never contain '/' (domain::owner::is_valid_name).
            Key::Pool(workspace, owner) => format!("p/{workspace}/{owner}"),
            Key::Any(workspace) => format!("a/{workspace}"),
            Key::Runner(id) => format!("r/{id}"),
            Key::Job(id) => format!("j/{id}"),
        }
    }

    pub fn decode(s: &str) -> Option<Key> {
        let (kind, rest) = s.split_once('/')?;
        match kind {
            "p" => rest
                .split_once('/')
                .map(|(w, o)| Key::Pool(w.to_owned(), o.to_owned())),
            "a" => Some(Key::Any(rest.to_owned())),
            "r" => rest.parse().ok().map(Key::Runner),
            "j" => rest.parse().ok().map(Key::Job),
            _ => None,
        }
    }
}

/// Why a waiter woke: the key, how many waiters this wake has already been passed through, and
/// whether this replica parked the job itself (then a waiter that cannot take everything may
/// tell the other replicas; a wake that came from another replica is passed on locally only,
/// so no wake bounces between replicas).
#[derive(Debug, Clone)]
pub struct Wake {
    pub key: Key,
    pub hops: usize,
    pub local: bool,
    /// When the wake was sent, for the wake latency metric.
    pub at: std::time::Instant,
}

struct Slot {
    keys: Vec<Key>,
    wake: Mutex<Option<Wake>>,
    notify: Notify,
}

#[derive(Default)]
struct Inner {
    next_id: u64,
    queues: HashMap<Key, BTreeMap<u64, Arc<Slot>>>,
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
    id: u64,
    slot: Arc<Slot>,
}

impl Registration<'_> {
    /// Resolves once woken (immediately if the wake came before the await).
    pub async fn woken(&self) -> Wake {
        loop {
            if let Some(w) = self.slot.wake.lock().clone() {
                return w;
            }
            self.slot.notify.notified().await;
        }
    }
}

impl Drop for Registration<'_> {
    fn drop(&mut self) {
        self.waiters.remove(self.id, &self.slot.keys);
    }
}

impl Waiters {
    /// Register a waiter on `keys`. Register *before* checking the database, so a wake that
    /// lands between the check and the wait is not lost.
    pub fn register(&self, keys: Vec<Key>) -> Registration<'_> {
        let slot = Arc::new(Slot {
            keys,
            wake: Mutex::new(None),
            notify: Notify::new(),
        });
        let mut inner = self.inner.lock();
        inner.next_id += 1;
        let id = inner.next_id;
        for key in &slot.keys {
            inner
                .queues
                .entry(key.clone())
                .or_default()
                .insert(id, slot.clone());
        }
        inner.count += 1;
        Registration {
            waiters: self,
            id,
            slot,
        }
    }

    fn remove(&self, id: u64, keys: &[Key]) {
        let mut inner = self.inner.lock();
        let mut removed = false;
        for key in keys {
            if let Some(q) = inner.queues.get_mut(key) {
                removed |= q.remove(&id).is_some();
                if q.is_empty() {
                    inner.queues.remove(key);
                }
            }
        }
        if removed {
            inner.count = inner.count.saturating_sub(1);
        }
    }

    fn fire(inner: &mut Inner, id: u64, slot: &Arc<Slot>, wake: Wake) {
        for key in &slot.keys {
            if let Some(q) = inner.queues.get_mut(key) {
                q.remove(&id);
                if q.is_empty() {
                    inner.queues.remove(key);
                }
            }
        }
        inner.count = inner.count.saturating_sub(1);
        *slot.wake.lock() = Some(wake);
        slot.notify.notify_one();
    }

    /// Wake the oldest waiter on `key`, unless this wake has already been passed through as
    /// many waiters as are waiting (so a chain of pass-ons ends). `true` if one was woken.
    pub fn wake_one(&self, key: &Key, hops: usize, local: bool) -> bool {
        let mut inner = self.inner.lock();
        let Some(q) = inner.queues.get_mut(key) else {
            return false;
        };
        if hops > q.len() {
            return false;
        }
        let Some((id, slot)) = q.pop_first() else {
            return false;
        };
        Self::fire(
            &mut inner,
            id,
            &slot,
            Wake {
                key: key.clone(),
                hops,
                local,
                at: std::time::Instant::now(),
            },
        );
        true
    }

    /// Wake every waiter on `key`.
    pub fn wake_all(&self, key: &Key) -> usize {
        let mut inner = self.inner.lock();
        let Some(q) = inner.queues.remove(key) else {
            return 0;
        };
        let n = q.len();
        for (id, slot) in q {
            Self::fire(
                &mut inner,
                id,
                &slot,
                Wake {
                    key: key.clone(),
                    hops: 0,
                    local: false,
                    at: std::time::Instant::now(),
                },
            );
        }
        n
    }

    /// Wake every waiter on every key: after the LISTEN connection reconnects, each re-checks.
    pub fn wake_everyone(&self) -> usize {
        let keys: Vec<Key> = self.inner.lock().queues.keys().cloned().collect();
        keys.iter().map(|k| self.wake_all(k)).sum()
    }

    /// The queues that have waiters now.
    pub fn waited_queues(&self) -> WaitedQueues {
        let inner = self.inner.lock();
        let mut out = WaitedQueues::default();
        for key in inner.queues.keys() {
            match key {
                Key::Pool(w, o) => out.pools.push((w.clone(), o.clone())),
                Key::Any(w) => out.any.push(w.clone()),
                Key::Runner(id) => out.runners.push(*id),
                Key::Job(_) => {}
            }
        }
        out
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
    async fn wakes_oldest_first_and_once() {
        let w = Waiters::default();
        let pool = Key::Pool("acme".into(), "alice".into());
        let a = w.register(vec![Key::Runner(Uuid::nil()), pool.clone()]);
        let b = w.register(vec![pool.clone()]);
        assert!(w.wake_one(&pool, 0, true));
        assert_eq!(a.woken().await.key, pool);
        assert_eq!(w.len(), 1, "a is gone from both of its keys");
        assert!(!w.wake_one(&Key::Runner(Uuid::nil()), 0, true));
        assert!(w.wake_one(&pool, 0, true));
        b.woken().await;
        assert!(w.is_empty());
    }

    #[test]
    fn pass_on_chains_end() {
        let w = Waiters::default();
        let pool = Key::Pool("acme".into(), "bob".into());
        let _a = w.register(vec![pool.clone()]);
        assert!(
            !w.wake_one(&pool, 2, true),
            "a wake passed through more waiters than wait stops"
        );
        assert!(w.wake_one(&pool, 1, true));
    }

    /// A panic while the registry's lock is held (issue 18, row 12) must not stop later
    /// registrations and wakes: with `std`'s poisoning locks every later long-poll answered 500.
    #[tokio::test]
    async fn a_panic_under_the_lock_leaves_the_registry_working() {
        let w = Waiters::default();
        let pool = Key::Pool("acme".into(), "carol".into());
        let before = w.register(vec![pool.clone()]);
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _held = w.inner.lock();
            panic!("a bug while the waiters lock is held");
        }));
        assert!(panicked.is_err());
        let slot_panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _held = before.slot.wake.lock();
            panic!("a bug while a waiter's lock is held");
        }));
        assert!(slot_panicked.is_err());
        assert_eq!(w.len(), 1);
        assert!(
            w.wake_one(&pool, 0, true),
            "the waiter registered before is woken"
        );
        assert_eq!(before.woken().await.key, pool);
        let after = w.register(vec![pool.clone()]);
        assert_eq!(w.waited_queues().pools.len(), 1);
        assert_eq!(w.wake_all(&pool), 1);
        after.woken().await;
        drop((before, after));
        assert!(w.is_empty());
    }

    #[test]
    fn keys_round_trip() {
        for k in [
            Key::Pool("acme".into(), "ws:acme".into()),
            Key::Any("acme".into()),
            Key::Runner(Uuid::now_v7()),
            Key::Job(Uuid::now_v7()),
        ] {
            assert_eq!(Key::decode(&k.encode()), Some(k));
        }
    }
}
