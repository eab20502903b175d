//! `leasehold serve`: one replica until SIGTERM or Ctrl-C, then an ordered drain (see
//! [`crate::replica`]); SIGHUP re-reads the TLS certificate (and never stops it). Scripts and
//! tests read the bound URL from the first line it prints.

use std::time::Duration;

use anyhow::Context;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::replica;
use crate::tooling::serve_process;

/// Run a replica until SIGTERM or Ctrl-C, then drain within 10 s.
///
/// # Errors
/// The address cannot be bound or the replica cannot start.
pub async fn run(config: Config) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("binding {}", config.listen))?;
    let replica = replica::start(config, listener).await?;
    // Installed before the first line, so a SIGHUP sent once it is read never kills the process
    // (without TLS there is nothing to re-read, and SIGHUP is only logged).
    let mut hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
        .context("installing a SIGHUP handler")?;
    let certificates = replica.certificates.clone();
    tokio::spawn(async move {
        while hup.recv().await.is_some() {
            match &certificates {
                Some(c) => {
                    c.reload();
                }
                None => tracing::info!("SIGHUP: nothing to re-read (no --tls-cert)"),
            }
        }
    });
    // Scripts and tests read the bound URL from this line.
    println!("{}{}", serve_process::LISTENING, replica.url());
    let token = replica.shutdown_token();
    tokio::spawn(stop_on_signal(token));
    replica.stop_after_shutdown(Duration::from_secs(9)).await;
    Ok(())
}

async fn stop_on_signal(token: CancellationToken) {
    stop_on_signal_then(async {}).await;
    token.cancel();
}

/// Wait for SIGTERM or Ctrl-C, then run `before_stop`.
pub async fn stop_on_signal_then(before_stop: impl std::future::Future<Output = ()>) {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("SIGTERM handler");
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    tracing::info!("shutting down");
    before_stop.await;
}
