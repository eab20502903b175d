//! Operator calls (API key): pairing and revoking runners in both tiers, keys, join codes,
//! pool state and preflight. The owner is always derived from the caller.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use uuid::Uuid;

use super::error::{ApiError, ApiResult};
use super::extract::{Body, Operator, PathId};
use super::validate;
use super::views;
use super::AppState;
use crate::domain::credentials::{Kind, Secret};
use crate::domain::{owner, version};
use crate::store::NewRunner;
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

async fn pair(
    st: &AppState,
    key: &crate::domain::records::ApiKey,
    owner: String,
    req: CreateRunner,
) -> ApiResult<(StatusCode, Json<wire::RunnerWithToken>)> {
    validate::text("label", &req.label, 128)?;
    validate::opt_text("os", req.os.as_deref(), 64)?;
    validate::opt_text("version", req.version.as_deref(), 64)?;
    let capacity = validate::range("capacity", req.capacity, 1, 256, 1)? as i32;
    let capabilities = st
        .vocabulary
        .advertised(req.capabilities.as_deref().unwrap_or(&[]));
    let targets = validate::repo_targets(req.repo_targets.as_deref())?;
    let outdated = version::is_outdated(
        req.version.as_deref(),
        st.hub.config.min_runner_version.as_ref(),
    );
    let token = Secret::generate(Kind::Runner);
    let mut runner = st
        .hub
        .store
        .insert_runner(&NewRunner {
            id: Uuid::now_v7(),
            owner,
            workspace: key.workspace.clone(),
            label: req.label,
            os: req.os,
            version: req.version,
            capabilities,
            capacity,
            token_hash: token.hash().to_vec(),
            approved_by: key.subject.clone(),
            ephemeral: false,
            seen: false,
            outdated,
        })
        .await?;
    runner.repo_targets = st
        .hub
        .store
        .advertise_repo_targets(runner.id, &targets)
        .await?;
    Ok((
        StatusCode::CREATED,
        Json(wire::RunnerWithToken {
            runner: views::runner(runner),
            token: token.reveal().to_owned(),
        }),
    ))
}

pub async fn list_personal_runners(
    State(st): State<Arc<AppState>>,
    Operator(key): Operator,
) -> ApiResult<Json<wire::RunnerList>> {
    let runners = st.hub.store.runners_by_owner(&key.subject).await?;
    Ok(Json(wire::RunnerList {
        runners: runners.into_iter().map(views::runner).collect(),
    }))
}

pub async fn list_workspace_runners(
    State(st): State<Arc<AppState>>,
    Operator(key): Operator,
) -> ApiResult<Json<wire::RunnerList>> {
    let runners = st.hub.store.runners_in_workspace(&key.workspace).await?;
    Ok(Json(wire::RunnerList {
        runners: runners.into_iter().map(views::runner).collect(),
    }))
}

pub async fn revoke_personal_runner(
    State(st): State<Arc<AppState>>,
    Operator(key): Operator,
    PathId(id): PathId,
) -> ApiResult<StatusCode> {
    revoke(&st, id, &key.subject).await
}

pub async fn revoke_workspace_runner(
    State(st): State<Arc<AppState>>,
    op: Operator,
    PathId(id): PathId,
) -> ApiResult<StatusCode> {
    op.require_admin()?;
    revoke(&st, id, &owner::workspace_owner(&op.0.workspace)).await
}

async fn revoke(st: &AppState, id: Uuid, owner: &str) -> ApiResult<StatusCode> {
    let moved = st
        .hub
        .store
        .revoke_runner(id, owner)
        .await?
        .ok_or(ApiError::NotFound)?;
    st.hub.after_moves(&moved);
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
        .store
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
    if st.hub.store.revoke_key(id, &op.0.workspace).await? {
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
    let expires_at = st
        .hub
        .store
        .insert_join_code(
            code.hash(),
            &op.0.workspace,
            &owner,
            &op.0.subject,
            req.ephemeral.unwrap_or(false),
            ttl_s,
        )
        .await?;
    Ok((
        StatusCode::CREATED,
        Json(wire::JoinCode {
            code: code.reveal().to_owned(),
            expires_at,
        }),
    ))
}

pub async fn pool(
    State(st): State<Arc<AppState>>,
    Operator(key): Operator,
) -> ApiResult<Json<wire::Pool>> {
    let c = st
        .hub
        .store
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

/// Where a target points: the queue owner and, for a named runner, the runner. A runner the
/// caller may not target is 404.
pub(crate) async fn resolve_target(
    st: &AppState,
    key: &crate::domain::records::ApiKey,
    target: &Target,
) -> ApiResult<(String, Option<crate::domain::records::Runner>)> {
    match target {
        Target::Pool {
            pool: Tier::Personal,
        } => Ok((key.subject.clone(), None)),
        Target::Pool {
            pool: Tier::Workspace,
        } => Ok((owner::workspace_owner(&key.workspace), None)),
        Target::Runner { runner_id } => {
            let runner = st
                .hub
                .store
                .runner(*runner_id)
                .await?
                .ok_or(ApiError::NotFound)?;
            if runner.owner != key.subject && runner.owner != owner::workspace_owner(&key.workspace)
            {
                return Err(ApiError::NotFound);
            }
            Ok((runner.owner.clone(), Some(runner)))
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
    let (owner, runner) = resolve_target(&st, &key, &req.target).await?;
    let runner_id = runner.as_ref().map(|r| r.id);
    let owner_filter = runner_id.is_none().then_some(owner.as_str());
    let (matching, usable, online) = st
        .hub
        .store
        .preflight(owner_filter, runner_id, &required)
        .await?;
    let mut blockers = Vec::new();
    let mut warnings = Vec::new();
    if usable == 0 {
        blockers.push(wire::Finding {
            code: "no_matching_runner".into(),
            message: "no paired runner of this target advertises the required capabilities".into(),
        });
    }
    if matching > 0 && usable == 0 {
        warnings.push(wire::Finding {
            code: "runners_outdated".into(),
            message: format!(
                "{matching} matching runner(s), all below the minimum version {}; upgrade them",
                st.hub
                    .config
                    .min_runner_version
                    .as_ref()
                    .map_or_else(|| "?".to_owned(), ToString::to_string)
            ),
        });
    } else if usable > 0 && online == 0 {
        warnings.push(wire::Finding {
            code: "runners_offline".into(),
            message: format!("{matching} matching runner(s), none online now"),
        });
    }
    Ok(Json(wire::PreflightReport {
        ok: blockers.is_empty(),
        blockers,
        warnings,
    }))
}
