//! A dispatcher's tick (hub::dispatcher): the reports its lease calls carry, then the claims for
//! its waiting runners, class by class, in one transaction whose messages are sent together (one
//! round trip, one commit).
//!
//! Invariants. The runners' rows are locked (`runners_lock_for_claim.sql`, in id order) before
//! the first claim, and each claim's snapshot is taken after that lock: concurrent ticks of one
//! runner, on any replica, never take more than `capacity - held`. The reports go first, so the
//! slots they free count for the same tick's claims. A tick commits durably whenever it carries a
//! report or leases anything (PROTOCOL.md v1.3, "acknowledged means durable"); one that did
//! neither wrote only locks, and may commit without waiting for the WAL. A failed statement rolls
//! the whole tick back: no report applied, nothing leased.
//!
//! What a job waits in is its [`Lane`] (migration 0040), the key of one ordered range of
//! `jobs_claim` or `jobs_claim_any`; a claim reads a class's lanes each from a [`Place`].

use std::time::SystemTime;

use chrono::{DateTime, Utc};
use serde_json::Value;
use tokio_postgres::types::ToSql;
use uuid::Uuid;

use super::jobs::{Failure, FenceMiss, Fenced};
use super::records::{Claimed, Job, LeaseIdentity, Queue};
use super::{rows, sql, Result, Store};

/// Where parked jobs wait (migration 0040's `job_lane` and `job_any_lane`): a runner's named
/// jobs; a pool (an owner's, in a workspace) of one claim class; a workspace's `any` jobs that a
/// personal runner may take, of one class, which workspace runners read too.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Lane {
    Named(Uuid),
    Pool {
        workspace: String,
        owner: String,
        constrained: bool,
    },
    Any {
        workspace: String,
        constrained: bool,
    },
}

impl Lane {
    /// The key SQL computes for it (`job_lane`, `job_any_lane`); also its name in a wake-up.
    pub fn key(&self) -> String {
        let class = |c: &bool| u8::from(*c);
        match self {
            Lane::Named(id) => format!("r/{id}"),
            Lane::Pool {
                workspace,
                owner,
                constrained,
            } => format!("p/{workspace}/{owner}/{}", class(constrained)),
            Lane::Any {
                workspace,
                constrained,
            } => format!("a/{workspace}/{}", class(constrained)),
        }
    }

    /// The lane a key names, if it names one.
    pub fn parse(key: &str) -> Option<Lane> {
        let class = |c: &str| match c {
            "0" => Some(false),
            "1" => Some(true),
            _ => None,
        };
        let mut parts = key.split('/');
        let lane = match (parts.next()?, parts.next()?, parts.next(), parts.next()) {
            ("r", id, None, None) => Lane::Named(id.parse().ok()?),
            ("p", workspace, Some(owner), Some(c)) => Lane::Pool {
                workspace: workspace.to_owned(),
                owner: owner.to_owned(),
                constrained: class(c)?,
            },
            ("a", workspace, Some(c), None) => Lane::Any {
                workspace: workspace.to_owned(),
                constrained: class(c)?,
            },
            _ => return None,
        };
        (parts.next().is_none() && !key.is_empty()).then_some(lane)
    }

    /// The workspace whose dispatcher claims it (`None` for a named lane: its runner's).
    pub fn workspace(&self) -> Option<&str> {
        match self {
            Lane::Named(_) => None,
            Lane::Pool { workspace, .. } | Lane::Any { workspace, .. } => Some(workspace),
        }
    }

    /// The lanes a parked job of `queue` waits in (an `any` job a personal runner may take is in
    /// its owner's pool and in its workspace's `any` lane). A queue whose class is not known is
    /// in the lanes of both classes.
    pub fn of(queue: &Queue) -> Vec<Lane> {
        if let Some(id) = queue.runner_id {
            return vec![Lane::Named(id)];
        }
        let any = queue.pool.as_deref() == Some("any");
        let personal = !queue.owner.starts_with("ws:");
        let owner = match (queue.needs_workspace_runner && personal, any) {
            // A personal job only a workspace runner could take waits where no claim reads.
            (true, false) => return Vec::new(),
            (true, true) => format!("ws:{}", queue.workspace),
            (false, _) => queue.owner.clone(),
        };
        let classes: &[bool] = match queue.constrained {
            Some(c) => {
                if c {
                    &[true]
                } else {
                    &[false]
                }
            }
            None => &[false, true],
        };
        let mut lanes = Vec::new();
        for &constrained in classes {
            lanes.push(Lane::Pool {
                workspace: queue.workspace.clone(),
                owner: owner.clone(),
                constrained,
            });
            if any && !queue.needs_workspace_runner {
                lanes.push(Lane::Any {
                    workspace: queue.workspace.clone(),
                    constrained,
                });
            }
        }
        lanes
    }
}

/// Where a claim starts reading a lane: the `(-priority, id)` of the first job it may take
/// (the lane's index order: highest priority first, then FIFO by id).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Place {
    pub neg_priority: i32,
    pub id: Uuid,
}

impl Default for Place {
    fn default() -> Self {
        Self::HEAD
    }
}

impl Place {
    /// Before every job (priorities are -1000..=1000).
    pub const HEAD: Place = Place {
        neg_priority: -1001,
        id: Uuid::nil(),
    };

    /// Where a job stands.
    pub fn of(priority: i32, id: Uuid) -> Place {
        Place {
            neg_priority: -priority,
            id,
        }
    }

    /// Just after this job: where the next claim starts once it was taken.
    pub fn after(self) -> Place {
        match self.id.as_u128().checked_add(1) {
            Some(next) => Place {
                neg_priority: self.neg_priority,
                id: Uuid::from_u128(next),
            },
            None => Place {
                neg_priority: self.neg_priority + 1,
                id: Uuid::nil(),
            },
        }
    }
}

/// The four pool lanes a class of runners may read, in `claim.sql`'s order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Slot {
    OwnPlain,
    OwnConstrained,
    AnyPlain,
    AnyConstrained,
}

impl Slot {
    pub const ALL: [Slot; 4] = [
        Slot::OwnPlain,
        Slot::OwnConstrained,
        Slot::AnyPlain,
        Slot::AnyConstrained,
    ];

    /// The lane of this slot for runners of `owner` in `workspace`.
    pub fn lane(self, workspace: &str, owner: &str) -> Lane {
        let pool = |constrained| Lane::Pool {
            workspace: workspace.to_owned(),
            owner: owner.to_owned(),
            constrained,
        };
        let any = |constrained| Lane::Any {
            workspace: workspace.to_owned(),
            constrained,
        };
        match self {
            Slot::OwnPlain => pool(false),
            Slot::OwnConstrained => pool(true),
            Slot::AnyPlain => any(false),
            Slot::AnyConstrained => any(true),
        }
    }

    /// The slot a job a class of runners took was read from: `ws` for workspace runners (they
    /// read the `any` lanes, where an `any` job a personal runner may take is found).
    pub fn of(job: &Claimed, ws: bool) -> Slot {
        let constrained = !job.required_capabilities.is_empty() || job.source.is_some();
        let any = ws && job.pool.as_deref() == Some("any") && !job.needs_workspace_runner;
        match (any, constrained) {
            (false, false) => Slot::OwnPlain,
            (false, true) => Slot::OwnConstrained,
            (true, false) => Slot::AnyPlain,
            (true, true) => Slot::AnyConstrained,
        }
    }
}

/// A report a lease call carries (`done`, v1.2), applied in its tick before the claims.
#[derive(Debug, Clone)]
pub struct DoneReport {
    pub id: Uuid,
    pub epoch: i64,
    pub report: Reported,
}

/// What a [`DoneReport`] says: `complete` with a result, or `fail` with a message.
#[derive(Debug, Clone)]
pub enum Reported {
    Complete(Value),
    Fail(String),
}

/// A report, the token hash of the runner that sent it and that runner's id (its row is
/// locked before the report's job: one lock order, runners first).
#[derive(Debug, Clone)]
pub struct ReportOf {
    pub token_hash: Vec<u8>,
    pub runner: Uuid,
    pub done: DoneReport,
}

/// One claim of a tick: runners of one class, the least recently served first.
#[derive(Debug, Clone, Default)]
pub struct ClassClaim {
    /// The class, as the dispatcher grouped the runners: a runner whose row advertises
    /// otherwise now is not of it (it takes nothing, and is answered what it advertises).
    pub workspace: String,
    pub owner: String,
    pub capabilities: Vec<String>,
    pub exclusive: Vec<String>,
    pub sources: Vec<String>,
    pub runners: Vec<Uuid>,
    /// How many jobs each wants (its waiting calls' `max_jobs`, summed).
    pub wants: Vec<i32>,
    /// Where each one's leases start ([`LeaseIdentity::leases_since`]).
    pub since: Vec<Option<DateTime<Utc>>>,
    /// Whether to read each one's named lane.
    pub named: Vec<bool>,
    /// Where each pool lane starts, in [`Slot::ALL`]'s order.
    pub starts: [Place; 4],
    /// Whether to answer where each lane's next claim starts ([`ClaimOutcome::next`]).
    pub places: bool,
}

impl ClassClaim {
    /// A claim for runners of `me`'s class (its workspace, owner and what it advertises), with
    /// no runner yet.
    pub fn of(me: &LeaseIdentity) -> Self {
        Self {
            workspace: me.workspace.clone(),
            owner: me.owner.clone(),
            capabilities: me.capabilities.clone(),
            exclusive: me.exclusive.clone(),
            sources: me.sources.clone(),
            ..Self::default()
        }
    }

    /// Put its runners in the order of `key` (ascending, stable), their columns in step.
    pub fn order_by(&mut self, key: impl Fn(&Uuid) -> u64) {
        let mut at: Vec<usize> = (0..self.runners.len()).collect();
        at.sort_by_key(|&i| key(&self.runners[i]));
        self.runners = at.iter().map(|&i| self.runners[i]).collect();
        self.wants = at.iter().map(|&i| self.wants[i]).collect();
        self.since = at.iter().map(|&i| self.since[i]).collect();
        self.named = at.iter().map(|&i| self.named[i]).collect();
    }
}

/// What a claim did for one runner.
#[derive(Debug, Clone)]
pub struct RunnerClaim {
    pub id: Uuid,
    /// It advertises what its class does; `false`: it changed since it was grouped, took
    /// nothing, and `advertised` is what it advertises now.
    pub grouped: bool,
    /// What it advertises: capabilities, exclusive set, approved sources.
    pub advertised: (Vec<String>, Vec<String>, Vec<String>),
    /// Its free slots before this claim (capacity - held, capped by what it wanted).
    pub free: i64,
    /// The next claim's [`LeaseIdentity::leases_since`].
    pub leases_since: Option<DateTime<Utc>>,
    /// It has named jobs parked that it cannot run (`lease_reject_unfit.sql`'s).
    pub unfit_named: bool,
    /// What it took: named jobs first, then by priority and id.
    pub claimed: Vec<Claimed>,
}

/// What one claim of a tick did.
#[derive(Debug, Default)]
pub struct ClaimOutcome {
    /// A [`RunnerClaim`] for each runner of the claim that is live (one missing is not:
    /// revoked, or a spent ephemeral runner), in the claim's order.
    pub runners: Vec<RunnerClaim>,
    /// Where each pool lane's next claim starts, in [`Slot::ALL`]'s order (with
    /// [`ClassClaim::places`]): the first job this claim reached and did not take, one another
    /// claim held locked included. `None`: it took every job it reached there.
    pub next: [Option<Place>; 4],
}

impl ClaimOutcome {
    /// Where each pool lane's next claim of the class starts, in [`Slot::ALL`]'s order: the
    /// first job the claim reached there and did not take, else just after the last job it
    /// took there; `None` where it took nothing and reached nothing (the start stands). `ws`:
    /// the class is of workspace runners.
    pub fn next_starts(&self, ws: bool) -> [Option<Place>; 4] {
        let mut last: [Option<Place>; 4] = [None; 4];
        for job in self
            .runners
            .iter()
            .filter(|r| r.grouped)
            .flat_map(|r| r.claimed.iter().filter(|c| !c.named))
        {
            let at = Slot::ALL
                .iter()
                .position(|s| *s == Slot::of(job, ws))
                .unwrap_or(0);
            let here = Place::of(job.priority, job.id);
            last[at] = Some(last[at].map_or(here, |l| l.max(here)));
        }
        std::array::from_fn(|i| self.next[i].or(last[i].map(Place::after)))
    }
}

/// What a tick did.
#[derive(Debug, Default)]
pub struct TickOutcome {
    /// Each report's outcome, in order: the job it settled (or parked again, by its retry
    /// policy), or `NotFound` when it missed its fence ([`Store::fence_miss`] says why).
    pub done: Vec<Fenced<Job>>,
    /// What each claim did, in order.
    pub claims: Vec<ClaimOutcome>,
    /// When its statements had answered, before its commit did.
    pub answered: Option<SystemTime>,
}

impl Store {
    /// Who the runner with this token is, for its first lease call on this replica.
    ///
    /// # Errors
    /// The database failed. `Ok(None)`: no live runner has this token.
    pub async fn runner_for_lease(&self, token_hash: &[u8]) -> Result<Option<LeaseIdentity>> {
        let row = self
            .query_opt(sql::RUNNER_FOR_LEASE, &[&token_hash])
            .await?;
        Ok(row.map(|r| LeaseIdentity {
            id: r.get("id"),
            workspace: r.get("workspace"),
            owner: r.get("owner"),
            capabilities: r.get("capabilities"),
            exclusive: r.get("exclusive"),
            sources: r.get("sources"),
            leases_since: None,
        }))
    }

    /// One tick: `reports`, then each claim of `claims`, in one transaction.
    ///
    /// # Errors
    /// The database failed: the transaction rolled back, no report was applied and nothing
    /// was taken.
    pub async fn tick(
        &self,
        reports: &[ReportOf],
        claims: &[ClassClaim],
        lease_ttl_ms: i64,
    ) -> Result<TickOutcome> {
        // The reports: one statement for every complete, one for every fail (arrays in step).
        let (mut complete_at, mut fail_at) = (Vec::new(), Vec::new());
        let mut completes = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let mut fails = Vec::new();
        for (i, r) in reports.iter().enumerate() {
            match &r.done.report {
                Reported::Complete(result) => {
                    complete_at.push(i);
                    completes.0.push(r.done.id);
                    completes.1.push(r.done.epoch);
                    completes.2.push(r.token_hash.as_slice());
                    completes.3.push(result);
                }
                Reported::Fail(message) => {
                    fail_at.push(i);
                    fails.push(Failure {
                        id: r.done.id,
                        epoch: r.done.epoch,
                        token_hash: r.token_hash.clone(),
                        message: message.clone(),
                    });
                }
            }
        }
        let complete_args: [&(dyn ToSql + Sync); 5] = [
            &completes.0,
            &completes.1,
            &completes.2,
            &completes.3,
            &self.seen_refresh_ms,
        ];
        let fail_arrays = Failure::arrays(&fails);
        let fail_args: [&(dyn ToSql + Sync); 5] = [
            &fail_arrays.0,
            &fail_arrays.1,
            &fail_arrays.2,
            &fail_arrays.3,
            &self.seen_refresh_ms,
        ];
        // Every runner row the tick touches, locked first and in id order: the claims' runners
        // and the reports' (a report updates its runner's row after its job's otherwise, the
        // order a revoke takes the other way round).
        let mut locked: Vec<Uuid> = claims.iter().flat_map(|c| c.runners.clone()).collect();
        locked.extend(reports.iter().map(|r| r.runner));
        locked.sort();
        locked.dedup();
        let durable = !reports.is_empty();
        let lock_args: [&(dyn ToSql + Sync); 2] = [&locked, &durable];
        let claim_params: Vec<ClaimParams> = claims.iter().map(ClaimParams::of).collect();
        let claim_args: Vec<[&(dyn ToSql + Sync); 13]> = claims
            .iter()
            .zip(&claim_params)
            .map(|(c, p)| p.args(c, &lease_ttl_ms))
            .collect();

        let mut sets: Vec<(&'static str, &[&(dyn ToSql + Sync)])> = Vec::new();
        let lock = !locked.is_empty();
        if lock {
            sets.push((sql::RUNNERS_LOCK_FOR_CLAIM, &lock_args));
        }
        if !completes.0.is_empty() {
            sets.push((sql::JOB_COMPLETE, &complete_args));
        }
        if !fails.is_empty() {
            sets.push((sql::JOB_FAIL, &fail_args));
        }
        for args in &claim_args {
            sets.push((sql::CLAIM, args));
        }
        let (rows, answered) = self
            .retrying_conflicts(|| self.each_in_one_transaction_timed(&sets))
            .await?;
        let mut rows = rows.into_iter();
        if lock {
            rows.next();
        }

        let mut done: Vec<Fenced<Job>> = reports.iter().map(|_| Err(FenceMiss::NotFound)).collect();
        for (at, n) in [(&complete_at, completes.0.len()), (&fail_at, fails.len())] {
            if n == 0 {
                continue;
            }
            let settled = rows::by_ord(n, &rows.next().unwrap_or_default(), rows::job)?;
            for (i, job) in at.iter().zip(settled) {
                if let Some(job) = job {
                    done[*i] = Ok(job);
                }
            }
        }
        let claims = rows.map(runner_claims).collect();
        Ok(TickOutcome {
            done,
            claims,
            answered: Some(answered),
        })
    }

    /// Reject the named jobs these runners cannot run (`capability_mismatch`); the ids.
    ///
    /// # Errors
    /// The database failed.
    pub async fn reject_unfit(&self, runners: &[Uuid]) -> Result<Vec<Uuid>> {
        Ok(self
            .query(sql::LEASE_REJECT_UNFIT, &[&runners])
            .await?
            .iter()
            .map(|r| r.get("id"))
            .collect())
    }

    /// Of these lanes, those with a job parked and due, each with where its first such job
    /// stands (the dispatcher's safety net).
    ///
    /// # Errors
    /// The database failed.
    pub async fn parked_lanes(&self, lanes: &[Lane]) -> Result<Vec<(Lane, Place)>> {
        let (any, claim): (Vec<&Lane>, Vec<&Lane>) =
            lanes.iter().partition(|l| matches!(l, Lane::Any { .. }));
        let keys = |ls: Vec<&Lane>| ls.into_iter().map(Lane::key).collect::<Vec<_>>();
        let (claim, any) = (keys(claim), keys(any));
        Ok(self
            .query(sql::PARKED_LANES, &[&claim, &any])
            .await?
            .iter()
            .filter_map(|r| {
                let place = Place {
                    neg_priority: r.get("neg"),
                    id: r.get("id"),
                };
                Lane::parse(r.get("lane")).map(|lane| (lane, place))
            })
            .collect())
    }
}

/// A claim's places as `claim.sql`'s `$6` and `$7`.
struct ClaimParams {
    neg_priorities: Vec<i32>,
    ids: Vec<Uuid>,
}

impl ClaimParams {
    fn of(c: &ClassClaim) -> Self {
        Self {
            neg_priorities: c.starts.iter().map(|p| p.neg_priority).collect(),
            ids: c.starts.iter().map(|p| p.id).collect(),
        }
    }

    /// `claim.sql`'s thirteen arguments for class claim `c`.
    fn args<'a>(
        &'a self,
        c: &'a ClassClaim,
        lease_ttl_ms: &'a i64,
    ) -> [&'a (dyn ToSql + Sync); 13] {
        [
            &c.runners,
            &c.wants,
            &c.since,
            &c.named,
            lease_ttl_ms,
            &self.neg_priorities,
            &self.ids,
            &c.places,
            &c.workspace,
            &c.owner,
            &c.capabilities,
            &c.exclusive,
            &c.sources,
        ]
    }
}

/// Make a new pool connection ready for the tick: its statements prepared, and the claim's
/// plan made by running it for no runner (it takes nothing and writes nothing). A claim's
/// first run on a connection plans 200 lines of SQL and fills the session's caches: 10-15 ms
/// here, where a warm one takes about 1, and it was most of a wake's p99 (issue 55,
/// docs/perf.md). A failure (the schema not migrated yet, say) only leaves it cold.
pub(super) async fn warm(client: &deadpool_postgres::ClientWrapper) {
    let result = async {
        for statement in [
            sql::RUNNERS_LOCK_FOR_CLAIM,
            sql::JOB_COMPLETE,
            sql::JOB_FAIL,
        ] {
            client.prepare_cached(statement).await?;
        }
        let claim = client.prepare_cached(sql::CLAIM).await?;
        let nobody = ClassClaim::default();
        let params = ClaimParams::of(&nobody);
        client.query(&claim, &params.args(&nobody, &0)).await
    }
    .await;
    if let Err(e) = result {
        tracing::debug!(error = %e, "a new connection was not warmed; its first claim plans");
    }
}

/// A claim's rows (one per live runner and job it took, in runner order, each with the lanes'
/// next starts) as what it did.
fn runner_claims(rows: Vec<tokio_postgres::Row>) -> ClaimOutcome {
    let mut out = ClaimOutcome::default();
    if let Some(row) = rows.first() {
        let slots: Option<Vec<i32>> = row.get("next_slots");
        let negs: Option<Vec<i32>> = row.get("next_negs");
        let ids: Option<Vec<Uuid>> = row.get("next_ids");
        let next = slots.into_iter().flatten().zip(negs.into_iter().flatten());
        for ((slot, neg_priority), id) in next.zip(ids.into_iter().flatten()) {
            if let Some(at) = usize::try_from(slot - 1).ok().filter(|s| *s < 4) {
                out.next[at] = Some(Place { neg_priority, id });
            }
        }
    }
    for row in &rows {
        let id: Uuid = row.get("runner");
        if out.runners.last().is_none_or(|r| r.id != id) {
            out.runners.push(RunnerClaim {
                id,
                grouped: row.get("grouped"),
                advertised: (
                    row.get("capabilities"),
                    row.get("exclusive"),
                    row.get("sources"),
                ),
                free: row.get("free"),
                leases_since: row.get("leases_since"),
                unfit_named: row.get("unfit_named"),
                claimed: Vec::new(),
            });
        }
        if row.get::<_, Option<Uuid>>("id").is_some() {
            if let Some(r) = out.runners.last_mut() {
                r.claimed.push(rows::claimed(row));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queue(owner: &str, pool: Option<&str>, needs_ws: bool, constrained: Option<bool>) -> Queue {
        Queue {
            workspace: "acme".into(),
            owner: owner.into(),
            runner_id: None,
            pool: pool.map(str::to_owned),
            needs_workspace_runner: needs_ws,
            constrained,
            priority: Some(0),
        }
    }

    #[test]
    fn lane_keys_are_what_sql_computes_and_read_back() {
        let id = Uuid::now_v7();
        for (lane, key) in [
            (Lane::Named(id), format!("r/{id}")),
            (
                Lane::Pool {
                    workspace: "acme".into(),
                    owner: "ws:acme".into(),
                    constrained: true,
                },
                "p/acme/ws:acme/1".to_owned(),
            ),
            (
                Lane::Any {
                    workspace: "acme".into(),
                    constrained: false,
                },
                "a/acme/0".to_owned(),
            ),
        ] {
            assert_eq!(lane.key(), key);
            assert_eq!(Lane::parse(&key), Some(lane));
        }
        for bad in [
            "",
            "p/acme/alice",
            "p/acme/alice/2",
            "p/acme/alice/ws",
            "r/x",
            "a/acme/0/1",
        ] {
            assert_eq!(Lane::parse(bad), None, "{bad}");
        }
    }

    /// Where a parked job waits, as migration 0040's job_lane and job_any_lane place it.
    #[test]
    fn a_parked_job_waits_in_the_lanes_its_takers_read() {
        let pool = |owner: &str, constrained| Lane::Pool {
            workspace: "acme".into(),
            owner: owner.into(),
            constrained,
        };
        let any = |constrained| Lane::Any {
            workspace: "acme".into(),
            constrained,
        };
        assert_eq!(
            Lane::of(&queue("alice", Some("personal"), false, Some(false))),
            vec![pool("alice", false)]
        );
        assert_eq!(
            Lane::of(&queue("alice", Some("any"), false, Some(true))),
            vec![pool("alice", true), any(true)]
        );
        // Only workspace runners may take it: the workspace's own lane, not the `any` one.
        assert_eq!(
            Lane::of(&queue("alice", Some("any"), true, Some(false))),
            vec![pool("ws:acme", false)]
        );
        // A personal job that needs a workspace runner waits where no claim reads.
        assert!(Lane::of(&queue("alice", Some("personal"), true, Some(false))).is_empty());
        // Its class not known: both.
        assert_eq!(
            Lane::of(&queue("ws:acme", Some("workspace"), false, None)),
            vec![pool("ws:acme", false), pool("ws:acme", true)]
        );
        let named = Uuid::now_v7();
        let mut q = queue("alice", None, false, Some(true));
        q.runner_id = Some(named);
        assert_eq!(Lane::of(&q), vec![Lane::Named(named)]);
    }

    #[test]
    fn places_order_as_the_claim_index_and_after_is_the_next_one() {
        let (a, b) = (Uuid::now_v7(), Uuid::now_v7());
        assert!(Place::HEAD < Place::of(1000, a));
        assert!(Place::of(5, b) < Place::of(0, a), "higher priority first");
        assert!(Place::of(0, a) < Place::of(0, b), "then FIFO by id");
        let after = Place::of(0, a).after();
        assert!(Place::of(0, a) < after && after <= Place::of(0, b));
        let last = Place::of(0, Uuid::max());
        assert!(last < last.after() && last.after() < Place::of(-1, Uuid::nil()).after());
    }
}
