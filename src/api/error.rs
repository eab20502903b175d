//! The one error type of the HTTP layer and its mapping to the contract's JSON shape.
//!
//! Invariant: a client sees only the contract's codes and human messages; internals are logged
//! here and never sent. Every authentication failure is the same bytes.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;

use crate::domain::state::JobState;
use crate::store::{FenceMiss, StoreError};
use crate::wire::{ErrorBody, ErrorDetail};

#[derive(Debug)]
pub enum ApiError {
    BadRequest(String),
    Unauthorized,
    Forbidden,
    NotFound,
    MethodNotAllowed,
    JobTerminal(JobState),
    LeaseSuperseded,
    PayloadTooLarge,
    UnsupportedMediaType,
    CapabilityMismatch(String),
    /// An artifact upload over `LEASEHOLD_ARTIFACT_MAX_BYTES` (the limit in bytes).
    ArtifactTooLarge(u64),
    /// An artifact upload to a path the job already has at this epoch.
    ArtifactExists,
    /// An artifact upload past one of the artifact bounds (v1.3); the message names it.
    QuotaExceeded(String),
    /// A download's `Range` past the artifact's end (its size).
    RangeNotSatisfiable(u64),
    /// A lease call from a runner below `LEASEHOLD_MIN_RUNNER_VERSION`.
    RunnerOutdated {
        min_version: String,
    },
    /// A feed cursor older than the oldest event kept (v1.4); the message names the oldest
    /// cursor.
    Gone(String),
    /// A feature needs configuration this replica lacks (503, the message names the variable).
    NotConfigured(String),
    RateLimited {
        retry_after_s: u64,
    },
    Unavailable,
    /// The call passed its deadline (`LEASEHOLD_REQUEST_TIMEOUT_MS`): 503, and a write it made
    /// may have committed.
    TimedOut,
    Internal,
}

pub type ApiResult<T> = Result<T, ApiError>;

/// The contract code of an error response, left in the response's extensions for the metrics
/// layer (stale reports are counted by it).
#[derive(Debug, Clone, Copy)]
pub struct ErrorCode(pub &'static str);

impl ApiError {
    pub fn bad(msg: impl Into<String>) -> Self {
        ApiError::BadRequest(msg.into())
    }

    /// The status and contract code this error answers with.
    pub fn status_and_code(&self) -> (StatusCode, &'static str) {
        let (status, code, _) = self.parts();
        (status, code)
    }

    fn parts(&self) -> (StatusCode, &'static str, String) {
        use ApiError::*;
        match self {
            BadRequest(m) => (StatusCode::BAD_REQUEST, "bad_request", m.clone()),
            Unauthorized => (
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "unauthorized".into(),
            ),
            Forbidden => (
                StatusCode::FORBIDDEN,
                "forbidden",
                "your role does not allow this call".into(),
            ),
            NotFound => (StatusCode::NOT_FOUND, "not_found", "not found".into()),
            MethodNotAllowed => (
                StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
                "method not allowed on this route".into(),
            ),
            JobTerminal(s) => (
                StatusCode::CONFLICT,
                "job_terminal",
                format!("the job is {} and can no longer change", s.as_str()),
            ),
            LeaseSuperseded => (
                StatusCode::CONFLICT,
                "lease_superseded",
                "this runner does not hold the job at that epoch".into(),
            ),
            PayloadTooLarge => (
                StatusCode::PAYLOAD_TOO_LARGE,
                "payload_too_large",
                "request body too large".into(),
            ),
            UnsupportedMediaType => (
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                "the body must be Content-Type: application/json".into(),
            ),
            CapabilityMismatch(m) => (
                StatusCode::UNPROCESSABLE_ENTITY,
                "capability_mismatch",
                m.clone(),
            ),
            ArtifactTooLarge(max) => (
                StatusCode::PAYLOAD_TOO_LARGE,
                "too_large",
                format!("an artifact is at most {max} bytes (LEASEHOLD_ARTIFACT_MAX_BYTES)"),
            ),
            ArtifactExists => (
                StatusCode::CONFLICT,
                "artifact_exists",
                "the job already has an artifact at this path from this attempt (epoch)".into(),
            ),
            QuotaExceeded(m) => (StatusCode::PAYLOAD_TOO_LARGE, "quota_exceeded", m.clone()),
            RangeNotSatisfiable(size) => (
                StatusCode::RANGE_NOT_SATISFIABLE,
                "range_not_satisfiable",
                format!("the range starts past the artifact's end ({size} bytes)"),
            ),
            RunnerOutdated { min_version } => (
                StatusCode::CONFLICT,
                "runner_outdated",
                format!(
                    "this runner's version is below the minimum the service accepts ({min_version}); \
                     upgrade it (install leasehold {min_version} or later and restart \
                     `leasehold runner run`), then it leases again"
                ),
            ),
            Gone(m) => (StatusCode::GONE, "gone", m.clone()),
            NotConfigured(m) => (StatusCode::SERVICE_UNAVAILABLE, "unavailable", m.clone()),
            RateLimited { .. } => (
                StatusCode::TOO_MANY_REQUESTS,
                "rate_limited",
                "too many requests".into(),
            ),
            Unavailable => (
                StatusCode::SERVICE_UNAVAILABLE,
                "unavailable",
                "the database is unreachable; retry, nothing was written".into(),
            ),
            TimedOut => (
                StatusCode::SERVICE_UNAVAILABLE,
                "unavailable",
                "the call did not finish within this replica's deadline; retry it (a write it \
                 made may have committed: a dispatch retried with the same Idempotency-Key \
                 answers the first job)"
                    .into(),
            ),
            Internal => (
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                "internal error".into(),
            ),
        }
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Unavailable(msg) => {
                tracing::warn!(error = %msg, "database unavailable");
                ApiError::Unavailable
            }
            StoreError::TimedOut(msg) => {
                tracing::warn!(error = %msg, "database deadline passed");
                ApiError::TimedOut
            }
            // A deadlock or serialization conflict that outlived its retries: nothing was
            // written, and the caller may retry (503), as after any rolled-back transaction.
            e @ StoreError::Db { .. } if e.is_conflict() => {
                tracing::warn!(error = %e, "a transaction lost a conflict three times");
                ApiError::Unavailable
            }
            // SQLSTATE and statement only: the database's message can quote request data.
            StoreError::Db {
                sqlstate,
                statement,
            } => {
                tracing::error!(%sqlstate, statement, "database error");
                ApiError::Internal
            }
            StoreError::Invalid(what) => {
                tracing::error!(%what, "the database returned what the schema rules out");
                ApiError::Internal
            }
        }
    }
}

impl From<FenceMiss> for ApiError {
    fn from(miss: FenceMiss) -> Self {
        match miss {
            FenceMiss::Unauthorized => ApiError::Unauthorized,
            FenceMiss::NotFound => ApiError::NotFound,
            FenceMiss::Terminal(state) => ApiError::JobTerminal(state),
            FenceMiss::Superseded => ApiError::LeaseSuperseded,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, code, message) = self.parts();
        let state = match &self {
            ApiError::JobTerminal(s) => Some(super::views::job_state(*s)),
            _ => None,
        };
        let min_version = match &self {
            ApiError::RunnerOutdated { min_version } => Some(min_version.clone()),
            _ => None,
        };
        let body = ErrorBody {
            error: ErrorDetail {
                code: code.to_owned(),
                message,
                state,
                min_version,
            },
        };
        let mut response = (status, Json(body)).into_response();
        response.extensions_mut().insert(ErrorCode(code));
        match self {
            ApiError::RateLimited { retry_after_s } => {
                response
                    .headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from(retry_after_s.max(1)));
            }
            ApiError::RangeNotSatisfiable(size) => {
                if let Ok(v) = HeaderValue::from_str(&format!("bytes */{size}")) {
                    response.headers_mut().insert(header::CONTENT_RANGE, v);
                }
            }
            ApiError::Unavailable | ApiError::TimedOut => {
                response
                    .headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from(1u64));
            }
            _ => {}
        }
        response
    }
}
