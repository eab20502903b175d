//! Runner versions: semver 2.0 parsing and precedence, and when a runner is outdated.
//!
//! Invariant: versions compare by semver precedence, never as text (1.10.0 > 1.2.0; a
//! pre-release is lower than its release; build metadata is ignored). A version that is absent
//! or not semver 2.0 (`v1.2.3`, `1.2`) counts as outdated whenever a minimum is set.

pub use semver::Version;

/// Parse a semver 2.0 version (`1.2.3`, `1.2.3-rc.1+build.5`); `v1.2.3` is not one.
pub fn parse(text: &str) -> Option<Version> {
    Version::parse(text).ok()
}

/// `version` is below `min` (or unusable) while a minimum is set.
pub fn is_outdated(version: Option<&str>, min: Option<&Version>) -> bool {
    let Some(min) = min else {
        return false;
    };
    match version.and_then(parse) {
        Some(v) => v.cmp_precedence(min).is_lt(),
        None => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn min(s: &str) -> Version {
        parse(s).unwrap()
    }

    #[test]
    fn precedence_is_numeric_not_textual() {
        let m = min("1.2.0");
        assert!(!is_outdated(Some("1.10.0"), Some(&m)));
        assert!(is_outdated(Some("1.1.9"), Some(&m)));
        assert!(!is_outdated(Some("1.2.0"), Some(&m)));
        assert!(is_outdated(Some("0.99.99"), Some(&min("1.0.0"))));
        assert!(!is_outdated(Some("10.0.0"), Some(&min("9.0.0"))));
    }

    #[test]
    fn a_pre_release_is_lower_than_its_release_and_build_metadata_is_ignored() {
        let m = min("1.2.0");
        assert!(is_outdated(Some("1.2.0-rc.1"), Some(&m)));
        assert!(!is_outdated(Some("1.2.1-rc.1"), Some(&m)));
        assert!(!is_outdated(Some("1.2.0+build.7"), Some(&m)));
        assert!(is_outdated(
            Some("1.2.0-alpha"),
            Some(&min("1.2.0-alpha.1"))
        ));
        assert!(is_outdated(
            Some("1.2.0-alpha.9"),
            Some(&min("1.2.0-alpha.10"))
        ));
    }

    #[test]
    fn absent_or_not_semver_is_outdated_only_when_a_minimum_is_set() {
        let m = min("1.0.0");
        for bad in [None, Some("v1.2.3"), Some("1.2"), Some(""), Some("latest")] {
            assert!(is_outdated(bad, Some(&m)), "{bad:?}");
            assert!(!is_outdated(bad, None), "{bad:?}");
        }
    }
}
