//! The certificate a replica serving HTTPS presents (`--tls-cert`, `--tls-key`), swapped in
//! place on SIGHUP, and the pin of its key that join codes hand out.
//!
//! Invariants: a reload that fails (unreadable file, no key, a key that does not match the
//! certificate) changes nothing and is logged: the replica keeps presenting the certificate it
//! had. A reload never touches an open connection: each handshake takes the certificate current
//! at its start, and only new handshakes see a new one.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use anyhow::Context as _;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio_rustls::TlsAcceptor;

use super::Pin;

/// The certificate and key in use.
struct Loaded {
    key: Arc<CertifiedKey>,
    /// The key's pin, when the certificate is self-signed (see [`Certificates::self_signed_pin`]).
    pin: Option<Pin>,
}

/// The replica's certificate: read from two PEM files, re-read on demand.
pub struct Certificates {
    cert: PathBuf,
    key: PathBuf,
    current: RwLock<Arc<Loaded>>,
}

impl std::fmt::Debug for Certificates {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Certificates")
            .field("cert", &self.cert)
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

fn load(cert: &Path, key: &Path) -> anyhow::Result<Loaded> {
    let chain = super::load_certs(cert).context("--tls-cert")?;
    let private = super::load_key(key).context("--tls-key")?;
    let pin =
        if chain.len() == 1 && super::is_self_issued(&chain[0]) {
            Some(Pin::of_cert(&chain[0]).map_err(|e| {
                anyhow::anyhow!("{}: not an X.509 certificate: {e}", cert.display())
            })?)
        } else {
            None
        };
    let certified = CertifiedKey::from_der(chain, private, &super::provider()).map_err(|e| {
        anyhow::anyhow!(
            "{} and {} do not make a usable pair: {e}",
            cert.display(),
            key.display()
        )
    })?;
    Ok(Loaded {
        key: Arc::new(certified),
        pin,
    })
}

impl Certificates {
    /// Read the pair.
    ///
    /// # Errors
    /// A file is unreadable, holds no certificate or key, or the key is not the certificate's.
    pub fn load(cert: &Path, key: &Path) -> anyhow::Result<Arc<Self>> {
        let loaded = load(cert, key)?;
        Ok(Arc::new(Self {
            cert: cert.to_owned(),
            key: key.to_owned(),
            current: RwLock::new(Arc::new(loaded)),
        }))
    }

    /// Read the files again and present the new pair to every later handshake; on failure keep
    /// the old pair and log why.
    pub fn reload(&self) -> bool {
        match load(&self.cert, &self.key) {
            Ok(loaded) => {
                let pin = loaded.pin.map(|p| p.to_string());
                *self.current.write().expect("certificate lock") = Arc::new(loaded);
                tracing::info!(cert = %self.cert.display(), pin = pin.as_deref().unwrap_or("-"), "TLS certificate reloaded");
                true
            }
            Err(e) => {
                tracing::error!(
                    error = format!("{e:#}"),
                    "TLS certificate reload failed; keeping the certificate in use"
                );
                false
            }
        }
    }

    /// The SHA-256 pin of the key, when the certificate in use is self-signed (one certificate
    /// whose issuer is its subject). A CA-issued certificate has none: its key may change with
    /// every renewal, and clients check it against their CAs instead.
    pub fn self_signed_pin(&self) -> Option<Pin> {
        self.current.read().expect("certificate lock").pin
    }

    /// A TLS acceptor presenting the current certificate (HTTP/1.1 only, as the server speaks).
    pub fn acceptor(self: &Arc<Self>) -> TlsAcceptor {
        let mut config = rustls::ServerConfig::builder_with_provider(super::provider())
            .with_safe_default_protocol_versions()
            .expect("ring supports the default protocol versions")
            .with_no_client_auth()
            .with_cert_resolver(self.clone());
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        TlsAcceptor::from(Arc::new(config))
    }
}

impl ResolvesServerCert for Certificates {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.read().expect("certificate lock").key.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write_self_signed(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
        let made = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
        let (cert, key) = (
            dir.join(format!("{name}.crt")),
            dir.join(format!("{name}.key")),
        );
        std::fs::write(&cert, made.cert.pem()).unwrap();
        std::fs::write(&key, made.signing_key.serialize_pem()).unwrap();
        (cert, key)
    }

    #[test]
    fn a_reload_takes_a_good_pair_and_keeps_the_old_one_otherwise() {
        let dir = std::env::temp_dir().join(format!("lh-certs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (cert, key) = write_self_signed(&dir, "live");
        let (other_cert, other_key) = write_self_signed(&dir, "other");
        let certs = Certificates::load(&cert, &key).unwrap();
        let first = certs.self_signed_pin().expect("self-signed: pinned");

        // Another certificate with the old key: not a pair, refused.
        std::fs::copy(&other_cert, &cert).unwrap();
        assert!(!certs.reload());
        assert_eq!(certs.self_signed_pin(), Some(first));
        std::fs::write(&key, "garbage").unwrap();
        assert!(!certs.reload());
        assert_eq!(certs.self_signed_pin(), Some(first));

        std::fs::copy(&other_key, &key).unwrap();
        assert!(certs.reload());
        assert_ne!(certs.self_signed_pin(), Some(first));
        assert!(Certificates::load(&cert, &dir.join("missing.key")).is_err());
        std::fs::remove_dir_all(dir).unwrap();
    }
}
