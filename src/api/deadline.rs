//! The deadline of every call: `LEASEHOLD_REQUEST_TIMEOUT_MS` from when the request arrived,
//! plus, for a long-poll, the wait it asked for (which its handler declares through
//! [`LongPoll::allow`] once the wait is validated). [`Deadline`] is armed and enforced by
//! [`crate::api::envelope`].
//!
//! Invariant: no call answers later than its deadline. Past it the handler's future is dropped
//! and the call answers 503 `unavailable` with `Retry-After`; a database connection the handler
//! was using is then cancelled and discarded by the store ([`crate::store::Conn`]), never
//! handed to the next caller. A write that was waiting to commit may have committed: the answer
//! says so, and an idempotency key makes the retry safe (docs/contract-notes.md, "Deadlines").

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{FromRequestParts, Request};
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use tokio::time::Instant;

use super::error::ApiError;
use super::AppState;

/// A call's handle on its own deadline: how much long-poll wait it may add.
#[derive(Clone, Default)]
pub struct LongPoll(Arc<AtomicU64>);

impl LongPoll {
    /// This call waits up to `wait` on top of the request deadline.
    pub fn allow(&self, wait: Duration) {
        let ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX);
        self.0.fetch_max(ms, Ordering::Relaxed);
    }

    fn extra(&self) -> Duration {
        Duration::from_millis(self.0.load(Ordering::Relaxed))
    }
}

/// Never fails: a call outside [`bound`] gets a handle that changes nothing.
impl<S: Send + Sync> FromRequestParts<S> for LongPoll {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(parts
            .extensions
            .get::<LongPoll>()
            .cloned()
            .unwrap_or_default())
    }
}

/// A call's deadline, armed as the call arrives ([`crate::api::envelope`] enforces it).
pub struct Deadline {
    started: Instant,
    budget: Duration,
    poll: LongPoll,
}

impl Deadline {
    /// Start the clock of `request` and give it the [`LongPoll`] handle its handler may extend
    /// the deadline with.
    pub fn arm(st: &AppState, request: &mut Request) -> Self {
        let poll = LongPoll::default();
        request.extensions_mut().insert(poll.clone());
        Self {
            started: Instant::now(),
            budget: st.limits.request_timeout,
            poll,
        }
    }

    /// When the call must have answered by, as it stands now: a long-poll's handler moves it
    /// later once it has validated its wait.
    pub fn at(&self) -> Instant {
        self.started + self.budget + self.poll.extra()
    }

    /// The answer of a call past its deadline, logged.
    pub fn passed(&self) -> Response {
        tracing::warn!(
            budget_ms = self.budget.as_millis() as u64,
            "a call passed its deadline; answered 503 (a statement it had running is cancelled)"
        );
        ApiError::TimedOut.into_response()
    }
}
