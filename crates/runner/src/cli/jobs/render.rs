//! How `leasehold job` shows jobs and events to people: the command's output as it was, state
//! changes and leasehold's own notes on stderr prefixed `leasehold:`, and `job get`'s table
//! (rows for the fields people read, then any other field of the wire `Job` by its name).

use std::io::Write;

use serde_json::Value;
use uuid::Uuid;

use super::super::when;
use crate::wire::{Event, Job};

/// What a follower prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Show {
    /// Output and state changes (`submit --wait`).
    Everything,
    /// Output only (`logs`).
    Output,
    /// Every event as one JSON line (`logs --json`).
    Json,
    /// Nothing; the caller prints the final job (`submit --wait --json`).
    Quiet,
}

pub(super) fn note(_id: Uuid, text: &str) {
    eprintln!("leasehold: {text}");
}

/// Which run of a job its events are about, numbered as people read them everywhere
/// (`submit --wait`, `job logs`, `job get`, the page): attempt N is the job's N-th try, its
/// `retries` + 1 (a retry, by the policy or `job retry`, starts the next; the re-park's event
/// says which attempt ended, `"attempt": N`), and each try's leases are counted within it, as
/// the contract's `attempts` counts them (a lease released or lapsed is re-delivered as lease
/// 2 of the same attempt).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempts {
    pub attempt: i64,
    /// Leases of this attempt so far (0 before its first).
    pub lease: i64,
    /// What ended the last lease, until the next one starts.
    ended: Option<String>,
}

impl Default for Attempts {
    fn default() -> Self {
        Self {
            attempt: 1,
            lease: 0,
            ended: None,
        }
    }
}

/// A lease that started: where its output begins.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseStart {
    pub attempt: i64,
    pub lease: i64,
    pub runner: String,
    pub epoch: i64,
    /// What ended the lease before it (`released`, `lease_lapsed`, a retry's reason).
    pub after: Option<String>,
}

impl LeaseStart {
    /// `attempt 2` or `attempt 1, lease 2`.
    pub fn name(&self) -> String {
        if self.lease > 1 {
            format!("attempt {}, lease {}", self.attempt, self.lease)
        } else {
            format!("attempt {}", self.attempt)
        }
    }

    /// The first lease of the job: nothing came before it.
    pub fn is_first(&self) -> bool {
        self.attempt == 1 && self.lease == 1
    }
}

impl Attempts {
    /// Take a `state` event's data; a lease that starts is returned.
    pub fn on_state(&mut self, data: &Value) -> Option<LeaseStart> {
        match (data["state"].as_str(), data["reason"].as_str()) {
            (Some("parked"), Some("retry")) => {
                let ended = data["attempt"].as_i64().unwrap_or(self.attempt);
                self.attempt = ended + 1;
                self.lease = 0;
                self.ended = Some(format!(
                    "attempt {ended} ended: {}",
                    data["after"].as_str().unwrap_or("retry")
                ));
                None
            }
            (Some("parked"), Some("dispatched") | None) => None,
            (Some("parked"), Some(reason)) => {
                self.ended = Some(reason.to_owned());
                None
            }
            (Some("leased"), _) => {
                self.lease += 1;
                Some(LeaseStart {
                    attempt: self.attempt,
                    lease: self.lease,
                    runner: data["runner"].as_str().unwrap_or("?").to_owned(),
                    epoch: data["epoch"].as_i64().unwrap_or(0),
                    after: self.ended.take(),
                })
            }
            _ => None,
        }
    }
}

fn state_note(id: Uuid, data: &Value, lease: Option<&LeaseStart>) -> Option<String> {
    let state = data["state"].as_str().unwrap_or("?");
    let reason = data["reason"].as_str();
    let runner = data["runner"].as_str().unwrap_or("?");
    Some(match (state, reason) {
        ("parked", Some("dispatched")) | ("parked", None) => {
            format!("job {id} parked, waiting for a runner")
        }
        ("parked", Some("lease_lapsed")) => {
            format!("runner {runner} stopped heartbeating; parked again for re-delivery")
        }
        ("parked", Some("released")) => {
            format!("runner {runner} released it (draining); parked again")
        }
        ("parked", Some("retry")) => format!(
            "attempt {} ended ({}); parked again for a retry",
            data["attempt"],
            data["after"].as_str().unwrap_or("?")
        ),
        ("parked", Some(r)) => format!("parked again ({r})"),
        ("leased", _) => match lease {
            Some(l) if l.lease > 1 => {
                format!("re-delivered: leased by runner {runner} ({})", l.name())
            }
            Some(l) if !l.is_first() => format!("leased by runner {runner} ({})", l.name()),
            _ => format!("leased by runner {runner}"),
        },
        ("completed", _) => format!("finished on runner {runner}"),
        // Another end: the follow's last line says how the job ended, and why.
        (s, _) if crate::wire::JobState::parse(s).is_some_and(|s| s.is_terminal()) => return None,
        (s, Some(r)) => format!("{s} ({r})"),
        (s, None) => s.to_owned(),
    })
}

/// Prints a job's events in order, knowing which attempt and lease each belongs to.
pub(super) struct Printer {
    mode: Show,
    id: Uuid,
    attempts: Attempts,
    /// Standard output ended with a newline (or nothing was written yet).
    at_line_start: bool,
}

impl Printer {
    pub(super) fn new(mode: Show, id: Uuid) -> Self {
        Self {
            mode,
            id,
            attempts: Attempts::default(),
            at_line_start: true,
        }
    }

    pub(super) fn print(&mut self, e: &Event) {
        let (mode, id) = (self.mode, self.id);
        if mode == Show::Json {
            println!("{}", serde_json::to_string(e).expect("events serialise"));
            return;
        }
        if mode == Show::Quiet {
            return;
        }
        // A chunk (`text`, many lines, exactly as written) or, from older runners, one `line`.
        let text = match (e.data["text"].as_str(), e.data["line"].as_str()) {
            (Some(t), _) => Some(std::borrow::Cow::Borrowed(t)),
            (None, Some(l)) => Some(std::borrow::Cow::Owned(format!("{l}\n"))),
            (None, None) => None,
        };
        match (e.kind.as_str(), text) {
            ("stdout", Some(t)) => {
                let mut out = std::io::stdout().lock();
                let _ = out.write_all(t.as_bytes());
                let _ = out.flush();
                if !t.is_empty() {
                    self.at_line_start = t.ends_with('\n');
                }
            }
            ("stderr", Some(t)) => {
                let mut err = std::io::stderr().lock();
                let _ = err.write_all(t.as_bytes());
                let _ = err.flush();
            }
            ("state", _) => {
                let lease = self.attempts.on_state(&e.data);
                if mode == Show::Everything {
                    if let Some(text) = state_note(id, &e.data, lease.as_ref()) {
                        note(id, &text);
                    }
                } else if let Some(l) = lease.filter(|l| !l.is_first()) {
                    // `job logs`: where this lease's output starts, between the outputs.
                    let mut out = std::io::stdout().lock();
                    let newline = if self.at_line_start { "" } else { "\n" };
                    let after = l.after.as_deref().map(|a| format!(" (after: {a})"));
                    let _ = writeln!(
                        out,
                        "{newline}--- {}: runner {}, epoch {}{} ---",
                        l.name(),
                        l.runner,
                        l.epoch,
                        after.unwrap_or_default()
                    );
                    let _ = out.flush();
                    self.at_line_start = true;
                }
            }
            ("output.dropped", _) => note(
                id,
                &match e.data["lines"].as_u64() {
                    Some(lines) => format!("{lines} lines of output were dropped"),
                    None => format!(
                        "{} bytes of output were dropped (a job streams at most {} bytes, and \
                         a batch no replica took within a minute is dropped)",
                        e.data["bytes"], e.data["limit_bytes"]
                    ),
                },
            ),
            _ => {}
        }
    }
}

pub(super) fn target_text(job: &Job) -> String {
    let owner = &job.owner;
    match job.runner_id.as_str() {
        "*" if owner.starts_with("ws:") => "workspace pool".into(),
        "*" => format!("{owner}'s pool"),
        id => format!("runner {id}"),
    }
}

/// Why a parked job waits (v1.4 `waiting`), in words with its code, its target and what it
/// requires; `None` when it does not wait on anything.
pub(crate) fn waiting_text(job: &Job) -> Option<String> {
    let code = job.waiting.as_deref()?;
    let target = target_text(job);
    let needs = if job.required_capabilities.is_empty() {
        String::new()
    } else {
        format!(" requiring {}", job.required_capabilities.join(", "))
    };
    let words = match code {
        "no_matching_runner" => format!(
            "no runner of the {target} can take a job{needs} (none is enrolled there, or none \
             advertises that); it stays parked until one is, then fails no_runner; enrol one \
             (leasehold join-code create) or dispatch to another target (--pool)"
        ),
        "no_runner_online" => format!(
            "runners of the {target} could take a job{needs}, but none is online; start one"
        ),
        "all_busy" => format!("every slot of the online runners of the {target} is busy"),
        "not_before" => "a retry's delay has not passed yet".to_owned(),
        other => other.to_owned(),
    };
    Some(format!("{code}: {words}"))
}

/// A command job's argv as a shell would read it back (words that need it in single quotes);
/// another kind in parentheses.
pub(super) fn command_text(job: &Job) -> String {
    match job.payload["argv"].as_array() {
        Some(argv) if job.kind == "command" => argv
            .iter()
            .map(|a| crate::wire::command::shell_word(a.as_str().unwrap_or("?")))
            .collect::<Vec<_>>()
            .join(" "),
        _ => format!("({})", job.kind),
    }
}

/// The command's exit code, `SIGNAME` when a signal ended it, `-` when there is none (a live
/// job, or one that did not complete).
pub(super) fn exit_text(job: &Job) -> String {
    let Some(result) = job.result.as_ref() else {
        return "-".into();
    };
    if let Some(code) = result["exit_code"].as_i64() {
        return code.to_string();
    }
    match result["signal"]
        .as_i64()
        .and_then(|s| i32::try_from(s).ok())
    {
        Some(sig) => nix::sys::signal::Signal::try_from(sig)
            .map_or_else(|_| format!("signal {sig}"), |s| s.as_str().to_owned()),
        None => "-".into(),
    }
}

/// How long ago `t` was, in its largest whole unit: `42s`, `5m`, `3h`, `12d`.
pub(super) fn age(now: chrono::DateTime<chrono::Utc>, t: chrono::DateTime<chrono::Utc>) -> String {
    let s = (now - t).num_seconds().max(0);
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m", s / 60),
        3600..172_800 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86_400),
    }
}

/// Which attempt the job is on, as [`Attempts`] numbers them (its retries + 1), `of` the most
/// its retry policy allows: `3 of 3`, or `2` without a policy.
pub(super) fn attempt_text(job: &Job) -> String {
    let n = i64::from(job.retries) + 1;
    match &job.retry {
        Some(p) if n <= p.limit + 1 => format!("{n} of {}", p.limit + 1),
        _ => n.to_string(),
    }
}

/// How a settled job ended, in words: `succeeded`, `failed (exit 3)`, `failed (killed by
/// SIGKILL)`, `failed (timed out)`, `failed (lease_lost: ...)`, `cancelled`, `rejected
/// (no_runner: ...)`; `None` while it is live.
pub fn outcome_text(job: &Job) -> Option<String> {
    use crate::wire::Outcome;
    let outcome = job.outcome.or_else(|| {
        // A server older than v1.3 sends no outcome: judge by the state alone.
        match job.state.as_str() {
            "completed" => Some(Outcome::Succeeded),
            "failed" => Some(Outcome::Failed),
            "cancelled" => Some(Outcome::Cancelled),
            "rejected" => Some(Outcome::Rejected),
            _ => None,
        }
    })?;
    let error = job.error.as_ref().map(|e| {
        let reason = e["reason"].as_str().unwrap_or("?");
        match e["message"].as_str().filter(|m| !m.is_empty()) {
            Some(m) => format!("{reason}: {m}"),
            None => reason.to_owned(),
        }
    });
    let result = job.result.as_ref().unwrap_or(&Value::Null);
    let why = match outcome {
        Outcome::Succeeded => None,
        Outcome::Failed if result["timed_out"].as_bool() == Some(true) => Some("timed out".into()),
        Outcome::Failed if job.state == "completed" => match result["exit_code"].as_i64() {
            Some(code) => Some(format!("exit {code}")),
            None => Some(match exit_text(job).as_str() {
                "-" => "no exit code".to_owned(),
                signal => format!("killed by {signal}"),
            }),
        },
        Outcome::Cancelled => None,
        Outcome::Failed | Outcome::Rejected => error,
    };
    Some(match why {
        Some(w) => format!("{outcome} ({w})"),
        None => outcome.to_string(),
    })
}

/// The wire `Job`'s fields `describe` shows in rows of its own, or leaves out on purpose
/// (`epoch`, `billing_tenant`, `pool`, `secrets`, `source`: `--json` has them).
const DESCRIBED: &[&str] = &[
    "id",
    "workspace",
    "owner",
    "runner_id",
    "state",
    "kind",
    "payload",
    "required_capabilities",
    "priority",
    "epoch",
    "attempts",
    "max_attempts",
    "created_at",
    "leased_at",
    "finished_at",
    "result",
    "error",
    "provenance",
    "billing_tenant",
    "pool",
    "secrets",
    "source",
    "retries",
    "retry",
    "not_before",
    "outcome",
    "dispatched_by",
    "waiting",
];

/// Every other field of the job that has a value (not null, not empty), by its name: a field
/// added to the wire `Job` shows in `job get` as `name value` with no edit here.
fn other_fields(job: &Job) -> Vec<(String, String)> {
    match serde_json::to_value(job) {
        Ok(Value::Object(fields)) => others(fields),
        _ => Vec::new(),
    }
}

fn others(fields: serde_json::Map<String, Value>) -> Vec<(String, String)> {
    fields
        .into_iter()
        .filter(|(name, _)| !DESCRIBED.contains(&name.as_str()))
        .filter_map(|(name, value)| {
            let text = match value {
                Value::Null => return None,
                Value::String(s) => s,
                Value::Array(a) if a.is_empty() => return None,
                Value::Object(o) if o.is_empty() => return None,
                v => v.to_string(),
            };
            Some((name.replace('_', " "), text))
        })
        .collect()
}

/// One line of `describe`'s table. The value is what a job's dispatcher wrote (any member of
/// the workspace): its control characters are escaped, so it cannot drive the reader's
/// terminal.
fn row(name: &str, value: &str) -> String {
    format!("{name:<12} {}", crate::wire::input::escaped(value))
}

pub(super) fn describe(job: &Job) {
    let mut rows: Vec<(&str, String)> =
        vec![("id", job.id.to_string()), ("state", job.state.to_string())];
    if let Some(text) = outcome_text(job) {
        rows.push(("outcome", text));
    }
    rows.extend([
        ("workspace", job.workspace.clone()),
        ("target", target_text(job)),
        ("kind", job.kind.clone()),
    ]);
    if job.kind == "command" {
        rows.push(("command", command_text(job)));
    }
    if !job.required_capabilities.is_empty() {
        rows.push(("requires", job.required_capabilities.join(", ")));
    }
    rows.push(("priority", job.priority.to_string()));
    rows.push(("attempt", attempt_text(job)));
    rows.push((
        "leases",
        format!(
            "{} of {} (of this attempt; max_attempts)",
            job.attempts, job.max_attempts
        ),
    ));
    match &job.retry {
        Some(p) => rows.push((
            "retries",
            format!(
                "{} of {} (on {}{})",
                job.retries,
                p.limit,
                p.on.join(", "),
                if p.delay_ms > 0 {
                    format!(", delay {} ms doubling", p.delay_ms)
                } else {
                    String::new()
                }
            ),
        )),
        None if job.retries > 0 => rows.push(("retries", job.retries.to_string())),
        None => {}
    }
    if let Some(t) = job.not_before {
        rows.push(("not before", when(Some(t))));
    }
    if let Some(by) = &job.dispatched_by {
        rows.push(("by", format!("{} ({})", by.subject, by.role)));
    }
    if let Some(text) = waiting_text(job) {
        rows.push(("waiting", text));
    }
    rows.push(("created", when(Some(job.created_at))));
    rows.push(("leased", when(job.leased_at)));
    rows.push(("finished", when(job.finished_at)));
    if let Some(r) = &job.result {
        for (label, key) in [
            ("exit code", "exit_code"),
            ("signal", "signal"),
            ("duration ms", "duration_ms"),
            ("error", "error"),
        ] {
            match &r[key] {
                Value::Null => {}
                Value::String(s) => rows.push((label, s.clone())),
                v => rows.push((label, v.to_string())),
            }
        }
    }
    if let Some(e) = &job.error {
        rows.push((
            "error",
            format!(
                "{}: {}",
                e["reason"].as_str().unwrap_or("?"),
                e["message"].as_str().unwrap_or("")
            ),
        ));
    }
    if let Some(p) = &job.provenance {
        rows.push((
            "ran on",
            format!("runner {}", p["runner"].as_str().unwrap_or("?")),
        ));
    }
    for (k, v) in rows {
        println!("{}", row(k, &v));
    }
    for (k, v) in other_fields(job) {
        println!("{}", row(&k, &v));
    }
    if let Some(r) = &job.result {
        for (label, key) in [
            ("stdout tail", "stdout_tail"),
            ("stderr tail", "stderr_tail"),
        ] {
            if let Some(t) = r[key].as_str().filter(|t| !t.is_empty()) {
                println!("{label}:");
                for line in t.lines() {
                    println!("  {line}");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job() -> Job {
        serde_json::from_value(serde_json::json!({
            "id": Uuid::nil(), "workspace": "acme", "owner": "alice", "runner_id": "*",
            "state": "parked", "kind": "command", "payload": {"argv": ["true"]},
            "required_capabilities": [], "priority": 0, "epoch": 0, "attempts": 0,
            "max_attempts": 3, "created_at": "2026-01-01T00:00:00Z", "leased_at": null,
            "finished_at": null, "result": null, "error": null, "provenance": null,
            "billing_tenant": null, "pool": "personal", "secrets": [], "source": null,
            "retries": 0, "retry": null, "not_before": null
        }))
        .expect("a wire job")
    }

    /// `DESCRIBED` names only fields the wire `Job` has, so none of them is shown twice or
    /// silently hidden by a stale name; today's fields all have rows of their own.
    #[test]
    fn every_described_name_is_a_field_of_the_wire_job() {
        let Ok(Value::Object(fields)) = serde_json::to_value(job()) else {
            panic!("a job serialises to an object");
        };
        for name in DESCRIBED {
            assert!(
                fields.contains_key(*name),
                "{name} is not a field of wire::Job"
            );
        }
        assert!(other_fields(&job()).is_empty());
    }

    /// What a dispatcher wrote reaches the reader's terminal with its control characters
    /// escaped (issue 35 row 8's rule for echoed input).
    #[test]
    fn a_row_escapes_what_could_drive_a_terminal() {
        assert_eq!(
            row("command", "echo \u{1b}]0;owned\u{7}hi"),
            "command      echo \\u{1b}]0;owned\\u{7}hi"
        );
    }

    fn ended(state: &str, outcome: &str, result: Value, error: Value) -> Job {
        let mut v = serde_json::to_value(job()).unwrap();
        v["state"] = state.into();
        v["outcome"] = outcome.into();
        v["result"] = result;
        v["error"] = error;
        serde_json::from_value(v).unwrap()
    }

    /// The follow's last line and the list's EXIT say how a job ended.
    #[test]
    fn an_ending_reads_in_words() {
        use serde_json::json;
        let cases = [
            (
                ended(
                    "completed",
                    "succeeded",
                    json!({"exit_code": 0}),
                    Value::Null,
                ),
                "succeeded",
                "0",
            ),
            (
                ended("completed", "failed", json!({"exit_code": 3}), Value::Null),
                "failed (exit 3)",
                "3",
            ),
            (
                ended(
                    "completed",
                    "failed",
                    json!({"exit_code": null, "signal": 9}),
                    Value::Null,
                ),
                "failed (killed by SIGKILL)",
                "SIGKILL",
            ),
            (
                ended(
                    "completed",
                    "failed",
                    json!({"exit_code": null, "signal": 15, "timed_out": true}),
                    Value::Null,
                ),
                "failed (timed out)",
                "SIGTERM",
            ),
            (
                ended(
                    "failed",
                    "failed",
                    Value::Null,
                    json!({"reason": "lease_lost", "message": "gone"}),
                ),
                "failed (lease_lost: gone)",
                "-",
            ),
            (
                ended(
                    "cancelled",
                    "cancelled",
                    Value::Null,
                    json!({"reason": "cancelled"}),
                ),
                "cancelled",
                "-",
            ),
            (
                ended(
                    "rejected",
                    "rejected",
                    Value::Null,
                    json!({"reason": "no_runner", "message": ""}),
                ),
                "rejected (no_runner)",
                "-",
            ),
        ];
        for (job, text, exit) in cases {
            assert_eq!(outcome_text(&job).as_deref(), Some(text));
            assert_eq!(exit_text(&job), exit, "{text}");
        }
        assert_eq!(outcome_text(&job()), None, "a live job has no ending");
    }

    #[test]
    fn ages_are_in_their_largest_unit_and_commands_read_back_as_shell() {
        let now = chrono::Utc::now();
        let ago = |s: i64| age(now, now - chrono::Duration::seconds(s));
        assert_eq!(
            [ago(0), ago(59), ago(61), ago(7200), ago(3 * 86_400)],
            ["0s", "59s", "1m", "2h", "3d"]
        );
        let mut v = serde_json::to_value(job()).unwrap();
        v["payload"] = serde_json::json!({"argv": ["sh", "-c", "exit 3", "it's"]});
        let j: Job = serde_json::from_value(v).unwrap();
        assert_eq!(command_text(&j), r"sh -c 'exit 3' 'it'\''s'");
    }

    /// A field `describe` has no row for is shown by name when it has a value.
    #[test]
    fn a_field_without_a_row_is_shown_by_name() {
        let Ok(Value::Object(mut fields)) = serde_json::to_value(job()) else {
            panic!("a job serialises to an object");
        };
        fields.insert("build_label".into(), Value::String("nightly".into()));
        fields.insert("deadline_ms".into(), serde_json::json!(5000));
        fields.insert("tags".into(), serde_json::json!([]));
        fields.insert("note".into(), Value::Null);
        assert_eq!(
            others(fields),
            vec![
                ("build label".to_owned(), "nightly".to_owned()),
                ("deadline ms".to_owned(), "5000".to_owned()),
            ]
        );
    }
}
