//! Telemetry of a replica: Prometheus metrics ([`metrics`]).
//!
//! Invariant: nothing recorded here carries a secret, a token, a payload, or an identifier of
//! unbounded cardinality (job and runner ids, owners, raw paths).

pub mod metrics;

pub use metrics::Metrics;
