//! `leasehold webhooks set|list|rm|deliveries|redeliver` (v1.4): webhooks that receive the
//! workspace feed's events, signed. Needs an admin key.
//!
//! Invariant: the signing secret is printed once, by the `set` that created the webhook.

use clap::Subcommand;
use uuid::Uuid;

use super::{print_json, print_table, when, Conn};
use crate::wire;

#[derive(Debug, Subcommand)]
pub enum WebhooksCommand {
    /// Create or replace a webhook (a replace enables a disabled one).
    Set {
        /// `[a-z0-9-]{1,64}`.
        name: String,
        /// Where deliveries are POSTed (`https://...`).
        url: String,
        /// Event kinds delivered (repeatable or comma-separated; default `state`).
        #[arg(long, value_delimiter = ',', value_name = "KIND")]
        kinds: Vec<String>,
        /// Only `state` events with these states, e.g. `completed,failed` (default: all).
        #[arg(long, value_delimiter = ',', value_name = "STATE")]
        states: Vec<String>,
    },
    /// The workspace's webhooks.
    List,
    /// Delete a webhook and its delivery log.
    Rm { name: String },
    /// A webhook's deliveries, newest first.
    Deliveries {
        name: String,
        #[arg(long, default_value_t = 20)]
        limit: i64,
    },
    /// Send a delivery's event again, as a new delivery.
    Redeliver { name: String, delivery: Uuid },
}

/// # Errors
/// The service refused the call or could not be reached.
pub async fn run(conn: &Conn, command: WebhooksCommand) -> anyhow::Result<i32> {
    let client = conn.client()?;
    match command {
        WebhooksCommand::Set {
            name,
            url,
            kinds,
            states,
        } => {
            let req = wire::PutWebhook {
                url,
                kinds: (!kinds.is_empty()).then_some(kinds),
                states: (!states.is_empty()).then_some(states),
            };
            let (status, hook) = client.put_webhook(&name, &req).await?;
            if conn.json {
                print_json(&hook);
            } else if let Some(secret) = &hook.secret {
                println!("webhook {name} created; its signing secret (shown once):");
                println!("{secret}");
            } else {
                println!(
                    "webhook {name} {}",
                    if status.as_u16() == 201 {
                        "created"
                    } else {
                        "replaced"
                    }
                );
            }
        }
        WebhooksCommand::List => {
            let list = client.webhooks().await?;
            if conn.json {
                print_json(&list);
                return Ok(0);
            }
            let rows: Vec<Vec<String>> = list
                .webhooks
                .iter()
                .map(|w| {
                    vec![
                        w.name.clone(),
                        w.status.clone(),
                        w.kinds.join(","),
                        w.states.as_ref().map_or("*".into(), |s| s.join(",")),
                        crate::wire::input::escaped(&w.url),
                    ]
                })
                .collect();
            print_table(&["NAME", "STATUS", "KINDS", "STATES", "URL"], &rows);
        }
        WebhooksCommand::Rm { name } => {
            client.delete_webhook(&name).await?;
            if conn.json {
                print_json(&serde_json::json!({ "deleted": name }));
            } else {
                println!("webhook {name} deleted");
            }
        }
        WebhooksCommand::Deliveries { name, limit } => {
            let page = client.webhook_deliveries(&name, None, Some(limit)).await?;
            if conn.json {
                print_json(&page);
                return Ok(0);
            }
            let rows: Vec<Vec<String>> = page
                .deliveries
                .iter()
                .map(|d| {
                    vec![
                        d.id.to_string(),
                        d.status.clone(),
                        d.attempts.to_string(),
                        d.last_status_code
                            .map_or_else(|| "-".into(), |c| c.to_string()),
                        when(d.last_attempt_at),
                        when(d.next_try_at),
                        format!("{} #{} {}", d.event.job_id, d.event.seq, d.event.kind),
                        crate::wire::input::escaped(d.last_error.as_deref().unwrap_or("")),
                    ]
                })
                .collect();
            print_table(
                &[
                    "ID", "STATUS", "TRIES", "CODE", "LAST TRY", "NEXT TRY", "EVENT", "ERROR",
                ],
                &rows,
            );
        }
        WebhooksCommand::Redeliver { name, delivery } => {
            let d = client.redeliver(&name, delivery).await?;
            if conn.json {
                print_json(&d);
            } else {
                println!("delivery {} queued (redelivers {delivery})", d.id);
            }
        }
    }
    Ok(0)
}
