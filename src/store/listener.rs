//! The replica's one dedicated LISTEN connection (never from the pool).
//!
//! It forwards every notification on channel `leasehold`, reports when it is up or down, and
//! reconnects with capped exponential backoff. Notifications sent while it was down are gone,
//! so on every (re)connect the hub makes every waiter re-check.
//!
//! It cannot wedge: connecting and `LISTEN` each have a deadline, and while it is up a
//! `SELECT 1` every [`PING_EVERY`] must answer within [`PATIENCE`], so a connection that went
//! silent (a server that stopped answering, a network path that died without a reset) is
//! reported down and replaced within seconds rather than looking up forever.

use std::time::Duration;

use futures_util::StreamExt;
use tokio::sync::mpsc;
use tokio_postgres::{AsyncMessage, NoTls, Socket};
use tokio_util::sync::CancellationToken;

/// What the listener reports to the hub.
#[derive(Debug)]
pub enum ListenerEvent {
    /// LISTEN is in place (first connect or reconnect).
    Up,
    /// The connection was lost.
    Down,
    /// A notification's payload.
    Notification(String),
}

pub const CHANNEL: &str = "leasehold";

/// How long connecting, `LISTEN` and each liveness ping may take.
pub const PATIENCE: Duration = Duration::from_secs(5);

/// How often the LISTEN connection proves it still answers.
pub const PING_EVERY: Duration = Duration::from_secs(10);

/// Run until `cancel` fires.
pub async fn run(
    database_url: String,
    events: mpsc::UnboundedSender<ListenerEvent>,
    cancel: CancellationToken,
) {
    let mut backoff = Duration::from_millis(50);
    while !cancel.is_cancelled() {
        let connected =
            tokio::time::timeout(PATIENCE, connect_as(&database_url, "leasehold-listen")).await;
        match connected {
            Err(_) => tracing::warn!("LISTEN connect did not finish in time; retrying"),
            Ok(Err(e)) => tracing::debug!(error = %e, "LISTEN connect failed"),
            Ok(Ok((client, mut connection))) => {
                let (tx, mut rx) = mpsc::unbounded_channel::<String>();
                let driver = tokio::spawn(async move {
                    let mut messages =
                        futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
                    while let Some(message) = messages.next().await {
                        match message {
                            Ok(AsyncMessage::Notification(n)) => {
                                if tx.send(n.payload().to_owned()).is_err() {
                                    break;
                                }
                            }
                            Ok(_) => {}
                            Err(e) => {
                                tracing::warn!(error = %e, "LISTEN connection failed");
                                break;
                            }
                        }
                    }
                });
                let listen = format!("LISTEN {CHANNEL}");
                let listening = tokio::time::timeout(PATIENCE, client.batch_execute(&listen)).await;
                if matches!(listening, Ok(Ok(()))) {
                    backoff = Duration::from_millis(50);
                    let _ = events.send(ListenerEvent::Up);
                    let mut ping = tokio::time::interval(PING_EVERY);
                    ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                    ping.tick().await;
                    loop {
                        tokio::select! {
                            _ = cancel.cancelled() => break,
                            payload = rx.recv() => match payload {
                                Some(p) => { let _ = events.send(ListenerEvent::Notification(p)); }
                                None => break,
                            },
                            _ = ping.tick() => {
                                let answered = tokio::time::timeout(PATIENCE, client.simple_query("SELECT 1")).await;
                                if !matches!(answered, Ok(Ok(_))) {
                                    tracing::warn!("the LISTEN connection stopped answering; reconnecting");
                                    break;
                                }
                            }
                        }
                    }
                    let _ = events.send(ListenerEvent::Down);
                }
                drop(client);
                driver.abort();
            }
        }
        tokio::select! {
            _ = cancel.cancelled() => break,
            _ = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(Duration::from_secs(2));
    }
}

/// A dedicated (non-pool) connection, named in `pg_stat_activity`.
///
/// # Errors
/// The URL does not parse or the database cannot be reached.
pub async fn connect_as(
    database_url: &str,
    application_name: &str,
) -> Result<
    (
        tokio_postgres::Client,
        tokio_postgres::Connection<Socket, tokio_postgres::tls::NoTlsStream>,
    ),
    tokio_postgres::Error,
> {
    let mut config: tokio_postgres::Config = database_url.parse()?;
    config.application_name(application_name);
    // Per host: with several hosts a dead one must leave time for the next.
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(std::time::Duration::from_secs(2));
    }
    config.connect(NoTls).await
}
