//! The layer that records every request in the replica's metrics (duration by method, route
//! template and status; runner calls refused as stale, by reason) and, with traces on, runs it
//! in a server span (child of the caller's `traceparent`).
//!
//! Invariant: the route label is the router's template ([`MatchedPath`], e.g.
//! `/v1/jobs/{id}`), or `unmatched`; a raw path, an id or a query never becomes a label.

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::Response;

use super::error::ErrorCode;
use super::AppState;
use tracing::Instrument;

use crate::telemetry::metrics::{ReasonLabel, RequestLabels};
use crate::telemetry::traces;

/// Time the request and count what it answered.
pub async fn track(State(st): State<Arc<AppState>>, request: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = method_label(request.method());
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or("unmatched", MatchedPath::as_str)
        .to_owned();
    let span = traces::request_span(
        method,
        &route,
        request
            .headers()
            .get("traceparent")
            .and_then(|v| v.to_str().ok()),
    );
    let response = match &span {
        Some(span) => next.run(request).instrument(span.clone()).await,
        None => next.run(request).await,
    };
    if let Some(span) = &span {
        traces::record_status(span, response.status().as_u16());
    }
    let metrics = &st.hub.metrics;
    if let Some(ErrorCode(reason @ ("job_terminal" | "lease_superseded"))) =
        response.extensions().get::<ErrorCode>().copied()
    {
        metrics
            .stale_reports
            .get_or_create(&ReasonLabel { reason })
            .inc();
    }
    metrics.request(
        &RequestLabels {
            method,
            route,
            status: response.status().as_u16(),
        },
        started.elapsed(),
    );
    response
}

/// Methods from a fixed set, so a client cannot mint label values.
fn method_label(m: &Method) -> &'static str {
    match *m {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::HEAD => "HEAD",
        Method::PATCH => "PATCH",
        Method::OPTIONS => "OPTIONS",
        _ => "other",
    }
}
