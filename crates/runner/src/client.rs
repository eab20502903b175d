//! A typed HTTP client over [`crate::wire`]: the runner, the CLI, the benchmark and the tests
//! all speak the contract through it. It imports nothing of the server.
//!
//! HTTPS goes through rustls with the [`Trust`] it is built with (system roots, `--ca-cert`, or
//! a pinned key); a refused certificate is a [`ClientError::Tls`] that says why in words, and
//! is final (no retry or failover changes it).

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde::de::DeserializeOwned;
use serde::Serialize;
use uuid::Uuid;

mod artifacts;
pub mod scheme;

pub use crate::tls::{Pin, Trust};
use crate::wire::{self, ErrorBody};

/// A failed call: the contract's error, or no answer at all.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("{status} {code}: {message}")]
    Api {
        status: StatusCode,
        code: String,
        message: String,
        /// On `job_terminal`: the terminal state.
        state: Option<String>,
    },
    #[error("transport: {0}")]
    Transport(#[from] reqwest::Error),
    /// The server's certificate was refused, or the TLS handshake failed: the message says why.
    #[error("{0}")]
    Tls(String),
}

impl ClientError {
    /// The contract's error code, if the server answered.
    pub fn code(&self) -> Option<&str> {
        match self {
            ClientError::Api { code, .. } => Some(code),
            ClientError::Transport(_) | ClientError::Tls(_) => None,
        }
    }

    pub fn status(&self) -> Option<StatusCode> {
        match self {
            ClientError::Api { status, .. } => Some(*status),
            ClientError::Transport(_) | ClientError::Tls(_) => None,
        }
    }

    /// Whether the call is worth repeating (here or at another replica): no answer at all,
    /// or an answer that asks to try again (502, 503, 504). Any other answer is final, and so
    /// is a refused certificate.
    pub fn is_transient(&self) -> bool {
        match self {
            ClientError::Transport(_) => true,
            ClientError::Tls(_) => false,
            ClientError::Api { status, .. } => matches!(status.as_u16(), 502..=504),
        }
    }
}

/// First back-off after a failed round; doubles each round up to [`MAX_BACKOFF`].
pub const BASE_BACKOFF: Duration = Duration::from_millis(250);
/// The longest back-off.
pub const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// Full-jitter exponential back-off for the `round`th consecutive failed round (from 0), so a
/// fleet of callers does not hammer a recovering service in step.
pub fn backoff(round: u32) -> Duration {
    use rand::Rng;
    let cap = BASE_BACKOFF
        .saturating_mul(1u32 << round.min(16))
        .min(MAX_BACKOFF);
    let ms = rand::rng().random_range(cap.as_millis() as u64 / 2..=cap.as_millis() as u64);
    Duration::from_millis(ms)
}

pub type Result<T> = std::result::Result<T, ClientError>;

/// The error of a non-2xx answer whose body is `bytes`.
fn api_error(status: StatusCode, bytes: &[u8]) -> ClientError {
    let (code, message, state) = match serde_json::from_slice::<ErrorBody>(bytes) {
        Ok(e) => (
            e.error.code,
            e.error.message,
            e.error.state.map(|s| s.to_string()),
        ),
        Err(_) => (
            "unknown".into(),
            String::from_utf8_lossy(bytes).into_owned(),
            None,
        ),
    };
    ClientError::Api {
        status,
        code,
        message,
        state,
    }
}

/// What `GET /v1/jobs` asks for: filters (each `None` for any), a page size, where the page
/// starts, and the order.
#[derive(Debug, Clone, Copy, Default)]
pub struct JobQuery<'a> {
    pub state: Option<&'a str>,
    /// v1.3: `succeeded`, `failed`, `cancelled` or `rejected`.
    pub outcome: Option<&'a str>,
    pub limit: Option<u32>,
    /// The `next` of the previous page.
    pub after: Option<Uuid>,
    /// `order=desc` (v1.1): newest first, `after` then meaning older than it.
    pub newest_first: bool,
    /// `q` (leasehold's own, docs/contract-notes.md): jobs whose id is this or starts or ends
    /// with its hex digits, or whose command holds this text in any case.
    pub search: Option<&'a str>,
}

/// `text` as a query string value: unreserved characters as they are, every other byte
/// `%XX`.
fn percent_encoded(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// One server (or load balancer) and one credential.
#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    base: String,
    token: Option<String>,
}

impl Client {
    /// A client for `base` (e.g. `http://127.0.0.1:8080`) calling with `token`, trusting the
    /// system's CAs.
    pub fn new(base: impl Into<String>, token: Option<String>) -> Self {
        Self::with_trust(base, token, &Trust::default()).expect("the default trust needs no file")
    }

    /// A client for `base` calling with `token`, trusting `trust`.
    ///
    /// # Errors
    /// The trust names a CA file that cannot be read.
    pub fn with_trust(
        base: impl Into<String>,
        token: Option<String>,
        trust: &Trust,
    ) -> anyhow::Result<Self> {
        let base = base.into().trim_end_matches('/').to_owned();
        let https = !crate::wire::input::is_plain_http(&base);
        // A pin checks a key plain HTTP has none of: never send a credential unchecked.
        anyhow::ensure!(
            trust.pin.is_none() || crate::wire::input::is_https(&base),
            "{}: the server's key is pinned, which only https:// can check: refusing to call it \
             over plain HTTP",
            crate::wire::input::escaped(&base)
        );
        let http = reqwest::Client::builder()
            .use_preconfigured_tls(trust.client_config(https)?)
            .pool_idle_timeout(Duration::from_secs(30))
            .tcp_nodelay(true)
            // Every call says which leasehold sent it (runners: their version).
            .user_agent(concat!("leasehold/", env!("CARGO_PKG_VERSION")))
            .connect_timeout(Duration::from_secs(5))
            .build()
            .expect("reqwest client");
        Ok(Self { http, base, token })
    }

    /// The same server with another credential, sharing connections.
    pub fn with_token(&self, token: impl Into<String>) -> Self {
        Self {
            http: self.http.clone(),
            base: self.base.clone(),
            token: Some(token.into()),
        }
    }

    pub fn base(&self) -> &str {
        &self.base
    }

    /// The credential this client calls with.
    pub fn token(&self) -> Option<&str> {
        self.token.as_deref()
    }

    /// Send a request; `body` is JSON when given. Returns the status and decoded answer.
    ///
    /// # Errors
    /// Transport failures, or any non-2xx answer as [`ClientError::Api`].
    pub async fn call<B: Serialize + ?Sized, T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<&B>,
        headers: &[(&str, &str)],
    ) -> Result<(StatusCode, T)> {
        let mut req = self
            .http
            .request(method, format!("{}{}", self.base, path))
            .timeout(Duration::from_secs(75));
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        if let Some(b) = body {
            req = req.json(b);
        }
        let resp = req
            .send()
            .await
            .map_err(|e| match crate::tls::explain(&e) {
                Some(why) => ClientError::Tls(format!("{}: {why}", self.base)),
                None => ClientError::Transport(e),
            })?;
        let status = resp.status();
        let bytes = resp.bytes().await?;
        if !status.is_success() {
            return Err(api_error(status, &bytes));
        }
        let bytes = if bytes.is_empty() {
            &b"null"[..]
        } else {
            &bytes[..]
        };
        let value = serde_json::from_slice(bytes).map_err(|e| ClientError::Api {
            status,
            code: "bad_response".into(),
            message: e.to_string(),
            state: None,
        })?;
        Ok((status, value))
    }

    async fn post<B: Serialize + ?Sized, T: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
    ) -> Result<T> {
        self.call(Method::POST, path, Some(body), &[])
            .await
            .map(|(_, v)| v)
    }

    async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T> {
        self.call::<(), T>(Method::GET, path, None, &[])
            .await
            .map(|(_, v)| v)
    }

    async fn delete(&self, path: &str) -> Result<()> {
        self.call::<(), serde_json::Value>(Method::DELETE, path, None, &[])
            .await
            .map(drop)
    }

    // ---- operators and dispatchers --------------------------------------------------------

    pub async fn create_key(&self, subject: &str, role: wire::Role) -> Result<wire::CreatedKey> {
        self.post(
            "/v1/keys",
            &wire::CreateKey {
                subject: subject.into(),
                role,
            },
        )
        .await
    }

    pub async fn revoke_key(&self, id: Uuid) -> Result<()> {
        self.delete(&format!("/v1/keys/{id}")).await
    }

    pub async fn pair_runner(
        &self,
        tier: wire::Tier,
        req: &wire::CreateRunner,
    ) -> Result<wire::RunnerWithToken> {
        match tier {
            wire::Tier::Personal => self.post("/v1/runners", req).await,
            wire::Tier::Workspace => self.post("/v1/workspace/runners", req).await,
        }
    }

    pub async fn runners(&self, tier: wire::Tier) -> Result<Vec<wire::Runner>> {
        let path = match tier {
            wire::Tier::Personal => "/v1/runners",
            wire::Tier::Workspace => "/v1/workspace/runners",
        };
        self.get::<wire::RunnerList>(path).await.map(|l| l.runners)
    }

    pub async fn revoke_runner(&self, tier: wire::Tier, id: Uuid) -> Result<()> {
        match tier {
            wire::Tier::Personal => self.delete(&format!("/v1/runners/{id}")).await,
            wire::Tier::Workspace => self.delete(&format!("/v1/workspace/runners/{id}")).await,
        }
    }

    pub async fn create_join_code(&self, req: &wire::CreateJoinCode) -> Result<wire::JoinCode> {
        self.post("/v1/join-codes", req).await
    }

    /// v1.2: what the join URL `<base>/j/<short>` hands out, once (no credential).
    pub async fn fetch_join_url(&self, short: &str) -> Result<wire::JoinUrl> {
        self.get(&format!("/j/{short}")).await
    }

    pub async fn dispatch(&self, req: &wire::Dispatch) -> Result<wire::Job> {
        self.post("/v1/jobs", req).await
    }

    /// Dispatch many jobs in one call (v1.1): all parked in one transaction, in order, or none.
    pub async fn dispatch_batch(&self, jobs: Vec<wire::BatchItem>) -> Result<Vec<wire::Job>> {
        self.post::<_, wire::Jobs>("/v1/jobs/batch", &wire::DispatchBatch { jobs })
            .await
            .map(|j| j.jobs)
    }

    /// Dispatch with an `Idempotency-Key`; the status tells a first dispatch (201) from a repeat (200).
    pub async fn dispatch_idempotent(
        &self,
        req: &wire::Dispatch,
        key: &str,
    ) -> Result<(StatusCode, wire::Job)> {
        self.call(
            Method::POST,
            "/v1/jobs",
            Some(req),
            &[("Idempotency-Key", key)],
        )
        .await
    }

    pub async fn job(&self, id: Uuid) -> Result<wire::Job> {
        self.get(&format!("/v1/jobs/{id}")).await
    }

    /// The job as soon as it is terminal, or as it is when `wait_ms` ends.
    pub async fn wait_job(&self, id: Uuid, wait_ms: u64) -> Result<wire::Job> {
        self.get(&format!("/v1/jobs/{id}?wait_ms={wait_ms}")).await
    }

    /// A page of the workspace's jobs, oldest first: [`Client::list_jobs`] without an outcome.
    pub async fn jobs(
        &self,
        state: Option<&str>,
        limit: Option<u32>,
        after: Option<Uuid>,
    ) -> Result<wire::JobList> {
        self.list_jobs(&JobQuery {
            state,
            limit,
            after,
            ..JobQuery::default()
        })
        .await
    }

    /// `GET /v1/jobs` with `query`.
    pub async fn list_jobs(&self, query: &JobQuery<'_>) -> Result<wire::JobList> {
        let mut q = Vec::new();
        for (name, value) in [
            ("state", query.state),
            ("outcome", query.outcome),
            ("q", query.search),
        ] {
            if let Some(v) = value {
                q.push(format!("{name}={}", percent_encoded(v)));
            }
        }
        if let Some(l) = query.limit {
            q.push(format!("limit={l}"));
        }
        if let Some(a) = query.after {
            q.push(format!("after={a}"));
        }
        if query.newest_first {
            q.push("order=desc".into());
        }
        self.get(&format!("/v1/jobs?{}", q.join("&"))).await
    }

    pub async fn cancel(&self, id: Uuid) -> Result<wire::Job> {
        self.post(&format!("/v1/jobs/{id}/cancel"), &serde_json::json!({}))
            .await
    }

    /// Run a job again (v1.2): a settled job is parked again, a leased one superseded; `key`
    /// is sent as the `Idempotency-Key`.
    pub async fn retry_job(&self, id: Uuid, key: Option<&str>) -> Result<wire::Job> {
        let headers: Vec<(&str, &str)> = key.map(|k| ("Idempotency-Key", k)).into_iter().collect();
        self.call(
            Method::POST,
            &format!("/v1/jobs/{id}/retry"),
            Some(&serde_json::json!({})),
            &headers,
        )
        .await
        .map(|(_, job)| job)
    }

    pub async fn events(&self, id: Uuid, after: i64, wait_ms: u64) -> Result<wire::EventList> {
        self.get(&format!(
            "/v1/jobs/{id}/events?after={after}&wait_ms={wait_ms}"
        ))
        .await
    }

    /// A page of the workspace feed (v1.4) after `after` (a cursor; `None`: from the oldest
    /// kept), of `kinds` (empty: `state`), waiting up to `wait_ms` for an event.
    pub async fn feed(
        &self,
        after: Option<&str>,
        kinds: &[String],
        limit: Option<i64>,
        wait_ms: u64,
    ) -> Result<wire::FeedPage> {
        let mut path = format!("/v1/events?wait_ms={wait_ms}");
        if let Some(a) = after {
            path.push_str(&format!("&after={}", query_text(a)));
        }
        if !kinds.is_empty() {
            path.push_str(&format!("&kinds={}", query_text(&kinds.join(","))));
        }
        if let Some(l) = limit {
            path.push_str(&format!("&limit={l}"));
        }
        self.get(&path).await
    }

    /// Create or replace a webhook (admin, v1.4): the status says which (201 created, with
    /// the secret; 200 replaced).
    pub async fn put_webhook(
        &self,
        name: &str,
        req: &wire::PutWebhook,
    ) -> Result<(StatusCode, wire::Webhook)> {
        self.call(
            Method::PUT,
            &format!("/v1/webhooks/{}", query_text(name)),
            Some(req),
            &[],
        )
        .await
    }

    pub async fn webhooks(&self) -> Result<wire::WebhookList> {
        self.get("/v1/webhooks").await
    }

    pub async fn delete_webhook(&self, name: &str) -> Result<()> {
        self.call::<(), serde_json::Value>(
            Method::DELETE,
            &format!("/v1/webhooks/{}", query_text(name)),
            None,
            &[],
        )
        .await
        .map(drop)
    }

    /// A page of a webhook's deliveries, newest first, older than `after` (a delivery id).
    pub async fn webhook_deliveries(
        &self,
        name: &str,
        after: Option<Uuid>,
        limit: Option<i64>,
    ) -> Result<wire::WebhookDeliveryList> {
        let mut path = format!("/v1/webhooks/{}/deliveries?", query_text(name));
        if let Some(a) = after {
            path.push_str(&format!("after={a}&"));
        }
        if let Some(l) = limit {
            path.push_str(&format!("limit={l}"));
        }
        self.get(&path).await
    }

    /// Send delivery `id`'s event again, as a new delivery.
    pub async fn redeliver(&self, name: &str, id: Uuid) -> Result<wire::WebhookDelivery> {
        self.post(
            &format!(
                "/v1/webhooks/{}/deliveries/{id}/redeliver",
                query_text(name)
            ),
            &serde_json::json!({}),
        )
        .await
    }

    pub async fn preflight(&self, req: &wire::Preflight) -> Result<wire::PreflightReport> {
        self.post("/v1/preflight", req).await
    }

    pub async fn pool(&self) -> Result<wire::Pool> {
        self.get("/v1/pool").await
    }

    /// Create or replace a workspace secret (admin), with the default scope (`runners`
    /// `workspace`, `dispatch` `member`).
    pub async fn put_secret(&self, name: &str, value: &str) -> Result<()> {
        self.put_secret_scoped(name, value, None, None).await
    }

    /// Create or replace a workspace secret (admin) with its scope: `runners` `workspace` |
    /// `any`, `dispatch` `member` | `admin` (`None`: the default).
    pub async fn put_secret_scoped(
        &self,
        name: &str,
        value: &str,
        runners: Option<&str>,
        dispatch: Option<&str>,
    ) -> Result<()> {
        self.call::<_, serde_json::Value>(
            Method::PUT,
            &format!("/v1/secrets/{name}"),
            Some(&wire::PutSecret {
                value: value.to_owned(),
                runners: runners.map(str::to_owned),
                dispatch: dispatch.map(str::to_owned),
            }),
            &[],
        )
        .await
        .map(drop)
    }

    /// The workspace's secrets, by name (never a value).
    pub async fn secrets(&self) -> Result<Vec<wire::SecretInfo>> {
        self.get::<wire::SecretList>("/v1/secrets")
            .await
            .map(|l| l.secrets)
    }

    pub async fn delete_secret(&self, name: &str) -> Result<()> {
        self.delete(&format!("/v1/secrets/{name}")).await
    }

    /// Approve (`true`) or revoke a repository target of a runner.
    pub async fn set_repo_target(
        &self,
        runner: Uuid,
        target: Uuid,
        approve: bool,
    ) -> Result<wire::Runner> {
        let action = if approve { "approve" } else { "revoke" };
        self.post(
            &format!("/v1/runners/{runner}/repo-targets/{target}/{action}"),
            &serde_json::json!({}),
        )
        .await
    }

    // ---- runners ---------------------------------------------------------------------------

    pub async fn enroll(&self, req: &wire::Enroll) -> Result<wire::RunnerWithToken> {
        self.post("/v1/enroll", req).await
    }

    pub async fn runner_heartbeat(
        &self,
        req: &wire::RunnerHeartbeat,
    ) -> Result<wire::RunnerHeartbeatReply> {
        self.post("/v1/runner/heartbeat", req).await
    }

    pub async fn lease(&self, req: &wire::Lease) -> Result<Vec<wire::LeasedJob>> {
        self.post::<_, wire::Leased>("/v1/runner/lease", req)
            .await
            .map(|l| l.jobs)
    }

    /// A lease call whose whole answer matters: the jobs and what its `done` reports came to.
    pub async fn lease_reporting(&self, req: &wire::Lease) -> Result<wire::Leased> {
        self.post("/v1/runner/lease", req).await
    }

    pub async fn heartbeat_job(&self, id: Uuid, epoch: i64) -> Result<wire::LeaseExtended> {
        self.post(
            &format!("/v1/runner/jobs/{id}/heartbeat"),
            &wire::Fence { epoch },
        )
        .await
    }

    pub async fn append_events(
        &self,
        id: Uuid,
        epoch: i64,
        events: Vec<wire::NewEvent>,
    ) -> Result<wire::Appended> {
        self.post(
            &format!("/v1/runner/jobs/{id}/events"),
            &wire::AppendEvents { epoch, events },
        )
        .await
    }

    pub async fn complete(
        &self,
        id: Uuid,
        epoch: i64,
        result: serde_json::Value,
    ) -> Result<wire::Job> {
        self.post(
            &format!("/v1/runner/jobs/{id}/complete"),
            &wire::Complete {
                epoch,
                result: Some(result),
            },
        )
        .await
    }

    pub async fn fail(&self, id: Uuid, epoch: i64, message: &str) -> Result<wire::Job> {
        self.post(
            &format!("/v1/runner/jobs/{id}/fail"),
            &wire::Fail {
                epoch,
                message: message.into(),
            },
        )
        .await
    }

    pub async fn release(&self, id: Uuid, epoch: i64) -> Result<wire::Job> {
        self.post(
            &format!("/v1/runner/jobs/{id}/release"),
            &wire::Fence { epoch },
        )
        .await
    }
}

/// `text` percent-encoded for a query value or a path segment (cursors and names are URL-safe
/// already; anything else typed is encoded rather than trusted).
fn query_text(text: &str) -> String {
    text.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~,".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_and_is_capped() {
        for round in 0..40 {
            let b = backoff(round);
            assert!(b <= MAX_BACKOFF, "{b:?}");
            assert!(b >= BASE_BACKOFF / 2, "{b:?}");
        }
        assert!(backoff(3) >= Duration::from_millis(1000));
    }
}
