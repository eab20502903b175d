//! Workspace secrets (`/v1/secrets`): admins write and delete, members list names.
//!
//! Invariants: a value is sealed with the replica's key before it reaches the store and is
//! never echoed, listed, logged or put in an error; without a key configured, writes answer 503
//! naming `LEASEHOLD_SECRETS_KEY` rather than storing anything unsealed.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use std::collections::BTreeMap;

use super::error::{ApiError, ApiResult};
use super::extract::{Body, Operator};
use super::views;
use super::AppState;
use crate::domain::sealing::{self, Sealer, MAX_VALUE_BYTES};
use crate::wire;

/// The 503 of a replica without a sealing key.
pub fn no_key() -> ApiError {
    ApiError::NotConfigured(
        "secrets are not configured on this server: set LEASEHOLD_SECRETS_KEY (32 bytes in \
         base64) on every replica"
            .into(),
    )
}

/// The replica's sealer, or the 503 that names the missing variable.
///
/// # Errors
/// No key is configured.
pub fn sealer(st: &AppState) -> ApiResult<&Sealer> {
    st.sealer.as_ref().ok_or_else(no_key)
}

/// A secret name from a path: 400 when malformed.
fn name(raw: String) -> ApiResult<String> {
    if sealing::is_valid_name(&raw) {
        Ok(raw)
    } else {
        Err(ApiError::bad("name: must match ^[A-Z_][A-Z0-9_]{0,63}$"))
    }
}

pub async fn put(
    State(st): State<Arc<AppState>>,
    op: Operator,
    Path(raw): Path<String>,
    Body(req): Body<wire::PutSecret>,
) -> ApiResult<StatusCode> {
    op.require_admin()?;
    let name = name(raw)?;
    if req.value.is_empty() || req.value.len() > MAX_VALUE_BYTES || req.value.contains('\0') {
        return Err(ApiError::bad(format!(
            "value: must be 1..{MAX_VALUE_BYTES} bytes of text without NUL"
        )));
    }
    let sealed = sealer(&st)?.seal(&op.0.workspace, &name, &req.value);
    st.hub
        .store
        .put_secret(&op.0.workspace, &name, &sealed)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

pub async fn list(
    State(st): State<Arc<AppState>>,
    Operator(key): Operator,
) -> ApiResult<Json<wire::SecretList>> {
    let secrets = st.hub.store.secrets(&key.workspace).await?;
    Ok(Json(wire::SecretList {
        secrets: secrets.into_iter().map(views::secret).collect(),
    }))
}

pub async fn delete(
    State(st): State<Arc<AppState>>,
    op: Operator,
    Path(raw): Path<String>,
) -> ApiResult<StatusCode> {
    op.require_admin()?;
    let name = name(raw)?;
    if st.hub.store.delete_secret(&op.0.workspace, &name).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::NotFound)
    }
}

/// What a lease finds for one job's named secrets.
pub enum ForLease {
    /// Every named secret, opened, and the source's credential apart (it never goes in
    /// `secrets`).
    Values(BTreeMap<String, String>, Option<String>),
    /// This named secret does not exist (the job is rejected `secret_missing`).
    Missing(String),
}

/// Open the secrets `names` of `workspace` for a lease, in one statement; missing names are
/// simply absent from the answer.
///
/// # Errors
/// 503 naming the variable when no key is configured or a value opens with no configured
/// key; the database failed.
pub async fn open_for_lease(
    st: &AppState,
    workspace: &str,
    names: &[String],
) -> ApiResult<BTreeMap<String, String>> {
    if names.is_empty() {
        return Ok(BTreeMap::new());
    }
    let sealer = sealer(st)?;
    let sealed = st.hub.store.sealed_secrets(workspace, names).await?;
    let mut opened = BTreeMap::new();
    for (name, value) in &sealed {
        let plain = sealer.open(workspace, name, value).map_err(|_| {
            tracing::error!(%workspace, secret = %name, "a secret does not open with the configured key(s)");
            ApiError::NotConfigured(
                "a secret does not open with LEASEHOLD_SECRETS_KEY (or LEASEHOLD_SECRETS_OLD_KEY); \
                 was the key rotated without keeping the old one?"
                    .into(),
            )
        })?;
        opened.insert(name.clone(), plain);
    }
    Ok(opened)
}

/// One job's share of the opened secrets: those it names, and its source's credential.
pub fn pick(
    opened: &BTreeMap<String, String>,
    names: &[String],
    credential: Option<&str>,
) -> ForLease {
    if let Some(missing) = names
        .iter()
        .map(String::as_str)
        .chain(credential)
        .find(|n| !opened.contains_key(*n))
    {
        return ForLease::Missing(missing.to_owned());
    }
    let values = names
        .iter()
        .map(|n| (n.clone(), opened[n].clone()))
        .collect();
    ForLease::Values(values, credential.map(|c| opened[c].clone()))
}
