//! Embeds every file in `migrations/` into the binary: writes `$OUT_DIR/migrations.rs`, a list
//! of `(file name, contents)` sorted by name (so by the `NNNN_` prefix), each contents an
//! `include_str!` so editing a migration rebuilds.

use std::fmt::Write;
use std::path::Path;

fn main() {
    println!("cargo:rerun-if-changed=migrations");
    // Read at run time, not baked in when the script is compiled: a build script compiled in
    // another checkout (a copied target directory) must still read this checkout's files.
    let manifest = std::env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR");
    let dir = Path::new(&manifest).join("migrations");
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
