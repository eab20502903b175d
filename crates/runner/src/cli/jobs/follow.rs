//! Following a job (`submit --wait`, `logs --follow`): every event is printed once, in `seq`
//! order, and the follow ends only on the job's terminal `state` event, so every line the
//! runner shipped before its report has been printed. A lost connection is retried with
//! back-off, resuming after the last `seq` seen.

use uuid::Uuid;

use super::render::{note, outcome_text, Printer, Show};
use crate::client::Client;
use crate::wire::{Event, Job};

fn is_terminal_state(e: &Event) -> bool {
    e.kind == "state"
        && !matches!(
            e.data["state"].as_str(),
            Some("parked") | Some("leased") | None
        )
}

/// Print a job's events as they arrive until it ends; returns the ended job.
pub(super) async fn follow_job(client: &Client, id: Uuid, mode: Show) -> anyhow::Result<Job> {
    let mut after = 0i64;
    let mut failures = 0u32;
    let mut printer = Printer::new(mode, id);
    loop {
        let page = match client.events(id, after, 30_000).await {
            Ok(p) => {
                failures = 0;
                p
            }
            Err(e) if e.is_transient() && failures < 30 => {
                if failures == 0 {
                    note(id, &format!("lost the service ({e}); retrying"));
                }
                tokio::time::sleep(crate::client::backoff(failures.min(5))).await;
                failures += 1;
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        let mut ended = false;
        for e in &page.events {
            printer.print(e);
            ended |= is_terminal_state(e);
        }
        after = page.next;
        if ended {
            break;
        }
        if page.events.is_empty() {
            // A wait ends at once for a terminal job: it may have ended before we looked.
            let job = client.job(id).await?;
            if job.is_terminal() {
                let rest = client.events(id, after, 0).await?;
                for e in &rest.events {
                    printer.print(e);
                }
                return finish(job, mode);
            }
        }
    }
    let job = client.job(id).await?;
    finish(job, mode)
}

/// The follow's last line (`submit --wait`): how the job ended, in words.
fn finish(job: Job, mode: Show) -> anyhow::Result<Job> {
    if mode == Show::Everything {
        if let Some(text) = outcome_text(&job) {
            note(job.id, &text);
        }
    }
    Ok(job)
}
