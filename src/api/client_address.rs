//! The client a request comes from, for rate limiting: the connection's peer, or, behind
//! trusted proxies, the address the last of them appended to `X-Forwarded-For`.
//!
//! Invariant: only an address a trusted proxy wrote is ever believed; whatever a client writes
//! into the header itself is never read.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;

use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::header::HeaderName;
use axum::http::request::Parts;

use super::error::ApiError;
use super::AppState;
use crate::config::TrustedProxies;

const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");

/// The client's address, for rate limiting: see [`client_address`].
pub fn client_ip(parts: &Parts, trusted: &TrustedProxies) -> IpAddr {
    let connection = parts
        .extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip())
        .unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED));
    let forwarded = parts
        .headers
        .get_all(X_FORWARDED_FOR)
        .iter()
        .filter_map(|v| v.to_str().ok());
    client_address(connection, forwarded, trusted)
}

/// The client a request comes from. Start from the connection's client (the TCP peer, or the
/// one a trusted proxy's PROXY header named); while that address is a trusted proxy, step to
/// the address it appended to `X-Forwarded-For` (the right-most one left). The first untrusted
/// address is the client: whatever a client writes into the header itself lies to the left of
/// it and is never read. An entry that is not an address stops the walk at the proxy.
pub fn client_address<'a>(
    connection: IpAddr,
    forwarded_for: impl Iterator<Item = &'a str>,
    trusted: &TrustedProxies,
) -> IpAddr {
    let mut client = connection.to_canonical();
    if !trusted.contains(client) {
        return client;
    }
    let hops: Vec<&str> = forwarded_for.flat_map(|v| v.split(',')).collect();
    for hop in hops.iter().rev() {
        if !trusted.contains(client) {
            break;
        }
        match forwarded_hop(hop.trim()) {
            Some(ip) => client = ip.to_canonical(),
            None => break,
        }
    }
    client
}

/// One `X-Forwarded-For` entry: an address, possibly with a port (`192.0.2.7:443`,
/// `[2001:db8::7]:443`).
fn forwarded_hop(hop: &str) -> Option<IpAddr> {
    hop.parse::<IpAddr>()
        .ok()
        .or_else(|| hop.parse::<SocketAddr>().ok().map(|a| a.ip()))
}

/// The client of a request, as an extractor.
pub struct ClientIp(pub IpAddr);

impl FromRequestParts<Arc<AppState>> for ClientIp {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &Arc<AppState>,
    ) -> Result<Self, Self::Rejection> {
        Ok(ClientIp(client_ip(parts, &state.limits.trusted_proxies)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client(connection: &str, forwarded: &[&str], trusted: &str) -> IpAddr {
        client_address(
            connection.parse().unwrap(),
            forwarded.iter().copied(),
            &trusted.parse().unwrap(),
        )
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn without_trusted_proxies_the_connection_is_the_client() {
        assert_eq!(client("10.0.0.9", &["192.0.2.7"], ""), ip("10.0.0.9"));
        // A forged header from an untrusted peer is never read.
        assert_eq!(
            client("198.51.100.1", &["192.0.2.7"], "10.0.0.0/8"),
            ip("198.51.100.1")
        );
    }

    #[test]
    fn the_right_most_untrusted_address_is_the_client() {
        let lb = "10.0.0.0/8";
        assert_eq!(client("10.0.0.9", &["192.0.2.7"], lb), ip("192.0.2.7"));
        // The client wrote its own entry; the balancer appended the address it saw.
        assert_eq!(
            client("10.0.0.9", &["203.0.113.66, 192.0.2.7"], lb),
            ip("192.0.2.7")
        );
        // Proxies in a chain, and the same list split over two header lines.
        assert_eq!(
            client("10.0.0.9", &["203.0.113.66, 192.0.2.7", "10.1.1.1"], lb),
            ip("192.0.2.7")
        );
        // Ports and IPv4-mapped addresses.
        assert_eq!(
            client("::ffff:10.0.0.9", &["192.0.2.7:443"], lb),
            ip("192.0.2.7")
        );
        assert_eq!(
            client("10.0.0.9", &["[2001:db8::7]:443"], lb),
            ip("2001:db8::7")
        );
    }

    #[test]
    fn a_proxy_without_a_usable_entry_is_its_own_client() {
        let lb = "10.0.0.0/8";
        assert_eq!(client("10.0.0.9", &[], lb), ip("10.0.0.9"));
        assert_eq!(client("10.0.0.9", &["unknown"], lb), ip("10.0.0.9"));
        assert_eq!(client("10.0.0.9", &["192.0.2.7, "], lb), ip("10.0.0.9"));
        // Every hop trusted: the left-most.
        assert_eq!(
            client("10.0.0.9", &["10.2.2.2, 10.1.1.1"], lb),
            ip("10.2.2.2")
        );
    }
}
