//! Join by URL and the one pasted command (v1.2, part B): `POST /v1/join-codes` answers a
//! `url` only for an https public URL; `GET /j/<short>` hands out the connect payload once and
//! never again, across replicas and concurrent calls; unknown, used and expired short codes get
//! one identical 404, each counted against the caller's rate-limit bucket; the database keeps
//! neither the short code nor the payload in plain text; `runner connect https://HOST/j/...`
//! enrols over HTTPS only; and on a fresh machine (a fresh HOME and install directory) the line
//! `join-code create` prints installs the replica's own binary (hash checked), enrols, writes a
//! systemd unit that `systemd-analyze verify` accepts, and the runner it configured runs a job.

use std::path::Path;

use leasehold::client::{Client, Pin, Trust};
use leasehold::replica;
use leasehold::tooling::serve_process::ServeProcess;
use leasehold::wire::{self, connect::Connect};
use nix::sys::signal::Signal;
use reqwest::StatusCode;
use tokio::net::TcpListener;

use crate::procs::{cli, runner, runner_connect, saved, submit_wait, TempDir, BIN, LONG};
use crate::support::{
    connect, data_dump, enrol_req, fresh_database, key_in, require, test_config, TestApp,
};

const GATEWAY: &str = "https://gateway.example";

async fn mint(operator: &Client) -> wire::JoinCode {
    operator
        .create_join_code(&wire::CreateJoinCode {
            tier: wire::Tier::Personal,
            ttl_s: None,
            ephemeral: None,
        })
        .await
        .unwrap()
}

/// The short code of a join URL on [`GATEWAY`].
fn short_of(url: &str) -> &str {
    url.strip_prefix(&format!("{GATEWAY}/j/"))
        .unwrap_or_else(|| panic!("{url} is <first public URL>/j/<short>"))
}

/// An answer's status, headers (but the date) and body.
async fn answer(http: &reqwest::Client, url: &str) -> (StatusCode, Vec<(String, String)>, String) {
    let r = http.get(url).send().await.unwrap();
    let status = r.status();
    let mut headers: Vec<(String, String)> = r
        .headers()
        .iter()
        .filter(|(k, _)| *k != "date")
        .map(|(k, v)| (k.to_string(), v.to_str().unwrap().to_owned()))
        .collect();
    headers.sort();
    (status, headers, r.text().await.unwrap())
}

/// `url` only for an https public URL; the payload once, then the one 404 for used, unknown,
/// malformed and expired short codes and for a code enrolled directly; nothing readable in the
/// database.
#[tokio::test]
async fn a_join_url_hands_out_its_payload_once_and_every_miss_is_one_404() {
    let app = TestApp::spawn_with(1, |c| c.public_url = vec![GATEWAY.into()]).await;
    let alice = app.operator("acme", "alice", false).await;
    let base = app.url(0);
    let http = reqwest::Client::new();

    let code = mint(&alice).await;
    let url = code.url.clone().expect("an https public URL gives a url");
    let short = short_of(&url);
    assert!(short.len() >= 14, "at least 80 random bits: {short}");
    let probe = http.head(format!("{base}/j/{short}")).send().await.unwrap();
    assert_eq!(probe.status(), 405, "a HEAD never burns a payload");
    let (status, headers, body) = answer(&http, &format!("{base}/j/{short}")).await;
    assert_eq!(status, 200, "{body}");
    assert!(headers.contains(&("cache-control".into(), "no-store".into())));
    let got: wire::JoinUrl = serde_json::from_str(&body).unwrap();
    assert_eq!(
        Some(&got.connect),
        code.connect.as_ref(),
        "the code's own payload"
    );
    assert_eq!(Connect::decode(&got.connect).unwrap().code, code.code);

    // Never again, and every miss looks the same.
    let used = answer(&http, &format!("{base}/j/{short}")).await;
    assert_eq!(used.0, 404);
    let unknown = leasehold::domain::join_url::generate();
    let enrolled = mint(&alice).await;
    alice
        .enroll(&enrol_req(&enrolled.code, "direct"))
        .await
        .unwrap();
    let expired = mint(&alice).await;
    let db = connect(&app.database_url).await;
    db.execute(
        "UPDATE join_codes SET expires_at = now() - interval '1 second' WHERE url_hash = $1",
        &[&leasehold::domain::join_url::lookup_hash(short_of(
            expired.url.as_deref().unwrap(),
        ))],
    )
    .await
    .unwrap();
    for miss in [
        unknown.as_str(),
        "not-a-short-code",
        short_of(enrolled.url.as_deref().unwrap()),
        short_of(expired.url.as_deref().unwrap()),
    ] {
        let got = answer(&http, &format!("{base}/j/{miss}")).await;
        assert_eq!(got, used, "{miss}: the same 404 as a used short code");
    }
    let body: serde_json::Value = serde_json::from_str(&used.2).unwrap();
    assert_eq!(body["error"]["code"], "not_found");

    // Only hashes and sealed bytes are stored.
    let fresh = mint(&alice).await;
    let dump = data_dump(&app.database_url);
    for plain in [
        short_of(fresh.url.as_deref().unwrap()),
        fresh.code.as_str(),
        fresh.connect.as_deref().unwrap(),
    ] {
        assert!(!dump.contains(plain), "{plain} stored in plain text");
    }

    // A public URL that is not https gets no join URL.
    let plain =
        TestApp::spawn_with(1, |c| c.public_url = vec!["http://gateway.example".into()]).await;
    let code = mint(&plain.operator("acme", "alice", false).await).await;
    assert!(code.connect.is_some() && code.url.is_none(), "{code:?}");
}

/// Each unknown short code takes a token from the caller's bucket: once it is empty the answer
/// is 429 with Retry-After, so guessing is as slow as failed authentications.
#[tokio::test]
async fn unknown_short_codes_are_counted_against_the_rate_limit_bucket() {
    let app = TestApp::spawn_with(1, |c| {
        c.public_url = vec![GATEWAY.into()];
        c.auth_burst = 3;
        c.auth_refill_per_s = 0.001;
    })
    .await;
    let alice = app.operator("acme", "alice", false).await;
    let code = mint(&alice).await;
    let http = reqwest::Client::new();
    let guess = |s: String| {
        let http = http.clone();
        let url = format!("{}/j/{s}", app.url(0));
        async move { http.get(url).send().await.unwrap() }
    };
    for _ in 0..3 {
        let r = guess(leasehold::domain::join_url::generate()).await;
        assert_eq!(r.status(), 404);
    }
    let r = guess(leasehold::domain::join_url::generate()).await;
    assert_eq!(r.status(), 429);
    assert!(r.headers().contains_key("retry-after"));
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(body["error"]["code"], "rate_limited");
    // As with credentials, a valid one is still served.
    let r = guess(short_of(code.url.as_deref().unwrap()).to_owned()).await;
    assert_eq!(r.status(), 200);
}

/// Single use holds across replicas and concurrent calls: of many fetches of one URL through
/// two replicas at once, exactly one gets the payload.
#[tokio::test]
async fn of_concurrent_fetches_through_two_replicas_exactly_one_gets_the_payload() {
    let app = TestApp::spawn_with(2, |c| c.public_url = vec![GATEWAY.into()]).await;
    let alice = app.operator("acme", "alice", false).await;
    let http = reqwest::Client::new();
    for _ in 0..3 {
        let code = mint(&alice).await;
        let short = short_of(code.url.as_deref().unwrap()).to_owned();
        let calls = (0..16).map(|i| {
            let url = format!("{}/j/{short}", app.url(i % 2));
            let http = http.clone();
            async move { http.get(url).send().await.unwrap().status().as_u16() }
        });
        let statuses = futures_util::future::join_all(calls).await;
        let served = statuses.iter().filter(|s| **s == 200).count();
        let refused = statuses.iter().filter(|s| **s == 404).count();
        assert_eq!((served, refused), (1, 15), "{statuses:?}");
    }
}

/// A self-signed certificate for localhost written as `NAME.crt` / `NAME.key`, and its pin.
fn self_signed(dir: &Path, name: &str) -> (std::path::PathBuf, std::path::PathBuf, Pin) {
    let made =
        rcgen::generate_simple_self_signed(vec!["localhost".into(), "127.0.0.1".into()]).unwrap();
    let (cert, key) = (
        dir.join(format!("{name}.crt")),
        dir.join(format!("{name}.key")),
    );
    std::fs::write(&cert, made.cert.pem()).unwrap();
    std::fs::write(&key, made.signing_key.serialize_pem()).unwrap();
    (cert, key, Pin::of_cert(made.cert.der()).unwrap())
}

/// `runner connect https://HOST/j/<short>` enrols over HTTPS, with the CA it is told to trust
/// or with the pin handed to it; an `http://` join URL, in any case, is refused before anything
/// is sent (its code still works afterwards), and a used URL is refused in words.
#[tokio::test]
async fn runner_connect_enrols_with_a_join_url_over_https_only() {
    let dir = TempDir::new("join-connect");
    let (cert, key, pin) = self_signed(dir.path(), "server");
    let db = fresh_database().await;
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("https://{}", listener.local_addr().unwrap());
    let mut config = test_config(&db);
    config.tls_cert = Some(cert.clone());
    config.tls_key = Some(key);
    config.public_url = vec![url.clone()];
    let _replica = replica::start(config, listener).await.unwrap();
    let alice = Client::with_trust(
        &url,
        Some(key_in(&db, "acme", "alice", false).await),
        &Trust::ca(Some(cert.clone())),
    )
    .unwrap();

    let code = mint(&alice).await;
    let join = code.url.clone().unwrap();
    assert!(join.starts_with(&format!("{url}/j/")), "{join}");
    let plain = join.replacen("https://", "HTTP://", 1);
    let conf = dir.join("runner.json");
    let conf_s = conf.to_str().unwrap();
    for refused in [join.replacen("https://", "http://", 1), plain] {
        let out = runner_connect(&[&refused, "--config", conf_s]).await;
        assert_eq!(out.code, Some(1), "{out:?}");
        assert!(out.stderr.contains("only over https://"), "{}", out.stderr);
    }
    assert!(!conf.exists());
    // Upper-case scheme, trusting the certificate as a CA.
    let shouting = join.replacen("https://", "HTTPS://", 1);
    let out = runner_connect(&[
        &shouting,
        "--ca-cert",
        cert.to_str().unwrap(),
        "--config",
        conf_s,
    ])
    .await;
    assert_eq!(out.code, Some(0), "{out:?}");
    assert_eq!(saved(&conf)["servers"], serde_json::json!([url]));
    assert_eq!(saved(&conf)["pin"], serde_json::json!(pin.to_string()));

    let out = runner_connect(&[
        &join,
        "--pin",
        &pin.to_string(),
        "--config",
        conf_s,
        "--force",
    ])
    .await;
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(out.stderr.contains("already used"), "{}", out.stderr);

    // With the pin handed on (as the installer does), no CA is needed; a wrong pin is refused.
    let code = mint(&alice).await;
    let (_, _, other) = self_signed(dir.path(), "other");
    let join = code.url.unwrap();
    let out = runner_connect(&[
        &join,
        "--pin",
        &other.to_string(),
        "--config",
        conf_s,
        "--force",
    ])
    .await;
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(
        out.stderr.contains("does not match the pinned key"),
        "{}",
        out.stderr
    );
    let out = runner_connect(&[
        &join,
        "--pin",
        &pin.to_string(),
        "--config",
        conf_s,
        "--force",
    ])
    .await;
    assert_eq!(out.code, Some(0), "the wrong pin sent nothing: {out:?}");
    assert_eq!(alice.runners(wire::Tier::Personal).await.unwrap().len(), 2);
}

/// The "one pasted command": against a self-signed TLS replica, `join-code create`
/// prints the installer line; run as is (`sh -c`) on a "fresh machine" (fresh HOME and install
/// directory) it installs the replica's binary, checks its hash, enrols, and (systemd not being
/// PID 1 here) prints and writes the unit, which `systemd-analyze verify` accepts; the runner it
/// configured runs a job.
#[tokio::test]
async fn the_pasted_install_line_installs_enrols_and_its_runner_runs_a_job() {
    let test = "join::the_pasted_install_line_installs_enrols_and_its_runner_runs_a_job";
    let found = |tool: &str| {
        std::env::var_os("PATH")
            .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file()))
    };
    for tool in ["curl", "systemd-analyze", "sha256sum"] {
        let why = format!("{tool} is not installed (.ci/run installs it)");
        if !require(test, (!found(tool)).then_some(why)) {
            return;
        }
    }
    let dir = TempDir::new("join-install");
    let (cert, key, pin) = self_signed(dir.path(), "server");
    let db = fresh_database().await;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let listen = format!("127.0.0.1:{port}");
    let public = format!("https://{listen}");
    let mut serve = ServeProcess::start_on(
        BIN,
        &listen,
        &db,
        [
            ("LEASEHOLD_TLS_CERT", cert.to_str().unwrap()),
            ("LEASEHOLD_TLS_KEY", key.to_str().unwrap()),
            ("LEASEHOLD_PUBLIC_URL", public.as_str()),
            ("LEASEHOLD_SWEEP_INTERVAL_MS", "200"),
        ],
        std::process::Stdio::inherit(),
    )
    .await
    .expect("serve --tls-cert listens");
    let api_key = key_in(&db, "acme", "alice", false).await;
    let ca = cert.to_str().unwrap();

    let out = cli(
        &public,
        &api_key,
        &["join-code", "create", "--ca-cert", ca],
        LONG,
    )
    .await;
    assert_eq!(out.code, Some(0), "{out:?}");
    let line = out
        .stdout
        .lines()
        .find(|l| l.starts_with("sh -c "))
        .unwrap_or_else(|| panic!("an installer line: {}", out.stdout))
        .to_owned();
    assert!(
        line.contains(&format!("--pinnedpubkey {pin}"))
            && line.contains(&format!(
                "{public}/install.sh || echo exit 1)\" install.sh --pin {pin} {public}/j/"
            ))
            && line.ends_with(" --service"),
        "{line}"
    );

    // A fresh machine: nothing of ours in HOME or on the install directory.
    let home = dir.join("home");
    let bin = dir.join("bin");
    std::fs::create_dir_all(&home).unwrap();
    let run = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(&line)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap())
        .env("HOME", &home)
        .env("LEASEHOLD_INSTALL_DIR", &bin)
        .current_dir(&home)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(LONG, run).await.unwrap().unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let installed = bin.join("leasehold");
    assert_eq!(
        std::fs::read(&installed).unwrap(),
        std::fs::read(BIN).unwrap(),
        "the replica's own binary"
    );
    let config = home.join(".config/leasehold/runner.json");
    let saved = saved(&config);
    assert_eq!(saved["servers"], serde_json::json!([public]));
    assert_eq!(saved["pin"], serde_json::json!(pin.to_string()));
    assert!(!stdout.contains(saved["token"].as_str().unwrap()));

    // systemd is not PID 1 here: the unit is printed and written beside the configuration.
    let unit = home.join(".config/leasehold/leasehold-runner.service");
    let text = std::fs::read_to_string(&unit).unwrap();
    assert!(stdout.contains(&text), "printed: {stdout}");
    assert!(
        text.contains(&format!(
            "ExecStart={} runner run --config {}",
            installed.display(),
            config.display()
        )),
        "{text}"
    );
    if let Err(e) = systemd_verify(&unit) {
        panic!("{e}");
    }

    // The runner it configured runs a job.
    let mut r = runner(&config, &dir.join("work"), &["--unconfined"], &[]);
    let out = submit_wait(
        &public,
        &api_key,
        &["--ca-cert", ca, "--", "sh", "-c", "echo installed"],
    )
    .await;
    assert_eq!(out.code, Some(0), "{out:?}\nrunner log:\n{}", r.log());
    assert_eq!(out.stdout, "installed\n");
    r.signal(Signal::SIGTERM);
    assert!(r.exit(LONG).await.success(), "{}", r.log());
    serve.terminate(LONG).await.unwrap();
}

/// The download route serves this replica's platform only, with its checksum.
#[tokio::test]
async fn the_replica_serves_its_own_binary_with_its_sha256_and_no_other() {
    let app = TestApp::spawn().await;
    let http = reqwest::Client::new();
    let own = format!(
        "leasehold-{}-{}",
        std::env::consts::OS,
        std::env::consts::ARCH
    );
    let r = http
        .get(format!("{}/download/{own}.sha256", app.url(0)))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let line = r.text().await.unwrap();
    assert!(line.ends_with(&format!("  {own}\n")) && line.len() == 64 + 2 + own.len() + 1);
    let r = http
        .get(format!("{}/download/leasehold-plan9-mips", app.url(0)))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    let body: serde_json::Value = r.json().await.unwrap();
    assert!(
        body["error"]["message"].as_str().unwrap().contains(&own),
        "names what is served: {body}"
    );
    let r = http
        .get(format!("{}/install.sh", app.url(0)))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.text().await.unwrap().starts_with("#!/bin/sh"));
}

/// Issue 46 row 7: `runner connect --service` with configuration paths holding what a unit
/// file or a shell would read as syntax. A control character (a newline would start a second
/// unit line, `ExecStartPre=` or `User=root`) is refused before the code is used, with an
/// error naming the path; spaces, quotes, a backslash, `$` (systemd's variable expansion),
/// `%` (its specifiers) and shell metacharacters are quoted, so the unit passes
/// `systemd-analyze verify` with the path as one argument, and each printed command, pasted
/// into `sh`, gives its programs exactly the words it names.
#[tokio::test]
async fn runner_connect_service_quotes_hostile_paths_for_systemd_and_sh() {
    let test = "join::runner_connect_service_quotes_hostile_paths_for_systemd_and_sh";
    let analyze = ["systemd-analyze"].iter().all(|tool| {
        std::env::var_os("PATH")
            .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file()))
    });
    let why = "systemd-analyze is not installed (.ci/run installs it)".to_owned();
    if !require(test, (!analyze).then_some(why)) {
        return;
    }
    let app = TestApp::spawn().await;
    let alice = app.operator("acme", "alice", false).await;
    let url = app.url(0);
    let dir = TempDir::new("join-hostile-paths");
    let connect = |code: String, config: std::path::PathBuf| {
        let url = url.clone();
        async move {
            runner_connect(&[
                &code,
                "--server",
                &url,
                "--config",
                config.to_str().unwrap(),
                "--service",
            ])
            .await
        }
    };

    // A newline: refused, nothing written, the code not spent.
    let code = crate::support::join_code(&alice, wire::Tier::Personal, false).await;
    let evil = dir.join("x\nExecStartPre=/bin/touch /tmp/pwned\nUser=root");
    std::fs::create_dir_all(&evil).unwrap();
    let out = connect(code.clone(), evil.join("runner.json")).await;
    assert_ne!(out.code, Some(0), "{out:?}");
    assert!(
        out.stderr.contains("control character") && out.stderr.contains("\\n"),
        "a clear error naming the path: {out:?}"
    );
    assert!(
        std::fs::read_dir(&evil).unwrap().next().is_none(),
        "nothing written"
    );

    for (i, name) in ["a b'c\"d\\e", "$HOME ${X} $(id) `id`", "100%n%%;x&y|z<w>"]
        .into_iter()
        .enumerate()
    {
        let code = if i == 0 {
            code.clone() // the refused attempt left it usable
        } else {
            crate::support::join_code(&alice, wire::Tier::Personal, false).await
        };
        let home = dir.join(name);
        std::fs::create_dir_all(&home).unwrap();
        let config = home.join("runner.json");
        let out = connect(code, config.clone()).await;
        assert_eq!(out.code, Some(0), "{name}: {out:?}");
        let unit_path = home.join("leasehold-runner.service");
        let unit = std::fs::read_to_string(&unit_path).unwrap();
        // One ExecStart line, no line the path made.
        let exec: Vec<&str> = unit
            .lines()
            .filter(|l| l.starts_with("ExecStart"))
            .collect();
        assert_eq!(exec.len(), 1, "{name}: {unit}");
        assert!(!unit.contains("pwned"), "{unit}");
        if name.contains('$') {
            assert!(
                exec[0].contains("$$HOME $${X} $$(id)"),
                "{name}: {}",
                exec[0]
            );
        }
        if name.contains('%') {
            assert!(exec[0].contains("100%%n%%%%"), "{name}: {}", exec[0]);
        }
        if let Err(e) = systemd_verify(&unit_path) {
            panic!("{name}: {e}\n{unit}");
        }

        // The printed commands, pasted into sh, name exactly these words.
        let cp_line = out
            .stdout
            .lines()
            .find(|l| l.trim_start().starts_with("mkdir -p "))
            .unwrap_or_else(|| panic!("{name}: a cp line: {}", out.stdout));
        let seen = sh_words(&format!(
            "mkdir() {{ printf '%s\\0' mkdir \"$@\"; }}; cp() {{ printf '%s\\0' cp \"$@\"; }}; \
             systemctl() {{ printf '%s\\0' systemctl \"$@\"; }}; {cp_line}"
        ));
        let at = seen.iter().position(|w| w == "cp").expect("cp ran");
        assert_eq!(
            seen[at + 1],
            unit_path.to_str().unwrap(),
            "{name}: {cp_line}"
        );
        let foreground = out
            .stdout
            .lines()
            .find_map(|l| l.strip_prefix("or run it in the foreground: "))
            .unwrap_or_else(|| panic!("{name}: a foreground line: {}", out.stdout));
        let words = sh_words(&format!("printf '%s\\0' {foreground}"));
        let at = words.iter().position(|w| w == "--config").unwrap();
        assert_eq!(
            words[at + 1],
            config.to_str().unwrap(),
            "{name}: {foreground}"
        );
    }
}

/// `systemd-analyze verify` of a unit file: what it said when it refused the unit.
fn systemd_verify(unit: &Path) -> Result<(), String> {
    let verify = std::process::Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(unit)
        .output()
        .unwrap();
    if verify.status.success() {
        return Ok(());
    }
    Err(format!(
        "systemd-analyze verify: {}",
        String::from_utf8_lossy(&verify.stderr)
    ))
}

/// What `sh -c script` prints, split at NUL bytes.
fn sh_words(script: &str) -> Vec<String> {
    let out = std::process::Command::new("sh")
        .args(["-c", script])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "sh: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
        .split(|b| *b == 0)
        .filter(|w| !w.is_empty())
        .map(|w| String::from_utf8_lossy(w).into_owned())
        .collect()
}

/// Issue 46 row 9: the install line `join-code create` prints fails visibly when its download
/// fails (here: nothing listens at the public URL's port): a non-zero exit status and curl's
/// message, where `curl ... | sh` ran an empty script and exited 0. And the served script runs
/// nothing when cut short anywhere: it is one function called on its last line, so no prefix
/// calls a program or prints a step (every program on `PATH` is a stub that records its call).
#[tokio::test]
async fn the_install_line_fails_visibly_and_a_truncated_install_script_runs_nothing() {
    let test = "join::the_install_line_fails_visibly_and_a_truncated_install_script_runs_nothing";
    let curl = std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join("curl").is_file()));
    if !require(
        test,
        (!curl).then(|| "curl is not installed (.ci/run installs it)".to_owned()),
    ) {
        return;
    }
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let public = format!("https://127.0.0.1:{closed}");
    let db = fresh_database().await;
    let serve =
        crate::support::serve_process(&db, &[("LEASEHOLD_PUBLIC_URL", public.as_str())]).await;
    let api_key = key_in(&db, "acme", "alice", false).await;
    let out = cli(&serve.url, &api_key, &["join-code", "create"], LONG).await;
    assert_eq!(out.code, Some(0), "{out:?}");
    let line = out
        .stdout
        .lines()
        .find(|l| l.contains("/install.sh"))
        .unwrap_or_else(|| panic!("an installer line: {}", out.stdout))
        .to_owned();
    let dir = TempDir::new("join-install-fails");
    let run = std::process::Command::new("sh")
        .args(["-c", &line])
        .env("HOME", dir.path())
        .env("LEASEHOLD_INSTALL_DIR", dir.join("bin"))
        .current_dir(dir.path())
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(!run.status.success(), "{line}\nexited 0: {stderr}");
    assert!(stderr.contains("curl"), "curl says why: {stderr}");
    assert!(!dir.join("bin").exists(), "nothing installed");

    // The served script, cut short at every line and every 61 bytes.
    let script = reqwest::get(format!("{}/install.sh", serve.url))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let stubs = dir.join("stubs");
    std::fs::create_dir_all(&stubs).unwrap();
    let calls = dir.join("calls");
    let sh = leasehold::tooling::private_pg::find_tool("sh").expect("sh");
    for tool in [
        "curl",
        "uname",
        "mkdir",
        "mktemp",
        "id",
        "cut",
        "sha256sum",
        "shasum",
        "chmod",
        "mv",
        "rm",
    ] {
        let stub = stubs.join(tool);
        std::fs::write(
            &stub,
            format!(
                "#!{}\necho {tool} >> '{}'\nexit 1\n",
                sh.display(),
                calls.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&stub, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
    }
    let mut cuts: Vec<usize> = script.match_indices('\n').map(|(i, _)| i + 1).collect();
    cuts.extend((1..script.len()).step_by(61));
    cuts.retain(|c| *c < script.trim_end().len() && script.is_char_boundary(*c));
    assert!(cuts.len() > 50, "{}", cuts.len());
    for cut in cuts {
        let mut child = std::process::Command::new(&sh)
            .args(["-s", "--", "https://ci.example/j/abc", "--service"])
            .env_clear()
            .env("PATH", &stubs)
            .env("HOME", dir.path())
            .current_dir(dir.path())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(&script.as_bytes()[..cut])
            .unwrap();
        let out = child.wait_with_output().unwrap();
        let said = String::from_utf8_lossy(&out.stderr);
        let ran = std::fs::read_to_string(&calls).unwrap_or_default();
        assert!(
            ran.is_empty() && !said.contains("leasehold install:"),
            "cut at byte {cut} (after {:?}): ran {ran:?}, said {said:?}",
            &script[cut.saturating_sub(40)..cut]
        );
    }
}
