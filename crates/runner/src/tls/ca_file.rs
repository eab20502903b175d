//! The client's verifier when `--ca-cert FILE` is given: the usual WebPKI checks against the
//! system's CAs plus the file's, and a server presenting, byte for byte, a certificate of that
//! file is trusted as itself, whatever its `basicConstraints` say.
//!
//! Why: `openssl req -x509`, the usual way to make a self-signed certificate, writes
//! `CA:TRUE`, and WebPKI refuses a CA certificate presented as a server's own
//! (`CaUsedAsEndEntity`). The operator who gave the very certificate the server presents has
//! said "trust this server", so that refusal alone is overridden; nothing else is.
//!
//! Invariants: the override applies only to that refusal and only to a certificate equal to one
//! in the file; it is still refused if outside its validity period (WebPKI checks the period of
//! the presented certificate before its `basicConstraints`, so `CaUsedAsEndEntity` comes only
//! after the period passed: the unit tests below hold that order) or not valid for the name the
//! client called. The handshake signatures are checked as usual. Every other refusal is
//! wrapped in a [`Refusal`] naming the file, so the message never tells the user to pass the
//! `--ca-cert` they passed.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, SignatureScheme};

/// A certificate refused by a client that had `--ca-cert`: why, and which file it had.
#[derive(Debug)]
pub struct Refusal {
    pub why: CertificateError,
    pub ca_cert: PathBuf,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&super::describe_cert_error(&self.why))
    }
}

impl std::error::Error for Refusal {}

/// WebPKI over the system's CAs and the file's, plus the file's own certificates as servers.
#[derive(Debug)]
pub struct CaFile {
    inner: Arc<WebPkiServerVerifier>,
    own: Vec<CertificateDer<'static>>,
    path: PathBuf,
}

impl CaFile {
    /// # Errors
    /// `roots` is empty (cannot be: it holds the file's certificates).
    pub fn new(
        roots: rustls::RootCertStore,
        own: Vec<CertificateDer<'static>>,
        path: PathBuf,
    ) -> anyhow::Result<Self> {
        let inner = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), super::provider())
            .build()
            .map_err(|e| anyhow::anyhow!("{}: no usable CA certificate: {e}", path.display()))?;
        Ok(Self { inner, own, path })
    }

    fn refuse(&self, why: CertificateError) -> rustls::Error {
        rustls::Error::InvalidCertificate(CertificateError::Other(rustls::OtherError(Arc::new(
            Refusal {
                why,
                ca_cert: self.path.clone(),
            },
        ))))
    }
}

/// Whether `e` is WebPKI's refusal of a CA certificate presented as a server's.
fn ca_used_as_end_entity(e: &rustls::Error) -> bool {
    matches!(
        e,
        rustls::Error::InvalidCertificate(CertificateError::Other(o))
            if matches!(o.0.downcast_ref::<webpki::Error>(), Some(webpki::Error::CaUsedAsEndEntity))
    )
}

impl ServerCertVerifier for CaFile {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self.inner.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        ) {
            Ok(ok) => Ok(ok),
            Err(e) if ca_used_as_end_entity(&e) && self.own.iter().any(|c| c == end_entity) => {
                let parsed = rustls::server::ParsedCertificate::try_from(end_entity)?;
                match rustls::client::verify_server_name(&parsed, server_name) {
                    Ok(()) => Ok(ServerCertVerified::assertion()),
                    Err(rustls::Error::InvalidCertificate(why)) => Err(self.refuse(why)),
                    Err(other) => Err(other),
                }
            }
            Err(rustls::Error::InvalidCertificate(why)) => Err(self.refuse(why)),
            Err(other) => Err(other),
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A self-signed `CA:TRUE` certificate for `localhost` named `cn`, valid from `from` to
    /// `to` (seconds from now).
    fn ca_true(cn: &str, from: i64, to: i64) -> CertificateDer<'static> {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, cn);
        let now = UnixTime::now().as_secs() as i64;
        let at = |s: i64| {
            rcgen::date_time_ymd(1970, 1, 1) + std::time::Duration::from_secs((now + s) as u64)
        };
        params.not_before = at(from);
        params.not_after = at(to);
        params.self_signed(&key).unwrap().der().clone()
    }

    fn verifier(own: &CertificateDer<'static>) -> CaFile {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(own.clone()).unwrap();
        CaFile::new(roots, vec![own.clone()], "ca.pem".into()).unwrap()
    }

    fn verify(v: &CaFile, cert: &CertificateDer<'_>, name: &str) -> Result<(), String> {
        let name = ServerName::try_from(name.to_owned()).unwrap();
        v.verify_server_cert(cert, &[], &name, &[], UnixTime::now())
            .map(|_| ())
            .map_err(|e| crate::tls::explain(&e).unwrap())
    }

    #[test]
    fn a_ca_true_certificate_given_as_itself_is_trusted_for_its_name_and_period_only() {
        let good = ca_true("good", -3600, 3600);
        let v = verifier(&good);
        verify(&v, &good, "localhost").unwrap();

        let err = verify(&v, &good, "other.example").unwrap_err();
        assert!(err.contains("not valid for other.example"), "{err}");
        assert!(!err.contains("pass --ca-cert"), "{err}");

        for (from, to, word) in [(-7200, -3600, "expired"), (3600, 7200, "not valid yet")] {
            let cert = ca_true("dated", from, to);
            let err = verify(&verifier(&cert), &cert, "localhost").unwrap_err();
            assert!(err.contains(word), "{err}");
            assert!(!err.contains("Other("), "{err}");
        }

        // Another CA:TRUE certificate than the file's is not the server the operator named.
        let stranger = ca_true("stranger", -3600, 3600);
        let err = verify(&v, &stranger, "localhost").unwrap_err();
        assert!(err.contains("a CA certificate as its own"), "{err}");
        assert!(!err.contains("pass --ca-cert"), "{err}");
    }
}
