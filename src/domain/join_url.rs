//! Join URLs (`https://<gateway>/j/<short>`): a short code that hands out one join code's
//! connect payload, once.
//!
//! Invariants: a short code carries 128 random bits (the contract asks for at least 80); the
//! store keeps only [`lookup_hash`] of it and the payload sealed ([`seal`]) under a key derived
//! from it, so the database alone can neither find a short code nor read the payload it hands
//! out; a malformed short code is never looked up.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use chacha20poly1305::aead::{Aead, KeyInit};
use chacha20poly1305::{ChaCha20Poly1305, Key, Nonce};
use rand::RngCore;
use sha2::{Digest, Sha256};

/// Random bytes of a short code: 128 bits, 22 base64url characters.
const BYTES: usize = 16;
const LEN: usize = 22;
const NONCE: usize = 12;

/// A new short code.
pub fn generate() -> String {
    let mut bytes = [0u8; BYTES];
    rand::rng().fill_bytes(&mut bytes);
    URL_SAFE_NO_PAD.encode(bytes)
}

/// Whether `short` is a short code this server could have minted.
pub fn is_well_formed(short: &str) -> bool {
    short.len() == LEN
        && short
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        && URL_SAFE_NO_PAD
            .decode(short)
            .is_ok_and(|b| b.len() == BYTES)
}

/// What the store finds a short code by.
pub fn lookup_hash(short: &str) -> Vec<u8> {
    Sha256::digest(format!("leasehold join url id\0{short}")).to_vec()
}

fn cipher(short: &str) -> ChaCha20Poly1305 {
    let key = Sha256::digest(format!("leasehold join url key\0{short}"));
    ChaCha20Poly1305::new(Key::from_slice(&key))
}

/// `payload` sealed under `short`: nonce then ciphertext.
pub fn seal(short: &str, payload: &str) -> Vec<u8> {
    let mut nonce = [0u8; NONCE];
    rand::rng().fill_bytes(&mut nonce);
    let sealed = cipher(short)
        .encrypt(Nonce::from_slice(&nonce), payload.as_bytes())
        .expect("sealing a short payload cannot fail");
    [&nonce[..], &sealed].concat()
}

/// The payload [`seal`] sealed under `short`, or `None` if the bytes do not open with it.
pub fn open(short: &str, sealed: &[u8]) -> Option<String> {
    if sealed.len() < NONCE {
        return None;
    }
    let (nonce, body) = sealed.split_at(NONCE);
    let plain = cipher(short).decrypt(Nonce::from_slice(nonce), body).ok()?;
    String::from_utf8(plain).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_code_carries_128_bits_and_opens_only_its_own_payload() {
        let short = generate();
        assert!(is_well_formed(&short), "{short}");
        assert_ne!(generate(), short);
        let sealed = seal(&short, "lh1.abc");
        assert!(!String::from_utf8_lossy(&sealed).contains("lh1.abc"));
        assert_eq!(open(&short, &sealed).as_deref(), Some("lh1.abc"));
        assert_eq!(open(&generate(), &sealed), None);
        assert_ne!(lookup_hash(&short), lookup_hash(&generate()));
        for bad in [
            "",
            "short",
            &format!("{short}A"),
            &short.replace(|_| true, "!"),
        ] {
            assert!(!is_well_formed(bad), "{bad}");
        }
    }
}
