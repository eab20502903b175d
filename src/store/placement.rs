//! Placement and trust in the store: runner versions and their verdicts, repository targets,
//! and the dormancy ceiling.
//!
//! Invariants: a runner's own calls only ever add repository targets as `pending` (a known
//! target keeps its status); only [`Store::set_repo_target_status`], reached through an
//! operator's call, changes one. A runner reaped past the dormancy ceiling is revoked with
//! `runner_revoke_jobs` in the same transaction, exactly as an operator's revocation.

use uuid::Uuid;

use super::{rows, sql, At, Result, Store};
use crate::store::records::{Moved, RepoTarget};

/// Repository targets as a runner advertises them, ready to record.
#[derive(Debug, Clone, Default)]
pub struct AdvertisedTargets {
    pub ids: Vec<Uuid>,
    pub providers: Vec<String>,
    pub repositories: Vec<String>,
    pub labels: Vec<Option<String>>,
}

impl AdvertisedTargets {
    pub fn push(&mut self, provider: String, repository: String, label: Option<String>) {
        self.ids.push(Uuid::now_v7());
        self.providers.push(provider);
        self.repositories.push(repository);
        self.labels.push(label);
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }
}

/// What a lease call's advertisement found.
#[derive(Debug, Clone, Copy)]
pub struct LeaseCaller {
    pub runner_id: Uuid,
    pub outdated: bool,
}

/// Rows of `repo_targets_advertise.sql` as targets, ordered by id.
pub(super) fn target_rows(rows: &[tokio_postgres::Row]) -> Vec<RepoTarget> {
    let mut out: Vec<RepoTarget> = rows
        .iter()
        .map(|r| RepoTarget {
            id: r.get("id"),
            provider: r.get("provider"),
            repository: r.get("repository"),
            label: r.get("label"),
            status: r.get("status"),
        })
        .collect();
    out.sort_by_key(|t| t.id);
    out
}

impl Store {
    /// A lease call's advertisement, before its version is checked: authenticate the token,
    /// mark the runner seen, record `version` with its verdict and add `targets`. `None`: no
    /// live runner has this token.
    pub async fn advertise_for_lease(
        &self,
        token_hash: &[u8],
        version: Option<&str>,
        outdated: bool,
        targets: &AdvertisedTargets,
    ) -> Result<Option<LeaseCaller>> {
        Ok(self
            .query_opt(
                sql::RUNNER_ADVERTISE,
                &[
                    &token_hash,
                    &version,
                    &outdated,
                    &targets.ids,
                    &targets.providers,
                    &targets.repositories,
                    &targets.labels,
                ],
            )
            .await?
            .map(|r| LeaseCaller {
                runner_id: r.get("id"),
                outdated: r.get("outdated"),
            }))
    }

    /// Record targets runner `id` advertises; returns them as now stored, ordered by id.
    pub async fn advertise_repo_targets(
        &self,
        id: Uuid,
        targets: &AdvertisedTargets,
    ) -> Result<Vec<RepoTarget>> {
        if targets.is_empty() {
            return Ok(Vec::new());
        }
        let rows = self
            .query(
                sql::REPO_TARGETS_ADVERTISE,
                &[
                    &id,
                    &targets.ids,
                    &targets.providers,
                    &targets.repositories,
                    &targets.labels,
                ],
            )
            .await?;
        Ok(target_rows(&rows))
    }

    /// Approve or revoke target `target` of runner `runner`; `false` when it has no such target.
    pub async fn set_repo_target_status(
        &self,
        runner: Uuid,
        target: Uuid,
        status: &str,
    ) -> Result<bool> {
        Ok(self
            .query_opt(sql::REPO_TARGET_SET_STATUS, &[&runner, &target, &status])
            .await?
            .is_some())
    }

    /// Reject a job the runner with this token just leased (`epoch`) for one of its named
    /// secrets, with `reason` (`secret_missing`: it does not exist, or may not go to this
    /// runner; `secret_forbidden`: its dispatcher may no longer name it); `message` says which
    /// and why. The attempt is not counted. Empty when the lease moved on meanwhile.
    pub async fn reject_for_secret(
        &self,
        id: Uuid,
        epoch: i64,
        token_hash: &[u8],
        reason: &str,
        message: &str,
    ) -> Result<Vec<Moved>> {
        self.query(
            sql::LEASE_REJECT_SECRET,
            &[&id, &epoch, &token_hash, &message, &reason],
        )
        .await?
        .iter()
        .map(rows::moved)
        .collect()
    }

    /// Park again jobs the runner with this token just leased, giving their attempts back.
    pub async fn give_back(
        &self,
        jobs: &[(Uuid, i64)],
        token_hash: &[u8],
        why: GiveBack,
    ) -> Result<Vec<Moved>> {
        let ids: Vec<Uuid> = jobs.iter().map(|j| j.0).collect();
        let epochs: Vec<i64> = jobs.iter().map(|j| j.1).collect();
        let reason = why.reason();
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 4] =
            [&ids, &epochs, &token_hash, &reason];
        // Its ephemeral runner's row is touched after its jobs (docs/design.md, "One lock
        // order"): a deadlock it loses runs again.
        self.retrying_conflicts(|| self.query(sql::LEASE_GIVE_BACK, &params))
            .await?
            .iter()
            .map(rows::moved)
            .collect()
    }

    /// Re-judge every live runner's version with `judge` (true: outdated) and store the
    /// verdicts that changed. Returns how many changed.
    pub async fn rejudge_versions(&self, judge: impl Fn(Option<&str>) -> bool) -> Result<u64> {
        let rows = self.query(sql::RUNNERS_VERSIONS, &[]).await?;
        let (mut ids, mut flags) = (Vec::new(), Vec::new());
        for r in &rows {
            let verdict = judge(r.get("version"));
            if verdict != r.get::<_, bool>("outdated") {
                ids.push(r.get::<_, Uuid>("id"));
                flags.push(verdict);
            }
        }
        if ids.is_empty() {
            return Ok(0);
        }
        self.execute(sql::RUNNERS_SET_OUTDATED, &[&ids, &flags])
            .await
    }

    /// Revoke runners unseen (or never seen) for `ceiling_ms`, with a revocation's effect on
    /// their jobs, in one transaction.
    pub async fn sweep_dormant_runners(&self, batch: i64, ceiling_ms: i64) -> Result<Vec<Moved>> {
        self.reap_runners(sql::SWEEP_DORMANT_RUNNERS, batch, ceiling_ms)
            .await
    }

    /// Run `statement` (which revokes up to `batch` runners unseen for `unseen_ms` and returns
    /// their ids), then re-park or reject their jobs, in one transaction.
    pub(super) async fn reap_runners(
        &self,
        statement: &'static str,
        batch: i64,
        unseen_ms: i64,
    ) -> Result<Vec<Moved>> {
        self.bounded(sql::name(statement), async {
            let mut client = self.client().await?;
            self.count(3);
            let tx = client.transaction().await?;
            let reap = tx.prepare_cached(statement).await.at(statement)?;
            let ids: Vec<Uuid> = tx
                .query(&reap, &[&batch, &unseen_ms])
                .await
                .at(statement)?
                .iter()
                .map(|r| r.get(0))
                .collect();
            let jobs = tx
                .prepare_cached(sql::RUNNER_REVOKE_JOBS)
                .await
                .at(sql::RUNNER_REVOKE_JOBS)?;
            let mut out = Vec::new();
            for id in &ids {
                self.count(1);
                for row in tx.query(&jobs, &[id]).await.at(sql::RUNNER_REVOKE_JOBS)? {
                    out.push(rows::moved(&row)?);
                }
            }
            tx.commit().await?;
            client.release();
            Ok(out)
        })
        .await
    }
}

/// Why jobs a lease call took are given back (`lease_give_back.sql`'s state event reason).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GiveBack {
    /// Their secrets cannot be opened on this replica.
    SecretsUnavailable,
    /// The caller is gone: its connection closed (or its handler was dropped) before the answer
    /// was written (v1.4, "A lease to a caller that is gone").
    CallerGone,
}

impl GiveBack {
    pub fn reason(self) -> &'static str {
        match self {
            GiveBack::SecretsUnavailable => "secrets_unavailable",
            GiveBack::CallerGone => "caller_gone",
        }
    }
}
