//! The replica's HTTP/1.1 connections: the accept loop, one task per connection, and the
//! graceful stop (axum's `serve` does the same, without a way to set up hyper's connection).
//!
//! A parked long-poll is a connection like any other, and 10,000 of them are held at once, so
//! what one costs is kept small: hyper's HTTP/1.1 connection is served directly (no protocol
//! sniffing ahead of it: HTTP/2 is not served), so its first read gets the whole request and
//! its read buffer stays at hyper's minimum (8 KB, where a first read of only the sniffed
//! 24 bytes had it grow to 16 KB).
//!
//! Each connection runs under [`super::limits`]: a request head is at most [`MAX_HEAD`] bytes
//! (hyper answers `431` past it), and its stream closes it at the header, idle and write
//! deadlines.
//!
//! A connection hyper is done with is closed lingering, as Apache and nginx close theirs
//! ([`linger`]): hyper answers a request whose body it has not read (an upload refused `413`
//! while its client still sends) and stops reading; closing the socket then, with the
//! client's bytes unread, resets the connection, and a client still writing sees the reset
//! instead of its answer (issue 52 row 4). So the connection is taken back from hyper without
//! its shutdown, its write side shut (the answer, then FIN), and what still comes read and
//! dropped until the client closes, for at most [`LINGER`] and [`LINGER_BYTES`].
//!
//! Invariant: once `shutdown` fires no connection is accepted, every open connection finishes
//! the request it is serving (long-polls answer at once: they watch the same token) and then
//! closes, and [`serve`] returns when the last one has.

use std::net::SocketAddr;

use axum::extract::ConnectInfo;
use axum::Router;
use hyper::body::Incoming;
use hyper::Request;
use hyper_util::rt::TokioIo;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::accept::ClientListener;
use super::limits::{AnswerBody, Deadlines, Guarded, Phase};
use crate::api::transfer::TransferSlot;

/// The largest request head (request line and headers) a connection may send.
pub const MAX_HEAD: usize = 64 * 1024;

/// The most hyper buffers of a connection's reads, and of its writes.
pub const MAX_BUF: usize = 256 * 1024;

/// How long a closing connection reads on, waiting for its client to close.
pub const LINGER: std::time::Duration = std::time::Duration::from_secs(2);

/// How much a closing connection reads on (and drops) at most.
pub const LINGER_BYTES: usize = 16 * 1024 * 1024;

/// Serve `app` on every connection `listener` accepts until `shutdown` fires, then let the
/// open connections finish and return. Handlers see the client's address (the listener's,
/// from a PROXY header or the TCP peer) as `ConnectInfo<SocketAddr>`.
pub async fn serve(
    mut listener: ClientListener,
    app: Router,
    deadlines: Deadlines,
    shutdown: CancellationToken,
) {
    let mut http = hyper::server::conn::http1::Builder::new();
    http.max_header_size(MAX_HEAD);
    // What hyper buffers of one connection each way (its default is 400 KiB): with the blob
    // stores' chunks, an artifact transfer holds at most a mebibyte (docs/security.md).
    http.max_buf_size(MAX_BUF);
    let connections = TaskTracker::new();
    loop {
        let (io, client, slot) = tokio::select! {
            accepted = listener.accept() => accepted,
            () = shutdown.cancelled() => break,
        };
        let app = app.clone();
        let phase = Phase::new(deadlines);
        let transfer = TransferSlot::default();
        let io = Guarded::new(io, phase.clone(), transfer.clone(), slot);
        let service = hyper::service::service_fn(move |mut request: Request<Incoming>| {
            let answering = phase.answering();
            request
                .extensions_mut()
                .insert(ConnectInfo::<SocketAddr>(client));
            request.extensions_mut().insert(transfer.clone());
            // A router is always ready: no `poll_ready` needed before the call.
            let answer = tower_service::Service::call(&mut app.clone(), request);
            // Boxed: hyper hands a connection back (without its shutdown) only to a service
            // whose future is `Unpin`.
            Box::pin(async move {
                let answer = answer.await?;
                Ok::<_, std::convert::Infallible>(
                    answer.map(|body| axum::body::Body::new(AnswerBody::new(body, answering))),
                )
            })
        });
        let mut connection = http.serve_connection(TokioIo::new(io), service);
        let shutdown = shutdown.clone();
        connections.spawn(async move {
            let served = std::future::poll_fn(|cx| connection.poll_without_shutdown(cx));
            let result = tokio::select! {
                result = served => result,
                () = shutdown.cancelled() => {
                    std::pin::Pin::new(&mut connection).graceful_shutdown();
                    std::future::poll_fn(|cx| connection.poll_without_shutdown(cx)).await
                }
            };
            match result {
                Ok(()) => linger(connection.into_parts().io.into_inner()).await,
                Err(e) => tracing::trace!(error = %e, "connection ended with an error"),
            }
        });
    }
    drop(listener);
    connections.close();
    connections.wait().await;
}

/// Close `io`, which hyper is done with, lingering: shut its write side (what is buffered goes
/// out, then FIN), then read and drop what the client still sends until it closes, an error,
/// [`LINGER`] or [`LINGER_BYTES`], whichever comes first. A client that closed first costs one
/// small read and no allocation; the buffer is allocated only when bytes still come.
async fn linger<S>(mut io: S)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    if io.shutdown().await.is_err() {
        return;
    }
    let drain = async {
        // Most clients have closed already: a small first read says so without allocating
        // (10,000 long-polls closing at once would otherwise take a buffer each).
        let mut probe = [0u8; 64];
        let mut read = match io.read(&mut probe).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        let mut buf = vec![0u8; 16 * 1024];
        while read < LINGER_BYTES {
            match io.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => read += n,
            }
        }
    };
    let _ = tokio::time::timeout(LINGER, drain).await;
}
