//! `leasehold serve`: one replica until SIGTERM or Ctrl-C, then an ordered drain (see
//! [`crate::replica`]); SIGHUP re-reads the TLS certificate (and never stops it). Scripts and
//! tests read the bound URL from the first line it prints. A replica started as a child by the
//! benchmark, the drill or a test also drains once that parent is gone
//! ([`serve_process::PARENT_PID`]).

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
pub async fn run(mut config: Config) -> anyhow::Result<()> {
    config.apply_renamed(|name| std::env::var(name).ok());
    // A transfer's chunk buffers (256 KiB) are mapped apart and unmapped when freed.
    leasehold_alloc::map_apart_from(128 * 1024);
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
    if let Some(parent) = std::env::var(serve_process::PARENT_PID)
        .ok()
        .and_then(|p| p.parse::<i32>().ok())
    {
        tokio::spawn(stop_when_orphaned(parent, token.clone()));
    }
    tokio::spawn(stop_on_signal(token));
    replica.stop_after_shutdown(Duration::from_secs(9)).await;
    Ok(())
}

/// How often a child replica looks whether its parent is still there.
const PARENT_CHECK: Duration = Duration::from_millis(500);

/// Drain once this process's parent is no longer `parent` (it exited, and the process was
/// handed to an ancestor or to init).
async fn stop_when_orphaned(parent: i32, token: CancellationToken) {
    let mut tick = tokio::time::interval(PARENT_CHECK);
    loop {
        tokio::select! {
            () = token.cancelled() => return,
            _ = tick.tick() => {}
        }
        if nix::unistd::getppid().as_raw() != parent {
            tracing::warn!(
                parent,
                "the process that started this replica is gone; shutting down"
            );
            token.cancel();
            return;
        }
    }
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
