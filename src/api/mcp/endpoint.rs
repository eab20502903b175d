//! `POST /mcp`: the tools over the Model Context Protocol's Streamable HTTP transport (rmcp's
//! `StreamableHttpService`), stateless and answering JSON, behind the API-key authentication
//! of every operator route; each tool call goes through this replica's own router in-process
//! ([`InProcess`]) with the caller's own headers.
//!
//! Invariant: `/mcp` keeps no session. Every request is authenticated on its own (the same
//! opaque 401, rate limit and 503 as any operator call, before the protocol is read), needs no
//! `Mcp-Session-Id`, and is answered by whichever replica it reaches. A refusal of the transport
//! itself (wrong `Accept`, an unknown protocol version header) is the contract's error shape;
//! JSON-RPC answers pass through untouched.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{header, HeaderName, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::RoleServer;
use tower_service::Service;

use super::{ApiAnswer, ApiRequest, Caller, Tools};
use crate::api::auth::Operator;
use crate::api::deadline::LongPoll;
use crate::api::error::ApiError;
use crate::api::AppState;
use crate::wire::{ErrorBody, ErrorDetail};

/// The largest API answer a tool reads (a page of jobs or events ends at 4 MiB).
const MAX_ANSWER_BYTES: usize = 16 << 20;
/// The largest transport refusal quoted in an error message.
const MAX_REFUSAL_BYTES: usize = 4 << 10;

const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");

/// The route's handler: authenticate (the [`Operator`] extractor's rejection is the API's),
/// then let the MCP transport answer.
pub async fn serve(
    State(st): State<Arc<AppState>>,
    _caller: Operator,
    request: Request,
) -> Response {
    let request = match one_json_rpc_object(request, st.limits.max_body_bytes).await {
        Ok(request) => request,
        Err(refused) => return refused.into_response(),
    };
    let caller = Arc::new(InProcess { state: st.clone() });
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_sse_keep_alive(None)
        .with_max_request_body_bytes(st.limits.max_body_bytes)
        // A bearer key is required on every request, so neither a rebound DNS name nor a
        // browser's origin can use a caller's credential: the Host and Origin checks meant for
        // unauthenticated local servers would only refuse the names a balancer serves under.
        .disable_allowed_hosts()
        .disable_allowed_origins();
    let service = StreamableHttpService::new(
        move || Ok(Tools::new(caller.clone())),
        Arc::new(NeverSessionManager::default()),
        config,
    );
    contract_shaped(service.handle(request).await).await
}

/// The request as it came, when its body is one JSON-RPC 2.0 object (a request, a notification
/// or a response, which a client may send) that rmcp can read; anything else (not JSON, a
/// batch, JSON that is not such an object, an `id` that is neither a string nor a number) is
/// the contract's `400 bad_request` (v1.3), never quoting the body.
async fn one_json_rpc_object(request: Request, limit: usize) -> Result<Request, ApiError> {
    let (parts, body) = request.into_parts();
    let bytes = axum::body::to_bytes(body, limit)
        .await
        .map_err(|_| ApiError::bad("body: could not be read in full"))?;
    let one = serde_json::from_slice::<serde_json::Value>(&bytes)
        .ok()
        .is_some_and(|v| v.get("jsonrpc").and_then(serde_json::Value::as_str) == Some("2.0"));
    // What rmcp would refuse to read (an `id` that is an object or an array, a `params` of the
    // wrong type): rmcp answers that `415` quoting the parser's error, so it is refused here
    // first, as the malformed request it is (issue 52 row 8).
    let one = one && serde_json::from_slice::<rmcp::model::ClientJsonRpcMessage>(&bytes).is_ok();
    if !one {
        return Err(ApiError::bad(
            "body: must be one JSON-RPC 2.0 object (a batch, or anything but a JSON object with \
             \"jsonrpc\": \"2.0\", is not served)",
        ));
    }
    Ok(Request::from_parts(parts, Body::from(bytes)))
}

/// A transport refusal in plain text becomes the contract's error JSON, same status.
async fn contract_shaped<B>(response: axum::http::Response<B>) -> Response
where
    B: axum::body::HttpBody<Data = bytes::Bytes> + Send + 'static,
    B::Error: Into<axum::BoxError>,
{
    let status = response.status();
    let json_or_stream = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json") || v.starts_with("text/event-stream"));
    if status.is_success() || json_or_stream {
        return response.map(Body::new);
    }
    let text = axum::body::to_bytes(Body::new(response.into_body()), MAX_REFUSAL_BYTES)
        .await
        .map(|b| String::from_utf8_lossy(&b).trim().to_owned())
        .unwrap_or_default();
    let code = match status {
        StatusCode::BAD_REQUEST => "bad_request",
        StatusCode::FORBIDDEN => "forbidden",
        StatusCode::NOT_FOUND => "not_found",
        StatusCode::METHOD_NOT_ALLOWED => "method_not_allowed",
        StatusCode::NOT_ACCEPTABLE => "not_acceptable",
        StatusCode::PAYLOAD_TOO_LARGE => "payload_too_large",
        StatusCode::UNSUPPORTED_MEDIA_TYPE => "unsupported_media_type",
        s if s.is_client_error() => "bad_request",
        _ => "internal",
    };
    let message = if text.is_empty() {
        status.canonical_reason().unwrap_or("refused").to_owned()
    } else {
        text
    };
    let body = ErrorBody {
        error: ErrorDetail {
            code: code.into(),
            message,
            state: None,
            min_version: None,
        },
    };
    (status, Json(body)).into_response()
}

/// Sends a tool's call through this replica's router, as the MCP request's caller: its
/// `Authorization`, its client address (for the rate limit) and its deadline, which a
/// long-poll's `wait_ms` extends as the route's own would.
pub struct InProcess {
    state: Arc<AppState>,
}

impl Caller for InProcess {
    async fn call(&self, request: ApiRequest, context: &RequestContext<RoleServer>) -> ApiAnswer {
        let mut builder = axum::http::Request::builder()
            .method(request.method)
            .uri(&request.target);
        if let Some(parts) = context.extensions.get::<axum::http::request::Parts>() {
            for name in [header::AUTHORIZATION, X_FORWARDED_FOR, header::USER_AGENT] {
                for value in parts.headers.get_all(&name) {
                    builder = builder.header(&name, value);
                }
            }
            if let Some(client) = parts.extensions.get::<ConnectInfo<SocketAddr>>() {
                builder = builder.extension(*client);
            }
            if let (Some(wait), Some(poll)) = (request.wait_ms, parts.extensions.get::<LongPoll>())
            {
                poll.allow(Duration::from_millis(
                    wait.min(self.state.limits.max_wait_ms),
                ));
            }
        }
        if let Some(key) = &request.idempotency_key {
            builder = builder.header(IDEMPOTENCY_KEY, key.as_str());
        }
        let body = match &request.body {
            Some(value) => {
                builder = builder.header(header::CONTENT_TYPE, "application/json");
                Body::from(serde_json::to_vec(value).unwrap_or_default())
            }
            None => Body::empty(),
        };
        // Every argument was checked as its route takes it (catalogue::build), so this is a bug.
        let Ok(http_request) = builder.body(body) else {
            return ApiAnswer::refused(500, "internal", "the tool's request could not be built");
        };
        let mut router = crate::api::router(self.state.clone());
        let response = match router.call(http_request).await {
            Ok(response) => response,
            Err(never) => match never {},
        };
        let status = response.status().as_u16();
        match axum::body::to_bytes(response.into_body(), MAX_ANSWER_BYTES).await {
            Ok(bytes) if bytes.is_empty() => ApiAnswer {
                status,
                body: serde_json::Value::Null,
            },
            Ok(bytes) => match serde_json::from_slice(&bytes) {
                Ok(body) => ApiAnswer { status, body },
                Err(_) => {
                    ApiAnswer::refused(500, "internal", "the API answered something not JSON")
                }
            },
            Err(_) => ApiAnswer::refused(503, "unavailable", "the API's answer could not be read"),
        }
    }
}

/// `/mcp` as a route of the replica ([`crate::api::every_route`]), documented as every route is.
pub fn route() -> crate::api::route_doc::Route {
    use crate::api::route_doc::{route, Auth, Doc};
    route(
        axum::http::Method::POST,
        "/mcp",
        axum::routing::post(serve),
        Doc::new("The operator tools over the Model Context Protocol (Streamable HTTP, stateless, JSON answers; v1.2): JSON-RPC in, JSON-RPC out; README, \"Tools for agents\"", Auth::Member).media("application/json"),
    )
}
