//! The replica's listener: accepts TCP connections and makes each one what HTTP reads. With the
//! PROXY protocol on, a trusted proxy's connection has its header read ([`super::proxy_protocol`]);
//! with TLS on, every connection goes through the handshake ([`super::tls`]). Each connection's
//! header and handshake run in their own task, so a slow one never holds up the accepting of
//! others.
//!
//! Invariant: the address a connection carries is its client's: the PROXY header's source for
//! a trusted proxy's connection, the TCP peer for any other.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::task::JoinSet;

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
    handshakes: JoinSet<Option<(Conn, SocketAddr)>>,
}

impl ClientListener {
    pub fn new(
        tcp: TcpListener,
        proxies: Option<TrustedProxies>,
        tls: Option<tokio_rustls::TlsAcceptor>,
    ) -> Self {
        Self {
            tcp,
            proxies,
            tls,
            handshakes: JoinSet::new(),
        }
    }
}

impl axum::serve::Listener for ClientListener {
    type Io = Conn;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Conn, SocketAddr) {
        loop {
            tokio::select! {
                accepted = self.tcp.accept() => match accepted {
                    Ok((tcp, peer)) => {
                        let proxied = self.proxies.as_ref().is_some_and(|p| p.contains(peer.ip()));
                        let tls = self.tls.clone();
                        if proxied {
                            self.handshakes.spawn(async move {
                                let (stream, client) = handshake(tcp, peer).await?;
                                Some((secure(tls, stream).await?, client))
                            });
                        } else if let Some(tls) = tls {
                            let stream = ClientStream::untouched(tcp);
                            self.handshakes.spawn(async move {
                                Some((tls::handshake(tls, stream).await?, peer))
                            });
                        } else {
                            self.handshakes.spawn(async move {
                                let (stream, client) = sniff(tcp, peer).await?;
                                Some((Conn::Plain(stream), client))
                            });
                        }
                    }
                    Err(e) => accept_failed(e).await,
                },
                Some(done) = self.handshakes.join_next(), if !self.handshakes.is_empty() => {
                    if let Ok(Some(connection)) = done {
                        return connection;
                    }
                }
            }
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.tcp.local_addr()
    }
}

/// The stream as HTTP reads it: through a TLS handshake when `tls` is given.
async fn secure(tls: Option<tokio_rustls::TlsAcceptor>, stream: ClientStream) -> Option<Conn> {
    match tls {
        Some(tls) => tls::handshake(tls, stream).await,
        None => Some(Conn::Plain(stream)),
    }
}

/// As axum does for its own listener: a connection that died in the queue is skipped; anything
/// else (out of file descriptors) is logged and retried after a second.
async fn accept_failed(e: io::Error) {
    use io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    if matches!(
        e.kind(),
        ConnectionRefused | ConnectionAborted | ConnectionReset
    ) {
        return;
    }
    tracing::error!(error = %e, "accept failed");
    tokio::time::sleep(Duration::from_secs(1)).await;
}
