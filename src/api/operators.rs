//! Operator calls (API key): pairing and revoking runners in both tiers, keys, join codes,
//! pool state and preflight. The owner is always derived from the caller.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use uuid::Uuid;

use super::auth::Operator;
use super::error::{ApiError, ApiResult};
use super::extract::{Body, PathId};
use super::validate;
use super::views;
use super::AppState;
use crate::domain::credentials::{Kind, Secret};
use crate::domain::{owner, version};
use crate::store::records::JoinGrant;
use crate::store::{AdvertisedTargets, NewRunner};
use crate::wire::{self, CreateRunner, Role, Target, Tier};

pub async fn create_personal_runner(
    State(st): State<Arc<AppState>>,
    Operator(key): Operator,
    Body(req): Body<CreateRunner>,
) -> ApiResult<(StatusCode, Json<wire::RunnerWithToken>)> {
    let owner = key.subject.clone();
    pair(&st, &key, owner, req).await
}

pub async fn create_workspace_runner(
    State(st): State<Arc<AppState>>,
    op: Operator,
    Body(req): Body<CreateRunner>,
) -> ApiResult<(StatusCode, Json<wire::RunnerWithToken>)> {
    op.require_admin()?;
    let owner = owner::workspace_owner(&op.0.workspace);
    pair(&st, &op.0, owner, req).await
}

/// A new runner's description (pairing's body, or enrolment's but for the code), validated
/// (every error names its field) and normalised against the vocabulary.
pub(super) struct Described {
    req: CreateRunner,
    capacity: i32,
    capabilities: Vec<String>,
    exclusive: Vec<String>,
    targets: AdvertisedTargets,
    outdated: bool,
}

impl Described {
    pub(super) fn new(st: &AppState, req: CreateRunner) -> ApiResult<Self> {
        validate::text("label", &req.label, 128)?;
        validate::opt_text("os", req.os.as_deref(), 64)?;
        validate::opt_text("version", req.version.as_deref(), 64)?;
        let capacity = validate::range("capacity", req.capacity, 1, 256, 1)? as i32;
        let (capabilities, exclusive) = st.vocabulary.advertised_with_exclusive(
            req.capabilities.as_deref().unwrap_or(&[]),
            req.exclusive.as_deref().unwrap_or(&[]),
        );
        let targets = validate::repo_targets(req.repo_targets.as_deref())?;
        let outdated = version::is_outdated(
            req.version.as_deref(),
            st.limits.min_runner_version.as_ref(),
        );
        Ok(Self {
            req,
            capacity,
            capabilities,
            exclusive,
            targets,
            outdated,
        })
    }

    /// The runner it becomes under `grant` (a join code's, or a pairing key's), holding the
    /// token hashed to `token_hash`; `seen` when it counts as seen now (enrolment).
    pub(super) fn runner(self, grant: &JoinGrant, token_hash: Vec<u8>, seen: bool) -> NewRunner {
        NewRunner {
            id: Uuid::now_v7(),
            owner: grant.owner.clone(),
            workspace: grant.workspace.clone(),
            label: self.req.label,
            os: self.req.os,
            version: self.req.version,
            capabilities: self.capabilities,
            capacity: self.capacity,
            token_hash,
            approved_by: grant.approved_by.clone(),
            ephemeral: grant.ephemeral,
            seen,
            outdated: self.outdated,
            exclusive: self.exclusive,
            repo_targets: self.targets,
        }
    }
}

async fn pair(
    st: &AppState,
    key: &crate::store::records::ApiKey,
    owner: String,
    req: CreateRunner,
) -> ApiResult<(StatusCode, Json<wire::RunnerWithToken>)> {
    let described = Described::new(st, req)?;
    // The key pairing it grants what a join code would.
    let grant = JoinGrant {
        workspace: key.workspace.clone(),
        owner,
        approved_by: key.subject.clone(),
        ephemeral: false,
    };
    let token = Secret::generate(Kind::Runner);
    let runner = st
        .hub
        .pair_runner(&described.runner(&grant, token.hash().to_vec(), false))
        .await?;
    Ok(created(runner, &token))
}

/// `201` of pairing and enrolment: the new runner, and its token this once.
pub(super) fn created(
    runner: crate::store::records::Runner,
    token: &Secret,
) -> (StatusCode, Json<wire::RunnerWithToken>) {
    (
        StatusCode::CREATED,
        Json(wire::RunnerWithToken {
            runner: views::runner(runner),
            token: token.reveal().to_owned(),
        }),
    )
}

pub async fn list_personal_runners(
    State(st): State<Arc<AppState>>,
    Operator(key): Operator,
) -> ApiResult<Json<wire::RunnerList>> {
    let runners = st
        .hub
        .runners_by_owner(&key.workspace, &key.subject)
        .await?;
    Ok(Json(wire::RunnerList {
        runners: runners.into_iter().map(views::runner).collect(),
    }))
}

pub async fn list_workspace_runners(
    State(st): State<Arc<AppState>>,
    Operator(key): Operator,
) -> ApiResult<Json<wire::RunnerList>> {
    let runners = st.hub.runners_in_workspace(&key.workspace).await?;
    Ok(Json(wire::RunnerList {
        runners: runners.into_iter().map(views::runner).collect(),
    }))
}

pub async fn revoke_personal_runner(
    State(st): State<Arc<AppState>>,
    Operator(key): Operator,
    PathId(id): PathId,
) -> ApiResult<StatusCode> {
    revoke(&st, id, &key.subject, &key.workspace).await
}

pub async fn revoke_workspace_runner(
    State(st): State<Arc<AppState>>,
    op: Operator,
    PathId(id): PathId,
) -> ApiResult<StatusCode> {
    op.require_admin()?;
    revoke(
        &st,
        id,
        &owner::workspace_owner(&op.0.workspace),
        &op.0.workspace,
    )
    .await
}

async fn revoke(st: &AppState, id: Uuid, owner: &str, workspace: &str) -> ApiResult<StatusCode> {
    st.hub
        .revoke_runner(id, owner, workspace)
        .await?
        .ok_or(ApiError::NotFound)?;
    Ok(StatusCode::NO_CONTENT)
}

pub async fn create_key(
    State(st): State<Arc<AppState>>,
    op: Operator,
    Body(req): Body<wire::CreateKey>,
) -> ApiResult<(StatusCode, Json<wire::CreatedKey>)> {
    op.require_admin()?;
    if !owner::is_valid_name(&req.subject) {
        return Err(ApiError::bad(
            "subject: must be 1..128 of A-Z a-z 0-9 . _ @ -, starting alphanumeric",
        ));
    }
    let key = Secret::generate(Kind::ApiKey);
    let id = Uuid::now_v7();
    st.hub
        .insert_key(
            id,
            &op.0.workspace,
            &req.subject,
            req.role == Role::Admin,
            key.hash(),
        )
        .await?;
    Ok((
        StatusCode::CREATED,
        Json(wire::CreatedKey {
            id,
            key: key.reveal().to_owned(),
        }),
    ))
}

pub async fn revoke_key(
    State(st): State<Arc<AppState>>,
    op: Operator,
    PathId(id): PathId,
) -> ApiResult<StatusCode> {
    op.require_admin()?;
    if st.hub.revoke_key(id, &op.0.workspace).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::NotFound)
    }
}

pub async fn create_join_code(
    State(st): State<Arc<AppState>>,
    op: Operator,
    Body(req): Body<wire::CreateJoinCode>,
) -> ApiResult<(StatusCode, Json<wire::JoinCode>)> {
    let ttl_s = validate::range("ttl_s", req.ttl_s, 1, 600, 600)?;
    let owner = match req.tier {
        Tier::Personal => op.0.subject.clone(),
        Tier::Workspace => {
            op.require_admin()?;
            owner::workspace_owner(&op.0.workspace)
        }
    };
    let code = Secret::generate(Kind::JoinCode);
    let grant = JoinGrant {
        workspace: op.0.workspace.clone(),
        owner,
        approved_by: op.0.subject.clone(),
        ephemeral: req.ephemeral.unwrap_or(false),
    };
    let public_urls = &st.limits.public_url;
    let connect = (!public_urls.is_empty()).then(|| {
        wire::connect::Connect {
            code: code.reveal().to_owned(),
            servers: public_urls.clone(),
            pin: st
                .certificates
                .as_ref()
                .and_then(|c| c.self_signed_pin())
                .map(|p| p.to_string()),
        }
        .encode()
    });
    let join_url = super::join::mint(public_urls, connect.as_deref());
    let expires_at = st
        .hub
        .insert_join_code(
            code.hash(),
            &grant,
            ttl_s,
            join_url.as_ref().map(|u| (&u.hash[..], &u.sealed[..])),
        )
        .await?;
    Ok((
        StatusCode::CREATED,
        Json(wire::JoinCode {
            code: code.reveal().to_owned(),
            expires_at,
            connect,
            url: join_url.map(|u| u.url),
        }),
    ))
}

pub async fn pool(
    State(st): State<Arc<AppState>>,
    Operator(key): Operator,
) -> ApiResult<Json<wire::Pool>> {
    let c = st
        .hub
        .pool_counts(
            &key.subject,
            &owner::workspace_owner(&key.workspace),
            &key.workspace,
        )
        .await?;
    Ok(Json(wire::Pool {
        runners: wire::PoolRunners {
            online: c.online,
            dormant: c.dormant,
            never: c.never,
        },
        slots: wire::PoolSlots {
            capacity: c.slot_capacity,
            active: c.slot_active,
        },
        jobs: wire::PoolJobs {
            parked: c.parked,
            leased: c.leased,
        },
    }))
}

/// The named runner a target points at (`None` for a pool). A runner the caller may not target
/// (another workspace's, or another subject's personal runner) is 404.
pub(crate) async fn resolve_target(
    st: &AppState,
    key: &crate::store::records::ApiKey,
    target: &Target,
) -> ApiResult<Option<crate::store::records::Runner>> {
    match target {
        Target::Pool { .. } => Ok(None),
        Target::Runner { runner_id } => {
            let runner = st.hub.runner(*runner_id).await?.ok_or(ApiError::NotFound)?;
            let mine = runner.owner == key.subject
                || runner.owner == owner::workspace_owner(&key.workspace);
            if runner.workspace != key.workspace || !mine {
                return Err(ApiError::NotFound);
            }
            Ok(Some(runner))
        }
    }
}

pub async fn preflight(
    State(st): State<Arc<AppState>>,
    Operator(key): Operator,
    Body(req): Body<wire::Preflight>,
) -> ApiResult<Json<wire::PreflightReport>> {
    let required = st
        .vocabulary
        .required(req.required_capabilities.as_deref().unwrap_or(&[]))
        .map_err(|bad| {
            ApiError::bad(format!(
                "required_capabilities: '{bad}' is not a known capability name"
            ))
        })?;
    let runner = resolve_target(&st, &key, &req.target).await?;
    let runner_id = runner.as_ref().map(|r| r.id);
    let (owner, any) = match &req.target {
        Target::Pool {
            pool: wire::PoolName::Workspace,
        } => (Some(owner::workspace_owner(&key.workspace)), false),
        Target::Pool {
            pool: wire::PoolName::Personal,
        } => (Some(key.subject.clone()), false),
        Target::Pool {
            pool: wire::PoolName::Any,
        } => (Some(key.subject.clone()), true),
        Target::Runner { .. } => (None, false),
    };
    let source_key = match req.source {
        None => None,
        Some(v) => Some(validate::source("source", v)?.1),
    };
    let c = st
        .hub
        .preflight(
            &key.workspace,
            owner.as_deref(),
            runner_id,
            any,
            &required,
            source_key.as_deref(),
        )
        .await?;
    let min = || {
        st.limits
            .min_runner_version
            .as_ref()
            .map_or_else(|| "?".to_owned(), ToString::to_string)
    };
    let finding = |code: &str, message: String| wire::Finding {
        code: code.into(),
        message,
    };
    let mut blockers = Vec::new();
    let mut warnings = Vec::new();
    if c.current == 0 {
        blockers.push(finding(
            "no_matching_runner",
            "no paired, up-to-date runner of this target advertises the required capabilities"
                .into(),
        ));
        if c.matching > 0 {
            warnings.push(finding(
                "runners_outdated",
                format!(
                    "{} matching runner(s), all below the minimum version {}; upgrade them",
                    c.matching,
                    min()
                ),
            ));
        }
    } else if source_key.is_some() && c.usable == 0 {
        blockers.push(finding(
            "no_approved_target",
            "no up-to-date matching runner of this target holds an approved repository target \
             for this source; approve one with `leasehold runners approve`"
                .into(),
        ));
        if c.sourced > 0 {
            warnings.push(finding(
                "runners_outdated",
                format!(
                    "{} runner(s) approved for this source, all below the minimum version {}",
                    c.sourced,
                    min()
                ),
            ));
        }
    } else if c.online == 0 {
        warnings.push(finding(
            "runners_offline",
            format!("{} matching runner(s), none online now", c.usable),
        ));
    }
    Ok(Json(wire::PreflightReport {
        ok: blockers.is_empty(),
        blockers,
        warnings,
    }))
}
