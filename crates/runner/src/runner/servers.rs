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

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use crate::client::{backoff, Client, ClientError, Trust};

/// The runner's view of the service: several replicas, one preferred at a time.
pub struct Servers {
    clients: Vec<Client>,
    /// Index of the server calls go to first; moves on when that one does not answer.
    current: AtomicUsize,
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
        })
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
                Ok(Err(e)) if !e.is_transient() => return Err(CallError::Api(e)),
                Ok(Err(e)) => CallError::Unreachable(e.to_string()),
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
