//! The page in a real headless Chromium, driven over the DevTools protocol: a person signs in
//! with an API key using the keyboard alone, sees a runner come online, and watches a job
//! dispatched through the API complete, with its events; the page stays readable at phone
//! width. A failed job reads as one (issue 47 item 5): a red badge with its exit code in the
//! list and on its page, the command, its log as text per attempt, its attempts as a timeline,
//! its artifacts, Retry and Cancel that work, state and outcome filters on the list, runners
//! named by label and short id, and no runner shown online while the server cannot be
//! reached. Screenshots are saved under `target/ui-screenshots/` and their paths printed
//! (`docs/ui-failed-job.png` is one of them).
//!
//! A command's control and bidirectional formatting characters read escaped, as the command
//! line writes them (issue 52 row 5): `e\u{202e}gnp.exe` cannot pass for another name.
//!
//! The job list pages 25 at a time by the API's cursor and searches by a command's text or an
//! id's 8 characters, and a runner's row links the jobs it holds (issue 56 row 7).
//!
//! Skips, saying why, only where no Chromium can be started (`LEASEHOLD_CHROMIUM` names
//! another binary).

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use base64::Engine;
use futures_util::{SinkExt, StreamExt};
use leasehold::wire;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use crate::support::*;

/// A headless Chromium of this test, killed when dropped.
struct Browser {
    child: tokio::process::Child,
    _profile: tempfile_dir::Dir,
    port: u16,
}

/// A throwaway profile directory (removed on drop).
mod tempfile_dir {
    pub struct Dir(pub std::path::PathBuf);
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

fn chromium_binary() -> Option<String> {
    if let Ok(b) = std::env::var("LEASEHOLD_CHROMIUM") {
        return Some(b);
    }
    [
        "chromium",
        "chromium-browser",
        "google-chrome",
        "google-chrome-stable",
    ]
    .into_iter()
    .find(|b| {
        std::process::Command::new("sh")
            .args(["-c", &format!("command -v {b}")])
            .output()
            .is_ok_and(|o| o.status.success())
    })
    .map(str::to_owned)
}

impl Browser {
    /// Start Chromium, or say why it cannot start.
    async fn start() -> Result<Self, String> {
        let binary = chromium_binary().ok_or("no chromium on PATH (apt-get install chromium)")?;
        let profile =
            std::env::temp_dir().join(format!("leasehold-chromium-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&profile).map_err(|e| e.to_string())?;
        let mut cmd = tokio::process::Command::new(&binary);
        cmd.args([
            "--headless=new",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-extensions",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--remote-debugging-address=127.0.0.1",
            "--remote-debugging-port=0",
            "--window-size=1280,900",
        ])
        .arg(format!("--user-data-dir={}", profile.display()));
        if nix::unistd::Uid::effective().is_root() {
            // Chromium's sandbox refuses to run as root.
            cmd.arg("--no-sandbox");
        }
        cmd.arg("about:blank")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("{binary} does not start: {e}"))?;
        let stderr = child.stderr.take().expect("piped");
        let mut lines = BufReader::new(stderr).lines();
        let mut seen = Vec::new();
        let found = tokio::time::timeout(Duration::from_secs(30), async {
            while let Ok(Some(line)) = lines.next_line().await {
                if let Some(rest) = line.strip_prefix("DevTools listening on ws://127.0.0.1:") {
                    return rest.split('/').next().and_then(|p| p.parse::<u16>().ok());
                }
                seen.push(line);
            }
            None
        })
        .await;
        let port = match found {
            Ok(Some(port)) => port,
            _ => {
                let _ = child.kill().await;
                return Err(format!(
                    "{binary} did not open its DevTools port: {}",
                    seen.join(" | ")
                ));
            }
        };
        // Keep draining stderr so Chromium never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Ok(Self {
            child,
            _profile: tempfile_dir::Dir(profile),
            port,
        })
    }

    /// [`Browser::start`], or `None` once the skip of `test` is recorded (under `CI=true` a
    /// missing Chromium fails instead).
    async fn or_skip(test: &str) -> Option<Self> {
        match Self::start().await {
            Ok(b) => Some(b),
            Err(why) => {
                let why = format!("Chromium cannot start: {why}");
                assert!(!crate::support::require(test, Some(why)));
                None
            }
        }
    }

    /// Attach to the first page target.
    async fn page(&self) -> Page {
        let targets: Vec<Value> = reqwest::get(format!("http://127.0.0.1:{}/json/list", self.port))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let ws = targets
            .iter()
            .find(|t| t["type"] == "page")
            .and_then(|t| t["webSocketDebuggerUrl"].as_str())
            .expect("a page target")
            .to_owned();
        let (socket, _) = tokio_tungstenite::connect_async(ws).await.unwrap();
        let mut page = Page { socket, next: 0 };
        page.call("Page.enable", json!({})).await;
        page.call("Runtime.enable", json!({})).await;
        page
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

/// One page over the DevTools protocol: commands and their answers; events are skipped.
struct Page {
    socket: WebSocketStream<MaybeTlsStream<TcpStream>>,
    next: u64,
}

impl Page {
    async fn call(&mut self, method: &str, params: Value) -> Value {
        let v = self.answer(method, params).await;
        assert!(v.get("error").is_none(), "{method}: {v}");
        v["result"].clone()
    }

    /// The whole answer to a command: `result`, or `error` (as when a reload closed the
    /// context the command ran in).
    async fn answer(&mut self, method: &str, params: Value) -> Value {
        self.next += 1;
        let id = self.next;
        let msg = json!({"id": id, "method": method, "params": params}).to_string();
        self.socket.send(Message::text(msg)).await.unwrap();
        loop {
            let frame = tokio::time::timeout(Duration::from_secs(30), self.socket.next())
                .await
                .unwrap_or_else(|_| panic!("{method}: no answer"))
                .expect("socket open")
                .unwrap();
            let Message::Text(text) = frame else { continue };
            let v: Value = serde_json::from_str(&text).unwrap();
            if v["id"] == id {
                return v;
            }
        }
    }

    /// Evaluate `expr` in the page and return its value.
    async fn eval(&mut self, expr: &str) -> Value {
        let r = self
            .call(
                "Runtime.evaluate",
                json!({"expression": expr, "returnByValue": true, "awaitPromise": true}),
            )
            .await;
        assert!(r.get("exceptionDetails").is_none(), "{expr}: {r}");
        r["result"]["value"].clone()
    }

    /// Wait until `expr` is true in the page. An evaluation a navigation cut short (the page
    /// reloading) or that threw (the page not drawn yet) counts as not yet.
    async fn until(&mut self, expr: &str, what: &str) {
        let end = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            let v = self
                .answer(
                    "Runtime.evaluate",
                    json!({"expression": expr, "returnByValue": true, "awaitPromise": true}),
                )
                .await;
            if v["result"]["result"]["value"] == json!(true) {
                return;
            }
            assert!(
                tokio::time::Instant::now() < end,
                "page never showed: {what}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn key(&mut self, key: &str, code: &str, vk: u32, text: &str) {
        for kind in ["keyDown", "keyUp"] {
            let mut p = json!({"type": kind, "key": key, "code": code,
                               "windowsVirtualKeyCode": vk, "nativeVirtualKeyCode": vk});
            if kind == "keyDown" && !text.is_empty() {
                p["text"] = json!(text);
            }
            self.call("Input.dispatchKeyEvent", p).await;
        }
    }

    /// Open the page at `url`, its key `key` already given (in sessionStorage, as signing in
    /// leaves it), and wait for the board.
    async fn signed_in(&mut self, url: &str, key: &str) {
        self.call("Page.navigate", json!({"url": format!("{url}/ui")}))
            .await;
        self.until("document.readyState === 'complete'", "the page")
            .await;
        // The reload runs after this evaluation has answered: one cut short by it is an error.
        self.eval(&format!(
            "sessionStorage.setItem('leasehold.key', '{key}'); \
             setTimeout(() => location.reload(), 0); true"
        ))
        .await;
        self.until(
            "document.body !== null && document.body.dataset.ready === 'true'",
            "the board",
        )
        .await;
    }

    /// Choose the jobs list's state and outcome filters, as a person does.
    async fn filter(&mut self, state: &str, outcome: &str) {
        self.eval(&format!(
            "{{ const s = document.getElementById('filter-state'); s.value = '{state}'; \
             const o = document.getElementById('filter-outcome'); o.value = '{outcome}'; \
             o.dispatchEvent(new Event('change')); }} true"
        ))
        .await;
    }

    async fn screenshot(&mut self, name: &str) -> PathBuf {
        let shot = self
            .call(
                "Page.captureScreenshot",
                json!({"format": "png", "captureBeyondViewport": true}),
            )
            .await;
        let png = base64::engine::general_purpose::STANDARD
            .decode(shot["data"].as_str().unwrap())
            .unwrap();
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/ui-screenshots");
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        std::fs::write(&path, png).unwrap();
        println!("screenshot: {}", path.display());
        path
    }
}

#[tokio::test]
async fn runners_page_signs_in_and_follows_a_job_to_completion() {
    let Some(browser) = Browser::or_skip("runners_page").await else {
        return;
    };
    let app = TestApp::spawn().await;
    let url = app.url(0);
    let key = app.key("acme", "alice", false).await;
    let operator = leasehold::client::Client::new(url.clone(), Some(key.clone()));
    let (runner, runner_client) =
        pair(&operator, wire::Tier::Personal, &["linux", "docker"], 2).await;

    let mut page = browser.page().await;
    page.call("Page.navigate", json!({"url": format!("{url}/ui")}))
        .await;
    page.until(
        "document.readyState === 'complete' && !document.getElementById('sign-in').hidden",
        "the sign-in form",
    )
    .await;
    // Keyboard only: the key field has focus; type the key and press Enter.
    assert_eq!(page.eval("document.activeElement.id").await, json!("key"));
    page.call("Input.insertText", json!({"text": key})).await;
    page.key("Enter", "Enter", 13, "\r").await;
    page.until(
        "document.body.dataset.ready === 'true'",
        "the board after sign-in",
    )
    .await;
    assert_eq!(
        page.eval(&format!(
            "sessionStorage.getItem('leasehold.key') === '{key}'"
        ))
        .await,
        json!(true),
        "the key is kept in this tab's session storage"
    );

    // The paired runner shows, never seen; once it calls in it is online.
    let row = format!(
        "document.querySelector('tr[data-runner=\"{}\"]')",
        runner.id
    );
    page.until(
        &format!("{row} !== null && {row}.dataset.presence === 'never'"),
        "the paired runner",
    )
    .await;
    runner_client
        .runner_heartbeat(&wire::RunnerHeartbeat {
            version: Some("0.1.0".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    page.until(
        &format!("{row}.dataset.presence === 'online'"),
        "the runner online",
    )
    .await;
    assert_eq!(
        page.eval(&format!("{row}.textContent.includes('docker')"))
            .await,
        json!(true)
    );
    page.until(
        "document.getElementById('pool-online').textContent === '1'",
        "one runner online in the pool",
    )
    .await;

    // A job dispatched through the API appears parked, then completes once the runner runs it.
    let job = dispatch(&operator, personal(), json!({"argv": ["true"]})).await;
    let job_row = format!("document.querySelector('tr[data-job=\"{}\"]')", job.id);
    page.until(&format!("{job_row} !== null"), "the dispatched job")
        .await;
    let leased = lease(&runner_client, 5_000, 1).await;
    assert_eq!(leased.len(), 1);
    page.until(
        &format!("{job_row}.dataset.state === 'leased'"),
        "the job leased",
    )
    .await;
    runner_client
        .append_events(
            job.id,
            leased[0].epoch,
            vec![wire::NewEvent {
                kind: "log".into(),
                data: Some(json!({"line": "hello from the runner"})),
            }],
        )
        .await
        .unwrap();
    let report = b"<testsuite tests=\"1\"/>".to_vec();
    runner_client
        .upload_artifact(
            job.id,
            leased[0].epoch,
            "dist/report.xml",
            report.clone().into(),
            Some(report.len() as u64),
        )
        .await
        .unwrap();
    runner_client
        .complete(job.id, leased[0].epoch, json!({"exit_code": 0}))
        .await
        .unwrap();
    page.until(
        &format!("{job_row}.dataset.state === 'completed'"),
        "the job completed",
    )
    .await;

    // Open the job from the keyboard: its events list the state changes and the runner's log.
    page.eval(&format!("{job_row}.querySelector('button').focus()"))
        .await;
    page.key("Enter", "Enter", 13, "\r").await;
    page.until(
        "!document.getElementById('job').hidden && document.getElementById('job-facts').dataset.state === 'completed'",
        "the job's details",
    )
    .await;
    page.until(
        "document.getElementById('events').textContent.includes('hello from the runner')",
        "the runner's event",
    )
    .await;
    assert_eq!(
        page.eval("document.getElementById('events').children.length >= 4")
            .await,
        json!(true)
    );
    // The job's artifacts are listed with download links that fetch the bytes with the key.
    let link = "document.querySelector('#artifacts a[data-path=\"dist/report.xml\"]')";
    page.until(&format!("{link} !== null"), "the job's artifact")
        .await;
    assert_eq!(
        page.eval(&format!(
            "fetch({link}.href, {{headers: {{Authorization: 'Bearer ' + sessionStorage.getItem('leasehold.key')}}}}).then(r => r.text())"
        ))
        .await,
        json!("<testsuite tests=\"1\"/>")
    );
    let desktop = page.screenshot("runners-page.png").await;
    assert!(desktop.exists());

    // Phone width: nothing overflows the page sideways (wide tables scroll inside their box).
    page.call(
        "Emulation.setDeviceMetricsOverride",
        json!({"width": 390, "height": 844, "deviceScaleFactor": 2, "mobile": true}),
    )
    .await;
    page.until(
        "document.documentElement.scrollWidth <= window.innerWidth",
        "no sideways overflow at 390 px",
    )
    .await;
    page.screenshot("runners-page-phone.png").await;

    // The page made no request outside this server.
    let foreign = page
        .eval(&format!(
            "performance.getEntriesByType('resource').map(e => e.name).filter(n => !n.startsWith('{url}'))"
        ))
        .await;
    assert_eq!(foreign, json!([]), "requests outside the replica");
}

/// The CSS colour `--bad` resolves to in the light scheme.
const RED: &str = "rgb(179, 38, 30)";

#[tokio::test]
async fn a_failed_jobs_page_reads_as_a_failure_and_can_be_retried() {
    let Some(browser) = Browser::or_skip("failed_job_page").await else {
        return;
    };
    let mut app = TestApp::spawn().await;
    let url = app.url(0);
    let key = app.key("acme", "alice", false).await;
    let operator = leasehold::client::Client::new(url.clone(), Some(key.clone()));
    let (runner, rc) = pair_as(
        &operator,
        wire::Tier::Personal,
        &wire::CreateRunner {
            label: "build-box".into(),
            capacity: Some(2),
            ..Default::default()
        },
    )
    .await;

    // A job that fails twice (one retry on exit_code), printing to stdout and stderr, with an
    // artifact; and one that succeeds.
    let mut req = wire::Dispatch::new(
        personal(),
        json!({"argv": ["sh", "-c", "make test"], "artifacts": ["report.xml"]}),
    );
    req.retry = Some(json!({"limit": 1, "on": ["exit_code"]}));
    let failed = operator.dispatch(&req).await.unwrap();
    for (attempt, line) in [(1, "compiling\n"), (2, "compiling again\n")] {
        let leased = lease(&rc, 5_000, 1).await;
        assert_eq!(leased[0].id, failed.id, "attempt {attempt}");
        let epoch = leased[0].epoch;
        let out = |kind: &str, text: &str| wire::NewEvent {
            kind: kind.into(),
            data: Some(json!({ "text": text })),
        };
        rc.append_events(
            failed.id,
            epoch,
            vec![
                out("stdout", line),
                out("stderr", "error: 2 tests failed\n"),
                out("stdout", "make: *** [test] Error 3\n"),
            ],
        )
        .await
        .unwrap();
        let report = format!("<testsuite failures=\"2\" attempt=\"{attempt}\"/>").into_bytes();
        let len = report.len() as u64;
        let path = format!("report-{attempt}.xml");
        rc.upload_artifact(failed.id, epoch, &path, report.into(), Some(len))
            .await
            .unwrap();
        rc.complete(failed.id, epoch, json!({"exit_code": 3}))
            .await
            .unwrap();
    }
    let passed = dispatch(&operator, personal(), json!({"argv": ["true"]})).await;
    let leased = lease(&rc, 5_000, 1).await;
    rc.complete(passed.id, leased[0].epoch, json!({"exit_code": 0}))
        .await
        .unwrap();
    assert_eq!(operator.job(failed.id).await.unwrap().state, "completed");

    let mut page = browser.page().await;
    page.signed_in(&url, &key).await;

    // Runners by label and a short id.
    let runner_row = format!(
        "document.querySelector('tr[data-runner=\"{}\"]')",
        runner.id
    );
    page.until(&format!("{runner_row} !== null"), "the runner")
        .await;
    let short = &runner.id.to_string()[28..];
    assert_eq!(
        page.eval(&format!(
            "{runner_row}.querySelector('th').textContent.includes('build-box') && \
             {runner_row}.querySelector('th').textContent.includes('{short}')"
        ))
        .await,
        json!(true),
        "the runner's label and short id"
    );

    // The list: the failure is a red badge with its exit code, beside the command.
    let row = format!("document.querySelector('tr[data-job=\"{}\"]')", failed.id);
    page.until(&format!("{row} !== null"), "the failed job")
        .await;
    let badge = format!("{row}.querySelector('.badge')");
    assert_eq!(
        page.eval(&format!("{badge}.textContent")).await,
        json!("failed · exit 3")
    );
    assert_eq!(
        page.eval(&format!("getComputedStyle({badge}).backgroundColor"))
            .await,
        json!(RED)
    );
    assert_eq!(
        page.eval(&format!(
            "{row}.textContent.includes(\"sh -c 'make test'\")"
        ))
        .await,
        json!(true)
    );
    let passed_row = format!("document.querySelector('tr[data-job=\"{}\"]')", passed.id);
    assert_eq!(
        page.eval(&format!("{passed_row}.dataset.outcome")).await,
        json!("succeeded")
    );

    // The outcome filter keeps the failure and drops the success; the state filter too.
    page.filter("", "failed").await;
    page.until(
        &format!("{passed_row} === null && {row} !== null"),
        "only the failed job",
    )
    .await;
    page.filter("failed", "").await;
    page.until(
        &format!("{row} === null && !document.getElementById('jobs-empty').hidden"),
        "no job in state failed (a failed command is completed)",
    )
    .await;
    page.filter("", "").await;
    page.until(&format!("{row} !== null"), "the list unfiltered")
        .await;

    // The job's page.
    page.eval(&format!("{row}.querySelector('button').click(); true"))
        .await;
    page.until(
        "!document.getElementById('job').hidden && \
         document.getElementById('job-facts').dataset.outcome === 'failed' && \
         document.querySelectorAll('#log .log-block').length === 2",
        "the failed job's page",
    )
    .await;
    let text = |id: &str| format!("document.getElementById('{id}').textContent");
    assert_eq!(
        page.eval(&text("job-badge")).await,
        json!("failed · exit 3")
    );
    assert_eq!(
        page.eval(&text("job-command")).await,
        json!("sh -c 'make test'")
    );
    // The log: text per attempt, stderr marked, no event JSON.
    let log = page.eval(&text("log")).await;
    let log = log.as_str().unwrap();
    assert!(
        log.contains("Attempt 1") && log.contains("Attempt 2"),
        "{log}"
    );
    assert!(
        log.contains("compiling again") && !log.contains("{\"text\""),
        "{log}"
    );
    assert_eq!(
        page.eval(
            "[...document.querySelectorAll('#log .log-block')].map(b => \
             [...b.querySelectorAll('.line')].map(l => l.classList.contains('stderr') ? 'E ' + l.textContent : l.textContent))"
        )
        .await,
        json!([
            ["compiling", "E error: 2 tests failed", "make: *** [test] Error 3"],
            ["compiling again", "E error: 2 tests failed", "make: *** [test] Error 3"]
        ])
    );
    assert_eq!(
        page.eval(
            "getComputedStyle(document.querySelector('#log pre')).fontFamily.includes('monospace')"
        )
        .await,
        json!(true)
    );
    // Attempts agree with the command line: attempt 2 of 2, its first lease.
    let facts = page.eval(&text("job-facts")).await;
    assert!(facts.as_str().unwrap().contains("Attempt2 of 2"), "{facts}");
    let timeline = page.eval(&text("timeline")).await;
    let timeline = timeline.as_str().unwrap();
    assert!(
        timeline.contains("Attempt 1 ended: the command exited non-zero")
            && timeline.contains("Attempt 2: started"),
        "{timeline}"
    );
    // Its artifacts, each attempt's, with download links.
    let link = "document.querySelector('#artifacts a[data-path=\"report-2.xml\"]')";
    page.until(
        &format!("{link} !== null && document.querySelectorAll('#artifacts a').length === 2"),
        "both attempts' artifacts",
    )
    .await;
    assert_eq!(
        page.eval(&format!(
            "fetch({link}.href, {{headers: {{Authorization: \
             'Bearer ' + sessionStorage.getItem('leasehold.key')}}}}).then(r => r.text())"
        ))
        .await,
        json!("<testsuite failures=\"2\" attempt=\"2\"/>")
    );
    assert_eq!(
        page.eval(
            "!document.getElementById('job-retry').hidden && document.getElementById('job-cancel').hidden"
        )
        .await,
        json!(true),
        "a settled job can be retried, not cancelled"
    );
    let shot = page.screenshot("ui-failed-job.png").await;
    assert!(shot.exists());

    // Retry, then Cancel, from the page.
    page.eval("document.getElementById('job-retry').click(); true")
        .await;
    eventually(LONG_UI, "the retry", || async {
        let j = operator.job(failed.id).await.ok()?;
        (j.state == "parked" && j.retries == 2).then_some(())
    })
    .await;
    page.until(
        "!document.getElementById('job-cancel').hidden",
        "Cancel offered for the parked job",
    )
    .await;
    page.eval("document.getElementById('job-cancel').click(); true")
        .await;
    eventually(LONG_UI, "the cancel", || async {
        let j = operator.job(failed.id).await.ok()?;
        (j.state == "cancelled").then_some(())
    })
    .await;
    page.until(
        "document.getElementById('job-facts').dataset.outcome === 'cancelled'",
        "the cancelled job",
    )
    .await;
    // Words a person reads, not the contract's codes (issue 56 row 7).
    page.until(
        "document.getElementById('timeline').textContent.includes('Cancelled')",
        "the timeline's end",
    )
    .await;
    let read = page
        .eval(
            "document.getElementById('timeline').textContent + ' | ' + \
             document.getElementById('job-facts').textContent",
        )
        .await;
    let read = read.as_str().unwrap();
    assert!(read.contains("retried by hand"), "{read}");
    for code in ["cancelled: cancelled", "retry_call", "exit_code"] {
        assert!(!read.contains(code), "{code} in {read}");
    }

    // The server goes away: no runner is shown online, and the page says why.
    rc.runner_heartbeat(&wire::RunnerHeartbeat::default())
        .await
        .unwrap();
    page.until(
        &format!("{runner_row}.dataset.presence === 'online'"),
        "the runner online",
    )
    .await;
    app.replicas.pop().unwrap().stop(LONG_UI).await;
    page.until(
        &format!(
            "{runner_row}.dataset.presence !== 'online' && \
             !document.getElementById('offline').hidden"
        ),
        "no presence claimed while the server is unreachable",
    )
    .await;
}

const LONG_UI: Duration = Duration::from_secs(20);

/// Issue 52 row 5: a command whose words carry a right-to-left override, an escape sequence, a
/// carriage return and a tab reads on the page (the list's cell, its tooltip, the job's page)
/// exactly as `leasehold job show` prints it: each such character escaped (`\u{202e}`, `\r`),
/// never raw.
#[tokio::test]
async fn a_commands_control_and_bidi_characters_read_escaped_as_the_cli_writes_them() {
    let Some(browser) = Browser::or_skip("bidi_command").await else {
        return;
    };
    let app = TestApp::spawn().await;
    let url = app.url(0);
    let key = app.key("acme", "alice", false).await;
    let operator = leasehold::client::Client::new(url.clone(), Some(key.clone()));
    let argv = [
        "e\u{202e}gnp.exe",
        "a\u{1b}[31mred\u{2066}",
        "over\rwrite",
        "tab\there",
    ];
    let job = dispatch(&operator, personal(), json!({ "argv": argv })).await;
    let words: Vec<String> = argv
        .iter()
        .map(|w| leasehold::wire::command::shell_word(w))
        .collect();
    let cli = leasehold::wire::input::escaped(&words.join(" "));
    assert!(cli.contains("e\\u{202e}gnp.exe") && !cli.contains('\u{202e}'));

    let mut page = browser.page().await;
    page.signed_in(&url, &key).await;
    let row = format!("document.querySelector('tr[data-job=\"{}\"]')", job.id);
    page.until(&format!("{row} !== null"), "the job").await;
    let cell = format!("{row}.querySelector('.command-cell')");
    assert_eq!(page.eval(&format!("{cell}.textContent")).await, json!(cli));
    assert_eq!(page.eval(&format!("{cell}.title")).await, json!(cli));
    page.eval(&format!("{row}.querySelector('button').click(); true"))
        .await;
    page.until(
        "!document.getElementById('job').hidden && \
         document.getElementById('job-command').textContent !== ''",
        "the job's page",
    )
    .await;
    assert_eq!(
        page.eval("document.getElementById('job-command').textContent")
            .await,
        json!(cli)
    );
}

/// The activity view follows the feed live (server-sent events read with the key), and an
/// admin sees the webhooks with their last deliveries.
#[tokio::test]
async fn the_page_shows_live_activity_and_the_webhooks() {
    let Some(browser) = Browser::or_skip("activity_page").await else {
        return;
    };
    let app = TestApp::spawn_with(1, |c| {
        c.webhook_allow_http = true;
        c.webhook_poll_ms = 20;
    })
    .await;
    let url = app.url(0);
    let key = app.key("acme", "ada", true).await;
    let admin = leasehold::client::Client::new(url.clone(), Some(key.clone()));
    admin
        .put_webhook(
            "ci-done",
            &wire::PutWebhook {
                url: "http://localhost:9/hook".into(),
                kinds: None,
                states: None,
            },
        )
        .await
        .unwrap();
    let mut page = browser.page().await;
    page.call("Page.navigate", json!({"url": format!("{url}/ui")}))
        .await;
    page.until("document.readyState === 'complete'", "the page")
        .await;
    page.eval(&format!(
        "sessionStorage.setItem('leasehold.key', '{key}'); \
         setTimeout(() => location.reload(), 0); true"
    ))
    .await;
    page.until(
        "document.body !== null && document.body.dataset.ready === 'true'",
        "the board",
    )
    .await;
    let job = dispatch(&admin, personal(), json!(null)).await;
    let short = &job.id.to_string()[28..];
    page.until(
        &format!("document.getElementById('activity').textContent.includes('{short}')"),
        "the dispatch in the activity view",
    )
    .await;
    admin.cancel(job.id).await.unwrap();
    page.until(
        "document.getElementById('activity').firstChild.textContent.includes('cancelled')",
        "the cancel on top, live",
    )
    .await;
    page.until(
        "!document.getElementById('webhooks-section').hidden && document.getElementById('webhooks').textContent.includes('ci-done') && document.querySelectorAll('#webhooks .badge').length > 1",
        "the webhook with its deliveries",
    )
    .await;
    page.screenshot("activity.png").await;
}

/// Issue 56 row 4 (v1.4 "Why a job waits"): a job no runner can take says so on its page,
/// with what it requires.
#[tokio::test]
async fn a_waiting_jobs_page_says_why_and_what_it_requires() {
    let Some(browser) = Browser::or_skip("waiting_job_page").await else {
        return;
    };
    let app = TestApp::spawn().await;
    let url = app.url(0);
    let key = app.key("acme", "alice", false).await;
    let operator = leasehold::client::Client::new(url.clone(), Some(key.clone()));
    let mut req = wire::Dispatch::new(
        personal(),
        json!({"argv": ["nvidia-smi"], "timeout_s": 300}),
    );
    req.required_capabilities = Some(vec!["gpu".into()]);
    let job = operator.dispatch(&req).await.unwrap();

    let mut page = browser.page().await;
    page.call("Page.navigate", json!({"url": format!("{url}/ui")}))
        .await;
    page.until("document.readyState === 'complete'", "the page")
        .await;
    page.eval(&format!(
        "sessionStorage.setItem('leasehold.key', '{key}'); location.hash = '#job={}'; \
         setTimeout(() => location.reload(), 0); true",
        job.id
    ))
    .await;
    page.until(
        "document.body !== null && document.body.dataset.ready === 'true' && \
         !document.getElementById('job').hidden && \
         document.getElementById('job-facts').dataset.state === 'parked'",
        "the job's page",
    )
    .await;
    let facts = page
        .eval("document.getElementById('job-facts').textContent")
        .await;
    let facts = facts.as_str().unwrap();
    assert!(facts.contains("Requiresgpu"), "{facts}");
    assert!(
        facts.contains("Waiting") && facts.contains("no_matching_runner"),
        "{facts}"
    );
    assert!(facts.contains("Timeout5 min"), "{facts}");
}

/// Issue 56 row 7: a job's ANSI colours are rendered in its log, never shown as escapes.
#[tokio::test]
async fn a_jobs_colours_are_rendered_not_shown_as_escapes() {
    let Some(browser) = Browser::or_skip("log_colours").await else {
        return;
    };
    let app = TestApp::spawn().await;
    let url = app.url(0);
    let key = app.key("acme", "alice", false).await;
    let operator = leasehold::client::Client::new(url.clone(), Some(key.clone()));
    let (_runner, rc) = pair(&operator, wire::Tier::Personal, &[], 1).await;
    let job = dispatch(&operator, personal(), json!({"argv": ["true"]})).await;
    let leased = lease(&rc, 5_000, 1).await;
    rc.append_events(
        job.id,
        leased[0].epoch,
        vec![wire::NewEvent {
            kind: "stdout".into(),
            data: Some(
                json!({"text": "\u{1b}[32mok\u{1b}[0m plain \u{1b}[1;31mbad\u{1b}[0m\u{1b}[K\n"}),
            ),
        }],
    )
    .await
    .unwrap();
    rc.complete(job.id, leased[0].epoch, json!({"exit_code": 0}))
        .await
        .unwrap();

    let mut page = browser.page().await;
    page.call("Page.navigate", json!({"url": format!("{url}/ui")}))
        .await;
    page.until("document.readyState === 'complete'", "the page")
        .await;
    page.eval(&format!(
        "sessionStorage.setItem('leasehold.key', '{key}'); location.hash = '#job={}'; \
         setTimeout(() => location.reload(), 0); true",
        job.id
    ))
    .await;
    page.until(
        "document.body !== null && document.querySelector('#log .line') !== null",
        "the job's log",
    )
    .await;
    let text = page
        .eval("document.querySelector('#log .line').textContent")
        .await;
    assert_eq!(text, json!("ok plain bad"));
    // Each line says when it was written.
    assert_eq!(
        page.eval(
            "(() => { const l = document.querySelector('#log .line'); \
             return l.title !== '' && !Number.isNaN(Date.parse(l.dataset.at)); })()"
        )
        .await,
        json!(true)
    );
    assert_eq!(
        page.eval(
            "[...document.querySelectorAll('#log .line span')].map(s => s.className + ':' + \
             s.textContent).join(',')"
        )
        .await,
        json!("ansi-fg-2:ok,ansi-fg-1 ansi-bold:bad")
    );
    // The raw text to download: what the job wrote, the escapes stripped. (The page's CSP keeps
    // even a blob: URL from fetch; the link's file is the page's `rawText`.)
    page.until(
        "!document.getElementById('log-raw').hidden",
        "the raw log link",
    )
    .await;
    assert_eq!(
        page.eval(
            "document.getElementById('log-raw').download + '|' + \
             document.getElementById('log-raw').href.startsWith('blob:') + '|' + rawText"
        )
        .await,
        json!(format!("job-{}.log|true|ok plain bad\n", job.id))
    );
}

/// The ids of the jobs the page's list shows, top to bottom, as a JSON array.
const LISTED: &str =
    "JSON.stringify([...document.querySelectorAll('#jobs tbody tr')].map(r => r.dataset.job))";

/// The ids of `jobs` as the page's list would show them, as a JSON array.
fn listed(jobs: &[wire::Job]) -> String {
    serde_json::to_string(&jobs.iter().map(|j| j.id.to_string()).collect::<Vec<_>>()).unwrap()
}

/// Issue 56 row 7: the list shows 25 jobs a page: Older and Newer move through the rest by the
/// API's cursor (a page stays put while newer jobs arrive), and a search finds jobs by their
/// command's text in any case or by the 8 characters of an id the page shows.
#[tokio::test]
async fn the_jobs_list_pages_older_and_newer_and_searches() {
    let Some(browser) = Browser::or_skip("jobs_paging").await else {
        return;
    };
    let app = TestApp::spawn().await;
    let url = app.url(0);
    let key = app.key("acme", "alice", false).await;
    let operator = leasehold::client::Client::new(url.clone(), Some(key.clone()));
    let items = (0..60)
        .map(|i| wire::BatchItem {
            dispatch: wire::Dispatch::new(
                personal(),
                json!({"argv": ["echo", format!("Job-{i}")]}),
            ),
            idempotency_key: None,
        })
        .collect();
    let jobs = operator.dispatch_batch(items).await.unwrap();
    let newest: Vec<wire::Job> = jobs.iter().rev().cloned().collect();

    let mut page = browser.page().await;
    page.signed_in(&url, &key).await;
    let shows = |want: &[wire::Job]| format!("{LISTED} === '{}'", listed(want));
    page.until(&shows(&newest[..25]), "the newest 25").await;
    let button = |id: &str| format!("document.getElementById('{id}')");
    assert_eq!(
        page.eval(&format!("{}.disabled", button("jobs-newer")))
            .await,
        json!(true),
        "nothing is newer than the newest"
    );
    page.eval(&format!("{}.click(); true", button("jobs-older")))
        .await;
    page.until(&shows(&newest[25..50]), "the next 25, older")
        .await;
    // A page stays put while newer jobs arrive: it is read from its cursor at every refresh.
    let refreshes = "Number(document.body.dataset.refreshes)";
    let seen = page.eval(refreshes).await.as_u64().unwrap();
    let late = dispatch(&operator, personal(), json!({"argv": ["echo", "late"]})).await;
    page.until(&format!("{refreshes} >= {}", seen + 2), "two refreshes")
        .await;
    assert_eq!(page.eval(LISTED).await, json!(listed(&newest[25..50])));
    page.eval(&format!("{}.click(); true", button("jobs-older")))
        .await;
    page.until(&shows(&newest[50..]), "the oldest 10").await;
    assert_eq!(
        page.eval(&format!("{}.disabled", button("jobs-older")))
            .await,
        json!(true),
        "nothing is older than the oldest"
    );
    page.eval(&format!("{}.click(); true", button("jobs-newer")))
        .await;
    page.until(&shows(&newest[25..50]), "back to the middle")
        .await;
    page.eval(&format!("{}.click(); true", button("jobs-newer")))
        .await;
    let mut now_newest = vec![late.clone()];
    now_newest.extend_from_slice(&newest[..24]);
    page.until(&shows(&now_newest), "the newest, the late job on top")
        .await;

    // A search, typed as a person types it: a command's text in any case, then an id's end.
    let search = |text: &str| {
        format!(
            "{{ const s = document.getElementById('filter-search'); s.value = {}; \
             s.dispatchEvent(new Event('input')); }} true",
            json!(text)
        )
    };
    page.eval(&search("job-4")).await;
    let fours: Vec<wire::Job> = newest
        .iter()
        .filter(|j| j.payload["argv"][1].as_str().unwrap().starts_with("Job-4"))
        .cloned()
        .collect();
    assert_eq!(fours.len(), 11);
    page.until(&shows(&fours), "the jobs whose command holds job-4")
        .await;
    page.screenshot("jobs-search.png").await;
    let seventh = &jobs[7];
    page.eval(&search(&seventh.id.to_string()[28..])).await;
    page.until(
        &shows(std::slice::from_ref(seventh)),
        "the job by its 8 characters",
    )
    .await;
    page.eval(&search("no such job")).await;
    page.until(
        "document.querySelectorAll('#jobs tbody tr').length === 0 && \
         !document.getElementById('jobs-empty').hidden && \
         document.getElementById('jobs-empty').textContent.includes('match')",
        "no job found, said so",
    )
    .await;
    page.eval(&search("")).await;
    page.until(&shows(&now_newest), "the newest again").await;
}

/// Issue 56 row 7: a runner's row shows the jobs it holds now, each a link to its page; a job
/// it settles leaves the row.
#[tokio::test]
async fn a_runner_row_links_the_jobs_it_holds() {
    let Some(browser) = Browser::or_skip("runner_jobs").await else {
        return;
    };
    let app = TestApp::spawn().await;
    let url = app.url(0);
    let key = app.key("acme", "alice", false).await;
    let operator = leasehold::client::Client::new(url.clone(), Some(key.clone()));
    let (runner, rc) = pair(&operator, wire::Tier::Personal, &[], 2).await;
    let (idle, _idle_client) = pair(&operator, wire::Tier::Personal, &[], 1).await;
    for word in ["first", "second"] {
        dispatch(&operator, personal(), json!({"argv": ["echo", word]})).await;
    }
    let mut held = lease(&rc, 5_000, 2).await;
    held.sort_by_key(|l| l.id);
    assert_eq!(held.len(), 2);

    let mut page = browser.page().await;
    page.signed_in(&url, &key).await;
    let links = |runner: uuid::Uuid| {
        format!(
            "JSON.stringify([...document.querySelectorAll('tr[data-runner=\"{runner}\"] a[data-job]')]\
             .map(a => a.dataset.job + ' ' + a.textContent))"
        )
    };
    let want: Vec<String> = held
        .iter()
        .map(|l| format!("{} {}", l.id, &l.id.to_string()[28..]))
        .collect();
    page.until(
        &format!(
            "{} === '{}'",
            links(runner.id),
            serde_json::to_string(&want).unwrap()
        ),
        "the runner's two jobs",
    )
    .await;
    assert_eq!(page.eval(&links(idle.id)).await, json!("[]"));
    page.screenshot("runner-jobs.png").await;

    // A link opens the job's page.
    page.eval(&format!(
        "document.querySelector('tr[data-runner=\"{}\"] a[data-job=\"{}\"]').click(); true",
        runner.id, held[1].id
    ))
    .await;
    page.until(
        &format!(
            "!document.getElementById('job').hidden && location.hash === '#job={}' && \
             document.getElementById('job-facts').dataset.state === 'leased'",
            held[1].id
        ),
        "the held job's page",
    )
    .await;

    rc.complete(held[0].id, held[0].epoch, json!({"exit_code": 0}))
        .await
        .unwrap();
    let one = serde_json::to_string(&want[1..]).unwrap();
    page.until(
        &format!("{} === '{one}'", links(runner.id)),
        "the settled job gone from the row",
    )
    .await;
}
