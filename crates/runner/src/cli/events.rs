//! `leasehold events [--follow] [--kinds ...] [--after CURSOR]`: the workspace feed (v1.4), a
//! line per event, like `kubectl get events -w`.
//!
//! Invariant: it only follows the cursors the service answers (`next`), so a followed feed
//! shows every event once, in commit order, and `--after` with the last cursor printed
//! (`--json` prints each event with its `cursor`) resumes exactly where it stopped.

use clap::Args;
use serde_json::Value;

use super::{print_json, Conn};
use crate::wire;

#[derive(Debug, Args)]
pub struct EventsArgs {
    /// Keep reading as events come (long-polls); stop with Ctrl-C.
    #[arg(long, short = 'f')]
    pub follow: bool,
    /// Event kinds to show (repeatable or comma-separated; default `state`).
    #[arg(long, value_delimiter = ',', value_name = "KIND")]
    pub kinds: Vec<String>,
    /// Start after this cursor (one printed by `--json`, or a `next`); default: the oldest kept.
    #[arg(long, value_name = "CURSOR")]
    pub after: Option<String>,
    /// Events per call (1..1000).
    #[arg(long, default_value_t = 100)]
    pub limit: i64,
}

/// One event for people: time, job, seq, kind and what happened.
pub fn line(e: &wire::FeedEvent) -> String {
    let what = match e.kind.as_str() {
        "state" => {
            let mut s = e.data["state"].as_str().unwrap_or("?").to_owned();
            for key in ["reason", "by", "runner"] {
                match &e.data[key] {
                    Value::Null => {}
                    Value::String(v) => s.push_str(&format!(" {key}={v}")),
                    v => s.push_str(&format!(" {key}={v}")),
                }
            }
            s
        }
        _ => match &e.data {
            Value::Object(o) if o.len() == 1 => match o.values().next() {
                Some(Value::String(s)) => s.clone(),
                Some(v) => v.to_string(),
                None => String::new(),
            },
            v => v.to_string(),
        },
    };
    crate::wire::input::escaped(&format!(
        "{}  {}  {:>3}  {:<7} {what}",
        e.at.format("%Y-%m-%d %H:%M:%S%.3fZ"),
        e.job_id,
        e.seq,
        e.kind
    ))
}

/// # Errors
/// The service refused the call or could not be reached.
pub async fn run(conn: &Conn, args: EventsArgs) -> anyhow::Result<i32> {
    let client = conn.client()?;
    let mut after = args.after;
    let wait = if args.follow { 30_000 } else { 0 };
    loop {
        let page = client
            .feed(after.as_deref(), &args.kinds, Some(args.limit), wait)
            .await?;
        for e in &page.events {
            if conn.json {
                println!(
                    "{}",
                    serde_json::to_string(e).expect("wire types serialise")
                );
            } else {
                println!("{}", line(e));
            }
        }
        let done = page.events.is_empty() && !args.follow;
        after = Some(page.next);
        if done {
            if conn.json {
                print_json(&serde_json::json!({ "next": after }));
            }
            return Ok(0);
        }
    }
}
