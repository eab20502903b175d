//! The `command` job kind, the one kind the reference runner executes: its payload (what the
//! CLI dispatches and the runner parses) and its result (what the runner reports with
//! `complete` and the CLI reads back). Defined once here so the dispatching and the running
//! side cannot drift apart.
//!
//! Invariant: a job is either understood completely or refused with a message naming the
//! field; a half-understood payload never runs. A refusal is reported with `fail` (the runner
//! could not run it at all), never as a command result.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

/// The job kind whose payload is a [`CommandSpec`] and whose result is a [`CommandResult`].
pub const COMMAND_KIND: &str = "command";

/// `{"argv": [...], "env": {}, "cwd": optional, "timeout_s": optional, "stdin": optional}`.
#[derive(Debug, Clone, PartialEq)]
pub struct CommandSpec {
    /// Program and arguments; never empty.
    pub argv: Vec<String>,
    /// Added to (and overriding) the environment the command inherits.
    pub env: BTreeMap<String, String>,
    /// Relative paths are inside the job's work directory.
    pub cwd: Option<String>,
    pub timeout: Option<Duration>,
    /// Written to the command's standard input, then closed; absent means `/dev/null`.
    pub stdin: Option<String>,
    /// Globs of files under the work directory uploaded as artifacts once the command ends,
    /// whatever its exit (v1.2).
    pub artifacts: Vec<String>,
}

/// Longest `timeout_s` accepted: a week.
pub const MAX_TIMEOUT_S: f64 = 7.0 * 24.0 * 3600.0;

impl CommandSpec {
    /// The command `argv` with nothing else set.
    pub fn new(argv: Vec<String>) -> Self {
        Self {
            argv,
            env: BTreeMap::new(),
            cwd: None,
            timeout: None,
            stdin: None,
            artifacts: Vec::new(),
        }
    }

    /// The job payload that [`parse`] reads back as this spec.
    pub fn to_payload(&self) -> Value {
        let mut p = json!({ "argv": self.argv, "env": self.env });
        if let Some(cwd) = &self.cwd {
            p["cwd"] = json!(cwd);
        }
        if let Some(t) = self.timeout {
            p["timeout_s"] = json!(t.as_secs_f64());
        }
        if let Some(s) = &self.stdin {
            p["stdin"] = json!(s);
        }
        if !self.artifacts.is_empty() {
            p["artifacts"] = json!(self.artifacts);
        }
        p
    }
}

/// A `timeout_s` as a duration, if it is in range: a number of seconds in
/// (0, [`MAX_TIMEOUT_S`]].
pub fn timeout_from_secs(s: f64) -> Option<Duration> {
    (s > 0.0 && s <= MAX_TIMEOUT_S).then(|| Duration::from_secs_f64(s))
}

/// How a command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Exited with status 0.
    Succeeded,
    /// Exited with a non-zero status.
    Failed,
    /// Killed by a signal it did not ask for from us.
    Signalled,
    /// Ran past `timeout_s` and was killed.
    TimedOut,
    /// Never ran: the executable or working directory is missing or not usable.
    StartFailed,
}

/// The `result` reported with `complete`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CommandResult {
    pub outcome: Outcome,
    /// The exit status; for a command that could not start, 127 (not found) or 126 (not
    /// executable), as a shell reports them; `null` when killed by a signal.
    pub exit_code: Option<i32>,
    /// The signal that ended it, if one did.
    pub signal: Option<i32>,
    pub timed_out: bool,
    pub duration_ms: u64,
    pub stdout_tail: String,
    pub stderr_tail: String,
    /// Why it could not start, for [`Outcome::StartFailed`].
    pub error: Option<String>,
}

/// The exit status a completed command's `result` stands for, as a shell reports it: 124 for
/// a timeout (as `timeout(1)`), 128+N for signal N, else the command's own (0 when the result
/// says nothing, as from a runner of another kind).
pub fn exit_status(result: &Value) -> i32 {
    if result["timed_out"].as_bool() == Some(true) {
        return 124;
    }
    if let Some(code) = result["exit_code"].as_i64() {
        return code as i32;
    }
    if let Some(sig) = result["signal"].as_i64() {
        return 128 + sig as i32;
    }
    0
}

/// Parse a leased job's kind and payload.
///
/// # Errors
/// A human message naming what is wrong: the kind is not `command`, or a field is missing or
/// of the wrong type.
pub fn parse(kind: &str, payload: &Value) -> Result<CommandSpec, String> {
    if kind != COMMAND_KIND {
        return Err(format!(
            "unsupported job kind '{kind}': this runner runs '{COMMAND_KIND}' jobs"
        ));
    }
    let obj = payload
        .as_object()
        .ok_or("payload: must be an object {\"argv\": [...]}")?;
    let argv = match obj.get("argv") {
        Some(Value::Array(items)) if !items.is_empty() => items
            .iter()
            .enumerate()
            .map(|(i, v)| {
                v.as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| format!("payload.argv[{i}]: must be a string"))
            })
            .collect::<Result<Vec<_>, _>>()?,
        Some(Value::Array(_)) => return Err("payload.argv: must not be empty".into()),
        Some(_) => return Err("payload.argv: must be an array of strings".into()),
        None => return Err("payload.argv: required".into()),
    };
    if argv[0].is_empty() {
        return Err("payload.argv[0]: must not be empty".into());
    }
    if argv.iter().any(|a| a.contains('\0')) {
        return Err("payload.argv: must not contain NUL bytes".into());
    }
    let mut env = BTreeMap::new();
    match obj.get("env") {
        None | Some(Value::Null) => {}
        Some(Value::Object(m)) => {
            for (k, v) in m {
                if k.is_empty() || k.contains('=') || k.contains('\0') {
                    return Err(format!("payload.env: '{k}' is not a variable name"));
                }
                let v = v
                    .as_str()
                    .ok_or_else(|| format!("payload.env.{k}: must be a string"))?;
                if v.contains('\0') {
                    return Err(format!("payload.env.{k}: must not contain NUL bytes"));
                }
                env.insert(k.clone(), v.to_owned());
            }
        }
        Some(_) => return Err("payload.env: must be an object of strings".into()),
    }
    let cwd = match obj.get("cwd") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if !s.is_empty() && !s.contains('\0') => Some(s.clone()),
        Some(_) => return Err("payload.cwd: must be a non-empty string".into()),
    };
    let timeout = match obj.get("timeout_s") {
        None | Some(Value::Null) => None,
        Some(v) => match v.as_f64().and_then(timeout_from_secs) {
            Some(t) => Some(t),
            None => {
                return Err(format!(
                    "payload.timeout_s: must be a number of seconds in (0, {MAX_TIMEOUT_S}]"
                ))
            }
        },
    };
    let stdin = match obj.get("stdin") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => return Err("payload.stdin: must be a string".into()),
    };
    let artifacts = artifact_globs(obj.get("artifacts"))?;
    Ok(CommandSpec {
        argv,
        env,
        cwd,
        timeout,
        stdin,
        artifacts,
    })
}

/// Most globs a job's `artifacts` may list.
pub const MAX_ARTIFACT_GLOBS: usize = 100;

/// `payload.artifacts`: absent, or up to [`MAX_ARTIFACT_GLOBS`] globs relative to the work
/// directory (`*` and `?` within a segment, `**` for any number of segments), none absolute
/// and none with a `..` segment.
fn artifact_globs(value: Option<&Value>) -> Result<Vec<String>, String> {
    let items = match value {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(items)) if items.len() <= MAX_ARTIFACT_GLOBS => items,
        Some(_) => {
            return Err(format!(
                "payload.artifacts: must be an array of at most {MAX_ARTIFACT_GLOBS} globs"
            ))
        }
    };
    items
        .iter()
        .enumerate()
        .map(|(i, v)| match v.as_str() {
            Some(g)
                if !g.is_empty()
                    && g.len() <= 1024
                    && !g.starts_with('/')
                    && !g.contains('\0')
                    && !g.split('/').any(|s| s == "..") =>
            {
                Ok(g.trim_end_matches('/').to_owned())
            }
            _ => Err(format!(
                "payload.artifacts[{i}]: must be a glob relative to the work directory, \
                 without '..'"
            )),
        })
        .collect()
}

/// One word of a command for `sh`: as it is when it holds only plain characters, else in single
/// quotes (a `'` in it as `'\''`), so a pasted line passes it as one word, expanding nothing.
pub fn shell_word(word: &str) -> String {
    if !word.is_empty()
        && word
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/._-:=,+@%".contains(&b))
    {
        return word.to_owned();
    }
    format!("'{}'", word.replace('\'', "'\\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_payload_parses() {
        let spec = parse(
            "command",
            &json!({"argv": ["sh", "-c", "echo hi"], "env": {"A": "1"}, "cwd": "sub",
                    "timeout_s": 1.5, "stdin": "x"}),
        )
        .unwrap();
        assert_eq!(spec.argv, ["sh", "-c", "echo hi"]);
        assert_eq!(spec.env["A"], "1");
        assert_eq!(spec.cwd.as_deref(), Some("sub"));
        assert_eq!(spec.timeout, Some(Duration::from_millis(1500)));
        assert_eq!(spec.stdin.as_deref(), Some("x"));
    }

    #[test]
    fn a_spec_round_trips_through_its_payload() {
        let mut spec = CommandSpec::new(vec!["sh".into(), "-c".into(), "exit 3".into()]);
        spec.env.insert("A".into(), "1".into());
        spec.cwd = Some("sub".into());
        spec.timeout = Some(Duration::from_millis(1500));
        spec.stdin = Some("x".into());
        spec.artifacts = vec!["dist/**".into(), "report.xml".into()];
        assert_eq!(parse(COMMAND_KIND, &spec.to_payload()).unwrap(), spec);
        let bare = CommandSpec::new(vec!["true".into()]);
        assert_eq!(parse(COMMAND_KIND, &bare.to_payload()).unwrap(), bare);
    }

    #[test]
    fn exit_statuses_follow_the_shell() {
        assert_eq!(exit_status(&json!({"exit_code": 3})), 3);
        assert_eq!(exit_status(&json!({"exit_code": null, "signal": 9})), 137);
        assert_eq!(
            exit_status(&json!({"exit_code": null, "signal": 15, "timed_out": true})),
            124
        );
        assert_eq!(exit_status(&Value::Null), 0);
    }

    #[test]
    fn what_cannot_be_understood_is_refused_naming_the_field() {
        let cases = [
            ("shell", json!({"argv": ["true"]}), "kind"),
            ("command", json!([1]), "payload"),
            ("command", json!({}), "argv"),
            ("command", json!({"argv": []}), "argv"),
            ("command", json!({"argv": [1]}), "argv[0]"),
            (
                "command",
                json!({"argv": ["true"], "env": {"A": 1}}),
                "env.A",
            ),
            (
                "command",
                json!({"argv": ["true"], "timeout_s": -1}),
                "timeout_s",
            ),
            ("command", json!({"argv": ["true"], "stdin": 5}), "stdin"),
            (
                "command",
                json!({"argv": ["true"], "artifacts": "x"}),
                "artifacts",
            ),
            (
                "command",
                json!({"argv": ["true"], "artifacts": ["/etc/*"]}),
                "artifacts[0]",
            ),
            (
                "command",
                json!({"argv": ["true"], "artifacts": ["a", "../x"]}),
                "artifacts[1]",
            ),
            (
                "command",
                json!({"argv": ["true"], "artifacts": [""]}),
                "artifacts[0]",
            ),
        ];
        for (kind, payload, field) in cases {
            let err = parse(kind, &payload).unwrap_err();
            assert!(err.contains(field), "{err} should name {field}");
        }
    }
}
