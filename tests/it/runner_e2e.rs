//! The runner and the CLI end to end: the real `leasehold` binary as separate processes
//! against real replicas and PostgreSQL.
//!
//! Invariants defended: a join code enrols a runner whose credentials are owner-only and never
//! printed; a command's output and exit code come back through `job submit --wait`; a
//! timeout, a missing executable and a payload the runner cannot understand are classified
//! (the first two as completed results, the last as `fail`); cancelling a running job kills
//! its whole process group and reports nothing; a lease taken through a replica that is then
//! killed -9 is heartbeated and completed through another; SIGTERM drains (a running job
//! finishes, one past the drain deadline is released for another runner; a second SIGTERM
//! releases at once); a restarted runner kills what a crashed run left; `--once` and
//! ephemeral runners take exactly one job; the sandbox cannot write outside its work
//! directory or read the host's home, and a runner whose sandbox does not work refuses to
//! start.

use std::time::Duration;

use leasehold::client::Client;
use leasehold::wire;
use nix::sys::signal::Signal;
use serde_json::json;
use uuid::Uuid;

use crate::procs::{
    cli, enrol, entries, live_in_group, marker, none_alive, processes_with, runner, saved,
    FailoverRig, KillOnDrop, RunnerRig, LONG,
};
use crate::support::{eventually, personal, TestApp};

async fn job_in_state(client: &Client, id: Uuid, state: &str) -> wire::Job {
    let what = format!("job {id} {state}");
    eventually(LONG, &what, || async {
        let job = client.job(id).await.ok()?;
        (job.state == state).then_some(job)
    })
    .await
}

#[tokio::test]
async fn a_join_code_enrols_a_runner_whose_command_output_and_exit_code_come_back() {
    let rig = RunnerRig::new(TestApp::spawn().await, "e2e-basic").await;
    let (key, alice) = (&rig.key, &rig.alice);
    let (config, mut r) = rig
        .start_runner(&["--label", "box-1"], &["--unconfined"])
        .await;

    let out = rig
        .sh("echo hello; echo oops >&2; printf 'no newline'; exit 7")
        .await;
    assert_eq!(out.code, Some(7), "{out:?}\nrunner log:\n{}", r.log());
    assert_eq!(out.stdout, "hello\nno newline", "exactly the bytes written");
    assert!(out.stderr.contains("oops"), "{}", out.stderr);
    assert!(out.stderr.contains("leased by runner"), "{}", out.stderr);

    let listed = alice.jobs(None, None, None).await.unwrap().jobs;
    assert_eq!(listed.len(), 1);
    let job = &listed[0];
    assert_eq!(job.state, "completed");
    let result = job.result.as_ref().unwrap();
    assert_eq!(result["exit_code"], json!(7));
    assert_eq!(result["outcome"], json!("failed"));
    assert_eq!(result["timed_out"], json!(false));
    assert_eq!(result["signal"], json!(null));
    assert_eq!(result["stdout_tail"], json!("hello\nno newline"));
    assert_eq!(result["stderr_tail"], json!("oops\n"));
    assert!(result["duration_ms"].is_u64());
    let saved = saved(&config);
    assert_eq!(
        job.provenance.as_ref().unwrap()["runner"],
        saved["runner_id"]
    );

    // The people's commands read the same job.
    let url = rig.url();
    let logs = cli(&url, key, &["job", "logs", &job.id.to_string()], LONG).await;
    assert_eq!(logs.code, Some(0));
    assert_eq!(logs.stdout, "hello\nno newline");
    let get = cli(&url, key, &["job", "get", &job.id.to_string()], LONG).await;
    assert!(get.stdout.contains("exit code    7"), "{}", get.stdout);
    let runners = cli(&url, key, &["runners", "list"], LONG).await;
    assert!(runners.stdout.contains("box-1"), "{}", runners.stdout);
    let pool = cli(&url, key, &["pool", "--json"], LONG).await;
    let pool: wire::Pool = serde_json::from_str(&pool.stdout).unwrap();
    assert_eq!(pool.runners.online, 1);

    // The job's directory is gone once it is reported.
    let mine = rig
        .dir
        .join("work")
        .join(saved["runner_id"].as_str().unwrap());
    eventually(LONG, "the work directory is emptied", || async {
        entries(&mine).is_empty().then_some(())
    })
    .await;

    // Errors print the service's message and exit non-zero.
    let missing = cli(
        &url,
        key,
        &["job", "get", &Uuid::now_v7().to_string()],
        LONG,
    )
    .await;
    assert_eq!(missing.code, Some(1));
    assert_eq!(missing.stderr.trim(), "leasehold: not found (not_found)");
    let denied = cli(&url, "ak_nope", &["job", "list"], LONG).await;
    assert_eq!(denied.code, Some(1));
    // The contract's one 401, with its three causes named (issue 56 row 6).
    assert!(
        denied
            .stderr
            .starts_with("leasehold: the service refused the API key (unauthorized)")
            && denied.stderr.lines().count() == 1,
        "{}",
        denied.stderr
    );

    r.signal(Signal::SIGTERM);
    assert!(r.exit(LONG).await.success(), "{}", r.log());
    assert!(
        !r.log().contains(saved["token"].as_str().unwrap()),
        "the token is never logged"
    );
}

#[tokio::test]
async fn timeouts_missing_executables_and_unreadable_payloads_are_classified() {
    let rig = RunnerRig::new(TestApp::spawn().await, "e2e-classify").await;
    let alice = &rig.alice;
    let (_, _r) = rig
        .start_runner(&["--capacity", "3"], &["--unconfined"])
        .await;

    let (timed, missing) = tokio::join!(
        rig.submit_wait(&["--timeout", "1", "--", "sh", "-c", "echo started; sleep 60"]),
        rig.submit_wait(&["--", "/nonexistent/leasehold-test-prog"]),
    );
    assert_eq!(timed.code, Some(124), "{timed:?}");
    assert_eq!(timed.stdout, "started\n");
    assert!(timed.stderr.contains("timed out"), "{}", timed.stderr);
    assert_eq!(missing.code, Some(127), "{missing:?}");
    assert!(
        missing.stderr.contains("cannot start"),
        "{}",
        missing.stderr
    );

    let jobs = alice.jobs(None, None, None).await.unwrap().jobs;
    let by_argv = |needle: &str| {
        jobs.iter()
            .find(|j| j.payload["argv"].to_string().contains(needle))
            .unwrap()
            .clone()
    };
    let t = by_argv("sleep 60");
    assert_eq!(t.state, "completed");
    let tr = t.result.unwrap();
    assert_eq!(
        (tr["outcome"].clone(), tr["timed_out"].clone()),
        (json!("timed_out"), json!(true))
    );
    assert_eq!(tr["exit_code"], json!(null));
    assert_eq!(tr["signal"], json!(15));
    assert!(tr["duration_ms"].as_u64().unwrap() >= 1000);
    let m = by_argv("leasehold-test-prog");
    assert_eq!(m.state, "completed");
    let mr = m.result.unwrap();
    assert_eq!(
        (mr["outcome"].clone(), mr["exit_code"].clone()),
        (json!("start_failed"), json!(127))
    );
    assert!(mr["error"].as_str().unwrap().contains("cannot start"));

    // What the runner cannot understand is failed, not run.
    let mut unknown = wire::Dispatch::new(personal(), json!({"argv": ["true"]}));
    unknown.kind = Some("docker.build".into());
    let unknown = alice.dispatch(&unknown).await.unwrap();
    let malformed = alice
        .dispatch(&wire::Dispatch::new(personal(), json!({"argv": "echo hi"})))
        .await
        .unwrap();
    for (id, needle) in [
        (unknown.id, "unsupported job kind"),
        (malformed.id, "payload.argv"),
    ] {
        let job = job_in_state(alice, id, "failed").await;
        let error = job.error.unwrap();
        assert_eq!(error["reason"], json!("runner_failed"));
        assert!(
            error["message"].as_str().unwrap().contains(needle),
            "{error}"
        );
        assert_eq!(job.result, None);
    }
}

#[tokio::test]
async fn cancel_kills_the_whole_process_group_and_reports_nothing() {
    // Short leases: the runner heartbeats every second and hears the 409 quickly.
    let app = TestApp::spawn_with(1, |c| c.lease_ttl_ms = 3000).await;
    let rig = RunnerRig::new(app, "e2e-cancel").await;
    let (_, _r) = rig.start_runner(&[], &["--unconfined"]).await;

    let marker = marker();
    let script = format!("sleep {marker}1 & sleep {marker}2; wait");
    let id = rig.submit(&["--", "sh", "-c", &script]).await;
    let procs = eventually(LONG, "the job's processes run", || async {
        let p = processes_with(&marker);
        (p.iter().filter(|(_, s, _)| *s != 'Z').count() >= 3).then_some(p)
    })
    .await;
    let pgid = procs[0].2;
    assert!(
        procs.iter().all(|(_, _, g)| *g == pgid),
        "one process group: {procs:?}"
    );
    assert!(live_in_group(pgid) >= 3);

    let cancelled = cli(
        &rig.url(),
        &rig.key,
        &["job", "cancel", &id.to_string()],
        LONG,
    )
    .await;
    assert_eq!(cancelled.code, Some(0), "{cancelled:?}");
    assert!(cancelled.stdout.contains("cancelled"));
    eventually(LONG, "the process group is gone", || async {
        (live_in_group(pgid) == 0).then_some(())
    })
    .await;
    let job = rig.alice.job(id).await.unwrap();
    assert_eq!(job.state, "cancelled");
    assert_eq!(job.result, None, "a cancelled job's runner reports nothing");

    // The slot is free again.
    let after = rig.submit_wait(&["--", "echo", "after"]).await;
    assert_eq!(
        (after.code, after.stdout.as_str()),
        (Some(0), "after\n"),
        "{after:?}"
    );
}

#[tokio::test]
async fn a_lease_survives_kill_9_of_the_replica_the_runner_uses() {
    let app = TestApp::spawn_with(0, |_| {}).await;
    // Long enough that a heartbeat or two missed while the runner fails over on a loaded
    // machine (the whole suite at once) does not lapse the lease; the job outlives the kill.
    let envs = [("LEASEHOLD_LEASE_TTL_MS", "10000")];
    let mut rig = FailoverRig::start(&app, "e2e-failover", &envs, &envs).await;
    let (alice_b, r) = (&rig.alice, &rig.runner);
    let id = rig
        .submit(&["--", "sh", "-c", "sleep 8; echo survived"])
        .await;
    job_in_state(alice_b, id, "leased").await;
    // The runner talks to the first server until it fails; kill it mid-job.
    rig.a.signal(Signal::SIGKILL);
    rig.a.exit(LONG).await;

    let job = job_in_state(alice_b, id, "completed").await;
    let result = job.result.unwrap();
    assert_eq!(result["exit_code"], json!(0), "runner log:\n{}", r.log());
    assert_eq!(result["stdout_tail"], json!("survived\n"));
    assert_eq!(
        job.epoch, 1,
        "heartbeated through the other replica, never re-delivered"
    );
    let events = alice_b.events(id, 0, 0).await.unwrap().events;
    assert!(events
        .iter()
        .any(|e| e.kind == "stdout" && e.data["text"] == "survived\n"));
}

#[tokio::test]
async fn sigterm_drains_a_running_job_and_releases_what_is_past_the_deadline() {
    // Default 120 s leases: the second job is back in the queue because it was released,
    // not because its lease lapsed.
    let rig = RunnerRig::new(TestApp::spawn().await, "e2e-drain").await;
    assert!(
        rig.app.config.lease_ttl_ms >= 60_000,
        "the premise: leases outlive the test"
    );
    let alice = &rig.alice;
    let (_, mut a) = rig
        .start_runner(
            &["--capacity", "2"],
            &["--drain-timeout", "10", "--unconfined"],
        )
        .await;

    let short = rig.submit(&["--", "sh", "-c", "sleep 4; echo short"]).await;
    let long = rig
        .submit(&[
            "--", "sh", "-c",
            r#"if [ "$LEASEHOLD_ATTEMPT" = 1 ]; then sleep 600; fi; echo "long on attempt $LEASEHOLD_ATTEMPT""#,
        ])
        .await;
    job_in_state(alice, short, "leased").await;
    job_in_state(alice, long, "leased").await;
    a.signal(Signal::SIGTERM);
    let status = a.exit(LONG).await;
    assert!(
        status.success(),
        "drained runner exits 0; log:\n{}",
        a.log()
    );

    let s = alice.job(short).await.unwrap();
    assert_eq!(
        s.state, "completed",
        "the running job finished within the drain"
    );
    assert_eq!(s.result.unwrap()["stdout_tail"], json!("short\n"));
    let l = alice.job(long).await.unwrap();
    assert_eq!(l.state, "parked", "the job past the deadline was released");
    assert_eq!(l.attempts, 1);

    // Another runner takes it at once.
    let (config_b, mut b) = rig.start_runner(&[], &["--once", "--unconfined"]).await;
    assert!(b.exit(LONG).await.success(), "{}", b.log());
    let l = alice.job(long).await.unwrap();
    assert_eq!(l.state, "completed");
    assert_eq!(
        l.result.unwrap()["stdout_tail"],
        json!("long on attempt 2\n")
    );
    assert_eq!(
        l.provenance.unwrap()["runner"],
        saved(&config_b)["runner_id"]
    );
}

#[tokio::test]
async fn once_and_ephemeral_runners_take_exactly_one_job() {
    let rig = RunnerRig::new(TestApp::spawn().await, "e2e-once").await;
    let alice = &rig.alice;
    let first = rig.submit(&["--", "echo", "one"]).await;
    let second = rig.submit(&["--", "echo", "two"]).await;

    let (_, mut once) = rig
        .start_runner(&["--capacity", "4"], &["--once", "--unconfined"])
        .await;
    assert!(once.exit(LONG).await.success(), "{}", once.log());
    assert_eq!(
        alice.job(first).await.unwrap().state,
        "completed",
        "FIFO: the first job"
    );
    assert_eq!(
        alice.job(second).await.unwrap().state,
        "parked",
        "and only that one"
    );

    // An ephemeral runner behaves as --once without being told, and its token dies after.
    let config = enrol(alice, &[&rig.url()], rig.dir.path(), true, &[]).await;
    let mut eph = rig.runner(&config, &["--unconfined"], &[]);
    assert!(eph.exit(LONG).await.success(), "{}", eph.log());
    assert_eq!(alice.job(second).await.unwrap().state, "completed");
    let mut again = rig.runner(&config, &["--unconfined"], &[]);
    let status = again.exit(LONG).await;
    assert!(!status.success(), "a spent ephemeral token is refused");
    assert!(
        again.log().contains("refused this runner's token"),
        "{}",
        again.log()
    );
}

#[tokio::test]
async fn a_runner_refuses_to_start_when_its_sandbox_does_not_work() {
    let rig = RunnerRig::new(TestApp::spawn().await, "e2e-nosandbox").await;
    let config = rig.enrol(&[]).await;
    // No bwrap on this PATH.
    let empty = rig.dir.join("empty-bin");
    std::fs::create_dir_all(&empty).unwrap();
    let mut r = rig.runner(
        &config,
        &["--sandbox", "bubblewrap"],
        &[("PATH", empty.to_str().unwrap())],
    );
    let status = r.exit(LONG).await;
    assert!(!status.success());
    assert!(r.log().contains("bwrap"), "{}", r.log());
}

/// Why bubblewrap cannot run here, if it cannot.
pub fn bwrap_unusable() -> Option<String> {
    let out = std::process::Command::new("bwrap")
        .args([
            "--ro-bind",
            "/",
            "/",
            "--proc",
            "/proc",
            "--dev",
            "/dev",
            "--unshare-pid",
            "true",
        ])
        .output();
    match out {
        Err(e) => Some(format!("bwrap is not installed ({e})")),
        Ok(o) if !o.status.success() => Some(format!(
            "bwrap cannot create namespaces here: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        )),
        Ok(_) => None,
    }
}

#[tokio::test]
async fn the_sandbox_writes_only_its_work_directory_and_never_sees_the_host_home() {
    if !crate::support::require(
        "the_sandbox_writes_only_its_work_directory",
        bwrap_unusable(),
    ) {
        return;
    }
    let rig = RunnerRig::new(TestApp::spawn().await, "e2e-sandbox").await;
    // A host home with a secret in it; the runner's configuration lives there too.
    let home = rig.dir.join("home");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::write(home.join("secret"), "s3cret").unwrap();
    let config_dir = home.join(".config");
    std::fs::create_dir_all(&config_dir).unwrap();
    let config = rig.enrol_in(&config_dir, &["--capacity", "4"]).await;
    let outside = rig.dir.join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    let _r = rig.runner(
        &config,
        &["--sandbox", "bubblewrap"],
        &[("HOME", home.to_str().unwrap())],
    );

    let home_s = home.display().to_string();
    let (escape, peek, token, fresh) = (
        format!("echo pwned > {}/escaped", outside.display()),
        format!("cat {home_s}/secret"),
        format!("cat {}", config.display()),
        format!("test \"$HOME\" != {home_s} && echo fresh home"),
    );
    let (inside, escape, peek, token, system, fresh) = tokio::join!(
        rig.sh(
            "echo a > in-work && echo b > \"$HOME/in-home\" && echo c > /tmp/in-tmp && cat in-work"
        ),
        rig.sh(&escape),
        rig.sh(&peek),
        rig.sh(&token),
        rig.sh("touch /usr/leasehold-escape"),
        rig.sh(&fresh),
    );
    assert_eq!(
        (inside.code, inside.stdout.as_str()),
        (Some(0), "a\n"),
        "{inside:?}"
    );
    assert_ne!(escape.code, Some(0), "{escape:?}");
    assert!(
        !outside.join("escaped").exists(),
        "nothing written outside the work directory"
    );
    assert_ne!(peek.code, Some(0), "{peek:?}");
    assert!(!peek.stdout.contains("s3cret"));
    assert_ne!(
        token.code,
        Some(0),
        "the runner's token is out of reach: {token:?}"
    );
    assert!(!token.stdout.contains("rnr_"));
    assert_ne!(
        system.code,
        Some(0),
        "system directories are read-only: {system:?}"
    );
    assert!(!std::path::Path::new("/usr/leasehold-escape").exists());
    assert_eq!(
        (fresh.code, fresh.stdout.as_str()),
        (Some(0), "fresh home\n"),
        "{fresh:?}"
    );
}

#[tokio::test]
async fn a_restarted_runner_kills_what_a_crashed_run_left_and_clears_its_work_directory() {
    let rig = RunnerRig::new(TestApp::spawn().await, "e2e-crash").await;
    let (config, mut first) = rig.start_runner(&[], &["--unconfined"]).await;

    let marker = marker();
    let script = format!("touch left-over; sleep {marker}");
    let id = rig.submit(&["--", "sh", "-c", &script]).await;
    let pgid = eventually(LONG, "the job runs", || async {
        let p = processes_with(&marker);
        (p.iter().filter(|(_, s, _)| *s != 'Z').count() >= 2).then(|| p[0].2)
    })
    .await;
    first.signal(Signal::SIGKILL);
    first.exit(LONG).await;
    assert!(
        live_in_group(pgid) > 0,
        "a crashed runner's job keeps running"
    );
    // Settle it, so the restarted runner is not handed it again.
    rig.alice.cancel(id).await.unwrap();

    let mine = rig
        .dir
        .join("work")
        .join(saved(&config)["runner_id"].as_str().unwrap());
    assert_eq!(entries(&mine), [id.to_string()]);
    let _second = rig.runner(&config, &["--unconfined"], &[]);
    eventually(LONG, "the orphaned process group is killed", || async {
        (live_in_group(pgid) == 0).then_some(())
    })
    .await;
    eventually(LONG, "the left-over work directory is removed", || async {
        entries(&mine).is_empty().then_some(())
    })
    .await;
}

/// Issue 56 row 1: a second `runner run` of the same configuration, with another work
/// directory, refuses to start with one line naming the running one, and the first one's job
/// runs on; so does a copy of the configuration at another path.
#[tokio::test]
async fn a_second_run_of_the_same_configuration_refuses_and_kills_nothing() {
    let rig = RunnerRig::new(TestApp::spawn().await, "e2e-twice").await;
    let (config, first) = rig.start_runner(&[], &["--unconfined"]).await;
    let m = marker();
    let _cleanup = KillOnDrop(m.clone());
    let id = rig.submit(&["--", "sh", "-c", &format!("sleep {m}")]).await;
    let pgid = eventually(LONG, "the job runs", || async {
        let p = processes_with(&m);
        (p.iter().filter(|(_, s, _)| *s != 'Z').count() >= 2).then(|| p[0].2)
    })
    .await;

    let mut second = runner(&config, &rig.dir.join("work-2"), &["--unconfined"], &[]);
    let status = second.exit(LONG).await;
    let log = second.log();
    assert!(!status.success(), "{log}");
    assert!(
        log.contains("already running on this machine")
            && log.contains(&format!("pid {}", first.pid())),
        "says which process runs it: {log}"
    );
    assert!(!log.contains("killing"), "{log}");
    assert!(live_in_group(pgid) > 0, "the first one's job runs on");

    // A copy of the configuration at another path is the same runner: refused as well (the
    // machine-wide lock keyed by the runner id), and it sweeps nothing.
    let copy_dir = rig.dir.join("copy");
    std::fs::create_dir_all(&copy_dir).unwrap();
    let copy = copy_dir.join("runner.json");
    std::fs::copy(&config, &copy).unwrap();
    let mut third = runner(&copy, &rig.dir.join("work-3"), &["--unconfined"], &[]);
    let status = third.exit(LONG).await;
    let log = third.log();
    assert!(!status.success(), "{log}");
    assert!(log.contains("already running on this machine"), "{log}");
    assert!(!log.contains("killing"), "{log}");
    assert!(live_in_group(pgid) > 0, "the first one's job runs on");
    let job = rig.alice.job(id).await.unwrap();
    assert_eq!(job.state, "leased", "{}", first.log());
    rig.alice.cancel(id).await.unwrap();
}

/// Issue 56 row 5: revoking a runner whose job is running and printing: on the first 401 the
/// runner kills its job (reporting nothing) and exits non-zero with one line saying it was
/// revoked, rather than shipping refused output until the lease lapses.
#[tokio::test]
async fn a_revoked_runner_stops_its_jobs_and_exits_saying_so() {
    let rig = RunnerRig::new(TestApp::spawn().await, "e2e-revoked").await;
    let (config, mut r) = rig.start_runner(&[], &["--unconfined"]).await;
    let m = marker();
    let _cleanup = KillOnDrop(m.clone());
    let script = format!("while :; do echo tick; sleep 0.1; done & exec sleep {m}");
    let id = rig.submit(&["--", "sh", "-c", &script]).await;
    let pgid = eventually(LONG, "the job runs", || async {
        let p = processes_with(&m);
        p.iter().find(|(_, s, _)| *s != 'Z').map(|p| p.2)
    })
    .await;
    let runner_id: Uuid = saved(&config)["runner_id"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    rig.alice
        .revoke_runner(wire::Tier::Personal, runner_id)
        .await
        .unwrap();
    let status = r.exit(LONG).await;
    let log = r.log();
    assert!(!status.success(), "{log}");
    let last = log.lines().last().unwrap_or_default();
    assert!(
        last.contains("this runner was revoked"),
        "its last line says it was revoked: {log}"
    );
    assert!(
        log.matches("output batch refused").count() <= 1,
        "stops at the first 401: {log}"
    );
    assert_eq!(live_in_group(pgid), 0, "its job is killed: {log}");
    let job = rig.alice.job(id).await.unwrap();
    assert_ne!(job.state, "completed", "{job:?}");
}

#[tokio::test]
async fn a_second_sigterm_releases_at_once() {
    let rig = RunnerRig::new(TestApp::spawn().await, "e2e-term2").await;
    let alice = &rig.alice;
    let config = rig.enrol(&[]).await;
    // The default drain timeout (600 s) would outlast the test.
    let mut r = rig.runner(&config, &["--unconfined"], &[]);
    let id = rig.submit(&["--", "sleep", "600"]).await;
    job_in_state(alice, id, "leased").await;

    r.signal(Signal::SIGTERM);
    eventually(LONG, "the runner is draining", || async {
        r.log().contains("draining").then_some(())
    })
    .await;
    assert_eq!(
        alice.job(id).await.unwrap().state,
        "leased",
        "draining lets it run"
    );
    r.signal(Signal::SIGTERM);
    assert!(r.exit(LONG).await.success(), "{}", r.log());
    let job = alice.job(id).await.unwrap();
    assert_eq!(
        (job.state.as_str(), job.attempts),
        ("parked", 1),
        "released, not failed"
    );
}

/// `seq 1 N` as the job writes it.
fn seq_text(n: u32) -> String {
    let mut s = String::new();
    for i in 1..=n {
        s.push_str(&i.to_string());
        s.push('\n');
    }
    s
}

#[tokio::test]
async fn twenty_megabytes_written_as_fast_as_possible_arrive_byte_for_byte() {
    let rig = RunnerRig::new(TestApp::spawn().await, "e2e-bulk").await;
    let (key, alice) = (&rig.key, &rig.alice);
    let (_, r) = rig.start_runner(&[], &["--unconfined"]).await;

    const N: u32 = 2_700_000;
    let expected = seq_text(N);
    assert!(expected.len() > 20_000_000, "the premise: over 20 MB");
    let out = cli(
        &rig.url(),
        key,
        &["job", "submit", "--wait", "--", "seq", "1", &N.to_string()],
        Duration::from_secs(300),
    )
    .await;
    assert_eq!(
        out.code,
        Some(0),
        "{}\nrunner log:\n{}",
        out.stderr,
        r.log()
    );
    assert!(!out.stderr.contains("dropped"), "{}", out.stderr);
    assert_eq!(out.stdout.len(), expected.len(), "every byte arrived");
    assert_eq!(out.stdout.lines().count(), N as usize);
    assert_eq!(out.stdout.lines().last(), Some("2700000"));
    assert!(out.stdout == expected, "the same bytes, in order");

    let id = alice.jobs(None, None, None).await.unwrap().jobs[0].id;
    let logs = cli(&rig.url(), key, &["job", "logs", &id.to_string()], LONG).await;
    assert!(logs.stdout == expected, "job logs shows the same bytes");

    // Many lines per event: rows per chunk, not per line.
    let (mut events, mut after) = (0usize, 0i64);
    loop {
        let page = alice.events(id, after, 0).await.unwrap().events;
        let Some(last) = page.last() else { break };
        after = i64::from(last.seq);
        events += page.len();
    }
    eprintln!("{} bytes, {N} lines: {events} events", expected.len());
    assert!(events < N as usize / 1000, "{events} events for {N} lines");
}

/// `path` relative to this process's working directory (`../../tmp/...`).
fn relative(path: &std::path::Path) -> std::path::PathBuf {
    let cwd = std::env::current_dir().unwrap();
    let up = cwd.components().count() - 1;
    std::path::PathBuf::from("../".repeat(up)).join(path.strip_prefix("/").unwrap())
}

#[tokio::test]
async fn without_the_sandbox_a_job_gets_its_own_home_an_allow_listed_environment_and_no_stragglers()
{
    let rig = RunnerRig::new(TestApp::spawn().await, "e2e-contain").await;
    // The runner's home holds its configuration, where a job looking in $HOME would find it.
    let home = rig.dir.join("home");
    let config_dir = home.join(".config").join("leasehold");
    std::fs::create_dir_all(&config_dir).unwrap();
    let config = rig.enrol_in(&config_dir, &["--capacity", "3"]).await;
    let runner_json = config_dir.join("runner.json");
    std::fs::rename(&config, &runner_json).unwrap();
    let work = relative(&rig.dir.join("work"));
    let r = runner(
        &runner_json,
        &work,
        &["--unconfined"],
        &[
            ("HOME", home.to_str().unwrap()),
            ("DATABASE_URL", "postgres://app:hunter2@127.0.0.1/app"),
            ("RUNNER_SECRET", "s3cret"),
        ],
    );

    let marker = marker();
    let _cleanup = KillOnDrop(marker.clone());
    let detach = format!(
        "setsid sleep {marker}1 </dev/null >/dev/null 2>&1 & \
         setsid env -i sleep {marker}2 </dev/null >/dev/null 2>&1 & echo detached"
    );
    let (env, token, detached) = tokio::join!(
        rig.submit_wait(&[
            "--env",
            "MINE=1",
            "--env",
            "LEASEHOLD_JOB_ID=forged",
            "--",
            "sh",
            "-c",
            "env",
        ]),
        rig.sh("cat \"$HOME/.config/leasehold/runner.json\""),
        rig.sh(&detach),
    );

    assert_eq!(env.code, Some(0), "{env:?}");
    let vars: std::collections::BTreeMap<&str, &str> = env
        .stdout
        .lines()
        .filter_map(|l| l.split_once('='))
        .collect();
    assert_eq!(vars.get("MINE"), Some(&"1"), "the job's own env: {vars:?}");
    assert!(!vars.contains_key("DATABASE_URL"), "{vars:?}");
    assert!(!vars.contains_key("RUNNER_SECRET"), "{vars:?}");
    assert!(vars.contains_key("PATH"));
    let id = vars["LEASEHOLD_JOB_ID"];
    assert!(
        id.parse::<Uuid>().is_ok(),
        "not overwritten by the payload: {id}"
    );
    assert_ne!(
        vars["HOME"],
        home.to_str().unwrap(),
        "HOME is the job's own"
    );
    for var in ["HOME", "TMPDIR"] {
        assert!(
            vars[var].starts_with('/'),
            "{var} is absolute: {}",
            vars[var]
        );
        assert!(
            vars[var].contains(id),
            "{var} is in the job's directory: {}",
            vars[var]
        );
    }

    assert_ne!(token.code, Some(0), "{token:?}");
    assert!(!token.stdout.contains("rnr_"), "{token:?}");

    assert_eq!(
        (detached.code, detached.stdout.as_str()),
        (Some(0), "detached\n")
    );
    none_alive(
        &format!("{marker}1"),
        "the detached grandchild is killed with its job",
    )
    .await;
    // One that also cleared its environment is beyond the sweep: only a cgroup catches it
    // (what is left of it otherwise, `_cleanup` kills).
    if r.log().contains("a cgroup per job") {
        none_alive(
            &format!("{marker}2"),
            "the env-less grandchild dies with the job's cgroup",
        )
        .await;
    } else {
        let why = "cgroup v2 is not writable here: the env-less grandchild part is skipped";
        assert!(!crate::support::require(
            "the env-less grandchild",
            Some(why.to_owned())
        ));
    }
}

#[tokio::test]
async fn the_sandbox_drops_every_capability_and_can_cut_the_network() {
    if !crate::support::require("the_sandbox_drops_every_capability", bwrap_unusable()) {
        return;
    }
    let rig = RunnerRig::new(TestApp::spawn().await, "e2e-caps").await;
    let (_, r) = rig
        .start_runner(
            &["--capacity", "2"],
            &["--sandbox", "bubblewrap", "--network", "none"],
        )
        .await;
    let (caps, net) = tokio::join!(
        rig.sh("grep CapEff /proc/self/status"),
        rig.sh("cut -d: -f1 /proc/net/dev | tail -n +3 | tr -d ' '"),
    );
    assert_eq!(caps.code, Some(0), "{caps:?}\nrunner log:\n{}", r.log());
    assert_eq!(
        caps.stdout.split_whitespace().last(),
        Some("0000000000000000")
    );
    assert_eq!(
        (net.code, net.stdout.as_str()),
        (Some(0), "lo\n"),
        "{net:?}"
    );
}

#[tokio::test]
async fn a_runner_whose_sandbox_does_not_confine_refuses_to_start_saying_why() {
    let rig = RunnerRig::new(TestApp::spawn().await, "e2e-fakebwrap").await;
    let config = rig.enrol(&[]).await;
    // A `bwrap` that runs the command unconfined, on the host.
    let bin = rig.dir.join("fake-bin");
    std::fs::create_dir_all(&bin).unwrap();
    let fake = bin.join("bwrap");
    std::fs::write(
        &fake,
        "#!/bin/sh\nwhile [ \"$1\" != -- ]; do shift; done\nshift\nexec \"$@\"\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!("{}:/usr/bin:/bin", bin.display());
    let mut r = rig.runner(&config, &["--sandbox", "bubblewrap"], &[("PATH", &path)]);
    assert!(!r.exit(LONG).await.success());
    let log = r.log();
    assert!(log.contains("does not confine jobs"), "{log}");
    // The command ran on the host: in the host's PID namespace (as root, bwrap itself runs as
    // `nobody`, so there were no capabilities to drop).
    assert!(log.contains("not in a PID namespace"), "{log}");
}

#[tokio::test]
async fn a_job_user_cannot_read_the_runners_token() {
    let test = "a_job_user_cannot_read_the_runners_token";
    let not_root = (!nix::unistd::geteuid().is_root()).then(|| "--job-user needs root".to_owned());
    if !crate::support::require(test, not_root) {
        return;
    }
    let Ok(Some(nobody)) = nix::unistd::User::from_name("nobody") else {
        assert!(!crate::support::require(
            test,
            Some("no 'nobody' user".to_owned())
        ));
        return;
    };
    let rig = RunnerRig::new(TestApp::spawn().await, "e2e-jobuser").await;
    let (config, r) = rig
        .start_runner(&["--capacity", "2"], &["--job-user", "nobody"])
        .await;
    let cat_config = format!("cat {}", config.display());
    let (who, token) = tokio::join!(
        rig.sh("id -u; echo x > in-work; cat in-work"),
        rig.sh(&cat_config),
    );
    assert_eq!(
        (who.code, who.stdout.clone()),
        (Some(0), format!("{}\nx\n", nobody.uid)),
        "{who:?}\nrunner log:\n{}",
        r.log()
    );
    assert_ne!(token.code, Some(0), "{token:?}");
    assert!(!token.stdout.contains("rnr_"), "{token:?}");
    // Two slots share one uid: the runner says what that lets a job reach.
    let log = r.log();
    assert!(
        log.lines().any(|l| l.contains("WARN")
            && l.contains("jobs share the uid of --job-user nobody")
            && l.contains("environment (secrets) of another job")),
        "{log}"
    );
}

/// `job submit --count N`: one batch dispatch of N copies, one id a line, each copy told its
/// index in `MATRIX_INDEX`; the runner runs them all.
#[tokio::test]
async fn submit_count_dispatches_a_matrix_in_one_batch() {
    let app = TestApp::spawn().await;
    let server = app.url(0);
    let key = app.key("acme", "alice", true).await;
    let out = cli(
        &server,
        &key,
        &[
            "job",
            "submit",
            "--count",
            "3",
            "--",
            "sh",
            "-c",
            "echo $MATRIX_INDEX",
        ],
        LONG,
    )
    .await;
    assert_eq!(out.code, Some(0), "{out:?}");
    let ids: Vec<Uuid> = out
        .stdout
        .lines()
        .map(|l| l.trim().parse().expect("one id a line"))
        .collect();
    assert_eq!(ids.len(), 3);
    assert!(ids[0] < ids[1] && ids[1] < ids[2], "in request order");
    let operator = Client::new(&server, Some(key));
    for (i, id) in ids.iter().enumerate() {
        let job = operator.job(*id).await.unwrap();
        assert_eq!(job.payload["env"]["MATRIX_INDEX"], i.to_string());
    }
}

/// Issue 35 row 12: `submit --wait` for a job no runner can take says so at once, exits 1 and
/// dispatches nothing; `--wait-anyway` parks it and waits for a runner that enrols later.
#[tokio::test]
async fn a_wait_no_runner_can_serve_fails_at_once_unless_told_to_wait_anyway() {
    let rig = RunnerRig::new(TestApp::spawn().await, "e2e-hopeless").await;
    let out = rig.submit_wait(&["--", "echo", "hi"]).await;
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(out.stderr.contains("no_matching_runner"), "{}", out.stderr);
    assert!(
        out.stderr.contains("nothing was dispatched"),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("--wait-anyway"), "{}", out.stderr);
    assert!(
        !out.stderr.contains("waiting for a runner"),
        "{}",
        out.stderr
    );
    let listed = rig.alice.jobs(None, None, None).await.unwrap().jobs;
    assert!(listed.is_empty(), "nothing dispatched: {listed:?}");

    let waiting = tokio::spawn({
        let (url, key) = (rig.url(), rig.key.clone());
        async move {
            crate::procs::submit_wait(&url, &key, &["--wait-anyway", "--", "echo", "hi"]).await
        }
    });
    eventually(LONG, "the job parked", || async {
        let jobs = rig
            .alice
            .jobs(Some("parked"), None, None)
            .await
            .unwrap()
            .jobs;
        (!jobs.is_empty()).then_some(())
    })
    .await;
    let (_config, r) = rig.start_runner(&[], &["--unconfined"]).await;
    let out = waiting.await.unwrap();
    assert_eq!(out.code, Some(0), "{out:?}\nrunner log:\n{}", r.log());
    assert_eq!(out.stdout, "hi\n");
}
