//! `/openapi.json` describes every route the router serves, with no credential needed: the
//! router and the document come from one route table, and this test checks both ends of it:
//! each table route is in the document with its method, and a request to each one is matched
//! by the router under that template (seen in the request metrics), never the 404 fallback.
//! `leasehold openapi` prints the same document.

use reqwest::Method;
use serde_json::Value;

use crate::support::*;

fn resolve_refs(v: &Value, doc: &Value, seen: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            if let Some(Value::String(r)) = m.get("$ref") {
                let name = r
                    .strip_prefix("#/components/schemas/")
                    .unwrap_or_else(|| panic!("unexpected ref {r}"));
                assert!(
                    doc["components"]["schemas"].get(name).is_some(),
                    "dangling ref {r}"
                );
                seen.push(name.to_owned());
            }
            m.values().for_each(|x| resolve_refs(x, doc, seen));
        }
        Value::Array(a) => a.iter().for_each(|x| resolve_refs(x, doc, seen)),
        _ => {}
    }
}

#[tokio::test]
async fn every_route_is_documented_and_served() {
    let app = TestApp::spawn().await;
    let url = app.url(0);
    let http = reqwest::Client::new();
    let answer = http
        .get(format!("{url}/openapi.json"))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200, "no credential needed");
    let doc: Value = answer.json().await.unwrap();
    assert_eq!(doc["openapi"], "3.1.0");
    let mut refs = Vec::new();
    resolve_refs(&doc, &doc, &mut refs);
    assert!(refs.iter().any(|r| r == "ErrorBody"));
    let detail = &doc["components"]["schemas"]["ErrorDetail"];
    assert_eq!(detail["required"], serde_json::json!(["code", "message"]));

    let table = leasehold::api::every_route();
    let mut documented = 0;
    for route in &table {
        let method = route.method.as_str().to_ascii_lowercase();
        let op = &doc["paths"][route.path][&method];
        assert!(
            op.is_object(),
            "{} {} is not documented",
            route.method,
            route.path
        );
        assert!(op["responses"].get(route.doc.ok.to_string()).is_some());
        documented += 1;
    }
    let in_doc: usize = doc["paths"]
        .as_object()
        .unwrap()
        .values()
        .map(|item| item.as_object().unwrap().len())
        .sum();
    assert_eq!(
        in_doc, documented,
        "the document has nothing the table lacks"
    );
    // The v1.1 additions are documented from the contract.
    for (method, path) in [
        ("post", "/v1/jobs/batch"),
        ("put", "/v1/secrets/{name}"),
        ("get", "/v1/secrets"),
        ("delete", "/v1/secrets/{name}"),
        ("post", "/v1/runners/{id}/repo-targets/{target_id}/approve"),
        ("post", "/v1/runners/{id}/repo-targets/{target_id}/revoke"),
    ] {
        assert!(doc["paths"][path][method].is_object(), "{method} {path}");
    }
    assert!(doc["paths"]["/v1/runner/jobs/{id}/complete"]["post"]["responses"]["409"].is_object());

    // Each served route is matched by the router under its template.
    let id = uuid::Uuid::nil().to_string();
    for route in table.iter().filter(|r| r.handler.is_some()) {
        let path = route
            .path
            .replace("{id}", &id)
            .replace("{target_id}", &id)
            .replace("{name}", "X")
            .replace("{file}", "app.js");
        let method = Method::from_bytes(route.method.as_str().as_bytes()).unwrap();
        let mut request = http.request(method, format!("{url}{path}"));
        if path == "/v1/runner/lease" {
            request = request.json(&serde_json::json!({"wait_ms": 0}));
        }
        request.send().await.unwrap();
    }
    let metrics = http
        .get(format!("{url}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for route in table.iter().filter(|r| r.handler.is_some()) {
        let labels = format!(r#"method="{}",route="{}""#, route.method, route.path);
        assert!(
            metrics.lines().any(|l| l
                .starts_with("leasehold_http_request_duration_seconds_count{")
                && l.contains(&labels)),
            "the router did not match {} {}",
            route.method,
            route.path
        );
    }
    assert!(!metrics.contains(r#"route="unmatched""#));

    // The command prints the same document.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .arg("openapi")
        .output()
        .unwrap();
    assert!(out.status.success());
    let printed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(printed, doc);
}
