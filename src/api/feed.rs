//! `GET /v1/events` (contract v1.4, "The workspace feed"): a member reads the workspace's job
//! events in commit order, as a page (`after`, `limit`, `kinds`, `wait_ms`) or, with
//! `Accept: text/event-stream`, as server-sent events.
//!
//! Invariants: the order and "never passes an event that commits later" are the statement's
//! (`sql/feed_page.sql`); this file validates, checks the cursor (made here for this workspace,
//! else `400` naming `after`; below what retention deleted, `410 gone` with the oldest cursor),
//! and shapes the answer. A stream ends after `LEASEHOLD_MAX_WAIT_MS` or at shutdown, and sends
//! a comment line at least every `LEASEHOLD_FEED_KEEPALIVE_MS` (at most 15 s).

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body as ResponseBody;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use bytes::Bytes;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::auth::Operator;
use super::deadline::LongPoll;
use super::error::{ApiError, ApiResult};
use super::extract::QueryMap;
use super::views;
use super::AppState;
use crate::domain::feed::Cursor;
use crate::hub::feed::FeedQuery;
use crate::wire;

/// Most kinds one read names.
const MAX_KINDS: usize = 16;

/// The query's kinds: comma-separated names, default `state`.
fn kinds(query: &QueryMap) -> ApiResult<Vec<String>> {
    let Some(raw) = query.get("kinds") else {
        return Ok(vec!["state".to_owned()]);
    };
    let mut out: Vec<String> = Vec::new();
    for k in raw.split(',').map(str::trim) {
        if k != "state" && !super::validate::is_event_kind(k) {
            return Err(ApiError::bad(
                "kinds: must be comma-separated event kinds (state, stdout, stderr, ...)",
            ));
        }
        if !out.iter().any(|o| o == k) {
            out.push(k.to_owned());
        }
    }
    if out.len() > MAX_KINDS {
        return Err(ApiError::bad(format!("kinds: at most {MAX_KINDS}")));
    }
    Ok(out)
}

/// The cursor a read starts after: `Last-Event-ID` (a stream resuming) or `after`; absent:
/// before the oldest event kept. A cursor of another workspace, or not made here, is 400; one
/// below what retention deleted is 410 with the oldest cursor.
async fn start(st: &AppState, workspace: &str, text: Option<&str>) -> ApiResult<Cursor> {
    let Some(text) = text else {
        return Ok(Cursor::START);
    };
    let cursor = Cursor::decode(text, workspace).ok_or_else(|| {
        ApiError::bad("after: not a cursor of this workspace's feed (use a `cursor` or `next` the feed answered)")
    })?;
    if let Some(pruned) = st.hub.feed_pruned(workspace).await? {
        let oldest = Cursor::after_xid(pruned);
        if cursor < oldest {
            return Err(ApiError::Gone(format!(
                "after: events past this cursor were deleted by retention; the oldest cursor is {}",
                oldest.encode(workspace)
            )));
        }
    }
    Ok(cursor)
}

fn wants_stream(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains("text/event-stream"))
}

pub async fn events(
    State(st): State<Arc<AppState>>,
    Operator(key): Operator,
    headers: HeaderMap,
    poll: LongPoll,
    query: QueryMap,
) -> ApiResult<Response> {
    let limit = query.int("limit", 1, 1000)?.unwrap_or(100);
    let kinds = kinds(&query)?;
    // As every wait_ms: 0..60000 accepted, clamped to LEASEHOLD_MAX_WAIT_MS.
    let max_wait = i64::try_from(st.limits.max_wait_ms).unwrap_or(i64::MAX);
    let wait_ms = query
        .int("wait_ms", 0, max_wait.max(60_000))?
        .unwrap_or(0)
        .min(max_wait);
    let resume = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty());
    let stream = wants_stream(&headers);
    let text = if stream {
        resume.or(query.get("after"))
    } else {
        query.get("after")
    };
    let after = start(&st, &key.workspace, text).await?;
    let q = FeedQuery {
        workspace: key.workspace.clone(),
        kinds,
        after,
        limit,
    };
    if stream {
        return Ok(event_stream(st, q));
    }
    let wait = Duration::from_millis(u64::try_from(wait_ms).unwrap_or(0));
    poll.allow(wait);
    let events = st.hub.wait_feed(&q, wait, &st.shutdown).await?;
    let next = events
        .last()
        .map_or(after, |e| e.position)
        .encode(&q.workspace);
    Ok(Json(wire::FeedPage {
        events: events
            .iter()
            .map(|e| views::feed_event(e, &q.workspace))
            .collect(),
        next,
    })
    .into_response())
}

/// The feed as server-sent events from `q.after`: each event `id: <cursor>` and `data: <the
/// event as in a page>`; a comment line at the start and whenever the keep-alive passes
/// without an event; the stream ends after `LEASEHOLD_MAX_WAIT_MS`, at shutdown, or when the
/// client goes (its channel closes).
fn event_stream(st: Arc<AppState>, mut q: FeedQuery) -> Response {
    let (tx, mut rx) = mpsc::channel::<Result<Bytes, Infallible>>(4);
    let keepalive = st.limits.feed_keepalive;
    let ends = Instant::now() + Duration::from_millis(st.limits.max_wait_ms);
    tokio::spawn(async move {
        if tx
            .send(Ok(Bytes::from_static(b": leasehold feed\n\n")))
            .await
            .is_err()
        {
            return;
        }
        loop {
            let now = Instant::now();
            if now >= ends || st.shutdown.is_cancelled() {
                return;
            }
            let wait = keepalive.min(ends - now);
            let page = tokio::select! {
                page = st.hub.wait_feed(&q, wait, &st.shutdown) => page,
                () = tx.closed() => return,
            };
            let events = match page {
                Ok(events) => events,
                Err(e) => {
                    tracing::warn!(error = %e, "a feed stream ends: the database failed");
                    return;
                }
            };
            let mut frame = String::new();
            for e in &events {
                let view = views::feed_event(e, &q.workspace);
                let data = serde_json::to_string(&view).expect("a feed event serialises");
                frame.push_str(&format!("id: {}\ndata: {data}\n\n", view.cursor));
            }
            if let Some(last) = events.last() {
                q.after = last.position;
            } else {
                frame.push_str(": keep-alive\n\n");
            }
            if tx.send(Ok(Bytes::from(frame))).await.is_err() {
                return;
            }
        }
    });
    let body = ResponseBody::from_stream(futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx)));
    let mut response = (StatusCode::OK, body).into_response();
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}
