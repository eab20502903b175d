//! The operator tools for agents (contract v1.2 part B, MCP), tested with real clients: the
//! official Python SDK (`mcp` from PyPI, `tests/it/mcp_client.py`) over Streamable HTTP through
//! HAProxy running the shipped `deploy/haproxy.cfg` in front of two replica processes, and over
//! stdio with `leasehold mcp` as its subprocess; the official MCP Inspector's CLI listing and
//! calling the tools. Invariants: the thirteen tools are listed by their exact names; each one
//! is its API call with the caller's role (what the script changed is in the database, a
//! member's refusal of an admin's call is an error result beginning with `forbidden`); `/mcp`
//! keeps no session, so one client's requests are served by both replicas; a bad key at `/mcp`
//! gets the API's opaque 401, byte for byte.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use leasehold::client::Client;
use leasehold::domain::sealing::SealKey;
use leasehold::wire::{self, Tier};
use serde_json::{json, Value};

use crate::balancer::Balancer;
use crate::support::{fresh_database, haproxy, key_in, pair, require, serve_process, TestApp};

const SECRET: (&str, &str) = ("DEPLOY_TOKEN", "s3cr3t-value-never-shown");
const UNAUTHORIZED: &str = r#"{"error":{"code":"unauthorized","message":"unauthorized"}}"#;

/// `python3` with the official SDK importable; `None` (see [`require`]) when it is not.
fn python_sdk(test: &str) -> Option<PathBuf> {
    let python = leasehold::tooling::private_pg::find_tool("python3");
    let found = python.filter(|p| {
        std::process::Command::new(p)
            .args(["-c", "import mcp.client.client, httpx2"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    });
    let why = "python3 with the MCP SDK is not installed (pip install mcp; .ci/run does)";
    require(test, found.is_none().then(|| why.to_owned())).then_some(found?)
}

/// The MCP Inspector's command; `None` (see [`require`]) when it is not installed.
fn inspector(test: &str) -> Option<PathBuf> {
    let found = leasehold::tooling::private_pg::find_tool("mcp-inspector");
    let why = "the MCP Inspector is not installed (npm install -g @modelcontextprotocol/inspector; .ci/run does)";
    require(test, found.is_none().then(|| why.to_owned())).then_some(found?)
}

/// What the script calls the tools about: two keys of workspace `acme`, a workspace runner
/// that advertised one repository target, and one secret.
struct Setup {
    admin_key: String,
    member_key: String,
    admin: Client,
    runner: wire::Runner,
    runner_token: String,
}

impl Setup {
    async fn new(url: &str, database_url: &str) -> Self {
        let admin_key = key_in(database_url, "acme", "root", true).await;
        let member_key = key_in(database_url, "acme", "bob", false).await;
        let admin = Client::new(url, Some(admin_key.clone()));
        let (_, runner) = pair(&admin, Tier::Workspace, &["linux"], 1).await;
        let runner_token = runner.token().unwrap().to_owned();
        let runner = runner
            .runner_heartbeat(&wire::RunnerHeartbeat {
                repo_targets: Some(vec![wire::AdvertisedTarget {
                    provider: "git".into(),
                    repository: "https://git.example.com/acme/app.git".into(),
                    label: None,
                }]),
                ..Default::default()
            })
            .await
            .expect("advertise a target")
            .runner;
        admin
            .put_secret(SECRET.0, SECRET.1)
            .await
            .expect("a secret");
        Self {
            admin_key,
            member_key,
            admin,
            runner,
            runner_token,
        }
    }

    /// The script's fixture: where to connect (`url`, or `command` and `server` for stdio).
    fn fixture(&self, connect: Value) -> Value {
        let mut fixture = json!({
            "admin_key": self.admin_key,
            "member_key": self.member_key,
            "runner_id": self.runner.id,
            "target_id": self.runner.repo_targets[0].id,
            "secret_name": SECRET.0,
            "secret_value": SECRET.1,
        });
        fixture
            .as_object_mut()
            .unwrap()
            .extend(connect.as_object().unwrap().clone());
        fixture
    }

    /// What the script did is in the service: the job it dispatched was cancelled (and, with
    /// the retry route, parked again) and the target it approved then revoked is revoked.
    async fn check(&self, report: &Value) {
        let names: Vec<&str> = report["called"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n.as_str().unwrap())
            .collect();
        assert_eq!(names.len(), 13, "{names:?}");
        let id = report["job_id"].as_str().unwrap().parse().unwrap();
        let job = self.admin.job(id).await.unwrap();
        // Cancelled, then parked again by retry_job.
        assert_eq!(report["retried"], true, "{report}");
        assert_eq!(job.state, "parked");
        let roster = self.admin.runners(Tier::Workspace).await.unwrap();
        let runner = roster.iter().find(|r| r.id == self.runner.id).unwrap();
        assert_eq!(runner.repo_targets[0].status, "revoked");
        assert!(report["member_refusal"]
            .as_str()
            .unwrap()
            .starts_with("forbidden: "));
    }
}

/// Run the SDK script with `fixture`; its last line of output is its report.
async fn run_script(python: &Path, fixture: &Value) -> Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/mcp_client.py");
    let out = tokio::process::Command::new(python)
        .arg(&script)
        .env("MCP_FIXTURE", fixture.to_string())
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(120), out)
        .await
        .expect("the script finishes")
        .expect("run python3");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the MCP client script failed: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(stdout.lines().last().unwrap_or("")).expect("a JSON report")
}

/// `POST /mcp` requests the replica at `url` answered, from its `/metrics` (read from a
/// client that is not the trusted balancer, so no PROXY header is expected of it).
async fn mcp_requests(url: &str) -> u64 {
    let http = reqwest::Client::builder()
        .local_address("127.0.0.2".parse::<std::net::IpAddr>().unwrap())
        .build()
        .unwrap();
    let text = http
        .get(format!("{url}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .filter(|l| {
            l.starts_with("leasehold_http_request_duration_seconds_count{")
                && l.contains(r#"method="POST",route="/mcp""#)
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

#[tokio::test]
async fn the_python_sdk_calls_every_tool_over_streamable_http_through_haproxy_to_two_replicas() {
    const TEST: &str = "mcp_python_sdk_http";
    let Some(haproxy) = haproxy(TEST) else {
        return;
    };
    let Some(python) = python_sdk(TEST) else {
        return;
    };
    let database_url = fresh_database().await;
    let seal = SealKey::generate().to_base64();
    let env = [
        ("LEASEHOLD_PROXY_PROTOCOL", "true"),
        ("LEASEHOLD_TRUSTED_PROXIES", "127.0.0.1"),
        ("LEASEHOLD_SECRETS_KEY", seal.as_str()),
    ];
    let replica1 = serve_process(&database_url, &env).await;
    let replica2 = serve_process(&database_url, &env).await;
    let addr = |url: &str| -> SocketAddr { url.trim_start_matches("http://").parse().unwrap() };
    let balancer = Balancer::start(haproxy, [addr(&replica1.url), addr(&replica2.url)]).await;
    let setup = Setup::new(&balancer.url, &database_url).await;

    // No key, or a bad one: the API's opaque 401, the same bytes.
    let http = reqwest::Client::new();
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "test", "version": "0"}}});
    for key in [None, Some("ak_wrong"), Some(setup.runner_token.as_str())] {
        let mut request = http
            .post(format!("{}/mcp", balancer.url))
            .header("accept", "application/json, text/event-stream")
            .json(&initialize);
        if let Some(key) = key {
            request = request.bearer_auth(key);
        }
        let answer = request.send().await.unwrap();
        assert_eq!(answer.status(), 401, "key {key:?}");
        assert_eq!(answer.text().await.unwrap(), UNAUTHORIZED);
    }

    let fixture = setup.fixture(json!({"url": format!("{}/mcp", balancer.url)}));
    let report = run_script(&python, &fixture).await;
    eprintln!("python SDK over HTTP: {report}");
    setup.check(&report).await;

    // No session is pinned: the one client's requests were served by both replicas.
    let served = [
        mcp_requests(&replica1.url).await,
        mcp_requests(&replica2.url).await,
    ];
    eprintln!("POST /mcp answered per replica: {served:?}");
    assert!(
        served.iter().all(|n| *n > 0),
        "both replicas answered /mcp: {served:?}"
    );
}

#[tokio::test]
async fn the_python_sdk_calls_every_tool_over_stdio_through_leasehold_mcp() {
    const TEST: &str = "mcp_python_sdk_stdio";
    let Some(python) = python_sdk(TEST) else {
        return;
    };
    let app = TestApp::spawn_with(1, |c| c.secrets_key = Some(SealKey::generate())).await;
    let url = app.url(0);
    let setup = Setup::new(&url, &app.database_url).await;
    let fixture = setup.fixture(json!({
        "command": [env!("CARGO_BIN_EXE_leasehold"), "mcp"],
        "server": url,
    }));
    let report = run_script(&python, &fixture).await;
    eprintln!("python SDK over stdio: {report}");
    setup.check(&report).await;
}

#[tokio::test]
async fn the_mcp_inspector_cli_lists_the_thirteen_tools_and_calls_one() {
    const TEST: &str = "mcp_inspector_cli";
    let Some(inspector) = inspector(TEST) else {
        return;
    };
    let app = TestApp::spawn().await;
    let key = app.key("acme", "alice", false).await;
    let endpoint = format!("{}/mcp", app.url(0));
    let run = |args: Vec<String>| {
        let inspector = inspector.clone();
        let endpoint = endpoint.clone();
        let auth = format!("Authorization: Bearer {key}");
        async move {
            let out = tokio::process::Command::new(&inspector)
                .arg("--cli")
                .arg(&endpoint)
                .args(["--transport", "http", "--header", &auth])
                .args(args)
                .stdin(Stdio::null())
                .kill_on_drop(true)
                .output();
            let out = tokio::time::timeout(Duration::from_secs(120), out)
                .await
                .expect("the inspector finishes")
                .expect("run the inspector");
            let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
            assert!(
                out.status.success(),
                "mcp-inspector failed: {}\n{stdout}\n{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
            let start = stdout.find('{').expect("JSON on stdout");
            serde_json::from_str::<Value>(stdout[start..].trim()).expect("one JSON document")
        }
    };
    // --strict: every input schema is portable (exit 6 otherwise).
    let listed = run(vec![
        "--method".into(),
        "tools/list".into(),
        "--strict".into(),
    ])
    .await;
    let mut names: Vec<&str> = listed["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    names.sort_unstable();
    let mut want = leasehold::api::mcp::catalogue::names();
    want.sort_unstable();
    assert_eq!(names, want);
    assert_eq!(names.len(), 13);

    let called = run(vec![
        "--method".into(),
        "tools/call".into(),
        "--tool-name".into(),
        "pool_summary".into(),
    ])
    .await;
    assert_eq!(called["isError"], false, "{called}");
    assert_eq!(
        called["structuredContent"]["runners"]["online"], 0,
        "{called}"
    );
}

/// One JSON-RPC request to `/mcp` as a client without an SDK sends it: no session, a protocol
/// version header, both media types accepted.
pub async fn rpc(url: &str, key: &str, body: Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("{url}/mcp"))
        .bearer_auth(key)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-06-18")
        .json(&body)
        .send()
        .await
        .unwrap()
}

/// Without an SDK: a tool call needs no session (none is issued), a long-poll tool gets its
/// `wait_ms` beyond the request deadline as the route would, and the transport's own refusals
/// are the contract's error JSON.
#[tokio::test]
async fn a_bare_json_rpc_call_needs_no_session_waits_past_the_request_deadline_and_refusals_are_contract_json(
) {
    let app = TestApp::spawn_with(1, |c| c.request_timeout_ms = 1000).await;
    let url = app.url(0);
    let key = app.key("acme", "alice", false).await;
    let alice = Client::new(&url, Some(key.clone()));
    let job = alice
        .dispatch(&wire::Dispatch::new(
            crate::support::personal(),
            json!({"argv": ["true"]}),
        ))
        .await
        .unwrap();

    // A tool call as the first request: answered, and no session id to pin.
    let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
        "name": "get_job", "arguments": {"id": job.id, "wait_ms": 2500}}});
    let answer = rpc(&url, &key, call).await;
    assert_eq!(
        answer.status(),
        200,
        "a 1 s request deadline plus the 2.5 s wait"
    );
    assert!(answer.headers().get("mcp-session-id").is_none());
    assert!(answer.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("application/json"));
    let body: Value = answer.json().await.unwrap();
    assert_eq!(body["id"], 7);
    assert_eq!(body["result"]["isError"], false, "{body}");
    assert_eq!(
        body["result"]["structuredContent"]["id"],
        job.id.to_string()
    );
    assert_eq!(body["result"]["structuredContent"]["state"], "parked");

    // An unknown tool is a JSON-RPC error, not a tool result.
    let unknown = json!({"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": {
        "name": "lease", "arguments": {}}});
    let body: Value = rpc(&url, &key, unknown).await.json().await.unwrap();
    assert!(body["error"]["code"].is_i64(), "{body}");

    // The transport's refusals: the contract's shape, with their status.
    let http = reqwest::Client::new();
    let no_accept = http
        .post(format!("{url}/mcp"))
        .bearer_auth(&key)
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
        .send()
        .await
        .unwrap();
    assert_eq!(no_accept.status(), 406);
    let body: Value = no_accept.json().await.unwrap();
    assert_eq!(body["error"]["code"], "not_acceptable", "{body}");
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("Accept"));
    let get = http
        .get(format!("{url}/mcp"))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap();
    assert_eq!(get.status(), 405, "no stream, no session to resume");
    let body: Value = get.json().await.unwrap();
    assert_eq!(body["error"]["code"], "method_not_allowed");
}
