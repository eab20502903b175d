//! Workspace secrets at rest: sealed with ChaCha20-Poly1305 under a key only the replicas hold.
//!
//! Invariants: every value gets a fresh random 96-bit nonce; the associated data binds the
//! ciphertext to its workspace and name, so a row copied to another name or workspace does not
//! open; a value is opened with the current key first and then with the old one (rotation), and
//! nothing here ever prints a key or a value (`Debug` is redacted).

use std::fmt;
use std::str::FromStr;

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{ChaCha20Poly1305, Key, Nonce};
use rand::RngCore;

/// Secret names: `^[A-Z_][A-Z0-9_]{0,63}$` (they become environment variables).
pub fn is_valid_name(name: &str) -> bool {
    let b = name.as_bytes();
    !b.is_empty()
        && b.len() <= 64
        && (b[0].is_ascii_uppercase() || b[0] == b'_')
        && b.iter()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == b'_')
}

/// Largest value, in bytes.
pub const MAX_VALUE_BYTES: usize = 65_536;

/// A 32-byte key, given base64-encoded (`LEASEHOLD_SECRETS_KEY`). Never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct SealKey([u8; 32]);

impl fmt::Debug for SealKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SealKey(<redacted>)")
    }
}

impl FromStr for SealKey {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bytes = STANDARD.decode(s.trim()).map_err(|_| {
            "must be 32 bytes in base64 (e.g. `openssl rand -base64 32`)".to_owned()
        })?;
        let key: [u8; 32] = bytes
            .try_into()
            .map_err(|_| "must decode to exactly 32 bytes".to_owned())?;
        Ok(Self(key))
    }
}

impl SealKey {
    /// A new random key.
    pub fn generate() -> Self {
        let mut key = [0u8; 32];
        rand::rng().fill_bytes(&mut key);
        Self(key)
    }

    /// The key as `LEASEHOLD_SECRETS_KEY` expects it (for `leasehold dev` to keep).
    pub fn to_base64(&self) -> String {
        STANDARD.encode(self.0)
    }
}

/// A sealed value as stored: the nonce and the ciphertext with its tag.
#[derive(Clone, PartialEq, Eq)]
pub struct Sealed {
    pub nonce: Vec<u8>,
    pub ciphertext: Vec<u8>,
}

/// Why a stored value did not open.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OpenError {
    #[error("the value does not open with the configured key(s): it was sealed with another key, or moved")]
    WrongKeyOrMoved,
}

/// Seals with the current key; opens with the current or the old key.
#[derive(Clone)]
pub struct Sealer {
    current: ChaCha20Poly1305,
    old: Option<ChaCha20Poly1305>,
}

impl fmt::Debug for Sealer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sealer")
            .field("old_key", &self.old.is_some())
            .finish_non_exhaustive()
    }
}

/// `leasehold-secret/v1 \0 workspace \0 name`: the value's place, bound into its tag.
fn associated_data(workspace: &str, name: &str) -> Vec<u8> {
    let mut ad = Vec::with_capacity(24 + workspace.len() + name.len());
    ad.extend_from_slice(b"leasehold-secret/v1\0");
    ad.extend_from_slice(workspace.as_bytes());
    ad.push(0);
    ad.extend_from_slice(name.as_bytes());
    ad
}

impl Sealer {
    pub fn new(current: &SealKey, old: Option<&SealKey>) -> Self {
        Self {
            current: ChaCha20Poly1305::new(Key::from_slice(&current.0)),
            old: old.map(|k| ChaCha20Poly1305::new(Key::from_slice(&k.0))),
        }
    }

    /// Seal `value` for `workspace`/`name` with a fresh nonce.
    pub fn seal(&self, workspace: &str, name: &str, value: &str) -> Sealed {
        let mut nonce = [0u8; 12];
        rand::rng().fill_bytes(&mut nonce);
        let ad = associated_data(workspace, name);
        let ciphertext = self
            .current
            .encrypt(
                Nonce::from_slice(&nonce),
                Payload {
                    msg: value.as_bytes(),
                    aad: &ad,
                },
            )
            .expect("ChaCha20-Poly1305 seals any value under 256 GiB");
        Sealed {
            nonce: nonce.to_vec(),
            ciphertext,
        }
    }

    /// Open a stored value of `workspace`/`name`.
    ///
    /// # Errors
    /// Neither key opens it, or it was sealed for another place.
    pub fn open(&self, workspace: &str, name: &str, sealed: &Sealed) -> Result<String, OpenError> {
        if sealed.nonce.len() != 12 {
            return Err(OpenError::WrongKeyOrMoved);
        }
        let ad = associated_data(workspace, name);
        let nonce = Nonce::from_slice(&sealed.nonce);
        let payload = || Payload {
            msg: &sealed.ciphertext,
            aad: &ad,
        };
        let plain = self
            .current
            .decrypt(nonce, payload())
            .or_else(|e| match &self.old {
                Some(old) => old.decrypt(nonce, payload()),
                None => Err(e),
            })
            .map_err(|_| OpenError::WrongKeyOrMoved)?;
        String::from_utf8(plain).map_err(|_| OpenError::WrongKeyOrMoved)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_environment_variable_names() {
        assert!(is_valid_name("NPM_TOKEN"));
        assert!(is_valid_name("_X1"));
        assert!(!is_valid_name("npm_token"));
        assert!(!is_valid_name("1X"));
        assert!(!is_valid_name(""));
        assert!(!is_valid_name(&"A".repeat(65)));
        assert!(is_valid_name(&"A".repeat(64)));
    }

    #[test]
    fn keys_parse_from_base64_of_32_bytes_only() {
        let k = SealKey::generate();
        assert_eq!(k.to_base64().parse::<SealKey>().unwrap(), k);
        assert!("c2hvcnQ=".parse::<SealKey>().is_err());
        assert!("not base64!".parse::<SealKey>().is_err());
        assert!(!format!("{k:?}").contains(&k.to_base64()));
    }

    #[test]
    fn a_value_opens_only_in_its_place_and_with_its_key() {
        let (a, b) = (SealKey::generate(), SealKey::generate());
        let sealer = Sealer::new(&a, None);
        let one = sealer.seal("acme", "TOKEN", "hunter2");
        let two = sealer.seal("acme", "TOKEN", "hunter2");
        assert_ne!(one.nonce, two.nonce, "a fresh nonce per value");
        assert_ne!(one.ciphertext, two.ciphertext);
        assert!(!one
            .ciphertext
            .windows(7)
            .any(|w| w == b"hunter2".as_slice()));
        assert_eq!(sealer.open("acme", "TOKEN", &one).unwrap(), "hunter2");
        assert!(sealer.open("acme", "OTHER", &one).is_err(), "moved name");
        assert!(
            sealer.open("beta", "TOKEN", &one).is_err(),
            "moved workspace"
        );
        assert!(Sealer::new(&b, None).open("acme", "TOKEN", &one).is_err());
        // Rotation: the new key seals, the old one still opens what it sealed.
        let rotated = Sealer::new(&b, Some(&a));
        assert_eq!(rotated.open("acme", "TOKEN", &one).unwrap(), "hunter2");
        let three = rotated.seal("acme", "TOKEN", "x");
        assert!(sealer.open("acme", "TOKEN", &three).is_err());
    }
}
