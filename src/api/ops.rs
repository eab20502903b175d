//! Operations endpoints: liveness, readiness, Prometheus metrics (kept in
//! [`crate::telemetry::metrics`]), the OpenAPI document (built by [`super::openapi`]). Never
//! authenticated or rate limited.

use std::sync::Arc;

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::Json;
use serde_json::json;

use super::error::{ApiError, ApiResult};
use super::AppState;
use crate::telemetry::metrics;

pub async fn healthz() -> Json<serde_json::Value> {
    Json(json!({"status": "ok"}))
}

/// Ready while the pool reaches the database and this replica's LISTEN connection is up.
pub async fn readyz(State(st): State<Arc<AppState>>) -> ApiResult<Json<serde_json::Value>> {
    if st.shutdown.is_cancelled() || !st.hub.ready().await {
        return Err(ApiError::Unavailable);
    }
    Ok(Json(json!({"status": "ready"})))
}

/// `GET /openapi.json`, no credential: the document of the route table this API was built from.
pub async fn openapi(State(st): State<Arc<AppState>>) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/json")], st.openapi)
}

pub async fn metrics(State(st): State<Arc<AppState>>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, metrics::CONTENT_TYPE)],
        st.hub.metrics_text(),
    )
}
