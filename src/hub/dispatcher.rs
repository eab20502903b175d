//! The dispatcher: one per replica, it claims for all the replica's waiting runners at once.
//!
//! A lease call registers here (its runner, how many jobs it wants, the reports it carries) and
//! waits in memory, holding no connection. The dispatcher runs *ticks*, one at a time per
//! workspace: a tick applies every report its waiters carry, then claims for every waiting
//! runner it is due for, one `claim.sql` per class of runners (one owner's runners that
//! advertise the same), all in one transaction (store::claim). A claim hands its jobs out
//! round-robin among the class's runners, oldest waiter first, capacity kept.
//!
//! What makes a waiter due: it is new (its first look, which also reads its named lane), or a
//! job was parked in a lane its class reads: by this replica (dispatch, release, retry, sweep),
//! heard from another one (a NOTIFY names the workspace and the lane), or found by the safety
//! net (`parked_lanes.sql`, every recheck interval). A park wakes the dispatcher, never each
//! waiter: a parked job is taken by one claim. A park that no waiting class here reads is told
//! to the other replicas at once; one a tick here read, when that tick may have left some of its
//! lane behind (a class filled every slot it had, or the lane is constrained), after the tick.
//!
//! Invariants. A waiter is answered exactly once: jobs (and it leaves), no free slot, its runner
//! gone, or the end of its wait; a waiter in a tick is answered when the tick ends (a withdrawn
//! one too: its reports may be in that tick, and jobs leased for it are handed over). Jobs leased
//! for a waiter whose call went away are given back at once (re-parked, attempt not counted).
//! Reports are committed before their call waits; a tick that fails answers its new waiters with
//! the error and ends the wait of the others, whose reports already committed.
//!
//! Where a claim starts (under an old snapshot): a claim index keeps an entry for every job taken
//! until no snapshot can see the job's parked version, so while a session holds an old snapshot
//! a claim from a lane's head walks every job taken since. While the horizon is old
//! (store::horizon) each class reads each lane from the place after the last job it took there;
//! every park it learns of before that place moves the place back to it, and each lane is read
//! from its head at least every `LEASEHOLD_CLAIM_FULL_WALK_MS` (a job parked behind a place
//! unannounced, by a claim elsewhere that rolled back or a lost notification, waits at most
//! that long). A class's place is its own: a job it skipped as unfit for it is never behind
//! another class's place.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use tokio::sync::oneshot;
use uuid::Uuid;

use super::handover::Handover;
use super::notifier::{Notice, Notifier};
use crate::store::claim::{
    ClaimOutcome, ClassClaim, DoneReport, Lane, Place, ReportOf, RunnerClaim, Slot, TickOutcome,
};
use crate::store::jobs::Fenced;
use crate::store::records::{Claimed, Job, LeaseIdentity, Queue};
use crate::store::{Result, Store, StoreError};

/// How many ticks of one workspace may run at once on a replica: what arrives while they run
/// waits for the next, and is claimed with everything else that arrived (group commit, without
/// a timer).
const TICKS_IN_FLIGHT: usize = 1;

/// What a lease call's wait ended with.
#[derive(Default)]
pub struct Answer {
    /// The jobs it took (named first, then by priority and id).
    pub claimed: Vec<Claimed>,
    /// Guards `claimed` until the answer is written (dropped before: given back).
    pub handover: Handover,
    /// No live runner has its token any more.
    pub gone: bool,
    /// What each of its reports did, in order (a miss says `NotFound` until asked why).
    pub done: Vec<Fenced<Applied>>,
    /// Its runner as the tick left it (where its leases start, what it advertises).
    pub me: Option<Arc<LeaseIdentity>>,
}

/// What a report in a lease call's `done` did to its job, as the call's answer needs it.
#[derive(Debug, Clone)]
pub struct Applied {
    pub id: Uuid,
    pub epoch: i64,
    pub traceparent: Option<String>,
}

impl Applied {
    fn of(job: &Job) -> Self {
        Self {
            id: job.id,
            epoch: job.epoch,
            traceparent: job.traceparent.clone(),
        }
    }
}

/// What a tick's end owes the rest of the hub: wakes and follow-up statements.
#[derive(Default)]
pub struct Aftermath {
    /// Jobs settled or parked again by reports.
    pub settled: Vec<Job>,
    /// Jobs leased (their readers wake).
    pub leased: Vec<Uuid>,
    /// Runners with named jobs they cannot run, and the jobs rejected for it.
    pub unfit: Vec<Uuid>,
    pub rejected: Vec<Uuid>,
    /// Jobs to give back: leased for a call that went away (with its runner's token hash).
    pub orphans: Vec<(Vec<u8>, Uuid, i64)>,
    /// Runners that are gone.
    pub gone: Vec<Uuid>,
}

/// One owner's runners that advertise the same: they read the same lanes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Class {
    owner: String,
    capabilities: Vec<String>,
    exclusive: Vec<String>,
    sources: Vec<String>,
}

impl Class {
    fn of(me: &LeaseIdentity) -> Self {
        Self {
            owner: me.owner.clone(),
            capabilities: me.capabilities.clone(),
            exclusive: me.exclusive.clone(),
            sources: me.sources.clone(),
        }
    }

    /// The pool slots open to it, as claim.sql opens them.
    fn slots(&self) -> Vec<Slot> {
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

    fn reads(&self, workspace: &str, lane: &Lane) -> bool {
        self.slots()
            .into_iter()
            .any(|s| &s.lane(workspace, &self.owner) == lane)
    }
}

struct Waiter {
    /// Its runner, shared by the runner's waiters and the hub's identities.
    me: Arc<LeaseIdentity>,
    /// Its runner's class (what `me` advertises), shared by the waiters of the class.
    class: Arc<Class>,
    token_hash: Vec<u8>,
    want: i32,
    /// Reports not yet applied (a new waiter's).
    reports: Vec<DoneReport>,
    /// What its reports did, once applied: only what its answer needs, not the jobs' rows
    /// (a waiter keeps it for the rest of its wait).
    done: Option<Vec<Fenced<Applied>>>,
    /// Not yet through a tick.
    fresh: bool,
    /// The workspace's park count when its last tick began: a park since in a lane it reads
    /// makes it due again.
    seen: u64,
    /// Answer after its next tick, whatever it finds.
    once: bool,
    in_tick: bool,
    /// Its call went away during a tick: what the tick leases for it is given back.
    abandoned: bool,
    reply: Option<oneshot::Sender<Result<Answer>>>,
    /// Counted in `leasehold_long_polls` from the end of its first look until it goes: a poll
    /// parked there survives a database failover (the gauge says when one is).
    parked: Option<Parked>,
}

/// One poll counted in `leasehold_long_polls` while this lives.
struct Parked(Gauge);

impl Parked {
    fn new(gauge: &Gauge) -> Self {
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
struct Workspace {
    waiters: BTreeMap<u64, Waiter>,
    /// How many of the waiters are of each class, and of each runner: what a park asks.
    classes: HashMap<Arc<Class>, usize>,
    runners: HashMap<Uuid, usize>,
    /// Ticks running (at most [`TICKS_IN_FLIGHT`]).
    ticking: usize,
    /// Parks heard of here, counted; and the count at the last park in a lane each class
    /// reads, and in each runner's named lane.
    parks: u64,
    class_parks: HashMap<Arc<Class>, u64>,
    runner_parks: HashMap<Uuid, u64>,
    /// Lanes this replica parked in that no tick has read since, each with the earliest place
    /// a park landed at (the head when one was not known): what the other replicas are told.
    local: HashMap<Lane, Place>,
    /// When the first park since the last tick was heard of (the wake latency).
    dirty_since: Option<Instant>,
    /// When each runner was last served jobs here (a count of servings): a claim hands out
    /// slots to the least recently served first, however many calls each holds open.
    served: HashMap<Uuid, u64>,
    servings: u64,
}

/// Where each class's claim of each pool slot starts in a workspace, and when it last read it
/// from its head. Kept beside the workspace's waiters, not in them: a busy workspace often has
/// none for a moment (every runner is working), and a place forgotten then is a walk of every
/// dead entry from the head under an old horizon.
type Places = HashMap<(Arc<Class>, Slot), (Place, Instant)>;

impl Workspace {
    /// The class of `me`, the one the waiters of that class share.
    fn class_of(&self, me: &LeaseIdentity) -> Arc<Class> {
        let class = Class::of(me);
        self.classes
            .get_key_value(&class)
            .map_or_else(|| Arc::new(class), |(known, _)| known.clone())
    }

    fn insert(&mut self, id: u64, w: Waiter) {
        *self.classes.entry(w.class.clone()).or_default() += 1;
        *self.runners.entry(w.me.id).or_default() += 1;
        self.waiters.insert(id, w);
    }

    fn remove(&mut self, id: u64) -> Option<Waiter> {
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
    fn refresh(&mut self, id: u64, me: &Arc<LeaseIdentity>) {
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
    fn reads(&self, name: &str, lane: &Lane) -> bool {
        match lane {
            Lane::Named(id) => self.runners.contains_key(id),
            lane => self.classes.keys().any(|c| c.reads(name, lane)),
        }
    }

    /// A park in `lane`: the waiters that read it are due (those in a tick, once it ends).
    fn park(&mut self, name: &str, lane: &Lane) {
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
    fn named_due(&self, w: &Waiter) -> bool {
        self.runner_parks
            .get(&w.me.id)
            .is_some_and(|at| *at > w.seen)
    }

    fn due(&self, w: &Waiter) -> bool {
        !w.in_tick
            && (w.fresh
                || self.named_due(w)
                || self
                    .class_parks
                    .get(&w.class)
                    .is_some_and(|at| *at > w.seen))
    }
}

#[derive(Default)]
struct State {
    next_id: u64,
    workspaces: HashMap<String, Workspace>,
    /// Each workspace's places, while any is younger than a full walk.
    places: HashMap<String, Places>,
}

/// The replica's dispatcher.
pub struct Dispatcher {
    store: Store,
    notifier: Notifier,
    hub: Weak<super::Hub>,
    me: Weak<Self>,
    lease_ttl_ms: i64,
    full_walk: Duration,
    state: Mutex<State>,
    wake_latency: Histogram,
    wakes: Counter,
    ticks: Counter,
    /// `leasehold_long_polls`: the waiters past their first look.
    long_polls: Gauge,
    /// `leasehold_dispatcher_ticks_failed`.
    ticks_failed: Counter,
    /// The tick fault (`LEASEHOLD_FAULT_FAIL_TICKS`: every Nth tick panics; 0 off), and the
    /// ticks counted for it.
    fail_every: u64,
    ticks_run: std::sync::atomic::AtomicU64,
}

/// A registered lease call; dropping it withdraws the call (jobs a tick leases for it then are
/// given back).
pub struct Ticket {
    dispatcher: Arc<Dispatcher>,
    workspace: String,
    id: u64,
    answer: Option<oneshot::Receiver<Result<Answer>>>,
}

impl Ticket {
    /// The answer, once the dispatcher has one.
    ///
    /// # Errors
    /// The tick that carried this call's reports failed.
    pub async fn answer(&mut self) -> Result<Answer> {
        let Some(rx) = self.answer.as_mut() else {
            return Err(StoreError::Unavailable("answered already".into()));
        };
        let got = rx
            .await
            .unwrap_or_else(|_| Err(StoreError::Unavailable("shutting down".into())));
        self.answer = None;
        got
    }

    /// End the wait now (its deadline, or shutdown): answered at once with nothing, unless a
    /// tick holds it or its reports are not applied yet (then by that tick's end).
    ///
    /// # Errors
    /// The tick that carried this call's reports failed.
    pub async fn withdraw(&mut self) -> Result<Answer> {
        if let Some(answer) = self.dispatcher.withdraw(&self.workspace, self.id) {
            self.answer = None;
            return Ok(answer);
        }
        self.answer().await
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if self.answer.is_some() {
            self.dispatcher.abandon(&self.workspace, self.id);
        }
    }
}

impl Dispatcher {
    pub fn new(
        store: Store,
        notifier: Notifier,
        hub: Weak<super::Hub>,
        lease_ttl_ms: i64,
        full_walk: Duration,
        (wake_latency, wakes, ticks, ticks_failed, long_polls): (
            Histogram,
            Counter,
            Counter,
            Counter,
            Gauge,
        ),
        fail_every: u64,
    ) -> Arc<Self> {
        Arc::new_cyclic(|me| Self {
            store,
            notifier,
            hub,
            me: me.clone(),
            lease_ttl_ms,
            full_walk,
            state: Mutex::default(),
            wake_latency,
            wakes,
            ticks,
            long_polls,
            ticks_failed,
            fail_every,
            ticks_run: std::sync::atomic::AtomicU64::new(0),
        })
    }

    /// Register a lease call of runner `me` (authenticated by `token_hash`) that wants up to
    /// `want` jobs and carries `reports`; `once`: answer after its first tick, whatever it finds.
    pub fn register(
        self: &Arc<Self>,
        me: Arc<LeaseIdentity>,
        token_hash: Vec<u8>,
        want: i32,
        reports: Vec<DoneReport>,
        once: bool,
    ) -> Ticket {
        let (tx, rx) = oneshot::channel();
        let workspace = me.workspace.clone();
        let id = {
            let mut state = self.state.lock();
            state.next_id += 1;
            let id = state.next_id;
            let ws = state.workspaces.entry(workspace.clone()).or_default();
            let class = ws.class_of(&me);
            ws.insert(
                id,
                Waiter {
                    me,
                    class,
                    token_hash,
                    want,
                    reports,
                    done: None,
                    fresh: true,
                    seen: 0,
                    once,
                    in_tick: false,
                    abandoned: false,
                    reply: Some(tx),
                    parked: None,
                },
            );
            id
        };
        self.poke(&workspace);
        Ticket {
            dispatcher: self.clone(),
            workspace,
            id,
            answer: Some(rx),
        }
    }

    /// How many lease calls wait here.
    pub fn len(&self) -> usize {
        let state = self.state.lock();
        state.workspaces.values().map(|ws| ws.waiters.len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The runners waiting here now, in id order (the presence refresh marks them seen).
    pub fn waiting_runners(&self) -> Vec<Uuid> {
        let state = self.state.lock();
        let mut runners: Vec<Uuid> = state
            .workspaces
            .values()
            .flat_map(|ws| ws.runners.keys().copied())
            .collect();
        runners.sort();
        runners
    }

    /// A job of `queue` was parked (by this replica when `local`; `id` the job's).
    pub fn parked(&self, queue: &Queue, id: Uuid, local: bool) {
        let place = queue.priority.map(|p| Place::of(p, id));
        for lane in Lane::of(queue) {
            self.parked_in(&queue.workspace, lane, place, local);
        }
    }

    /// A job was parked in `lane` of `workspace`, at `place` when known.
    pub fn parked_in(&self, workspace: &str, lane: Lane, place: Option<Place>, local: bool) {
        let read = {
            let mut state = self.state.lock();
            // A place this park lands before moves back to it (to the head when unknown).
            let to = place.unwrap_or(Place::HEAD);
            for ((class, slot), (at, _)) in state.places.get_mut(workspace).into_iter().flatten() {
                if slot.lane(workspace, &class.owner) == lane && to < *at {
                    *at = to;
                }
            }
            match state.workspaces.get_mut(workspace) {
                Some(ws) => {
                    let read = ws.reads(workspace, &lane);
                    if read {
                        ws.park(workspace, &lane);
                        ws.dirty_since.get_or_insert_with(Instant::now);
                        if local {
                            let first = ws.local.entry(lane.clone()).or_insert(to);
                            *first = (*first).min(to);
                        }
                    }
                    read
                }
                None => false,
            }
        };
        if read {
            self.wakes.inc();
            self.poke(workspace);
        } else if local {
            self.notifier.send(Notice::Parked {
                workspace: workspace.to_owned(),
                lane,
                place,
            });
        }
    }

    /// Forget the places a claim would not start from any more (last read from the head a full
    /// walk ago or more: the next claim reads from the head anyway), so that the places of
    /// workspaces no one waits on go.
    pub fn forget_old_places(&self) {
        let now = Instant::now();
        let mut state = self.state.lock();
        state.places.retain(|_, places| {
            places.retain(|_, (_, walked)| now.duration_since(*walked) < self.full_walk);
            !places.is_empty()
        });
    }

    /// Every waiting runner looks again (the LISTEN connection reconnected: notifications were
    /// lost), and every lane is read from its head once.
    pub fn everyone_looks(&self) {
        let workspaces: Vec<String> = {
            let mut state = self.state.lock();
            state.places.clear();
            for ws in state.workspaces.values_mut() {
                ws.parks += 1;
                let at = ws.parks;
                let classes: Vec<Arc<Class>> = ws.classes.keys().cloned().collect();
                let runners: Vec<Uuid> = ws.runners.keys().copied().collect();
                ws.class_parks.extend(classes.into_iter().map(|c| (c, at)));
                ws.runner_parks.extend(runners.into_iter().map(|r| (r, at)));
            }
            state.workspaces.keys().cloned().collect()
        };
        for w in workspaces {
            self.poke(&w);
        }
    }

    /// The lanes this replica's waiting runners read (for the safety net).
    pub fn waited_lanes(&self) -> Vec<(String, Lane)> {
        let state = self.state.lock();
        let mut out: HashSet<(String, Lane)> = HashSet::new();
        for (name, ws) in &state.workspaces {
            for class in ws.classes.keys() {
                out.extend(
                    class
                        .slots()
                        .into_iter()
                        .map(|s| (name.clone(), s.lane(name, &class.owner))),
                );
            }
            out.extend(ws.runners.keys().map(|id| (name.clone(), Lane::Named(*id))));
        }
        out.into_iter().collect()
    }

    /// Start a tick of `workspace` unless [`TICKS_IN_FLIGHT`] run; each loops while work is
    /// due, so what arrives while they run is claimed together by the next.
    fn poke(&self, workspace: &str) {
        let start = {
            let mut state = self.state.lock();
            match state.workspaces.get_mut(workspace) {
                Some(ws) if ws.ticking < TICKS_IN_FLIGHT => {
                    ws.ticking += 1;
                    true
                }
                _ => false,
            }
        };
        if start {
            if let Some(me) = self.me.upgrade() {
                tokio::spawn(me.ticks(workspace.to_owned()));
            }
        }
    }

    fn withdraw(&self, workspace: &str, id: u64) -> Option<Answer> {
        let mut state = self.state.lock();
        let ws = state.workspaces.get_mut(workspace)?;
        let w = ws.waiters.get_mut(&id)?;
        if w.in_tick || w.fresh {
            w.once = true;
            return None;
        }
        let w = ws.remove(id)?;
        Some(Answer {
            done: w.done.unwrap_or_default(),
            me: Some(w.me),
            ..Answer::default()
        })
    }

    fn abandon(&self, workspace: &str, id: u64) {
        let mut state = self.state.lock();
        let Some(ws) = state.workspaces.get_mut(workspace) else {
            return;
        };
        match ws.waiters.get_mut(&id) {
            Some(w) if w.in_tick => w.abandoned = true,
            Some(_) => {
                ws.remove(id);
            }
            None => {}
        }
    }

    /// Ticks of `workspace`, one after another, while a waiter is due.
    async fn ticks(self: Arc<Self>, workspace: String) {
        loop {
            let mut untold = Vec::new();
            let plan = self.plan(&workspace, &mut untold);
            for (lane, place) in untold {
                self.notifier.send(Notice::Parked {
                    workspace: workspace.clone(),
                    lane,
                    place: Some(place),
                });
            }
            let Some(plan) = plan else {
                return;
            };
            self.ticks.inc();
            // Until its answers are out, a tick that fails (a panic, or its task dropped)
            // answers its waiters, gives back what it leased and lets the workspace tick again.
            let mut guard = TickGuard {
                dispatcher: self.clone(),
                workspace: workspace.clone(),
                waiters: plan.waiters.clone(),
                forward: plan.forward.clone(),
                leased: Vec::new(),
                armed: true,
            };
            let out = crate::telemetry::traces::statement(
                || "dispatcher tick",
                self.store
                    .tick(&plan.reports, &plan.claims, self.lease_ttl_ms),
            )
            .await;
            if let Ok(out) = &out {
                guard.leased = out
                    .claims
                    .iter()
                    .flat_map(|c| &c.runners)
                    .flat_map(|rc| {
                        let token = plan.tokens.get(&rc.id).cloned().unwrap_or_default();
                        rc.claimed
                            .iter()
                            .map(move |c| (token.clone(), c.id, c.epoch))
                    })
                    .collect();
            }
            self.fault();
            let (answers, mut aftermath, forward) = self.settle(&workspace, &plan, out);
            // Every job leased is in an answer's hand-over now, or an orphan to give back.
            guard.armed = false;
            if !aftermath.unfit.is_empty() {
                // Before the answers: a lease call that found its named jobs unfit answers
                // once they are rejected.
                match self.store.reject_unfit(&aftermath.unfit).await {
                    Ok(rejected) => aftermath.rejected = rejected,
                    Err(e) => tracing::warn!(error = %e,
                        "rejecting named jobs their runner cannot run failed; its next claim asks again"),
                }
            }
            for (reply, answer) in answers {
                let _ = reply.send(answer);
            }
            for (lane, place) in forward {
                // With its place: a place-less notice would send every remembered place of
                // that lane back to its head, and under an old horizon each claim would walk
                // every dead entry again.
                self.notifier.send(Notice::Parked {
                    workspace: workspace.clone(),
                    lane,
                    place: Some(place),
                });
            }
            if let Some(hub) = self.hub.upgrade() {
                hub.after_tick(aftermath).await;
            }
        }
    }

    /// The tick fault of drills and tests (`LEASEHOLD_FAULT_FAIL_TICKS`), after the tick's
    /// transaction committed: its leases are made, no answer is sent.
    fn fault(&self) {
        if self.fail_every == 0 {
            return;
        }
        let n = self
            .ticks_run
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            + 1;
        if n.is_multiple_of(self.fail_every) {
            panic!("LEASEHOLD_FAULT_FAIL_TICKS: tick {n} fails on purpose");
        }
    }

    /// What the next tick of `workspace` does, its waiters marked in it; `None` (and the tick
    /// loop ends) when no waiter is due. `untold`: the lanes this replica parked in that no
    /// runner here reads any more (the other replicas are told).
    fn plan(&self, name: &str, untold: &mut Vec<(Lane, Place)>) -> Option<Plan> {
        let horizon_old = self.store.horizon_is_old();
        let mut state = self.state.lock();
        let State {
            workspaces, places, ..
        } = &mut *state;
        let ws = workspaces.get_mut(name)?;
        let due: Vec<u64> = ws
            .waiters
            .iter()
            .filter(|(_, w)| ws.due(w))
            .map(|(id, _)| *id)
            .collect();
        if due.is_empty() {
            ws.ticking -= 1;
            if ws.ticking == 0 {
                // Parks here that no runner here is left to read: another replica may have one.
                untold.extend(std::mem::take(&mut ws.local));
                ws.dirty_since = None;
                if ws.waiters.is_empty() {
                    workspaces.remove(name);
                }
            }
            return None;
        }
        let local = std::mem::take(&mut ws.local);
        let dirty_since = ws.dirty_since.take();
        let parks = ws.parks;
        let mut plan = Plan {
            waiters: due.clone(),
            dirty_since,
            ..Plan::default()
        };
        // Group by class; within a class, a runner once (its calls' wants summed), in the order
        // its first call began to wait.
        let mut classes: Vec<(Arc<Class>, ClassClaim)> = Vec::new();
        for id in &due {
            let named = {
                let w = &ws.waiters[id];
                w.fresh || ws.named_due(w)
            };
            let w = ws.waiters.get_mut(id).expect("a due waiter");
            w.in_tick = true;
            w.seen = parks;
            plan.tokens
                .entry(w.me.id)
                .or_insert_with(|| w.token_hash.clone());
            for done in w.reports.drain(..) {
                plan.reports.push(ReportOf {
                    token_hash: w.token_hash.clone(),
                    runner: w.me.id,
                    done,
                });
                plan.reporters.push(*id);
            }
            let at = match classes.iter().position(|(c, _)| *c == w.class) {
                Some(at) => at,
                None => {
                    let class = &w.class;
                    classes.push((
                        class.clone(),
                        ClassClaim {
                            workspace: name.to_owned(),
                            owner: class.owner.clone(),
                            capabilities: class.capabilities.clone(),
                            exclusive: class.exclusive.clone(),
                            sources: class.sources.clone(),
                            ..ClassClaim::default()
                        },
                    ));
                    classes.len() - 1
                }
            };
            let claim = &mut classes[at].1;
            match claim.runners.iter().position(|r| *r == w.me.id) {
                Some(i) => {
                    claim.wants[i] += w.want;
                    claim.named[i] |= named;
                }
                None => {
                    claim.runners.push(w.me.id);
                    claim.wants.push(w.want);
                    claim.since.push(w.me.leases_since);
                    claim.named.push(named);
                }
            }
        }
        // Within a class, the least recently served runner first (a runner with many open calls
        // gets no more than its turn).
        for (_, claim) in &mut classes {
            claim.order_by(|r| ws.served.get(r).copied().unwrap_or(0));
        }
        let now = Instant::now();
        if !places.contains_key(name) {
            places.insert(name.to_owned(), Places::default());
        }
        let places = places.get_mut(name).expect("inserted above");
        for (class, claim) in &mut classes {
            claim.places = horizon_old;
            for (i, slot) in Slot::ALL.into_iter().enumerate() {
                let entry = places
                    .entry((class.clone(), slot))
                    .or_insert((Place::HEAD, now));
                if !horizon_old || now.duration_since(entry.1) >= self.full_walk {
                    // From the head (always while the horizon is young, and at least every
                    // full walk while it is old): where this claim ends is the place.
                    *entry = (Place::HEAD, now);
                }
                claim.starts[i] = entry.0;
            }
            let lanes: Vec<Lane> = class
                .slots()
                .into_iter()
                .map(|s| s.lane(name, &class.owner))
                .collect();
            plan.forward.extend(
                local
                    .iter()
                    .filter(|(l, _)| lanes.contains(l))
                    .map(|(l, p)| (l.clone(), *p)),
            );
        }
        plan.forward.sort();
        plan.forward.dedup();

        let (classes, claims): (Vec<Arc<Class>>, Vec<ClassClaim>) = classes.into_iter().unzip();
        plan.classes = classes;
        plan.claims = claims;
        let claimed_for: HashSet<Uuid> =
            plan.claims.iter().flat_map(|c| c.runners.clone()).collect();
        untold.extend(local.into_iter().filter(|(l, _)| match l {
            Lane::Named(id) => !claimed_for.contains(id),
            lane => !plan.forward.iter().any(|(f, _)| f == lane),
        }));
        Some(plan)
    }

    /// Hand a tick's outcome to its waiters: the answers to send, what the hub owes, and the
    /// lanes to tell the other replicas of.
    #[allow(clippy::type_complexity)]
    fn settle(
        &self,
        name: &str,
        plan: &Plan,
        out: Result<TickOutcome>,
    ) -> (
        Vec<(oneshot::Sender<Result<Answer>>, Result<Answer>)>,
        Aftermath,
        Vec<(Lane, Place)>,
    ) {
        let mut answers = Vec::new();
        let mut after = Aftermath::default();
        let mut state = self.state.lock();
        let State {
            workspaces, places, ..
        } = &mut *state;
        let Some(ws) = workspaces.get_mut(name) else {
            return (answers, after, Vec::new());
        };
        let out = match out {
            Ok(out) => out,
            Err(e) => {
                // New waiters get the error (their reports were not applied); the others end
                // their wait with what their reports did.
                let message = e.to_string();
                for id in &plan.waiters {
                    let Some(mut w) = ws.remove(*id) else {
                        continue;
                    };
                    let answer = match w.done.take() {
                        Some(done) => Ok(Answer {
                            done,
                            me: Some(w.me),
                            ..Answer::default()
                        }),
                        None => Err(StoreError::Unavailable(message.clone())),
                    };
                    if let Some(reply) = w.reply.take() {
                        answers.push((reply, answer));
                    }
                }
                // Nothing was claimed: the lanes a local park made dirty are told to the other
                // replicas, which may have runners for them.
                return (answers, after, plan.forward.clone());
            }
        };
        // The reports' outcomes, to their waiters.
        let mut done: HashMap<u64, Vec<Fenced<Applied>>> = HashMap::new();
        for (id, d) in plan.reporters.iter().zip(out.done) {
            let applied = d.as_ref().map(Applied::of).map_err(|m| *m);
            if let Ok(job) = d {
                after.settled.push(job);
            }
            done.entry(*id).or_default().push(applied);
        }
        for id in &plan.waiters {
            if let Some(w) = ws.waiters.get_mut(id) {
                if w.done.is_none() {
                    w.done = Some(done.remove(id).unwrap_or_default());
                    w.parked = Some(Parked::new(&self.long_polls));
                }
            }
        }
        // The tick's waiters by runner, oldest first.
        let mut by_runner: HashMap<Uuid, Vec<u64>> = HashMap::new();
        for id in &plan.waiters {
            if let Some(w) = ws.waiters.get(id) {
                by_runner.entry(w.me.id).or_default().push(*id);
            }
        }
        let mut forward = Vec::new();
        let mut leased_any = false;
        for ((class, claim), outcome) in plan.classes.iter().zip(&plan.claims).zip(out.claims) {
            let (mut slots, mut taken) = (0i64, 0i64);
            let mut live: HashSet<Uuid> = HashSet::new();
            if claim.places {
                if let Some(places) = places.get_mut(name) {
                    Self::learn_places(places, class, &outcome);
                }
            }
            for rc in outcome.runners {
                live.insert(rc.id);
                let pool = rc.claimed.iter().filter(|c| !c.named).count() as i64;
                let named = rc.claimed.len() as i64 - pool;
                if rc.grouped {
                    slots += (rc.free - named).max(0);
                    taken += pool;
                }
                if rc.unfit_named {
                    after.unfit.push(rc.id);
                }
                leased_any |= !rc.claimed.is_empty();
                after.leased.extend(rc.claimed.iter().map(|c| c.id));
                let ids = by_runner.remove(&rc.id).unwrap_or_default();
                self.hand_out(ws, &ids, rc, &mut answers, &mut after);
            }
            // A runner the claim did not answer for is gone.
            for runner in claim.runners.iter().filter(|r| !live.contains(r)) {
                after.gone.push(*runner);
                for id in by_runner.remove(runner).unwrap_or_default() {
                    if let Some(mut w) = ws.remove(id) {
                        if let Some(reply) = w.reply.take() {
                            answers.push((
                                reply,
                                Ok(Answer {
                                    gone: true,
                                    done: w.done.take().unwrap_or_default(),
                                    ..Answer::default()
                                }),
                            ));
                        }
                    }
                }
            }
            // Jobs may be left in the lanes a local park made dirty: the class filled every
            // slot it had, or a lane is constrained (what this class skipped, another may take).
            let full = slots > 0 && taken == slots;
            for (lane, place) in &plan.forward {
                if class.reads(name, lane)
                    && (full
                        || matches!(
                            lane,
                            Lane::Pool {
                                constrained: true,
                                ..
                            } | Lane::Any {
                                constrained: true,
                                ..
                            }
                        ))
                {
                    forward.push((lane.clone(), *place));
                }
            }
        }
        if leased_any {
            if let Some(since) = plan.dirty_since {
                self.wake_latency.observe(since.elapsed().as_secs_f64());
            }
        }
        forward.sort();
        forward.dedup();
        (answers, after, forward)
    }

    /// A class's places after its claim: each lane starts next at the first job the claim
    /// reached there and did not take, or after the last one it took there.
    fn learn_places(places: &mut Places, class: &Arc<Class>, outcome: &ClaimOutcome) {
        let next = outcome.next_starts(class.owner.starts_with("ws:"));
        for (slot, next) in Slot::ALL.into_iter().zip(next) {
            if let (Some(next), Some((at, _))) = (next, places.get_mut(&(class.clone(), slot))) {
                *at = next;
            }
        }
    }

    /// A runner's claim, to its waiters in this tick (oldest first, each up to what it wanted).
    fn hand_out(
        &self,
        ws: &mut Workspace,
        ids: &[u64],
        rc: RunnerClaim,
        answers: &mut Vec<(oneshot::Sender<Result<Answer>>, Result<Answer>)>,
        after: &mut Aftermath,
    ) {
        if !rc.claimed.is_empty() {
            ws.servings += 1;
            ws.served.insert(rc.id, ws.servings);
        }
        let mut jobs = rc.claimed.into_iter();
        let mut token = Vec::new();
        let left = rc.free - jobs.len() as i64;
        // The runner as this claim answered it, once for all its waiters (one that advertises
        // otherwise now looks again, with its class).
        let me = ids.first().and_then(|id| ws.waiters.get(id)).map(|w| {
            let mut me = LeaseIdentity::clone(&w.me);
            me.leases_since = rc.leases_since;
            if !rc.grouped {
                (me.capabilities, me.exclusive, me.sources) = rc.advertised.clone();
            }
            Arc::new(me)
        });
        for &id in ids {
            if let Some(me) = &me {
                ws.refresh(id, me);
            }
            let Some(w) = ws.waiters.get_mut(&id) else {
                continue;
            };
            token = w.token_hash.clone();
            let mine: Vec<Claimed> = jobs
                .by_ref()
                .take(usize::try_from(w.want).unwrap_or(0))
                .collect();
            w.in_tick = false;
            if w.abandoned {
                after
                    .orphans
                    .extend(mine.iter().map(|c| (w.token_hash.clone(), c.id, c.epoch)));
                ws.remove(id);
                continue;
            }
            let ends = !mine.is_empty() || (rc.grouped && (left <= 0 || w.once));
            if !ends {
                w.fresh = !rc.grouped;
                continue;
            }
            let Some(mut w) = ws.remove(id) else {
                continue;
            };
            let handover = Handover::new(
                self.hub.clone(),
                w.token_hash.clone(),
                mine.iter().map(|c| (c.id, c.epoch)).collect(),
            );
            if let Some(reply) = w.reply.take() {
                answers.push((
                    reply,
                    Ok(Answer {
                        claimed: mine,
                        handover,
                        gone: false,
                        done: w.done.take().unwrap_or_default(),
                        me: Some(w.me),
                    }),
                ));
            }
        }
        // More than its waiters here wanted (it cannot happen: wants are summed): give back.
        for c in jobs {
            after.orphans.push((token.clone(), c.id, c.epoch));
        }
    }
}

/// A tick in flight until its answers are out. Dropped armed (the tick's task panicked or was
/// dropped), it ends the tick as a failed one: every waiter still in it is answered 503, the
/// jobs its transaction leased are given back (`caller_gone`), the parks it took from the
/// workspace are told to the other replicas, and the workspace may tick again at once.
struct TickGuard {
    dispatcher: Arc<Dispatcher>,
    workspace: String,
    waiters: Vec<u64>,
    forward: Vec<(Lane, Place)>,
    /// What its transaction leased, with each runner's token hash.
    leased: Vec<(Vec<u8>, Uuid, i64)>,
    armed: bool,
}

impl Drop for TickGuard {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let d = &self.dispatcher;
        d.ticks_failed.inc();
        tracing::error!(workspace = %self.workspace,
            "a dispatcher tick failed; its waiters are answered and what it leased is given back");
        let mut replies = Vec::new();
        {
            let mut state = d.state.lock();
            if let Some(ws) = state.workspaces.get_mut(&self.workspace) {
                ws.ticking = ws.ticking.saturating_sub(1);
                for id in &self.waiters {
                    if let Some(mut w) = ws.remove(*id) {
                        replies.extend(w.reply.take());
                    }
                }
            }
        }
        for reply in replies {
            let _ = reply.send(Err(StoreError::Unavailable(
                "a dispatcher tick failed; ask again".into(),
            )));
        }
        for (lane, place) in std::mem::take(&mut self.forward) {
            d.notifier.send(Notice::Parked {
                workspace: self.workspace.clone(),
                lane,
                place: Some(place),
            });
        }
        let leased = std::mem::take(&mut self.leased);
        if !leased.is_empty() {
            if let (Some(hub), Ok(runtime)) =
                (d.hub.upgrade(), tokio::runtime::Handle::try_current())
            {
                runtime.spawn(async move {
                    hub.after_tick(Aftermath {
                        orphans: leased,
                        ..Aftermath::default()
                    })
                    .await;
                });
            }
        }
        d.poke(&self.workspace);
    }
}

/// A tick's work, taken from the dispatcher's state.
#[derive(Default)]
struct Plan {
    /// Each runner's token hash (what gives back the jobs of a failed tick).
    tokens: HashMap<Uuid, Vec<u8>>,
    waiters: Vec<u64>,
    reports: Vec<ReportOf>,
    /// The waiter of each report, in step.
    reporters: Vec<u64>,
    classes: Vec<Arc<Class>>,
    claims: Vec<ClassClaim>,
    /// Lanes a local park made dirty that this tick reads, each with its earliest park's place.
    forward: Vec<(Lane, Place)>,
    dirty_since: Option<Instant>,
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
            fresh: false,
            seen: 0,
            once: false,
            in_tick: false,
            abandoned: false,
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
        ws.waiters.get_mut(&1).unwrap().in_tick = true;
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
        w.in_tick = false;
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
