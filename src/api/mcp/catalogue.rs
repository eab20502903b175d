//! The fourteen operator tools, each one route of the HTTP API: what a tool is called, which
//! route it calls, the input schema derived from that route's documentation in the route table
//! (its path parameters, its query parameters, the fields of its body's wire type), the request
//! its arguments become, and the tool result an answer becomes.
//!
//! Invariant: no rule of the service is here. A tool's arguments are turned into the route's
//! method, path, query and body by name and nothing else; what the route answers (a job, a
//! refusal, a 404 for an invisible object) is what the tool answers. A tool whose route is not in
//! the table (not built yet) still names its path and gets the router's answer, 404.

use std::sync::{Arc, OnceLock};

use axum::http::Method;
use rmcp::model::{CallToolResult, ContentBlock, JsonObject, Tool, ToolAnnotations};
use serde_json::{json, Map, Value};

use crate::api::route_doc::{Query, Schemas, WireType};
use crate::api::routes;

/// What calling a tool does to the service, for the clients' annotations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Effect {
    /// Reads only.
    Read,
    /// Changes something; calling it again with the same arguments changes nothing more.
    Idempotent,
    /// Creates something each time (unless given an idempotency key).
    Create,
    /// Takes something away: cancels, revokes.
    Destructive,
}

/// One tool: its name, the route it calls, and what it says about itself.
struct Spec {
    name: &'static str,
    method: Method,
    path: &'static str,
    description: &'static str,
    effect: Effect,
    /// The call honours an `Idempotency-Key` header, taken from the `idempotency_key` argument.
    idempotency_key: bool,
    /// Turns the route's answer into the tool's (only `list_repo_targets`, whose route answers
    /// the runners with their targets).
    shape: Option<fn(Value) -> Value>,
}

fn specs() -> Vec<Spec> {
    use Effect::*;
    let spec = |name, method, path, effect, description| Spec {
        name,
        method,
        path,
        description,
        effect,
        idempotency_key: false,
        shape: None,
    };
    vec![
        spec("list_runners", Method::GET, "/v1/workspace/runners", Read,
            "List every runner paired in your workspace, both tiers (GET /v1/workspace/runners): presence, capacity, active leases, capabilities, repository targets."),
        spec("pool_summary", Method::GET, "/v1/pool", Read,
            "Count the runners you may dispatch to by presence, their slots, and the parked and leased jobs on their queues (GET /v1/pool)."),
        Spec {
            idempotency_key: true,
            ..spec("dispatch_job", Method::POST, "/v1/jobs", Create,
                "Dispatch a job (POST /v1/jobs). `target` is {\"pool\":\"personal\"|\"workspace\"|\"any\"} or {\"runner_id\":\"<uuid>\"}; `payload` is the job's input (for kind `command`: {\"argv\":[\"make\",\"test\"]}). Give `idempotency_key` to make a retry of this call safe: the first dispatch with a key wins.")
        },
        spec("get_job", Method::GET, "/v1/jobs/{id}", Read,
            "Get a job by id (GET /v1/jobs/{id}); with `wait_ms`, answers as soon as the job is terminal or the wait ends."),
        spec("list_jobs", Method::GET, "/v1/jobs", Read,
            "List the workspace's jobs by id (GET /v1/jobs), optionally of one `state` or `outcome`; `q` finds jobs whose command holds a text (any case) or whose id is it or starts or ends with it (the 8 characters people see); page with `after` (the previous answer's `next`); `order` desc lists the newest first."),
        spec("job_events", Method::GET, "/v1/jobs/{id}/events", Read,
            "Read a job's events after a seq (GET /v1/jobs/{id}/events): state transitions and what its runner appended (output lines); page with `after` (the previous answer's `next`)."),
        spec("cancel_job", Method::POST, "/v1/jobs/{id}/cancel", Destructive,
            "Cancel a job that has not settled (POST /v1/jobs/{id}/cancel); a settled job is returned unchanged."),
        Spec {
            idempotency_key: true,
            ..spec("retry_job", Method::POST, "/v1/jobs/{id}/retry", Create,
                "Run a job again (POST /v1/jobs/{id}/retry): a settled job is parked again, a leased one is superseded (its runner is told to stop); same id, epoch + 1.")
        },
        spec("list_artifacts", Method::GET, "/v1/jobs/{id}/artifacts", Read,
            "List the files a job's runners uploaded (GET /v1/jobs/{id}/artifacts): path, epoch (the attempt), size, sha256; newest attempt first, a page at a time (`limit`, and `after` the previous answer's `next`)."),
        Spec {
            shape: Some(repo_targets),
            ..spec("list_repo_targets", Method::GET, "/v1/workspace/runners", Read,
                "List the repository targets the workspace's runners advertised, each with its runner and status pending|approved|revoked (from GET /v1/workspace/runners). A job with a `source` runs only on a runner holding an approved target for its repository.")
        },
        spec("approve_repo_target", Method::POST, "/v1/runners/{id}/repo-targets/{target_id}/approve", Idempotent,
            "Approve a repository target a runner advertised (POST /v1/runners/{id}/repo-targets/{target_id}/approve; `id` is the runner's id, `target_id` the target's). An admin of the workspace, or the owner of a personal runner, may."),
        spec("revoke_repo_target", Method::POST, "/v1/runners/{id}/repo-targets/{target_id}/revoke", Destructive,
            "Revoke a runner's repository target (POST /v1/runners/{id}/repo-targets/{target_id}/revoke; `id` is the runner's id, `target_id` the target's): the runner takes no new job of that repository."),
        spec("list_secrets", Method::GET, "/v1/secrets", Read,
            "List the workspace's secrets by name with their scopes (GET /v1/secrets); never a value."),
        spec("list_events", Method::GET, "/v1/events", Read,
            "Read the workspace's job events in commit order (GET /v1/events): state changes of every job (and, with `kinds`, output such as stdout); follow with `after` set to the previous answer's `next`, and `wait_ms` to wait for the next event."),
    ]
}

/// `list_repo_targets`' answer from the roster: one entry per target, naming its runner.
fn repo_targets(roster: Value) -> Value {
    let mut targets = Vec::new();
    for runner in roster["runners"].as_array().into_iter().flatten() {
        for target in runner["repo_targets"].as_array().into_iter().flatten() {
            let mut entry = json!({
                "runner_id": runner["id"],
                "runner_label": runner["label"],
                "runner_owner": runner["owner"],
            });
            if let (Some(entry), Some(target)) = (entry.as_object_mut(), target.as_object()) {
                entry.extend(target.clone());
            }
            targets.push(entry);
        }
    }
    json!({ "targets": targets })
}

/// A tool with what its route's documentation says, resolved once.
struct Entry {
    spec: Spec,
    query: &'static [Query],
    /// The route takes a JSON body (then the arguments that are not path or query parameters
    /// are its fields).
    body: bool,
    tool: Tool,
}

fn catalogue() -> &'static [Entry] {
    static CATALOGUE: OnceLock<Vec<Entry>> = OnceLock::new();
    CATALOGUE.get_or_init(|| {
        let table = routes::table();
        specs()
            .into_iter()
            .map(|spec| {
                let doc = table
                    .iter()
                    .find(|r| r.method == spec.method && r.path == spec.path)
                    .map(|r| (r.doc.query, r.doc.body));
                let (query, body) = doc.unwrap_or((&[], None));
                let path_params = path_params(spec.path);
                let schema = input_schema(&spec, &path_params, query, body);
                let tool = Tool::new(spec.name, spec.description, Arc::new(schema))
                    .with_annotations(annotations(spec.effect));
                Entry {
                    query,
                    body: body.is_some(),
                    tool,
                    spec,
                }
            })
            .collect()
    })
}

/// Every tool, in the contract's order.
pub fn tools() -> Vec<Tool> {
    catalogue().iter().map(|e| e.tool.clone()).collect()
}

/// The names of the tools, in the contract's order.
pub fn names() -> Vec<&'static str> {
    catalogue().iter().map(|e| e.spec.name).collect()
}

fn annotations(effect: Effect) -> ToolAnnotations {
    let a = ToolAnnotations::new()
        .read_only(effect == Effect::Read)
        .open_world(false);
    match effect {
        Effect::Read => a,
        Effect::Idempotent => a.destructive(false).idempotent(true),
        Effect::Create => a.destructive(false).idempotent(false),
        Effect::Destructive => a.destructive(true).idempotent(true),
    }
}

fn path_params(path: &str) -> Vec<&str> {
    path.split('/')
        .filter_map(|seg| seg.strip_prefix('{')?.strip_suffix('}'))
        .collect()
}

/// The input schema: the route's path parameters (required), its query parameters and the
/// properties of its body's wire type (required as the type requires them), with every schema
/// the body names inlined, so a client needs no `$ref` resolution.
fn input_schema(
    spec: &Spec,
    path_params: &[&str],
    query: &[Query],
    body: Option<WireType>,
) -> JsonObject {
    let mut properties = Map::new();
    let mut required: Vec<Value> = Vec::new();
    for name in path_params {
        let what = match (*name, spec.path.starts_with("/v1/runners/")) {
            ("id", true) => "the runner's id",
            ("id", false) => "the job's id",
            ("target_id", _) => "the repository target's id (from list_repo_targets)",
            _ => "a path parameter",
        };
        properties.insert(
            (*name).into(),
            json!({"type": "string", "format": "uuid", "description": what}),
        );
        required.push(json!(name));
    }
    for (name, ty, description) in query {
        properties.insert(
            (*name).into(),
            json!({"type": ty, "description": description}),
        );
    }
    if let Some(body) = body {
        let mut components = Schemas::new();
        body.collect(&mut components);
        let components: Map<String, Value> = components
            .into_iter()
            .map(|(name, schema)| (name, serde_json::to_value(schema).unwrap_or(Value::Null)))
            .collect();
        let root = inline(
            &json!({"$ref": format!("#/components/schemas/{}", (body.name)())}),
            &components,
            0,
        );
        if let Some(fields) = root["properties"].as_object() {
            properties.extend(fields.clone());
        }
        if let Some(names) = root["required"].as_array() {
            required.extend(names.iter().cloned());
        }
    }
    if spec.idempotency_key {
        properties.insert(
            "idempotency_key".into(),
            json!({"type": "string", "description": "Sent as the Idempotency-Key header: a repeat with the same key answers the first result instead of acting again."}),
        );
    }
    let mut schema = JsonObject::new();
    schema.insert("type".into(), json!("object"));
    schema.insert("properties".into(), Value::Object(properties));
    if !required.is_empty() {
        schema.insert("required".into(), Value::Array(required));
    }
    schema
}

/// `value` with each `$ref` to a component replaced by that component (recursively; a cycle
/// would stop at a depth no wire type reaches, leaving an open schema).
fn inline(value: &Value, components: &Map<String, Value>, depth: usize) -> Value {
    match value {
        Value::Object(m) => {
            if let Some(Value::String(r)) = m.get("$ref") {
                let name = r.trim_start_matches("#/components/schemas/");
                return match components.get(name) {
                    Some(target) if depth < 16 => inline(target, components, depth + 1),
                    _ => json!({}),
                };
            }
            Value::Object(
                m.iter()
                    .map(|(k, v)| (k.clone(), inline(v, components, depth)))
                    .collect(),
            )
        }
        Value::Array(a) => Value::Array(a.iter().map(|v| inline(v, components, depth)).collect()),
        other => other.clone(),
    }
}

/// One call of the HTTP API, as a tool's arguments name it.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiRequest {
    pub method: Method,
    /// Path and query string.
    pub target: String,
    pub body: Option<Value>,
    pub idempotency_key: Option<String>,
    /// The long-poll wait the call asks for (`wait_ms`), so the caller can give the call that
    /// much time beyond the request deadline.
    pub wait_ms: Option<u64>,
}

/// What the API answered: its status and JSON body (`null` when it had none). A caller that got
/// no answer at all reports `503` with the contract's `unavailable` body.
#[derive(Debug, Clone)]
pub struct ApiAnswer {
    pub status: u16,
    pub body: Value,
}

impl ApiAnswer {
    /// An answer in the contract's error shape, for failures that never reached the API.
    pub fn refused(status: u16, code: &str, message: impl Into<String>) -> Self {
        Self {
            status,
            body: json!({"error": {"code": code, "message": message.into()}}),
        }
    }
}

/// A tool and its arguments: the request to send, or the tool result refusing them (a tool
/// argument that cannot name a path or query value is the contract's `bad_request`); `None`
/// for an unknown tool.
pub fn request(
    name: &str,
    arguments: Option<&JsonObject>,
) -> Option<Result<(ApiRequest, Call), CallToolResult>> {
    let index = catalogue().iter().position(|e| e.spec.name == name)?;
    let entry = &catalogue()[index];
    Some(build(entry, arguments.cloned().unwrap_or_default()).map(|request| (request, Call(index))))
}

/// Which tool a request was built for, to shape its answer.
#[derive(Debug, Clone, Copy)]
pub struct Call(usize);

/// The most bytes a path or query argument may have: a request head is at most 64 KiB over
/// HTTP (431), and no route's path or query value needs more than a few hundred.
const MAX_URL_ARGUMENT_BYTES: usize = 4096;
/// The most characters of an `idempotency_key`, as the `Idempotency-Key` header allows.
const MAX_IDEMPOTENCY_KEY: usize = 255;

/// A path or query argument, refused (naming it) when it is longer than any route takes.
fn url_argument(name: &str, value: String) -> Result<String, CallToolResult> {
    if value.len() > MAX_URL_ARGUMENT_BYTES {
        return Err(refusal(
            "bad_request",
            &format!("{name}: at most {MAX_URL_ARGUMENT_BYTES} bytes"),
        ));
    }
    Ok(value)
}

/// The `idempotency_key` argument, checked as the `Idempotency-Key` header is (1..255 visible
/// ASCII characters) before it is made one, so a refusal names the argument.
fn idempotency_key(value: String) -> Result<String, CallToolResult> {
    let visible = value.bytes().all(|b| (b' '..=b'~').contains(&b));
    if value.is_empty() || value.len() > MAX_IDEMPOTENCY_KEY || !visible {
        return Err(refusal(
            "bad_request",
            &format!(
                "idempotency_key: must be 1..{MAX_IDEMPOTENCY_KEY} visible ASCII characters (it is \
                 sent as the Idempotency-Key header)"
            ),
        ));
    }
    Ok(value)
}

fn build(entry: &Entry, mut args: JsonObject) -> Result<ApiRequest, CallToolResult> {
    let mut path = String::new();
    for segment in entry.spec.path.split('/').skip(1) {
        path.push('/');
        match segment.strip_prefix('{').and_then(|s| s.strip_suffix('}')) {
            Some(name) => match args.remove(name) {
                Some(Value::String(v)) => path.push_str(&encode_segment(&url_argument(name, v)?)),
                Some(_) => {
                    return Err(refusal("bad_request", &format!("{name}: must be a string")))
                }
                None => return Err(refusal("bad_request", &format!("{name}: is required"))),
            },
            None => path.push_str(segment),
        }
    }
    let mut query = form_urlencoded::Serializer::new(String::new());
    let mut wait_ms = None;
    for (name, _, _) in entry.query {
        let value = match args.remove(*name) {
            None | Some(Value::Null) => continue,
            Some(Value::String(s)) => url_argument(name, s)?,
            Some(v @ (Value::Number(_) | Value::Bool(_))) => v.to_string(),
            Some(_) => {
                return Err(refusal(
                    "bad_request",
                    &format!("{name}: must be a string or a number"),
                ))
            }
        };
        if *name == "wait_ms" {
            wait_ms = value.parse().ok();
        }
        query.append_pair(name, &value);
    }
    let query = query.finish();
    if !query.is_empty() {
        path.push('?');
        path.push_str(&query);
    }
    let idempotency_key = if entry.spec.idempotency_key {
        match args.remove("idempotency_key") {
            None | Some(Value::Null) => None,
            Some(Value::String(k)) => Some(idempotency_key(k)?),
            Some(_) => return Err(refusal("bad_request", "idempotency_key: must be a string")),
        }
    } else {
        None
    };
    Ok(ApiRequest {
        method: entry.spec.method.clone(),
        target: path,
        body: entry.body.then_some(Value::Object(args)),
        idempotency_key,
        wait_ms,
    })
}

/// A path segment with everything but unreserved characters percent-encoded, so an argument
/// is one segment of its route and never more.
fn encode_segment(value: &str) -> String {
    let mut out = String::new();
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The tool result of an API answer: a 2xx answer's JSON as `structuredContent` and as text;
/// any other answer an `isError` result whose text begins with the contract's error code (its
/// error object as `structuredContent`).
pub fn result(call: Call, answer: ApiAnswer) -> CallToolResult {
    if (200..300).contains(&answer.status) {
        let value = match catalogue()[call.0].spec.shape {
            Some(shape) => shape(answer.body),
            None => answer.body,
        };
        let value = match value {
            Value::Object(_) => value,
            Value::Null => json!({}),
            other => json!({ "result": other }),
        };
        return CallToolResult::structured(value);
    }
    let error = &answer.body["error"];
    let code = error["code"].as_str().unwrap_or("unknown");
    let message = error["message"]
        .as_str()
        .unwrap_or("the service gave no message");
    let mut refused = refusal(code, message);
    if answer.body.is_object() {
        refused.structured_content = Some(answer.body);
    }
    refused
}

fn refusal(code: &str, message: &str) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(format!("{code}: {message}"))])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(v: Value) -> JsonObject {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn fourteen_tools_in_the_contracts_order() {
        assert_eq!(
            names(),
            [
                "list_runners",
                "pool_summary",
                "dispatch_job",
                "get_job",
                "list_jobs",
                "job_events",
                "cancel_job",
                "retry_job",
                "list_artifacts",
                "list_repo_targets",
                "approve_repo_target",
                "revoke_repo_target",
                "list_secrets",
                "list_events",
            ]
        );
    }

    #[test]
    fn the_dispatch_schema_is_the_dispatch_body_with_its_target_inlined() {
        let tool = tools()
            .into_iter()
            .find(|t| t.name == "dispatch_job")
            .unwrap();
        let schema = Value::Object((*tool.input_schema).clone());
        assert_eq!(schema["required"], json!(["target"]));
        assert!(schema["properties"]["payload"].is_object());
        assert!(schema["properties"]["idempotency_key"].is_object());
        let target = &schema["properties"]["target"];
        assert!(target["oneOf"].is_array(), "{target}");
        assert!(!schema.to_string().contains("$ref"), "{schema}");
    }

    #[test]
    fn arguments_become_path_query_and_body_by_name() {
        let (req, _) = request(
            "job_events",
            Some(&args(json!({"id": "0190", "after": 3, "wait_ms": 500}))),
        )
        .unwrap()
        .unwrap();
        assert_eq!(req.method, Method::GET);
        assert_eq!(req.target, "/v1/jobs/0190/events?after=3&wait_ms=500");
        assert_eq!(req.body, None);
        assert_eq!(req.wait_ms, Some(500));

        let (req, _) = request(
            "dispatch_job",
            Some(&args(
                json!({"target": {"pool": "any"}, "payload": 1, "idempotency_key": "k"}),
            )),
        )
        .unwrap()
        .unwrap();
        assert_eq!(req.target, "/v1/jobs");
        assert_eq!(
            req.body,
            Some(json!({"target": {"pool": "any"}, "payload": 1}))
        );
        assert_eq!(req.idempotency_key.as_deref(), Some("k"));

        let (req, _) = request(
            "approve_repo_target",
            Some(&args(json!({"id": "a/../b", "target_id": "t"}))),
        )
        .unwrap()
        .unwrap();
        assert_eq!(req.target, "/v1/runners/a%2F..%2Fb/repo-targets/t/approve");
        assert_eq!(req.body, None);
    }

    #[test]
    fn a_missing_path_argument_is_bad_request_and_an_unknown_tool_none() {
        let refused = request("get_job", None).unwrap().unwrap_err();
        assert_eq!(refused.is_error, Some(true));
        let text = refused.content[0].as_text().unwrap().text.clone();
        assert!(text.starts_with("bad_request: id"), "{text}");
        assert!(request("lease", None).is_none());
    }

    #[test]
    fn a_refusal_begins_with_the_contracts_code() {
        let (_, call) = request("list_secrets", None).unwrap().unwrap();
        let answer = ApiAnswer {
            status: 403,
            body: json!({"error": {"code": "forbidden", "message": "admin only"}}),
        };
        let r = result(call, answer);
        assert_eq!(r.is_error, Some(true));
        assert_eq!(
            r.content[0].as_text().unwrap().text,
            "forbidden: admin only"
        );
        let ok = result(
            call,
            ApiAnswer {
                status: 200,
                body: json!({"secrets": []}),
            },
        );
        assert_eq!(ok.is_error, Some(false));
        assert_eq!(ok.structured_content, Some(json!({"secrets": []})));
    }

    #[test]
    fn repo_targets_name_their_runner() {
        let roster = json!({"runners": [{"id": "r1", "label": "box", "owner": "ws:acme",
            "repo_targets": [{"id": "t1", "provider": "git", "repository": "u", "label": null, "status": "pending"}]}]});
        assert_eq!(
            repo_targets(roster),
            json!({"targets": [{"runner_id": "r1", "runner_label": "box", "runner_owner": "ws:acme",
                "id": "t1", "provider": "git", "repository": "u", "label": null, "status": "pending"}]})
        );
    }
}
