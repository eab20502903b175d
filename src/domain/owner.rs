//! Owners and tenancy. An owner is a subject (personal tier, own-pays) or `ws:<workspace>`
//! (workspace tier, workspace-pays). It is always derived from the caller, never from a body.
//!
//! Invariant: a valid subject never contains `:`, so no subject can pose as a workspace owner.

/// A workspace id or a subject: 1..=128 of `[A-Za-z0-9._@-]`, starting alphanumeric.
pub fn is_valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 128
        && s.as_bytes()[0].is_ascii_alphanumeric()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'@' | b'-'))
}

/// The owner of workspace-tier runners and workspace pool jobs.
pub fn workspace_owner(workspace: &str) -> String {
    format!("ws:{workspace}")
}

/// Who pays for a job on this owner's queue: the workspace for the workspace tier, nobody
/// (own-pays) for a personal runner.
pub fn billing_tenant(owner: &str) -> Option<String> {
    owner.strip_prefix("ws:").map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subjects_cannot_look_like_workspace_owners() {
        assert!(is_valid_name("alice"));
        assert!(is_valid_name("build-bot@acme.io"));
        assert!(!is_valid_name("ws:acme"));
        assert!(!is_valid_name(""));
        assert!(!is_valid_name(&"a".repeat(129)));
        assert_eq!(
            billing_tenant(&workspace_owner("acme")).as_deref(),
            Some("acme")
        );
        assert_eq!(billing_tenant("alice"), None);
    }
}
