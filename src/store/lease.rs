//! The lease transaction: lock the runner row (which also authenticates it), claim, commit.
//!
//! Invariant: concurrent lease calls of one runner serialise on its row lock, and the claim
//! runs as a second statement whose snapshot is taken after the lock was granted, so together
//! they never take more than `capacity - active leases`. The four messages (BEGIN, lock, claim,
//! COMMIT) are sent together on one connection, pipelined: one round trip. That needs the
//! runner's fixed identity (id, workspace, owner) before the lock answers; a replica remembers
//! it by token hash, and the first call of a runner it does not know yet takes two round trips.
//!
//! Concurrent lease transactions of one token on one replica take turns ([`LeaseTurns`])
//! before they check out a connection: they would serialise on the runner row lock anyway, and
//! waiting in memory instead leaves the pool's connections to other runners' and tenants'
//! calls (one runner's burst of long-polls cannot hold the pool while its calls queue on its
//! own row lock).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use tokio_postgres::types::ToSql;

use super::{rows, sql, Result, Store, StoreError};
use crate::store::records::{Claimed, LeaseIdentity};

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
        let Some(row) = self
            .query_opt(
                sql::LEASE_PROBE,
                &[
                    &token_hash,
                    &me.id,
                    &me.workspace,
                    &me.owner,
                    &self.seen_refresh_ms,
                ],
            )
            .await?
        else {
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
    /// `want_more`: report whether pool jobs this call did not take are still parked.
    ///
    /// # Errors
    /// The database failed; nothing was taken.
    pub async fn lease(
        &self,
        token_hash: &[u8],
        advertised: &Advertised,
        known: Option<&LeaseIdentity>,
        max_jobs: i64,
        lease_ttl_ms: i64,
        want_more: bool,
    ) -> Result<LeaseOutcome> {
        self.bounded("lease transaction", async {
            let _turn = self.lease_turns.turn(token_hash).await;
            self.lease_once(
                token_hash,
                advertised,
                known,
                max_jobs,
                lease_ttl_ms,
                want_more,
            )
            .await
        })
        .await
    }

    /// [`Self::lease`], unbounded.
    async fn lease_once(
        &self,
        token_hash: &[u8],
        advertised: &Advertised,
        known: Option<&LeaseIdentity>,
        max_jobs: i64,
        lease_ttl_ms: i64,
        want_more: bool,
    ) -> Result<LeaseOutcome> {
        let client = self.client().await?;
        let lock = client
            .prepare_cached(sql::RUNNER_LOCK_FOR_LEASE)
            .await
            .map_err(|e| StoreError::pg(sql::RUNNER_LOCK_FOR_LEASE, e))?;
        let claim = client
            .prepare_cached(sql::LEASE_CLAIM)
            .await
            .map_err(|e| StoreError::pg(sql::LEASE_CLAIM, e))?;
        let lock_params: [&(dyn ToSql + Sync); 5] = [
            &token_hash,
            &advertised.capabilities,
            &advertised.exclusive,
            &advertised.version,
            &self.seen_refresh_ms,
        ];
        let lock_err = |e| StoreError::pg(sql::RUNNER_LOCK_FOR_LEASE, e);
        let claim_err = |e| StoreError::pg(sql::LEASE_CLAIM, e);

        let (identity, version, claimed_rows) = match known {
            Some(me) => {
                // Pipelined: all four are queued on the connection before any answer is read.
                self.count(4);
                let claim_params: [&(dyn ToSql + Sync); 7] = [
                    &token_hash,
                    &me.id,
                    &me.workspace,
                    &me.owner,
                    &max_jobs,
                    &lease_ttl_ms,
                    &want_more,
                ];
                let (begin, locked, claimed, commit) = tokio::join!(
                    client.batch_execute("BEGIN"),
                    client.query_opt(&lock, &lock_params),
                    client.query(&claim, &claim_params),
                    client.batch_execute("COMMIT"),
                );
                client.release();
                begin?;
                let locked = locked.map_err(lock_err)?;
                let claimed = claimed.map_err(claim_err)?;
                commit?;
                let Some(row) = locked else {
                    return Ok(LeaseOutcome::default());
                };
                let identity = identity_of(&row);
                if identity != *me {
                    // Never for a real runner (the identity of a token never changes), but a
                    // wrong guess claims nothing: answer with the identity, nothing taken, and
                    // the caller asks again.
                    return Ok(LeaseOutcome {
                        runner: Some(identity),
                        ..LeaseOutcome::default()
                    });
                }
                (identity, row.get("version"), claimed)
            }
            None => {
                // A runner this replica has not seen yet: learn who it is from the lock, then
                // claim. A real transaction, so a call dropped half-way rolls back.
                self.count(4);
                let mut client = client;
                let tx = client.transaction().await?;
                let Some(locked) = tx.query_opt(&lock, &lock_params).await.map_err(lock_err)?
                else {
                    tx.rollback().await?;
                    client.release();
                    return Ok(LeaseOutcome::default());
                };
                let me = identity_of(&locked);
                let claimed = tx
                    .query(
                        &claim,
                        &[
                            &token_hash,
                            &me.id,
                            &me.workspace,
                            &me.owner,
                            &max_jobs,
                            &lease_ttl_ms,
                            &want_more,
                        ],
                    )
                    .await
                    .map_err(claim_err)?;
                tx.commit().await?;
                client.release();
                (me, locked.get("version"), claimed)
            }
        };

        let mut out = LeaseOutcome {
            runner: Some(identity),
            version,
            ..LeaseOutcome::default()
        };
        for row in &claimed_rows {
            match row.get::<_, &str>("outcome") {
                "leased" => out.claimed.push(rows::claimed(row)),
                "rejected" => out.rejected.push(row.get("id")),
                "free" => out.free = row.get("epoch"),
                "more" => out.more = true,
                other => {
                    return Err(StoreError::Invalid(format!(
                        "unknown claim outcome {other:?}"
                    )))
                }
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
}

fn identity_of(row: &tokio_postgres::Row) -> LeaseIdentity {
    LeaseIdentity {
        id: row.get("id"),
        workspace: row.get("workspace"),
        owner: row.get("owner"),
    }
}
