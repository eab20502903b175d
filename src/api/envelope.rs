//! The layers every route runs in, outermost first: metrics and traces
//! ([`observe::Observed`]), the call's deadline ([`deadline::Deadline`]), the declared-length
//! check ([`oversized`]), then panics caught as 500s and the body limit.
//!
//! They are one tower service applied to the router once, and its future is a plain struct
//! around the route's: no allocation of its own, no copy of the request. Each `Router::layer`
//! boxes the route again, and each `from_fn` boxes a future holding a copy of the request and a
//! boxed `Next`: five such layers cost a parked long-poll several allocations and about 4.5 KB
//! (docs/perf.md, "Idle memory").
//!
//! Invariant: the order is the one above, so the metrics see every answer (413s before
//! authentication, 500s from panics, 503s past a deadline) and the deadline bounds everything
//! below it; a call answers by its deadline, and past it the route's future is dropped.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use axum::extract::{DefaultBodyLimit, Request};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use pin_project_lite::pin_project;
use tokio::time::{Instant, Sleep};
use tower_http::catch_panic::{CatchPanic, CatchPanicLayer};
use tower_layer::Layer;
use tower_service::Service;
use tracing::instrument::Instrumented;
use tracing::Instrument;

use super::deadline::Deadline;
use super::error::ApiError;
use super::observe::Observed;
use super::AppState;

/// The layer: wraps each route in [`Envelope`], panic catching and the body limit.
#[derive(Clone)]
pub struct EnvelopeLayer {
    state: Arc<AppState>,
}

impl EnvelopeLayer {
    pub fn new(state: Arc<AppState>) -> Self {
        Self { state }
    }
}

/// [`super::panicked`], named as a type.
type PanicHandler = fn(Box<dyn std::any::Any + Send + 'static>) -> Response;

/// A route with panics answered as the contract's 500 and its body capped.
type Guarded<S> = CatchPanic<<DefaultBodyLimit as Layer<S>>::Service, PanicHandler>;

impl<S> Layer<S> for EnvelopeLayer {
    type Service = Envelope<Guarded<S>>;

    fn layer(&self, route: S) -> Self::Service {
        let limited = DefaultBodyLimit::max(self.state.limits.max_body_bytes).layer(route);
        let panicked: PanicHandler = super::panicked;
        Envelope {
            state: self.state.clone(),
            inner: CatchPanicLayer::custom(panicked).layer(limited),
        }
    }
}

/// One route inside the layers: see the module documentation.
#[derive(Clone)]
pub struct Envelope<S> {
    state: Arc<AppState>,
    inner: S,
}

impl<S> Service<Request> for Envelope<S>
where
    S: Service<Request, Error = Infallible>,
    S::Response: IntoResponse,
{
    type Response = Response;
    type Error = Infallible;
    type Future = EnvelopeFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request) -> Self::Future {
        let observed = Observed::start(&request);
        let deadline = Deadline::arm(&self.state, &mut request);
        let span = observed.span();
        let call = match oversized(&self.state, &request) {
            Some(refused) => Call::Answered {
                response: Some(refused),
            },
            None => Call::Running {
                route: span.in_scope(|| self.inner.call(request)),
            },
        };
        EnvelopeFuture {
            sleep: tokio::time::sleep_until(deadline.at()),
            call: call.instrument(span),
            deadline,
            observed: Some(observed),
            state: self.state.clone(),
        }
    }
}

/// 413 from the declared length, before authentication runs. Bodies without a length are
/// capped by `DefaultBodyLimit` when read.
fn oversized(st: &AppState, request: &Request) -> Option<Response> {
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    // An artifact upload has its own limit (and its own code).
    if super::artifacts::is_upload(request.method(), request.uri().path()) {
        let max = st.limits.artifact_max_bytes;
        return declared
            .is_some_and(|n| n > max)
            .then(|| ApiError::ArtifactTooLarge(max).into_response());
    }
    declared
        .is_some_and(|n| n > st.limits.max_body_bytes as u64)
        .then(|| ApiError::PayloadTooLarge.into_response())
}

pin_project! {
    /// A call in the layers: the route's future (or the answer given before it ran), raced
    /// against the deadline, recorded when it answers.
    pub struct EnvelopeFuture<F> {
        #[pin]
        call: Instrumented<Call<F>>,
        #[pin]
        sleep: Sleep,
        deadline: Deadline,
        observed: Option<Observed>,
        state: Arc<AppState>,
    }
}

pin_project! {
    /// What answers a call: the route, or the layers themselves (`response` is taken when it
    /// is answered; a route dropped at its deadline leaves `None`, never polled again).
    #[project = CallProjection]
    enum Call<F> {
        Running { #[pin] route: F },
        Answered { response: Option<Response> },
    }
}

impl<F, R> Future for Call<F>
where
    F: Future<Output = Result<R, Infallible>>,
    R: IntoResponse,
{
    type Output = Response;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Response> {
        match self.project() {
            CallProjection::Running { route } => match ready!(route.poll(cx)) {
                Ok(response) => Poll::Ready(response.into_response()),
                Err(never) => match never {},
            },
            CallProjection::Answered { response } => Poll::Ready(
                response
                    .take()
                    .unwrap_or_else(|| ApiError::Internal.into_response()),
            ),
        }
    }
}

impl<F, R> Future for EnvelopeFuture<F>
where
    F: Future<Output = Result<R, Infallible>>,
    R: IntoResponse,
{
    type Output = Result<Response, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        let response = match this.call.as_mut().poll(cx) {
            Poll::Ready(response) => response,
            Poll::Pending => loop {
                ready!(this.sleep.as_mut().poll(cx));
                // The handler may have declared its wait since the sleep was set.
                let at = this.deadline.at();
                if Instant::now() >= at {
                    // Dropped here, not whenever the caller drops this future: a statement the
                    // route had running is cancelled before the 503 goes out.
                    this.call
                        .set(Call::Answered { response: None }.instrument(tracing::Span::none()));
                    break this.deadline.passed();
                }
                this.sleep.as_mut().reset(at);
            },
        };
        if let Some(observed) = this.observed.take() {
            observed.finish(this.state, &response);
        }
        Poll::Ready(Ok(response))
    }
}
