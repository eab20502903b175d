//! The workspace feed's and webhooks' bodies (v1.4, docs/api.md "The workspace feed",
//! "Webhooks"), re-exported from [`super`] as the other wire types are.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

/// One event of a workspace's feed (v1.4): a job event with its opaque feed position.
#[derive(utoipa::ToSchema, Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FeedEvent {
    /// Opaque; `after=` it to read on from here.
    pub cursor: String,
    pub job_id: Uuid,
    /// The event's place among its job's events.
    pub seq: i32,
    pub kind: String,
    pub data: Value,
    pub at: DateTime<Utc>,
}

/// A page of `GET /v1/events` (v1.4).
#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize)]
pub struct FeedPage {
    pub events: Vec<FeedEvent>,
    /// The cursor to read on from (the last event's, or `after` when none came).
    pub next: String,
}

/// `PUT /v1/webhooks/{name}` (v1.4).
#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize)]
pub struct PutWebhook {
    /// `https://...` (`http` only with `LEASEHOLD_WEBHOOK_ALLOW_HTTP=1`).
    pub url: String,
    /// Event kinds delivered (default `["state"]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kinds: Option<Vec<String>>,
    /// Only `state` events with these states (default: every one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub states: Option<Vec<String>>,
}

/// A webhook (v1.4); `secret` only in the answer of the call that created it.
#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize)]
pub struct Webhook {
    pub name: String,
    pub url: String,
    pub kinds: Vec<String>,
    /// Null: every state.
    pub states: Option<Vec<String>>,
    /// `active`, or `disabled` (its deliveries failed for a day; a PUT enables it).
    pub status: String,
    pub disabled_at: Option<DateTime<Utc>>,
    pub disabled_reason: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// `whsec_...`: the signing secret, shown once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
}

#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize)]
pub struct WebhookList {
    pub webhooks: Vec<Webhook>,
}

/// A delivery of a feed event to a webhook (v1.4).
#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize)]
pub struct WebhookDelivery {
    /// Also the `Leasehold-Delivery` header and the body's `delivery`.
    pub id: Uuid,
    /// The delivered event's feed cursor.
    pub event_cursor: String,
    /// `pending`, `delivered` or `failed`.
    pub status: String,
    /// Tries started.
    pub attempts: i32,
    /// The last try's HTTP status, if it got an answer.
    pub last_status_code: Option<i32>,
    /// The last try's error (no answer, a refused address, a non-2xx answer).
    pub last_error: Option<String>,
    pub last_attempt_at: Option<DateTime<Utc>>,
    /// When it is tried next; null unless pending.
    pub next_try_at: Option<DateTime<Utc>>,
    /// The delivery this one re-sends (`redeliver`).
    pub redelivery_of: Option<Uuid>,
    pub created_at: DateTime<Utc>,
    pub event: FeedEvent,
}

/// A page of a webhook's deliveries, newest first (v1.4).
#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize)]
pub struct WebhookDeliveryList {
    pub deliveries: Vec<WebhookDelivery>,
    /// `after=` this for the next (older) page; null at the end.
    pub next: Option<Uuid>,
}
