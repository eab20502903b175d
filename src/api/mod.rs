//! The HTTP API: routes of the contract (`docs/api.md`), authentication, rate limiting
//! and the error mapping. Handlers validate and call the hub's operations (which reach the
//! store and wake what a change owes); what they apply of the configuration is [`Limits`],
//! read once when the replica starts.

pub mod artifacts;
pub mod auth;
pub mod client_address;
pub mod deadline;
mod envelope;
pub mod error;
pub mod extract;
mod feed;
mod jobs;
mod join;
pub mod mcp;
mod observe;
pub mod openapi;
mod operators;
mod ops;
mod placement;
pub mod poll_limit;
pub mod reference;
pub mod route_doc;
pub mod routes;
mod runner;
mod secrets;
pub mod transfer;
mod ui;
pub mod validate;
pub mod views;
mod webhooks;

use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use axum::response::{IntoResponse, Response};
use axum::Router;
use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use tokio_util::sync::CancellationToken;

use crate::config::{Config, TrustedProxies};
use crate::domain::capabilities::Vocabulary;
use crate::domain::sealing::Sealer;
use crate::domain::version::Version;
use crate::hub::Hub;
use error::ApiError;

/// What every handler shares.
pub struct AppState {
    pub hub: Arc<Hub>,
    /// What handlers apply of the configuration.
    pub limits: Limits,
    pub vocabulary: Vocabulary,
    /// Token bucket per client address for failed authentications and enrolments. Kept per
    /// replica, as the contract allows.
    pub limiter: DefaultKeyedRateLimiter<IpAddr>,
    /// Fires on SIGTERM: open long-polls answer at once.
    pub shutdown: CancellationToken,
    /// Seals and opens workspace secrets; `None` without `LEASEHOLD_SECRETS_KEY`.
    pub sealer: Option<Sealer>,
    /// Versions this replica recorded for runner tokens, so a lease call repeating its version
    /// costs no statement.
    pub versions: RecordedVersions,
    /// Open lease calls per runner token (`LEASEHOLD_MAX_POLLS_PER_RUNNER`).
    pub polls: poll_limit::PollSlots,
    /// Running artifact transfers, per runner token and on this replica
    /// (`LEASEHOLD_MAX_TRANSFERS_PER_RUNNER`, `LEASEHOLD_MAX_TRANSFERS`).
    pub transfer_caps: transfer::TransferCaps,
    /// The certificate this replica serves HTTPS with, when it does (its pin goes into join
    /// codes' connect payloads).
    pub certificates: Option<Arc<crate::tls::certificates::Certificates>>,
    /// The OpenAPI document of the route table, as JSON text (`GET /openapi.json`).
    pub openapi: &'static str,
    /// Where artifact bytes are kept (`LEASEHOLD_ARTIFACT_STORE`).
    pub artifacts: Arc<dyn crate::store::artifacts::BlobStore>,
}

/// What the API applies of the configuration (`LEASEHOLD_*`, see [`Config`]), copied once when
/// the replica starts.
pub struct Limits {
    /// The longest a long-poll waits.
    pub max_wait_ms: u64,
    /// A dispatch's `no_runner_timeout_ms` when it names none.
    pub no_runner_timeout_ms: u64,
    /// A lease's time to live, told to the runner with each job it leases.
    pub lease_ttl_ms: u64,
    /// The body limit of every route but an artifact upload.
    pub max_body_bytes: usize,
    /// The largest artifact an upload may send.
    pub artifact_max_bytes: u64,
    /// The artifact bounds per job and per workspace (v1.3).
    pub artifact_bounds: crate::store::artifacts::ArtifactBounds,
    /// The floor under an artifact transfer's rate (v1.3).
    pub transfer_floor: transfer::Floor,
    /// After this long without a byte an upload is stale (its blob is touched well before).
    pub artifact_stale_ms: u64,
    /// A request's deadline (`deadline.rs`).
    pub request_timeout: Duration,
    /// Runners below it are outdated (409 `runner_outdated` on lease).
    pub min_runner_version: Option<Version>,
    /// Balancers whose forwarded client address is believed.
    pub trusted_proxies: TrustedProxies,
    /// Where runners reach the service, put into join codes' connect payloads.
    pub public_url: Vec<String>,
    /// A feed stream's comment line comes at least this often (v1.4).
    pub feed_keepalive: Duration,
    /// Webhook URLs may be plain `http` (v1.4).
    pub webhook_allow_http: bool,
    /// Webhook URLs may name a private address literal (v1.4).
    pub webhook_allow_private: bool,
}

impl Limits {
    pub fn new(config: &Config) -> Self {
        Self {
            max_wait_ms: config.max_wait_ms,
            no_runner_timeout_ms: config.no_runner_timeout_ms,
            lease_ttl_ms: config.lease_ttl_ms,
            max_body_bytes: config.max_body_bytes,
            artifact_max_bytes: config.artifact_max_bytes,
            artifact_bounds: crate::store::artifacts::ArtifactBounds {
                max_files: config.artifact_max_files,
                job_max_bytes: config.artifact_job_max_bytes,
                workspace_max_bytes: config.artifact_workspace_max_bytes,
            },
            transfer_floor: transfer::Floor {
                min_bytes: config.transfer_min_bytes,
                window: Duration::from_millis(config.transfer_window_ms.max(1)),
            },
            artifact_stale_ms: config.artifact_stale_ms,
            request_timeout: config.request_timeout(),
            min_runner_version: config.min_runner_version.clone(),
            trusted_proxies: config.trusted_proxies.clone(),
            public_url: config.public_url.clone(),
            feed_keepalive: Duration::from_millis(config.feed_keepalive_ms.clamp(10, 15_000)),
            webhook_allow_http: config.webhook_allow_http,
            webhook_allow_private: config.webhook_allow_private,
        }
    }
}

/// The version last recorded through this replica per runner token hash. Only ever a shortcut:
/// a miss records again. Bounded: cleared whole when it grows past [`RecordedVersions::MAX`].
/// Its lock does not poison (a panic under it cannot break later lease calls).
#[derive(Default)]
pub struct RecordedVersions(parking_lot::Mutex<std::collections::HashMap<Vec<u8>, String>>);

impl RecordedVersions {
    const MAX: usize = 100_000;

    pub fn already_recorded(&self, token_hash: &[u8], version: &str) -> bool {
        self.0.lock().get(token_hash).is_some_and(|v| v == version)
    }

    pub fn recorded(&self, token_hash: &[u8], version: &str) {
        let mut map = self.0.lock();
        if map.len() >= Self::MAX {
            map.clear();
        }
        map.insert(token_hash.to_vec(), version.to_owned());
    }
}

impl AppState {
    /// The state of a replica's router: `artifacts` keeps the bytes
    /// ([`crate::store::artifacts::open`]).
    pub fn new(
        hub: Arc<Hub>,
        config: &Config,
        artifacts: Arc<dyn crate::store::artifacts::BlobStore>,
        shutdown: CancellationToken,
    ) -> Self {
        let period = Duration::from_secs_f64(1.0 / config.auth_refill_per_s.max(0.001));
        let quota = Quota::with_period(period)
            .expect("non-zero period")
            .allow_burst(NonZeroU32::new(config.auth_burst.max(1)).expect("non-zero burst"));
        Self {
            limits: Limits::new(config),
            vocabulary: Vocabulary::parse(config.capability_vocabulary.as_deref()),
            limiter: RateLimiter::keyed(quota),
            sealer: config.sealer(),
            versions: RecordedVersions::default(),
            polls: poll_limit::PollSlots::new(config.max_polls_per_runner),
            transfer_caps: transfer::TransferCaps::new(
                config.max_transfers_per_runner,
                config.max_transfers,
            ),
            certificates: None,
            openapi: openapi::text(),
            artifacts,
            hub,
            shutdown,
        }
    }

    /// Take one token from `ip`'s bucket: `Err(429)` once it is empty.
    ///
    /// # Errors
    /// 429 with the seconds until the next token.
    pub fn spend_rate_token(&self, ip: IpAddr) -> Result<(), ApiError> {
        self.limiter
            .check_key(&ip)
            .map_err(|not_until| ApiError::RateLimited {
                retry_after_s: not_until
                    .wait_time_from(DefaultClock::default().now())
                    .as_secs_f64()
                    .ceil() as u64,
            })
    }

    /// A failed authentication: 401 while the bucket has tokens, then 429.
    pub fn auth_failed(&self, ip: IpAddr) -> ApiError {
        match self.spend_rate_token(ip) {
            Ok(()) => ApiError::Unauthorized,
            Err(limited) => limited,
        }
    }
}

/// Every route a replica serves: the route table's, and `/mcp`, whose tools call the others
/// (the table imports nothing of it). The router and the OpenAPI document are built from this.
pub fn every_route() -> Vec<route_doc::Route> {
    let mut all = routes::table();
    all.push(mcp::endpoint::route());
    all
}

/// The router of one replica.
pub fn router(state: Arc<AppState>) -> Router {
    // Every route comes from the one list the OpenAPI document is built from.
    let mut router = Router::new();
    for route in every_route() {
        if let Some(handler) = route.handler {
            router = router.route(route.path, handler);
        }
    }
    router
        .fallback(|| async { ApiError::NotFound })
        .method_not_allowed_fallback(|| async { ApiError::MethodNotAllowed })
        .layer(envelope::EnvelopeLayer::new(state.clone()))
        .with_state(state)
}

/// The answer to a request whose handler panicked: the contract's 500 JSON. The panic is
/// caught per request and nothing a handler shares stays locked or poisoned (every lock in the
/// server is `parking_lot`'s), so later calls are served as before.
fn panicked(_payload: Box<dyn std::any::Any + Send + 'static>) -> Response {
    tracing::error!("a request handler panicked; answered 500");
    ApiError::Internal.into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::header;
    use axum::routing::get;
    use tower_http::catch_panic::CatchPanicLayer;

    impl RecordedVersions {
        fn panic_while_held(&self) {
            let _held = self.0.lock();
            panic!("a bug while the versions lock is held");
        }
    }

    /// Issue 18, row 12: a handler that panics while holding a shared lock is answered with
    /// the contract's 500 JSON, over real HTTP, and later calls that take the same lock work.
    #[tokio::test]
    async fn a_panic_under_a_lock_is_a_500_and_later_calls_work() {
        let versions = Arc::new(RecordedVersions::default());
        let (boom, ok) = (versions.clone(), versions.clone());
        let app = Router::new()
            .route(
                "/boom",
                get(move || async move {
                    boom.panic_while_held();
                    "unreachable"
                }),
            )
            .route(
                "/ok",
                get(move || async move {
                    ok.recorded(b"hash", "1.0.0");
                    if ok.already_recorded(b"hash", "1.0.0") {
                        "recorded"
                    } else {
                        "lost"
                    }
                }),
            )
            .layer(CatchPanicLayer::custom(panicked));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move { axum::serve(listener, app).await });
        let http = reqwest::Client::new();
        for _ in 0..3 {
            let r = http
                .get(format!("http://{addr}/boom"))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 500);
            assert_eq!(
                r.headers()[header::CONTENT_TYPE].to_str().unwrap(),
                "application/json"
            );
            let body: serde_json::Value = r.json().await.unwrap();
            assert_eq!(body["error"]["code"], "internal");
            assert!(body["error"]["message"].is_string());
            let r = http.get(format!("http://{addr}/ok")).send().await.unwrap();
            assert_eq!(r.status(), 200);
            assert_eq!(r.text().await.unwrap(), "recorded");
        }
        server.abort();
    }
}
