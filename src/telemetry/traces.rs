//! OpenTelemetry traces, exported over OTLP/HTTP (protobuf) when `OTEL_EXPORTER_OTLP_ENDPOINT`
//! (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set, and off otherwise. The standard `OTEL_*`
//! variables are honoured (`OTEL_SERVICE_NAME`, `OTEL_EXPORTER_OTLP_HEADERS`,
//! `OTEL_EXPORTER_OTLP_TIMEOUT`, `OTEL_BSP_*`, `OTEL_SDK_DISABLED`, ...).
//!
//! What is traced: a server span per request (route template, method, status; an incoming W3C
//! `traceparent` is its parent), a client span per database statement (the statement's file
//! name, never its parameters), and a job's path: dispatch stores the `traceparent` of its
//! request span with the job; the lease and each report add a short span to that trace (parent:
//! the dispatch) linked to the request that caused it, and link the request span back to the
//! dispatch. So a job's trace reads dispatch → lease → complete across replicas.
//!
//! Invariants: with traces off, the hot path pays one relaxed atomic load per request and per
//! statement, nothing more. No span attribute carries a secret, a token, a header, a query, a
//! payload or a result.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::LazyLock;

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{SpanContext, TraceContextExt, TracerProvider as _};
use opentelemetry::Context;
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use opentelemetry_sdk::Resource;
use tracing::Instrument;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::filter::filter_fn;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

/// Target of every span made here; the OpenTelemetry layer sees spans of this target only.
pub const TARGET: &str = "leasehold::trace";

static ENABLED: AtomicBool = AtomicBool::new(false);

/// Traces are being exported.
#[inline]
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// Owns the exporter; [`Tracing::shutdown`] flushes what is buffered.
pub struct Tracing {
    provider: SdkTracerProvider,
}

impl Tracing {
    /// Export what is buffered and stop.
    pub fn shutdown(self) {
        ENABLED.store(false, Ordering::Relaxed);
        if let Err(e) = self.provider.shutdown() {
            eprintln!("leasehold: flushing traces failed: {e}");
        }
    }
}

fn configured() -> bool {
    let set = |k: &str| std::env::var(k).is_ok_and(|v| !v.trim().is_empty());
    let disabled = std::env::var("OTEL_SDK_DISABLED").is_ok_and(|v| v.eq_ignore_ascii_case("true"));
    !disabled && (set("OTEL_EXPORTER_OTLP_ENDPOINT") || set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
}

/// The OpenTelemetry layer for the subscriber, when an OTLP endpoint is configured. Call from
/// inside the tokio runtime (the exporter sends from it).
///
/// # Errors
/// The exporter could not be built from the `OTEL_*` variables.
pub fn layer<S>() -> anyhow::Result<Option<(impl Layer<S>, Tracing)>>
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
{
    if !configured() {
        return Ok(None);
    }
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
        .with_http_client(Http::new())
        .build()?;
    let service = std::env::var("OTEL_SERVICE_NAME").unwrap_or_else(|_| "leasehold".into());
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(
            Resource::builder()
                .with_service_name(service)
                .with_attribute(opentelemetry::KeyValue::new(
                    "service.version",
                    env!("CARGO_PKG_VERSION"),
                ))
                .build(),
        )
        .build();
    let tracer = provider.tracer("leasehold");
    let layer = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_tracked_inactivity(false)
        .with_filter(filter_fn(|m| m.is_span() && m.target() == TARGET));
    ENABLED.store(true, Ordering::Relaxed);
    Ok(Some((layer, Tracing { provider })))
}

/// The exporter's HTTP client: the crate's reqwest, run on the tokio runtime that started it
/// (the batch processor exports from a thread of its own).
#[derive(Debug)]
struct Http {
    client: reqwest::Client,
    runtime: tokio::runtime::Handle,
}

impl Http {
    fn new() -> Self {
        Self {
            client: reqwest::Client::new(),
            runtime: tokio::runtime::Handle::current(),
        }
    }
}

#[async_trait::async_trait]
impl opentelemetry_http::HttpClient for Http {
    async fn send_bytes(
        &self,
        request: http::Request<bytes::Bytes>,
    ) -> Result<http::Response<bytes::Bytes>, opentelemetry_http::HttpError> {
        let client = self.client.clone();
        let (parts, body) = request.into_parts();
        let send = async move {
            let mut req = client
                .request(parts.method, parts.uri.to_string())
                .body(body);
            for (name, value) in &parts.headers {
                req = req.header(name, value);
            }
            let res = req.send().await?;
            let mut out = http::Response::builder().status(res.status());
            for (name, value) in res.headers() {
                out = out.header(name, value);
            }
            let bytes = res.bytes().await?;
            Ok::<_, opentelemetry_http::HttpError>(out.body(bytes)?)
        };
        self.runtime.spawn(send).await?
    }
}

static PROPAGATOR: LazyLock<TraceContextPropagator> = LazyLock::new(TraceContextPropagator::new);

/// The context a W3C `traceparent` names, if it parses.
fn context_of(traceparent: &str) -> Option<Context> {
    let carrier = HashMap::from([("traceparent".to_owned(), traceparent.to_owned())]);
    let cx = PROPAGATOR.extract(&carrier);
    cx.span().span_context().is_valid().then_some(cx)
}

/// The server span of one request, child of the caller's `traceparent` when it sends one.
/// `None` while traces are off.
pub fn request_span(
    method: &'static str,
    route: &str,
    traceparent: Option<&str>,
) -> Option<tracing::Span> {
    if !enabled() {
        return None;
    }
    let span = tracing::info_span!(
        target: TARGET,
        "request",
        otel.name = format!("{method} {route}"),
        otel.kind = "server",
        otel.status_code = tracing::field::Empty,
        http.request.method = method,
        http.route = route,
        http.response.status_code = tracing::field::Empty,
    );
    if let Some(cx) = traceparent.and_then(context_of) {
        let _ = span.set_parent(cx);
    }
    Some(span)
}

/// Record the answer's status on a request span.
pub fn record_status(span: &tracing::Span, status: u16) {
    span.record("http.response.status_code", status);
    if status >= 500 {
        span.record("otel.status_code", "ERROR");
    }
}

/// Run `fut` in a client span named after the statement (`name` is asked only while traces
/// are on).
pub async fn statement<T>(name: impl FnOnce() -> &'static str, fut: impl Future<Output = T>) -> T {
    if !enabled() {
        return fut.await;
    }
    let name = name();
    let span = tracing::info_span!(
        target: TARGET,
        "statement",
        otel.name = name,
        otel.kind = "client",
        db.system.name = "postgresql",
        db.operation.name = name,
    );
    fut.instrument(span).await
}

/// The W3C `traceparent` of the current span, to store with a job at dispatch. `None` while
/// traces are off.
pub fn current_traceparent() -> Option<String> {
    if !enabled() {
        return None;
    }
    let cx = tracing::Span::current().context();
    if !cx.span().span_context().is_valid() {
        return None;
    }
    let mut carrier = HashMap::new();
    PROPAGATOR.inject_context(&cx, &mut carrier);
    carrier.remove("traceparent")
}

/// A step of a job's life (`lease`, `complete`, `fail`, `release`) in the current request:
/// a short span in the job's trace (its parent is the dispatch named by `traceparent`) linked to
/// the current request span, which is linked back to the dispatch.
pub fn job_step(step: &'static str, job: uuid::Uuid, epoch: i64, traceparent: Option<&str>) {
    if !enabled() {
        return;
    }
    let Some(dispatch) = traceparent.and_then(context_of) else {
        return;
    };
    let dispatch_span: SpanContext = dispatch.span().span_context().clone();
    let request = tracing::Span::current();
    let request_span = request.context().span().span_context().clone();
    request.add_link(dispatch_span);
    let span = tracing::info_span!(
        target: TARGET,
        "job",
        otel.name = format!("job {step}"),
        otel.kind = "internal",
        leasehold.job.id = %job,
        leasehold.job.epoch = epoch,
        leasehold.job.step = step,
    );
    let _ = span.set_parent(dispatch);
    if request_span.is_valid() {
        span.add_link(request_span);
    }
    // The span marks the moment; it ends here.
    drop(span);
}

#[cfg(test)]
mod tests {
    use tracing_subscriber::layer::SubscriberExt;

    /// What traces cost per job (3 request spans, 6 statement spans, 2 job steps with links,
    /// exported over OTLP/HTTP to a local receiver that discards them): run with
    /// `cargo test --lib traced_cost -- --ignored --nocapture`. Prints; asserts nothing.
    #[test]
    #[ignore = "a measurement, not a test"]
    fn traced_cost() {
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let sink =
                axum::Router::new().route("/v1/traces", axum::routing::post(|| async { "" }));
            tokio::spawn(async move { axum::serve(listener, sink).await.unwrap() });
            std::env::set_var("OTEL_EXPORTER_OTLP_ENDPOINT", format!("http://{addr}"));
            // Keep every span (the default queue drops past 2,048), so export is paid in full.
            std::env::set_var("OTEL_BSP_MAX_QUEUE_SIZE", "1000000");
            // CPU of every thread of this process, from /proc (utime + stime, in 10 ms ticks).
            let cpu = || {
                let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
                // After the command name: state, ppid, ..., utime (12th), stime (13th).
                let fields: Vec<&str> = stat
                    .rsplit_once(')')
                    .unwrap()
                    .1
                    .split_whitespace()
                    .collect();
                let ticks = |i: usize| fields[i].parse::<u64>().unwrap();
                std::time::Duration::from_millis((ticks(11) + ticks(12)) * 10)
            };
            let cpu_before = cpu();
            let (layer, tracing) = super::layer().unwrap().expect("configured");
            let subscriber = tracing_subscriber::registry().with(layer);
            let _default = tracing::subscriber::set_default(subscriber);
            let n = 20_000u32;
            let started = std::time::Instant::now();
            let mut traceparent = None;
            for _ in 0..n {
                for route in [
                    "/v1/jobs",
                    "/v1/runner/lease",
                    "/v1/runner/jobs/{id}/complete",
                ] {
                    let span = super::request_span("POST", route, None).unwrap();
                    async {
                        for _ in 0..2 {
                            super::statement(|| "job_insert", async {}).await;
                        }
                        if route == "/v1/jobs" {
                            traceparent = super::current_traceparent();
                        } else {
                            super::job_step("lease", uuid::Uuid::nil(), 1, traceparent.as_deref());
                        }
                    }
                    .instrument(span.clone())
                    .await;
                    super::record_status(&span, 200);
                }
            }
            let per_job = started.elapsed() / n;
            tokio::task::spawn_blocking(move || tracing.shutdown())
                .await
                .unwrap();
            let cpu_per_job = (cpu() - cpu_before) / n;
            println!(
                "traced per job (3 requests, 6 statements, 2 steps): {per_job:?} on the request \
                 path; {cpu_per_job:?} of CPU in all threads, export and receiver included"
            );
        });
    }

    use tracing::Instrument;
}
