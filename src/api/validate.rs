//! Range and shape checks shared by the handlers; every error names its field.

use std::sync::LazyLock;

use regex_lite::Regex;

use super::error::ApiError;
use crate::domain::sealing;
use crate::store::AdvertisedTargets;
use crate::wire::AdvertisedTarget;

static JOB_KIND: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^[a-z][a-z0-9_.-]{0,63}$").expect("regex"));
static COMMIT_SHA: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^[0-9a-f]{40}$").expect("regex"));
static EVENT_KIND: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^[a-z][a-z0-9_.-]{0,31}$").expect("regex"));

/// `value` or `default`, within `lo..=hi`.
///
/// # Errors
/// 400 naming `field`.
pub fn range(
    field: &str,
    value: Option<i64>,
    lo: i64,
    hi: i64,
    default: i64,
) -> Result<i64, ApiError> {
    match value {
        None => Ok(default),
        Some(v) if (lo..=hi).contains(&v) => Ok(v),
        Some(_) => Err(ApiError::bad(format!("{field}: must be in {lo}..{hi}"))),
    }
}

/// An optional range-checked value without a default.
///
/// # Errors
/// 400 naming `field`.
pub fn opt_range(
    field: &str,
    value: Option<i64>,
    lo: i64,
    hi: i64,
) -> Result<Option<i64>, ApiError> {
    value.map(|v| range(field, Some(v), lo, hi, v)).transpose()
}

/// Text of `1..=max` characters.
///
/// # Errors
/// 400 naming `field`.
pub fn text(field: &str, value: &str, max: usize) -> Result<(), ApiError> {
    let n = value.chars().count();
    if n == 0 || n > max || value.chars().any(char::is_control) {
        return Err(ApiError::bad(format!(
            "{field}: must be 1..{max} printable characters"
        )));
    }
    Ok(())
}

/// Optional text of `1..=max` characters.
///
/// # Errors
/// 400 naming `field`.
pub fn opt_text(field: &str, value: Option<&str>, max: usize) -> Result<(), ApiError> {
    value.map_or(Ok(()), |v| text(field, v, max))
}

/// A job kind: `^[a-z][a-z0-9_.-]{0,63}$`.
///
/// # Errors
/// 400 naming `kind`.
pub fn job_kind(kind: Option<&str>) -> Result<String, ApiError> {
    match kind {
        None => Ok("command".to_owned()),
        Some(k) if JOB_KIND.is_match(k) => Ok(k.to_owned()),
        Some(_) => Err(ApiError::bad("kind: must match ^[a-z][a-z0-9_.-]{0,63}$")),
    }
}

/// A runner event kind: `^[a-z][a-z0-9_.-]{0,31}$`, and never `state` (the server's own).
pub fn is_event_kind(kind: &str) -> bool {
    kind != "state" && EVENT_KIND.is_match(kind)
}

/// PostgreSQL stores no NUL character in text or jsonb; refuse it up front (400, not 500).
///
/// # Errors
/// 400 naming `field`.
pub fn no_nul(field: &str, value: &serde_json::Value) -> Result<(), ApiError> {
    use serde_json::Value;
    let bad = match value {
        Value::String(s) => s.contains('\0'),
        Value::Array(items) => return items.iter().try_for_each(|v| no_nul(field, v)),
        Value::Object(map) => {
            if map.keys().any(|k| k.contains('\0')) {
                true
            } else {
                return map.values().try_for_each(|v| no_nul(field, v));
            }
        }
        _ => false,
    };
    if bad {
        Err(ApiError::bad(format!(
            "{field}: must not contain the NUL character (\\u0000)"
        )))
    } else {
        Ok(())
    }
}

static PROVIDER: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^[a-z][a-z0-9_-]{0,31}$").expect("regex"));

/// Most repository targets one runner may advertise in a call.
pub const MAX_REPO_TARGETS: usize = 100;

/// Repository targets a runner advertises: at most [`MAX_REPO_TARGETS`], each a provider name
/// and a repository of 1..2048 printable characters; repeats are recorded once.
///
/// # Errors
/// 400 naming the field (`repo_targets[3].repository`).
pub fn repo_targets(targets: Option<&[AdvertisedTarget]>) -> Result<AdvertisedTargets, ApiError> {
    let mut out = AdvertisedTargets::default();
    let Some(targets) = targets else {
        return Ok(out);
    };
    if targets.len() > MAX_REPO_TARGETS {
        return Err(ApiError::bad(format!(
            "repo_targets: at most {MAX_REPO_TARGETS} targets"
        )));
    }
    let mut seen = std::collections::BTreeSet::new();
    for (i, t) in targets.iter().enumerate() {
        if !PROVIDER.is_match(&t.provider) {
            return Err(ApiError::bad(format!(
                "repo_targets[{i}].provider: must match ^[a-z][a-z0-9_-]{{0,31}}$ (e.g. git)"
            )));
        }
        text(
            &format!("repo_targets[{i}].repository"),
            &t.repository,
            2048,
        )?;
        opt_text(&format!("repo_targets[{i}].label"), t.label.as_deref(), 128)?;
        if seen.insert((t.provider.clone(), t.repository.clone())) {
            out.push(t.provider.clone(), t.repository.clone(), t.label.clone());
        }
    }
    Ok(out)
}

/// A secret name: `^[A-Z_][A-Z0-9_]{0,63}$` (the rule lives in [`sealing::is_valid_name`]).
pub fn is_secret_name(name: &str) -> bool {
    sealing::is_valid_name(name)
}

/// The secrets a dispatch names: 0..32 valid names, duplicates dropped, order kept.
///
/// # Errors
/// 400 naming `field`.
pub fn secret_names(field: &str, names: Vec<String>) -> Result<Vec<String>, ApiError> {
    if names.len() > 32 {
        return Err(ApiError::bad(format!("{field}: at most 32 names")));
    }
    let mut out: Vec<String> = Vec::with_capacity(names.len());
    for n in names {
        if !is_secret_name(&n) {
            return Err(ApiError::bad(format!(
                "{field}: '{}' must match ^[A-Z_][A-Z0-9_]{{0,63}}$",
                super::extract::truncate(&n, 64)
            )));
        }
        if !out.contains(&n) {
            out.push(n);
        }
    }
    Ok(out)
}

/// A repository source (v1.1): `{"provider":"git","repository":URL,"commit_sha":40 hex,
/// "ref"?, "credential_secret"?}`. Returns it typed (unknown fields dropped) and its match key
/// `provider repository`. The body keeps it as JSON so each 400 names the exact field.
///
/// # Errors
/// 400 naming the offending field.
pub fn source(
    field: &str,
    value: serde_json::Value,
) -> Result<(crate::wire::Source, String), ApiError> {
    use serde_json::Value;
    let Value::Object(map) = &value else {
        return Err(ApiError::bad(format!("{field}: must be an object")));
    };
    let text_field = |name: &str, required: bool, max: usize| -> Result<Option<String>, ApiError> {
        match map.get(name) {
            None | Some(Value::Null) if !required => Ok(None),
            Some(Value::String(s)) if !s.is_empty() && s.len() <= max && !s.contains('\0') => {
                Ok(Some(s.clone()))
            }
            _ => Err(ApiError::bad(format!(
                "{field}.{name}: must be a string of 1..{max} characters"
            ))),
        }
    };
    let provider = text_field("provider", true, 32)?.unwrap_or_default();
    if provider != "git" {
        return Err(ApiError::bad(format!("{field}.provider: must be \"git\"")));
    }
    let repository = text_field("repository", true, 2048)?.unwrap_or_default();
    let sha = text_field("commit_sha", true, 40)?.unwrap_or_default();
    if !COMMIT_SHA.is_match(&sha) {
        return Err(ApiError::bad(format!(
            "{field}.commit_sha: must be 40 lowercase hexadecimal characters"
        )));
    }
    let git_ref = text_field("ref", false, 255)?;
    let credential_secret = text_field("credential_secret", false, 64)?;
    if let Some(name) = &credential_secret {
        if !is_secret_name(name) {
            return Err(ApiError::bad(format!(
                "{field}.credential_secret: must match ^[A-Z_][A-Z0-9_]{{0,63}}$"
            )));
        }
    }
    let key = format!("{provider} {repository}");
    let source = crate::wire::Source {
        provider,
        repository,
        commit_sha: sha,
        git_ref,
        credential_secret,
    };
    Ok((source, key))
}

/// A dispatch's `retry` (v1.2): an object `{"limit": 0..10, "on"?: [reasons], "delay_ms"?:
/// 0..3600000}`, `on` a subset of [`crate::wire::RetryPolicy::REASONS`] (default all three,
/// duplicates dropped), `delay_ms` default 0; other fields are ignored, as everywhere in a
/// request. JSON `null` is no policy. Any error is a 400 naming `field`.
pub fn retry(
    field: &str,
    value: serde_json::Value,
) -> Result<Option<crate::wire::RetryPolicy>, ApiError> {
    use crate::wire::RetryPolicy;
    use serde_json::Value;
    let map = match value {
        Value::Null => return Ok(None),
        Value::Object(map) => map,
        _ => return Err(ApiError::bad(format!("{field}: must be an object"))),
    };
    let int = |name: &str, lo: i64, hi: i64, default: Option<i64>| -> Result<i64, ApiError> {
        match (map.get(name), default) {
            (None | Some(Value::Null), Some(d)) => Ok(d),
            (Some(v), _) if v.as_i64().is_some_and(|n| (lo..=hi).contains(&n)) => {
                Ok(v.as_i64().unwrap_or_default())
            }
            (None | Some(Value::Null), None) => Err(ApiError::bad(format!(
                "{field}.{name}: required, an integer {lo}..{hi}"
            ))),
            _ => Err(ApiError::bad(format!(
                "{field}.{name}: must be an integer {lo}..{hi}"
            ))),
        }
    };
    let limit = int("limit", 0, 10, None)?;
    let delay_ms = int("delay_ms", 0, 3_600_000, Some(0))?;
    let on = match map.get("on") {
        None | Some(Value::Null) => RetryPolicy::REASONS
            .iter()
            .map(|r| (*r).to_owned())
            .collect(),
        Some(Value::Array(items)) => {
            let mut on: Vec<String> = Vec::with_capacity(items.len());
            for item in items {
                match item.as_str() {
                    Some(r) if RetryPolicy::REASONS.contains(&r) => {
                        if !on.iter().any(|o| o == r) {
                            on.push(r.to_owned());
                        }
                    }
                    _ => {
                        return Err(ApiError::bad(format!(
                            "{field}.on: {item} is not one of runner_failed, exit_code, lease_lost"
                        )))
                    }
                }
            }
            on
        }
        Some(_) => {
            return Err(ApiError::bad(format!(
                "{field}.on: must be an array of runner_failed, exit_code, lease_lost"
            )))
        }
    };
    Ok(Some(RetryPolicy {
        limit,
        on,
        delay_ms,
    }))
}
