//! `/openapi.json`: the OpenAPI 3.1 description of the HTTP contract, generated from the route
//! table ([`super::routes`]) and the wire types' `utoipa::ToSchema` derives.
//!
//! Invariant: every route of the router is a path of the document with its method, its
//! credential, its body and answer schemas, and the contract's error shape for every error it
//! can give. Nothing here is hand-kept twice: a route or a wire field added is documented, and
//! the components are exactly the types the route table names (with the types they name).

use std::collections::BTreeMap;
use std::sync::OnceLock;

use serde_json::{json, Map, Value};
use utoipa::openapi::{RefOr, Schema};

use super::route_doc::{Auth, Route, Schemas, WireType};
use crate::wire;

/// The components: the schema of every wire type a route of the table takes or answers, of
/// every type those name, and of the error body every route may answer. Derived from
/// [`super::every_route`], so a route's types cannot go undocumented.
fn schemas() -> BTreeMap<String, RefOr<Schema>> {
    let mut found = Schemas::new();
    WireType::of::<wire::ErrorBody>().collect(&mut found);
    for route in super::every_route() {
        for t in [route.doc.body, route.doc.answer].into_iter().flatten() {
            t.collect(&mut found);
        }
    }
    found.into_iter().collect()
}

fn schema_ref(name: &str) -> Value {
    json!({"$ref": format!("#/components/schemas/{name}")})
}

/// The contract's error answer with its status and the codes it may carry.
fn error(description: &str, codes: &[&str]) -> Value {
    json!({
        "description": format!("{description}: code {}", codes.join(" | ")),
        "content": {"application/json": {"schema": schema_ref("ErrorBody")}},
    })
}

fn operation(route: &Route) -> Value {
    let doc = &route.doc;
    let mut op = Map::new();
    op.insert("summary".into(), json!(doc.summary));
    op.insert(
        "operationId".into(),
        json!(format!("{} {}", route.method, route.path)),
    );
    let tag = match doc.auth {
        Auth::Runner => "runner",
        Auth::Open if route.path.starts_with("/v1/") => "runner",
        Auth::Open => "operations",
        Auth::Member | Auth::Admin => "operators",
    };
    op.insert("tags".into(), json!([tag]));
    match doc.auth {
        Auth::Open => op.insert("security".into(), json!([])),
        Auth::Member => op.insert("security".into(), json!([{"apiKey": []}])),
        Auth::Admin => op.insert("security".into(), json!([{"apiKey": ["admin"]}])),
        Auth::Runner => op.insert("security".into(), json!([{"runnerToken": []}])),
    };
    let mut params: Vec<Value> = route
        .path
        .split('/')
        .filter_map(|seg| seg.strip_prefix('{')?.strip_suffix('}'))
        .map(|name| {
            let schema = if name == "name" || name == "file" {
                json!({"type": "string"})
            } else {
                json!({"type": "string", "format": "uuid"})
            };
            json!({"name": name, "in": "path", "required": true, "schema": schema})
        })
        .collect();
    params.extend(doc.query.iter().map(|(name, ty, description)| {
        json!({"name": name, "in": "query", "required": false,
               "description": description, "schema": {"type": ty}})
    }));
    if route.path == "/v1/jobs" && route.method == axum::http::Method::POST {
        params.push(
            json!({"name": "Idempotency-Key", "in": "header", "required": false,
            "description": "The first dispatch with this key in the workspace wins",
            "schema": {"type": "string"}}),
        );
    }
    if !params.is_empty() {
        op.insert("parameters".into(), Value::Array(params));
    }
    if let Some(body) = doc.body {
        op.insert(
            "requestBody".into(),
            json!({"required": true,
                   "content": {"application/json": {"schema": schema_ref(&(body.name)())}}}),
        );
    }
    let mut responses = Map::new();
    let ok = match (doc.answer, doc.media) {
        (Some(schema), _) => json!({"description": "success",
            "content": {"application/json": {"schema": schema_ref(&(schema.name)())}}}),
        (None, Some(media)) => json!({"description": "success",
            "content": {media: {"schema": {"type": "string"}}}}),
        (None, None) => json!({"description": "success, no body"}),
    };
    responses.insert(doc.ok.to_string(), ok);
    if doc.body.is_some() || !doc.query.is_empty() || route.path.contains('{') {
        responses.insert(
            "400".into(),
            error(
                "a malformed body, query or path id; the message names the field",
                &["bad_request"],
            ),
        );
    }
    if doc.auth != Auth::Open || route.path == "/v1/enroll" {
        responses.insert(
            "401".into(),
            error("any failed authentication, same bytes", &["unauthorized"]),
        );
    }
    if doc.auth == Auth::Admin || doc.errors.contains(&"forbidden") {
        responses.insert(
            "403".into(),
            error("the key's role does not allow it", &["forbidden"]),
        );
    }
    if route.path.contains('{') {
        responses.insert(
            "404".into(),
            error("no such object visible to the caller", &["not_found"]),
        );
    }
    let conflicts: Vec<&str> = doc
        .errors
        .iter()
        .copied()
        .filter(|c| matches!(*c, "job_terminal" | "lease_superseded" | "runner_outdated"))
        .collect();
    if !conflicts.is_empty() {
        responses.insert(
            "409".into(),
            error(
                "a stale or refused runner call (job_terminal carries `state`)",
                &conflicts,
            ),
        );
    }
    if doc.body.is_some() {
        responses.insert(
            "413".into(),
            error("the body is over the limit", &["payload_too_large"]),
        );
        responses.insert(
            "415".into(),
            error(
                "the body is not Content-Type: application/json",
                &["unsupported_media_type"],
            ),
        );
    }
    if doc.errors.contains(&"capability_mismatch") {
        responses.insert(
            "422".into(),
            error(
                "a named runner cannot take the job",
                &["capability_mismatch"],
            ),
        );
    }
    if doc.auth != Auth::Open || route.path == "/v1/enroll" {
        responses.insert(
            "429".into(),
            error(
                if route.path == "/v1/runner/lease" {
                    "too many failed authentications from this address, or this runner token \
                     holds LEASEHOLD_MAX_POLLS_PER_RUNNER lease calls on this replica already; \
                     see Retry-After"
                } else if route.path.contains("/artifacts/") {
                    "too many failed authentications from this address, or a transfer cap is \
                     reached (LEASEHOLD_MAX_TRANSFERS_PER_RUNNER uploads of this runner token, \
                     LEASEHOLD_MAX_TRANSFERS transfers on this replica); see Retry-After"
                } else {
                    "too many failed authentications from this address; see Retry-After"
                },
                &["rate_limited"],
            ),
        );
    }
    if route.path != "/healthz"
        && route.path != "/metrics"
        && !route.path.starts_with("/ui")
        && route.path != "/openapi.json"
    {
        responses.insert(
            "503".into(),
            error(
                "the database is unreachable, or the call passed its deadline \
                 (LEASEHOLD_REQUEST_TIMEOUT_MS); retry, nothing was half-written (after a \
                 deadline a write may have committed whole: an Idempotency-Key makes a \
                 dispatch's retry safe)",
                &["unavailable"],
            ),
        );
    }
    responses.insert(
        "405".into(),
        error("known route, wrong method", &["method_not_allowed"]),
    );
    op.insert("responses".into(), Value::Object(responses));
    Value::Object(op)
}

/// The document, built once per process.
pub fn document() -> &'static Value {
    static DOC: OnceLock<Value> = OnceLock::new();
    DOC.get_or_init(build)
}

fn build() -> Value {
    let mut paths = Map::new();
    for route in super::every_route() {
        let item = paths
            .entry(route.path.to_owned())
            .or_insert_with(|| json!({}));
        item[route.method.as_str().to_ascii_lowercase()] = operation(&route);
    }
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "leasehold",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "A durable, multi-replica job lease service for self-hosted runners. \
                The binding contract is docs/api.md; this document is generated \
                from the server's route table and wire types. Every non-2xx answer is \
                {\"error\":{\"code\",\"message\"}}; unknown routes are 404 not_found.",
            "license": {"name": "Apache-2.0", "identifier": "Apache-2.0"},
        },
        "tags": [
            {"name": "operators", "description": "Calls with an API key: dispatch, runners, keys"},
            {"name": "runner", "description": "Calls with a runner token, and enrolment"},
            {"name": "operations", "description": "Health, readiness, metrics, this document, the page"},
        ],
        "paths": paths,
        "components": {
            "schemas": serde_json::to_value(schemas()).unwrap_or_default(),
            "securitySchemes": {
                "apiKey": {"type": "http", "scheme": "bearer", "bearerFormat": "ak_<43 chars>",
                    "description": "An API key; `admin` marks calls that need role admin"},
                "runnerToken": {"type": "http", "scheme": "bearer", "bearerFormat": "rnr_<43 chars>",
                    "description": "A runner token, from pairing or enrolment"},
            },
        },
    })
}

/// The document as JSON text, built once per process: what `GET /openapi.json` answers
/// (through [`super::AppState::openapi`], so the route table never imports this module).
pub fn text() -> &'static str {
    static TEXT: OnceLock<String> = OnceLock::new();
    TEXT.get_or_init(|| document().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every `$ref` in `v` names a schema of the components.
    fn refs(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::Object(m) => {
                if let Some(Value::String(r)) = m.get("$ref") {
                    out.push(r.trim_start_matches("#/components/schemas/").to_owned());
                }
                m.values().for_each(|x| refs(x, out));
            }
            Value::Array(a) => a.iter().for_each(|x| refs(x, out)),
            _ => {}
        }
    }

    #[test]
    fn components_hold_every_type_the_routes_name() {
        let doc = build();
        let schemas = doc["components"]["schemas"].as_object().unwrap();
        let mut named = Vec::new();
        refs(&doc, &mut named);
        for name in &named {
            assert!(
                schemas.contains_key(name),
                "{name} is named but not a component"
            );
        }
        for route in crate::api::every_route() {
            for t in [route.doc.body, route.doc.answer].into_iter().flatten() {
                assert!(
                    schemas.contains_key(&*(t.name)()),
                    "{} {}",
                    route.method,
                    route.path
                );
            }
        }
        // The contract's closed vocabularies are enums of its strings in the document.
        for (name, values) in [
            (
                "JobState",
                wire::JobState::ALL
                    .iter()
                    .map(|v| v.as_str())
                    .collect::<Vec<_>>(),
            ),
            (
                "Presence",
                wire::Presence::ALL.iter().map(|v| v.as_str()).collect(),
            ),
            (
                "TargetStatus",
                wire::TargetStatus::ALL.iter().map(|v| v.as_str()).collect(),
            ),
        ] {
            assert_eq!(schemas[name]["enum"], json!(values), "{name}");
        }
        assert_eq!(
            schemas["Job"]["properties"]["state"]["$ref"],
            "#/components/schemas/JobState"
        );
    }
}
