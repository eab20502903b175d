//! The workspace feed and webhooks in the store (contract v1.4): feed pages, how far retention
//! pruned a feed, webhooks, the fan-out of events into deliveries, and the delivery claim.
//!
//! Invariant: the feed's order is decided by the statements (`feed_page.sql`,
//! `webhook_fanout.sql`: below the snapshot's xmin, by transaction id, job, seq), never here.

use chrono::{DateTime, Utc};
use serde_json::Value;
use tokio_postgres::Row;
use uuid::Uuid;

use super::{sql, Result, Store};
use crate::domain::feed::Cursor;

/// One event of the feed.
#[derive(Debug, Clone)]
pub struct FeedEvent {
    pub position: Cursor,
    pub kind: String,
    pub data: Value,
    pub at: DateTime<Utc>,
}

fn feed_event(r: &Row) -> FeedEvent {
    FeedEvent {
        position: Cursor {
            xid: r.get("xid"),
            job: r.get("job_id"),
            seq: r.get("seq"),
        },
        kind: r.get("kind"),
        data: r.get("data"),
        at: r.get("at"),
    }
}

/// A webhook row (its secret is read only to sign, and shown only by the call that made it).
#[derive(Debug, Clone)]
pub struct Webhook {
    pub id: Uuid,
    pub workspace: String,
    pub name: String,
    pub url: String,
    pub kinds: Vec<String>,
    pub states: Option<Vec<String>>,
    pub secret: String,
    pub disabled_at: Option<DateTime<Utc>>,
    pub disabled_reason: Option<String>,
    pub failing_since: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// Made by this call (not a replace).
    pub created: bool,
}

fn webhook(r: &Row) -> Webhook {
    Webhook {
        id: r.get("id"),
        workspace: r.get("workspace"),
        name: r.get("name"),
        url: r.get("url"),
        kinds: r.get("kinds"),
        states: r.get("states"),
        secret: r.get("secret"),
        disabled_at: r.get("disabled_at"),
        disabled_reason: r.get("disabled_reason"),
        failing_since: r.get("failing_since"),
        created_at: r.get("created_at"),
        updated_at: r.get("updated_at"),
        created: r.get("created"),
    }
}

/// A row of a webhook's delivery log.
#[derive(Debug, Clone)]
pub struct Delivery {
    pub id: Uuid,
    pub event: FeedEvent,
    pub status: String,
    pub attempts: i32,
    pub next_at: DateTime<Utc>,
    pub last_status: Option<i32>,
    pub last_error: Option<String>,
    pub last_at: Option<DateTime<Utc>>,
    pub redelivery_of: Option<Uuid>,
    pub created_at: DateTime<Utc>,
}

fn delivery(r: &Row) -> Delivery {
    Delivery {
        id: r.get("id"),
        event: feed_event(r),
        status: r.get("status"),
        attempts: r.get("attempts"),
        next_at: r.get("next_at"),
        last_status: r.get("last_status"),
        last_error: r.get("last_error"),
        last_at: r.get("last_at"),
        redelivery_of: r.get("redelivery_of"),
        created_at: r.get("created_at"),
    }
}

/// A delivery a replica claimed: what it sends, where, and the lease that fences its report.
#[derive(Debug, Clone)]
pub struct ClaimedDelivery {
    pub id: Uuid,
    pub lease_token: Uuid,
    pub attempts: i32,
    pub event: FeedEvent,
    pub workspace: String,
    pub webhook: String,
    pub url: String,
    pub secret: String,
}

/// How a try of a delivery ended.
#[derive(Debug, Clone)]
pub struct TryOutcome {
    pub delivered: bool,
    pub status: Option<i32>,
    pub error: Option<String>,
}

/// The retry and disable timings (ms) a try's report applies.
#[derive(Debug, Clone, Copy)]
pub struct RetryTimings {
    pub first_ms: i64,
    pub cap_ms: i64,
    pub give_up_ms: i64,
    pub disable_ms: i64,
}

impl Store {
    /// A page of `workspace`'s feed of `kinds` after `after` (feed_page.sql).
    pub async fn feed_page(
        &self,
        workspace: &str,
        kinds: &[String],
        after: Cursor,
        limit: i64,
    ) -> Result<Vec<FeedEvent>> {
        let rows = self
            .query(
                sql::FEED_PAGE,
                &[
                    &workspace, &kinds, &after.xid, &after.job, &after.seq, &limit,
                ],
            )
            .await?;
        Ok(rows.iter().map(feed_event).collect())
    }

    /// Whether events past `after` are committed but held back behind an open transaction.
    pub async fn feed_held(
        &self,
        workspace: &str,
        kinds: &[String],
        after: Cursor,
    ) -> Result<bool> {
        Ok(self
            .query_opt(
                sql::FEED_HELD,
                &[&workspace, &kinds, &after.xid, &after.job, &after.seq],
            )
            .await?
            .is_some_and(|r| r.get("held")))
    }

    /// The transaction id up to which retention deleted `workspace`'s events, if it did.
    pub async fn feed_pruned(&self, workspace: &str) -> Result<Option<i64>> {
        Ok(self
            .query_opt(sql::FEED_PRUNED, &[&workspace])
            .await?
            .map(|r| r.get("xid")))
    }

    /// Create or replace a webhook; `None` when the workspace has `max` already.
    #[allow(clippy::too_many_arguments)]
    pub async fn put_webhook(
        &self,
        workspace: &str,
        name: &str,
        url: &str,
        kinds: &[String],
        states: Option<&[String]>,
        secret: &str,
        max: i64,
    ) -> Result<Option<Webhook>> {
        Ok(self
            .query_opt(
                sql::WEBHOOK_PUT,
                &[
                    &Uuid::now_v7(),
                    &workspace,
                    &name,
                    &url,
                    &kinds,
                    &states,
                    &secret,
                    &max,
                ],
            )
            .await?
            .as_ref()
            .map(webhook))
    }

    pub async fn webhooks(&self, workspace: &str) -> Result<Vec<Webhook>> {
        let rows = self.query(sql::WEBHOOKS_LIST, &[&workspace]).await?;
        Ok(rows.iter().map(webhook).collect())
    }

    pub async fn webhook(&self, workspace: &str, name: &str) -> Result<Option<Webhook>> {
        Ok(self
            .query_opt(sql::WEBHOOK_GET, &[&workspace, &name])
            .await?
            .as_ref()
            .map(webhook))
    }

    /// `true` when it existed.
    pub async fn delete_webhook(&self, workspace: &str, name: &str) -> Result<bool> {
        Ok(self
            .execute(sql::WEBHOOK_DELETE, &[&workspace, &name])
            .await?
            == 1)
    }

    /// A page of a webhook's delivery log, newest first, before `before`.
    pub async fn deliveries(
        &self,
        webhook: Uuid,
        before: Option<Uuid>,
        limit: i64,
    ) -> Result<Vec<Delivery>> {
        let rows = self
            .query(sql::WEBHOOK_DELIVERIES_LIST, &[&webhook, &before, &limit])
            .await?;
        Ok(rows.iter().map(delivery).collect())
    }

    /// A new delivery of delivery `id`'s event; `None` if the webhook has no such delivery.
    pub async fn redeliver(&self, webhook: Uuid, id: Uuid) -> Result<Option<Delivery>> {
        Ok(self
            .query_opt(sql::WEBHOOK_REDELIVER, &[&Uuid::now_v7(), &webhook, &id])
            .await?
            .as_ref()
            .map(delivery))
    }

    /// Turn feed events into deliveries (webhook_fanout.sql): how many webhooks it served,
    /// and the most events it read for one of them.
    pub async fn fan_out(&self, webhooks: i64, events: i64) -> Result<(i64, i64)> {
        let row = self
            .query_opt(sql::WEBHOOK_FANOUT, &[&webhooks, &events])
            .await?;
        Ok(row.map_or((0, 0), |r| (r.get("hooks"), r.get("most"))))
    }

    /// Claim up to `most` due deliveries for `lease_ms`, at most `per_webhook` in flight each.
    pub async fn claim_deliveries(
        &self,
        lease_ms: i64,
        most: i64,
        per_webhook: i64,
    ) -> Result<Vec<ClaimedDelivery>> {
        let rows = self
            .query(sql::WEBHOOK_CLAIM, &[&lease_ms, &most, &per_webhook])
            .await?;
        Ok(rows
            .iter()
            .map(|r| ClaimedDelivery {
                id: r.get("id"),
                lease_token: r.get("lease_token"),
                attempts: r.get("attempts"),
                event: feed_event(r),
                workspace: r.get("workspace"),
                webhook: r.get("name"),
                url: r.get("url"),
                secret: r.get("secret"),
            })
            .collect())
    }

    /// Delete up to `batch` settled deliveries made more than `older_than_ms` ago.
    pub async fn sweep_webhook_deliveries(&self, batch: i64, older_than_ms: i64) -> Result<i64> {
        Ok(self
            .query_opt(sql::SWEEP_WEBHOOK_DELIVERIES, &[&batch, &older_than_ms])
            .await?
            .map_or(0, |r| r.get("deleted")))
    }

    /// Report a try: `Some(status)` of the delivery after it (`pending`, `delivered`,
    /// `failed`) and whether its webhook was disabled by it; `None` when the lease was lost.
    pub async fn delivery_done(
        &self,
        d: &ClaimedDelivery,
        outcome: &TryOutcome,
        t: RetryTimings,
    ) -> Result<Option<(String, bool)>> {
        Ok(self
            .query_opt(
                sql::WEBHOOK_DELIVERY_DONE,
                &[
                    &d.id,
                    &d.lease_token,
                    &outcome.delivered,
                    &outcome.status,
                    &outcome.error,
                    &t.first_ms,
                    &t.cap_ms,
                    &t.give_up_ms,
                    &t.disable_ms,
                ],
            )
            .await?
            .map(|r| {
                (
                    r.get("status"),
                    r.get::<_, Option<bool>>("disabled").unwrap_or(false),
                )
            }))
    }
}
