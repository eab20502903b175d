//! Webhooks (contract v1.4): admins create, replace and delete them and read their delivery
//! logs; redelivery by hand. Delivery itself is the hub's (`hub/webhooks.rs`).
//!
//! Invariants: the secret is answered once, by the `PUT` that created the webhook; a URL is
//! `https` unless `LEASEHOLD_WEBHOOK_ALLOW_HTTP=1`, and one naming a refused address literal is
//! refused here too (every name is judged again at each connection).

use std::sync::Arc;

use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use uuid::Uuid;

use super::auth::Operator;
use super::error::{ApiError, ApiResult};
use super::extract::{truncate, Body, QueryMap};
use super::views;
use super::AppState;
use crate::domain::state::JobState;
use crate::domain::webhook;
use crate::store::feed::Webhook;
use crate::wire;

const MAX_URL: usize = 2048;
const MAX_KINDS: usize = 16;

/// The path's parameters, or the contract's 400 (a segment that is not UTF-8, say).
fn path<T>(p: Result<Path<T>, PathRejection>, what: &str) -> ApiResult<T> {
    p.map(|Path(v)| v)
        .map_err(|_| ApiError::bad(format!("{what}: not a valid path parameter")))
}

fn name(raw: &str) -> ApiResult<&str> {
    if webhook::valid_name(raw) {
        Ok(raw)
    } else {
        Err(ApiError::bad("name: must match [a-z0-9-]{1,64}"))
    }
}

fn url(st: &AppState, raw: &str) -> ApiResult<String> {
    let bad = |why: &str| ApiError::bad(format!("url: {why}"));
    if raw.len() > MAX_URL {
        return Err(bad("at most 2048 characters"));
    }
    let parsed = reqwest::Url::parse(raw).map_err(|_| bad("not an absolute URL"))?;
    match parsed.scheme() {
        "https" => {}
        "http" if st.limits.webhook_allow_http => {}
        _ => {
            return Err(bad(
                "must be https (http only where LEASEHOLD_WEBHOOK_ALLOW_HTTP=1)",
            ))
        }
    }
    let Some(host) = parsed.host_str() else {
        return Err(bad("names no host"));
    };
    let literal = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .parse::<std::net::IpAddr>();
    if let Ok(ip) = literal {
        if !st.limits.webhook_allow_private && !webhook::public_address(ip) {
            return Err(bad(
                "a loopback, private, link-local or unspecified address is refused",
            ));
        }
    }
    Ok(parsed.to_string())
}

fn kinds(raw: Option<Vec<String>>) -> ApiResult<Vec<String>> {
    let Some(kinds) = raw else {
        return Ok(vec!["state".to_owned()]);
    };
    if kinds.is_empty() || kinds.len() > MAX_KINDS {
        return Err(ApiError::bad(format!("kinds: 1..{MAX_KINDS} event kinds")));
    }
    let mut out: Vec<String> = Vec::new();
    for k in kinds {
        if k != "state" && !super::validate::is_event_kind(&k) {
            return Err(ApiError::bad(format!(
                "kinds: '{}' is not an event kind",
                truncate(&k, 64)
            )));
        }
        if !out.contains(&k) {
            out.push(k);
        }
    }
    Ok(out)
}

fn states(raw: Option<Vec<String>>) -> ApiResult<Option<Vec<String>>> {
    let Some(states) = raw else {
        return Ok(None);
    };
    if states.is_empty() {
        return Err(ApiError::bad(
            "states: name at least one state, or leave it out",
        ));
    }
    let mut out: Vec<String> = Vec::new();
    for s in states {
        if JobState::parse(&s).is_none() {
            return Err(ApiError::bad(
                "states: each must be one of parked, leased, completed, failed, cancelled, rejected",
            ));
        }
        if !out.contains(&s) {
            out.push(s);
        }
    }
    Ok(Some(out))
}

async fn find(st: &AppState, workspace: &str, raw: &str) -> ApiResult<Webhook> {
    let name = name(raw)?;
    st.hub
        .webhook(workspace, name)
        .await?
        .ok_or(ApiError::NotFound)
}

pub async fn put(
    State(st): State<Arc<AppState>>,
    op: Operator,
    raw: Result<Path<String>, PathRejection>,
    Body(req): Body<wire::PutWebhook>,
) -> ApiResult<(StatusCode, Json<wire::Webhook>)> {
    op.require_admin()?;
    let raw = path(raw, "name")?;
    let name = name(&raw)?;
    let url = url(&st, &req.url)?;
    let kinds = kinds(req.kinds)?;
    let states = states(req.states)?;
    let hook = st
        .hub
        .put_webhook(&op.0.workspace, name, &url, &kinds, states.as_deref())
        .await?
        .ok_or_else(|| {
            ApiError::bad(format!(
                "name: the workspace has {} webhooks, the most it may have",
                webhook::MAX_PER_WORKSPACE
            ))
        })?;
    let status = if hook.created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    let created = hook.created;
    Ok((status, Json(views::webhook(hook, created))))
}

pub async fn list(
    State(st): State<Arc<AppState>>,
    op: Operator,
) -> ApiResult<Json<wire::WebhookList>> {
    op.require_admin()?;
    let hooks = st.hub.webhooks(&op.0.workspace).await?;
    Ok(Json(wire::WebhookList {
        webhooks: hooks
            .into_iter()
            .map(|w| views::webhook(w, false))
            .collect(),
    }))
}

pub async fn delete(
    State(st): State<Arc<AppState>>,
    op: Operator,
    raw: Result<Path<String>, PathRejection>,
) -> ApiResult<StatusCode> {
    op.require_admin()?;
    let raw = path(raw, "name")?;
    let name = name(&raw)?;
    if st.hub.delete_webhook(&op.0.workspace, name).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::NotFound)
    }
}

pub async fn deliveries(
    State(st): State<Arc<AppState>>,
    op: Operator,
    raw: Result<Path<String>, PathRejection>,
    query: QueryMap,
) -> ApiResult<Json<wire::WebhookDeliveryList>> {
    op.require_admin()?;
    let raw = path(raw, "name")?;
    let limit = query.int("limit", 1, 100)?.unwrap_or(20);
    let after = match query.get("after") {
        None => None,
        Some(a) => {
            Some(Uuid::try_parse(a).map_err(|_| ApiError::bad("after: must be a delivery id"))?)
        }
    };
    let hook = find(&st, &op.0.workspace, &raw).await?;
    let rows = st.hub.deliveries(hook.id, after, limit).await?;
    let next = (rows.len() as i64 == limit)
        .then(|| rows.last().map(|d| d.id))
        .flatten();
    Ok(Json(wire::WebhookDeliveryList {
        deliveries: rows
            .into_iter()
            .map(|d| views::delivery(d, &op.0.workspace))
            .collect(),
        next,
    }))
}

pub async fn redeliver(
    State(st): State<Arc<AppState>>,
    op: Operator,
    params: Result<Path<(String, String)>, PathRejection>,
) -> ApiResult<(StatusCode, Json<wire::WebhookDelivery>)> {
    op.require_admin()?;
    let (raw, id) = path(params, "id")?;
    let id = Uuid::try_parse(&id)
        .map_err(|_| ApiError::bad(format!("id: '{}' is not a UUID", truncate(&id, 64))))?;
    let hook = find(&st, &op.0.workspace, &raw).await?;
    let d = st
        .hub
        .redeliver(hook.id, id)
        .await?
        .ok_or(ApiError::NotFound)?;
    Ok((
        StatusCode::ACCEPTED,
        Json(views::delivery(d, &op.0.workspace)),
    ))
}
