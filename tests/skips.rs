//! The suite's skips, counted and printed at the end of every `cargo test`.
//!
//! A test whose tool is missing (outside CI) returns early through `support::require` in the
//! `it` target, which libtest can only report as `ok`. `require` appends a line to
//! `$CARGO_TARGET_TMPDIR/skips.log` naming the `cargo` process that ran it; cargo runs this
//! target after `it`, and it prints the skips of its own `cargo` run, then drops them from the
//! log. Under `CI=true` a skip already failed its test; this target fails too if one is found.

use std::process::ExitCode;

const SKIPS_LOG: &str = concat!(env!("CARGO_TARGET_TMPDIR"), "/skips.log");

fn main() -> ExitCode {
    let cargo = std::os::unix::process::parent_id().to_string();
    let log = std::fs::read_to_string(SKIPS_LOG).unwrap_or_default();
    let (ours, others): (Vec<&str>, Vec<&str>) = log
        .lines()
        .filter(|l| !l.is_empty())
        .partition(|l| l.split('\t').next() == Some(cargo.as_str()));
    // Lines of another cargo still running stay for it; those of one gone (a run that stopped
    // at a failed target before reaching this one) are dropped.
    let others: Vec<&str> = others
        .into_iter()
        .filter(|l| {
            let pid = l.split('\t').next().unwrap_or("");
            std::path::Path::new(&format!("/proc/{pid}")).exists()
        })
        .collect();
    let mut kept = others.join("\n");
    if !kept.is_empty() {
        kept.push('\n');
    }
    if let Err(e) = std::fs::write(SKIPS_LOG, kept) {
        eprintln!("could not rewrite {SKIPS_LOG}: {e}");
    }
    if ours.is_empty() {
        println!("leasehold suite: no test skipped");
        return ExitCode::SUCCESS;
    }
    println!(
        "leasehold suite: {} skipped (each reported `ok` above):",
        ours.len()
    );
    for line in &ours {
        let mut parts = line.splitn(3, '\t').skip(1);
        let (test, why) = (parts.next().unwrap_or("?"), parts.next().unwrap_or("?"));
        println!("  SKIPPED {test}: {why}");
    }
    if std::env::var("CI").as_deref() == Ok("true") {
        println!("under CI=true no test may skip");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
