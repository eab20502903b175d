//! Dispatcher calls (API key): dispatch, read, wait, list, cancel, events. Every member of a
//! workspace sees all of that workspace's jobs; another workspace's job is 404.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::Json;
use uuid::Uuid;

use super::error::{ApiError, ApiResult};
use super::extract::{Body, Operator, PathId, QueryMap};
use super::operators::resolve_target;
use super::validate;
use super::views;
use super::AppState;
use crate::domain::owner;
use crate::domain::state::JobState;
use crate::store::NewJob;
use crate::wire;

fn wait_duration(st: &AppState, query: &QueryMap, default_ms: i64) -> ApiResult<Duration> {
    let ms = query.int("wait_ms", 0, 60_000)?.unwrap_or(default_ms);
    Ok(Duration::from_millis(
        (ms as u64).min(st.hub.config.max_wait_ms),
    ))
}

pub async fn dispatch(
    State(st): State<Arc<AppState>>,
    Operator(key): Operator,
    headers: HeaderMap,
    Body(req): Body<wire::Dispatch>,
) -> ApiResult<(StatusCode, Json<wire::Job>)> {
    // Validation first: a 4xx never uses an idempotency key up.
    let payload = req
        .payload
        .ok_or_else(|| ApiError::bad("payload: required"))?;
    let kind = validate::job_kind(req.kind.as_deref())?;
    let required = st
        .vocabulary
        .required(req.required_capabilities.as_deref().unwrap_or(&[]))
        .map_err(|bad| {
            ApiError::bad(format!(
                "required_capabilities: '{bad}' is not a known capability name"
            ))
        })?;
    let priority = validate::range("priority", req.priority, -1000, 1000, 0)? as i32;
    let max_attempts = validate::range("max_attempts", req.max_attempts, 1, 100, 3)? as i32;
    let default_no_runner = st.hub.config.no_runner_timeout_ms as i64;
    let no_runner_timeout_ms = validate::range(
        "no_runner_timeout_ms",
        req.no_runner_timeout_ms,
        1000,
        86_400_000,
        default_no_runner,
    )?;
    let queue_timeout_ms =
        validate::opt_range("queue_timeout_ms", req.queue_timeout_ms, 1000, 604_800_000)?;
    let idempotency_key = match headers.get("idempotency-key") {
        None => None,
        Some(v) => {
            let k = v
                .to_str()
                .map_err(|_| ApiError::bad("Idempotency-Key: must be visible ASCII"))?;
            validate::text("Idempotency-Key", k, 255)?;
            Some(k.to_owned())
        }
    };
    let store = &st.hub.store;
    if let Some(k) = &idempotency_key {
        if let Some(first) = store.job_by_idempotency_key(&key.workspace, k).await? {
            return Ok((StatusCode::OK, Json(views::job(first))));
        }
    }
    let (queue_owner, runner) = resolve_target(&st, &key, &req.target).await?;
    if let Some(r) = &runner {
        if let Some(missing) = required.iter().find(|c| !r.capabilities.contains(c)) {
            return Err(ApiError::CapabilityMismatch(format!(
                "runner {} does not advertise required capability '{missing}'",
                r.id
            )));
        }
    }
    let job = NewJob {
        id: Uuid::now_v7(),
        workspace: key.workspace.clone(),
        billing_tenant: owner::billing_tenant(&queue_owner),
        owner: queue_owner,
        runner_id: runner.map(|r| r.id),
        kind,
        payload,
        required_capabilities: required,
        priority,
        max_attempts,
        no_runner_timeout_ms,
        queue_timeout_ms,
        idempotency_key,
        traceparent: crate::telemetry::traces::current_traceparent(),
    };
    match store.insert_job(&job).await? {
        Some(parked) => {
            st.hub.job_parked(&parked.owner, parked.runner_id);
            Ok((StatusCode::CREATED, Json(views::job(parked))))
        }
        // A concurrent dispatch with the same key won the insert.
        None => {
            let k = job.idempotency_key.as_deref().unwrap_or_default();
            let first = store
                .job_by_idempotency_key(&key.workspace, k)
                .await?
                .ok_or(ApiError::Internal)?;
            Ok((StatusCode::OK, Json(views::job(first))))
        }
    }
}

pub async fn get(
    State(st): State<Arc<AppState>>,
    Operator(key): Operator,
    PathId(id): PathId,
    query: QueryMap,
) -> ApiResult<Json<wire::Job>> {
    let wait = wait_duration(&st, &query, 0)?;
    let store = &st.hub.store;
    let job = st
        .hub
        .wait_on_job(
            id,
            wait,
            &st.shutdown,
            || store.job(id, &key.workspace),
            |j| j.as_ref().is_none_or(|j| j.state.is_terminal()),
        )
        .await?;
    job.map(|j| Json(views::job(j))).ok_or(ApiError::NotFound)
}

pub async fn list(
    State(st): State<Arc<AppState>>,
    Operator(key): Operator,
    query: QueryMap,
) -> ApiResult<Json<wire::JobList>> {
    let state = match query.get("state") {
        None => None,
        Some(s) => Some(
            JobState::parse(s)
                .ok_or_else(|| ApiError::bad("state: must be one of parked, leased, completed, failed, cancelled, rejected"))?
                .as_str(),
        ),
    };
    let limit = query.int("limit", 1, 500)?.unwrap_or(100);
    let after = match query.get("after") {
        None => None,
        Some(a) => Some(Uuid::try_parse(a).map_err(|_| ApiError::bad("after: must be a job id"))?),
    };
    let jobs = st
        .hub
        .store
        .jobs(&key.workspace, state, after, limit)
        .await?;
    let next = (jobs.len() as i64 == limit)
        .then(|| jobs.last().map(|j| j.id))
        .flatten();
    Ok(Json(wire::JobList {
        jobs: jobs.into_iter().map(views::job).collect(),
        next,
    }))
}

pub async fn cancel(
    State(st): State<Arc<AppState>>,
    Operator(key): Operator,
    PathId(id): PathId,
) -> ApiResult<Json<wire::Job>> {
    let store = &st.hub.store;
    if let Some(job) = store.cancel_job(id, &key.workspace, &key.subject).await? {
        st.hub.job_changed(id);
        return Ok(Json(views::job(job)));
    }
    // Unknown, or already terminal: a terminal job is returned unchanged.
    store
        .job(id, &key.workspace)
        .await?
        .map(|j| Json(views::job(j)))
        .ok_or(ApiError::NotFound)
}

pub async fn events(
    State(st): State<Arc<AppState>>,
    Operator(key): Operator,
    PathId(id): PathId,
    query: QueryMap,
) -> ApiResult<Json<wire::EventList>> {
    let after = query.int("after", 0, i64::from(i32::MAX))?.unwrap_or(0);
    let limit = query.int("limit", 1, 1000)?.unwrap_or(1000);
    let wait = wait_duration(&st, &query, 0)?;
    let store = &st.hub.store;
    if store.job(id, &key.workspace).await?.is_none() {
        return Err(ApiError::NotFound);
    }
    let workspace = key.workspace.as_str();
    let (events, _) = st
        .hub
        .wait_on_job(
            id,
            wait,
            &st.shutdown,
            || async move {
                let events = store.events(id, after as i32, limit).await?;
                let terminal = if events.is_empty() {
                    store
                        .job(id, workspace)
                        .await?
                        .is_none_or(|j| j.state.is_terminal())
                } else {
                    false
                };
                Ok((events, terminal))
            },
            |(events, terminal)| !events.is_empty() || *terminal,
        )
        .await?;
    let next = events.last().map_or(after, |e| i64::from(e.seq));
    Ok(Json(wire::EventList {
        events: events.into_iter().map(views::event).collect(),
        next,
    }))
}
