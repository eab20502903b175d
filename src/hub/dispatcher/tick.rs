//! A dispatcher's ticks: what the next tick of a workspace does (its plan, taken from the
//! state), the tick's one transaction (store::claim), and its outcome handed to its waiters
//! (answers with their hand-overs, places learnt, what the hub owes after). A tick that fails
//! before its answers are out is ended by its [`TickGuard`].

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use tokio::sync::oneshot;
use uuid::Uuid;

use super::state::{Class, Parked, Places, Stage, Workspace};
use super::{Aftermath, Answer, Applied, Dispatcher, State};
use crate::hub::handover::Handover;
use crate::hub::notifier::Notice;
use crate::hub::wake_stages::WakeStages;
use crate::store::claim::{
    ClaimOutcome, ClassClaim, Lane, Place, ReportOf, RunnerClaim, Slot, TickOutcome,
};
use crate::store::jobs::Fenced;
use crate::store::records::{Claimed, LeaseIdentity};
use crate::store::{Result, StoreError};

impl Dispatcher {
    /// Ticks of `workspace`, one after another, while a waiter is due.
    pub(super) async fn ticks(self: Arc<Self>, workspace: String) {
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
            let (started_at, started) = (Instant::now(), SystemTime::now());
            let out = crate::telemetry::traces::statement(
                || "dispatcher tick",
                self.store
                    .tick(&plan.reports, &plan.claims, self.lease_ttl_ms),
            )
            .await;
            let stages = out.as_ref().ok().and_then(|o| o.answered).map(|claimed| {
                let wall = |at: Instant| started - started_at.saturating_duration_since(at);
                WakeStages {
                    heard: plan
                        .dirty_since
                        .zip(plan.dirty_last)
                        .map(|(first, last)| (wall(first), wall(last))),
                    started,
                    claimed,
                    durable: SystemTime::now(),
                }
            });
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
            let (answers, mut aftermath, forward) = self.settle(&workspace, &plan, out, stages);
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
                ws.dirty_last = None;
                if ws.waiters.is_empty() {
                    workspaces.remove(name);
                }
            }
            return None;
        }
        let local = std::mem::take(&mut ws.local);
        let dirty_since = ws.dirty_since.take();
        let dirty_last = ws.dirty_last.take();
        let parks = ws.parks;
        let mut plan = Plan {
            waiters: due.clone(),
            dirty_since,
            dirty_last,
            ..Plan::default()
        };
        // Group by class; within a class, a runner once (its calls' wants summed), in the order
        // its first call began to wait.
        let mut classes: Vec<(Arc<Class>, ClassClaim)> = Vec::new();
        for id in &due {
            let named = {
                let w = &ws.waiters[id];
                w.stage == Stage::New || ws.named_due(w)
            };
            let w = ws.waiters.get_mut(id).expect("a due waiter");
            w.stage = Stage::InTick {
                first: w.stage == Stage::New,
                abandoned: false,
            };
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
        stages: Option<WakeStages>,
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
                self.hand_out(ws, &ids, rc, stages, &mut answers, &mut after);
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
        stages: Option<WakeStages>,
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
            if let Stage::InTick {
                abandoned: true, ..
            } = w.stage
            {
                after
                    .orphans
                    .extend(mine.iter().map(|c| (w.token_hash.clone(), c.id, c.epoch)));
                ws.remove(id);
                continue;
            }
            let ends = !mine.is_empty() || (rc.grouped && (left <= 0 || w.once));
            if !ends {
                w.stage = if rc.grouped {
                    Stage::Waiting
                } else {
                    Stage::New
                };
                continue;
            }
            let Some(mut w) = ws.remove(id) else {
                continue;
            };
            let mut handover = Handover::new(
                self.hub.clone(),
                w.token_hash.clone(),
                mine.iter().map(|c| (c.id, c.epoch)).collect(),
            );
            if let (Some(stages), false) = (stages, mine.is_empty()) {
                handover = handover.with_stages(stages);
            }
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
    dirty_last: Option<Instant>,
}
