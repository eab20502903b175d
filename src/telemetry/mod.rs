//! Telemetry of a replica: Prometheus metrics ([`metrics`]) and OpenTelemetry traces
//! ([`traces`], off unless an OTLP endpoint is configured).
//!
//! Invariant: nothing recorded here carries a secret, a token, a payload, or an identifier of
//! unbounded cardinality (job and runner ids, owners, raw paths).

pub mod metrics;
pub mod traces;

pub use metrics::Metrics;
