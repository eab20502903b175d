//! What a dispatcher keeps of its waiting lease calls, per workspace: each call (its runner,
//! class, want, reports and where it stands), the classes and runners waiting, the parks heard
//! since each class's last tick, and when each runner was last served. Pure state: no I/O; the
//! ticks (`tick.rs`) read and change it under the dispatcher's lock.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Instant;

use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::oneshot;
use uuid::Uuid;

use super::Answer;
use super::Applied;
use crate::store::claim::{DoneReport, Lane, Place, Slot};
use crate::store::jobs::Fenced;
use crate::store::records::LeaseIdentity;
use crate::store::Result;

/// One owner's runners that advertise the same: they read the same lanes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct Class {
    pub(super) owner: String,
    pub(super) capabilities: Vec<String>,
    pub(super) exclusive: Vec<String>,
    pub(super) sources: Vec<String>,
}

impl Class {
    pub(super) fn of(me: &LeaseIdentity) -> Self {
        Self {
            owner: me.owner.clone(),
            capabilities: me.capabilities.clone(),
            exclusive: me.exclusive.clone(),
            sources: me.sources.clone(),
        }
    }

    /// The pool slots open to it, as claim.sql opens them.
    pub(super) fn slots(&self) -> Vec<Slot> {
        let plain = self.exclusive.is_empty();
        let constrained = !self.capabilities.is_empty() || !self.sources.is_empty();
        let ws = self.owner.starts_with("ws:");
        Slot::ALL
            .into_iter()
            .filter(|s| match s {
                Slot::OwnPlain => plain,
                Slot::OwnConstrained => constrained,
                Slot::AnyPlain => ws && plain,
                Slot::AnyConstrained => ws && constrained,
            })
            .collect()
    }

    pub(super) fn reads(&self, workspace: &str, lane: &Lane) -> bool {
        self.slots()
            .into_iter()
            .any(|s| &s.lane(workspace, &self.owner) == lane)
    }
}

/// Where a lease call waiting here stands. Its transitions, all under the dispatcher's lock:
///
/// - `New` → `InTick { first: true }`: a tick takes it (its first look; its reports go in it);
/// - `Waiting` → `InTick { first: false }`: a park in a lane its class reads, then a tick;
/// - `InTick` → `InTick { abandoned: true }`: its call went away (the ticket dropped);
/// - `InTick` → gone: the tick answers it (jobs, no free slot, its runner gone, `once`), or it
///   was abandoned (what the tick leased for it is given back, `caller_gone`), or the tick
///   failed (503);
/// - `InTick` → `Waiting`: the tick found it nothing and it has a free slot; → `New` instead
///   when its runner advertises otherwise than its class (it looks again, in its new class);
/// - `Waiting` → gone: its wait ended, or its call went away.
///
/// A `New` or `InTick` call whose wait ends is answered by its tick's end (its reports may be
/// in it); a `Waiting` one at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Stage {
    New,
    Waiting,
    InTick { first: bool, abandoned: bool },
}

pub(super) struct Waiter {
    /// Its runner, shared by the runner's waiters and the hub's identities.
    pub(super) me: Arc<LeaseIdentity>,
    /// Its runner's class (what `me` advertises), shared by the waiters of the class.
    pub(super) class: Arc<Class>,
    pub(super) token_hash: Vec<u8>,
    pub(super) want: i32,
    /// Reports not yet applied (a new waiter's).
    pub(super) reports: Vec<DoneReport>,
    /// What its reports did, once applied: only what its answer needs, not the jobs' rows
    /// (a waiter keeps it for the rest of its wait).
    pub(super) done: Option<Vec<Fenced<Applied>>>,
    /// Where it stands ([`Stage`]).
    pub(super) stage: Stage,
    /// The workspace's park count when its last tick began: a park since in a lane it reads
    /// makes it due again.
    pub(super) seen: u64,
    /// Answer after its next tick, whatever it finds (a call of `wait_ms` 0, or one whose
    /// wait ended before its tick did).
    pub(super) once: bool,
    pub(super) reply: Option<oneshot::Sender<Result<Answer>>>,
    /// Counted in `leasehold_long_polls` from the end of its first look until it goes: a poll
    /// parked there survives a database failover (the gauge says when one is).
    pub(super) parked: Option<Parked>,
}

/// One poll counted in `leasehold_long_polls` while this lives.
pub(super) struct Parked(Gauge);

impl Parked {
    pub(super) fn new(gauge: &Gauge) -> Self {
        gauge.inc();
        Self(gauge.clone())
    }
}

impl Drop for Parked {
    fn drop(&mut self) {
        self.0.dec();
    }
}

#[derive(Default)]
pub(super) struct Workspace {
    pub(super) waiters: BTreeMap<u64, Waiter>,
    /// How many of the waiters are of each class, and of each runner: what a park asks.
    pub(super) classes: HashMap<Arc<Class>, usize>,
    pub(super) runners: HashMap<Uuid, usize>,
    /// Ticks running (at most [`TICKS_IN_FLIGHT`]).
    pub(super) ticking: usize,
    /// Parks heard of here, counted; and the count at the last park in a lane each class
    /// reads, and in each runner's named lane.
    pub(super) parks: u64,
    pub(super) class_parks: HashMap<Arc<Class>, u64>,
    pub(super) runner_parks: HashMap<Uuid, u64>,
    /// Lanes this replica parked in that no tick has read since, each with the earliest place
    /// a park landed at (the head when one was not known): what the other replicas are told.
    pub(super) local: HashMap<Lane, Place>,
    /// When the first park since the last tick was heard of (the wake latency).
    pub(super) dirty_since: Option<Instant>,
    /// When the last park since the last tick was heard of (a wake's stages: hub::wake_stages).
    pub(super) dirty_last: Option<Instant>,
    /// When each runner was last served jobs here (a count of servings): a claim hands out
    /// slots to the least recently served first, however many calls each holds open.
    pub(super) served: HashMap<Uuid, u64>,
    pub(super) servings: u64,
}

/// Where each class's claim of each pool slot starts in a workspace, and when it last read it
/// from its head. Kept beside the workspace's waiters, not in them: a busy workspace often has
/// none for a moment (every runner is working), and a place forgotten then is a walk of every
/// dead entry from the head under an old horizon.
pub(super) type Places = HashMap<(Arc<Class>, Slot), (Place, Instant)>;

impl Workspace {
    /// The class of `me`, the one the waiters of that class share.
    pub(super) fn class_of(&self, me: &LeaseIdentity) -> Arc<Class> {
        let class = Class::of(me);
        self.classes
            .get_key_value(&class)
            .map_or_else(|| Arc::new(class), |(known, _)| known.clone())
    }

    pub(super) fn insert(&mut self, id: u64, w: Waiter) {
        *self.classes.entry(w.class.clone()).or_default() += 1;
        *self.runners.entry(w.me.id).or_default() += 1;
        self.waiters.insert(id, w);
    }

    pub(super) fn remove(&mut self, id: u64) -> Option<Waiter> {
        let w = self.waiters.remove(&id)?;
        fn forget<K: std::hash::Hash + Eq>(counts: &mut HashMap<K, usize>, key: &K) {
            if let Some(n) = counts.get_mut(key) {
                *n -= 1;
                if *n == 0 {
                    counts.remove(key);
                }
            }
        }
        forget(&mut self.classes, &w.class);
        forget(&mut self.runners, &w.me.id);
        if !self.classes.contains_key(&w.class) {
            self.class_parks.remove(&w.class);
        }
        if !self.runners.contains_key(&w.me.id) {
            self.runner_parks.remove(&w.me.id);
        }
        if self.served.len() > 64 + 4 * self.runners.len() {
            // Runners long gone (revoked, moved to another replica) are forgotten.
            let runners = &self.runners;
            self.served.retain(|r, _| runners.contains_key(r));
        }
        Some(w)
    }

    /// A waiter's runner is `me` now (a claim answered it): where its leases start, and what
    /// it advertises, which may move the waiter to another class. In place, never out and back
    /// in: a park heard during the tick (its class's count, its runner's) keeps it due.
    pub(super) fn refresh(&mut self, id: u64, me: &Arc<LeaseIdentity>) {
        let class = self.class_of(me);
        let Some(w) = self.waiters.get_mut(&id) else {
            return;
        };
        w.me = me.clone();
        if w.class == class {
            return;
        }
        let old = std::mem::replace(&mut w.class, class.clone());
        *self.classes.entry(class).or_default() += 1;
        if let Some(n) = self.classes.get_mut(&old) {
            *n -= 1;
            if *n == 0 {
                self.classes.remove(&old);
                self.class_parks.remove(&old);
            }
        }
    }

    /// Whether a waiting runner here reads `lane`.
    pub(super) fn reads(&self, name: &str, lane: &Lane) -> bool {
        match lane {
            Lane::Named(id) => self.runners.contains_key(id),
            lane => self.classes.keys().any(|c| c.reads(name, lane)),
        }
    }

    /// A park in `lane`: the waiters that read it are due (those in a tick, once it ends).
    pub(super) fn park(&mut self, name: &str, lane: &Lane) {
        self.parks += 1;
        let at = self.parks;
        match lane {
            Lane::Named(id) => {
                self.runner_parks.insert(*id, at);
            }
            lane => {
                let classes: Vec<Arc<Class>> = self
                    .classes
                    .keys()
                    .filter(|c| c.reads(name, lane))
                    .cloned()
                    .collect();
                for class in classes {
                    self.class_parks.insert(class, at);
                }
            }
        }
    }

    /// A park in its named lane since its last tick began.
    pub(super) fn named_due(&self, w: &Waiter) -> bool {
        self.runner_parks
            .get(&w.me.id)
            .is_some_and(|at| *at > w.seen)
    }

    pub(super) fn due(&self, w: &Waiter) -> bool {
        !matches!(w.stage, Stage::InTick { .. })
            && (w.stage == Stage::New
                || self.named_due(w)
                || self
                    .class_parks
                    .get(&w.class)
                    .is_some_and(|at| *at > w.seen))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runner(capabilities: &[&str]) -> Arc<LeaseIdentity> {
        Arc::new(LeaseIdentity {
            id: Uuid::from_u128(7),
            workspace: "acme".into(),
            owner: "u:alice".into(),
            capabilities: capabilities.iter().map(|c| (*c).to_owned()).collect(),
            exclusive: Vec::new(),
            sources: Vec::new(),
            leases_since: None,
        })
    }

    fn waiter(ws: &Workspace, me: Arc<LeaseIdentity>) -> Waiter {
        Waiter {
            class: ws.class_of(&me),
            me,
            token_hash: Vec::new(),
            want: 1,
            reports: Vec::new(),
            done: None,
            stage: Stage::Waiting,
            seen: 0,
            once: false,
            reply: None,
            parked: None,
        }
    }

    /// The lost wake of a lone waiter: a park heard while its tick ran, then the tick's answer
    /// refreshing its runner, must leave it due.
    #[test]
    fn a_park_heard_during_a_tick_survives_the_refresh_of_a_lone_waiter() {
        let mut ws = Workspace::default();
        let me = runner(&[]);
        let w = waiter(&ws, me.clone());
        ws.insert(1, w);
        ws.waiters.get_mut(&1).unwrap().stage = Stage::InTick {
            first: false,
            abandoned: false,
        };
        let lane = Lane::Pool {
            workspace: "acme".into(),
            owner: "u:alice".into(),
            constrained: false,
        };
        assert!(ws.reads("acme", &lane));
        ws.park("acme", &lane);
        ws.park("acme", &Lane::Named(me.id));
        let mut later = LeaseIdentity::clone(&me);
        later.leases_since = Some(chrono::Utc::now());
        ws.refresh(1, &Arc::new(later));
        let w = ws.waiters.get_mut(&1).unwrap();
        w.stage = Stage::Waiting;
        let w = &ws.waiters[&1];
        assert!(ws.due(w), "the park heard during the tick was forgotten");
        assert!(ws.named_due(w));
    }

    /// A waiter whose runner now advertises otherwise moves to its new class; the old class
    /// goes with its last waiter.
    #[test]
    fn a_refresh_that_changes_what_a_runner_advertises_moves_its_class() {
        let mut ws = Workspace::default();
        let w = waiter(&ws, runner(&[]));
        ws.insert(1, w);
        ws.refresh(1, &runner(&["gpu"]));
        assert_eq!(ws.classes.len(), 1);
        let (class, n) = ws.classes.iter().next().unwrap();
        assert_eq!(
            (class.capabilities.clone(), *n),
            (vec!["gpu".to_owned()], 1)
        );
        assert!(Arc::ptr_eq(class, &ws.waiters[&1].class));
        ws.remove(1);
        assert!(ws.classes.is_empty() && ws.runners.is_empty());
    }
}
