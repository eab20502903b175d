//! Embeds every file in `migrations/` into the binary: writes `$OUT_DIR/migrations.rs`, a list
//! of `(file name, contents)` sorted by name (so by the `NNNN_` prefix), each contents an
//! `include_str!` so editing a migration rebuilds.
//!
//! The package directory is read when the script *runs* (`CARGO_MANIFEST_DIR` from its
//! environment), not when it is compiled: several checkouts of this crate (git worktrees) may
//! share one target directory, where they share this script's binary and its output, and a
//! directory baked in at compile time embedded another checkout's migrations. For the same
//! reason the script runs again whenever cargo is started from another directory (`PWD`).

use std::fmt::Write;
use std::path::Path;

fn main() {
    println!("cargo:rerun-if-changed=migrations");
    println!("cargo:rerun-if-env-changed=PWD");
    let manifest_dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let dir = Path::new(&manifest_dir).join("migrations");
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .expect("migrations/ exists")
        .map(|e| e.expect("readable migrations/").file_name())
        .filter_map(|n| n.into_string().ok())
        .filter(|n| n.ends_with(".sql"))
        .collect();
    files.sort();
    let mut out = String::from("&[\n");
    for f in &files {
        let path = dir.join(f);
        println!("cargo:rerun-if-changed={}", path.display());
        writeln!(
            out,
            "    ({f:?}, include_str!({:?})),",
            path.display().to_string()
        )
        .unwrap();
    }
    out.push(']');
    let target = Path::new(&std::env::var("OUT_DIR").expect("OUT_DIR")).join("migrations.rs");
    std::fs::write(target, out).expect("write migrations.rs");
}
