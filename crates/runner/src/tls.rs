//! TLS pieces both ends share, on rustls with the `ring` provider: PEM files, the SHA-256 pin
//! of a certificate's public key, the client side's trust ([`Trust`]: system roots plus a
//! private CA, or one pinned key) and the server side's reloadable certificate
//! ([`certificates::Certificates`]).
//!
//! Invariants: a pin names a SubjectPublicKeyInfo, never a certificate, so it survives a
//! certificate re-issued with the same key; a client holding a pin accepts exactly the server
//! whose end-entity key has that hash and that proves it holds the key in the handshake (no CA,
//! name or expiry is consulted: the pin came from the server itself, through its operator), and
//! refuses every other one; without a pin the usual WebPKI checks apply. System roots are
//! read once per process, and only by a client that calls an `https://` URL.

mod ca_file;
pub mod certificates;

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::{Arc, OnceLock};

use anyhow::Context;
use base64::Engine;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The crypto every TLS configuration here uses.
pub fn provider() -> Arc<CryptoProvider> {
    static PROVIDER: OnceLock<Arc<CryptoProvider>> = OnceLock::new();
    PROVIDER
        .get_or_init(|| Arc::new(rustls::crypto::ring::default_provider()))
        .clone()
}

/// Every certificate in a PEM file, in order.
///
/// # Errors
/// Unreadable, not PEM, or no certificate in it.
pub fn load_certs(path: &Path) -> anyhow::Result<Vec<CertificateDer<'static>>> {
    let certs = CertificateDer::pem_file_iter(path)
        .with_context(|| format!("reading {}", path.display()))?
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("{} is not a PEM certificate file", path.display()))?;
    anyhow::ensure!(!certs.is_empty(), "{} holds no certificate", path.display());
    Ok(certs)
}

/// The first private key (PKCS#8, PKCS#1 or SEC1) in a PEM file.
///
/// # Errors
/// Unreadable, or no private key in it.
pub fn load_key(path: &Path) -> anyhow::Result<PrivateKeyDer<'static>> {
    PrivateKeyDer::from_pem_file(path)
        .with_context(|| format!("{} holds no PEM private key", path.display()))
}

/// The SHA-256 of a certificate's SubjectPublicKeyInfo (DER), written `sha256//BASE64` as curl's
/// `--pinnedpubkey` takes it.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Pin([u8; 32]);

const PIN_PREFIX: &str = "sha256//";

impl Pin {
    /// The pin of an end-entity certificate's key.
    ///
    /// # Errors
    /// The bytes are not an X.509 certificate.
    pub fn of_cert(cert: &CertificateDer<'_>) -> Result<Pin, webpki::Error> {
        let parsed = webpki::EndEntityCert::try_from(cert)?;
        Ok(Pin(Sha256::digest(
            parsed.subject_public_key_info().as_ref(),
        )
        .into()))
    }
}

impl fmt::Display for Pin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{PIN_PREFIX}{}",
            base64::engine::general_purpose::STANDARD.encode(self.0)
        )
    }
}

impl fmt::Debug for Pin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl FromStr for Pin {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || format!("'{s}' is not a key pin (sha256// and 44 base64 characters)");
        let b64 = s.strip_prefix(PIN_PREFIX).ok_or_else(bad)?;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(b64)
            .map_err(|_| bad())?;
        bytes.try_into().map(Pin).map_err(|_| bad())
    }
}

impl Serialize for Pin {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Pin {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// Whether a certificate names itself as its issuer (a self-signed certificate, as
/// `leasehold dev --tls` or `openssl req -x509` make).
pub fn is_self_issued(cert: &CertificateDer<'_>) -> bool {
    webpki::EndEntityCert::try_from(cert).is_ok_and(|c| c.issuer() == c.subject())
}

/// Whom a client trusts: system roots plus an optional private CA, or one pinned key.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Trust {
    /// A PEM file of CA certificates trusted beside the system's (`--ca-cert`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_cert: Option<PathBuf>,
    /// The server's key pin (from a pasted connect payload): then only that key is accepted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pin: Option<Pin>,
}

impl Trust {
    /// System roots and `ca_cert`, when given.
    pub fn ca(ca_cert: Option<PathBuf>) -> Self {
        Self { ca_cert, pin: None }
    }

    /// The rustls configuration of a client calling `https` servers with this trust; without
    /// `https`, no root is read (the client only calls plain HTTP).
    ///
    /// # Errors
    /// The CA file is unreadable or holds no usable certificate.
    pub fn client_config(&self, https: bool) -> anyhow::Result<rustls::ClientConfig> {
        let builder = rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .expect("ring supports the default protocol versions");
        if let Some(pin) = self.pin {
            return Ok(builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(PinnedKey { pin }))
                .with_no_client_auth());
        }
        let mut roots = if https {
            (*system_roots()).clone()
        } else {
            rustls::RootCertStore::empty()
        };
        let Some(path) = &self.ca_cert else {
            return Ok(builder.with_root_certificates(roots).with_no_client_auth());
        };
        let own = load_certs(path).context("--ca-cert")?;
        for cert in &own {
            roots
                .add(cert.clone())
                .with_context(|| format!("{}: not a usable CA certificate", path.display()))?;
        }
        let verifier = ca_file::CaFile::new(roots, own, path.clone())?;
        Ok(builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(verifier))
            .with_no_client_auth())
    }
}

/// The system's CA certificates, read once (unreadable ones are skipped, as curl does).
fn system_roots() -> Arc<rustls::RootCertStore> {
    static ROOTS: OnceLock<Arc<rustls::RootCertStore>> = OnceLock::new();
    ROOTS
        .get_or_init(|| {
            let found = rustls_native_certs::load_native_certs();
            for e in &found.errors {
                tracing::debug!(error = %e, "a system CA certificate could not be read");
            }
            let mut roots = rustls::RootCertStore::empty();
            let (_added, _ignored) = roots.add_parsable_certificates(found.certs);
            Arc::new(roots)
        })
        .clone()
}

/// The server presented a key other than the pinned one.
#[derive(Debug, thiserror::Error)]
#[error("the server's key {presented} does not match the pinned key {pinned}")]
pub struct PinMismatch {
    pub pinned: Pin,
    pub presented: String,
}

/// Accepts exactly the server whose end-entity key hashes to `pin`, and checks that it holds
/// that key (the handshake signatures), as the usual verifier does.
#[derive(Debug)]
struct PinnedKey {
    pin: Pin,
}

impl ServerCertVerifier for PinnedKey {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let presented = Pin::of_cert(end_entity).map_err(|_| {
            rustls::Error::InvalidCertificate(rustls::CertificateError::BadEncoding)
        })?;
        if presented == self.pin {
            return Ok(ServerCertVerified::assertion());
        }
        Err(rustls::Error::InvalidCertificate(
            rustls::CertificateError::Other(rustls::OtherError(Arc::new(PinMismatch {
                pinned: self.pin,
                presented: presented.to_string(),
            }))),
        ))
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &provider().signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &provider().signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        provider()
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// Why a TLS connection was refused, for people: `None` when `e` is no TLS failure.
///
/// Each says why in words (unknown issuer, expired, wrong name, key not pinned) and what to do;
/// `--ca-cert` is suggested only to a client that had none.
pub fn explain(e: &(dyn std::error::Error + 'static)) -> Option<String> {
    let tls = find_rustls_error(e)?;
    Some(match tls {
        rustls::Error::InvalidCertificate(rustls::CertificateError::Other(other))
            if other.0.downcast_ref::<PinMismatch>().is_some() =>
        {
            format!(
                "TLS certificate verification failed: {}; refusing this server (a server whose \
                 key was replaced on purpose needs a fresh `leasehold runner connect` payload)",
                other.0
            )
        }
        rustls::Error::InvalidCertificate(rustls::CertificateError::Other(other))
            if other.0.downcast_ref::<ca_file::Refusal>().is_some() =>
        {
            let refusal = other
                .0
                .downcast_ref::<ca_file::Refusal>()
                .expect("checked above");
            format!(
                "TLS certificate verification failed: {}; {}",
                describe_cert_error(&refusal.why),
                advice(&refusal.why, Some(&refusal.ca_cert))
            )
        }
        rustls::Error::InvalidCertificate(why) => format!(
            "TLS certificate verification failed: {}; {}",
            describe_cert_error(why),
            advice(why, None)
        ),
        rustls::Error::AlertReceived(alert) => format!(
            "TLS handshake failed: the server refused it ({alert:?} alert): check that this URL \
             is the service's https:// address"
        ),
        rustls::Error::InvalidMessage(_) | rustls::Error::InappropriateMessage { .. } => {
            "TLS handshake failed: the server did not answer in TLS: if it serves plain HTTP, \
             call its http:// URL"
                .to_owned()
        }
        other => format!("TLS handshake failed: {other}"),
    })
}

/// What to do about a refused certificate; `ca_cert` is the file the client already had.
fn advice(e: &rustls::CertificateError, ca_cert: Option<&Path>) -> String {
    use rustls::CertificateError as C;
    match (e, ca_cert) {
        (C::UnknownIssuer | C::BadSignature, Some(path)) => format!(
            "neither the system's CAs nor --ca-cert {} vouch for it: give --ca-cert the CA that \
             issued the server's certificate, or the server's own certificate if it is \
             self-signed",
            path.display()
        ),
        (C::UnknownIssuer | C::BadSignature, None) => "if the server's certificate comes from a \
             private CA or is self-signed, pass --ca-cert FILE (or set LEASEHOLD_CA_CERT)"
            .to_owned(),
        (
            C::Expired | C::ExpiredContext { .. } | C::NotValidYet | C::NotValidYetContext { .. },
            _,
        ) => "the server's operator must renew it (or this machine's clock is wrong)".to_owned(),
        (C::NotValidForName | C::NotValidForNameContext { .. }, _) => "call the server by a name \
             its certificate lists, or have the certificate re-issued for this name"
            .to_owned(),
        _ => "the server's operator must replace the certificate".to_owned(),
    }
}

fn describe_cert_error(e: &rustls::CertificateError) -> String {
    use rustls::CertificateError as C;
    match e {
        C::UnknownIssuer => "the certificate is not signed by a trusted CA".into(),
        C::BadSignature => {
            "the certificate's signature does not verify with its issuer's key".into()
        }
        C::Expired => "the certificate has expired".into(),
        C::ExpiredContext { not_after, .. } => format!(
            "the certificate has expired (it was valid until {})",
            when(*not_after)
        ),
        C::NotValidYet => "the certificate is not valid yet".into(),
        C::NotValidYetContext { not_before, .. } => format!(
            "the certificate is not valid yet (it is valid from {})",
            when(*not_before)
        ),
        C::NotValidForName => "the certificate is not valid for this host name".into(),
        C::NotValidForNameContext {
            expected,
            presented,
        } => format!(
            "the certificate is not valid for {} (it names {})",
            expected.to_str(),
            if presented.is_empty() {
                "no host".to_owned()
            } else {
                presented.join(", ")
            }
        ),
        C::Revoked => "the certificate has been revoked".into(),
        C::BadEncoding => "the certificate is malformed".into(),
        C::UnsupportedSignatureAlgorithmContext { .. } => {
            "the certificate is signed with an algorithm this client does not support".into()
        }
        C::InvalidPurpose | C::InvalidPurposeContext { .. } => {
            "the certificate is not meant for TLS servers (its extended key usage)".into()
        }
        C::Other(other)
            if matches!(
                other.0.downcast_ref::<webpki::Error>(),
                Some(webpki::Error::CaUsedAsEndEntity)
            ) =>
        {
            "the server presented a CA certificate as its own, and it is not one given with \
             --ca-cert"
                .into()
        }
        _ => "the certificate breaks a rule of the WebPKI checks".into(),
    }
}

/// A certificate time for people (UTC).
fn when(t: UnixTime) -> String {
    chrono::DateTime::from_timestamp(i64::try_from(t.as_secs()).unwrap_or(i64::MAX), 0).map_or_else(
        || t.as_secs().to_string(),
        |d| d.format("%Y-%m-%d %H:%M UTC").to_string(),
    )
}

/// The rustls error in `e`'s chain, looking inside `io::Error`s too (their `source` skips the
/// error they wrap).
fn find_rustls_error<'a>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a rustls::Error> {
    let mut cur: Option<&'a (dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if let Some(tls) = err.downcast_ref::<rustls::Error>() {
            return Some(tls);
        }
        if let Some(inner) = err
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
        {
            if let Some(found) = find_rustls_error(inner) {
                return Some(found);
            }
        }
        cur = err.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn self_signed(key: &rcgen::KeyPair, name: &str) -> CertificateDer<'static> {
        rcgen::CertificateParams::new(vec![name.to_owned()])
            .unwrap()
            .self_signed(key)
            .unwrap()
            .der()
            .clone()
    }

    #[test]
    fn a_pin_names_the_key_not_the_certificate() {
        let key = rcgen::KeyPair::generate().unwrap();
        let first = self_signed(&key, "a.example");
        let reissued = self_signed(&key, "b.example");
        assert_ne!(first, reissued);
        assert_eq!(
            Pin::of_cert(&first).unwrap(),
            Pin::of_cert(&reissued).unwrap()
        );
        let other = self_signed(&rcgen::KeyPair::generate().unwrap(), "a.example");
        assert_ne!(Pin::of_cert(&first).unwrap(), Pin::of_cert(&other).unwrap());
        assert!(is_self_issued(&first));
    }

    #[test]
    fn a_pin_is_written_as_curl_takes_it_and_read_back() {
        let key = rcgen::KeyPair::generate().unwrap();
        let pin = Pin::of_cert(&self_signed(&key, "a")).unwrap();
        let text = pin.to_string();
        assert!(
            text.starts_with("sha256//") && text.len() == 8 + 44,
            "{text}"
        );
        assert_eq!(text.parse::<Pin>().unwrap(), pin);
        // The same hash as `openssl x509 -pubkey | openssl pkey -pubin -outform der | sha256`.
        let spki = rcgen::PublicKeyData::subject_public_key_info(&key);
        let want: [u8; 32] = Sha256::digest(&spki).into();
        assert_eq!(pin, Pin(want));
        for bad in [
            "",
            "sha256//",
            "sha1//AAAA",
            "sha256//not base64!",
            "sha256//AAAA",
        ] {
            assert!(bad.parse::<Pin>().is_err(), "{bad}");
        }
    }
}
