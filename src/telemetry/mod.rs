//! Telemetry of a replica: Prometheus metrics ([`metrics`]), OpenTelemetry traces
//! ([`traces`], off unless an OTLP endpoint is configured), and what the log may carry
//! ([`logs`]).
//!
//! Invariant: nothing recorded here carries a secret, a token, a payload, or an identifier of
//! unbounded cardinality (job and runner ids, owners, raw paths).

pub mod logs;
pub mod metrics;
pub mod traces;

pub use metrics::Metrics;
