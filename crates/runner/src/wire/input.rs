//! What people and pasted payloads hand us, read and echoed safely: URL schemes compared
//! without regard to case (`HTTP://` is plain HTTP, as every HTTP client takes it), and text
//! echoed in messages with its control characters escaped, durations as people write them
//! (`5m`), and ids as people type them (a start or end of one, hyphens or not).
//!
//! Invariants: [`is_https`] is true only for an `https://` URL in any case, [`is_plain_http`]
//! only for `http://` in any case, so no caller that refuses plain HTTP can be passed it in
//! capitals; [`escaped`] leaves no control character but the newline (and no bidirectional
//! override) in what it returns, so a pasted payload's escape sequences never reach a terminal.

/// Whether `url` starts with `scheme` followed by `://`, the scheme compared without regard to
/// case (leading blanks ignored).
fn has_scheme(url: &str, scheme: &str) -> bool {
    let url = url.trim_start();
    url.get(..scheme.len())
        .is_some_and(|s| s.eq_ignore_ascii_case(scheme))
        && url
            .get(scheme.len()..)
            .is_some_and(|rest| rest.starts_with("://"))
}

/// Whether `url` is an `https://` URL.
pub fn is_https(url: &str) -> bool {
    has_scheme(url, "https")
}

/// Whether `url` is a plain `http://` URL.
pub fn is_plain_http(url: &str) -> bool {
    has_scheme(url, "http")
}

/// Whether `url` is an `http://` or `https://` URL.
pub fn is_web(url: &str) -> bool {
    is_https(url) || is_plain_http(url)
}

/// `text` with every control character but the newline, and every bidirectional formatting
/// character, written as a Rust escape (`\u{1b}`, `\r`), for echoing untrusted input.
pub fn escaped(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        let bidi = matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}');
        if c != '\n' && (c.is_control() || bidi) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// A duration flag in seconds: a number of seconds (`90`, `1.5`), or one with a unit (`ms`,
/// `s`, `m`, `h`: `500ms`, `5m`, `1.5h`).
///
/// # Errors
/// Not a non-negative number, or an unknown unit; the message shows the forms.
pub fn parse_seconds(text: &str) -> Result<f64, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let n: f64 = number
        .parse()
        .ok()
        .filter(|n: &f64| n.is_finite() && *n >= 0.0)
        .ok_or_else(|| format!("{text:?}: expected a duration such as 90s, 5m, 1h or 500ms"))?;
    let scale = match unit.trim() {
        "" | "s" => 1.0,
        "ms" => 0.001,
        "m" => 60.0,
        "h" => 3600.0,
        _ => return Err(format!("{text:?}: the unit must be ms, s, m or h")),
    };
    Ok(n * scale)
}

/// The hex digits of `text` (hyphens dropped, lower case) when it can be a whole id or a start
/// or end of one: 4 to 32 hex digits. The CLI resolves a short id with it, and the job list's
/// search (`q`) matches ids by it, so both read the same text as an id.
pub fn id_digits(text: &str) -> Option<String> {
    let hex: String = text
        .trim()
        .chars()
        .filter(|c| *c != '-')
        .map(|c| c.to_ascii_lowercase())
        .collect();
    ((4..=32).contains(&hex.len()) && hex.chars().all(|c| c.is_ascii_hexdigit())).then_some(hex)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn id_digits_are_four_to_thirty_two_hex_digits_without_hyphens() {
        assert_eq!(id_digits("01A2499E").as_deref(), Some("01a2499e"));
        assert_eq!(
            id_digits(" 01a2499e-80db ").as_deref(),
            Some("01a2499e80db")
        );
        let whole = "01a2499e-80db-7000-8000-0123456789ab";
        assert_eq!(id_digits(whole).map(|h| h.len()), Some(32));
        for bad in ["", "01a", "xyz12345", "make", &format!("{whole}0")] {
            assert!(id_digits(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn schemes_are_compared_without_regard_to_case() {
        for u in ["https://a", "HTTPS://a", "HttpS://a", " https://a"] {
            assert!(is_https(u) && !is_plain_http(u) && is_web(u), "{u}");
        }
        for u in ["http://a", "HTTP://a", "hTtP://a"] {
            assert!(is_plain_http(u) && !is_https(u) && is_web(u), "{u}");
        }
        for u in [
            "",
            "http",
            "https:/a",
            "ftp://a",
            "httpx://a",
            "éhttps://",
            "http:://a",
        ] {
            assert!(!is_web(u), "{u}");
        }
    }

    #[test]
    fn control_characters_are_escaped() {
        assert_eq!(
            escaped("a\u{1b}[31mb\r\nc\u{7}"),
            "a\\u{1b}[31mb\\r\nc\\u{7}"
        );
        assert_eq!(escaped("x\u{202e}y"), "x\\u{202e}y");
        assert_eq!(escaped("plain ünïcode\n"), "plain ünïcode\n");
    }
}
