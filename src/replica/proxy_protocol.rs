//! The PROXY protocol (HAProxy's, text v1 and binary v2): the header a load balancer in TCP
//! mode sends first on each connection it opens to a replica, naming the client it carries.
//! [`handshake`] reads that header from a trusted proxy's connection and [`sniff`] refuses one
//! from any other peer; the replica's listener (`super::accept`) calls them, then the TLS
//! handshake.
//!
//! Invariants: a header is read only from a peer in `LEASEHOLD_TRUSTED_PROXIES`, and from such
//! a peer it is required: a connection from a trusted proxy without a valid header is closed
//! (a misconfigured balancer fails loudly instead of lumping every client into its own rate
//! bucket). Any other peer is its own client and its bytes go to HTTP untouched, so a PROXY
//! line from it is never believed: it is answered with the contract's `400` error JSON and the
//! connection closed, as is a trusted proxy's malformed header (issue 18, row 10). A slow
//! handshake never holds up the accepting of other connections.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;

use crate::wire::{ErrorBody, ErrorDetail};

/// How long a trusted proxy has to send its header once connected.
const HEADER_TIMEOUT: Duration = Duration::from_secs(5);

const V1_PREFIX: &[u8] = b"PROXY ";
/// The longest v1 line, CRLF included.
const V1_MAX: usize = 107;
const V2_SIGNATURE: &[u8; 12] = b"\r\n\r\n\0\r\nQUIT\n";

/// What a complete header says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Header {
    /// The proxy carries a connection from this client.
    Proxied(SocketAddr),
    /// The proxy speaks for itself (v2 LOCAL, v1 UNKNOWN, a non-IP family): a health check.
    Local,
}

/// Parse a PROXY header at the start of `buf`.
///
/// `Ok(None)`: `buf` is a valid beginning, read more. `Ok(Some((header, n)))`: the header is
/// the first `n` bytes; what follows is the proxied stream.
///
/// # Errors
/// `buf` does not start with a valid v1 or v2 header; the message says why.
pub fn parse(buf: &[u8]) -> Result<Option<(Header, usize)>, &'static str> {
    if starts_like(buf, V2_SIGNATURE) {
        parse_v2(buf)
    } else if starts_like(buf, V1_PREFIX) {
        parse_v1(buf)
    } else {
        Err("no PROXY protocol header")
    }
}

/// `buf` and `prefix` agree on their common length.
fn starts_like(buf: &[u8], prefix: &[u8]) -> bool {
    let n = buf.len().min(prefix.len());
    buf[..n] == prefix[..n]
}

fn parse_v1(buf: &[u8]) -> Result<Option<(Header, usize)>, &'static str> {
    let window = &buf[..buf.len().min(V1_MAX)];
    let Some(newline) = window.iter().position(|&b| b == b'\n') else {
        return if buf.len() >= V1_MAX {
            Err("v1 header longer than 107 bytes")
        } else {
            Ok(None)
        };
    };
    if newline == 0 || window[newline - 1] != b'\r' {
        return Err("v1 header does not end in CRLF");
    }
    let end = newline - 1;
    let line =
        std::str::from_utf8(&buf[V1_PREFIX.len()..end]).map_err(|_| "v1 header not ASCII")?;
    let fields: Vec<&str> = line.split(' ').collect();
    let consumed = end + 2;
    match fields.as_slice() {
        ["UNKNOWN", ..] => Ok(Some((Header::Local, consumed))),
        [family @ ("TCP4" | "TCP6"), src, dst, src_port, dst_port] => {
            let v4 = *family == "TCP4";
            let src = v1_address(src, v4)?;
            v1_address(dst, v4)?;
            let src_port = v1_port(src_port)?;
            v1_port(dst_port)?;
            Ok(Some((
                Header::Proxied(SocketAddr::new(src, src_port)),
                consumed,
            )))
        }
        _ => Err("v1 header is not TCP4, TCP6 or UNKNOWN with four fields"),
    }
}

fn v1_address(s: &str, v4: bool) -> Result<IpAddr, &'static str> {
    if v4 {
        s.parse::<Ipv4Addr>().map(IpAddr::V4)
    } else {
        s.parse::<Ipv6Addr>().map(IpAddr::V6)
    }
    .map_err(|_| "v1 address does not match its family")
}

fn v1_port(s: &str) -> Result<u16, &'static str> {
    if s.is_empty() || s.len() > 5 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err("v1 port is not a decimal number");
    }
    s.parse().map_err(|_| "v1 port out of range")
}

fn parse_v2(buf: &[u8]) -> Result<Option<(Header, usize)>, &'static str> {
    if buf.len() < 16 {
        return Ok(None);
    }
    let (version, command) = (buf[12] >> 4, buf[12] & 0x0f);
    if version != 2 {
        return Err("v2 header of an unknown version");
    }
    let family = buf[13];
    let len = usize::from(u16::from_be_bytes([buf[14], buf[15]]));
    let total = 16 + len;
    if buf.len() < total {
        return Ok(None);
    }
    let addresses = &buf[16..total];
    let header = match command {
        0x0 => Header::Local,
        0x1 => match family {
            // TCP over IPv4: source, destination, source port, destination port.
            0x11 => {
                let a: &[u8; 12] = addresses
                    .get(..12)
                    .and_then(|a| a.try_into().ok())
                    .ok_or("v2 IPv4 addresses truncated")?;
                let ip = Ipv4Addr::new(a[0], a[1], a[2], a[3]);
                Header::Proxied(SocketAddr::new(ip.into(), u16::from_be_bytes([a[8], a[9]])))
            }
            // TCP over IPv6.
            0x21 => {
                let a: &[u8; 36] = addresses
                    .get(..36)
                    .and_then(|a| a.try_into().ok())
                    .ok_or("v2 IPv6 addresses truncated")?;
                let mut ip = [0u8; 16];
                ip.copy_from_slice(&a[..16]);
                Header::Proxied(SocketAddr::new(
                    Ipv6Addr::from(ip).into(),
                    u16::from_be_bytes([a[32], a[33]]),
                ))
            }
            // Unspecified or a Unix socket: no client address to take.
            0x00 | 0x31 => Header::Local,
            0x12 | 0x22 | 0x32 => return Err("v2 header for a datagram connection"),
            _ => return Err("v2 header of an unknown address family"),
        },
        _ => return Err("v2 header with an unknown command"),
    };
    Ok(Some((header, total)))
}

/// Why a trusted proxy's connection was closed before HTTP.
enum Refused {
    /// It closed without sending a byte: a plain TCP health check.
    Silent,
    Bad(String),
}

/// Read the header off `tcp`; returns it with the bytes read past it.
async fn read_header(tcp: &mut TcpStream) -> Result<(Header, Vec<u8>), Refused> {
    let mut buf = Vec::with_capacity(256);
    loop {
        match parse(&buf) {
            Ok(Some((header, n))) => {
                buf.drain(..n);
                return Ok((header, buf));
            }
            Ok(None) => {}
            Err(why) => return Err(Refused::Bad(why.to_owned())),
        }
        buf.reserve(512);
        match tcp.read_buf(&mut buf).await {
            Ok(0) if buf.is_empty() => return Err(Refused::Silent),
            Ok(0) => return Err(Refused::Bad("closed inside the header".to_owned())),
            Ok(_) => {}
            Err(e) => return Err(Refused::Bad(e.to_string())),
        }
    }
}

/// A connection from a trusted proxy, once its header is read: the stream and the client.
pub(super) async fn handshake(
    mut tcp: TcpStream,
    peer: SocketAddr,
) -> Option<(ClientStream, SocketAddr)> {
    let why = match tokio::time::timeout(HEADER_TIMEOUT, read_header(&mut tcp)).await {
        Ok(Ok((header, head))) => {
            let client = match header {
                Header::Proxied(client) => client,
                Header::Local => peer,
            };
            return Some((ClientStream { head, at: 0, tcp }, client));
        }
        Ok(Err(Refused::Silent)) => return None,
        Ok(Err(Refused::Bad(why))) => why,
        Err(_) => format!("no header within {HEADER_TIMEOUT:?}"),
    };
    tracing::warn!(%peer, %why, "closed a connection from a trusted proxy: bad PROXY header");
    refuse(tcp, &format!("malformed PROXY protocol header: {why}")).await;
    None
}

/// A connection from a peer that is not a trusted proxy: its first bytes are looked at before
/// HTTP sees them. If they begin a PROXY header, the peer is answered `400` with the
/// contract's error JSON and the connection closed; anything else (and a peer that sends
/// nothing within [`HEADER_TIMEOUT`]) goes to HTTP with the bytes read, untouched.
pub(super) async fn sniff(
    mut tcp: TcpStream,
    peer: SocketAddr,
) -> Option<(ClientStream, SocketAddr)> {
    let mut head = Vec::with_capacity(1024);
    let deadline = tokio::time::Instant::now() + HEADER_TIMEOUT;
    loop {
        let v1 = starts_like(&head, V1_PREFIX);
        let v2 = starts_like(&head, V2_SIGNATURE);
        if (v1 && head.len() >= V1_PREFIX.len()) || (v2 && head.len() >= V2_SIGNATURE.len()) {
            tracing::warn!(%peer, "refused a PROXY header from a peer that is not a trusted proxy");
            refuse(
                tcp,
                "a PROXY protocol header is accepted only from a trusted proxy \
                 (LEASEHOLD_PROXY_PROTOCOL, LEASEHOLD_TRUSTED_PROXIES)",
            )
            .await;
            return None;
        }
        if !v1 && !v2 {
            break;
        }
        match tokio::time::timeout_at(deadline, tcp.read_buf(&mut head)).await {
            Ok(Ok(n)) if n > 0 => {}
            // Closed, failed or quiet: HTTP deals with it as it would have.
            _ => break,
        }
    }
    Some((ClientStream { head, at: 0, tcp }, peer))
}

/// Answer a connection that never reaches HTTP with the contract's `400` error JSON, then
/// close it (reading what the peer still sends for a moment, so the close does not reset the
/// connection before the answer is read).
async fn refuse(mut tcp: TcpStream, message: &str) {
    let body = serde_json::to_vec(&ErrorBody {
        error: ErrorDetail {
            code: "bad_request".to_owned(),
            message: message.to_owned(),
            state: None,
            min_version: None,
        },
    })
    .unwrap_or_default();
    let mut answer = format!(
        "HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    answer.extend_from_slice(&body);
    let drain = async {
        tcp.write_all(&answer).await?;
        tcp.shutdown().await?;
        let mut sink = [0u8; 4096];
        let mut left = 64 * 1024;
        while left > 0 {
            match tcp.read(&mut sink).await? {
                0 => break,
                n => left -= n.min(left),
            }
        }
        io::Result::Ok(())
    };
    let _ = tokio::time::timeout(Duration::from_secs(1), drain).await;
}

/// An accepted connection: what was read with the PROXY header but belongs to HTTP, then the
/// socket.
pub struct ClientStream {
    head: Vec<u8>,
    at: usize,
    tcp: TcpStream,
}

impl ClientStream {
    /// A connection no header was read from: HTTP (or TLS) reads the socket from its start.
    pub(super) fn untouched(tcp: TcpStream) -> Self {
        Self {
            head: Vec::new(),
            at: 0,
            tcp,
        }
    }
}

impl AsyncRead for ClientStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.at < this.head.len() {
            let n = buf.remaining().min(this.head.len() - this.at);
            buf.put_slice(&this.head[this.at..this.at + n]);
            this.at += n;
            if this.at == this.head.len() {
                this.head = Vec::new();
                this.at = 0;
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.tcp).poll_read(cx, buf)
    }
}

impl AsyncWrite for ClientStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().tcp).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().tcp).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    fn v2(command: u8, family: u8, addresses: &[u8]) -> Vec<u8> {
        let mut h = V2_SIGNATURE.to_vec();
        h.push(0x20 | command);
        h.push(family);
        h.extend_from_slice(&u16::try_from(addresses.len()).unwrap().to_be_bytes());
        h.extend_from_slice(addresses);
        h
    }

    fn v2_tcp4(src: [u8; 4], src_port: u16) -> Vec<u8> {
        let mut a = Vec::new();
        a.extend_from_slice(&src);
        a.extend_from_slice(&[10, 0, 0, 1]);
        a.extend_from_slice(&src_port.to_be_bytes());
        a.extend_from_slice(&8080u16.to_be_bytes());
        v2(1, 0x11, &a)
    }

    #[test]
    fn v1_names_the_client_and_leaves_what_follows() {
        let buf = b"PROXY TCP4 192.0.2.7 10.0.0.1 51234 8080\r\nGET / HTTP/1.1\r\n";
        let (header, n) = parse(buf).unwrap().unwrap();
        assert_eq!(header, Header::Proxied(addr("192.0.2.7:51234")));
        assert_eq!(&buf[n..], b"GET / HTTP/1.1\r\n");

        let buf = b"PROXY TCP6 2001:db8::7 2001:db8::1 443 8080\r\n";
        assert_eq!(
            parse(buf).unwrap(),
            Some((Header::Proxied(addr("[2001:db8::7]:443")), buf.len()))
        );
        let buf = b"PROXY UNKNOWN ffff:f...f:ffff ffff:f...f:ffff 65535 65535\r\n";
        assert_eq!(parse(buf).unwrap(), Some((Header::Local, buf.len())));
        assert_eq!(
            parse(b"PROXY UNKNOWN\r\n").unwrap(),
            Some((Header::Local, 15))
        );
    }

    #[test]
    fn v2_names_the_client_skips_tlvs_and_leaves_what_follows() {
        let mut buf = v2_tcp4([192, 0, 2, 7], 51234);
        let header_len = buf.len();
        buf.extend_from_slice(b"GET /");
        assert_eq!(
            parse(&buf).unwrap(),
            Some((Header::Proxied(addr("192.0.2.7:51234")), header_len))
        );

        let mut a = Vec::new();
        a.extend_from_slice(&"2001:db8::7".parse::<Ipv6Addr>().unwrap().octets());
        a.extend_from_slice(&Ipv6Addr::LOCALHOST.octets());
        a.extend_from_slice(&443u16.to_be_bytes());
        a.extend_from_slice(&8080u16.to_be_bytes());
        a.extend_from_slice(&[0x04, 0x00, 0x01, 0x00]); // a NOOP TLV after the addresses
        let buf = v2(1, 0x21, &a);
        assert_eq!(
            parse(&buf).unwrap(),
            Some((Header::Proxied(addr("[2001:db8::7]:443")), buf.len()))
        );
    }

    #[test]
    fn v2_local_and_unspecified_speak_for_the_proxy() {
        let buf = v2(0, 0x00, &[]);
        assert_eq!(parse(&buf).unwrap(), Some((Header::Local, 16)));
        // LOCAL ignores whatever addresses come with it.
        let mut local = v2_tcp4([192, 0, 2, 7], 1);
        local[12] = 0x20;
        assert_eq!(parse(&local).unwrap(), Some((Header::Local, local.len())));
        let buf = v2(1, 0x00, &[]);
        assert_eq!(parse(&buf).unwrap(), Some((Header::Local, 16)));
    }

    #[test]
    fn every_proper_prefix_of_a_header_asks_for_more() {
        let headers = [
            b"PROXY TCP4 192.0.2.7 10.0.0.1 51234 8080\r\n".to_vec(),
            v2_tcp4([192, 0, 2, 7], 51234),
        ];
        for header in headers {
            for n in 0..header.len() {
                assert_eq!(parse(&header[..n]), Ok(None), "prefix of {n} bytes");
            }
            assert!(parse(&header).unwrap().is_some());
        }
    }

    #[test]
    fn malformed_headers_are_refused() {
        let bad: &[&[u8]] = &[
            b"GET / HTTP/1.1\r\n",
            b"proxy TCP4 192.0.2.7 10.0.0.1 1 2\r\n",
            b"PROXY TCP4 192.0.2.7 10.0.0.1 1\r\n",
            b"PROXY TCP4 192.0.2.7 10.0.0.1 1 2 3\r\n",
            b"PROXY TCP4 2001:db8::7 10.0.0.1 1 2\r\n",
            b"PROXY TCP6 192.0.2.7 2001:db8::1 1 2\r\n",
            b"PROXY TCP4 192.0.2.7 10.0.0.1 65536 2\r\n",
            b"PROXY TCP4 192.0.2.7 10.0.0.1 +80 2\r\n",
            b"PROXY TCP4  192.0.2.7 10.0.0.1 1 2\r\n",
            b"PROXY UDP4 192.0.2.7 10.0.0.1 1 2\r\n",
            b"PROXY TCP4 192.0.2.7 10.0.0.1 1 2\n",
        ];
        for buf in bad {
            assert!(
                parse(buf).is_err(),
                "accepted {:?}",
                String::from_utf8_lossy(buf)
            );
        }
        // No CRLF within 107 bytes.
        let mut long = b"PROXY TCP6 ".to_vec();
        long.resize(120, b'1');
        assert!(parse(&long).is_err());

        let mut wrong_version = v2_tcp4([192, 0, 2, 7], 1);
        wrong_version[12] = 0x11;
        let mut wrong_command = v2_tcp4([192, 0, 2, 7], 1);
        wrong_command[12] = 0x2f;
        let mut udp = v2_tcp4([192, 0, 2, 7], 1);
        udp[13] = 0x12;
        let mut unknown_family = v2_tcp4([192, 0, 2, 7], 1);
        unknown_family[13] = 0x41;
        // The declared length is too short for the family's addresses.
        let short = v2(1, 0x11, &[192, 0, 2, 7, 10, 0, 0, 1]);
        let short6 = v2(1, 0x21, &[0; 12]);
        for buf in [
            wrong_version,
            wrong_command,
            udp,
            unknown_family,
            short,
            short6,
        ] {
            assert!(parse(&buf).is_err(), "accepted {buf:?}");
        }
        let mut corrupt_signature = v2_tcp4([192, 0, 2, 7], 1);
        corrupt_signature[5] = b'X';
        assert_eq!(parse(&corrupt_signature), Err("no PROXY protocol header"));
    }
}
