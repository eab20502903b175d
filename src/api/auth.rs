//! The two kinds of credential as extractors: an API key ([`Operator`], [`ApiKeyHash`]) and a
//! runner token ([`RunnerCaller`], [`RunnerToken`]), each a bearer token.
//!
//! Invariant: a missing, malformed or unknown credential is the contract's 401, counted against
//! the client's address ([`AppState::auth_failed`]: 429 once its bucket is empty).

use std::net::IpAddr;
use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::http::header;
use axum::http::request::Parts;

use super::client_address::client_ip;
use super::error::ApiError;
use super::AppState;
use crate::domain::credentials::{self, Kind};
use crate::store::records::{ApiKey, RunnerIdentity};

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
            Some(h) => state.hub.api_key(&h).await?,
            None => None,
        };
        match key {
            Some(k) => Ok(Operator(k)),
            None => Err(state.auth_failed(client_ip(parts, &state.limits.trusted_proxies))),
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
            Some(h) => state.hub.runner_by_token(&h).await?,
            None => None,
        };
        match runner {
            // The one route that takes this (the runner's own heartbeat) marks the runner seen
            // in its own statement; a second, detached write here raced it and could land after
            // any later change to `last_seen_at`.
            Some(r) => Ok(RunnerCaller(r)),
            None => Err(state.auth_failed(client_ip(parts, &state.limits.trusted_proxies))),
        }
    }
}

/// The hash of a bearer token of `kind` and the client's address; a missing or malformed one
/// is the contract's 401 (429 once the address's bucket is empty).
fn well_formed(parts: &Parts, state: &AppState, kind: Kind) -> Result<(Vec<u8>, IpAddr), ApiError> {
    let ip = client_ip(parts, &state.limits.trusted_proxies);
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
        match state.hub.api_key(&self.hash).await? {
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
