//! Workspace secrets (`/v1/secrets`): admins write and delete, members list names and scopes.
//!
//! Invariants: a value is sealed with the replica's key before it reaches the store and is
//! never echoed, listed, logged or put in an error; without a key configured, writes answer 503
//! naming `LEASEHOLD_SECRETS_KEY` rather than storing anything unsealed. A `workspace` secret
//! (the default scope) is never handed to a personal runner: a lease of a job naming one by a
//! personal runner rejects the job instead (docs/contract-notes.md, "Secret scope").

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use std::collections::BTreeMap;

use super::auth::Operator;
use super::error::{ApiError, ApiResult};
use super::extract::Body;
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
    let runners = match req.runners.as_deref() {
        None | Some("workspace") => "workspace",
        Some("any") => "any",
        Some(_) => return Err(ApiError::bad("runners: must be workspace or any")),
    };
    let dispatch = match req.dispatch.as_deref() {
        None | Some("member") => "member",
        Some("admin") => "admin",
        Some(_) => return Err(ApiError::bad("dispatch: must be member or admin")),
    };
    let sealed = sealer(&st)?.seal(&op.0.workspace, &name, &req.value);
    st.hub
        .put_secret(
            &op.0.workspace,
            &name,
            &sealed,
            Some(runners),
            Some(dispatch),
        )
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

pub async fn list(
    State(st): State<Arc<AppState>>,
    Operator(key): Operator,
) -> ApiResult<Json<wire::SecretList>> {
    let secrets = st.hub.secrets(&key.workspace).await?;
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
    if st.hub.delete_secret(&op.0.workspace, &name).await? {
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
    /// This named secret is `workspace`-scoped and the runner is personal (the job is rejected
    /// `secret_missing`: its scope was narrowed after dispatch).
    WorkspaceOnly(String),
    /// This named secret is `dispatch: admin` and the job's dispatcher is not an admin (the job
    /// is rejected `secret_forbidden`, v1.3).
    AdminOnly(String),
}

impl ForLease {
    /// The rejection reason and message of a job refused its secrets; `None` for values.
    pub fn refusal(&self) -> Option<(&'static str, String)> {
        match self {
            Self::Values(..) => None,
            Self::Missing(name) => Some((
                "secret_missing",
                format!("the secret {name} the job names does not exist"),
            )),
            Self::WorkspaceOnly(name) => Some((
                "secret_missing",
                format!(
                    "the secret {name} the job names is for workspace runners only, and a \
                     personal runner leased the job (the secret's scope changed after dispatch)"
                ),
            )),
            Self::AdminOnly(name) => Some((
                "secret_forbidden",
                format!(
                    "the secret {name} the job names may be named by admins only, and the job's \
                     dispatcher (its last dispatch or retry call) is not an admin; an admin may \
                     retry it"
                ),
            )),
        }
    }
}

/// Secrets opened for one lease call: values by name, the names only workspace-owned runners
/// may receive, and those only an admin's job may receive.
#[derive(Default)]
pub struct Opened {
    values: BTreeMap<String, String>,
    workspace_only: std::collections::BTreeSet<String>,
    admin_only: std::collections::BTreeSet<String>,
}

impl Opened {
    /// Whether `name` may be handed only to a job an admin dispatched (or last retried).
    pub fn admin_only(&self, name: &str) -> bool {
        self.admin_only.contains(name)
    }
}

/// Open the secrets `names` of `workspace` for a lease, in one statement; missing names are
/// simply absent from the answer.
///
/// # Errors
/// 503 naming the variable when no key is configured or a value opens with no configured
/// key; the database failed.
pub async fn open_for_lease(st: &AppState, workspace: &str, names: &[String]) -> ApiResult<Opened> {
    if names.is_empty() {
        return Ok(Opened::default());
    }
    let sealer = sealer(st)?;
    let sealed = st.hub.sealed_secrets(workspace, names).await?;
    let mut opened = Opened::default();
    for secret in &sealed {
        let name = &secret.name;
        let plain = sealer.open(workspace, name, &secret.sealed).map_err(|_| {
            tracing::error!(%workspace, secret = %name, "a secret does not open with the configured key(s)");
            ApiError::NotConfigured(
                "a secret does not open with LEASEHOLD_SECRETS_KEY (or LEASEHOLD_SECRETS_OLD_KEY); \
                 was the key rotated without keeping the old one?"
                    .into(),
            )
        })?;
        opened.values.insert(name.clone(), plain);
        if secret.workspace_only {
            opened.workspace_only.insert(name.clone());
        }
        if secret.admin_only {
            opened.admin_only.insert(name.clone());
        }
    }
    Ok(opened)
}

/// One job's share of the opened secrets: those it names, and its source's credential, for a
/// personal runner (`personal`) or a workspace-owned one, and a job an admin dispatched or
/// last retried (`by_admin`) or a member.
pub fn pick(
    opened: &Opened,
    names: &[String],
    credential: Option<&str>,
    personal: bool,
    by_admin: bool,
) -> ForLease {
    let mut named = names.iter().map(String::as_str).chain(credential);
    if let Some(missing) = named.clone().find(|n| !opened.values.contains_key(*n)) {
        return ForLease::Missing(missing.to_owned());
    }
    if let Some(kept) = named.clone().find(|n| !by_admin && opened.admin_only(n)) {
        return ForLease::AdminOnly(kept.to_owned());
    }
    if let Some(kept) = named.find(|n| personal && opened.workspace_only.contains(*n)) {
        return ForLease::WorkspaceOnly(kept.to_owned());
    }
    let opened = &opened.values;
    let values = names
        .iter()
        .map(|n| (n.clone(), opened[n].clone()))
        .collect();
    ForLease::Values(values, credential.map(|c| opened[c].clone()))
}
