//! Store records shaped for the wire.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::config::Config;
use crate::domain::records::{Claimed, Event, Job, RepoTarget, Runner, SecretInfo};
use crate::wire;

pub fn runner(r: Runner) -> wire::Runner {
    wire::Runner {
        id: r.id,
        owner: r.owner,
        workspace: r.workspace,
        label: r.label,
        os: r.os,
        version: r.version,
        capabilities: r.capabilities,
        capacity: r.capacity,
        active_leases: r.active_leases,
        presence: r.presence,
        last_seen_at: r.last_seen_at,
        created_at: r.created_at,
        approved_by: Some(r.approved_by),
        ephemeral: r.ephemeral,
        outdated: r.outdated,
        exclusive: r.exclusive,
        repo_targets: r.repo_targets.into_iter().map(repo_target).collect(),
    }
}

pub fn repo_target(t: RepoTarget) -> wire::RepoTarget {
    wire::RepoTarget {
        id: t.id,
        provider: t.provider,
        repository: t.repository,
        label: t.label,
        status: t.status,
    }
}

pub fn secret(s: SecretInfo) -> wire::SecretInfo {
    wire::SecretInfo {
        name: s.name,
        runners: s.runners,
        dispatch: s.dispatch,
        created_at: s.created_at,
        updated_at: s.updated_at,
    }
}

pub fn job(j: Job) -> wire::Job {
    wire::Job {
        id: j.id,
        workspace: j.workspace,
        owner: j.owner,
        runner_id: j
            .runner_id
            .map_or_else(|| "*".to_owned(), |id| id.to_string()),
        state: j.state.as_str().to_owned(),
        kind: j.kind,
        payload: j.payload,
        required_capabilities: j.required_capabilities,
        priority: j.priority,
        epoch: j.epoch,
        attempts: j.attempts,
        max_attempts: j.max_attempts,
        created_at: j.created_at,
        leased_at: j.leased_at,
        finished_at: j.finished_at,
        result: j.result,
        error: j.error,
        provenance: j.provenance,
        billing_tenant: j.billing_tenant,
        pool: j.pool,
        secrets: j.secrets,
        source: j.source,
    }
}

/// A leased job as its runner sees it: `secrets` are the opened values of the secrets it
/// names, `credential` the opened `source.credential_secret` (only ever in `source`).
pub fn leased(
    c: Claimed,
    config: &Config,
    secrets: BTreeMap<String, String>,
    credential: Option<String>,
) -> wire::LeasedJob {
    wire::LeasedJob {
        id: c.id,
        epoch: c.epoch,
        attempt: c.attempt,
        workspace: c.workspace,
        kind: c.kind,
        payload: c.payload,
        required_capabilities: c.required_capabilities,
        lease_expires_at: c.lease_expires_at,
        lease_ttl_ms: config.lease_ttl_ms,
        heartbeat_interval_ms: config.lease_ttl_ms / 3,
        secrets: wire::SecretValues(secrets),
        source: c.source.as_ref().and_then(|v| leased_source(v, credential)),
    }
}

/// The stored source (validated at dispatch) with the credential's value in place of its name.
fn leased_source(stored: &Value, credential: Option<String>) -> Option<wire::LeasedSource> {
    let text = |k: &str| stored.get(k).and_then(Value::as_str).map(str::to_owned);
    Some(wire::LeasedSource {
        provider: text("provider")?,
        repository: text("repository")?,
        commit_sha: text("commit_sha")?,
        git_ref: text("ref"),
        credential: credential.map(wire::Redacted),
    })
}

pub fn event(e: Event) -> wire::Event {
    wire::Event {
        seq: e.seq,
        at: e.at,
        kind: e.kind,
        data: e.data,
    }
}
