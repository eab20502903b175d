//! Webhooks (contract v1.4): the operations the API calls, and the deliverer every replica
//! runs.
//!
//! The deliverer: on every feed pulse (at most once per [`SPACING`]) and every
//! `LEASEHOLD_WEBHOOK_POLL_MS`, it turns new feed events into delivery rows
//! (`webhook_fanout.sql`) and claims due deliveries (`webhook_claim.sql`: SKIP LOCKED and a
//! lease, at most `LEASEHOLD_WEBHOOK_CONCURRENCY` in flight per webhook over all replicas), as
//! many as it has free senders; each is sent by a task of its own, so a slow endpoint holds
//! only its own deliveries' senders. A try's end is reported fenced by the lease token: a
//! replica whose lease lapsed (it stalled; another took over) changes nothing.
//!
//! The signing secret is kept sealed with `LEASEHOLD_SECRETS_KEY` when the replicas have one
//! ([`keep_secret`]), and opened only to sign.
//!
//! Every connection a delivery makes is checked: the resolver ([`Guarded`]) drops loopback,
//! private, link-local and unspecified addresses (DNS rebinding: a name is judged when it is
//! resolved for a connection, not when it is saved), an address literal is judged before the
//! request, redirects are not followed, no proxy is used, the answer is read to at most
//! [`ANSWER_BYTES`], and the whole try has `LEASEHOLD_WEBHOOK_TIMEOUT_MS`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures_util::StreamExt;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use serde_json::json;
use tokio::sync::{Notify, Semaphore};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::Hub;
use crate::domain::sealing::{Sealed, Sealer};
use crate::domain::webhook;
use crate::store::feed::{ClaimedDelivery, Delivery, FeedEvent, RetryTimings, TryOutcome, Webhook};
use crate::store::Result;

/// Most deliveries one replica sends at once.
const SENDERS: usize = 256;
/// Most bytes of an answer read (then the connection is dropped).
const ANSWER_BYTES: usize = 64 * 1024;
/// Least time between two rounds of fan-out and claim driven by pulses.
const SPACING: Duration = Duration::from_millis(10);
/// Events one fan-out reads per webhook.
const FANOUT_EVENTS: i64 = 500;
/// Webhooks one fan-out serves.
const FANOUT_WEBHOOKS: i64 = 1000;

/// A new webhook's signing secret: `whsec_` and 32 random bytes, as the other credentials.
pub fn new_secret() -> String {
    use base64::Engine;
    let bytes: [u8; 32] = rand::random();
    format!(
        "whsec_{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
    )
}

/// How a webhook's signing secret is kept: sealed with `LEASEHOLD_SECRETS_KEY` when the
/// replicas have one (`sealed:<nonce>:<ciphertext>`, base64url, bound to the workspace and
/// `webhook/<name>`, a name no workspace secret can have), else as it is.
fn keep_secret(sealer: Option<&Sealer>, workspace: &str, name: &str, secret: &str) -> String {
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use base64::Engine;
    match sealer {
        None => secret.to_owned(),
        Some(s) => {
            let sealed = s.seal(workspace, &format!("webhook/{name}"), secret);
            format!(
                "sealed:{}:{}",
                URL_SAFE_NO_PAD.encode(&sealed.nonce),
                URL_SAFE_NO_PAD.encode(&sealed.ciphertext)
            )
        }
    }
}

/// The signing secret as [`keep_secret`] kept it; `None` when it is sealed and does not open
/// (no key, or another key).
fn open_secret(sealer: Option<&Sealer>, workspace: &str, name: &str, kept: &str) -> Option<String> {
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use base64::Engine;
    let Some(rest) = kept.strip_prefix("sealed:") else {
        return Some(kept.to_owned());
    };
    let (nonce, ciphertext) = rest.split_once(':')?;
    let sealed = Sealed {
        nonce: URL_SAFE_NO_PAD.decode(nonce).ok()?,
        ciphertext: URL_SAFE_NO_PAD.decode(ciphertext).ok()?,
    };
    sealer?
        .open(workspace, &format!("webhook/{name}"), &sealed)
        .ok()
}

/// The event as the feed answers it (`api::views::feed_event` makes the same from the same
/// record; a test compares a delivery's body with the feed's answer).
pub fn event_json(e: &FeedEvent, workspace: &str) -> serde_json::Value {
    json!({
        "cursor": e.position.encode(workspace),
        "job_id": e.position.job,
        "seq": e.position.seq,
        "kind": e.kind,
        "data": e.data,
        "at": e.at,
    })
}

impl Hub {
    /// Create or replace a webhook; `None` when its workspace has the most it may have.
    ///
    /// # Errors
    /// The database failed.
    pub async fn put_webhook(
        &self,
        workspace: &str,
        name: &str,
        url: &str,
        kinds: &[String],
        states: Option<&[String]>,
    ) -> Result<Option<Webhook>> {
        let secret = new_secret();
        let kept = keep_secret(self.config.sealer().as_ref(), workspace, name, &secret);
        let hook = self
            .store
            .put_webhook(
                workspace,
                name,
                url,
                kinds,
                states,
                &kept,
                webhook::MAX_PER_WORKSPACE,
            )
            .await?
            .map(|mut h| {
                // The caller sees the secret it made (once, when created), never the kept form.
                h.secret = if h.created { secret } else { String::new() };
                h
            });
        self.feed_pulse();
        Ok(hook)
    }

    /// # Errors
    /// The database failed.
    pub async fn webhooks(&self, workspace: &str) -> Result<Vec<Webhook>> {
        let mut hooks = self.store.webhooks(workspace).await?;
        for h in &mut hooks {
            h.secret.clear();
        }
        Ok(hooks)
    }

    /// # Errors
    /// The database failed.
    pub async fn webhook(&self, workspace: &str, name: &str) -> Result<Option<Webhook>> {
        let hook = self.store.webhook(workspace, name).await?;
        Ok(hook.map(|mut h| {
            h.secret.clear();
            h
        }))
    }

    /// # Errors
    /// The database failed.
    pub async fn delete_webhook(&self, workspace: &str, name: &str) -> Result<bool> {
        self.store.delete_webhook(workspace, name).await
    }

    /// # Errors
    /// The database failed.
    pub async fn deliveries(
        &self,
        webhook: Uuid,
        before: Option<Uuid>,
        limit: i64,
    ) -> Result<Vec<Delivery>> {
        self.store.deliveries(webhook, before, limit).await
    }

    /// # Errors
    /// The database failed.
    pub async fn redeliver(&self, webhook: Uuid, id: Uuid) -> Result<Option<Delivery>> {
        let d = self.store.redeliver(webhook, id).await?;
        self.feed_pulse();
        Ok(d)
    }

    fn retry_timings(&self) -> RetryTimings {
        let ms = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        RetryTimings {
            first_ms: ms(self.config.webhook_retry_first_ms),
            cap_ms: ms(self.config.webhook_retry_cap_ms),
            give_up_ms: ms(self.config.webhook_retry_for_ms),
            disable_ms: ms(self.config.webhook_disable_after_ms),
        }
    }

    /// The deliverer (module doc), until `cancel`.
    pub async fn deliver_loop(self: Arc<Self>, cancel: CancellationToken) {
        let client = match sender(
            self.config.webhook_allow_private,
            Duration::from_millis(self.config.webhook_timeout_ms),
        ) {
            Ok(c) => c,
            Err(e) => {
                tracing::error!(error = %e, "webhook deliveries cannot start: no HTTP client");
                return;
            }
        };
        let sealer = self.config.sealer().map(Arc::new);
        let senders = Arc::new(Semaphore::new(SENDERS));
        let freed = Arc::new(Notify::new());
        let mut pulses = self.feed_pulses();
        let mut poll =
            tokio::time::interval(Duration::from_millis(self.config.webhook_poll_ms.max(10)));
        poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // Whether the last fan-out found any webhook: while none exists, pulses are ignored and
        // only the poll looks (a workspace without webhooks pays one query per poll).
        let mut any = true;
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = poll.tick() => {}
                r = pulses.changed(), if any => {
                    if r.is_err() {
                        return;
                    }
                }
                _ = freed.notified() => {}
            }
            let started = tokio::time::Instant::now();
            any = self.fan_out_all().await;
            let free = senders.available_permits();
            if free > 0 && any {
                let claimed = self
                    .store
                    .claim_deliveries(
                        i64::try_from(self.config.webhook_lease_ms).unwrap_or(i64::MAX),
                        free as i64,
                        i64::from(self.config.webhook_concurrency),
                    )
                    .await;
                match claimed {
                    Ok(claimed) => {
                        for d in claimed {
                            let Ok(permit) = senders.clone().try_acquire_owned() else {
                                break;
                            };
                            let hub = self.clone();
                            let client = client.clone();
                            let freed = freed.clone();
                            let sealer = sealer.clone();
                            tokio::spawn(async move {
                                hub.deliver_one(&client, d, sealer.as_deref()).await;
                                drop(permit);
                                freed.notify_one();
                            });
                        }
                    }
                    Err(e) => {
                        self.metrics.background_failure("webhook_claim");
                        tracing::warn!(error = %e, "claiming webhook deliveries failed; the next poll retries");
                    }
                }
            }
            tokio::time::sleep_until(started + SPACING).await;
        }
    }

    /// Fan out until a round reads less than a full batch; whether any webhook was served.
    async fn fan_out_all(&self) -> bool {
        loop {
            match self.store.fan_out(FANOUT_WEBHOOKS, FANOUT_EVENTS).await {
                Ok((hooks, read)) => {
                    if read < FANOUT_EVENTS {
                        return hooks > 0;
                    }
                }
                Err(e) => {
                    self.metrics.background_failure("webhook_fanout");
                    tracing::warn!(error = %e, "turning feed events into webhook deliveries failed; the next poll retries");
                    return true;
                }
            }
        }
    }

    async fn deliver_one(
        &self,
        client: &reqwest::Client,
        mut d: ClaimedDelivery,
        sealer: Option<&Sealer>,
    ) {
        let outcome = match open_secret(sealer, &d.workspace, &d.webhook, &d.secret) {
            Some(secret) => {
                d.secret = secret;
                send(client, &d, self.config.webhook_allow_private).await
            }
            None => TryOutcome {
                delivered: false,
                status: None,
                error: Some(
                    "the signing secret does not open: it was sealed with a \
                     LEASEHOLD_SECRETS_KEY this replica does not have"
                        .into(),
                ),
            },
        };
        match self
            .store
            .delivery_done(&d, &outcome, self.retry_timings())
            .await
        {
            Ok(Some((_, true))) => {
                tracing::warn!(webhook = %d.webhook, workspace = %d.workspace,
                    "a webhook whose deliveries all failed too long is disabled");
            }
            Ok(_) => {}
            Err(e) => {
                self.metrics.background_failure("webhook_report");
                tracing::warn!(error = %e, delivery = %d.id,
                    "recording a delivery's try failed; its lease lapses and it is tried again");
            }
        }
    }
}

/// The body of a delivery.
pub fn delivery_body(d: &ClaimedDelivery) -> Vec<u8> {
    let body = json!({
        "delivery": d.id,
        "webhook": d.webhook,
        "event": event_json(&d.event, &d.workspace),
    });
    serde_json::to_vec(&body).expect("a JSON value serialises")
}

/// One try of a delivery.
async fn send(client: &reqwest::Client, d: &ClaimedDelivery, allow_private: bool) -> TryOutcome {
    let failed = |error: String| TryOutcome {
        delivered: false,
        status: None,
        error: Some(error),
    };
    let url = match reqwest::Url::parse(&d.url) {
        Ok(u) => u,
        Err(_) => return failed("the URL does not parse".into()),
    };
    // An address literal is never resolved: judge it here.
    let literal = url.host_str().and_then(|h| {
        h.trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<std::net::IpAddr>()
            .ok()
    });
    if let Some(ip) = literal {
        if !allow_private && !webhook::public_address(ip) {
            return failed(format!(
                "refused: {ip} is a loopback, private, link-local or unspecified address"
            ));
        }
    }
    let body = delivery_body(d);
    let t = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    let request = client
        .post(url)
        .header("content-type", "application/json")
        .header("leasehold-delivery", d.id.to_string())
        .header(
            "leasehold-signature",
            webhook::signature(&d.secret, t, &body),
        )
        .body(body);
    match request.send().await {
        Ok(answer) => {
            let status = answer.status();
            // Read a bounded part of the answer, so the connection can be reused when it is
            // short; never more.
            let mut stream = answer.bytes_stream();
            let mut read = 0;
            while let Some(Ok(chunk)) = stream.next().await {
                read += chunk.len();
                if read >= ANSWER_BYTES {
                    break;
                }
            }
            TryOutcome {
                delivered: status.is_success(),
                status: Some(i32::from(status.as_u16())),
                error: (!status.is_success()).then(|| format!("answered {status}")),
            }
        }
        Err(e) => failed(error_text(&e)),
    }
}

/// A reqwest error with its causes (the resolver's refusal is a cause).
fn error_text(e: &reqwest::Error) -> String {
    let mut text = if e.is_timeout() {
        "timed out".to_owned()
    } else if e.is_connect() {
        "could not connect".to_owned()
    } else {
        "the request failed".to_owned()
    };
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text.chars().take(500).collect()
}

/// The client deliveries are sent with.
fn sender(allow_private: bool, timeout: Duration) -> anyhow::Result<reqwest::Client> {
    Ok(reqwest::Client::builder()
        .use_preconfigured_tls(crate::tls::Trust::default().client_config(true)?)
        .dns_resolver(Arc::new(Guarded { allow_private }))
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .timeout(timeout)
        .connect_timeout(timeout)
        .pool_idle_timeout(Duration::from_secs(30))
        .pool_max_idle_per_host(8)
        .user_agent(concat!("leasehold-webhooks/", env!("CARGO_PKG_VERSION")))
        .build()?)
}

/// A resolver that keeps only the addresses a delivery may connect to.
struct Guarded {
    allow_private: bool,
}

impl Resolve for Guarded {
    fn resolve(&self, name: Name) -> Resolving {
        let allow_private = self.allow_private;
        Box::pin(async move {
            let host = name.as_str().to_owned();
            let found: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let kept: Vec<SocketAddr> = found
                .into_iter()
                .filter(|a| allow_private || webhook::public_address(a.ip()))
                .collect();
            if kept.is_empty() {
                let refused: Box<dyn std::error::Error + Send + Sync> = format!(
                    "refused: {host} resolves only to loopback, private, link-local or unspecified addresses"
                )
                .into();
                return Err(refused);
            }
            let addrs: Addrs = Box::new(kept.into_iter());
            Ok(addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::sealing::SealKey;

    #[test]
    fn a_kept_secret_opens_only_where_it_was_sealed() {
        let key = SealKey::generate();
        let sealer = Sealer::new(&key, None);
        let kept = keep_secret(Some(&sealer), "acme", "ci", "whsec_x");
        assert!(kept.starts_with("sealed:") && !kept.contains("whsec_x"));
        assert_eq!(
            open_secret(Some(&sealer), "acme", "ci", &kept).as_deref(),
            Some("whsec_x")
        );
        assert_eq!(open_secret(Some(&sealer), "beta", "ci", &kept), None);
        assert_eq!(open_secret(None, "acme", "ci", &kept), None);
        assert_eq!(keep_secret(None, "acme", "ci", "whsec_x"), "whsec_x");
        assert_eq!(
            open_secret(None, "acme", "ci", "whsec_x").as_deref(),
            Some("whsec_x")
        );
    }
}
