//! The Job view's `outcome` and `GET /v1/jobs?outcome=` (v1.3, "Outcome"): null until the job
//! is terminal, then `succeeded` (completed without an `exit_code`, or with 0), `failed` (state
//! failed, or completed with any other `exit_code`), `cancelled` or `rejected`; the filter
//! lists exactly the jobs whose view shows that outcome, with or without `state=`, in both
//! orders. Read as raw JSON over HTTP, as an outside client reads it.

use std::collections::BTreeMap;

use serde_json::{json, Value};
use uuid::Uuid;

use crate::support::{dispatch, lease, pair, personal, to_runner, TestApp};
use leasehold::wire::Tier;

async fn get(url: &str, key: &str, path: &str) -> (u16, Value) {
    let r = reqwest::Client::new()
        .get(format!("{url}{path}"))
        .bearer_auth(key)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap())
}

fn ids(page: &Value) -> Vec<String> {
    page["jobs"]
        .as_array()
        .unwrap_or_else(|| panic!("a job list: {page}"))
        .iter()
        .map(|j| j["id"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn the_outcome_says_how_a_job_ended_and_filters_the_list() {
    let app = TestApp::spawn().await;
    let key = app.key("acme", "alice", false).await;
    let alice = leasehold::client::Client::new(app.url(0), Some(key.clone()));
    let (runner, rc) = pair(&alice, Tier::Personal, &[], 10).await;

    // One job per way of ending, each leased and settled by the runner in turn.
    let mut want: BTreeMap<Uuid, Option<&str>> = BTreeMap::new();
    let results = [
        (json!({}), Some("succeeded")),
        (
            json!({"exit_code": 0, "outcome": "succeeded"}),
            Some("succeeded"),
        ),
        (json!({"exit_code": 3}), Some("failed")),
        (json!({"exit_code": 127}), Some("failed")),
        (json!({"exit_code": null, "signal": 9}), Some("failed")),
    ];
    for (result, outcome) in results {
        let job = dispatch(&alice, personal(), json!({"argv": ["x"]})).await;
        let leased = lease(&rc, 0, 1).await;
        assert_eq!(leased[0].id, job.id);
        rc.complete(job.id, leased[0].epoch, result).await.unwrap();
        want.insert(job.id, outcome);
    }
    let failed = dispatch(&alice, personal(), json!({})).await;
    let leased = lease(&rc, 0, 1).await;
    rc.fail(failed.id, leased[0].epoch, "cannot run it")
        .await
        .unwrap();
    want.insert(failed.id, Some("failed"));
    let cancelled = dispatch(&alice, personal(), json!({})).await;
    alice.cancel(cancelled.id).await.unwrap();
    want.insert(cancelled.id, Some("cancelled"));
    let leased_job = dispatch(&alice, personal(), json!({})).await;
    assert_eq!(lease(&rc, 0, 1).await[0].id, leased_job.id);
    want.insert(leased_job.id, None);
    let parked = dispatch(&alice, personal(), json!({})).await;
    want.insert(parked.id, None);
    // Named for a runner that is then revoked: rejected (runner_revoked).
    let (doomed, _) = pair(&alice, Tier::Personal, &[], 1).await;
    let rejected = dispatch(&alice, to_runner(doomed.id), json!({})).await;
    alice
        .revoke_runner(Tier::Personal, doomed.id)
        .await
        .unwrap();
    want.insert(rejected.id, Some("rejected"));
    let _ = runner;

    // Each job's own view.
    for (id, outcome) in &want {
        let (status, job) = get(&app.url(0), &key, &format!("/v1/jobs/{id}")).await;
        assert_eq!(status, 200, "{job}");
        assert!(
            job.get("outcome").is_some(),
            "outcome is always present: {job}"
        );
        assert_eq!(job["outcome"], json!(outcome), "{job}");
    }

    // The filter, with and without a state, in both orders.
    for (query, expect) in [
        ("outcome=succeeded", vec!["succeeded"]),
        ("outcome=failed", vec!["failed"]),
        ("outcome=cancelled", vec!["cancelled"]),
        ("outcome=rejected", vec!["rejected"]),
    ] {
        let outcome = expect[0];
        let mut listed: Vec<String> = want
            .iter()
            .filter(|(_, o)| **o == Some(outcome))
            .map(|(id, _)| id.to_string())
            .collect();
        let (status, page) = get(&app.url(0), &key, &format!("/v1/jobs?{query}")).await;
        assert_eq!(status, 200, "{query}: {page}");
        assert_eq!(ids(&page), listed, "{query}");
        let (_, page) = get(&app.url(0), &key, &format!("/v1/jobs?{query}&order=desc")).await;
        listed.reverse();
        assert_eq!(ids(&page), listed, "{query}&order=desc");
    }
    let completed_failed: Vec<String> = want
        .iter()
        .filter(|(id, o)| **o == Some("failed") && **id != failed.id)
        .map(|(id, _)| id.to_string())
        .collect();
    let (_, page) = get(&app.url(0), &key, "/v1/jobs?state=completed&outcome=failed").await;
    assert_eq!(ids(&page), completed_failed);
    let (_, page) = get(&app.url(0), &key, "/v1/jobs?state=failed&outcome=succeeded").await;
    assert_eq!(ids(&page), Vec::<String>::new());
    // A page of the filtered list is full at `limit` and goes on after `next`.
    let (_, first) = get(&app.url(0), &key, "/v1/jobs?outcome=failed&limit=2").await;
    assert_eq!(ids(&first).len(), 2);
    let next = first["next"].as_str().expect("a full page has next");
    let (_, rest) = get(
        &app.url(0),
        &key,
        &format!("/v1/jobs?outcome=failed&limit=10&after={next}"),
    )
    .await;
    assert_eq!(ids(&rest).len(), 2);

    // A value outside the vocabulary is 400 naming the field.
    let (status, body) = get(&app.url(0), &key, "/v1/jobs?outcome=green").await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["code"], "bad_request");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("outcome"),
        "{body}"
    );
}

/// SQL's `job_outcome()` (the filter) and `domain::state::outcome` (the view) are one rule.
#[tokio::test]
async fn the_filter_and_the_view_judge_alike() {
    use leasehold::domain::state::{outcome, JobState};
    let app = TestApp::spawn().await;
    let db = crate::support::connect(&app.database_url).await;
    let results = [
        None,
        Some(json!(null)),
        Some(json!({})),
        Some(json!({"exit_code": 0})),
        Some(json!({"exit_code": 0.0})),
        Some(json!({"exit_code": -0})),
        Some(json!({"exit_code": 1})),
        Some(json!({"exit_code": 255})),
        Some(json!({"exit_code": -1})),
        Some(json!({"exit_code": 0.5})),
        Some(json!({"exit_code": "0"})),
        Some(json!({"exit_code": null, "signal": 15})),
        Some(json!({"exit_code": false})),
        Some(json!({"exit_code": [0]})),
        Some(json!({"exit_code": {"code": 0}})),
        Some(json!({"outcome": "failed"})),
        Some(json!(["exit_code"])),
        Some(json!("exit_code")),
        Some(json!(3)),
    ];
    let statement = db
        .prepare("SELECT job_outcome($1::text, $2::jsonb)")
        .await
        .unwrap();
    for state in JobState::ALL {
        for result in &results {
            let sql: Option<String> = db
                .query_one(&statement, &[&state.as_str(), result])
                .await
                .unwrap()
                .get(0);
            let rust = outcome(state, result.as_ref()).map(|o| o.as_str().to_owned());
            assert_eq!(sql, rust, "{state:?} {result:?}");
        }
    }
}
