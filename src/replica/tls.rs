//! HTTPS on the replica itself (`--tls-cert`, `--tls-key`): the stream a connection becomes
//! once its TLS handshake is done. The certificate it presents, and its reload on SIGHUP, are
//! [`crate::tls::certificates`]'.
//!
//! Invariant: a handshake runs in its own task under [`HANDSHAKE_TIMEOUT`], so a slow client
//! never holds up the accepting of others; a failed one closes only its own connection.

use std::io;
use std::pin::Pin as Pinned;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_rustls::TlsAcceptor;

use super::proxy_protocol::ClientStream;

/// How long a client has to finish its TLS handshake once connected.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// An accepted connection, as HTTP reads it: plain, or TLS over the client stream.
pub enum Conn {
    Plain(ClientStream),
    Tls(Box<tokio_rustls::server::TlsStream<ClientStream>>),
}

/// Finish the TLS handshake of an accepted stream; `None` (logged at debug: scanners and
/// plain-HTTP clients do this all day) when it fails or takes longer than
/// [`HANDSHAKE_TIMEOUT`].
pub async fn handshake(acceptor: TlsAcceptor, stream: ClientStream) -> Option<Conn> {
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
        Ok(Ok(tls)) => Some(Conn::Tls(Box::new(tls))),
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "TLS handshake failed");
            None
        }
        Err(_) => {
            tracing::debug!("TLS handshake timed out");
            None
        }
    }
}

impl AsyncRead for Conn {
    fn poll_read(
        self: Pinned<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pinned::new(s).poll_read(cx, buf),
            Conn::Tls(s) => Pinned::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        self: Pinned<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Conn::Plain(s) => Pinned::new(s).poll_write(cx, buf),
            Conn::Tls(s) => Pinned::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pinned<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Conn::Plain(s) => Pinned::new(s).poll_write_vectored(cx, bufs),
            Conn::Tls(s) => Pinned::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Conn::Plain(s) => s.is_write_vectored(),
            Conn::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pinned<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pinned::new(s).poll_flush(cx),
            Conn::Tls(s) => Pinned::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pinned<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pinned::new(s).poll_shutdown(cx),
            Conn::Tls(s) => Pinned::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}
