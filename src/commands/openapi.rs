//! `leasehold openapi`: print the OpenAPI 3.1 document of the HTTP API, the same bytes a
//! replica serves at `/openapi.json`, without a database or a server; with `--markdown`, the
//! same as the reference for people kept in `docs/api-reference.md`.

use std::io::Write;

/// Write the document, pretty-printed (or, with `markdown`, as Markdown), to standard output.
///
/// # Errors
/// Standard output could not be written.
pub fn run(markdown: bool) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    if markdown {
        out.write_all(crate::api::reference::markdown().as_bytes())?;
        return Ok(());
    }
    let doc = crate::api::openapi::document();
    serde_json::to_writer_pretty(&mut out, doc)?;
    writeln!(out)?;
    Ok(())
}
