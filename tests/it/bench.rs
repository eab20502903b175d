//! `leasehold bench` still runs against today's schema: a short throughput run, a small
//! artifacts run (in PostgreSQL, and in a real S3-protocol server's bucket) and a small
//! retention run end with their figures. Numbers are printed, never asserted (docs/perf.md);
//! what is asserted is that every scenario chosen produced its figure and none failed (a
//! schema change once made the throughput scenario's TRUNCATE fail, unseen by the suite).

use std::time::Duration;

/// `leasehold bench ARGS... --json` with `envs`, run to its end: the figures of its last
/// line, after checking it succeeded.
async fn bench(args: &[&str], envs: Vec<(String, String)>) -> serde_json::Value {
    let run = tokio::process::Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .arg("bench")
        .args(args)
        .arg("--json")
        .envs(envs)
        .stderr(std::process::Stdio::inherit())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(600), run)
        .await
        .expect("the bench finishes")
        .expect("the bench runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "bench failed:\n{stdout}");
    let last = stdout.lines().last().expect("a JSON line");
    serde_json::from_str(last).expect("the last line is JSON")
}

#[tokio::test]
async fn a_short_bench_run_reports_every_scenario_it_was_asked_for() {
    let figures = bench(
        &[
            "--scenario",
            "throughput,artifacts,retention,wake,drain",
            "--seconds",
            "1",
            "--runners",
            "2",
            "--dispatchers",
            "1",
            "--artifact-mib",
            "4",
            "--retention-jobs",
            "2000",
            "--retention-window-ms",
            "1000",
            "--retention-churn-seconds",
            "6",
            "--wake-jobs",
            "40",
            "--drain-jobs",
            "2000",
        ],
        Vec::new(),
    )
    .await;
    for key in [
        "e2e_jobs_per_s",
        "artifact_upload_mib_s",
        "artifact_download_mib_s",
        "wake_p99_ms",
        "drain_jobs_per_s",
    ] {
        assert!(figures[key].is_number(), "{key} missing: {figures}");
    }
    assert!(
        figures["e2e_per_job"].is_object() && figures["retention"]["ratio"].is_number(),
        "statements per job or the retention figure missing: {figures}"
    );
    // Every wake's stages were joined from the replica's log (issue 55).
    let stages = &figures["wake_stages"];
    assert_eq!(stages["wakes"], 40, "{stages}");
    for stage in ["before_tick", "claim", "commit", "answer", "client"] {
        assert_eq!(stages[stage]["n"], 40, "{stage}: {stages}");
    }
}

#[tokio::test]
async fn the_artifacts_bench_runs_against_an_s3_bucket() {
    let Some(bucket) = crate::artifacts::bucket("bench-s3").await else {
        return;
    };
    let store = format!("s3://{}/bench", bucket.name);
    let envs = bucket
        .options()
        .into_iter()
        .map(|(k, v)| (k.to_ascii_uppercase(), v))
        .collect();
    let figures = bench(
        &[
            "--scenario",
            "artifacts",
            "--artifact-mib",
            "12",
            "--artifact-store",
            &store,
        ],
        envs,
    )
    .await;
    assert_eq!(figures["artifact_store"], "s3", "{figures}");
    for key in ["artifact_upload_mib_s_raw", "artifact_download_mib_s_raw"] {
        assert!(figures[key].is_number(), "{key} missing: {figures}");
    }
    // The replica's blob (its chunk objects, under one blob key) is the bucket's, beside
    // nothing the raw figure left.
    let objects = bucket.objects().await;
    let blob = objects
        .first()
        .and_then(|o| o.rsplit_once('/'))
        .map(|(b, _)| b);
    assert!(
        !objects.is_empty()
            && objects
                .iter()
                .all(|o| o.rsplit_once('/').map(|(b, _)| b) == blob),
        "{objects:?}"
    );
    assert!(objects[0].starts_with("bench/"), "{objects:?}");
}
