//! The lease transaction: lock the runner row (which also authenticates it), claim, commit.
//!
//! Invariant: concurrent lease calls of one runner serialise on its row lock, and the claim
//! runs as a second statement whose snapshot is taken after the lock was granted, so together
//! they never take more than `capacity - active leases`. The four messages (BEGIN, lock, claim,
//! COMMIT; a woken waiter also asks whether jobs are left for another runner, `lease_more.sql`)
//! are sent together on one connection, pipelined: one round trip. That needs the
//! runner's fixed identity (id, workspace, owner) before the lock answers; a replica remembers
//! it by token hash, and the first call of a runner it does not know yet takes two round trips.
//!
//! The claim counts the runner's leases from a bound the replica remembers for it
//! ([`LeaseIdentity::leases_since`], migration 0015), so that under an old snapshot it does not
//! walk an index entry for every lease the runner ever settled. Every claim answers the bound
//! for the next: the oldest lease the runner holds, or its transaction's start (less a second)
//! when that is earlier. It is a bound on every replica, for as long as it is kept:
//! each claim stamps its leases (`leased_at`) with the clock after the runner row lock was
//! granted, so after every earlier claim of that runner committed, and the leases the runner
//! held then were all in that claim's snapshot. The count does not trust a bound ahead of the
//! database's clock (a clock stepped back further than that second, a failover to a server
//! whose clock is behind) and then reads every entry.
//!
//! A lease call's reports (`done`, v1.2) are the transaction's first statements, before the
//! lock: one `job_complete.sql` for its completes, one `job_fail.sql` per fail, each fenced and
//! authenticated exactly as its own call's. They commit with the claim, which sees the slots
//! they freed; a job's row before a runner's, the order every other report takes too. A report
//! that misses its fence is asked why after the commit (`job_fence_miss.sql`), as its own call
//! would be.
//!
//! Concurrent lease transactions of one token on one replica take turns ([`LeaseTurns`])
//! before they check out a connection: they would serialise on the runner row lock anyway, and
//! waiting in memory instead leaves the pool's connections to other runners' and tenants'
//! calls (one runner's burst of long-polls cannot hold the pool while its calls queue on its
//! own row lock).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use deadpool_postgres::GenericClient;
use serde_json::Value;
use tokio_postgres::types::ToSql;
use tokio_postgres::Statement;
use uuid::Uuid;

use super::jobs::Fenced;
use super::{bounds, rows, sql, Result, Store, StoreError};
use crate::store::records::{Claimed, Job, LeaseIdentity};

/// What a runner advertises on a lease call; `None` keeps what is recorded.
#[derive(Debug, Default, Clone)]
pub struct Advertised {
    pub capabilities: Option<Vec<String>>,
    pub exclusive: Option<Vec<String>>,
    pub version: Option<String>,
}

/// What one lease transaction did.
#[derive(Debug, Default)]
pub struct LeaseOutcome {
    /// The live runner's identity; `None` when no live runner has this token (unknown,
    /// revoked, spent ephemeral).
    pub runner: Option<LeaseIdentity>,
    /// The runner's recorded version after this call.
    pub version: Option<String>,
    /// How many jobs this call could take: free slots (capacity - active leases), capped by
    /// `max_jobs`.
    pub free: i64,
    pub claimed: Vec<Claimed>,
    /// Named jobs rejected because the runner cannot run them.
    pub rejected: Vec<uuid::Uuid>,
    /// Pool jobs this call did not take are still parked (asked for with `want_more`).
    pub more: bool,
    /// What each of the call's reports did, in their order: the job it settled (or parked
    /// again, by its retry policy), or why it missed its fence.
    pub done: Vec<Fenced<Job>>,
}

/// A report a lease call carries (`done`, v1.2), applied in its transaction before the claim.
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

/// What [`Store::lease_probe`] saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Probe {
    /// No live runner has this token.
    Gone,
    /// Nothing to take: no free slot, or no parked job on its queues.
    Nothing,
    /// A lease transaction may find something (or must refresh what it records).
    Worth,
}

/// Whose lease transaction runs now, per token hash: one at a time per token on this replica.
/// An entry lives only while a transaction of its token runs or waits.
#[derive(Default)]
pub struct LeaseTurns(Mutex<HashMap<Vec<u8>, Arc<tokio::sync::Mutex<()>>>>);

/// A token's turn; dropping it lets the next transaction of that token run.
struct Turn<'a> {
    turns: &'a LeaseTurns,
    token_hash: &'a [u8],
    guard: Option<tokio::sync::OwnedMutexGuard<()>>,
}

impl LeaseTurns {
    async fn turn<'a>(&'a self, token_hash: &'a [u8]) -> Turn<'a> {
        let queue = {
            // Handles only: nothing panics while the lock is held.
            let mut map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
            map.entry(token_hash.to_vec()).or_default().clone()
        };
        Turn {
            turns: self,
            token_hash,
            guard: Some(queue.lock_owned().await),
        }
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        let mut map = self.turns.0.lock().unwrap_or_else(PoisonError::into_inner);
        drop(self.guard.take());
        // Only the map holds it: no transaction of this token runs or waits.
        if map
            .get(self.token_hash)
            .is_some_and(|q| Arc::strong_count(q) == 1)
        {
            map.remove(self.token_hash);
        }
    }
}

impl Store {
    /// A read-only look before a lease transaction (`lease_probe.sql`): one round trip, no
    /// lock, no commit.
    ///
    /// # Errors
    /// The database failed.
    pub async fn lease_probe(&self, token_hash: &[u8], me: &LeaseIdentity) -> Result<Probe> {
        let lanes = StartParams::lanes(&self.claim_bounds.peek(&me.workspace, &me.owner));
        let runner: [&(dyn ToSql + Sync); 6] = [
            &token_hash,
            &me.id,
            &me.workspace,
            &me.owner,
            &self.seen_refresh_ms,
            &me.leases_since,
        ];
        let params: Vec<&(dyn ToSql + Sync)> = runner
            .into_iter()
            .chain(StartParams::params(&lanes))
            .collect();
        let Some(row) = self.query_opt(sql::LEASE_PROBE, &params).await? else {
            return Ok(Probe::Gone);
        };
        let free = i64::from(row.get::<_, i32>("capacity_free"));
        let worth = row.get::<_, bool>("ephemeral")
            || row.get::<_, bool>("stale")
            || (free > 0 && row.get::<_, bool>("parked"));
        Ok(if worth { Probe::Worth } else { Probe::Nothing })
    }

    /// One lease attempt, authenticated by the runner's token hash. `known` is the runner's
    /// identity if this replica has seen it before (then one round trip, else two).
    /// `want_more`: report whether pool jobs this call did not take are still parked. `done`:
    /// the call's reports, applied first in the same transaction.
    ///
    /// # Errors
    /// The database failed; nothing was taken, and no report was applied.
    #[allow(clippy::too_many_arguments)]
    pub async fn lease(
        &self,
        token_hash: &[u8],
        advertised: &Advertised,
        known: Option<&LeaseIdentity>,
        max_jobs: i64,
        lease_ttl_ms: i64,
        want_more: bool,
        done: &[DoneReport],
    ) -> Result<LeaseOutcome> {
        let mut out = self
            .bounded("lease transaction", async {
                let _turn = self.lease_turns.turn(token_hash).await;
                self.lease_once(
                    token_hash,
                    advertised,
                    known,
                    max_jobs,
                    lease_ttl_ms,
                    want_more,
                    done,
                )
                .await
            })
            .await?;
        // Why a report missed, asked as its own call asks: after the commit.
        for (fenced, report) in out.done.iter_mut().zip(done) {
            if let Err(miss) = fenced {
                *miss = self.fence_miss(report.id, token_hash).await?;
            }
        }
        Ok(out)
    }

    /// [`Self::lease`], unbounded; a report that missed its fence says `NotFound` for now.
    #[allow(clippy::too_many_arguments)]
    async fn lease_once(
        &self,
        token_hash: &[u8],
        advertised: &Advertised,
        known: Option<&LeaseIdentity>,
        max_jobs: i64,
        lease_ttl_ms: i64,
        want_more: bool,
        done: &[DoneReport],
    ) -> Result<LeaseOutcome> {
        let Some(me) = known else {
            return self
                .lease_learning(
                    token_hash,
                    advertised,
                    max_jobs,
                    lease_ttl_ms,
                    want_more,
                    done,
                )
                .await;
        };
        // A plain runner when it was plain at its last claim and advertises nothing
        // now that would change it (an exclusive name is always also a capability).
        let plain = me.plain && advertised.capabilities.as_ref().is_none_or(Vec::is_empty);
        let client = self.client().await?;
        let reports = DoneStatements::prepare(&client, done).await?;
        let lock = prepare(&client, sql::RUNNER_LOCK_FOR_LEASE).await?;
        // A plain runner's claim reads no constrained lane: a walk of one that falls due is left
        // to a claim that reads it (if the runner is not plain after all, its constrained lanes
        // start at the head, which is always right).
        let starts = self.claim_bounds.starts(&me.workspace, &me.owner, !plain);
        let claim_sql = sql::LEASE_CLAIM;
        let claim = prepare(&client, claim_sql).await?;
        // A runner that is not plain is followed by the rejection in its transaction; a plain
        // one's claim answers whether there is anything to reject (`unfit_named`), and is not.
        let reject = if plain {
            None
        } else {
            Some(prepare(&client, sql::LEASE_REJECT_UNFIT).await?)
        };
        // Whether jobs are left for another runner, asked only by a woken waiter; a claim from
        // remembered places answers it itself.
        let more = if want_more && starts.is_none() {
            Some(prepare(&client, sql::LEASE_MORE).await?)
        } else {
            None
        };
        let lock_args = lock_params(&token_hash, advertised, &self.seen_refresh_ms);
        let general = claim_params(&token_hash, me, &max_jobs, &lease_ttl_ms);
        let from_places = starts.is_some();
        let lanes = StartParams::lanes(starts.as_ref().unwrap_or(&bounds::Starts::default()));
        let durable = !done.is_empty();
        let claim_args = claim_args(&general, &want_more, &lanes, &from_places, &durable);
        let reject_params: [&(dyn ToSql + Sync); 3] = [&token_hash, &me.id, &me.owner];
        let more_params: [&(dyn ToSql + Sync); 2] = [&me.workspace, &me.owner];
        // Pipelined: all of them are queued on the connection before any answer is read (join
        // polls its futures in order, and each sends its message when first polled).
        self.count(
            4 + reports.statements(done) + u64::from(reject.is_some()) + u64::from(more.is_some()),
        );
        let (begin, reported, locked, claimed, rejected, left, commit) = tokio::join!(
            client.batch_execute("BEGIN"),
            reports.write(&*client, token_hash, done, &self.seen_refresh_ms),
            client.query_opt(&lock, &lock_args),
            client.query(&claim, &claim_args),
            async {
                match &reject {
                    Some(reject) => client.query(reject, &reject_params).await,
                    None => Ok(Vec::new()),
                }
            },
            async {
                match &more {
                    Some(more) => client.query_opt(more, &more_params).await,
                    None => Ok(None),
                }
            },
            client.batch_execute("COMMIT"),
        );
        client.release();
        begin?;
        let reported = reported?;
        let locked = locked.map_err(|e| StoreError::pg(sql::RUNNER_LOCK_FOR_LEASE, e))?;
        let claimed = claimed.map_err(|e| StoreError::pg(claim_sql, e))?;
        let mut rejected = rejected.map_err(|e| StoreError::pg(sql::LEASE_REJECT_UNFIT, e))?;
        let left = left.map_err(|e| StoreError::pg(sql::LEASE_MORE, e))?;
        commit?;
        if reject.is_none()
            && claimed
                .first()
                .is_some_and(|r| r.get::<_, bool>("unfit_named"))
        {
            // Rare: a named job the runner can no longer run. Its own durable transaction, after
            // the claim's (which took only jobs that fit, so the two never touch one job).
            // Boxed: this future is part of every parked long-poll's state, and a rare call
            // should not make all of them bigger (docs/perf.md, "Idle memory").
            rejected = Box::pin(self.query(sql::LEASE_REJECT_UNFIT, &reject_params)).await?;
        }
        let Some(row) = locked else {
            return Ok(LeaseOutcome {
                done: reported,
                ..LeaseOutcome::default()
            });
        };
        let identity = identity_of(&row);
        if !identity.same_runner(me) {
            // Never for a real runner (the identity of a token never changes), but a wrong
            // guess claims nothing: answer with the identity, nothing taken, and the caller
            // asks again.
            return Ok(LeaseOutcome {
                runner: Some(identity),
                done: reported,
                ..LeaseOutcome::default()
            });
        }
        if let (Some(starts), Some(first)) = (&starts, claimed.first()) {
            self.learn_places(&me.workspace, &me.owner, starts, first)?;
        }
        let more = match left {
            Some(left) => left.get("more"),
            // Asked of the claim from remembered places, or not asked at all.
            None => starts.is_some() && claimed.iter().any(|r| r.get::<_, bool>("more")),
        };
        let mut out = outcome(identity, row.get("version"), &claimed, &rejected, more)?;
        out.done = reported;
        Ok(out)
    }

    /// Remember where the next claim of each lane of the runner's queues starts, from a
    /// committed claim's first row (from places: it answers each lane it read).
    fn learn_places(
        &self,
        workspace: &str,
        owner: &str,
        starts: &bounds::Starts,
        row: &tokio_postgres::Row,
    ) -> Result<()> {
        let xmin: String = row.get("snapshot_xmin");
        let xmin = xmin
            .parse::<u64>()
            .map_err(|e| StoreError::Invalid(format!("a snapshot xmin {xmin:?}: {e}")))?;
        let lanes = [
            (bounds::Lane::Own, "own_next"),
            (bounds::Lane::Any, "any_next"),
            (bounds::Lane::OwnConstrained, "own_c_next"),
            (bounds::Lane::AnyConstrained, "any_c_next"),
        ];
        // A lane's place is NULL when the claim did not read it (an `any` lane for a personal
        // runner, a class closed to the runner).
        let answered: Vec<(bounds::Lane, bounds::Place)> = lanes
            .into_iter()
            .filter_map(|(lane, column)| {
                let priority: Option<i32> = row.get(format!("{column}_priority").as_str());
                let id: Option<uuid::Uuid> = row.get(format!("{column}_id").as_str());
                Some((
                    lane,
                    bounds::Place {
                        priority: priority?,
                        id: id?,
                        xmin,
                    },
                ))
            })
            .collect();
        self.claim_bounds.learn(workspace, owner, starts, &answered);
        Ok(())
    }

    /// A lease of a runner this replica does not know yet: learn who it is from the lock, then
    /// claim from the head (its `plain` tells whether the next call pipelines the rejection). A real transaction, so a call dropped
    /// half-way rolls back; two round trips.
    async fn lease_learning(
        &self,
        token_hash: &[u8],
        advertised: &Advertised,
        max_jobs: i64,
        lease_ttl_ms: i64,
        want_more: bool,
        done: &[DoneReport],
    ) -> Result<LeaseOutcome> {
        let mut client = self.client().await?;
        let reports = DoneStatements::prepare(&client, done).await?;
        let lock = prepare(&client, sql::RUNNER_LOCK_FOR_LEASE).await?;
        let claim = prepare(&client, sql::LEASE_CLAIM).await?;
        let reject = prepare(&client, sql::LEASE_REJECT_UNFIT).await?;
        self.count(5 + reports.statements(done));
        let tx = client.transaction().await?;
        let reported = reports
            .write(&tx, token_hash, done, &self.seen_refresh_ms)
            .await?;
        let Some(locked) = tx
            .query_opt(
                &lock,
                &lock_params(&token_hash, advertised, &self.seen_refresh_ms),
            )
            .await
            .map_err(|e| StoreError::pg(sql::RUNNER_LOCK_FOR_LEASE, e))?
        else {
            // No live runner has this token, so no report matched either.
            tx.rollback().await?;
            client.release();
            return Ok(LeaseOutcome {
                done: reported,
                ..LeaseOutcome::default()
            });
        };
        let me = identity_of(&locked);
        let durable = !done.is_empty();
        let claimed = tx
            .query(
                &claim,
                &claim_args(
                    &claim_params(&token_hash, &me, &max_jobs, &lease_ttl_ms),
                    &false,
                    &StartParams::lanes(&bounds::Starts::default()),
                    &false,
                    &durable,
                ),
            )
            .await
            .map_err(|e| StoreError::pg(sql::LEASE_CLAIM, e))?;
        let rejected = tx
            .query(&reject, &[&token_hash, &me.id, &me.owner])
            .await
            .map_err(|e| StoreError::pg(sql::LEASE_REJECT_UNFIT, e))?;
        let more = if want_more {
            let more = tx
                .prepare_cached(sql::LEASE_MORE)
                .await
                .map_err(|e| StoreError::pg(sql::LEASE_MORE, e))?;
            self.count(1);
            tx.query_one(&more, &[&me.workspace, &me.owner])
                .await
                .map_err(|e| StoreError::pg(sql::LEASE_MORE, e))?
                .get("more")
        } else {
            false
        };
        tx.commit().await?;
        client.release();
        let version = locked.get("version");
        let mut out = outcome(me, version, &claimed, &rejected, more)?;
        out.done = reported;
        Ok(out)
    }
}

/// The statements a lease call's reports take: `job_complete.sql` (once, for every complete,
/// its arrays in step) and `job_fail.sql` (once per fail), prepared only when used.
struct DoneStatements {
    complete: Option<Statement>,
    fail: Option<Statement>,
}

impl DoneStatements {
    async fn prepare(client: &deadpool_postgres::Object, done: &[DoneReport]) -> Result<Self> {
        let any = |complete: bool| {
            done.iter()
                .any(|d| matches!(d.report, Reported::Complete(_)) == complete)
        };
        Ok(Self {
            complete: match any(true) {
                true => Some(prepare(client, sql::JOB_COMPLETE).await?),
                false => None,
            },
            fail: match any(false) {
                true => Some(prepare(client, sql::JOB_FAIL).await?),
                false => None,
            },
        })
    }

    /// How many statements [`Self::write`] sends.
    fn statements(&self, done: &[DoneReport]) -> u64 {
        let fails = done
            .iter()
            .filter(|d| matches!(d.report, Reported::Fail(_)))
            .count();
        u64::from(self.complete.is_some()) + fails as u64
    }

    /// Send the reports' statements (all of them when first polled, so they pipeline with
    /// what follows) and read what each did: the job it settled, or a miss (`NotFound` until
    /// [`Store::lease`] asks why).
    async fn write(
        &self,
        client: &impl GenericClient,
        token_hash: &[u8],
        done: &[DoneReport],
        seen_refresh_ms: &i64,
    ) -> Result<Vec<Fenced<Job>>> {
        let mut completes = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for d in done {
            if let Reported::Complete(result) = &d.report {
                completes.0.push(d.id);
                completes.1.push(d.epoch);
                completes.2.push(token_hash);
                completes.3.push(result);
            }
        }
        let complete_args: [&(dyn ToSql + Sync); 5] = [
            &completes.0,
            &completes.1,
            &completes.2,
            &completes.3,
            seen_refresh_ms,
        ];
        let fail_args: Vec<[&(dyn ToSql + Sync); 5]> = done
            .iter()
            .filter_map(|d| match &d.report {
                Reported::Fail(message) => {
                    let args: [&(dyn ToSql + Sync); 5] =
                        [&d.id, &d.epoch, &token_hash, message, seen_refresh_ms];
                    Some(args)
                }
                Reported::Complete(_) => None,
            })
            .collect();
        let (completed, failed) = tokio::join!(
            async {
                match &self.complete {
                    Some(statement) => client.query(statement, &complete_args).await,
                    None => Ok(Vec::new()),
                }
            },
            futures_util::future::join_all(fail_args.iter().map(|args| async move {
                match &self.fail {
                    Some(statement) => client.query_opt(statement, args).await,
                    None => Ok(None),
                }
            })),
        );
        let completed = completed.map_err(|e| StoreError::pg(sql::JOB_COMPLETE, e))?;
        let mut settled: Vec<Fenced<Job>> = done
            .iter()
            .map(|_| Err(super::jobs::FenceMiss::NotFound))
            .collect();
        // `ord` counts the completes from 1; map it back to the report's place in `done`.
        let at: Vec<usize> = (0..done.len())
            .filter(|&i| matches!(done[i].report, Reported::Complete(_)))
            .collect();
        for row in &completed {
            let ord = usize::try_from(row.get::<_, i64>("ord") - 1).ok();
            let i = ord.and_then(|o| at.get(o)).ok_or_else(|| {
                StoreError::Invalid("job_complete.sql answered a report it was not sent".into())
            })?;
            settled[*i] = Ok(rows::job(row)?);
        }
        let fails = (0..done.len()).filter(|&i| matches!(done[i].report, Reported::Fail(_)));
        for (i, row) in fails.zip(failed) {
            if let Some(row) = row.map_err(|e| StoreError::pg(sql::JOB_FAIL, e))? {
                settled[i] = Ok(rows::job(&row)?);
            }
        }
        Ok(settled)
    }
}

/// A claim's start in one lane, as parameters: a remembered place, or the head (no xmin).
struct StartParams {
    priority: i32,
    id: uuid::Uuid,
    xmin: Option<String>,
}

impl StartParams {
    /// Every lane's start, in [`bounds::Lane::ALL`]'s order (the statements' order).
    fn lanes(starts: &bounds::Starts) -> [Self; 4] {
        bounds::Lane::ALL.map(|lane| Self::of(starts.place(lane)))
    }

    /// The parameters of these lanes' starts: priority, id and xmin of each, in order.
    fn params(lanes: &[Self]) -> impl Iterator<Item = &(dyn ToSql + Sync)> {
        lanes.iter().flat_map(|l| {
            [
                &l.priority as &(dyn ToSql + Sync),
                &l.id as &(dyn ToSql + Sync),
                &l.xmin as &(dyn ToSql + Sync),
            ]
        })
    }

    fn of(place: Option<&bounds::Place>) -> Self {
        match place {
            Some(p) => Self {
                priority: p.priority,
                id: p.id,
                xmin: Some(p.xmin.to_string()),
            },
            None => Self {
                priority: bounds::Place::HEAD_PRIORITY,
                id: uuid::Uuid::nil(),
                xmin: None,
            },
        }
    }
}

async fn prepare(
    client: &deadpool_postgres::Object,
    text: &'static str,
) -> Result<tokio_postgres::Statement> {
    client
        .prepare_cached(text)
        .await
        .map_err(|e| StoreError::pg(text, e))
}

/// The parameters every claim takes (`lease_claim*.sql` $1..$7).
fn claim_params<'a>(
    token_hash: &'a &'a [u8],
    me: &'a LeaseIdentity,
    max_jobs: &'a i64,
    lease_ttl_ms: &'a i64,
) -> [&'a (dyn ToSql + Sync); 7] {
    [
        token_hash,
        &me.id,
        &me.workspace,
        &me.owner,
        max_jobs,
        lease_ttl_ms,
        &me.leases_since,
    ]
}

/// Every parameter of `lease_claim.sql`: the runner's ($1..$7), whether to answer `more`
/// ($8), each lane's start ($9..$20), whether to read ahead for the next places ($21), and
/// whether the transaction carries reports, so must commit durably ($22, v1.3).
fn claim_args<'a>(
    general: &[&'a (dyn ToSql + Sync); 7],
    want_more: &'a bool,
    lanes: &'a [StartParams; 4],
    from_places: &'a bool,
    durable: &'a bool,
) -> Vec<&'a (dyn ToSql + Sync)> {
    general
        .iter()
        .copied()
        .chain([want_more as &(dyn ToSql + Sync)])
        .chain(StartParams::params(lanes))
        .chain([
            from_places as &(dyn ToSql + Sync),
            durable as &(dyn ToSql + Sync),
        ])
        .collect()
}

fn lock_params<'a>(
    token_hash: &'a &'a [u8],
    advertised: &'a Advertised,
    seen_refresh_ms: &'a i64,
) -> [&'a (dyn ToSql + Sync); 5] {
    [
        token_hash,
        &advertised.capabilities,
        &advertised.exclusive,
        &advertised.version,
        seen_refresh_ms,
    ]
}

/// What a lease transaction did, from the claim's rows (every row carries `free`; a row with a
/// NULL `id` took nothing), the rejection's, and whether jobs are left for another runner.
fn outcome(
    identity: LeaseIdentity,
    version: Option<String>,
    claimed: &[tokio_postgres::Row],
    rejected: &[tokio_postgres::Row],
    more: bool,
) -> Result<LeaseOutcome> {
    let mut identity = identity;
    identity.plain = claimed.first().is_some_and(|r| r.get("plain"));
    identity.leases_since = claimed.first().and_then(|r| r.get("leases_since"));
    let mut out = LeaseOutcome {
        runner: Some(identity),
        version,
        rejected: rejected.iter().map(|r| r.get("id")).collect(),
        more,
        ..LeaseOutcome::default()
    };
    for row in claimed {
        out.free = row.get("free");
        if row.get::<_, Option<uuid::Uuid>>("id").is_some() {
            out.claimed.push(rows::claimed(row));
        }
    }
    // Named jobs first, then by priority, then FIFO: the order the claim took them in.
    out.claimed.sort_by(|a, b| {
        b.named
            .cmp(&a.named)
            .then(b.priority.cmp(&a.priority))
            .then(a.id.cmp(&b.id))
    });
    Ok(out)
}

fn identity_of(row: &tokio_postgres::Row) -> LeaseIdentity {
    LeaseIdentity {
        id: row.get("id"),
        workspace: row.get("workspace"),
        owner: row.get("owner"),
        // Learnt from the claim's answer (see `outcome`).
        plain: false,
        leases_since: None,
    }
}
