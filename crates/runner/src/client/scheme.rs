//! Whether a server that gave no answer speaks the other scheme than its URL says: HTTPS where
//! a runner enrolled over `http://` (`leasehold dev` restarted with `--tls`), or plain HTTP
//! where it enrolled over `https://`. Either way every call fails at the transport, and a bare
//! "transport error" says nothing of why.
//!
//! Invariant: a probe sends no credential and no request a server would act on. Towards an
//! `http://` URL it opens a TLS handshake that trusts no certificate (the server's certificate,
//! or its alert, is the proof it speaks TLS; the handshake never completes); towards an
//! `https://` URL it sends `HEAD / HTTP/1.0` in plain text and reads only the status line.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How long a probe may take.
const PROBE: Duration = Duration::from_secs(3);

/// What answers at an address, against what its URL says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mismatch {
    /// The URL says `http://`; the server answers a TLS handshake.
    AnswersHttps,
    /// The URL says `https://`; the server answers plain HTTP.
    AnswersPlainHttp,
}

impl Mismatch {
    /// `base` with the scheme the server really speaks.
    pub fn corrected(self, base: &str) -> String {
        let rest = base.split_once("://").map_or(base, |(_, rest)| rest);
        match self {
            Mismatch::AnswersHttps => format!("https://{rest}"),
            Mismatch::AnswersPlainHttp => format!("http://{rest}"),
        }
    }
}

/// What a probe found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Probe {
    /// Nothing accepted the connection (the server is down, or is not there).
    NoAnswer,
    /// Something answers, and not in the other scheme.
    Answers,
    /// It answers in the other scheme.
    Other(Mismatch),
}

/// Probe `base`'s address.
pub async fn probe(base: &str) -> Probe {
    let Ok(url) = reqwest::Url::parse(base) else {
        return Probe::NoAnswer;
    };
    let (Some(host), Some(port)) = (url.host_str(), url.port_or_known_default()) else {
        return Probe::NoAnswer;
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let stream = match tokio::time::timeout(PROBE, TcpStream::connect((host, port))).await {
        Ok(Ok(stream)) => stream,
        _ => return Probe::NoAnswer,
    };
    let other = async {
        match url.scheme() {
            "http" => answers_tls(stream, host)
                .await
                .then_some(Mismatch::AnswersHttps),
            "https" => answers_http(stream)
                .await
                .then_some(Mismatch::AnswersPlainHttp),
            _ => None,
        }
    };
    match tokio::time::timeout(PROBE, other).await {
        Ok(Some(m)) => Probe::Other(m),
        _ => Probe::Answers,
    }
}

/// A TLS handshake trusting no certificate: the server speaks TLS when it sends a certificate
/// (refused here) or a TLS alert.
async fn answers_tls(stream: TcpStream, host: &str) -> bool {
    let config = rustls::ClientConfig::builder_with_provider(crate::tls::provider())
        .with_safe_default_protocol_versions()
        .expect("ring supports the default protocol versions")
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth();
    let Ok(name) = rustls::pki_types::ServerName::try_from(host.to_owned()) else {
        return false;
    };
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    match connector.connect(name, stream).await {
        Ok(_) => true,
        Err(e) => matches!(
            e.get_ref()
                .and_then(|inner| inner.downcast_ref::<rustls::Error>()),
            Some(
                rustls::Error::InvalidCertificate(_)
                    | rustls::Error::AlertReceived(_)
                    | rustls::Error::PeerIncompatible(_)
            )
        ),
    }
}

/// A plain `HEAD /`: the server speaks HTTP when it answers with a status line.
async fn answers_http(mut stream: TcpStream) -> bool {
    if stream
        .write_all(b"HEAD / HTTP/1.0\r\nConnection: close\r\n\r\n")
        .await
        .is_err()
    {
        return false;
    }
    let mut head = [0u8; 5];
    stream.read_exact(&mut head).await.is_ok() && &head == b"HTTP/"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_corrected_url_keeps_everything_but_the_scheme() {
        assert_eq!(
            Mismatch::AnswersHttps.corrected("http://127.0.0.1:8080"),
            "https://127.0.0.1:8080"
        );
        assert_eq!(
            Mismatch::AnswersPlainHttp.corrected("https://ci.example:8443/base"),
            "http://ci.example:8443/base"
        );
    }
}
