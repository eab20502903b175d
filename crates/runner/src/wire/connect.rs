//! The pasted connect payload: one opaque string that carries a join code, the URLs runners
//! reach the service at and, for a server with a self-signed certificate, the SHA-256 pin of
//! its key, so `leasehold runner connect <payload>` needs no other flag.
//!
//! Format: `lh1.` then base64url (no padding) of the JSON object
//! `{"code":"jc_...","servers":["https://..."],"pin":"sha256//..."}` (`pin` absent when there
//! is none). Invariant: [`Connect::decode`] accepts exactly what [`Connect::encode`] writes
//! (plus padding and surrounding blanks, which pasting adds), with a `jc_` code and at least
//! one `http://` or `https://` URL; unknown JSON fields are ignored, so a later `lh1` payload
//! may carry more. A new incompatible format takes a new prefix.

use base64::Engine;
use serde::{Deserialize, Serialize};

/// What the payload says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Connect {
    /// The `jc_` join code.
    pub code: String,
    /// Base URLs of the service, tried in order.
    pub servers: Vec<String>,
    /// `sha256//BASE64` of the server's SubjectPublicKeyInfo: when present the runner accepts
    /// only a server with that key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pin: Option<String>,
}

/// The prefix of every payload of this format.
pub const PREFIX: &str = "lh1.";

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::URL_SAFE_NO_PAD;

impl Connect {
    /// `lh1.` + base64url(JSON).
    pub fn encode(&self) -> String {
        let json = serde_json::to_vec(self).expect("a payload serialises");
        format!("{PREFIX}{}", B64.encode(json))
    }

    /// Whether `s` looks like a payload rather than a bare code.
    pub fn is_payload(s: &str) -> bool {
        s.trim().starts_with(PREFIX)
    }

    /// Read a pasted payload.
    ///
    /// # Errors
    /// Not `lh1.` + base64url of a payload with a `jc_` code and at least one http(s) URL; the
    /// message says which.
    pub fn decode(s: &str) -> Result<Self, String> {
        let body = s
            .trim()
            .strip_prefix(PREFIX)
            .ok_or_else(|| format!("a connect payload starts with '{PREFIX}'"))?;
        let json = B64
            .decode(body.trim_end_matches('='))
            .map_err(|_| "the connect payload is damaged (not base64url): paste it whole")?;
        let payload: Self = serde_json::from_slice(&json)
            .map_err(|e| format!("the connect payload is damaged: {e}"))?;
        if !payload.code.starts_with("jc_") {
            return Err("the connect payload carries no join code".into());
        }
        if payload.servers.is_empty() {
            return Err("the connect payload names no server".into());
        }
        if let Some(bad) = payload.servers.iter().find(|u| !super::input::is_web(u)) {
            return Err(format!(
                "the connect payload names '{}', not an http(s) URL",
                super::input::escaped(bad)
            ));
        }
        Ok(payload)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Connect {
        Connect {
            code: "jc_abc".into(),
            servers: vec!["https://a.example:8443".into(), "https://b.example".into()],
            pin: Some("sha256//AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=".into()),
        }
    }

    #[test]
    fn a_payload_round_trips_and_is_one_url_safe_word() {
        let text = sample().encode();
        assert!(text.starts_with("lh1."));
        assert!(
            text[4..]
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'),
            "{text}"
        );
        assert_eq!(Connect::decode(&text).unwrap(), sample());
        assert_eq!(Connect::decode(&format!("  {text}==\n")).unwrap(), sample());
        let no_pin = Connect {
            pin: None,
            ..sample()
        };
        assert!(
            !String::from_utf8(B64.decode(&no_pin.encode()[4..]).unwrap())
                .unwrap()
                .contains("pin")
        );
        assert!(Connect::is_payload(&text) && !Connect::is_payload("jc_abc"));
    }

    #[test]
    fn damaged_payloads_are_refused_with_a_reason() {
        let text = sample().encode();
        let wrap = |json: &str| format!("{PREFIX}{}", B64.encode(json));
        for (bad, why) in [
            ("jc_abc".to_owned(), "starts with"),
            (format!("lh2.{}", &text[4..]), "starts with"),
            (text[..text.len() / 2].to_owned() + "!", "damaged"),
            (wrap("[]"), "damaged"),
            (
                wrap(r#"{"code":"x","servers":["https://a"]}"#),
                "no join code",
            ),
            (wrap(r#"{"code":"jc_x","servers":[]}"#), "no server"),
            (
                wrap(r#"{"code":"jc_x","servers":["ftp://a"]}"#),
                "not an http",
            ),
        ] {
            let err = Connect::decode(&bad).unwrap_err();
            assert!(err.contains(why), "{bad}: {err}");
        }
        // Unknown fields are ignored: a later payload may say more.
        let later = wrap(r#"{"code":"jc_x","servers":["https://a"],"labels":["gpu"]}"#);
        assert_eq!(Connect::decode(&later).unwrap().code, "jc_x");
    }
}
