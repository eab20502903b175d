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
            async move {
                let answer = answer.await?;
                Ok::<_, std::convert::Infallible>(
                    answer.map(|body| axum::body::Body::new(AnswerBody::new(body, answering))),
                )
            }
        });
        let connection = http.serve_connection(TokioIo::new(io), service);
        let shutdown = shutdown.clone();
        connections.spawn(async move {
            let mut connection = std::pin::pin!(connection);
            let result = tokio::select! {
                result = connection.as_mut() => result,
                () = shutdown.cancelled() => {
                    connection.as_mut().graceful_shutdown();
                    connection.await
                }
            };
            if let Err(e) = result {
                tracing::trace!(error = %e, "connection ended with an error");
            }
        });
    }
    drop(listener);
    connections.close();
    connections.wait().await;
}
