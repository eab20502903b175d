//! Traces: a job's trace follows it across replicas. Two real `leasehold serve` processes
//! export OTLP/HTTP to a receiver inside this test; a job is dispatched on one (with a caller's
//! `traceparent`, which becomes the dispatch span's parent), leased and completed on the other.
//! The dispatch span is in the caller's trace; the lease and complete steps are spans of that
//! trace, children of the dispatch, linked to the requests that caused them, and those request
//! spans link back to the dispatch. Statements are spans named after their file. No attribute
//! carries a token, a key or the payload.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::routing::post;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use serde_json::json;

use crate::support::*;

/// A span and the service that sent it.
#[derive(Clone, Debug)]
struct Got {
    service: String,
    span: Span,
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn attr(span: &Span, key: &str) -> Option<String> {
    span.attributes.iter().find(|a| a.key == key).and_then(|a| {
        match a.value.as_ref()?.value.as_ref()? {
            Any::StringValue(s) => Some(s.clone()),
            Any::IntValue(i) => Some(i.to_string()),
            other => Some(format!("{other:?}")),
        }
    })
}

/// `span` carries a link to `other`.
fn links_to(span: &Span, other: &Span) -> bool {
    span.links
        .iter()
        .any(|l| l.span_id == other.span_id && l.trace_id == other.trace_id)
}

/// An OTLP/HTTP receiver on a free loopback port.
async fn receiver() -> (String, Arc<Mutex<Vec<Got>>>) {
    let got: Arc<Mutex<Vec<Got>>> = Arc::default();
    let sink = got.clone();
    let app = axum::Router::new().route(
        "/v1/traces",
        post(move |body: Bytes| {
            let sink = sink.clone();
            async move {
                let req = ExportTraceServiceRequest::decode(body).expect("OTLP protobuf");
                let mut out = sink.lock().unwrap();
                for rs in req.resource_spans {
                    let service = rs
                        .resource
                        .iter()
                        .flat_map(|r| &r.attributes)
                        .find(|a| a.key == "service.name")
                        .and_then(|a| match a.value.as_ref()?.value.as_ref()? {
                            Any::StringValue(s) => Some(s.clone()),
                            _ => None,
                        })
                        .unwrap_or_default();
                    for ss in rs.scope_spans {
                        for span in ss.spans {
                            out.push(Got {
                                service: service.clone(),
                                span,
                            });
                        }
                    }
                }
                // An empty ExportTraceServiceResponse.
                (
                    [("content-type", "application/x-protobuf")],
                    Vec::<u8>::new(),
                )
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, got)
}

#[tokio::test]
async fn a_jobs_trace_follows_it_from_dispatch_through_lease_and_complete_across_replicas() {
    let (endpoint, got) = receiver().await;
    let app = TestApp::spawn_with(0, |_| {}).await;
    let key = app.key("acme", "alice", false).await;
    let otel = |name: &'static str| {
        vec![
            ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.clone()),
            ("OTEL_SERVICE_NAME", name.to_owned()),
            ("OTEL_BSP_SCHEDULE_DELAY", "100".to_owned()),
        ]
    };
    let (env_a, env_b) = (otel("replica-a"), otel("replica-b"));
    let a_env: Vec<(&str, &str)> = env_a.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let b_env: Vec<(&str, &str)> = env_b.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let mut a = serve_process(&app.database_url, &a_env).await;
    let mut b = serve_process(&app.database_url, &b_env).await;

    let operator = leasehold::client::Client::new(a.url.clone(), Some(key.clone()));
    let (_runner, on_a) = pair(&operator, leasehold::wire::Tier::Personal, &[], 1).await;
    let runner_token = on_a.token().expect("runner token").to_owned();
    let on_b = leasehold::client::Client::new(b.url.clone(), Some(runner_token.clone()));

    // The caller's trace: the dispatch joins it.
    let caller_trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let caller_span = "00f067aa0ba902b7";
    let dispatched: serde_json::Value = reqwest::Client::new()
        .post(format!("{}/v1/jobs", a.url))
        .bearer_auth(&key)
        .header("traceparent", format!("00-{caller_trace}-{caller_span}-01"))
        .json(
            &json!({"target": {"pool": "personal"}, "payload": {"marker": "payload-never-traced"}}),
        )
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let job_id: uuid::Uuid = dispatched["id"].as_str().unwrap().parse().unwrap();
    let leased = lease(&on_b, 5_000, 1).await;
    assert_eq!(leased.len(), 1);
    on_b.complete(job_id, leased[0].epoch, json!({"ok": true}))
        .await
        .unwrap();
    // SIGTERM flushes each replica's exporter.
    assert!(a
        .terminate(Duration::from_secs(15))
        .await
        .unwrap()
        .success());
    assert!(b
        .terminate(Duration::from_secs(15))
        .await
        .unwrap()
        .success());

    let spans = eventually(
        Duration::from_secs(20),
        "the job's spans exported",
        || async {
            let spans = got.lock().unwrap().clone();
            let steps = spans
                .iter()
                .filter(|g| g.span.name == "job lease" || g.span.name == "job complete")
                .count();
            (steps == 2).then_some(spans)
        },
    )
    .await;
    let find = |name: &str| -> Got {
        spans
            .iter()
            .find(|g| g.span.name == name)
            .unwrap_or_else(|| {
                let names: Vec<_> = spans.iter().map(|g| &g.span.name).collect();
                panic!("no span {name} in {names:?}")
            })
            .clone()
    };

    // The dispatch is a server span of replica A in the caller's trace.
    let dispatch = find("POST /v1/jobs");
    assert_eq!(dispatch.service, "replica-a");
    assert_eq!(hex(&dispatch.span.trace_id), caller_trace);
    assert_eq!(hex(&dispatch.span.parent_span_id), caller_span);
    assert_eq!(
        attr(&dispatch.span, "http.route").as_deref(),
        Some("/v1/jobs")
    );
    assert_eq!(
        attr(&dispatch.span, "http.response.status_code").as_deref(),
        Some("201")
    );
    // Its statements are child spans named after their file.
    let insert = find("job_insert");
    assert_eq!(insert.span.parent_span_id, dispatch.span.span_id);
    assert_eq!(
        attr(&insert.span, "db.operation.name").as_deref(),
        Some("job_insert")
    );

    // Lease and complete ran on replica B, in the job's trace, linked both ways to the requests.
    for (step, route) in [
        ("job lease", "POST /v1/runner/lease"),
        ("job complete", "POST /v1/runner/jobs/{id}/complete"),
    ] {
        let step_span = find(step);
        let request = find(route);
        assert_eq!(step_span.service, "replica-b", "{step}");
        assert_eq!(request.service, "replica-b", "{route}");
        assert_eq!(
            step_span.span.trace_id, dispatch.span.trace_id,
            "{step} in the job's trace"
        );
        assert_eq!(
            step_span.span.parent_span_id, dispatch.span.span_id,
            "{step} under the dispatch"
        );
        assert_eq!(
            attr(&step_span.span, "leasehold.job.id"),
            Some(job_id.to_string())
        );
        assert!(
            links_to(&step_span.span, &request.span),
            "{step} links to its request"
        );
        assert!(
            links_to(&request.span, &dispatch.span),
            "{route} links to the dispatch"
        );
    }

    // Nothing secret or private in any attribute of any span.
    for g in &spans {
        for a in &g.span.attributes {
            let v = format!("{:?}", a.value);
            for needle in [
                key.as_str(),
                runner_token.as_str(),
                "payload-never-traced",
                "authorization",
            ] {
                assert!(
                    !v.contains(needle) && !a.key.contains(needle),
                    "{} carries {needle}",
                    g.span.name
                );
            }
        }
    }
}
