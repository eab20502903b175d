//! One replica: store, hub, background loops and the HTTP server, with an ordered shutdown.
//!
//! Start order: migrate (under an advisory lock), pool, notifier, LISTEN, sweeper, re-check
//! loop, HTTP. Stop order: answer long-polls and stop accepting, let in-flight requests finish,
//! then stop the background loops, all under one deadline. Connections are accepted by
//! [`accept::ClientListener`], which learns each one's client from a trusted load
//! balancer's PROXY header when `LEASEHOLD_PROXY_PROTOCOL` is on, and, with `--tls-cert`, go
//! through a TLS handshake ([`tls`]) before HTTP ([`connections`]).

mod accept;
mod connections;
mod limits;
mod proxy_protocol;
pub mod tls;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rand::RngCore;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::api::{self, AppState};
use crate::config::Config;
use crate::hub::{sweeper, Hub, Notifier};
use crate::store::{listener, migrate, Deadlines, Store};
use crate::telemetry::metrics::{Metrics, StateLabel};
use crate::tls::certificates::Certificates;

/// A running replica.
pub struct Replica {
    pub addr: SocketAddr,
    /// The certificate it serves HTTPS with, when it does.
    pub certificates: Option<Arc<Certificates>>,
    pub hub: Arc<Hub>,
    shutdown: CancellationToken,
    server: tokio::task::JoinHandle<()>,
}

/// Apply migrations, retrying while the database is still coming up (up to `patience`).
///
/// # Errors
/// The database stayed unreachable, or a migration failed.
pub async fn migrate_with_patience(database_url: &str, patience: Duration) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + patience;
    loop {
        match migrate::run(database_url).await {
            Ok(()) => return Ok(()),
            Err(e) if tokio::time::Instant::now() < deadline => {
                tracing::warn!(error = %e, "migration failed; retrying");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => return Err(e),
        }
    }
}

/// Start a replica on `listener` (bind port 0 in tests).
///
/// # Errors
/// Migrations failed or the configuration is invalid.
pub async fn start(config: Config, listener: TcpListener) -> anyhow::Result<Replica> {
    anyhow::ensure!(
        !config.proxy_protocol || !config.trusted_proxies.is_empty(),
        "LEASEHOLD_PROXY_PROTOCOL is on but LEASEHOLD_TRUSTED_PROXIES is empty: \
         name the load balancers' addresses that send the PROXY header"
    );
    let mut config = config;
    config.public_url = config
        .public_url
        .iter()
        .map(|u| u.trim().to_owned())
        .filter(|u| !u.is_empty())
        .collect();
    if let Some(bad) = config
        .public_url
        .iter()
        .find(|u| !crate::wire::input::is_web(u))
    {
        anyhow::bail!(
            "LEASEHOLD_PUBLIC_URL: '{}' is not an http:// or https:// URL",
            crate::wire::input::escaped(bad)
        );
    }
    let certificates = match (&config.tls_cert, &config.tls_key) {
        (Some(cert), Some(key)) => Some(Certificates::load(cert, key)?),
        (None, None) => None,
        _ => anyhow::bail!("--tls-cert and --tls-key go together"),
    };
    migrate_with_patience(&config.database_url, Duration::from_secs(30)).await?;
    let store = Store::connect(
        &config.database_url,
        config.pool_size,
        config.presence_window_ms,
    )?
    .with_deadlines(Deadlines {
        operation: config.request_timeout(),
        checkout: config.pool_timeout(),
    })
    .with_old_horizon_from(config.claim_places_age);
    let origin = format!("{:016x}", rand::rng().next_u64());
    let background = CancellationToken::new();
    let shutdown = CancellationToken::new();
    let mut tasks = JoinSet::new();

    let metrics = Metrics::new();
    let (notifier, notifier_task) = Notifier::start(
        config.database_url.clone(),
        origin.clone(),
        metrics.background_failure_counter("notify"),
        background.clone(),
    );
    let hub = Hub::new(store.clone(), config.clone(), notifier, origin, metrics);
    let (events_tx, events_rx) = mpsc::unbounded_channel();
    tasks.spawn(listener::run(
        config.database_url.clone(),
        events_tx,
        background.clone(),
    ));
    tasks.spawn(hub.clone().consume_listener(events_rx));
    tasks.spawn(sweeper::run(hub.clone(), background.clone()));
    tasks.spawn(crate::hub::retention::run(hub.clone(), background.clone()));
    tasks.spawn(hub.clone().recheck_loop(background.clone()));
    tasks.spawn(hub.clone().deliver_loop(background.clone()));
    tasks.spawn(count_jobs(
        hub.clone(),
        store.clone(),
        config.metrics_interval(),
        background.clone(),
    ));
    tasks.spawn(give_back_after_bursts(hub.clone(), background.clone()));
    tasks.spawn(watch_horizon(
        hub.clone(),
        store.clone(),
        config.clone(),
        background.clone(),
    ));

    let artifacts = crate::store::artifacts::open(
        Some(&config.artifact_store),
        &config.artifact_s3_options,
        &store,
    )?;
    let mut state = AppState::new(hub.clone(), &config, artifacts, shutdown.clone());
    state.certificates = certificates.clone();
    tasks.spawn(crate::store::artifacts::sweep(
        store,
        state.artifacts.clone(),
        config.sweep_interval().max(Duration::from_secs(1)),
        Duration::from_millis(config.artifact_stale_ms),
        background.clone(),
    ));
    let state = Arc::new(state);
    {
        // Forget rate-limit buckets of clients that have been quiet.
        let state = state.clone();
        let cancel = background.clone();
        tasks.spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(60));
            loop {
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    _ = tick.tick() => state.limiter.retain_recent(),
                }
            }
        });
    }
    let app = api::router(state);
    let addr = listener.local_addr()?;
    let listener = accept::ClientListener::new(
        listener,
        config
            .proxy_protocol
            .then(|| config.trusted_proxies.clone()),
        certificates.as_ref().map(Certificates::acceptor),
        limits::Slots::new(config.max_connections),
    );
    let deadlines = limits::Deadlines {
        header: config.header_timeout(),
        idle: config.idle_timeout(),
        write: config.request_timeout(),
    };
    let serve = connections::serve(listener, app, deadlines, shutdown.clone());
    let server = tokio::spawn(async move {
        serve.await;
        background.cancel();
        let _ = notifier_task.await;
        while tasks.join_next().await.is_some() {}
    });
    Ok(Replica {
        addr,
        certificates,
        hub,
        shutdown,
        server,
    })
}

impl Replica {
    /// `https://ADDR` when it serves HTTPS, else `http://ADDR`.
    pub fn url(&self) -> String {
        let scheme = if self.certificates.is_some() {
            "https"
        } else {
            "http"
        };
        format!("{scheme}://{}", self.addr)
    }

    /// Graceful stop: open long-polls answer at once, new connections are refused, in-flight
    /// requests finish, background loops stop. Gives up waiting after `deadline`.
    pub async fn stop(self, deadline: Duration) {
        self.shutdown.cancel();
        let _ = tokio::time::timeout(deadline, self.server).await;
    }

    /// A token that stops this replica when cancelled (for signal handlers).
    pub fn shutdown_token(&self) -> CancellationToken {
        self.shutdown.clone()
    }

    /// Wait for the shutdown token to fire, then give the server `deadline` to drain.
    pub async fn stop_after_shutdown(self, deadline: Duration) {
        self.shutdown.cancelled().await;
        let _ = tokio::time::timeout(deadline, self.server).await;
    }
}

/// Queue depth for `/metrics`: one query per replica every `every` (`metrics_interval`) (paced:
/// [`crate::hub::pace`]), whatever the number of scrapes or owners.
async fn count_jobs(hub: Arc<Hub>, store: Store, every: Duration, cancel: CancellationToken) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tick.tick() => {}
        }
        let started = std::time::Instant::now();
        let depth = store.job_depth().await;
        crate::hub::pace::pace(&mut tick, started.elapsed());
        match depth {
            Ok(depth) => {
                for (state, n) in [("parked", depth.parked), ("leased", depth.leased)] {
                    hub.metrics.jobs.get_or_create(&StateLabel { state }).set(n);
                }
            }
            Err(_) => hub.metrics.background_failure("depth"),
        }
    }
}

/// How far the long-polls parked on a replica must fall from their peak (and to half of it at
/// least) before the memory they held is given back.
const GIVE_BACK_AFTER_POLLS: i64 = 256;

/// Whether parked long-polls falling from `peak` to `now` ends a burst worth a trim.
fn burst_ended(peak: i64, now: i64) -> bool {
    peak - now >= GIVE_BACK_AFTER_POLLS && now <= peak / 2
}

/// Once a second, the long-polls parked here (`leasehold_long_polls`): when a burst of them has
/// ended ([`burst_ended`]), the allocator gives back what their connections freed, as it does
/// after transfers (`malloc_trim`; glibc keeps freed memory in its arenas: 10,000 long-polls
/// closed left a replica at 113 MiB, from 33, for good: issue 52 row 7). The dispatcher is not
/// involved: the gauge it keeps is read.
async fn give_back_after_bursts(hub: Arc<Hub>, cancel: CancellationToken) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut peak = 0;
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tick.tick() => {}
        }
        let now = hub.metrics.long_polls.get();
        peak = peak.max(now);
        if burst_ended(peak, now) {
            crate::api::transfer::give_back_soon();
            peak = now;
        }
    }
}

/// The database's snapshot horizon, once a second: claims start from remembered places while it
/// is old (store::horizon, hub::dispatcher), and when it turns young again the job table is
/// vacuumed at once (hub::vacuum), unless `vacuum_after_old_horizon` is off.
async fn watch_horizon(hub: Arc<Hub>, store: Store, config: Config, cancel: CancellationToken) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut was_old = false;
    let mut last_vacuum: Option<std::time::Instant> = None;
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tick.tick() => {}
        }
        match store.watch_horizon().await {
            Ok(age) => {
                let old = store.horizon_is_old();
                let spaced =
                    last_vacuum.is_none_or(|at| at.elapsed() >= crate::hub::vacuum::SPACING);
                if was_old && !old && config.vacuum_after_old_horizon && spaced {
                    last_vacuum = Some(std::time::Instant::now());
                    tokio::spawn(crate::hub::vacuum::after_old_horizon(
                        config.database_url.clone(),
                    ));
                }
                was_old = old;
                hub.metrics
                    .horizon_age
                    .set(i64::try_from(age).unwrap_or(i64::MAX));
                hub.metrics
                    .claims_from_places
                    .set(i64::from(store.horizon_is_old()));
            }
            Err(_) => hub.metrics.background_failure("horizon"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_ends_when_the_polls_fall_far_and_to_half_their_peak() {
        assert!(burst_ended(10_000, 0));
        assert!(burst_ended(512, 256));
        assert!(!burst_ended(300, 100), "too few to matter");
        assert!(!burst_ended(1_000, 600), "most are still parked");
        assert!(!burst_ended(0, 0));
    }
}
