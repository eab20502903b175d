//! The workspace's layout holds: what runs jobs and what people type (`leasehold-runner`,
//! crates/runner) links nothing of the server side.
//!
//! Invariant: `cargo tree -p leasehold-runner` (normal dependencies) names no PostgreSQL
//! client, no HTTP server framework, no OpenTelemetry exporter and no metrics registry, so a
//! runner machine that installs the `leasehold-runner` binary carries none of them.
//! (tower-http is not on the list: reqwest's client layers use it.)

/// Crates of the server side that the runner crate must never pull in, directly or not.
const SERVER_ONLY: &[&str] = &[
    "tokio-postgres",
    "postgres-types",
    "deadpool-postgres",
    "axum",
    "opentelemetry-otlp",
    "opentelemetry_sdk",
    "prometheus-client",
    "governor",
    "chacha20poly1305",
];

#[test]
fn the_runner_crate_links_nothing_of_the_server() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = std::process::Command::new(cargo)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args([
            "tree",
            "--offline",
            "--locked",
            "-p",
            "leasehold-runner",
            "-e",
            "normal",
            "--prefix",
            "none",
            "--format",
            "{p}",
        ])
        .output()
        .expect("cargo tree runs");
    assert!(
        out.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let tree = String::from_utf8(out.stdout).unwrap();
    let names: std::collections::BTreeSet<&str> = tree
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert!(
        names.contains("leasehold-runner") && names.contains("reqwest"),
        "not the runner's tree: {names:?}"
    );
    let linked: Vec<&&str> = SERVER_ONLY.iter().filter(|c| names.contains(**c)).collect();
    assert!(
        linked.is_empty(),
        "leasehold-runner links server-side crates {linked:?}"
    );
}
