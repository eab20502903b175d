//! `leasehold openapi`: print the OpenAPI 3.1 document of the HTTP API, the same bytes a
//! replica serves at `/openapi.json`, without a database or a server.

use std::io::Write;

/// Write the document, pretty-printed, to standard output.
///
/// # Errors
/// Standard output could not be written.
pub fn run() -> anyhow::Result<()> {
    let doc = crate::api::openapi::document();
    let mut out = std::io::stdout().lock();
    serde_json::to_writer_pretty(&mut out, doc)?;
    writeln!(out)?;
    Ok(())
}
