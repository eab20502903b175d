//! Embeds every file in `migrations/` into the binary: writes `$OUT_DIR/migrations.rs`, a list
//! of `(file name, contents)` sorted by name (so by the `NNNN_` prefix), each contents an
//! `include_str!` so editing a migration rebuilds. Also writes the statements `store::sql` makes
//! from another one (`$OUT_DIR/job_insert_idempotent.sql`, see [`derive_statements`]).

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
    let out_dir = std::env::var("OUT_DIR").expect("OUT_DIR");
    let target = Path::new(&out_dir).join("migrations.rs");
    std::fs::write(target, out).expect("write migrations.rs");
    derive_statements(Path::new(&manifest), Path::new(&out_dir));
}

/// The clause that makes `sql/job_insert.sql` the insert of jobs with an idempotency key: it
/// parks nothing for a key the workspace already used. Only a keyed job pays for the
/// speculative insertion it costs (job_insert.sql says why), so it is a statement of its own,
/// and one text: a job field is one edit of `sql/job_insert.sql`.
const ON_CONFLICT: &str =
    "    ON CONFLICT (workspace, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING\n";

/// Writes `job_insert_idempotent.sql`: `sql/job_insert.sql` with [`ON_CONFLICT`] before the
/// `RETURNING *` of its insert (the first one).
fn derive_statements(manifest: &Path, out_dir: &Path) {
    let insert = manifest.join("sql/job_insert.sql");
    println!("cargo:rerun-if-changed={}", insert.display());
    let text = std::fs::read_to_string(&insert).expect("sql/job_insert.sql");
    let at = text
        .find("\n    RETURNING *\n")
        .expect("sql/job_insert.sql: an insert ending `    RETURNING *`")
        + 1;
    let keyed = format!(
        "-- Made by build.rs: sql/job_insert.sql with an ON CONFLICT clause (jobs with an\n\
         -- idempotency key; an item whose key the workspace already used gets no row).\n{}{ON_CONFLICT}{}",
        &text[..at],
        &text[at..]
    );
    std::fs::write(out_dir.join("job_insert_idempotent.sql"), keyed)
        .expect("write job_insert_idempotent.sql");
}
