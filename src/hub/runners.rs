//! What the API asks about runners and the credentials around them: authenticating a key or a
//! runner token, pairing and enrolling runners, their own heartbeat and advertisement, listing
//! them, approving their repository targets, a pool's counts and a dispatch's preflight, API
//! keys and join codes. None of these parks or moves a job (revocation, which does, is in
//! `transitions.rs`), so none wakes anyone.
//!
//! The calls on every request's path (authentication, the lease call's advertisement) hand
//! back the store's own future, so going through the hub costs them no await of its own.

use std::future::Future;

use uuid::Uuid;

use super::Hub;
use crate::store::queues::PreflightCounts;
use crate::store::records::{ApiKey, JoinGrant, PoolCounts, RepoTarget, Runner, RunnerIdentity};
use crate::store::{AdvertisedTargets, LeaseCaller, NewRunner, Result};

impl Hub {
    /// The live API key with this hash.
    ///
    /// # Errors
    /// The database failed. `Ok(None)`: no live key has it.
    pub fn api_key<'a>(
        &'a self,
        hash: &'a [u8],
    ) -> impl Future<Output = Result<Option<ApiKey>>> + 'a {
        self.store.key_by_hash(hash)
    }

    /// The live runner with this token hash.
    ///
    /// # Errors
    /// The database failed. `Ok(None)`: no live runner has it.
    pub fn runner_by_token<'a>(
        &'a self,
        hash: &'a [u8],
    ) -> impl Future<Output = Result<Option<RunnerIdentity>>> + 'a {
        self.store.runner_by_token(hash)
    }

    /// A lease call's advertisement (version, repository targets), recorded before its version
    /// is judged.
    ///
    /// # Errors
    /// The database failed. `Ok(None)`: the token is not live.
    pub fn advertise_for_lease<'a>(
        &'a self,
        token_hash: &'a [u8],
        version: Option<&'a str>,
        outdated: bool,
        targets: &'a AdvertisedTargets,
    ) -> impl Future<Output = Result<Option<LeaseCaller>>> + 'a {
        self.store
            .advertise_for_lease(token_hash, version, outdated, targets)
    }

    /// Pair a runner with an API key.
    ///
    /// # Errors
    /// The database failed.
    pub async fn pair_runner(&self, runner: &NewRunner) -> Result<Runner> {
        self.store.insert_runner(runner).await
    }

    /// Enrol a runner with a join code: the code burned and the runner `make` describes
    /// inserted, both or neither.
    ///
    /// # Errors
    /// The database failed. `Ok(None)`: the code is unknown, used or expired.
    pub async fn enroll(
        &self,
        code_hash: &[u8],
        make: impl FnOnce(&JoinGrant) -> NewRunner,
    ) -> Result<Option<Runner>> {
        self.store.enroll(code_hash, make).await
    }

    /// A runner by id, whoever owns it (the caller checks it may see it).
    ///
    /// # Errors
    /// The database failed. `Ok(None)`: no such runner.
    pub async fn runner(&self, id: Uuid) -> Result<Option<Runner>> {
        self.store.runner(id).await
    }

    /// The runners `owner` owns in `workspace`.
    ///
    /// # Errors
    /// The database failed.
    pub async fn runners_by_owner(&self, workspace: &str, owner: &str) -> Result<Vec<Runner>> {
        self.store.runners_by_owner(workspace, owner).await
    }

    /// Every runner of `workspace`.
    ///
    /// # Errors
    /// The database failed.
    pub async fn runners_in_workspace(&self, workspace: &str) -> Result<Vec<Runner>> {
        self.store.runners_in_workspace(workspace).await
    }

    /// Record the repository targets a runner advertises (new ones `pending`).
    ///
    /// # Errors
    /// The database failed.
    pub async fn advertise_repo_targets(
        &self,
        id: Uuid,
        targets: &AdvertisedTargets,
    ) -> Result<Vec<RepoTarget>> {
        self.store.advertise_repo_targets(id, targets).await
    }

    /// A runner's own heartbeat: what it says of itself recorded, and it marked seen.
    ///
    /// # Errors
    /// The database failed. `Ok(None)`: the runner is gone.
    pub async fn runner_heartbeat(
        &self,
        id: Uuid,
        version: Option<&str>,
        capabilities: Option<&[String]>,
        exclusive: Option<&[String]>,
        capacity: Option<i32>,
        outdated: bool,
    ) -> Result<Option<Runner>> {
        self.store
            .runner_heartbeat(id, version, capabilities, exclusive, capacity, outdated)
            .await
    }

    /// Of the jobs a runner says it runs (id, epoch), those it should stop: not leased to it
    /// at that epoch any more.
    ///
    /// # Errors
    /// The database failed.
    pub async fn not_running(&self, runner_id: Uuid, running: &[(Uuid, i64)]) -> Result<Vec<Uuid>> {
        self.store.not_running(runner_id, running).await
    }

    /// Approve or revoke a runner's repository target.
    ///
    /// # Errors
    /// The database failed. `Ok(false)`: the runner has no such target.
    pub async fn set_repo_target_status(
        &self,
        runner: Uuid,
        target: Uuid,
        status: &str,
    ) -> Result<bool> {
        self.store
            .set_repo_target_status(runner, target, status)
            .await
    }

    /// The counts of `GET /v1/pool`: `subject`'s personal pool and the workspace's.
    ///
    /// # Errors
    /// The database failed.
    pub async fn pool_counts(
        &self,
        subject: &str,
        ws_owner: &str,
        workspace: &str,
    ) -> Result<PoolCounts> {
        self.store.pool_counts(subject, ws_owner, workspace).await
    }

    /// Why a parked job waits (v1.4 "Why a job waits"); `None` when it does not.
    ///
    /// # Errors
    /// The database failed.
    pub async fn job_waiting(&self, id: Uuid, workspace: &str) -> Result<Option<String>> {
        self.store.job_waiting(id, workspace).await
    }

    /// The runner counts a dispatch's preflight judges.
    ///
    /// # Errors
    /// The database failed.
    pub async fn preflight(
        &self,
        workspace: &str,
        owner: Option<&str>,
        runner_id: Option<Uuid>,
        any: bool,
        required: &[String],
        source_key: Option<&str>,
    ) -> Result<PreflightCounts> {
        self.store
            .preflight(workspace, owner, runner_id, any, required, source_key)
            .await
    }

    /// Mint an API key of `workspace` for `subject` (its hash only is kept).
    ///
    /// # Errors
    /// The database failed.
    pub async fn insert_key(
        &self,
        id: Uuid,
        workspace: &str,
        subject: &str,
        admin: bool,
        hash: &[u8],
    ) -> Result<()> {
        self.store
            .insert_key(id, workspace, subject, admin, hash)
            .await
    }

    /// Revoke an API key of `workspace`.
    ///
    /// # Errors
    /// The database failed. `Ok(false)`: no such live key in the workspace.
    pub async fn revoke_key(&self, id: Uuid, workspace: &str) -> Result<bool> {
        self.store.revoke_key(id, workspace).await
    }

    /// Record a join code (its hash, and its short join URL's), live for `ttl_s`; answers when
    /// it expires.
    ///
    /// # Errors
    /// The database failed.
    pub async fn insert_join_code(
        &self,
        hash: &[u8],
        grant: &JoinGrant,
        ttl_s: i64,
        url: Option<(&[u8], &[u8])>,
    ) -> Result<chrono::DateTime<chrono::Utc>> {
        self.store.insert_join_code(hash, grant, ttl_s, url).await
    }

    /// Burn a short join URL: its sealed connect payload, once.
    ///
    /// # Errors
    /// The database failed. `Ok(None)`: unknown, used or expired.
    pub async fn burn_join_url(&self, url_hash: &[u8]) -> Result<Option<Vec<u8>>> {
        self.store.burn_join_url(url_hash).await
    }
}
