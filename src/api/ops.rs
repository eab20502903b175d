//! Operations endpoints: liveness, readiness, Prometheus metrics (kept in
//! [`crate::telemetry::metrics`]), the OpenAPI document (built by [`super::openapi`]). Never
//! authenticated or rate limited.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::Json;
use serde_json::json;

use super::error::{ApiError, ApiResult};
use super::AppState;
use crate::telemetry::metrics::{self, Snapshot};

pub async fn healthz() -> Json<serde_json::Value> {
    Json(json!({"status": "ok"}))
}

/// Ready while the pool reaches the database and this replica's LISTEN connection is up.
pub async fn readyz(State(st): State<Arc<AppState>>) -> ApiResult<Json<serde_json::Value>> {
    if !st.hub.listening.load(Ordering::Acquire) || st.shutdown.is_cancelled() {
        return Err(ApiError::Unavailable);
    }
    let ping = tokio::time::timeout(std::time::Duration::from_secs(2), st.hub.store.ping()).await;
    match ping {
        Ok(Ok(())) => Ok(Json(json!({"status": "ready"}))),
        _ => Err(ApiError::Unavailable),
    }
}

/// `GET /openapi.json`, no credential: the document of the route table this API was built from.
pub async fn openapi(State(st): State<Arc<AppState>>) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/json")], st.openapi)
}

pub async fn metrics(State(st): State<Arc<AppState>>) -> impl IntoResponse {
    let hub = &st.hub;
    let pool = hub.store.pool_status();
    let now = Snapshot {
        waiters: hub.waiters.len() as u64,
        listening: hub.listening.load(Ordering::Relaxed),
        pool_size: pool.size as u64,
        pool_idle: pool.available as u64,
        pool_waiting: pool.waiting as u64,
        db_statements: hub.store.statements(),
        notifications_sent: hub.notifier.sent.load(Ordering::Relaxed),
    };
    (
        [(header::CONTENT_TYPE, metrics::CONTENT_TYPE)],
        hub.metrics.encode(&now),
    )
}
