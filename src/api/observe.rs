//! What every request leaves in the replica's metrics (duration by method, route template and
//! status; runner calls refused as stale, by reason) and, with traces on, the server span it
//! runs in (child of the caller's `traceparent`). [`crate::api::envelope`] starts and finishes
//! it around every call.
//!
//! Invariant: the route label is the router's template ([`MatchedPath`], e.g.
//! `/v1/jobs/{id}`), or `unmatched`; a raw path, an id or a query never becomes a label.

use std::time::Instant;

use axum::extract::{MatchedPath, Request};
use axum::http::Method;
use axum::response::Response;
use tracing::Span;

use super::error::ErrorCode;
use super::AppState;

use crate::telemetry::metrics::{ReasonLabel, RequestLabels};
use crate::telemetry::traces;

/// What is known of a request as it arrives, until [`Observed::finish`] records its answer.
pub struct Observed {
    started: Instant,
    method: &'static str,
    /// The route template (an `Arc`), turned into a label only when the answer is recorded.
    route: Option<MatchedPath>,
    /// The server span, with traces on.
    span: Option<Span>,
}

impl Observed {
    /// Start timing `request` and, with traces on, open its server span.
    pub fn start(request: &Request) -> Self {
        let method = method_label(request.method());
        let route = request.extensions().get::<MatchedPath>().cloned();
        let span = traces::request_span(
            method,
            route.as_ref().map_or(UNMATCHED, MatchedPath::as_str),
            request
                .headers()
                .get("traceparent")
                .and_then(|v| v.to_str().ok()),
        );
        Self {
            started: Instant::now(),
            method,
            route,
            span,
        }
    }

    /// The span the call runs in (disabled with traces off).
    pub fn span(&self) -> Span {
        self.span.clone().unwrap_or_else(Span::none)
    }

    /// Count what the call answered, and how long it took.
    pub fn finish(self, st: &AppState, response: &Response) {
        if let Some(span) = &self.span {
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
                method: self.method,
                route: self
                    .route
                    .as_ref()
                    .map_or(UNMATCHED, MatchedPath::as_str)
                    .to_owned(),
                status: response.status().as_u16(),
            },
            self.started.elapsed(),
        );
    }
}

/// The route label of a request no route matched.
const UNMATCHED: &str = "unmatched";

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
