//! One rule for "this runner may run this job": SQL's `job_fits()` (migration 0011, used by
//! every claim, the rejection, the no-runner sweep and the dispatch preflight) and Rust's
//! `capabilities::unfit` (the dispatch's 422 to a named runner) give the same answer. Random
//! cases from a fixed seed, drawn from a small alphabet so that overlaps, subsets and misses
//! are all common; every case is judged by the real function on the real server.

use leasehold::domain::capabilities::{unfit, JobNeeds, RunnerOffers};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;

use crate::support::{connect, TestApp};

const NAMES: &[&str] = &["linux", "docker", "gpu", "arm64", "canary"];
const SOURCES: &[&str] = &["github acme/api", "github acme/web", "gitlab acme/api"];
const CASES: usize = 5_000;

/// A random subset of `from` (possibly empty, possibly all of it).
fn subset(rng: &mut StdRng, from: &[&str]) -> Vec<String> {
    from.iter()
        .filter(|_| rng.random_bool(0.4))
        .map(|s| (*s).to_owned())
        .collect()
}

struct Case {
    required: Vec<String>,
    source_key: Option<String>,
    needs_workspace_runner: bool,
    capabilities: Vec<String>,
    exclusive: Vec<String>,
    sources: Vec<String>,
    workspace_runner: bool,
}

fn case(rng: &mut StdRng) -> Case {
    let capabilities = subset(rng, NAMES);
    // Runners always advertise their exclusive names; the rule is checked without that too.
    let exclusive = if rng.random_bool(0.7) {
        let caps: Vec<&str> = capabilities.iter().map(String::as_str).collect();
        subset(rng, &caps)
    } else {
        subset(rng, NAMES)
    };
    Case {
        required: subset(rng, NAMES),
        source_key: rng
            .random_bool(0.5)
            .then(|| SOURCES[rng.random_range(0..SOURCES.len())].to_owned()),
        needs_workspace_runner: rng.random_bool(0.3),
        capabilities,
        exclusive,
        sources: subset(rng, SOURCES),
        workspace_runner: rng.random_bool(0.5),
    }
}

#[tokio::test]
async fn sql_job_fits_and_rust_unfit_agree_on_random_cases() {
    let app = TestApp::spawn().await;
    let db = connect(&app.database_url).await;
    let mut rng = StdRng::seed_from_u64(19);
    let cases: Vec<Case> = (0..CASES).map(|_| case(&mut rng)).collect();
    let as_json: Vec<serde_json::Value> = cases
        .iter()
        .map(|c| {
            json!({"required": c.required, "source_key": c.source_key,
                   "needs_workspace_runner": c.needs_workspace_runner,
                   "capabilities": c.capabilities, "exclusive": c.exclusive,
                   "sources": c.sources, "workspace_runner": c.workspace_runner})
        })
        .collect();
    let rows = db
        .query(
            "SELECT job_fits(
                        ARRAY(SELECT jsonb_array_elements_text(c -> 'required')),
                        c ->> 'source_key', (c ->> 'needs_workspace_runner')::boolean,
                        ARRAY(SELECT jsonb_array_elements_text(c -> 'capabilities')),
                        ARRAY(SELECT jsonb_array_elements_text(c -> 'exclusive')),
                        ARRAY(SELECT jsonb_array_elements_text(c -> 'sources')),
                        (c ->> 'workspace_runner')::boolean) AS fits
               FROM jsonb_array_elements($1::jsonb) WITH ORDINALITY AS cases (c, n)
              ORDER BY n",
            &[&serde_json::Value::Array(as_json)],
        )
        .await
        .unwrap();
    assert_eq!(rows.len(), CASES);
    let mut fitting = 0;
    for (c, row) in cases.iter().zip(&rows) {
        let sql: bool = row.get("fits");
        let job = JobNeeds {
            required: &c.required,
            source_key: c.source_key.as_deref(),
            needs_workspace_runner: c.needs_workspace_runner,
        };
        let runner = RunnerOffers {
            capabilities: &c.capabilities,
            exclusive: &c.exclusive,
            sources: &c.sources,
            workspace_runner: c.workspace_runner,
        };
        let rust = unfit(&job, &runner);
        assert_eq!(
            sql,
            rust.is_none(),
            "job_fits says {sql}, unfit says {rust:?}, for required {:?} source {:?} \
             needs_workspace_runner {} / capabilities {:?} exclusive {:?} sources {:?} \
             workspace_runner {}",
            c.required,
            c.source_key,
            c.needs_workspace_runner,
            c.capabilities,
            c.exclusive,
            c.sources,
            c.workspace_runner
        );
        fitting += usize::from(sql);
    }
    // The cases exercise both answers, not just one.
    assert!(
        fitting > CASES / 50 && fitting < CASES - CASES / 50,
        "{fitting} of {CASES} cases fit"
    );
}
