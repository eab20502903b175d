//! Extractors whose rejections speak the contract: JSON bodies (415 / 400 naming the field /
//! 413), UUID path ids and query parameters. The credentials are [`super::auth`]'s, the
//! client's address [`super::client_address`]'s.

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Path, Request};
use axum::http::header;
use axum::http::request::Parts;
use serde::de::DeserializeOwned;
use uuid::Uuid;

use super::error::ApiError;
use super::AppState;

/// A JSON body. A body needs `Content-Type: application/json`; an empty body without one is
/// read as `{}` (every field absent), so calls whose fields are all optional need no body.
pub struct Body<T>(pub T);

impl<T: DeserializeOwned> FromRequest<Arc<AppState>> for Body<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &Arc<AppState>) -> Result<Self, Self::Rejection> {
        let content_type = req
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(|v| {
                v.split(';')
                    .next()
                    .unwrap_or("")
                    .trim()
                    .to_ascii_lowercase()
            });
        let bytes = Bytes::from_request(req, state).await.map_err(|rejection| {
            if rejection.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::PayloadTooLarge
            } else {
                ApiError::bad("the request body could not be read")
            }
        })?;
        let json_type = content_type.as_deref() == Some("application/json");
        let bytes = if bytes.is_empty() && content_type.is_none() {
            Bytes::from_static(b"{}")
        } else if !json_type {
            return Err(ApiError::UnsupportedMediaType);
        } else {
            bytes
        };
        parse_json(&bytes).map(Body)
    }
}

/// Deserialise, naming the offending field in the error.
///
/// # Errors
/// 400 with a message that starts with the field's path.
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        let what = inner.to_string();
        let what = what.split(" at line").next().unwrap_or(&what).to_owned();
        if path == "." || path.is_empty() {
            if inner.is_syntax() || inner.is_eof() {
                ApiError::bad(format!("body: malformed JSON: {what}"))
            } else {
                ApiError::bad(format!("body: {what}"))
            }
        } else {
            ApiError::bad(format!("{path}: {what}"))
        }
    })?;
    de.end()
        .map_err(|_| ApiError::bad("body: trailing characters after the JSON value"))?;
    Ok(value)
}

/// The `{id}` of a route, a UUID; anything else (malformed, undecodable) is 400 naming `id`.
pub struct PathId(pub Uuid);

impl<S: Send + Sync> FromRequestParts<S> for PathId {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let Path(raw) = Path::<String>::from_request_parts(parts, state)
            .await
            .map_err(|_| ApiError::bad("id: must be a UUID"))?;
        Uuid::try_parse(&raw)
            .map(PathId)
            .map_err(|_| ApiError::bad(format!("id: '{}' is not a UUID", truncate(&raw, 64))))
    }
}

/// The raw query string as a map; duplicate names keep the last value.
pub struct QueryMap(pub HashMap<String, String>);

impl<S: Send + Sync> FromRequestParts<S> for QueryMap {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        let query = parts.uri.query().unwrap_or("");
        Ok(QueryMap(
            form_urlencoded::parse(query.as_bytes())
                .into_owned()
                .collect(),
        ))
    }
}

impl QueryMap {
    /// An integer parameter within `lo..=hi`, or `None` when absent.
    ///
    /// # Errors
    /// 400 naming the parameter.
    pub fn int(&self, name: &str, lo: i64, hi: i64) -> Result<Option<i64>, ApiError> {
        match self.0.get(name) {
            None => Ok(None),
            Some(raw) => match raw.parse::<i64>() {
                Ok(v) if (lo..=hi).contains(&v) => Ok(Some(v)),
                _ => Err(ApiError::bad(format!(
                    "{name}: must be an integer in {lo}..{hi}"
                ))),
            },
        }
    }

    pub fn get(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(String::as_str)
    }
}

pub fn truncate(s: &str, max: usize) -> String {
    s.chars().take(max).collect()
}
