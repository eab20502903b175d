//! Failover across the replicas a runner knows: one typed [`Client`] per `--server` URL and a
//! shared "current" index.
//!
//! Invariant: a call that got an answer from a server (any status but 502/503/504) is never
//! repeated elsewhere, and neither is one whose server's certificate was refused (a wrong CA or
//! pin is configuration, not an outage); only "no answer" (connection refused or reset,
//! timeout) and "try again" answers move the runner to the next server. After a full round of
//! servers without an answer it backs off exponentially with full jitter, so a fleet of
//! runners does not hammer a recovering service in step. Every replica serves every call, so a
//! lease taken through one is heartbeated and completed through whichever answers.
//!
//! A runner's servers remember the first 401 any call got ([`Servers::revoked`]): the token is
//! dead for every call that follows, so the runner stops at once rather than learn it call by
//! call.

use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::time::Instant;
use uuid::Uuid;

use crate::client::scheme::{self, Mismatch, Probe};
use crate::client::{backoff, Client, ClientError, Trust};

/// How often a server that does not answer is probed for the other scheme.
const SCHEME_PROBE_EVERY: Duration = Duration::from_secs(30);

/// The runner's view of the service: several replicas, one preferred at a time.
pub struct Servers {
    clients: Vec<Client>,
    /// Index of the server calls go to first; moves on when that one does not answer.
    current: AtomicUsize,
    /// Who this runner is, for the command that enrols it again when its server changed scheme.
    identity: Option<Identity>,
    /// When a server was last probed for the other scheme.
    probed: std::sync::Mutex<Option<Instant>>,
    /// Cancelled by the first 401 a call of a runner gets: its token is revoked.
    revoked: tokio_util::sync::CancellationToken,
}

/// A runner's configuration file and id.
#[derive(Debug, Clone)]
pub struct Identity {
    pub config_path: Option<PathBuf>,
    pub runner_id: Uuid,
    pub ca_cert: Option<PathBuf>,
}

impl Servers {
    /// Clients for `urls`, all holding `token` and checking certificates with `trust`.
    ///
    /// # Errors
    /// The trust names a CA file that cannot be read.
    ///
    /// # Panics
    /// When `urls` is empty.
    pub fn new(urls: &[String], token: Option<&str>, trust: &Trust) -> anyhow::Result<Self> {
        assert!(!urls.is_empty(), "at least one server");
        Ok(Self {
            clients: urls
                .iter()
                .map(|u| Client::with_trust(u.clone(), token.map(str::to_owned), trust))
                .collect::<anyhow::Result<_>>()?,
            current: AtomicUsize::new(0),
            identity: None,
            probed: std::sync::Mutex::new(None),
            revoked: tokio_util::sync::CancellationToken::new(),
        })
    }

    /// Name the runner these servers serve, so a server that changed scheme is reported with
    /// the command that enrols it again.
    pub fn for_runner(mut self, identity: Identity) -> Self {
        self.identity = Some(identity);
        self
    }

    /// A server gave no answer (or no TLS answer): when its address speaks the other scheme
    /// than its URL, say so in words with the command that enrols the runner again. An address
    /// that answered the probe is probed again only after [`SCHEME_PROBE_EVERY`]; one that
    /// accepted no connection (down, restarting) on the next failure, so a server that comes
    /// back in the other scheme is named at once.
    async fn explain(&self, idx: usize, e: &ClientError) {
        let Some(identity) = &self.identity else {
            return;
        };
        if matches!(e, ClientError::Api { .. }) {
            return;
        }
        let recent = self
            .probed
            .lock()
            .expect("not poisoned")
            .is_some_and(|t| t.elapsed() < SCHEME_PROBE_EVERY);
        if recent {
            return;
        }
        let base = self.clients[idx].base();
        let found = scheme::probe(base).await;
        if found != Probe::NoAnswer {
            *self.probed.lock().expect("not poisoned") = Some(Instant::now());
        }
        if let Probe::Other(mismatch) = found {
            tracing::error!("{}", wrong_scheme(base, mismatch, identity));
        }
    }

    /// Cancelled once a call of this runner got a 401: the service no longer accepts its token
    /// (revoked, or an ephemeral runner whose job has settled). Never for servers without a
    /// runner identity (enrolment, the CLI).
    pub fn revoked(&self) -> &tokio_util::sync::CancellationToken {
        &self.revoked
    }

    /// The server calls go to now.
    pub fn current(&self) -> &Client {
        &self.clients[self.current.load(Ordering::Relaxed) % self.clients.len()]
    }

    /// Call `f` on the current server, failing over and backing off until it answers, the
    /// answer is an error no other server would change, or `deadline` passes. Each attempt is
    /// bounded by `attempt_timeout` (a hung replica counts as one that did not answer).
    ///
    /// # Errors
    /// The server's answer, or the last failure once `deadline` has passed.
    pub async fn call<T, F, Fut>(
        &self,
        deadline: Instant,
        attempt_timeout: Duration,
        mut f: F,
    ) -> Result<T, CallError>
    where
        F: FnMut(Client) -> Fut,
        Fut: Future<Output = Result<T, ClientError>>,
    {
        let n = self.clients.len();
        let mut failures_in_round = 0usize;
        let mut round = 0u32;
        loop {
            let idx = self.current.load(Ordering::Relaxed) % n;
            let client = self.clients[idx].clone();
            let outcome = tokio::time::timeout(attempt_timeout, f(client)).await;
            let err = match outcome {
                Ok(Ok(v)) => return Ok(v),
                Ok(Err(e)) if !e.is_transient() => {
                    self.explain(idx, &e).await;
                    let e = CallError::Api(e);
                    if self.identity.is_some() && e.is_unauthorized() {
                        self.revoked.cancel();
                    }
                    return Err(e);
                }
                Ok(Err(e)) => {
                    self.explain(idx, &e).await;
                    CallError::Unreachable(e.to_string())
                }
                Err(_) => CallError::Unreachable(format!(
                    "no answer within {} ms",
                    attempt_timeout.as_millis()
                )),
            };
            tracing::warn!(server = %self.clients[idx].base(), error = %err, "server did not answer");
            // Move on, unless another call already did.
            let _ = self.current.compare_exchange(
                idx,
                (idx + 1) % n,
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
            failures_in_round += 1;
            let pause = if failures_in_round >= n {
                failures_in_round = 0;
                round += 1;
                backoff(round - 1)
            } else {
                Duration::ZERO
            };
            if Instant::now() + pause >= deadline {
                return Err(err);
            }
            tokio::time::sleep(pause).await;
        }
    }
}

/// What a runner whose server changed scheme is told: what answers, how it enrolled, and
/// the commands that enrol it again.
fn wrong_scheme(base: &str, mismatch: Mismatch, identity: &Identity) -> String {
    let right = mismatch.corrected(base);
    let (answers, enrolled) = match mismatch {
        Mismatch::AnswersHttps => ("HTTPS", "http"),
        Mismatch::AnswersPlainHttp => ("plain HTTP", "https"),
    };
    let mut connect = format!("leasehold runner connect CODE --server {right}");
    if mismatch == Mismatch::AnswersHttps {
        match &identity.ca_cert {
            Some(ca) => connect.push_str(&format!(" --ca-cert {}", ca.display())),
            None => connect.push_str(" --ca-cert CERT"),
        }
    }
    if let Some(path) = &identity.config_path {
        connect.push_str(&format!(" --config {}", path.display()));
    }
    connect.push_str(" --force");
    format!(
        "the server at {base} answers {answers}, but this runner enrolled over {enrolled}: no \
         call of it can succeed until it is enrolled again at {right}. Mint a join code there \
         (`leasehold join-code create`; with LEASEHOLD_PUBLIC_URL set, as under `leasehold \
         dev`, it prints a whole `leasehold runner connect lh1...` line to paste instead), then \
         run here: {connect}; and remove this runner: leasehold runners revoke {}",
        identity.runner_id
    )
}

/// How a call through [`Servers::call`] failed.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// A server answered with the contract's error.
    #[error("{0}")]
    Api(ClientError),
    /// No server answered before the deadline.
    #[error("unreachable: {0}")]
    Unreachable(String),
}

impl CallError {
    /// The contract's error code, when a server answered.
    pub fn code(&self) -> Option<&str> {
        match self {
            CallError::Api(e) => e.code(),
            CallError::Unreachable(_) => None,
        }
    }

    /// A 409: the job is settled, cancelled or leased to someone else; stop working on it.
    pub fn is_conflict(&self) -> bool {
        matches!(self, CallError::Api(e) if e.status().map(|s| s.as_u16()) == Some(409))
    }

    /// A 401: the token is revoked (or an ephemeral runner's job has settled).
    pub fn is_unauthorized(&self) -> bool {
        matches!(self, CallError::Api(e) if e.status().map(|s| s.as_u16()) == Some(401))
    }
}
