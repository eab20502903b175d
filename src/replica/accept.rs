//! The replica's listener: accepts TCP connections and makes each one what HTTP reads. With the
//! PROXY protocol on, a trusted proxy's connection has its header read ([`super::proxy_protocol`]);
//! with TLS on, every connection goes through the handshake ([`super::tls`]). Each connection's
//! header and handshake run in their own task, so a slow one never holds up the accepting of
//! others.
//!
//! Invariants: the address a connection carries is its client's: the PROXY header's source for
//! a trusted proxy's connection, the TCP peer for any other. Every connection holds a
//! [`Slot`] from its accept on; past `LEASEHOLD_MAX_CONNECTIONS` a new one is closed at once.
//! A failed accept (out of file descriptors) backs off without holding up the handshakes
//! under way, and never touches the connections already served.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::task::JoinSet;

use super::limits::{Slot, Slots};
use super::proxy_protocol::{handshake, sniff, ClientStream};
use super::tls::{self, Conn};
use crate::config::TrustedProxies;

/// The replica's listener: accepts TCP connections and, with the PROXY protocol on, reads the
/// header of trusted proxies' connections, then, with TLS on, runs the TLS handshake (each
/// connection's header and handshake in its own task). Its address for a connection is the
/// client's: the PROXY header's source, or the TCP peer.
pub struct ClientListener {
    tcp: TcpListener,
    /// The peers whose header is read, when the PROXY protocol is on.
    proxies: Option<TrustedProxies>,
    /// The TLS handshake every connection goes through, when the replica serves HTTPS.
    tls: Option<tokio_rustls::TlsAcceptor>,
    handshakes: JoinSet<Option<(Conn, SocketAddr, Slot)>>,
    slots: Slots,
    /// After a failed accept: when to try again.
    backoff: Option<Pin<Box<tokio::time::Sleep>>>,
    /// The last back-off's length; zero once an accept succeeds.
    last_wait: Duration,
}

impl ClientListener {
    pub fn new(
        tcp: TcpListener,
        proxies: Option<TrustedProxies>,
        tls: Option<tokio_rustls::TlsAcceptor>,
        slots: Slots,
    ) -> Self {
        Self {
            tcp,
            proxies,
            tls,
            handshakes: JoinSet::new(),
            slots,
            backoff: None,
            last_wait: Duration::ZERO,
        }
    }

    /// The next connection ready for HTTP, its client and its slot.
    pub async fn accept(&mut self) -> (Conn, SocketAddr, Slot) {
        loop {
            let backing_off = self.backoff.is_some();
            tokio::select! {
                accepted = self.tcp.accept(), if !backing_off => match accepted {
                    Ok((tcp, peer)) => {
                        let Some(slot) = self.slots.take() else {
                            tracing::debug!(%peer, "closed a connection: LEASEHOLD_MAX_CONNECTIONS are open");
                            drop(tcp);
                            continue;
                        };
                        self.last_wait = Duration::ZERO;
                        let proxied = self.proxies.as_ref().is_some_and(|p| p.contains(peer.ip()));
                        let tls = self.tls.clone();
                        if proxied {
                            self.handshakes.spawn(async move {
                                let (stream, client) = handshake(tcp, peer).await?;
                                Some((secure(tls, stream).await?, client, slot))
                            });
                        } else if let Some(tls) = tls {
                            let stream = ClientStream::untouched(tcp);
                            self.handshakes.spawn(async move {
                                Some((tls::handshake(tls, stream).await?, peer, slot))
                            });
                        } else {
                            self.handshakes.spawn(async move {
                                let (stream, client) = sniff(tcp, peer).await?;
                                Some((Conn::Plain(stream), client, slot))
                            });
                        }
                    }
                    Err(e) => {
                        if accept_failed(&e) {
                            // 10 ms, doubling to a second while accepts keep failing.
                            self.last_wait = (self.last_wait * 2)
                                .clamp(Duration::from_millis(10), Duration::from_secs(1));
                            self.backoff = Some(Box::pin(tokio::time::sleep(self.last_wait)));
                        }
                    }
                },
                () = wait(&mut self.backoff), if backing_off => self.backoff = None,
                Some(done) = self.handshakes.join_next(), if !self.handshakes.is_empty() => {
                    if let Ok(Some(connection)) = done {
                        return connection;
                    }
                }
            }
        }
    }
}

/// The stream as HTTP reads it: through a TLS handshake when `tls` is given.
async fn secure(tls: Option<tokio_rustls::TlsAcceptor>, stream: ClientStream) -> Option<Conn> {
    match tls {
        Some(tls) => tls::handshake(tls, stream).await,
        None => Some(Conn::Plain(stream)),
    }
}

/// A back-off's end (never, without one).
async fn wait(backoff: &mut Option<Pin<Box<tokio::time::Sleep>>>) {
    match backoff {
        Some(sleep) => sleep.as_mut().await,
        None => std::future::pending().await,
    }
}

/// As axum does for its own listener: a connection that died in the queue is skipped
/// (`false`); anything else (out of file descriptors) is logged, and the accepting backs off
/// (`true`) while the connections already open go on being served.
fn accept_failed(e: &io::Error) -> bool {
    use io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    if matches!(
        e.kind(),
        ConnectionRefused | ConnectionAborted | ConnectionReset
    ) {
        return false;
    }
    tracing::error!(error = %e, "accept failed; backing off");
    true
}
