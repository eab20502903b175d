//! Artifact calls: a runner's upload while it holds a job, and the workspace's list and
//! download (whole, or by `Range`, with the sha256 as `ETag`).
//!
//! Invariants: the bytes stream through, a chunk at a time, in both directions (never a whole
//! file in memory); an upload is fenced by its epoch before its first byte and again in the
//! statement that makes it visible, so an upload by a runner superseded meanwhile leaves
//! nothing; no byte is stored before room for it is reserved under the artifact bounds (a
//! declared length whole, before the first byte); an upload that does not complete, for whatever reason (too large, cut off, past
//! its deadline, superseded, the path taken meanwhile), has its partial bytes deleted at once
//! ([`Unfinished`]), and by the stale-upload sweep if the replica died. The call's deadline
//! runs from the last byte received, so a long upload that keeps moving is never cut off,
//! and one that stalls is.

use std::ops::Range;
use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use axum::extract::{FromRequestParts, Path, Request, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures_util::StreamExt;
use sha2::{Digest, Sha256};
use uuid::Uuid;

use super::auth::{Operator, RunnerToken};
use super::deadline::LongPoll;
use super::error::{ApiError, ApiResult};
use super::extract::{truncate, QueryMap};
use super::transfer::{Direction, TransferGuard, TransferSlot};
use super::AppState;
use crate::hub::Hub;
use crate::store::artifacts::{
    self, ArtifactBounds, ArtifactInfo, BlobWriter, Published, Refused, Reservation, Upload,
};
use crate::store::FenceMiss;
use crate::telemetry::metrics::DirectionLabel;
use crate::wire;
use crate::wire::artifacts::{is_valid_path, PATH_RULE};

/// Whether a request is an artifact upload (its body limit is `LEASEHOLD_ARTIFACT_MAX_BYTES`,
/// not `LEASEHOLD_MAX_BODY_BYTES`).
pub fn is_upload(method: &Method, path: &str) -> bool {
    method == Method::PUT
        && path
            .strip_prefix("/v1/runner/jobs/")
            .is_some_and(|rest| rest.contains("/artifacts/"))
}

/// `{id}` and `{*path}` of an artifact route, both validated (400 naming the one that is not).
pub struct ArtifactPath {
    pub job: Uuid,
    pub path: String,
}

impl<S: Send + Sync> FromRequestParts<S> for ArtifactPath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let Path((id, path)) = Path::<(String, String)>::from_request_parts(parts, state)
            .await
            .map_err(|_| ApiError::bad(PATH_RULE))?;
        let job = Uuid::try_parse(&id)
            .map_err(|_| ApiError::bad(format!("id: '{}' is not a UUID", truncate(&id, 64))))?;
        if !is_valid_path(&path) {
            return Err(ApiError::bad(PATH_RULE));
        }
        Ok(Self { job, path })
    }
}

/// An upload's blob until it is published: dropped before then (an error, a deadline, a
/// broken connection), its writer is aborted and its blob deleted, in a task of its own.
struct Unfinished {
    hub: Arc<Hub>,
    blob: Uuid,
    writer: Option<Box<dyn BlobWriter>>,
    published: bool,
}

impl Drop for Unfinished {
    fn drop(&mut self) {
        if self.published {
            return;
        }
        let (hub, blob, writer) = (self.hub.clone(), self.blob, self.writer.take());
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        runtime.spawn(async move {
            if let Some(mut w) = writer {
                w.abort().await;
            }
            if let Err(e) = hub.artifact_blob_delete(blob).await {
                tracing::warn!(error = %e, %blob, "an unfinished upload's bytes are left to the stale-upload sweep");
            }
        });
    }
}

fn fence_error(st: &AppState, token: &RunnerToken, miss: FenceMiss) -> ApiError {
    match miss {
        FenceMiss::Unauthorized => st.auth_failed(token.ip),
        other => other.into(),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `PUT /v1/runner/jobs/{id}/artifacts/{path}?epoch=N`.
pub async fn upload(
    State(st): State<Arc<AppState>>,
    token: RunnerToken,
    poll: LongPoll,
    target: ArtifactPath,
    query: QueryMap,
    request: Request,
) -> ApiResult<(StatusCode, Json<wire::ArtifactUploaded>)> {
    let started = Instant::now();
    let epoch = query
        .int("epoch", 0, i64::MAX)?
        .ok_or_else(|| ApiError::bad("epoch: required, the epoch the job was leased at"))?;
    let max = st.limits.artifact_max_bytes;
    if declared_length(request.headers()).is_some_and(|n| n > max) {
        return Err(ApiError::ArtifactTooLarge(max));
    }
    // A place under the transfer caps before any database work, held until the answer.
    let _permit = st
        .transfer_caps
        .take(Some(&token.hash), &st.hub.metrics.transfers_refused)?;
    let hub = &st.hub;
    let ArtifactPath { job, path } = target;
    let taken = hub
        .artifact_fence(job, epoch, &token.hash, &path)
        .await?
        .map_err(|miss| fence_error(&st, &token, miss))?;
    if taken {
        return Err(ApiError::ArtifactExists);
    }
    let blobs = st.artifacts.clone();
    let blob = Uuid::now_v7();
    let key = blobs.key(job, blob);
    // The room is reserved before the first byte is stored: a declared length whole, else as
    // the bytes come (RESERVE_AHEAD at a time).
    let bounds = &st.limits.artifact_bounds;
    let declared = declared_length(request.headers()).unwrap_or(0);
    let mut reserved = hub
        .artifact_reserve(
            &Reservation {
                blob,
                job,
                start: Some((blobs.kind(), key.as_deref())),
                need: declared,
                want: declared,
            },
            bounds,
        )
        .await?
        .map_err(|refused| quota_exceeded(bounds, refused))?;
    let mut unfinished = Unfinished {
        hub: hub.clone(),
        blob,
        writer: None,
        published: false,
    };
    let writer = unfinished.writer.insert(blobs.writer(blob, key).await?);
    let stale = std::time::Duration::from_millis(st.limits.artifact_stale_ms);
    let touch_every = artifacts::touch_every(stale);
    let mut touched = Instant::now();
    let mut hasher = Sha256::new();
    let mut size: u64 = 0;
    // Under the floor while the body is read: the connection counts what it reads.
    let pace = paced(&st, &request, Direction::Upload);
    let mut body = request.into_body().into_data_stream();
    while let Some(frame) = body.next().await {
        let bytes = frame.map_err(|_| ApiError::bad("body: the upload was cut off"))?;
        size += bytes.len() as u64;
        if size > max {
            return Err(ApiError::ArtifactTooLarge(max));
        }
        if size > reserved {
            reserved = reserve(&st, blob, job, size, size.saturating_add(RESERVE_AHEAD)).await?;
        }
        hasher.update(&bytes);
        writer.write(bytes).await?;
        // The deadline runs from the last byte received.
        poll.allow(started.elapsed());
        if touched.elapsed() >= touch_every {
            hub.artifact_blob_touch(blob).await?;
            touched = Instant::now();
        }
    }
    drop(pace);
    let chunk_size = writer.finish().await?;
    // Stored whole: from here on only the blob row needs deleting if it is not published.
    unfinished.writer = None;
    if reserved > size {
        // What was reserved ahead goes back: the blob holds its size from here on.
        reserve(&st, blob, job, size, size).await?;
    }
    let sha256 = hex(&hasher.finalize());
    let size = i64::try_from(size).map_err(|_| ApiError::ArtifactTooLarge(max))?;
    let published = hub
        .artifact_publish(&Upload {
            job,
            epoch,
            token_hash: &token.hash,
            path: &path,
            blob,
            size,
            sha256: &sha256,
            chunk_size,
        })
        .await?
        .map_err(|miss| fence_error(&st, &token, miss))?;
    match published {
        Published::Visible(_) => {
            unfinished.published = true;
            Ok((
                StatusCode::CREATED,
                Json(wire::ArtifactUploaded { path, size, sha256 }),
            ))
        }
        Published::Taken => Err(ApiError::ArtifactExists),
    }
}

/// How far ahead of the bytes it has an upload of no declared length reserves room (one
/// reservation per this many bytes).
const RESERVE_AHEAD: u64 = 1024 * 1024;

/// Move a running upload's reservation to `want` bytes and at least `need`: the bytes it holds
/// now, or `413 quota_exceeded`.
async fn reserve(st: &AppState, blob: Uuid, job: Uuid, need: u64, want: u64) -> ApiResult<u64> {
    let bounds = &st.limits.artifact_bounds;
    let r = Reservation {
        blob,
        job,
        start: None,
        need,
        want,
    };
    st.hub
        .artifact_reserve(&r, bounds)
        .await?
        .map_err(|refused| quota_exceeded(bounds, refused))
}

/// The refusal of a reservation, naming the bound.
fn quota_exceeded(bounds: &ArtifactBounds, refused: Refused) -> ApiError {
    ApiError::QuotaExceeded(match refused {
        Refused::Files => format!(
            "a job holds at most {} artifact files over all its attempts \
             (LEASEHOLD_ARTIFACT_MAX_FILES)",
            bounds.max_files
        ),
        Refused::JobBytes => format!(
            "a job holds at most {} bytes of artifacts over all its attempts \
             (LEASEHOLD_ARTIFACT_JOB_MAX_BYTES)",
            bounds.job_max_bytes
        ),
        Refused::WorkspaceBytes => format!(
            "a workspace holds at most {} bytes of artifacts \
             (LEASEHOLD_ARTIFACT_WORKSPACE_MAX_BYTES)",
            bounds.workspace_max_bytes.unwrap_or(u64::MAX)
        ),
        // The upload's blob went (the stale-upload sweep took it: the replica could not keep
        // it fresh): the database is what failed.
        Refused::Gone => return ApiError::Unavailable,
    })
}

/// `Content-Length`, when the request declares one.
pub fn declared_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
}

/// Most artifacts a page of `GET /v1/jobs/{id}/artifacts` holds.
const LIST_MAX: i64 = 1000;

// The list's byte budget is the job list's (v1.3), and a full page of the largest items (a
// 255-byte path, the sha256, the numbers and the field names: under 512 bytes as JSON) stays far
// inside it, so no page is ever cut short by it: `limit` alone ends a page.
const _: () = assert!(LIST_MAX as usize * 512 < super::jobs::LIST_PAGE_BYTES);

/// A page's `next`, which the next page's `after` hands back: `<epoch>:<path>` of its last
/// artifact.
fn cursor(a: &ArtifactInfo) -> String {
    format!("{}:{}", a.epoch, a.path)
}

/// An `after` as [`cursor`] writes it.
fn parse_cursor(after: &str) -> ApiResult<(i64, &str)> {
    after
        .split_once(':')
        .and_then(|(epoch, path)| {
            let epoch = epoch.parse::<i64>().ok().filter(|e| *e >= 0)?;
            is_valid_path(path).then_some((epoch, path))
        })
        .ok_or_else(|| ApiError::bad("after: must be the `next` of the previous page"))
}

/// `GET /v1/jobs/{id}/artifacts`: a page, newest epoch first, then by path (v1.3).
pub async fn list(
    State(st): State<Arc<AppState>>,
    Operator(key): Operator,
    super::extract::PathId(job): super::extract::PathId,
    query: QueryMap,
) -> ApiResult<Json<wire::ArtifactList>> {
    let limit = query.int("limit", 1, LIST_MAX)?.unwrap_or(100);
    let after = query.get("after").map(parse_cursor).transpose()?;
    let listed = st
        .hub
        .artifacts(job, &key.workspace, after, limit)
        .await?
        .ok_or(ApiError::NotFound)?;
    // Full: there may be more (as `GET /v1/jobs` says it).
    let next = (listed.len() as i64 == limit)
        .then(|| listed.last().map(cursor))
        .flatten();
    Ok(Json(wire::ArtifactList {
        artifacts: listed
            .into_iter()
            .map(|a| wire::Artifact {
                path: a.path,
                epoch: a.epoch,
                size: a.size,
                sha256: a.sha256,
                created_at: a.created_at,
            })
            .collect(),
        next,
    }))
}

/// Time a transfer going `direction` under the floor, on the connection `request` came on (none
/// when it came in-process), until the guard drops.
fn paced<B>(
    st: &AppState,
    request: &axum::http::Request<B>,
    direction: Direction,
) -> Option<TransferGuard> {
    let slot = request.extensions().get::<TransferSlot>()?;
    let metrics = &st.hub.metrics;
    let too_slow = metrics
        .transfers_too_slow
        .get_or_create(&DirectionLabel {
            direction: direction.label(),
        })
        .clone();
    Some(slot.start(
        direction,
        st.limits.transfer_floor,
        &metrics.transfers,
        too_slow,
    ))
}

/// `GET /v1/jobs/{id}/artifacts/{path}`: the bytes of the newest epoch's file of that path
/// (`?epoch=N`: of epoch N), `206` for a satisfiable `Range`.
pub async fn download(
    State(st): State<Arc<AppState>>,
    Operator(key): Operator,
    target: ArtifactPath,
    query: QueryMap,
    request: Request,
) -> ApiResult<Response> {
    let headers = request.headers();
    let epoch = query.int("epoch", 0, i64::MAX)?;
    // A place under the replica's transfer cap before any database work, held until the
    // answer's last byte is written (it goes with the body).
    let permit = st
        .transfer_caps
        .take(None, &st.hub.metrics.transfers_refused)?;
    let found = st
        .hub
        .artifact(target.job, &target.path, epoch, &key.workspace)
        .await?
        .ok_or(ApiError::NotFound)?;
    let size = found.blob.size;
    let etag = format!("\"{}\"", found.sha256);
    let matches = |h: header::HeaderName| {
        headers
            .get(h)
            .and_then(|v| v.to_str().ok())
            .map(|v| v.split(',').any(|t| t.trim() == etag || t.trim() == "*"))
    };
    let etag_value = HeaderValue::from_str(&etag).map_err(|_| ApiError::Internal)?;
    if matches(header::IF_NONE_MATCH) == Some(true) {
        let mut r = StatusCode::NOT_MODIFIED.into_response();
        r.headers_mut().insert(header::ETAG, etag_value);
        return Ok(r);
    }
    // A Range under an If-Range naming another version is ignored: the whole new artifact.
    let range_applies = matches(header::IF_RANGE) != Some(false);
    let range = match headers.get(header::RANGE).and_then(|v| v.to_str().ok()) {
        Some(spec) if range_applies => parse_range(spec, size)?,
        _ => None,
    };
    let (status, bytes) = match &range {
        Some(r) => (StatusCode::PARTIAL_CONTENT, r.clone()),
        None => (StatusCode::OK, 0..size),
    };
    let stream = st.artifacts.read(&found.blob, bytes.clone()).await?;
    // Under the floor while the answer is written: the guard goes with the body.
    let pace = paced(&st, &request, Direction::Download);
    let stream = stream.inspect(move |_| {
        let _ = (&pace, &permit);
    });
    let name = target.path.rsplit('/').next().unwrap_or("artifact");
    let mut response = Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, "application/octet-stream")
        .header(header::CONTENT_LENGTH, bytes.end - bytes.start)
        .header(header::ACCEPT_RANGES, "bytes")
        .header(header::ETAG, etag_value)
        .header(
            header::CONTENT_DISPOSITION,
            format!("attachment; filename=\"{name}\""),
        );
    if range.is_some() {
        response = response.header(
            header::CONTENT_RANGE,
            format!(
                "bytes {}-{}/{size}",
                bytes.start,
                bytes.end.saturating_sub(1)
            ),
        );
    }
    response
        .body(Body::from_stream(stream))
        .map_err(|_| ApiError::Internal)
}

/// The byte range a `Range` header asks for within `size` bytes: `None` to answer the whole
/// artifact (not a `bytes` range, malformed, or several ranges: RFC 9110 lets a server ignore
/// those), `Err(416)` when it starts past the end.
fn parse_range(spec: &str, size: u64) -> ApiResult<Option<Range<u64>>> {
    let Some(set) = spec.trim().strip_prefix("bytes=") else {
        return Ok(None);
    };
    if set.contains(',') {
        return Ok(None);
    }
    let Some((first, last)) = set.trim().split_once('-') else {
        return Ok(None);
    };
    let (first, last) = (first.trim(), last.trim());
    let number = |s: &str| s.parse::<u64>().ok();
    let range = match (first.is_empty(), last.is_empty()) {
        // bytes=-N: the last N bytes.
        (true, false) => match number(last) {
            Some(0) => return Err(ApiError::RangeNotSatisfiable(size)),
            Some(n) => size.saturating_sub(n)..size,
            None => return Ok(None),
        },
        // bytes=A-: from A to the end.
        (false, true) => match number(first) {
            Some(a) => a..size,
            None => return Ok(None),
        },
        (false, false) => match (number(first), number(last)) {
            (Some(a), Some(b)) if a <= b => a..size.min(b.saturating_add(1)),
            _ => return Ok(None),
        },
        (true, true) => return Ok(None),
    };
    if range.start >= size {
        return Err(ApiError::RangeNotSatisfiable(size));
    }
    Ok(Some(range))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_as_rfc_9110_reads_them() {
        assert_eq!(parse_range("bytes=0-9", 100).unwrap(), Some(0..10));
        assert_eq!(parse_range("bytes=90-200", 100).unwrap(), Some(90..100));
        assert_eq!(parse_range("bytes=10-", 100).unwrap(), Some(10..100));
        assert_eq!(parse_range("bytes=-10", 100).unwrap(), Some(90..100));
        assert_eq!(parse_range("bytes=-200", 100).unwrap(), Some(0..100));
        assert_eq!(parse_range("bytes=0-1,5-6", 100).unwrap(), None);
        assert_eq!(parse_range("items=0-1", 100).unwrap(), None);
        assert_eq!(parse_range("bytes=5-1", 100).unwrap(), None);
        assert!(parse_range("bytes=100-", 100).is_err());
        assert!(parse_range("bytes=0-", 0).is_err());
        assert!(parse_range("bytes=-0", 100).is_err());
    }

    #[test]
    fn only_an_artifact_put_is_an_upload() {
        let id = Uuid::now_v7();
        assert!(is_upload(
            &Method::PUT,
            &format!("/v1/runner/jobs/{id}/artifacts/a/b")
        ));
        assert!(!is_upload(
            &Method::GET,
            &format!("/v1/runner/jobs/{id}/artifacts/a")
        ));
        assert!(!is_upload(&Method::PUT, "/v1/secrets/A"));
        assert!(!is_upload(
            &Method::PUT,
            &format!("/v1/jobs/{id}/artifacts/a")
        ));
    }
}
