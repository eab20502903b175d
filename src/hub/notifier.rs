//! Sends wake-ups to the other replicas, after the durable transaction that caused them has
//! committed, from its own connection with `synchronous_commit = off` (docs/perf.md:
//! a `pg_notify` inside a durable transaction holds a cluster-wide lock across the WAL flush).
//!
//! What it sends is a [`Notice`]: a job changed (its readers wake), or a job was parked in a
//! lane (the dispatcher of its workspace claims). Notices are coalesced: whatever queued up
//! while the previous statement ran goes out in the next one, de-duplicated. A notification that cannot be sent is dropped and logged; correctness
//! never depends on one arriving (waiters re-check on their own). Connecting and each send
//! have a deadline ([`crate::store::listener::PATIENCE`]): a connection that stops answering
//! is dropped and replaced, so the notifier never wedges.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use uuid::Uuid;

use crate::store::claim::{Lane, Place};
use crate::store::sql;

/// Most payloads sent in one statement.
const BATCH: usize = 512;

/// What a replica tells the others.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Notice {
    /// Something happened to this job (state, events): its readers read it again.
    Job(Uuid),
    /// A job was parked in this lane of this workspace, at this place in it when the replica
    /// that parked it knew (a dispatcher that remembers a place after it moves back to it).
    Parked {
        workspace: String,
        lane: Lane,
        place: Option<Place>,
    },
}

impl Notice {
    /// Wire form in a notification payload (workspace ids never contain '/').
    pub fn encode(&self) -> String {
        match self {
            Notice::Job(id) => format!("j/{id}"),
            Notice::Parked {
                workspace,
                lane,
                place,
            } => match place {
                Some(p) => format!("l/{workspace}/{}/{}/{}", p.neg_priority, p.id, lane.key()),
                None => format!("l/{workspace}/-/-/{}", lane.key()),
            },
        }
    }

    pub fn decode(s: &str) -> Option<Notice> {
        if let Some(id) = s.strip_prefix("j/") {
            return id.parse().ok().map(Notice::Job);
        }
        let mut parts = s.strip_prefix("l/")?.splitn(4, '/');
        let workspace = parts.next()?.to_owned();
        let place = match (parts.next()?, parts.next()?) {
            ("-", "-") => None,
            (neg, id) => Some(Place {
                neg_priority: neg.parse().ok()?,
                id: id.parse().ok()?,
            }),
        };
        let lane = Lane::parse(parts.next()?)?;
        Some(Notice::Parked {
            workspace,
            lane,
            place,
        })
    }
}

/// A cheap handle that queues notices for the notifier task.
#[derive(Clone)]
pub struct Notifier {
    tx: mpsc::UnboundedSender<Notice>,
    pub sent: Arc<AtomicU64>,
}

impl Notifier {
    /// Start the notifier task; payloads are `<origin>|<key>`.
    /// `failures` counts batches dropped after the retry failed.
    pub fn start(
        database_url: String,
        origin: String,
        failures: Counter,
        cancel: CancellationToken,
    ) -> (Self, tokio::task::JoinHandle<()>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let sent = Arc::new(AtomicU64::new(0));
        let task = tokio::spawn(run(
            database_url,
            origin,
            rx,
            (sent.clone(), failures),
            cancel,
        ));
        (Self { tx, sent }, task)
    }

    /// Queue a notice for the other replicas.
    pub fn send(&self, notice: Notice) {
        let _ = self.tx.send(notice);
    }
}

/// The notifier's connection and its statement, prepared once (a statement sent as text is
/// parsed and planned again on every send, and costs a round trip more).
struct Sender {
    client: tokio_postgres::Client,
    notify: tokio_postgres::Statement,
}

async fn connect(database_url: &str) -> Option<Sender> {
    let connected = tokio::time::timeout(crate::store::listener::PATIENCE, async {
        let (client, connection) =
            crate::store::listener::connect_as(database_url, "leasehold-notify").await?;
        tokio::spawn(connection);
        client.batch_execute("SET synchronous_commit = off").await?;
        let notify = client.prepare(sql::NOTIFY).await?;
        Ok::<_, tokio_postgres::Error>(Sender { client, notify })
    });
    match connected.await {
        Ok(Ok(client)) => Some(client),
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "the notifier could not connect; wake-ups to other replicas wait for it");
            None
        }
        Err(_) => {
            tracing::warn!("the notifier's connect did not finish in time; wake-ups to other replicas wait for it");
            None
        }
    }
}

async fn run(
    database_url: String,
    origin: String,
    mut rx: mpsc::UnboundedReceiver<Notice>,
    (sent, failures): (Arc<AtomicU64>, Counter),
    cancel: CancellationToken,
) {
    let mut client: Option<Sender> = None;
    loop {
        let first = tokio::select! {
            _ = cancel.cancelled() => return,
            k = rx.recv() => match k { Some(k) => k, None => return },
        };
        let mut keys = BTreeSet::from([first]);
        while keys.len() < BATCH {
            match rx.try_recv() {
                Ok(k) => {
                    keys.insert(k);
                }
                Err(_) => break,
            }
        }
        let payloads: Vec<String> = keys
            .iter()
            .map(|k| format!("{origin}|{}", k.encode()))
            .collect();
        // One retry on a fresh connection; after that the batch is dropped.
        let mut delivered = false;
        for attempt in 0..2 {
            if client.as_ref().is_none_or(|c| c.client.is_closed()) {
                client = connect(&database_url).await;
            }
            let Some(c) = client.as_ref() else {
                if attempt == 0 {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                continue;
            };
            let sent_in_time = tokio::time::timeout(
                crate::store::listener::PATIENCE,
                c.client.execute(&c.notify, &[&payloads]),
            )
            .await;
            match sent_in_time {
                Err(_) => {
                    tracing::warn!(attempt, keys = payloads.len(),
                        "sending wake-ups to other replicas did not finish in time; their waiters re-check on their own");
                    if let Some(stuck) = client.take() {
                        let cancel = stuck.client.cancel_token();
                        tokio::spawn(async move {
                            let _ = tokio::time::timeout(
                                crate::store::listener::PATIENCE,
                                cancel.cancel_query(tokio_postgres::NoTls),
                            )
                            .await;
                            drop(stuck);
                        });
                    }
                }
                Ok(Ok(_)) => {
                    sent.fetch_add(payloads.len() as u64, Ordering::Relaxed);
                    delivered = true;
                    break;
                }
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, attempt, keys = payloads.len(),
                        "sending wake-ups to other replicas failed; their waiters re-check on their own");
                    client = None;
                }
            }
        }
        if !delivered {
            failures.inc();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notices_round_trip() {
        let at = Place::of(-5, Uuid::now_v7());
        for n in [
            Notice::Job(Uuid::now_v7()),
            Notice::Parked {
                workspace: "acme".into(),
                lane: Lane::Named(Uuid::now_v7()),
                place: None,
            },
            Notice::Parked {
                workspace: "acme".into(),
                lane: Lane::Pool {
                    workspace: "acme".into(),
                    owner: "ws:acme".into(),
                    constrained: true,
                },
                place: Some(at),
            },
            Notice::Parked {
                workspace: "acme".into(),
                lane: Lane::Any {
                    workspace: "acme".into(),
                    constrained: false,
                },
                place: Some(Place::HEAD),
            },
        ] {
            assert_eq!(Notice::decode(&n.encode()), Some(n));
        }
        assert_eq!(Notice::decode("p/acme/alice"), None);
        assert_eq!(Notice::decode("l/acme/x/y/p/acme/alice/0"), None);
    }
}
