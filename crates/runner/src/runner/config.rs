//! The runner's credentials on disk: which servers to call and how to trust them (a private
//! CA file or the pinned key of a pasted connect payload), its id and its token.
//!
//! Invariant: the file is never readable by anyone but its owner. It is written to a sibling
//! temporary file created with mode 0600 and renamed into place, so a crash mid-write leaves
//! the old file or the new one, never half of one, and never a moment where the token sits in
//! a world-readable file. [`RunnerConfig`]'s `Debug` never shows the token.

use std::fmt;
use std::fs;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::client::Trust;

/// What `leasehold runner connect` writes and `leasehold runner run` reads.
#[derive(Clone, Serialize, Deserialize)]
pub struct RunnerConfig {
    /// Base URLs of the replicas (or load balancers), tried in order on connection errors.
    pub servers: Vec<String>,
    /// The runner's id, as the server knows it.
    pub runner_id: Uuid,
    /// The `rnr_` token. Shown nowhere; sent only as a bearer credential.
    pub token: String,
    pub label: String,
    pub owner: String,
    pub workspace: String,
    /// Jobs run at once; the server caps leases at this.
    pub capacity: i64,
    /// Capability names this runner advertises.
    pub capabilities: Vec<String>,
    /// Canary names: only jobs requiring all of them come here (also in `capabilities`).
    #[serde(default)]
    pub exclusive: Vec<String>,
    /// An ephemeral runner takes one job and its token dies once that job settles.
    pub ephemeral: bool,
    /// How the servers' certificates are checked: `ca_cert` (a PEM file trusted beside the
    /// system's CAs) and `pin` (the server's key, from a pasted payload), both optional.
    #[serde(default, flatten)]
    pub trust: Trust,
}

impl fmt::Debug for RunnerConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RunnerConfig")
            .field("servers", &self.servers)
            .field("runner_id", &self.runner_id)
            .field("token", &"<redacted>")
            .field("label", &self.label)
            .field("owner", &self.owner)
            .field("workspace", &self.workspace)
            .field("capacity", &self.capacity)
            .field("capabilities", &self.capabilities)
            .field("exclusive", &self.exclusive)
            .field("ephemeral", &self.ephemeral)
            .field("trust", &self.trust)
            .finish()
    }
}

/// `$XDG_CONFIG_HOME/leasehold/runner.json`, else `$HOME/.config/leasehold/runner.json`.
///
/// The caller passes the two variables so nothing here reads the environment.
pub fn default_path(xdg_config_home: Option<&str>, home: Option<&str>) -> PathBuf {
    let base = match (xdg_config_home, home) {
        (Some(x), _) if !x.is_empty() => PathBuf::from(x),
        (_, Some(h)) if !h.is_empty() => Path::new(h).join(".config"),
        _ => PathBuf::from("."),
    };
    base.join("leasehold").join("runner.json")
}

impl RunnerConfig {
    /// Write the file with mode 0600 (its directory 0700 when created), atomically.
    ///
    /// # Errors
    /// The directory or file cannot be created or written.
    pub fn save(&self, path: &Path) -> anyhow::Result<()> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            if !dir.exists() {
                fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
                fs::set_permissions(dir, fs::Permissions::from_mode(0o700))?;
            }
        }
        let tmp = path.with_extension(format!("tmp-{}", std::process::id()));
        let body = serde_json::to_vec_pretty(self)?;
        let write = || -> std::io::Result<()> {
            let mut f = fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&tmp)?;
            f.write_all(&body)?;
            f.write_all(b"\n")?;
            f.sync_all()?;
            fs::rename(&tmp, path)
        };
        write().map_err(|e| {
            let _ = fs::remove_file(&tmp);
            anyhow::Error::new(e).context(format!("writing {}", path.display()))
        })
    }

    /// Read the file, refusing one that others can read (the token would be exposed).
    ///
    /// # Errors
    /// Missing, unreadable, too open, or not a runner configuration.
    pub fn load(path: &Path) -> anyhow::Result<Self> {
        let meta = fs::metadata(path).with_context(|| {
            format!(
                "reading {} (enrol first with `leasehold runner connect CODE --server URL`)",
                path.display()
            )
        })?;
        if meta.permissions().mode() & 0o077 != 0 {
            bail!(
                "{} is readable by others; it holds the runner's token (chmod 600 it)",
                path.display()
            );
        }
        let bytes = fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        let config: Self = serde_json::from_slice(&bytes)
            .with_context(|| format!("{} is not a runner configuration", path.display()))?;
        if config.servers.is_empty() {
            bail!("{} lists no servers", path.display());
        }
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> RunnerConfig {
        RunnerConfig {
            servers: vec!["http://a".into()],
            runner_id: Uuid::nil(),
            token: "rnr_secret".into(),
            label: "box".into(),
            owner: "alice".into(),
            workspace: "acme".into(),
            capacity: 2,
            capabilities: vec!["linux".into()],
            exclusive: Vec::new(),
            ephemeral: false,
            trust: Trust::default(),
        }
    }

    #[test]
    fn debug_never_shows_the_token() {
        assert!(!format!("{:?}", sample()).contains("rnr_secret"));
    }

    #[test]
    fn saved_file_is_owner_only_and_round_trips() {
        let dir = std::env::temp_dir().join(format!("lh-cfg-{}", Uuid::now_v7()));
        let path = dir.join("sub").join("runner.json");
        sample().save(&path).unwrap();
        let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let back = RunnerConfig::load(&path).unwrap();
        assert_eq!(back.token, "rnr_secret");
        assert_eq!(back.trust, Trust::default());
        let text = fs::read_to_string(&path).unwrap();
        assert!(!text.contains("pin"), "no trust, no field: {text}");
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
        assert!(RunnerConfig::load(&path).is_err());
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn default_path_prefers_xdg() {
        assert_eq!(
            default_path(Some("/x"), Some("/h")),
            PathBuf::from("/x/leasehold/runner.json")
        );
        assert_eq!(
            default_path(None, Some("/h")),
            PathBuf::from("/h/.config/leasehold/runner.json")
        );
    }
}
