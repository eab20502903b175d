//! What reaches the log: no line carries a caller's tool name, method, argument or header value
//! (contract v1.3, "MCP"; docs/security.md, "Credentials and their lifecycle").
//!
//! rmcp, the MCP library behind `POST /mcp` and `leasehold mcp`, logs what callers send: each
//! request it receives, whole, at debug; an unknown tool or method name and an unknown
//! `MCP-Protocol-Version` header value at warn. Its targets are off at every level, whatever
//! `LEASEHOLD_LOG` asks: what it would say of a refusal the caller is told in the answer, and
//! the replica's own lines (the request's route and status, an error by its kind) remain.
//!
//! tokio_postgres logs (through the `log` crate, bridged to tracing) every statement it runs
//! with its parameters at debug, and each server notice's text at info: argv, event text, keys'
//! hashes, results (issue 52 row 6). Its targets are off at every level too: a failed statement
//! is still logged by the replica, by SQLSTATE and statement name (`store::StoreError`).

use tracing_subscriber::filter::{filter_fn, FilterFn};

/// Targets whose events quote what a caller sent (or what a statement carries).
const QUOTING_CALLERS: &[&str] = &["rmcp", "tokio_postgres"];

/// Whether `target` is one of [`QUOTING_CALLERS`] or a module of one.
fn quotes_callers(target: &str) -> bool {
    QUOTING_CALLERS.iter().any(|t| {
        target
            .strip_prefix(t)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with("::"))
    })
}

/// A filter for the log layer that drops every span and event of [`QUOTING_CALLERS`].
pub fn without_caller_data() -> FilterFn {
    filter_fn(|meta| !quotes_callers(meta.target()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rmcp_tokio_postgres_and_their_modules_are_dropped_and_nothing_else() {
        assert!(quotes_callers("rmcp"));
        assert!(quotes_callers("rmcp::service"));
        assert!(quotes_callers("tokio_postgres::query"));
        assert!(!quotes_callers("rmcpx"));
        assert!(!quotes_callers("leasehold::api"));
    }
}
