//! Extractors whose rejections speak the contract: JSON bodies (415 / 400 naming the field /
//! 413), UUID path ids, query parameters, and the two kinds of credential.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{ConnectInfo, FromRequest, FromRequestParts, Path, Request};
use axum::http::header;
use axum::http::header::HeaderName;
use axum::http::request::Parts;
use serde::de::DeserializeOwned;
use uuid::Uuid;

use super::error::ApiError;
use super::AppState;
use crate::config::TrustedProxies;
use crate::domain::credentials::{self, Kind};
use crate::store::records::{ApiKey, RunnerIdentity};

const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");

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

/// The client's address, for rate limiting: see [`client_address`].
pub fn client_ip(parts: &Parts, trusted: &TrustedProxies) -> IpAddr {
    let connection = parts
        .extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip())
        .unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED));
    let forwarded = parts
        .headers
        .get_all(X_FORWARDED_FOR)
        .iter()
        .filter_map(|v| v.to_str().ok());
    client_address(connection, forwarded, trusted)
}

/// The client a request comes from. Start from the connection's client (the TCP peer, or the
/// one a trusted proxy's PROXY header named); while that address is a trusted proxy, step to
/// the address it appended to `X-Forwarded-For` (the right-most one left). The first untrusted
/// address is the client: whatever a client writes into the header itself lies to the left of
/// it and is never read. An entry that is not an address stops the walk at the proxy.
pub fn client_address<'a>(
    connection: IpAddr,
    forwarded_for: impl Iterator<Item = &'a str>,
    trusted: &TrustedProxies,
) -> IpAddr {
    let mut client = connection.to_canonical();
    if !trusted.contains(client) {
        return client;
    }
    let hops: Vec<&str> = forwarded_for.flat_map(|v| v.split(',')).collect();
    for hop in hops.iter().rev() {
        if !trusted.contains(client) {
            break;
        }
        match forwarded_hop(hop.trim()) {
            Some(ip) => client = ip.to_canonical(),
            None => break,
        }
    }
    client
}

/// One `X-Forwarded-For` entry: an address, possibly with a port (`192.0.2.7:443`,
/// `[2001:db8::7]:443`).
fn forwarded_hop(hop: &str) -> Option<IpAddr> {
    hop.parse::<IpAddr>()
        .ok()
        .or_else(|| hop.parse::<SocketAddr>().ok().map(|a| a.ip()))
}

/// The client of a request, as an extractor.
pub struct ClientIp(pub IpAddr);

impl FromRequestParts<Arc<AppState>> for ClientIp {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &Arc<AppState>,
    ) -> Result<Self, Self::Rejection> {
        Ok(ClientIp(client_ip(
            parts,
            &state.hub.config.trusted_proxies,
        )))
    }
}

fn bearer(parts: &Parts) -> Option<&str> {
    let value = parts.headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// A caller holding a live API key.
pub struct Operator(pub ApiKey);

impl Operator {
    /// # Errors
    /// 403 unless the key's role is admin.
    pub fn require_admin(&self) -> Result<(), ApiError> {
        if self.0.admin {
            Ok(())
        } else {
            Err(ApiError::Forbidden)
        }
    }
}

impl FromRequestParts<Arc<AppState>> for Operator {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &Arc<AppState>,
    ) -> Result<Self, Self::Rejection> {
        let hash = bearer(parts).and_then(|t| credentials::parse(Kind::ApiKey, t));
        let key = match hash {
            Some(h) => state.hub.store.key_by_hash(&h).await?,
            None => None,
        };
        match key {
            Some(k) => Ok(Operator(k)),
            None => Err(state.auth_failed(client_ip(parts, &state.hub.config.trusted_proxies))),
        }
    }
}

/// A caller holding a live runner token. A route taking it marks the runner seen itself (every
/// other runner call authenticates inside its own statement, which does).
pub struct RunnerCaller(pub RunnerIdentity);

impl FromRequestParts<Arc<AppState>> for RunnerCaller {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &Arc<AppState>,
    ) -> Result<Self, Self::Rejection> {
        let hash = bearer(parts).and_then(|t| credentials::parse(Kind::Runner, t));
        let runner = match hash {
            Some(h) => state.hub.store.runner_by_token(&h).await?,
            None => None,
        };
        match runner {
            // The one route that takes this (the runner's own heartbeat) marks the runner seen
            // in its own statement; a second, detached write here raced it and could land after
            // any later change to `last_seen_at`.
            Some(r) => Ok(RunnerCaller(r)),
            None => Err(state.auth_failed(client_ip(parts, &state.hub.config.trusted_proxies))),
        }
    }
}

/// The hash of a bearer token of `kind` and the client's address; a missing or malformed one
/// is the contract's 401 (429 once the address's bucket is empty).
fn well_formed(parts: &Parts, state: &AppState, kind: Kind) -> Result<(Vec<u8>, IpAddr), ApiError> {
    let ip = client_ip(parts, &state.hub.config.trusted_proxies);
    match bearer(parts).and_then(|t| credentials::parse(kind, t)) {
        Some(hash) => Ok((hash, ip)),
        None => Err(state.auth_failed(ip)),
    }
}

/// A well-formed runner token, not yet checked: the lease call and every fenced job call
/// authenticate it inside the statement that does the work, saving a round trip.
pub struct RunnerToken {
    pub hash: Vec<u8>,
    pub ip: IpAddr,
}

impl FromRequestParts<Arc<AppState>> for RunnerToken {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &Arc<AppState>,
    ) -> Result<Self, Self::Rejection> {
        let (hash, ip) = well_formed(parts, state, Kind::Runner)?;
        Ok(RunnerToken { hash, ip })
    }
}

/// A well-formed API key, not yet checked: a dispatch authenticates it inside the statement
/// that parks the job. [`ApiKeyHash::check`] authenticates it on its own where a call needs the
/// caller first.
pub struct ApiKeyHash {
    pub hash: Vec<u8>,
    pub ip: IpAddr,
}

impl ApiKeyHash {
    /// The live key, or the contract's 401 (or 429 once the address's bucket is empty).
    ///
    /// # Errors
    /// Not a live key; the database failed.
    pub async fn check(&self, state: &AppState) -> Result<ApiKey, ApiError> {
        match state.hub.store.key_by_hash(&self.hash).await? {
            Some(k) => Ok(k),
            None => Err(state.auth_failed(self.ip)),
        }
    }
}

impl FromRequestParts<Arc<AppState>> for ApiKeyHash {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &Arc<AppState>,
    ) -> Result<Self, Self::Rejection> {
        let (hash, ip) = well_formed(parts, state, Kind::ApiKey)?;
        Ok(ApiKeyHash { hash, ip })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client(connection: &str, forwarded: &[&str], trusted: &str) -> IpAddr {
        client_address(
            connection.parse().unwrap(),
            forwarded.iter().copied(),
            &trusted.parse().unwrap(),
        )
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn without_trusted_proxies_the_connection_is_the_client() {
        assert_eq!(client("10.0.0.9", &["192.0.2.7"], ""), ip("10.0.0.9"));
        // A forged header from an untrusted peer is never read.
        assert_eq!(
            client("198.51.100.1", &["192.0.2.7"], "10.0.0.0/8"),
            ip("198.51.100.1")
        );
    }

    #[test]
    fn the_right_most_untrusted_address_is_the_client() {
        let lb = "10.0.0.0/8";
        assert_eq!(client("10.0.0.9", &["192.0.2.7"], lb), ip("192.0.2.7"));
        // The client wrote its own entry; the balancer appended the address it saw.
        assert_eq!(
            client("10.0.0.9", &["203.0.113.66, 192.0.2.7"], lb),
            ip("192.0.2.7")
        );
        // Proxies in a chain, and the same list split over two header lines.
        assert_eq!(
            client("10.0.0.9", &["203.0.113.66, 192.0.2.7", "10.1.1.1"], lb),
            ip("192.0.2.7")
        );
        // Ports and IPv4-mapped addresses.
        assert_eq!(
            client("::ffff:10.0.0.9", &["192.0.2.7:443"], lb),
            ip("192.0.2.7")
        );
        assert_eq!(
            client("10.0.0.9", &["[2001:db8::7]:443"], lb),
            ip("2001:db8::7")
        );
    }

    #[test]
    fn a_proxy_without_a_usable_entry_is_its_own_client() {
        let lb = "10.0.0.0/8";
        assert_eq!(client("10.0.0.9", &[], lb), ip("10.0.0.9"));
        assert_eq!(client("10.0.0.9", &["unknown"], lb), ip("10.0.0.9"));
        assert_eq!(client("10.0.0.9", &["192.0.2.7, "], lb), ip("10.0.0.9"));
        // Every hop trusted: the left-most.
        assert_eq!(
            client("10.0.0.9", &["10.2.2.2, 10.1.1.1"], lb),
            ip("10.2.2.2")
        );
    }
}
