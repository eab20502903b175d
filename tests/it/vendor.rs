//! `vendor/hyper` is the published hyper crate plus `patches/hyper.diff` (vendor/README.md).
//!
//! The whole proof needs the network: `scripts/vendor-hyper.sh --check` fetches the crate,
//! checks its sha256, applies the patch and compares with `vendor/hyper` (`.ci/run` runs it
//! before the build). What can be checked offline is checked here, so a patch that drifts from
//! the tree fails a local `cargo test` too:
//!
//! Invariants: the vendored crate, the script and `Cargo.lock` name the same hyper version, and
//! the lock file takes hyper from `vendor/hyper` (no registry source); `patches/hyper.diff`
//! reverses cleanly out of a copy of `vendor/hyper`, and what is left has none of the changes
//! marked `leasehold:`, so the patch describes every change the tree carries in the sources.

use crate::procs::TempDir;
use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &str) -> String {
    std::fs::read_to_string(repo().join(path)).unwrap_or_else(|e| panic!("reading {path}: {e}"))
}

/// The value of the first `key = "..."` line after `after` (a TOML table header or any line).
fn toml_value(text: &str, after: &str, key: &str) -> Option<String> {
    let start = text.find(after)?;
    text[start..].lines().find_map(|l| {
        let rest = l.trim().strip_prefix(key)?.trim_start().strip_prefix('=')?;
        Some(rest.trim().trim_matches('"').to_owned())
    })
}

/// The shell variable `name=...` the script pins.
fn script_pin(script: &str, name: &str) -> String {
    script
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{name}=")))
        .unwrap_or_else(|| panic!("scripts/vendor-hyper.sh pins no {name}"))
        .trim()
        .to_owned()
}

#[test]
fn the_vendored_hyper_is_the_version_the_script_pins_and_the_lock_uses() {
    let script = read("scripts/vendor-hyper.sh");
    let version = script_pin(&script, "VERSION");
    let sha256 = script_pin(&script, "SHA256");
    assert!(
        sha256.len() == 64 && sha256.bytes().all(|b| b.is_ascii_hexdigit()),
        "the script pins a sha256: {sha256:?}"
    );

    let manifest = read("vendor/hyper/Cargo.toml");
    assert_eq!(
        toml_value(&manifest, "[package]", "name").as_deref(),
        Some("hyper")
    );
    assert_eq!(
        toml_value(&manifest, "[package]", "version"),
        Some(version.clone()),
        "vendor/hyper/Cargo.toml is not the hyper the script fetches"
    );
    // A crate's own files, which a hand-copied source tree tends to lack.
    for file in [
        ".cargo_vcs_info.json",
        "Cargo.toml.orig",
        "Cargo.lock",
        "LICENSE",
    ] {
        assert!(
            repo().join("vendor/hyper").join(file).is_file(),
            "vendor/hyper lacks the crate's {file}"
        );
    }

    let lock = read("Cargo.lock");
    let entry = lock
        .split("[[package]]")
        .find(|p| p.contains("\nname = \"hyper\"\n"))
        .expect("Cargo.lock has hyper");
    assert_eq!(
        toml_value(entry, "name", "version"),
        Some(version),
        "Cargo.lock's hyper is not the vendored one"
    );
    assert!(
        toml_value(entry, "name", "source").is_none(),
        "Cargo.lock takes hyper from a registry, not from vendor/hyper: {entry}"
    );
}

/// Copies `from` into `to`, recursively (regular files and directories only).
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// Every file under `dir` whose text contains `needle`.
fn files_containing(dir: &Path, needle: &str) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            found.extend(files_containing(&path, needle));
        } else if std::fs::read_to_string(&path).is_ok_and(|t| t.contains(needle)) {
            found.push(path);
        }
    }
    found
}

#[test]
fn the_patch_reverses_out_of_the_vendored_tree_and_takes_every_marked_change_with_it() {
    let missing = match Command::new("patch").arg("--version").output() {
        Ok(o) if o.status.success() => None,
        _ => Some("GNU patch is not installed".to_owned()),
    };
    if !crate::support::require("the_patch_reverses_out_of_the_vendored_tree", missing) {
        return;
    }
    let vendored = repo().join("vendor/hyper");
    let marked = files_containing(&vendored.join("src"), "leasehold:");
    assert!(
        !marked.is_empty(),
        "vendor/hyper carries no `leasehold:` change"
    );

    let copy = TempDir::new("vendor-hyper");
    copy_tree(&vendored, copy.path());
    let patch = std::fs::File::open(repo().join("patches/hyper.diff")).expect("patches/hyper.diff");
    // --force: never ask, and never take a patch that looks already reversed for a forward one.
    let out = Command::new("patch")
        .args(["-R", "-p1", "--force", "--no-backup-if-mismatch", "-d"])
        .arg(copy.path())
        .stdin(patch)
        .output()
        .expect("patch runs");
    assert!(
        out.status.success(),
        "patches/hyper.diff does not reverse cleanly out of vendor/hyper:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let left = files_containing(copy.path(), "leasehold:");
    assert!(
        left.is_empty(),
        "changes marked `leasehold:` that patches/hyper.diff does not carry: {left:?}"
    );
}
