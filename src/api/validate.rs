//! Range and shape checks shared by the handlers; every error names its field.

use std::sync::LazyLock;

use regex_lite::Regex;

use super::error::ApiError;
use crate::domain::sealing;
use crate::store::Advertised;
use crate::wire::{AdvertisedTarget, Source};

static JOB_KIND: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^[a-z][a-z0-9_.-]{0,63}$").expect("regex"));
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
pub fn repo_targets(targets: Option<&[AdvertisedTarget]>) -> Result<Advertised, ApiError> {
    let mut out = Advertised::default();
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

/// A job's repository source: provider `git`, a repository, a full commit (40 lowercase hex),
/// an optional ref (metadata) and an optional credential secret name.
///
/// # Errors
/// 400 naming the field (`source.commit_sha`).
pub fn source(source: &Source) -> Result<(), ApiError> {
    if source.provider != "git" {
        return Err(ApiError::bad("source.provider: must be \"git\""));
    }
    text("source.repository", &source.repository, 2048)?;
    let sha = source.commit_sha.as_bytes();
    if sha.len() != 40
        || !sha
            .iter()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b))
    {
        return Err(ApiError::bad(
            "source.commit_sha: must be a full commit id, 40 lowercase hexadecimal characters",
        ));
    }
    opt_text("source.ref", source.git_ref.as_deref(), 255)?;
    if let Some(name) = &source.credential_secret {
        if !sealing::is_valid_name(name) {
            return Err(ApiError::bad(
                "source.credential_secret: must match ^[A-Z_][A-Z0-9_]{0,63}$",
            ));
        }
    }
    Ok(())
}
