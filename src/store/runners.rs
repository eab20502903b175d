//! Runners: pairing, enrolment with a join code, a runner's own heartbeat, listings, presence
//! refreshes and revocation. Invariants: a personal runner is found only in the workspace it
//! was paired or enrolled in; revoking takes the runner row lock before moving its jobs, so no
//! lease of it can commit afterwards.

use uuid::Uuid;

use super::placement::AdvertisedTargets;
use super::{rows, sql, At, Result, Store};
use crate::store::records::{JoinGrant, Moved, Runner, RunnerIdentity};

/// A new runner, paired by a key or enrolled with a join code.
#[derive(Debug, Clone)]
pub struct NewRunner {
    pub id: Uuid,
    pub owner: String,
    pub workspace: String,
    pub label: String,
    pub os: Option<String>,
    pub version: Option<String>,
    pub capabilities: Vec<String>,
    pub capacity: i32,
    pub token_hash: Vec<u8>,
    pub approved_by: String,
    pub ephemeral: bool,
    /// Enrolment counts as being seen; pairing by key does not.
    pub seen: bool,
    /// Its version is outdated against the replica's minimum.
    pub outdated: bool,
    /// Canary names (also in `capabilities`).
    pub exclusive: Vec<String>,
    /// The repository targets it advertises, recorded `pending` in the same transaction as
    /// the runner (and, on enrolment, the burning of its code): both or neither.
    pub repo_targets: AdvertisedTargets,
}

impl NewRunner {
    /// The parameters of `runner_insert.sql`, in order.
    fn params<'a>(
        &'a self,
        presence_window_ms: &'a i64,
    ) -> [&'a (dyn tokio_postgres::types::ToSql + Sync); 15] {
        [
            &self.id,
            &self.owner,
            &self.workspace,
            &self.label,
            &self.os,
            &self.version,
            &self.capabilities,
            &self.capacity,
            &self.token_hash,
            &self.approved_by,
            &self.ephemeral,
            &self.seen,
            presence_window_ms,
            &self.outdated,
            &self.exclusive,
        ]
    }
}

impl Store {
    /// Pair a runner: the runner and its advertised repository targets in one transaction.
    pub async fn insert_runner(&self, r: &NewRunner) -> Result<Runner> {
        self.bounded("insert_runner", async {
            let mut client = self.client().await?;
            self.count(4);
            let tx = client.transaction().await?;
            let runner = insert_with_targets(&tx, r, self.presence_window_ms).await?;
            tx.commit().await?;
            client.release();
            Ok(runner)
        })
        .await
    }

    /// Burn a join code and enrol its runner, with its advertised repository targets, in one
    /// transaction: all or nothing (a failure leaves the code unburnt and no runner).
    pub async fn enroll(
        &self,
        code_hash: &[u8],
        make: impl FnOnce(&JoinGrant) -> NewRunner,
    ) -> Result<Option<Runner>> {
        self.bounded("enroll", async move {
            let mut client = self.client().await?;
            self.count(5);
            let tx = client.transaction().await?;
            let burn = tx
                .prepare_cached(sql::JOIN_CODE_BURN)
                .await
                .at(sql::JOIN_CODE_BURN)?;
            let Some(row) = tx
                .query_opt(&burn, &[&code_hash])
                .await
                .at(sql::JOIN_CODE_BURN)?
            else {
                tx.rollback().await?;
                client.release();
                return Ok(None);
            };
            let grant = JoinGrant {
                workspace: row.get("workspace"),
                owner: row.get("owner"),
                approved_by: row.get("approved_by"),
                ephemeral: row.get("ephemeral"),
            };
            let r = make(&grant);
            let runner = insert_with_targets(&tx, &r, self.presence_window_ms).await?;
            tx.commit().await?;
            client.release();
            Ok(Some(runner))
        })
        .await
    }

    /// Authenticate a runner token.
    pub async fn runner_by_token(&self, hash: &[u8]) -> Result<Option<RunnerIdentity>> {
        Ok(self
            .query_opt(sql::RUNNER_BY_TOKEN, &[&hash])
            .await?
            .map(|r| RunnerIdentity {
                id: r.get("id"),
                owner: r.get("owner"),
                workspace: r.get("workspace"),
                ephemeral: r.get("ephemeral"),
            }))
    }

    /// Mark runners as seen now, in one statement.
    pub async fn touch_runners(&self, ids: &[Uuid]) -> Result<()> {
        if ids.is_empty() {
            return Ok(());
        }
        self.execute(sql::RUNNERS_TOUCH, &[&ids]).await.map(drop)
    }

    /// A subject's personal runners in one workspace.
    pub async fn runners_by_owner(&self, workspace: &str, owner: &str) -> Result<Vec<Runner>> {
        let rows = self
            .query(
                sql::RUNNERS_BY_OWNER,
                &[&owner, &self.presence_window_ms, &workspace],
            )
            .await?;
        Ok(rows.iter().map(rows::runner).collect())
    }

    pub async fn runners_in_workspace(&self, workspace: &str) -> Result<Vec<Runner>> {
        let rows = self
            .query(
                sql::RUNNERS_IN_WORKSPACE,
                &[&workspace, &self.presence_window_ms],
            )
            .await?;
        Ok(rows.iter().map(rows::runner).collect())
    }

    pub async fn runner(&self, id: Uuid) -> Result<Option<Runner>> {
        Ok(self
            .query_opt(sql::RUNNER_GET, &[&id, &self.presence_window_ms])
            .await?
            .as_ref()
            .map(rows::runner))
    }

    pub async fn runner_heartbeat(
        &self,
        id: Uuid,
        version: Option<&str>,
        capabilities: Option<&[String]>,
        exclusive: Option<&[String]>,
        capacity: Option<i32>,
        outdated: bool,
    ) -> Result<Option<Runner>> {
        Ok(self
            .query_opt(
                sql::RUNNER_HEARTBEAT,
                &[
                    &id,
                    &version,
                    &capabilities,
                    &capacity,
                    &self.presence_window_ms,
                    &outdated,
                    &exclusive,
                ],
            )
            .await?
            .as_ref()
            .map(rows::runner))
    }

    /// Of `running`, the job ids this runner does not hold at the given epoch.
    pub async fn not_running(&self, runner_id: Uuid, running: &[(Uuid, i64)]) -> Result<Vec<Uuid>> {
        if running.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<Uuid> = running.iter().map(|r| r.0).collect();
        let epochs: Vec<i64> = running.iter().map(|r| r.1).collect();
        let rows = self
            .query(sql::RUNNER_NOT_RUNNING, &[&runner_id, &ids, &epochs])
            .await?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    /// Revoke a live runner of `owner` in `workspace` and re-park or reject its jobs, in one
    /// transaction. `None`: no such runner.
    pub async fn revoke_runner(
        &self,
        id: Uuid,
        owner: &str,
        workspace: &str,
    ) -> Result<Option<Vec<Moved>>> {
        self.retrying_conflicts(|| self.revoke_runner_once(id, owner, workspace))
            .await
    }

    async fn revoke_runner_once(
        &self,
        id: Uuid,
        owner: &str,
        workspace: &str,
    ) -> Result<Option<Vec<Moved>>> {
        self.bounded("revoke_runner", async {
            let mut client = self.client().await?;
            self.count(4);
            let tx = client.transaction().await?;
            let revoke = tx
                .prepare_cached(sql::RUNNER_REVOKE)
                .await
                .at(sql::RUNNER_REVOKE)?;
            if tx
                .query_opt(&revoke, &[&id, &owner, &workspace])
                .await
                .at(sql::RUNNER_REVOKE)?
                .is_none()
            {
                tx.rollback().await?;
                client.release();
                return Ok(None);
            }
            let jobs = tx
                .prepare_cached(sql::RUNNER_REVOKE_JOBS)
                .await
                .at(sql::RUNNER_REVOKE_JOBS)?;
            let moved = tx
                .query(&jobs, &[&id])
                .await
                .at(sql::RUNNER_REVOKE_JOBS)?
                .iter()
                .map(rows::moved)
                .collect::<Result<_>>()?;
            tx.commit().await?;
            client.release();
            Ok(Some(moved))
        })
        .await
    }
}

/// Insert runner `r` and record its advertised repository targets inside `tx`.
async fn insert_with_targets(
    tx: &deadpool_postgres::Transaction<'_>,
    r: &NewRunner,
    presence_window_ms: i64,
) -> Result<Runner> {
    let insert = tx
        .prepare_cached(sql::RUNNER_INSERT)
        .await
        .at(sql::RUNNER_INSERT)?;
    let row = tx
        .query_one(&insert, &r.params(&presence_window_ms))
        .await
        .at(sql::RUNNER_INSERT)?;
    let mut runner = rows::runner(&row);
    if !r.repo_targets.is_empty() {
        let t = &r.repo_targets;
        let advertise = tx
            .prepare_cached(sql::REPO_TARGETS_ADVERTISE)
            .await
            .at(sql::REPO_TARGETS_ADVERTISE)?;
        let rows = tx
            .query(
                &advertise,
                &[&r.id, &t.ids, &t.providers, &t.repositories, &t.labels],
            )
            .await
            .at(sql::REPO_TARGETS_ADVERTISE)?;
        runner.repo_targets = super::placement::target_rows(&rows);
    }
    Ok(runner)
}
