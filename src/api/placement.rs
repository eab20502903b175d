//! Operator calls about where jobs may run: approving and revoking the repository targets a
//! runner advertised.
//!
//! Invariant: only an operator changes a target's status (a runner's own calls only add
//! `pending` ones): an admin of the runner's workspace for any of its runners, or the owner of a
//! personal runner. A member gets 403 on a workspace runner and 404 on another subject's
//! personal runner, as for every object of another owner.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::Json;
use uuid::Uuid;

use super::auth::Operator;
use super::error::{ApiError, ApiResult};
use super::views;
use super::AppState;
use crate::domain::owner;
use crate::wire;

pub async fn approve_repo_target(
    State(st): State<Arc<AppState>>,
    key: Operator,
    Path((id, target_id)): Path<(String, String)>,
) -> ApiResult<Json<wire::Runner>> {
    set_repo_target_status(&st, key, id, target_id, "approved").await
}

pub async fn revoke_repo_target(
    State(st): State<Arc<AppState>>,
    key: Operator,
    Path((id, target_id)): Path<(String, String)>,
) -> ApiResult<Json<wire::Runner>> {
    set_repo_target_status(&st, key, id, target_id, "revoked").await
}

async fn set_repo_target_status(
    st: &AppState,
    Operator(key): Operator,
    id: String,
    target_id: String,
    status: &str,
) -> ApiResult<Json<wire::Runner>> {
    let id = Uuid::try_parse(&id).map_err(|_| ApiError::bad("id: must be a UUID"))?;
    let target_id =
        Uuid::try_parse(&target_id).map_err(|_| ApiError::bad("target_id: must be a UUID"))?;
    let hub = &st.hub;
    let runner = hub.runner(id).await?.ok_or(ApiError::NotFound)?;
    if runner.workspace != key.workspace {
        return Err(ApiError::NotFound);
    }
    if runner.owner == owner::workspace_owner(&key.workspace) {
        if !key.admin {
            return Err(ApiError::Forbidden);
        }
    } else if runner.owner != key.subject && !key.admin {
        return Err(ApiError::NotFound);
    }
    if !hub.set_repo_target_status(id, target_id, status).await? {
        return Err(ApiError::NotFound);
    }
    let runner = hub.runner(id).await?.ok_or(ApiError::NotFound)?;
    tracing::info!(runner = %id, target = %target_id, status, by = %key.subject, "repository target changed");
    Ok(Json(views::runner(runner)))
}
