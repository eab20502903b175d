//! The operator tools for agents (contract v1.2 part B, MCP), tested with real clients: the
//! official Python SDK (`mcp` from PyPI, `tests/it/mcp_client.py`) over Streamable HTTP through
//! HAProxy running the shipped `deploy/haproxy.cfg` in front of two replica processes, and over
//! stdio with `leasehold mcp` as its subprocess; the official MCP Inspector's CLI listing and
//! calling the tools. Invariants: the fourteen tools are listed by their exact names; each one
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
    /// A member's job naming the secret, cancelled, whose secret then became admin-only: the
    /// member's `retry_job` of it is refused (v1.3, "Secrets at every hand-over").
    member_job: uuid::Uuid,
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
        let member = Client::new(url, Some(member_key.clone()));
        let mut named = wire::Dispatch::new(crate::support::workspace_pool(), json!(null));
        named.secrets = Some(vec![SECRET.0.to_owned()]);
        let member_job = member.dispatch(&named).await.expect("a member's job").id;
        admin.cancel(member_job).await.expect("cancelled");
        admin
            .put_secret_scoped(SECRET.0, SECRET.1, None, Some("admin"))
            .await
            .expect("now admin-only");
        Self {
            admin_key,
            member_key,
            admin,
            runner,
            runner_token,
            member_job,
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
            "member_job": self.member_job,
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
        assert_eq!(names.len(), 14, "{names:?}");
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
        assert!(report["member_retry_refusal"]
            .as_str()
            .unwrap()
            .starts_with("forbidden: "));
        let kept = self.admin.job(self.member_job).await.unwrap();
        assert_eq!((kept.state.as_str(), kept.retries), ("cancelled", 0));
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
async fn the_mcp_inspector_cli_lists_the_fourteen_tools_and_calls_one() {
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
    assert_eq!(names.len(), 14);

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

/// Issue 56 row 7: `list_jobs` searches as the list does (`q`: a command's text in any case,
/// an id's end as the page shows it), says so in its description, and a bad `q` is a refused
/// tool result naming it.
#[tokio::test]
async fn list_jobs_searches_by_a_commands_text_or_an_ids_end() {
    let app = TestApp::spawn().await;
    let url = app.url(0);
    let key = app.key("acme", "alice", false).await;
    let alice = Client::new(&url, Some(key.clone()));
    let mut ids = Vec::new();
    for argv in [json!(["make", "Build"]), json!(["cargo", "test"])] {
        let job = wire::Dispatch::new(crate::support::personal(), json!({ "argv": argv }));
        ids.push(alice.dispatch(&job).await.unwrap().id);
    }
    let tools = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
    let body: Value = rpc(&url, &key, tools).await.json().await.unwrap();
    let list_jobs = body["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "list_jobs")
        .unwrap()
        .clone();
    assert!(
        list_jobs["inputSchema"]["properties"]["q"].is_object(),
        "{list_jobs}"
    );
    let said = list_jobs["description"].as_str().unwrap();
    assert!(said.contains("`q`"), "{said}");

    let short = ids[1].to_string()[28..].to_owned();
    for (q, want) in [
        ("build", vec![json!(ids[0])]),
        (short.as_str(), vec![json!(ids[1])]),
    ] {
        let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "list_jobs", "arguments": {"q": q}}});
        let body: Value = rpc(&url, &key, call).await.json().await.unwrap();
        let found: Vec<Value> = body["result"]["structuredContent"]["jobs"]
            .as_array()
            .unwrap_or_else(|| panic!("{body}"))
            .iter()
            .map(|j| j["id"].clone())
            .collect();
        assert_eq!(found, want, "{q}: {body}");
    }
    let call = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
        "name": "list_jobs", "arguments": {"q": ""}}});
    let body: Value = rpc(&url, &key, call).await.json().await.unwrap();
    assert_eq!(body["result"]["isError"], true, "{body}");
    let text = body["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.starts_with("bad_request: q: "), "{text}");
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

    // list_jobs takes the list's filters, the outcome too (v1.3): its schema comes from the
    // route table.
    let tools = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/list"});
    let body: Value = rpc(&url, &key, tools).await.json().await.unwrap();
    let list_jobs = body["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "list_jobs")
        .unwrap();
    assert!(
        list_jobs["inputSchema"]["properties"]["outcome"].is_object(),
        "{list_jobs}"
    );
    alice.cancel(job.id).await.unwrap();
    for (outcome, want) in [("cancelled", vec![json!(job.id)]), ("failed", vec![])] {
        let call = json!({"jsonrpc": "2.0", "id": 10, "method": "tools/call", "params": {
            "name": "list_jobs", "arguments": {"outcome": outcome}}});
        let body: Value = rpc(&url, &key, call).await.json().await.unwrap();
        let ids: Vec<Value> = body["result"]["structuredContent"]["jobs"]
            .as_array()
            .unwrap_or_else(|| panic!("{body}"))
            .iter()
            .map(|j| j["id"].clone())
            .collect();
        assert_eq!(ids, want, "{outcome}: {body}");
    }

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

/// A raw `POST /mcp` with `body` and the protocol-version header `version`: status and JSON.
async fn raw_mcp(url: &str, key: &str, version: &str, body: Vec<u8>) -> (u16, Value) {
    let answer = reqwest::Client::new()
        .post(format!("{url}/mcp"))
        .bearer_auth(key)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .header("mcp-protocol-version", version)
        .body(body)
        .send()
        .await
        .unwrap();
    let status = answer.status().as_u16();
    let bytes = answer.bytes().await.unwrap();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

/// Issue 46 row 8 (v1.3 "MCP"): a body that is not JSON, a JSON-RPC batch, or any JSON that is
/// not one JSON-RPC request object gets `400 bad_request` in the contract's shape; a tool
/// argument is validated as its HTTP call would be, the error naming the argument (a 900 KiB
/// idempotency key, one over the header's 255 bytes, a 900 KiB id); and no line of the
/// replica's log (at debug) carries a caller's tool name, method, argument or header value.
#[tokio::test]
async fn hostile_mcp_bodies_are_400_arguments_are_named_and_no_log_line_carries_caller_data() {
    let database_url = fresh_database().await;
    let dir = crate::procs::TempDir::new("mcp-hostile");
    let (server, url) =
        crate::procs::serve(&database_url, &dir, &[("LEASEHOLD_LOG", "debug")]).await;
    let key = key_in(&database_url, "acme", "alice", false).await;
    let v = "2025-06-18";
    let mark = "Zx9hostileMARK";
    let rpc_call = |name: &str, arguments: Value| {
        serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": name, "arguments": arguments}}))
        .unwrap()
    };

    // Not one JSON-RPC request object: 400 in the contract's shape.
    let batch = json!([{"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                       {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}]);
    for (what, body) in [
        ("not JSON", format!("{mark} not json").into_bytes()),
        ("a batch", serde_json::to_vec(&batch).unwrap()),
        ("a string", serde_json::to_vec(&json!(mark)).unwrap()),
        (
            "an object without jsonrpc",
            serde_json::to_vec(&json!({"method": mark})).unwrap(),
        ),
    ] {
        let (status, body) = raw_mcp(&url, &key, v, body).await;
        assert_eq!(
            (status, body["error"]["code"].as_str()),
            (400, Some("bad_request")),
            "{what}: {body}"
        );
        assert!(body["error"]["message"].is_string(), "{what}: {body}");
    }

    // Arguments are validated as the HTTP call would be, naming the argument.
    let huge = mark.repeat(900 * 1024 / mark.len());
    let dispatch =
        |k: &str| json!({"target": {"pool": "personal"}, "payload": 1, "idempotency_key": k});
    for (what, body, field) in [
        (
            "900 KiB key",
            rpc_call("dispatch_job", dispatch(&huge)),
            "idempotency_key",
        ),
        (
            "256-byte key",
            rpc_call("dispatch_job", dispatch(&"k".repeat(256))),
            "idempotency_key",
        ),
        (
            "a key with a newline",
            rpc_call("dispatch_job", dispatch("a\nb")),
            "idempotency_key",
        ),
        ("900 KiB id", rpc_call("get_job", json!({"id": huge})), "id"),
    ] {
        let (status, body) = raw_mcp(&url, &key, v, body).await;
        assert_eq!(status, 200, "{what}: a tool result");
        let text = body["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_default();
        assert_eq!(body["result"]["isError"], true, "{what}: {body}");
        assert!(
            text.starts_with(&format!("bad_request: {field}")),
            "{what}: {}",
            &text[..text.len().min(200)]
        );
    }

    // Hostile names and header values rmcp would log.
    for body in [
        rpc_call(&format!("tool-{mark}"), json!({"x": mark})),
        serde_json::to_vec(
            &json!({"jsonrpc": "2.0", "id": 2, "method": format!("method-{mark}"),
            "params": {"p": mark}}),
        )
        .unwrap(),
    ] {
        let (status, _) = raw_mcp(&url, &key, v, body).await;
        assert!(status < 500, "{status}");
    }
    let (status, body) = raw_mcp(
        &url,
        &key,
        &format!("version-{mark}"),
        serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list"})).unwrap(),
    )
    .await;
    assert!((400..500).contains(&status), "{status} {body}");
    // Written as each line is logged (stderr is not buffered); the replica's own line as it
    // stops shows its log is on (tokio_postgres's lines, which once did, are off: issue 52).
    server.signal(nix::sys::signal::Signal::SIGTERM);
    let log = crate::support::eventually(crate::procs::LONG, "the shutdown's line", || async {
        let log = server.log();
        log.contains("shutting down").then_some(log)
    })
    .await;
    let carried: Vec<&str> = log.lines().filter(|l| l.contains(mark)).collect();
    assert!(
        carried.is_empty(),
        "log lines carrying caller data: {:?}",
        carried
            .iter()
            .map(|l| &l[..l.len().min(300)])
            .collect::<Vec<_>>()
    );
}

/// Issue 52 row 8 (v1.3 "MCP"): a JSON-RPC object rmcp cannot read (an `id` that is an object,
/// an array or a boolean; `params` that are not an object) is `400 bad_request` in the
/// contract's shape, never rmcp's `415` quoting its parser; a well-formed call with a string
/// `id` is still served.
#[tokio::test]
async fn an_mcp_body_whose_id_is_an_object_is_400_not_415() {
    let app = TestApp::spawn().await;
    let url = app.url(0);
    let key = key_in(&app.database_url, "acme", "alice", false).await;
    let v = "2025-06-18";
    let mark = "Mv2idMARK";
    for (what, body) in [
        (
            "an object id",
            json!({"jsonrpc": "2.0", "id": {"x": mark}, "method": "tools/list"}),
        ),
        (
            "an array id",
            json!({"jsonrpc": "2.0", "id": [mark], "method": "tools/list"}),
        ),
        (
            "a boolean id",
            json!({"jsonrpc": "2.0", "id": true, "method": "tools/list"}),
        ),
        (
            "params that are a string",
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": mark}),
        ),
    ] {
        let (status, body) = raw_mcp(&url, &key, v, serde_json::to_vec(&body).unwrap()).await;
        assert_eq!(
            (status, body["error"]["code"].as_str()),
            (400, Some("bad_request")),
            "{what}: {body}"
        );
        assert!(!body.to_string().contains(mark), "{what}: quoted: {body}");
    }
    let (status, body) = raw_mcp(
        &url,
        &key,
        v,
        serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": "a-string", "method": "tools/list"}))
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["id"], "a-string");
    assert!(body["result"]["tools"].is_array(), "{body}");
}
