//! What a person sees at the terminal (issue 47): a failed job reads as failed (`job list`
//! newest first with its outcome, exit code, command and age, and `--state` / `--outcome`
//! filters; `submit --wait` ends with `succeeded`, `failed (exit N)` or `cancelled` and exits
//! with the command's status).

use crate::procs::{cli, RunnerRig, LONG};
use crate::support::{eventually, TestApp};

/// The last line of what `--wait` wrote on stderr.
fn last_line(stderr: &str) -> &str {
    stderr.trim_end().lines().last().unwrap_or("")
}

#[tokio::test]
async fn a_failed_job_reads_as_failed_in_the_wait_and_the_list() {
    let rig = RunnerRig::new(TestApp::spawn().await, "people-outcome").await;
    let (_, runner) = rig
        .start_runner(&["--capacity", "2"], &["--unconfined"])
        .await;

    let ok = rig.sh("echo fine").await;
    assert_eq!(ok.code, Some(0), "{ok:?}");
    assert_eq!(last_line(&ok.stderr), "leasehold: succeeded", "{ok:?}");
    let bad = rig.sh("echo broken >&2; exit 3").await;
    assert_eq!(bad.code, Some(3), "{bad:?}");
    assert_eq!(
        last_line(&bad.stderr),
        "leasehold: failed (exit 3)",
        "{bad:?}"
    );

    // Cancelled while --wait follows it.
    let url = rig.url();
    let key = rig.key.clone();
    let waiting = tokio::spawn(async move {
        cli(
            &url,
            &key,
            &["job", "submit", "--wait", "--", "sleep", "60"],
            LONG,
        )
        .await
    });
    let alice = rig.alice.clone();
    let sleeper = eventually(LONG, "the sleeper is leased", || async {
        let page = alice.jobs(Some("leased"), None, None).await.ok()?;
        page.jobs.first().map(|j| j.id)
    })
    .await;
    rig.alice.cancel(sleeper).await.unwrap();
    let cancelled = tokio::time::timeout(LONG, waiting).await.unwrap().unwrap();
    assert_eq!(cancelled.code, Some(1), "{cancelled:?}");
    assert_eq!(
        last_line(&cancelled.stderr),
        "leasehold: cancelled",
        "{cancelled:?}"
    );

    // The list: newest first, with how each ended.
    let list = cli(&rig.url(), &rig.key, &["job", "list"], LONG).await;
    assert_eq!(list.code, Some(0), "{list:?}");
    let lines: Vec<&str> = list.stdout.lines().collect();
    let header: Vec<&str> = lines[0].split_whitespace().collect();
    for column in ["ID", "STATE", "OUTCOME", "EXIT", "AGE", "COMMAND"] {
        assert!(header.contains(&column), "{column}: {}", list.stdout);
    }
    let rows: Vec<Vec<&str>> = lines[1..]
        .iter()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows.len(), 3, "{}", list.stdout);
    let at = |name: &str| header.iter().position(|c| *c == name).unwrap();
    assert_eq!(
        rows[0][at("STATE")],
        "cancelled",
        "newest first: {}",
        list.stdout
    );
    assert_eq!(rows[0][at("OUTCOME")], "cancelled");
    assert_eq!(rows[1][at("STATE")], "completed");
    assert_eq!(rows[1][at("OUTCOME")], "failed", "{}", list.stdout);
    assert_eq!(rows[1][at("EXIT")], "3", "{}", list.stdout);
    assert!(
        lines[2].contains("sh -c 'echo broken >&2; exit 3'"),
        "{}",
        list.stdout
    );
    assert_eq!(rows[2][at("OUTCOME")], "succeeded");
    assert_eq!(rows[2][at("EXIT")], "0");
    assert!(
        rows[2][at("AGE")].ends_with('s') || rows[2][at("AGE")].ends_with('m'),
        "{}",
        list.stdout
    );

    // The filters.
    let list = |filter: &'static str, value: &'static str| {
        let (url, key) = (rig.url(), rig.key.clone());
        async move { cli(&url, &key, &["job", "list", filter, value], LONG).await }
    };
    let failed = list("--outcome", "failed").await;
    assert_eq!(failed.stdout.lines().count(), 2, "{failed:?}");
    assert!(failed.stdout.contains("exit 3"), "{failed:?}");
    let completed = list("--state", "completed").await;
    assert_eq!(completed.stdout.lines().count(), 3, "{completed:?}");
    let none = list("--state", "failed").await;
    assert_eq!(none.code, Some(0), "{none:?}");
    assert!(none.stdout.lines().count() <= 1, "{none:?}");
    assert!(
        none.stderr.contains("--outcome failed"),
        "an empty --state failed points at the outcome: {none:?}"
    );
    let wrong = list("--outcome", "green").await;
    assert_eq!(wrong.code, Some(2), "clap refuses it: {wrong:?}");
    assert!(wrong.stderr.contains("succeeded"), "{wrong:?}");
    drop(runner);
}

/// A mistyped option before `--` is an error naming it, with clap's suggestion, and nothing
/// is dispatched; `submit -- CMD ARGS` and `submit CMD ARGS` (whose ARGS may start with `-`)
/// run CMD with ARGS.
#[tokio::test]
async fn an_unknown_option_before_the_command_is_refused_not_run() {
    let rig = RunnerRig::new(TestApp::spawn().await, "people-typo").await;
    let submit = |args: &'static [&'static str]| {
        let (url, key) = (rig.url(), rig.key.clone());
        async move { cli(&url, &key, &[&["job", "submit"], args].concat(), LONG).await }
    };
    let typo = submit(&["--wiat", "--", "echo", "hi"]).await;
    assert_eq!(typo.code, Some(2), "{typo:?}");
    assert!(typo.stderr.contains("'--wiat'"), "{typo:?}");
    assert!(
        typo.stderr.contains("a similar argument exists: '--wait'"),
        "{typo:?}"
    );
    assert!(typo.stdout.is_empty(), "{typo:?}");
    let typo = submit(&["--wait", "--pririty", "3", "echo", "hi"]).await;
    assert_eq!(typo.code, Some(2), "{typo:?}");
    assert!(typo.stderr.contains("'--pririty'"), "{typo:?}");
    let listed = rig.alice.jobs(None, None, None).await.unwrap();
    assert!(listed.jobs.is_empty(), "nothing dispatched: {listed:?}");

    for (args, argv) in [
        (&["--", "echo", "-n", "hi"][..], ["echo", "-n", "hi"]),
        (&["echo", "-n", "hi"][..], ["echo", "-n", "hi"]),
        (
            &["--priority", "3", "--", "ls", "--wait"][..],
            ["ls", "--wait", ""],
        ),
    ] {
        let out = cli(
            &rig.url(),
            &rig.key,
            &[&["job", "submit"], args].concat(),
            LONG,
        )
        .await;
        let id = crate::procs::job_id(&out);
        let job = rig.alice.job(id).await.unwrap();
        let want: Vec<&str> = argv.iter().copied().filter(|a| !a.is_empty()).collect();
        assert_eq!(job.payload["argv"], serde_json::json!(want), "{args:?}");
    }
}

/// Attempt numbers agree (issue 47 item 7): a job retried twice on its exit code ran three
/// times; `--wait` numbers its leases attempt 1, 2, 3 (never the epoch), `job get` says
/// attempt 3 of 3 with its retries, the re-park events name the attempt that ended, and `job
/// logs` heads each attempt's output.
#[tokio::test]
async fn attempt_numbers_agree_between_wait_get_events_and_logs() {
    let rig = RunnerRig::new(TestApp::spawn().await, "people-attempts").await;
    let (_, _runner) = rig.start_runner(&[], &["--unconfined"]).await;
    let out = rig
        .submit_wait(&[
            "--retry",
            "2",
            "--retry-on",
            "exit_code",
            "--",
            "sh",
            "-c",
            "echo run; exit 3",
        ])
        .await;
    assert_eq!(out.code, Some(3), "{out:?}");
    let leased: Vec<&str> = out
        .stderr
        .lines()
        .filter(|l| l.contains("leased by runner"))
        .collect();
    assert_eq!(leased.len(), 3, "{}", out.stderr);
    assert!(!leased[0].contains("attempt"), "{}", out.stderr);
    assert!(leased[1].ends_with("(attempt 2)"), "{}", out.stderr);
    assert!(leased[2].ends_with("(attempt 3)"), "{}", out.stderr);
    assert!(
        out.stderr.contains("attempt 1 ended (exit_code)"),
        "{}",
        out.stderr
    );
    assert_eq!(last_line(&out.stderr), "leasehold: failed (exit 3)");

    let id = rig.alice.jobs(None, None, None).await.unwrap().jobs[0].id;
    let get = cli(&rig.url(), &rig.key, &["job", "get", &id.to_string()], LONG).await;
    let row = |name: &str| {
        get.stdout
            .lines()
            .find(|l| l.split("  ").next() == Some(name))
            .unwrap_or_else(|| panic!("a row {name}: {}", get.stdout))
            .to_owned()
    };
    assert!(row("attempt").ends_with(" 3 of 3"), "{}", get.stdout);
    assert!(row("retries").contains("2 of 2"), "{}", get.stdout);

    let events = rig.alice.events(id, 0, 0).await.unwrap().events;
    let ended: Vec<i64> = events
        .iter()
        .filter(|e| e.kind == "state" && e.data["reason"] == "retry")
        .map(|e| e.data["attempt"].as_i64().unwrap())
        .collect();
    assert_eq!(ended, [1, 2], "the re-parks name the attempt that ended");

    let logs = cli(
        &rig.url(),
        &rig.key,
        &["job", "logs", &id.to_string()],
        LONG,
    )
    .await;
    let lines: Vec<&str> = logs.stdout.lines().collect();
    assert_eq!(lines.len(), 5, "{}", logs.stdout);
    assert_eq!(lines[0], "run");
    assert!(lines[1].starts_with("--- attempt 2: "), "{}", logs.stdout);
    assert!(lines[3].starts_with("--- attempt 3: "), "{}", logs.stdout);
}

/// Issue 56 row 6: the command line as a newcomer uses it. A closed pipe ends `job get`
/// quietly (no panic); a server address without a scheme works for a loopback address; a
/// refused key says what may be wrong; every duration flag takes `5m`; an empty command is
/// refused (by the CLI, and by the service with a 400); the 8-character id prefix the page
/// shows works; `--json` works before the command.
#[tokio::test]
async fn the_command_line_forgives_what_a_newcomer_types() {
    use std::process::Stdio;
    let app = TestApp::spawn().await;
    let url = app.url(0);
    let key = app.key("acme", "alice", false).await;
    let alice = leasehold::client::Client::new(url.clone(), Some(key.clone()));

    let out = cli(
        &url,
        &key,
        &["job", "submit", "--timeout", "5m", "--", "true"],
        LONG,
    )
    .await;
    assert_eq!(out.code, Some(0), "--timeout 5m: {out:?}");
    let id: uuid::Uuid = out.stdout.trim().parse().unwrap();
    let job = alice.job(id).await.unwrap();
    assert_eq!(job.payload["timeout_s"].as_f64(), Some(300.0), "{job:?}");

    // A closed pipe: `job get ID | head -1` once head has gone (the reader closes its end at
    // once; job get writes only after its call answers).
    let piped = tokio::process::Command::new("sh")
        .args([
            "-c",
            r#""$0" job get "$1"; echo "status $?" >&2"#,
            crate::procs::BIN,
            &id.to_string(),
        ])
        .env("LEASEHOLD_SERVER", &url)
        .env("LEASEHOLD_API_KEY", &key)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let piped = {
        let mut piped = piped;
        drop(piped.stdout.take());
        piped.wait_with_output().await.unwrap()
    };
    let stderr = String::from_utf8_lossy(&piped.stderr);
    assert!(
        !stderr.contains("panicked")
            && !stderr.contains("cannot reach")
            && !stderr.contains("status 0")
            && !stderr.contains("status 101"),
        "ends quietly: {stderr}"
    );

    // The 8 characters the page shows (an id's end), and an id's start.
    let whole = id.to_string();
    for short in [&whole[28..], &whole[..8]] {
        let got = cli(&url, &key, &["job", "get", short], LONG).await;
        assert_eq!(got.code, Some(0), "{short}: {got:?}");
        assert!(got.stdout.contains(&whole), "{got:?}");
    }

    // No scheme on a loopback address.
    let bare = url.trim_start_matches("http://");
    let listed = cli(bare, &key, &["job", "list"], LONG).await;
    assert_eq!(listed.code, Some(0), "--server {bare}: {listed:?}");

    // --json before the command.
    let listed = cli(&url, &key, &["--json", "job", "list"], LONG).await;
    assert_eq!(listed.code, Some(0), "{listed:?}");
    let page: serde_json::Value = serde_json::from_str(&listed.stdout).unwrap();
    assert_eq!(page["jobs"][0]["id"], serde_json::json!(id.to_string()));

    // A refused key.
    let refused = cli(&url, "ak_mistyped", &["job", "list"], LONG).await;
    assert_eq!(refused.code, Some(1));
    assert!(
        refused.stderr.contains("mistyped") && refused.stderr.contains("revoked"),
        "{refused:?}"
    );

    // An empty command: the CLI refuses it, and so does the service.
    let empty = cli(&url, &key, &["job", "submit", "--", ""], LONG).await;
    assert_eq!(empty.code, Some(1), "{empty:?}");
    assert!(empty.stderr.contains("empty"), "{empty:?}");
    for argv in [serde_json::json!([]), serde_json::json!([""])] {
        let refused = alice
            .dispatch(&leasehold::wire::Dispatch::new(
                crate::support::personal(),
                serde_json::json!({ "argv": argv }),
            ))
            .await;
        assert_eq!(crate::support::code(refused), "bad_request");
    }
}

/// Issue 56 row 3: the two tiers as a person meets them. `join-code create` says which tier
/// it mints and how to mint the other; `runners list` shows both tiers with a TIER column; a
/// dispatch no runner of its pool can take names the runner of the other tier that could;
/// `runners revoke` finds a runner's tier by itself, and refuses another's personal runner
/// naming its owner.
#[tokio::test]
async fn the_two_tiers_are_named_found_and_suggested() {
    use leasehold::wire::Tier;
    let app = TestApp::spawn().await;
    let url = app.url(0);
    let admin_key = app.key("acme", "alice", true).await;
    let bob_key = app.key("acme", "bob", false).await;
    let alice = leasehold::client::Client::new(url.clone(), Some(admin_key.clone()));

    let code = cli(&url, &admin_key, &["join-code", "create"], LONG).await;
    assert_eq!(code.code, Some(0), "{code:?}");
    assert!(
        code.stderr.contains("personal runner") && code.stderr.contains("--workspace"),
        "says the tier and how to mint the other: {code:?}"
    );

    let (gpu_box, _) = crate::support::pair_as(
        &alice,
        Tier::Personal,
        &leasehold::wire::CreateRunner {
            label: "box2".into(),
            capabilities: Some(vec!["gpu".into()]),
            ..Default::default()
        },
    )
    .await;
    let (shared, shared_runner) = crate::support::pair_as(
        &alice,
        Tier::Workspace,
        &leasehold::wire::CreateRunner {
            label: "shared-1".into(),
            ..Default::default()
        },
    )
    .await;

    let list = cli(&url, &admin_key, &["runners", "list"], LONG).await;
    assert_eq!(list.code, Some(0), "{list:?}");
    assert!(
        list.stdout.starts_with("ID") && list.stdout.contains("TIER"),
        "{list:?}"
    );
    for (r, tier) in [(&gpu_box, "personal"), (&shared, "workspace")] {
        let line = list
            .stdout
            .lines()
            .find(|l| l.contains(&r.id.to_string()))
            .unwrap_or_else(|| panic!("{} listed: {list:?}", r.label));
        assert!(line.contains(tier), "{line}");
    }
    // What a runner holds now, by the end of each job's id (as the page shows it).
    assert!(
        list.stdout.lines().next().unwrap().contains("RUNNING"),
        "{list:?}"
    );
    let held = alice
        .dispatch(&leasehold::wire::Dispatch::new(
            crate::support::workspace_pool(),
            serde_json::json!({"argv": ["true"]}),
        ))
        .await
        .unwrap();
    assert_eq!(
        crate::support::lease(&shared_runner, 1000, 1).await.len(),
        1
    );
    let list = cli(&url, &admin_key, &["runners", "list"], LONG).await;
    let line = list
        .stdout
        .lines()
        .find(|l| l.contains(&shared.id.to_string()))
        .unwrap_or_else(|| panic!("shared-1 listed: {list:?}"));
    let end = held.id.to_string();
    assert!(line.contains(&end[end.len() - 8..]), "{line}");

    let out = cli(
        &url,
        &admin_key,
        &[
            "job",
            "submit",
            "--pool",
            "workspace",
            "--require",
            "gpu",
            "--",
            "true",
        ],
        LONG,
    )
    .await;
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(
        out.stderr.contains("box2") && out.stderr.contains("--pool personal"),
        "names the near miss: {out:?}"
    );

    // Bob cannot revoke alice's personal runner, and is told whose it is.
    let refused = cli(
        &url,
        &bob_key,
        &["runners", "revoke", &gpu_box.id.to_string()],
        LONG,
    )
    .await;
    assert_eq!(refused.code, Some(1), "{refused:?}");
    assert!(refused.stderr.contains("alice"), "{refused:?}");
    // Two runners paired in the same minute share their first 8 characters (UUIDv7): the
    // prefix is refused naming both, and a longer one works.
    let short = cli(
        &url,
        &admin_key,
        &["runners", "revoke", &shared.id.to_string()[..8]],
        LONG,
    )
    .await;
    assert_eq!(short.code, Some(1), "{short:?}");
    assert!(
        short.stderr.contains("shared-1") && short.stderr.contains("box2"),
        "{short:?}"
    );
    // Alice revokes the workspace runner without saying its tier, by a unique prefix.
    let revoked = cli(
        &url,
        &admin_key,
        &["runners", "revoke", &shared.id.to_string()[..23]],
        LONG,
    )
    .await;
    assert_eq!(revoked.code, Some(0), "{revoked:?}");
    let left = alice.runners(Tier::Workspace).await.unwrap();
    assert!(left.iter().all(|r| r.id != shared.id));
}

/// Issue 56 row 7: `job list --search` finds jobs by their command's text in any case, and its
/// `more:` line keeps the search (quoted as a shell reads it); the 8 characters the page shows
/// name a job however many jobs came after it (the CLI searches for an id's end instead of
/// reading the newest 5000).
#[tokio::test]
async fn job_list_searches_and_a_short_id_is_found_behind_5000_newer_jobs() {
    use leasehold::wire::{BatchItem, Dispatch};
    use serde_json::json;
    let app = TestApp::spawn().await;
    let url = app.url(0);
    let key = app.key("acme", "alice", false).await;
    let alice = leasehold::client::Client::new(url.clone(), Some(key.clone()));
    let personal = crate::support::personal;
    let deploy = |words: &[&str]| Dispatch::new(personal(), json!({ "argv": words }));
    let old = alice
        .dispatch(&deploy(&["make", "deploy", "--env=prod"]))
        .await
        .unwrap();
    let filler = BatchItem {
        dispatch: Dispatch::new(personal(), json!({ "argv": ["true"] })),
        idempotency_key: None,
    };
    for _ in 0..5 {
        alice
            .dispatch_batch(vec![filler.clone(); 1000])
            .await
            .unwrap();
    }
    let newer = alice
        .dispatch(&deploy(&["make", "Deploy docs"]))
        .await
        .unwrap();

    let first = cli(
        &url,
        &key,
        &["job", "list", "--search", "DEPLOY", "--limit", "1"],
        LONG,
    )
    .await;
    assert_eq!(first.code, Some(0), "{first:?}");
    assert_eq!(first.stdout.lines().count(), 2, "{first:?}");
    assert!(first.stdout.contains(&newer.id.to_string()), "{first:?}");
    let more = format!(
        "more: leasehold job list --after {} --search DEPLOY",
        newer.id
    );
    assert!(first.stderr.contains(&more), "{first:?}");
    let after = newer.id.to_string();
    let rest = cli(
        &url,
        &key,
        &["job", "list", "--after", &after, "--search", "DEPLOY"],
        LONG,
    )
    .await;
    assert_eq!(rest.stdout.lines().count(), 2, "{rest:?}");
    assert!(rest.stdout.contains(&old.id.to_string()), "{rest:?}");
    let spaced = cli(
        &url,
        &key,
        &["job", "list", "--search", "make deploy", "--limit", "1"],
        LONG,
    )
    .await;
    assert!(
        spaced.stderr.contains("--search 'make deploy'"),
        "{spaced:?}"
    );

    let whole = old.id.to_string();
    let got = cli(&url, &key, &["job", "get", &whole[28..]], LONG).await;
    assert_eq!(got.code, Some(0), "{got:?}");
    assert!(got.stdout.contains(&whole), "{got:?}");
}
