//! Store records shaped for the wire (a job's own view is beside the dispatch check, in
//! `jobs.rs`: the API's two ends of a job field).
//!
//! Invariant: the wire's closed vocabularies mirror the domain's (job state) and the store's
//! (presence, target status) exactly; a value the wire cannot name is a bug, logged, and shown
//! as the most conservative value rather than crashing the answer.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::domain::state::{JobState, Outcome};
use crate::store::feed::{Delivery, FeedEvent, Webhook};
use crate::store::records::{Claimed, Event, RepoTarget, Runner, SecretInfo};
use crate::wire;

/// The wire's name of a domain job state.
pub fn job_state(s: JobState) -> wire::JobState {
    match s {
        JobState::Parked => wire::JobState::Parked,
        JobState::Leased => wire::JobState::Leased,
        JobState::Completed => wire::JobState::Completed,
        JobState::Failed => wire::JobState::Failed,
        JobState::Cancelled => wire::JobState::Cancelled,
        JobState::Rejected => wire::JobState::Rejected,
    }
}

/// The wire's name of a domain outcome.
pub fn outcome(o: Outcome) -> wire::Outcome {
    match o {
        Outcome::Succeeded => wire::Outcome::Succeeded,
        Outcome::Failed => wire::Outcome::Failed,
        Outcome::Cancelled => wire::Outcome::Cancelled,
        Outcome::Rejected => wire::Outcome::Rejected,
    }
}

/// A stored presence (`runner_presence()` in SQL) for the wire; `dormant` if it is none of the
/// three (a bug, logged).
fn presence(s: &str) -> wire::Presence {
    wire::Presence::parse(s).unwrap_or_else(|| {
        tracing::error!(presence = s, "a runner presence the wire cannot name");
        wire::Presence::Dormant
    })
}

/// A stored target status for the wire; `revoked` (never usable) if it is none of the three
/// (a bug, logged).
fn target_status(s: &str) -> wire::TargetStatus {
    wire::TargetStatus::parse(s).unwrap_or_else(|| {
        tracing::error!(
            status = s,
            "a repository target status the wire cannot name"
        );
        wire::TargetStatus::Revoked
    })
}

/// A stored source (validated at dispatch, stored as [`wire::Source`] serialises); `None`, and
/// an error logged, if it does not read back (a bug).
pub(super) fn source(stored: Value) -> Option<wire::Source> {
    serde_json::from_value(stored)
        .map_err(|e| tracing::error!(error = %e, "a stored job source does not read back"))
        .ok()
}

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
        presence: presence(&r.presence),
        last_seen_at: r.last_seen_at,
        created_at: r.created_at,
        approved_by: Some(r.approved_by),
        ephemeral: r.ephemeral,
        outdated: r.outdated,
        exclusive: r.exclusive,
        repo_targets: r.repo_targets.into_iter().map(repo_target).collect(),
        current_jobs: r.current_jobs,
    }
}

pub fn repo_target(t: RepoTarget) -> wire::RepoTarget {
    wire::RepoTarget {
        id: t.id,
        provider: t.provider,
        repository: t.repository,
        label: t.label,
        status: target_status(&t.status),
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

/// A leased job as its runner sees it: `secrets` are the opened values of the secrets it
/// names, `credential` the opened `source.credential_secret` (only ever in `source`).
pub fn leased(
    c: Claimed,
    lease_ttl_ms: u64,
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
        lease_ttl_ms,
        heartbeat_interval_ms: lease_ttl_ms / 3,
        secrets: wire::SecretValues(secrets),
        source: c
            .source
            .and_then(source)
            .map(|s| leased_source(s, credential)),
    }
}

/// The stored source with the credential's value in place of its name.
fn leased_source(s: wire::Source, credential: Option<String>) -> wire::LeasedSource {
    wire::LeasedSource {
        provider: s.provider,
        repository: s.repository,
        commit_sha: s.commit_sha,
        git_ref: s.git_ref,
        credential: credential.map(wire::Redacted),
    }
}

pub fn event(e: Event) -> wire::Event {
    wire::Event {
        seq: e.seq,
        at: e.at,
        kind: e.kind,
        data: e.data,
    }
}

/// A feed event as `GET /v1/events` answers it (`hub::webhooks::event_json` is the same for a
/// delivery's body).
pub fn feed_event(e: &FeedEvent, workspace: &str) -> wire::FeedEvent {
    wire::FeedEvent {
        cursor: e.position.encode(workspace),
        job_id: e.position.job,
        seq: e.position.seq,
        kind: e.kind.clone(),
        data: e.data.clone(),
        at: e.at,
    }
}

/// A webhook; its secret only when `secret` (the call that created it).
pub fn webhook(w: Webhook, secret: bool) -> wire::Webhook {
    wire::Webhook {
        status: if w.disabled_at.is_some() {
            "disabled"
        } else {
            "active"
        }
        .to_owned(),
        secret: secret.then_some(w.secret),
        name: w.name,
        url: w.url,
        kinds: w.kinds,
        states: w.states,
        disabled_at: w.disabled_at,
        disabled_reason: w.disabled_reason,
        created_at: w.created_at,
        updated_at: w.updated_at,
    }
}

/// A row of a webhook's delivery log.
pub fn delivery(d: Delivery, workspace: &str) -> wire::WebhookDelivery {
    let event = feed_event(&d.event, workspace);
    wire::WebhookDelivery {
        id: d.id,
        event_cursor: event.cursor.clone(),
        next_try_at: (d.status == "pending").then_some(d.next_at),
        status: d.status,
        attempts: d.attempts,
        last_status_code: d.last_status,
        last_error: d.last_error,
        last_attempt_at: d.last_at,
        redelivery_of: d.redelivery_of,
        created_at: d.created_at,
        event,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    #[test]
    fn wire_job_states_are_the_domain_states() {
        let domain: BTreeSet<&str> = JobState::ALL.iter().map(|s| s.as_str()).collect();
        let wire: BTreeSet<&str> = wire::JobState::ALL.iter().map(|s| s.as_str()).collect();
        assert_eq!(domain, wire);
        for s in JobState::ALL {
            let w = job_state(s);
            assert_eq!(w.as_str(), s.as_str());
            assert_eq!(w.is_terminal(), s.is_terminal(), "{s:?}");
            assert_eq!(serde_json::to_value(w).unwrap(), s.as_str());
        }
    }

    /// Each value's JSON and `Display` are the contract's string, in the contract's order.
    fn strings<T: serde::Serialize + std::fmt::Display>(all: &[T]) -> Vec<String> {
        all.iter()
            .map(|v| {
                let json = serde_json::to_string(v).unwrap();
                assert_eq!(json, format!("\"{v}\""));
                v.to_string()
            })
            .collect()
    }

    #[test]
    fn vocabularies_serialise_to_the_contract_strings() {
        assert_eq!(
            strings(wire::JobState::ALL),
            [
                "parked",
                "leased",
                "completed",
                "failed",
                "cancelled",
                "rejected"
            ]
        );
        assert_eq!(strings(wire::Presence::ALL), ["online", "dormant", "never"]);
        assert_eq!(
            strings(wire::Outcome::ALL),
            Outcome::ALL.map(|o| o.as_str().to_owned())
        );
        for o in Outcome::ALL {
            assert_eq!(outcome(o).as_str(), o.as_str());
        }
        assert_eq!(
            strings(wire::TargetStatus::ALL),
            ["pending", "approved", "revoked"]
        );
        assert!(serde_json::from_str::<wire::Presence>("\"away\"").is_err());
        assert_eq!(wire::JobState::Completed, "completed");
        assert!("approved" == wire::TargetStatus::Approved);
    }
}
