//! Secrets on the lease path (docs/api.md v1.1 "Secrets"), over real HTTP on PostgreSQL.
//!
//! Invariants defended: a dispatch may name only secrets that exist (400 naming the field);
//! the lease carries their values, read at lease time, and a source's credential only as
//! `source.credential`; no Job, event or list ever carries a value; a job whose secret was
//! deleted is rejected `secret_missing` without an attempt counted; a replica that cannot open
//! secrets answers 503 naming the variable and parks the call's jobs again, attempts given back;
//! values survive a key rotation through `leasehold admin reseal-secrets`; the CLI takes a value
//! only from standard input and never prints it. With the real binaries: a runner runs a
//! sourced job at exactly its commit with the secret in its command's environment, masked in
//! what it streams; an outdated runner finishes what it holds and leases no more.

use leasehold::client::Client;
use leasehold::domain::sealing::SealKey;
use leasehold::wire::{self, Tier};
use reqwest::Method;
use serde_json::json;

use crate::secrets::call;
use crate::support::{code, lease, pair, start_replica, workspace_pool, TestApp};

#[tokio::test]
async fn secrets_travel_only_in_the_lease_and_a_deleted_one_rejects_the_job() {
    let app = TestApp::spawn_with(1, |c| c.secrets_key = Some(SealKey::generate())).await;
    let admin = app.operator("acme", "root", true).await;
    let value = "npm_V4lue-only-in-the-lease";
    let credential = "ghs_cred-only-in-source";
    admin.put_secret("NPM_TOKEN", value).await.unwrap();
    admin.put_secret("GIT_TOKEN", credential).await.unwrap();
    let repo = "https://git.example.com/acme/app.git";
    let created = admin
        .pair_runner(
            Tier::Workspace,
            &wire::CreateRunner {
                label: "builder".into(),
                repo_targets: Some(vec![wire::AdvertisedTarget::git(repo)]),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    admin
        .set_repo_target(created.runner.id, created.runner.repo_targets[0].id, true)
        .await
        .unwrap();
    let runner = admin.with_token(created.token);

    let source = json!({"provider": "git", "repository": repo,
                        "commit_sha": "0123456789abcdef0123456789abcdef01234567",
                        "credential_secret": "GIT_TOKEN"});
    let mut d = wire::Dispatch::new(workspace_pool(), json!({"argv": ["true"]}));
    d.secrets = Some(vec!["NPM_TOKEN".into()]);
    d.source = Some(source.clone());
    let job = admin.dispatch(&d).await.unwrap();
    assert_eq!(job.secrets, ["NPM_TOKEN"]);

    // Names that do not exist are the caller's error, named.
    let key = admin.token().unwrap();
    for (body, field) in [
        (
            json!({"target": {"pool": "workspace"}, "payload": 1, "secrets": ["NOPE"]}),
            "secrets",
        ),
        (
            json!({"target": {"pool": "workspace"}, "payload": 1, "secrets": ["bad name"]}),
            "secrets",
        ),
        (
            json!({"target": {"pool": "workspace"}, "payload": 1,
                "source": {"provider": "git", "repository": repo,
                           "commit_sha": "0123456789abcdef0123456789abcdef01234567",
                           "credential_secret": "NOPE"}}),
            "source.credential_secret",
        ),
        (
            json!({"jobs": [{"target": {"pool": "workspace"}, "payload": 1},
                         {"target": {"pool": "workspace"}, "payload": 1, "secrets": ["NOPE"]}]}),
            "jobs[1].secrets",
        ),
    ] {
        let path = if body.get("jobs").is_some() {
            "/v1/jobs/batch"
        } else {
            "/v1/jobs"
        };
        let (status, answer) = call(&app.url(0), key, Method::POST, path, Some(body)).await;
        assert_eq!(status, 400, "{answer}");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(message.starts_with(field), "{message}");
    }

    let got = lease(&runner, 1000, 1).await;
    assert_eq!(got[0].id, job.id);
    assert_eq!(got[0].secrets.0.len(), 1, "only the named secrets");
    assert_eq!(got[0].secrets.0["NPM_TOKEN"], value);
    let src = got[0].source.as_ref().unwrap();
    assert_eq!(src.credential.as_ref().unwrap().0, credential);
    assert!(
        !format!("{:?}", got[0]).contains(value),
        "Debug never shows a value"
    );
    runner
        .append_events(
            job.id,
            got[0].epoch,
            vec![wire::NewEvent {
                kind: "log".into(),
                data: Some(json!("hi")),
            }],
        )
        .await
        .unwrap();
    runner
        .complete(job.id, got[0].epoch, json!({"ok": true}))
        .await
        .unwrap();

    // Nowhere else: the Job, its events, the lists.
    for path in [
        format!("/v1/jobs/{}", job.id),
        format!("/v1/jobs/{}/events", job.id),
        "/v1/jobs".to_owned(),
        "/v1/secrets".to_owned(),
        "/v1/workspace/runners".to_owned(),
    ] {
        let (status, body) = call(&app.url(0), key, Method::GET, &path, None).await;
        assert_eq!(status, 200, "{path}");
        let text = body.to_string();
        assert!(
            !text.contains(value) && !text.contains(credential),
            "{path}: {text}"
        );
    }

    // Deleted before its lease: rejected secret_missing, no attempt counted, not handed out.
    let second = admin.dispatch(&d).await.unwrap();
    admin.delete_secret("NPM_TOKEN").await.unwrap();
    assert!(lease(&runner, 0, 1).await.is_empty());
    let rejected = admin.job(second.id).await.unwrap();
    assert_eq!(rejected.state, "rejected");
    assert_eq!(
        rejected.error.as_ref().unwrap()["reason"],
        json!("secret_missing")
    );
    assert_eq!(rejected.attempts, 0);
    assert_eq!(rejected.billing_tenant.as_deref(), Some("acme"));
    let events = admin.events(second.id, 0, 0).await.unwrap().events;
    assert_eq!(
        events.last().unwrap().data["reason"],
        json!("secret_missing")
    );
}

#[tokio::test]
async fn a_replica_without_the_key_answers_503_and_parks_the_jobs_again() {
    let app = TestApp::spawn_with(1, |c| c.secrets_key = Some(SealKey::generate())).await;
    let admin = app.operator("acme", "root", true).await;
    admin.put_secret("TOKEN", "v").await.unwrap();
    let mut keyless = app.config.clone();
    keyless.secrets_key = None;
    let keyless = start_replica(keyless).await;
    let (_, runner) = pair(&admin, Tier::Workspace, &[], 2).await;
    let plain = crate::support::dispatch(&admin, workspace_pool(), json!("plain")).await;
    let mut d = wire::Dispatch::new(workspace_pool(), json!("secret"));
    d.secrets = Some(vec!["TOKEN".into()]);
    d.priority = Some(5);
    let with_secret = admin.dispatch(&d).await.unwrap();

    let via_keyless = Client::new(
        format!("http://{}", keyless.addr),
        runner.token().map(str::to_owned),
    );
    let (status, body) = call(
        via_keyless.base(),
        runner.token().unwrap(),
        Method::POST,
        "/v1/runner/lease",
        Some(json!({"wait_ms": 0, "max_jobs": 2})),
    )
    .await;
    assert_eq!(status, 503, "{body}");
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("LEASEHOLD_SECRETS_KEY"));
    for id in [plain.id, with_secret.id] {
        let j = admin.job(id).await.unwrap();
        assert_eq!(
            (j.state.as_str(), j.attempts),
            ("parked", 0),
            "{id}: nothing half-done"
        );
    }
    // A replica with the key hands both out.
    let got = lease(&runner, 0, 2).await;
    assert_eq!(got.len(), 2);
    assert_eq!(got[0].secrets.0["TOKEN"], "v");
    let admin_keyless = Client::new(via_keyless.base(), admin.token().map(str::to_owned));
    assert_eq!(
        code(admin_keyless.put_secret("X", "y").await),
        "unavailable"
    );
}

/// The whole path with the real binaries: `leasehold serve` with a key, a runner enrolled with
/// `--repo-target` and approved, `job submit --secret --source --wait`.
#[tokio::test]
async fn a_real_runner_runs_at_the_exact_commit_with_the_secret_in_its_environment_only() {
    use sha2::Digest;
    if !crate::sources::have_git("a_real_runner_runs_at_the_exact_commit") {
        return;
    }
    let dir = crate::procs::TempDir::new("trust-e2e");
    let (_, bare, first, tip) = crate::sources::two_commit_repo(&dir);
    let repo = format!("file://{}", bare.display());
    let crate::procs::SealingServer {
        server,
        url,
        key,
        admin,
    } = crate::procs::SealingServer::start(&dir).await;
    let value = "s3cr3t-Value-42";
    // The runner below is personal: only an `any` secret reaches it.
    admin
        .put_secret_scoped("DEPLOY_TOKEN", value, Some("any"), None)
        .await
        .unwrap();

    let config = crate::procs::enrol(
        &admin,
        &[&url],
        dir.path(),
        false,
        &["--repo-target", &repo],
    )
    .await;
    let me = admin.runners(Tier::Personal).await.unwrap().remove(0);
    assert_eq!(me.repo_targets[0].status, "pending");
    admin
        .set_repo_target(me.id, me.repo_targets[0].id, true)
        .await
        .unwrap();
    let mut runner = crate::procs::runner(&config, &dir.join("work"), &["--unconfined"], &[]);

    let script = "git rev-parse HEAD; cat file; echo \"token=$DEPLOY_TOKEN\"; \
                  printf %s \"$DEPLOY_TOKEN\" | base64; printf %s \"$DEPLOY_TOKEN\" | sha256sum";
    let source = format!("{repo}@{first}");
    let out = crate::procs::cli(
        &url,
        &key,
        &[
            "job",
            "submit",
            "--secret",
            "DEPLOY_TOKEN",
            "--source",
            &source,
            "--wait",
            "--",
            "sh",
            "-c",
            script,
        ],
        std::time::Duration::from_secs(90),
    )
    .await;
    assert_eq!(out.code, Some(0), "{out:?}\nrunner log:\n{}", runner.log());
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(
        lines[0], first,
        "exactly the job's commit, not the tip {tip}"
    );
    assert_eq!(lines[1], "v1");
    assert_eq!(lines[2], "token=***", "masked in streamed output");
    assert_eq!(lines[3], "***", "its base64 form too");
    let digest: String = sha2::Sha256::digest(value.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert!(
        lines[4].starts_with(&digest),
        "the command saw the value: {}",
        lines[4]
    );

    let job = admin.jobs(None, None, None).await.unwrap().jobs.remove(0);
    let events = admin.events(job.id, 0, 0).await.unwrap();
    for text in [
        serde_json::to_string(&job).unwrap(),
        serde_json::to_string(&events).unwrap(),
        out.stdout.clone(),
        out.stderr.clone(),
        runner.log(),
        server.log(),
    ] {
        assert!(!text.contains(value), "the value leaked: {text}");
    }
    runner.signal(nix::sys::signal::Signal::SIGTERM);
    runner.exit(std::time::Duration::from_secs(30)).await;
}

/// A runner the service calls outdated finishes and reports the job it holds (heartbeats and
/// the report go through), logs the upgrade hint, and leases nothing more: replica A accepts
/// any version, replica B wants 99.0.0; the runner holds a job leased through A when A dies.
#[tokio::test]
async fn an_outdated_reference_runner_finishes_what_it_holds_and_leases_no_more() {
    use crate::procs::{cli, FailoverRig, LONG as long};
    use nix::sys::signal::Signal;
    let app = TestApp::spawn_with(0, |_| {}).await;
    let ttl = ("LEASEHOLD_LEASE_TTL_MS", "6000");
    let (any_version, strict) = ([ttl], [ttl, ("LEASEHOLD_MIN_RUNNER_VERSION", "99.0.0")]);
    let mut rig = FailoverRig::start(&app, "trust-outdated", &any_version, &strict).await;
    let (alice, r, url_b, key) = (&rig.alice, &rig.runner, &rig.url_b, &rig.key);
    let held = rig
        .submit(&["--", "sh", "-c", "sleep 8; echo finished"])
        .await;
    crate::support::eventually(long, "leased through A", || async {
        (alice.job(held).await.ok()?.state == "leased").then_some(())
    })
    .await;
    rig.a.signal(Signal::SIGKILL);
    rig.a.exit(long).await;
    let next = rig.submit(&["--", "echo", "never"]).await;

    let done = crate::support::eventually(long, "the held job completes", || async {
        let j = alice.job(held).await.ok()?;
        (j.state == "completed").then_some(j)
    })
    .await;
    assert_eq!(
        done.result.unwrap()["stdout_tail"],
        json!("finished\n"),
        "log:\n{}",
        r.log()
    );
    assert_eq!(done.epoch, 1, "heartbeated through B, never re-delivered");
    crate::support::eventually(long, "the hint is logged", || async {
        let log = r.log();
        (log.contains("99.0.0") && log.contains("upgrade")).then_some(())
    })
    .await;
    let next = alice.job(next).await.unwrap();
    assert_eq!(
        (next.state.as_str(), next.attempts),
        ("parked", 0),
        "no new lease"
    );
    let me = alice.runners(Tier::Personal).await.unwrap().remove(0);
    assert!(me.outdated);
    assert_eq!(me.version.as_deref(), Some(env!("CARGO_PKG_VERSION")));
    let listed = cli(url_b, key, &["runners", "list"], long).await;
    assert!(
        listed
            .stdout
            .contains(&format!("{} (outdated)", env!("CARGO_PKG_VERSION"))),
        "{}",
        listed.stdout
    );
}

/// Key rotation: values sealed under the old key open on a replica given both keys; after
/// `leasehold admin reseal-secrets` they open with the new key alone, and the old one alone no
/// longer opens them (the lease answers 503 and gives the job back).
#[tokio::test]
async fn secrets_survive_a_key_rotation_through_reseal() {
    let (old, new) = (SealKey::generate(), SealKey::generate());
    let app = TestApp::spawn_with(1, |c| c.secrets_key = Some(old.clone())).await;
    let admin = app.operator("acme", "root", true).await;
    admin.put_secret("TOKEN", "rotated-value").await.unwrap();
    let (_, runner) = pair(&admin, Tier::Workspace, &[], 1).await;

    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(["admin", "reseal-secrets"])
        .env("DATABASE_URL", &app.database_url)
        .env("LEASEHOLD_SECRETS_KEY", new.to_base64())
        .env("LEASEHOLD_SECRETS_OLD_KEY", old.to_base64())
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("1 secret(s) re-sealed"));

    let replica_with = |key: &SealKey| {
        let mut c = app.config.clone();
        c.secrets_key = Some(key.clone());
        start_replica(c)
    };
    let mut d = wire::Dispatch::new(workspace_pool(), json!("x"));
    d.secrets = Some(vec!["TOKEN".into()]);
    let job = admin.dispatch(&d).await.unwrap();
    let old_only = replica_with(&old).await;
    let (status, _) = call(
        &format!("http://{}", old_only.addr),
        runner.token().unwrap(),
        Method::POST,
        "/v1/runner/lease",
        Some(json!({"wait_ms": 0})),
    )
    .await;
    assert_eq!(status, 503, "the old key alone no longer opens it");
    assert_eq!(admin.job(job.id).await.unwrap().attempts, 0);
    let new_only = replica_with(&new).await;
    let via_new = Client::new(
        format!("http://{}", new_only.addr),
        runner.token().map(str::to_owned),
    );
    let got = lease(&via_new, 0, 1).await;
    assert_eq!(got[0].secrets.0["TOKEN"], "rotated-value");
}

/// `leasehold secrets set NAME` takes the value from standard input, never from argv, and no
/// command prints it.
#[tokio::test]
async fn the_cli_reads_a_secret_from_stdin_and_never_prints_it() {
    use tokio::io::AsyncWriteExt;
    let app = TestApp::spawn_with(1, |c| c.secrets_key = Some(SealKey::generate())).await;
    let key = app.key("acme", "root", true).await;
    let run = |args: &'static [&'static str], stdin: Option<&'static str>| {
        let (url, key) = (app.url(0), key.clone());
        async move {
            let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_leasehold"))
                .args(args)
                .env("LEASEHOLD_SERVER", url)
                .env("LEASEHOLD_API_KEY", key)
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            let mut input = child.stdin.take().unwrap();
            if let Some(text) = stdin {
                input.write_all(text.as_bytes()).await.unwrap();
            }
            drop(input);
            child.wait_with_output().await.unwrap()
        }
    };
    let set = run(&["secrets", "set", "NPM_TOKEN"], Some("from-stdin-value\n")).await;
    assert!(
        set.status.success(),
        "{}",
        String::from_utf8_lossy(&set.stderr)
    );
    let empty = run(&["secrets", "set", "EMPTY"], None).await;
    assert!(!empty.status.success());
    assert!(String::from_utf8_lossy(&empty.stderr).contains("standard input"));
    // The scope flags (issue 18, row 5): defaults `workspace` and `member`.
    let scoped = run(
        &[
            "secrets",
            "set",
            "SCOPED",
            "--runners",
            "any",
            "--dispatch",
            "admin",
        ],
        Some("scoped-value"),
    )
    .await;
    assert!(
        scoped.status.success(),
        "{}",
        String::from_utf8_lossy(&scoped.stderr)
    );
    let bad = run(
        &["secrets", "set", "BAD", "--runners", "everyone"],
        Some("v"),
    )
    .await;
    assert!(!bad.status.success());
    let list = run(&["secrets", "list"], None).await;
    let listed = String::from_utf8_lossy(&list.stdout);
    assert!(
        listed.contains("NPM_TOKEN") && !listed.contains("EMPTY") && !listed.contains("BAD"),
        "{listed}"
    );
    let row = |name: &str| -> Vec<String> {
        listed
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("{name} in {listed}"))
            .split_whitespace()
            .take(3)
            .map(str::to_owned)
            .collect()
    };
    assert_eq!(row("NPM_TOKEN"), ["NPM_TOKEN", "workspace", "member"]);
    assert_eq!(row("SCOPED"), ["SCOPED", "any", "admin"]);
    for out in [&set, &list] {
        let all = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!all.contains("from-stdin-value"), "{all}");
    }
    // One trailing newline was dropped: the stored value is exactly what was piped, less it.
    let (_, runner) = pair(
        &Client::new(app.url(0), Some(key.clone())),
        Tier::Workspace,
        &[],
        1,
    )
    .await;
    let admin = Client::new(app.url(0), Some(key.clone()));
    let mut d = wire::Dispatch::new(workspace_pool(), json!("x"));
    d.secrets = Some(vec!["NPM_TOKEN".into()]);
    admin.dispatch(&d).await.unwrap();
    assert_eq!(
        lease(&runner, 0, 1).await[0].secrets.0["NPM_TOKEN"],
        "from-stdin-value"
    );
    let del = run(&["secrets", "delete", "NPM_TOKEN"], None).await;
    assert!(del.status.success());
    let left: Vec<String> = admin
        .secrets()
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.name)
        .collect();
    assert_eq!(left, ["SCOPED"]);
}
