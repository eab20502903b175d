//! The contract's artifact path rule, shared by the server (which refuses other paths), the
//! reference runner (which uploads only files whose relative path is one) and the CLI (which
//! writes downloads under a directory by it).
//!
//! Invariant: a valid path is relative, has no empty, `.` or `..` segment and only
//! `[A-Za-z0-9._-]` characters besides its `/` separators, so joined under a directory it
//! names a file inside that directory.

/// Longest artifact path, in characters (each is one byte: the alphabet is ASCII).
pub const MAX_PATH: usize = 255;

/// `path` is 1..255 characters of `[A-Za-z0-9._-]` segments joined by `/`, no `.` or `..`
/// segment.
pub fn is_valid_path(path: &str) -> bool {
    (1..=MAX_PATH).contains(&path.len())
        && path.split('/').all(|seg| {
            !seg.is_empty()
                && seg != "."
                && seg != ".."
                && seg
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        })
}

/// Why `path` is refused, for a 400 message.
pub const PATH_RULE: &str = "path: 1..255 characters of [A-Za-z0-9._-] segments joined by '/', \
                             no '.' or '..' segment";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_contracts_path_rule() {
        for ok in [
            "a",
            "dist/app.tar.gz",
            "report.xml",
            "a/b/c",
            "..a",
            "a..",
            ".hidden",
            "A-Z_0.9",
        ] {
            assert!(is_valid_path(ok), "{ok}");
        }
        let long = "a".repeat(256);
        for bad in [
            "", "/a", "a/", "a//b", ".", "..", "a/./b", "a/../b", "../a", "a b", "a\\b", "é",
            "a?b", "a%2Fb", &long,
        ] {
            assert!(!is_valid_path(bad), "{bad}");
        }
        assert!(is_valid_path(&"a".repeat(255)));
    }
}
