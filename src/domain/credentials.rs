//! The one recipe for every secret the service issues: `<prefix>_<base64url(32 random bytes)>`.
//!
//! Invariant: only [`hash`] of the whole string is ever stored; the plaintext leaves the
//! process once, in the response that created it, and [`Secret`] never prints it.

use std::fmt;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use rand::RngCore;
use sha2::{Digest, Sha256};

/// What a credential is for; the prefix says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    ApiKey,
    Runner,
    JoinCode,
}

impl Kind {
    pub fn prefix(self) -> &'static str {
        match self {
            Kind::ApiKey => "ak_",
            Kind::Runner => "rnr_",
            Kind::JoinCode => "jc_",
        }
    }
}

/// Length of the base64url body: 32 bytes without padding.
const BODY_LEN: usize = 43;

/// A freshly minted credential. `Debug` and `Display` never show the plaintext.
pub struct Secret {
    plaintext: String,
    hash: Vec<u8>,
}

impl Secret {
    /// Mint a new credential of `kind` from the operating system's random source.
    pub fn generate(kind: Kind) -> Self {
        let mut bytes = [0u8; 32];
        rand::rng().fill_bytes(&mut bytes);
        let plaintext = format!("{}{}", kind.prefix(), URL_SAFE_NO_PAD.encode(bytes));
        let hash = hash(&plaintext);
        Self { plaintext, hash }
    }

    /// The plaintext, to be returned once in the creating response.
    pub fn reveal(&self) -> &str {
        &self.plaintext
    }

    /// What the store keeps.
    pub fn hash(&self) -> &[u8] {
        &self.hash
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

/// SHA-256 of the whole credential string, prefix included.
pub fn hash(token: &str) -> Vec<u8> {
    Sha256::digest(token.as_bytes()).to_vec()
}

/// If `token` is well formed for `kind`, its hash. Malformed tokens are never looked up.
pub fn parse(kind: Kind, token: &str) -> Option<Vec<u8>> {
    let body = token.strip_prefix(kind.prefix())?;
    let well_formed = body.len() == BODY_LEN
        && body
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        && URL_SAFE_NO_PAD.decode(body).is_ok_and(|b| b.len() == 32);
    well_formed.then(|| hash(token))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_tokens_follow_the_recipe_and_parse_back() {
        for kind in [Kind::ApiKey, Kind::Runner, Kind::JoinCode] {
            let s = Secret::generate(kind);
            assert!(s.reveal().starts_with(kind.prefix()));
            assert_eq!(s.reveal().len(), kind.prefix().len() + 43);
            assert_eq!(parse(kind, s.reveal()).as_deref(), Some(s.hash()));
        }
    }

    #[test]
    fn wrong_kind_and_malformed_tokens_do_not_parse() {
        let s = Secret::generate(Kind::ApiKey);
        assert!(parse(Kind::Runner, s.reveal()).is_none());
        assert!(parse(Kind::ApiKey, "ak_short").is_none());
        assert!(parse(
            Kind::ApiKey,
            &format!("{}!", &s.reveal()[..s.reveal().len() - 1])
        )
        .is_none());
        assert!(!format!("{s:?}").contains(s.reveal()));
    }
}
