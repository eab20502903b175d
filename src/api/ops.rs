//! Operations endpoints: liveness, readiness, Prometheus metrics. Never authenticated or
//! rate limited.

use std::fmt::Write;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::Json;
use serde_json::json;

use super::error::{ApiError, ApiResult};
use super::AppState;

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

pub async fn metrics(State(st): State<Arc<AppState>>) -> impl IntoResponse {
    let hub = &st.hub;
    let pool = hub.store.pool_status();
    let c = &hub.counters;
    let mut out = String::new();
    let mut metric = |name: &str, kind: &str, help: &str, value: u64| {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}"
        );
    };
    metric(
        "leasehold_waiters",
        "gauge",
        "Long-polls and job waits parked on this replica.",
        hub.waiters.len() as u64,
    );
    metric(
        "leasehold_listening",
        "gauge",
        "1 while the LISTEN connection is up.",
        u64::from(hub.listening.load(Ordering::Relaxed)),
    );
    metric(
        "leasehold_pool_connections",
        "gauge",
        "Connections open in the pool.",
        pool.size as u64,
    );
    metric(
        "leasehold_pool_idle_connections",
        "gauge",
        "Idle connections in the pool.",
        pool.available as u64,
    );
    metric(
        "leasehold_leases_total",
        "counter",
        "Jobs leased through this replica.",
        c.leases.load(Ordering::Relaxed),
    );
    metric(
        "leasehold_wakes_total",
        "counter",
        "Waiters woken for a parked job.",
        c.wakes.load(Ordering::Relaxed),
    );
    metric(
        "leasehold_notifications_heard_total",
        "counter",
        "Notifications heard on LISTEN.",
        c.notifications_heard.load(Ordering::Relaxed),
    );
    metric(
        "leasehold_notifications_sent_total",
        "counter",
        "Notifications sent.",
        hub.notifier.sent.load(Ordering::Relaxed),
    );
    metric(
        "leasehold_db_statements_total",
        "counter",
        "Statements sent through the pool (BEGIN and COMMIT included).",
        hub.store.statements(),
    );
    metric(
        "leasehold_rechecks_total",
        "counter",
        "Safety-net re-check queries.",
        c.rechecks.load(Ordering::Relaxed),
    );
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], out)
}
