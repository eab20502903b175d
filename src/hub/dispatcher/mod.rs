//! The dispatcher: one per replica, it claims for all the replica's waiting runners at once.
//!
//! A lease call registers here (its runner, how many jobs it wants, the reports it carries) and
//! waits in memory, holding no connection. The dispatcher runs *ticks*, one at a time per
//! workspace: a tick applies every report its waiters carry, then claims for every waiting
//! runner it is due for, one `claim.sql` per class of runners (one owner's runners that
//! advertise the same), all in one transaction (store::claim). A claim hands its jobs out
//! round-robin among the class's runners, the least recently served first, capacity kept.
//!
//! Rooms: this file holds the dispatcher and its tickets (what the hub calls: register, parks
//! heard, withdraw); `state.rs` what it keeps per workspace (waiters and their [`Stage`], classes,
//! parks, places); `tick.rs` a tick (its plan, its transaction, its outcome to the waiters).
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
//! for a waiter whose call went away, or whose answer never reached its connection, are given
//! back at once (`caller_gone`: re-parked, attempt not counted; hub::handover).
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

use std::collections::{HashMap, HashSet};
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
use crate::store::claim::{DoneReport, Lane, Place};
use crate::store::jobs::Fenced;
use crate::store::records::{Claimed, Job, LeaseIdentity, Queue};
use crate::store::{Result, Store, StoreError};

/// How many ticks of one workspace may run at once on a replica: what arrives while they run
/// waits for the next, and is claimed with everything else that arrived (group commit, without
/// a timer).
mod state;
mod tick;

use state::{Class, Places, Stage, Waiter, Workspace};

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
                    stage: Stage::New,
                    seen: 0,
                    once,
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
                        let now = Instant::now();
                        ws.dirty_since.get_or_insert(now);
                        ws.dirty_last = Some(now);
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
        if w.stage != Stage::Waiting {
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
            Some(w) if matches!(w.stage, Stage::InTick { .. }) => {
                if let Stage::InTick { first, .. } = w.stage {
                    w.stage = Stage::InTick {
                        first,
                        abandoned: true,
                    };
                }
            }
            Some(_) => {
                ws.remove(id);
            }
            None => {}
        }
    }
}
