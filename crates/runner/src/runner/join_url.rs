//! `leasehold runner connect https://HOST/j/<short>`: fetch the connect payload a join URL
//! hands out once, over HTTPS only.
//!
//! Invariants: a join URL is fetched only over `https://` (the scheme compared without regard
//! to case; a plain `http://` one is refused before anything is sent), with the client's usual
//! trust (system CAs plus `--ca-cert`) or the key pin given with `--pin`; what it hands out is
//! a connect payload like any pasted one.

use crate::client::{Client, ClientError, Trust};
use crate::wire::connect::Connect;

/// Whether `arg` is meant as a join URL (`http(s)://...`, any case) rather than a payload or
/// a bare code.
pub fn is_url(arg: &str) -> bool {
    crate::wire::input::is_web(arg)
}

/// Whether `url` is an `https://` URL (the scheme compared without regard to case).
pub fn is_https(url: &str) -> bool {
    crate::wire::input::is_https(url)
}

/// The base URL and short code of a join URL.
///
/// # Errors
/// Not `https://HOST[/PREFIX]/j/<short>`; the message says why.
pub fn split(url: &str) -> anyhow::Result<(String, String)> {
    let url = url.trim();
    let shown = crate::wire::input::escaped(url);
    anyhow::ensure!(
        is_https(url),
        "refusing {shown}: a join URL hands out a join code, so it is fetched only over https://"
    );
    let (base, short) = url
        .rsplit_once("/j/")
        .filter(|(b, s)| b.len() > 8 && !s.is_empty() && !s.contains('/'))
        .ok_or_else(|| anyhow::anyhow!("{shown} is not a join URL (https://HOST/j/<code>)"))?;
    Ok((base.to_owned(), short.to_owned()))
}

/// Fetch the payload `url` hands out, trusting `trust`.
///
/// # Errors
/// Not an https join URL; the server refused the certificate, was unreachable, or answered
/// that the URL is unknown, used or expired; what it answered is not a connect payload.
pub async fn fetch(url: &str, trust: &Trust) -> anyhow::Result<Connect> {
    let (base, short) = split(url)?;
    let client = Client::with_trust(base.clone(), None, trust)?;
    let answer = client.fetch_join_url(&short).await.map_err(|e| match e {
        ClientError::Api { status, .. } if status == 404 => anyhow::anyhow!(
            "the join URL was refused: it is unknown, already used or expired (each works once): \
             ask for a new one"
        ),
        ClientError::Api { status, .. } if status == 429 => anyhow::anyhow!(
            "{base} is rate limiting this address after too many unknown join URLs: wait and retry"
        ),
        ClientError::Tls(why) => anyhow::anyhow!("cannot fetch the join URL: {why}"),
        e => anyhow::anyhow!("cannot fetch the join URL from {base}: {e}"),
    })?;
    Connect::decode(&answer.connect)
        .map_err(|e| anyhow::anyhow!("{base} answered the join URL with no usable payload: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_https_join_urls_are_taken() {
        assert_eq!(
            split("HTTPS://h.example:8443/j/abc").unwrap(),
            ("HTTPS://h.example:8443".to_owned(), "abc".to_owned())
        );
        assert_eq!(
            split("https://h.example/lh/j/abc").unwrap().0,
            "https://h.example/lh"
        );
        for plain in ["http://h.example/j/abc", "HTTP://h.example/j/abc"] {
            assert!(is_url(plain));
            let err = split(plain).unwrap_err().to_string();
            assert!(err.contains("only over https://"), "{err}");
        }
        for bad in [
            "https://h.example/x/abc",
            "https://h.example/j/",
            "https:///j/a",
        ] {
            assert!(split(bad).is_err(), "{bad}");
        }
        assert!(!is_url("lh1.abc") && !is_url("jc_abc") && is_url("HtTpS://x"));
    }
}
