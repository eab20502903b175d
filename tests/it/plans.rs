//! Every hot statement's cached plan reaches its rows by the right index, whatever parameters
//! it is later run with: the replicas plan each statement once per connection
//! (`plan_cache_mode = force_generic_plan`), so a generic plan that scans or sorts a queue would
//! be paid on every call. The table is loaded the way the benchmark loads it (one big queue of
//! one owner, settled history, some leases), which is what once made a generic claim plan sort
//! the whole queue and a generic complete plan walk a partial index of leases.
//!
//! This checks plan shapes, never timings.

use leasehold::store::sql;
use serde_json::json;

use crate::support::{connect, TestApp};

/// Load 200 runners, 500 keys, 20,000 parked jobs of one owner, 5,000 completed and 500
/// leased, then ANALYZE.
pub async fn realistic_table(url: &str) {
    let db = connect(url).await;
    db.batch_execute(
        "INSERT INTO runners (id, owner, workspace, label, capacity, token_hash, approved_by)
         SELECT gen_random_uuid(), 'ws:acme', 'acme', 'r' || g, 10,
                sha256(('token' || g)::bytea), 'admin'
           FROM generate_series(1, 200) g;
         INSERT INTO api_keys (id, workspace, subject, role, token_hash)
         SELECT gen_random_uuid(), 'acme', 'user' || g, 'member', sha256(('key' || g)::bytea)
           FROM generate_series(1, 500) g;
         INSERT INTO jobs (id, workspace, owner, pool, state, kind, payload, max_attempts,
                           no_runner_timeout_ms, no_runner_check_at)
         SELECT gen_random_uuid(), 'acme', 'ws:acme', 'workspace', 'parked', 'command',
                '{}', 3, 300000, now() + interval '5 minutes'
           FROM generate_series(1, 20000);
         INSERT INTO jobs (id, workspace, owner, pool, state, kind, payload, max_attempts,
                           no_runner_timeout_ms, no_runner_check_at, finished_at, result)
         SELECT gen_random_uuid(), 'acme', 'ws:acme', 'workspace', 'completed', 'command',
                '{}', 3, 300000, now(), now(), '{}'
           FROM generate_series(1, 5000);
         INSERT INTO jobs (id, workspace, owner, pool, state, kind, payload, max_attempts,
                           no_runner_timeout_ms, no_runner_check_at, leased_by, leased_at,
                           lease_expires_at, lease_check_at, epoch, attempts)
         SELECT gen_random_uuid(), 'acme', 'ws:acme', 'workspace', 'leased', 'command',
                '{}', 3, 300000, now(), (SELECT id FROM runners LIMIT 1), now(),
                now() + interval '2 minutes', now() + interval '2 minutes', 1, 1
           FROM generate_series(1, 500);
         ANALYZE;",
    )
    .await
    .expect("load a realistic table");
}

pub fn assert_plan(name: &str, plan: &str, must: &[&str], never: &[&str]) {
    for m in must {
        assert!(
            plan.contains(m),
            "{name}: its plan does not use {m}:\n{plan}"
        );
    }
    for n in never {
        assert!(!plan.contains(n), "{name}: its plan has {n}:\n{plan}");
    }
}

#[tokio::test]
async fn hot_statements_reach_their_rows_by_the_right_index_on_a_full_table() {
    let app = TestApp::spawn().await;
    realistic_table(&app.database_url).await;
    check_hot_plans(&app).await;
}

/// A new deployment: every table ANALYZEd while empty. A generic plan made now is kept for the
/// connection's life, and statistics of an empty table make any scan look free.
#[tokio::test]
async fn hot_statements_reach_their_rows_by_the_right_index_on_a_table_analyzed_empty() {
    let app = TestApp::spawn().await;
    connect(&app.database_url)
        .await
        .batch_execute("ANALYZE")
        .await
        .unwrap();
    check_hot_plans(&app).await;
}

async fn check_hot_plans(app: &TestApp) {
    let job = "'00000000-0000-7000-8000-000000000001'::uuid";
    let nil = "'00000000-0000-0000-0000-000000000000'::uuid";
    let runner = "'00000000-0000-7000-8000-000000000002'::uuid";
    let token = "sha256('token1'::bytea)";
    let item = json!({"id": "00000000-0000-7000-8000-000000000003",
                      "pool": "workspace", "kind": "command", "payload": {},
                      "required_capabilities": [], "priority": 0, "max_attempts": 3,
                      "no_runner_timeout_ms": 300000, "secrets": []})
    .to_string();
    let statements: Vec<(&str, &'static str, String)> = vec![
        // The one claim from the head, and from remembered places in every lane.
        (
            "lease_claim",
            sql::LEASE_CLAIM,
            format!(
                "{token}, {runner}, 'acme', 'ws:acme', 10, 120000, now(), false, \
                 1001, {nil}, NULL, 1001, {nil}, NULL, 1001, {nil}, NULL, 1001, {nil}, NULL, false, false"
            ),
        ),
        ("lease_more", sql::LEASE_MORE, "'acme', 'ws:acme'".into()),
        (
            "lease_claim_from",
            sql::LEASE_CLAIM,
            format!(
                "{token}, {runner}, 'acme', 'ws:acme', 10, 120000, now(), true, \
                 0, {job}, '1000', 0, {job}, '1000', 0, {job}, '1000', 0, {job}, '1000', true, true"
            ),
        ),
        (
            "lease_reject_unfit",
            sql::LEASE_REJECT_UNFIT,
            format!("{token}, {runner}, 'ws:acme'"),
        ),
        (
            "lease_probe",
            sql::LEASE_PROBE,
            format!(
                "{token}, {runner}, 'acme', 'ws:acme', 30000, now(), \
                 0, {job}, '1000', 0, {job}, '1000', 0, {job}, '1000', 0, {job}, '1000'"
            ),
        ),
        (
            "runner_lock_for_lease",
            sql::RUNNER_LOCK_FOR_LEASE,
            format!("{token}, NULL, NULL, NULL, 30000"),
        ),
        (
            "job_complete",
            sql::JOB_COMPLETE,
            format!("ARRAY[{job}], ARRAY[1::bigint], ARRAY[{token}], ARRAY['null'::jsonb], 30000"),
        ),
        (
            "job_fail",
            sql::JOB_FAIL,
            format!("{job}, 1, {token}, 'x', 30000"),
        ),
        (
            "job_release",
            sql::JOB_RELEASE,
            format!("{job}, 1, {token}, 30000"),
        ),
        (
            "job_heartbeat",
            sql::JOB_HEARTBEAT,
            format!("{job}, 1, {token}, 120000, 30000"),
        ),
        (
            "job_events_append",
            sql::JOB_EVENTS_APPEND,
            format!("{job}, 1, {token}, ARRAY['stdout'], ARRAY['{{}}'::jsonb], 30000"),
        ),
        (
            "job_insert",
            sql::JOB_INSERT,
            format!("sha256('key1'::bytea), '[{item}]'"),
        ),
        (
            "job_fence_miss",
            sql::JOB_FENCE_MISS,
            format!("{job}, {token}"),
        ),
        // The jobs list, filtered by state and outcome (v1.3) or not.
        (
            "jobs_list",
            sql::JOBS_LIST,
            "'acme', 'completed', NULL, 100, 4194304, 'failed'".into(),
        ),
        (
            "jobs_list_desc",
            sql::JOBS_LIST_DESC,
            format!("'acme', NULL, {job}, 100, 4194304, 'failed'"),
        ),
    ];
    let plans = app
        .store
        .generic_plans(
            &statements
                .iter()
                .map(|(_, sql, args)| (*sql, args.as_str()))
                .collect::<Vec<_>>(),
        )
        .await
        .unwrap();
    let plan = |name: &str| {
        let i = statements.iter().position(|(n, _, _)| *n == name).unwrap();
        plans[i].as_str()
    };
    // The claims walk each claim index in order; they never read or sort a whole queue.
    for name in ["lease_claim", "lease_claim_from"] {
        assert_plan(
            name,
            plan(name),
            &[
                "Index Scan using jobs_claim_named",
                "Index Scan using jobs_claim_pool",
                "Index Scan using jobs_claim_any",
                "jobs_pkey",
                // The runner's leases from where they start (migration 0015), in the index.
                "Index Only Scan using jobs_leased_since",
                "Index Cond: ((leased_by = $2) AND (leased_at >= CASE",
            ],
            &["Seq Scan"],
        );
        // The parks since each lane's place come from their own indexes (the class a key
        // column: migration 0030), never from a walk of the claim index.
        assert_plan(
            name,
            plan(name),
            &[
                "Index Scan using jobs_parked_since_pool on ",
                "Index Scan using jobs_parked_since_any on ",
            ],
            &[],
        );
        assert!(
            plan(name).contains("CTE r\n    ->  Index Scan using runners_"),
            "{name} finds its runner by a unique index:\n{}",
            plan(name)
        );
        for line in plan(name).lines() {
            assert!(
                !(line.contains("Sort") && line.contains("j_")),
                "{name} sorts job rows itself: {line}"
            );
        }
    }
    // Whether jobs are left reads the head of each claim index, never a whole queue.
    assert_plan(
        "lease_more",
        plan("lease_more"),
        &["jobs_claim_pool", "jobs_claim_any"],
        &["Seq Scan", "Sort"],
    );
    // The rejection reads the runner's named jobs by their index, and its runner by a key.
    assert_plan(
        "lease_reject_unfit",
        plan("lease_reject_unfit"),
        &["jobs_claim_named", "Index Scan using runners_"],
        &["Seq Scan", "Sort"],
    );
    // Fenced statements reach their job by primary key and their runner by its token.
    for name in [
        "job_complete",
        "job_fail",
        "job_release",
        "job_heartbeat",
        "job_events_append",
    ] {
        assert_plan(
            name,
            plan(name),
            &["using jobs_pkey on jobs", "runners_token_hash_key"],
            &["Seq Scan", "jobs_leased_since", "jobs_lease_check"],
        );
    }
    // The probe reads claim indexes from each lane's place, the parks since it from their own
    // indexes, and the runner's leases; never a whole table.
    assert_plan(
        "lease_probe",
        plan("lease_probe"),
        &[
            "Index Scan using runners_",
            "jobs_claim_named",
            "jobs_claim_pool",
            "jobs_claim_any",
            "jobs_leased_since",
            "Index Scan using jobs_parked_since_pool on ",
            "Index Scan using jobs_parked_since_any on ",
        ],
        &["Seq Scan", "Sort"],
    );
    assert_plan(
        "runner_lock_for_lease",
        plan("runner_lock_for_lease"),
        &["runners_token_hash_key"],
        &["Seq Scan"],
    );
    assert_plan(
        "job_insert",
        plan("job_insert"),
        &["api_keys_token_hash_key"],
        &["Seq Scan"],
    );
    assert_plan(
        "job_fence_miss",
        plan("job_fence_miss"),
        &["runners_token_hash_key", "id = $1)"],
        &["Seq Scan"],
    );
    // A page of the list walks the workspace's jobs in id order and stops at its limit,
    // whatever it filters on; it sorts only the page it returns, never the jobs it walks.
    for name in ["jobs_list", "jobs_list_desc"] {
        assert_plan(
            name,
            plan(name),
            &["Index Scan", "using jobs_by_workspace", "Limit"],
            &["Seq Scan", "Sort Key: j."],
        );
    }
}

/// Issue 19: a head of pool jobs the runner cannot run costs it nothing. 5,000 parked jobs
/// requiring `gpu` sit ahead (same priority, lower ids) of runnable ones; a workspace runner
/// without capabilities runs the claim's generic plan (as a replica's pool connection does)
/// and leases the first runnable job. Its claim must not have read and filtered the unfit head:
/// no plan node discards rows by its filter, and the constrained class is never scanned.
#[tokio::test]
async fn a_claim_behind_an_unfit_head_reads_none_of_it() {
    let app = TestApp::spawn().await;
    realistic_table(&app.database_url).await;
    let mut db = connect(&app.database_url).await;
    db.batch_execute(
        "INSERT INTO jobs (id, workspace, owner, pool, state, kind, payload, max_attempts,
                           required_capabilities, no_runner_timeout_ms, no_runner_check_at)
         SELECT ('00000000-0000-7000-8000-' || lpad(to_hex(g), 12, '0'))::uuid, 'acme',
                'ws:acme', 'workspace', 'parked', 'command', '{}', 3, '{gpu}', 300000,
                now() + interval '5 minutes'
           FROM generate_series(1, 5000) g;
         ANALYZE jobs;",
    )
    .await
    .unwrap();
    // A runner that holds none of the table's leases, and its token.
    let row = db
        .query_one(
            "SELECT id, 'token' || substr(label, 2) FROM runners
              WHERE id NOT IN (SELECT leased_by FROM jobs WHERE leased_by IS NOT NULL)
              LIMIT 1",
            &[],
        )
        .await
        .unwrap();
    let (runner, token): (uuid::Uuid, String) = (row.get(0), row.get(1));
    // The plain claim is the one a replica sends for such a runner; the general one must not
    // read the head either.
    for (name, claim) in [
        ("lease_claim", sql::LEASE_CLAIM),
        ("lease_claim_from", sql::LEASE_CLAIM),
    ] {
        let tx = db.transaction().await.unwrap();
        tx.batch_execute(
            "SET LOCAL plan_cache_mode = force_generic_plan; SET LOCAL enable_seqscan = off",
        )
        .await
        .unwrap();
        tx.batch_execute(&format!("PREPARE claim AS {claim}"))
            .await
            .unwrap();
        // The claims from places, from the head (no remembered place) in every lane.
        let lane = ", 1001, '00000000-0000-0000-0000-000000000000', NULL";
        let read_ahead = name == "lease_claim_from";
        let head = format!(", {read_ahead}{lane}{lane}{lane}{lane}, {read_ahead}, false");
        let plan = first_column(
            &tx,
            &format!(
                "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) EXECUTE claim(sha256('{token}'::bytea), \
                 '{runner}', 'acme', 'ws:acme', 1, 120000, NULL{head})"
            ),
        )
        .await
        .join("\n");
        let leased = first_column(
            &tx,
            &format!(
                "SELECT required_capabilities::text FROM jobs \
                 WHERE leased_by = '{runner}' AND state = 'leased'"
            ),
        )
        .await;
        tx.rollback().await.unwrap();
        // A prepared statement outlives its transaction.
        db.batch_execute("DEALLOCATE claim").await.unwrap();
        assert_eq!(
            leased,
            vec!["{}".to_owned()],
            "{name}: one runnable job leased:\n{plan}"
        );
        let removed: u64 = plan
            .lines()
            .filter_map(|l| l.trim().strip_prefix("Rows Removed by Filter: "))
            .map(|n| n.parse::<u64>().unwrap())
            .sum();
        assert!(
            removed < 100,
            "{name} read and discarded {removed} rows:\n{plan}"
        );
    }
}

/// The first column of every row `sql` (simple protocol) returns, as text.
async fn first_column(tx: &tokio_postgres::Transaction<'_>, sql: &str) -> Vec<String> {
    tx.simple_query(sql)
        .await
        .unwrap()
        .iter()
        .filter_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_owned),
            _ => None,
        })
        .collect()
}
