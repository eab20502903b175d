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

/// Every scan of a lane index in `plan` reaches its rows by the lane (`job_lane` for
/// jobs_claim, `job_any_lane` for jobs_claim_any) as an index condition: a generic plan that
/// walked one of them under a mere filter would read every parked job.
pub fn assert_lanes_by_key(name: &str, plan: &str) {
    let lines: Vec<&str> = plan.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        for (index, key) in [
            ("using jobs_claim on", "job_lane("),
            ("using jobs_claim_any on", "job_any_lane("),
        ] {
            if !line.contains(index) {
                continue;
            }
            let cond = lines[i + 1..]
                .iter()
                .take_while(|l| !l.contains("->"))
                .any(|l| l.contains("Index Cond:") && l.contains(key));
            assert!(cond, "{name} walks {index} without its lane:\n{plan}");
        }
    }
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
    let heads = format!("ARRAY[-1001, -1001, -1001, -1001], ARRAY[{nil}, {nil}, {nil}, {nil}]");
    let places = format!("ARRAY[0, 0, 0, 0], ARRAY[{job}, {job}, {job}, {job}]");
    // A workspace class that reads every lane: the plain ones and the constrained ones.
    let class = "'acme', 'ws:acme', '{gpu}'::text[], '{}'::text[], '{}'::text[]";
    let statements: Vec<(&str, &'static str, String)> = vec![
        // The claim from the lanes' heads, and from remembered places in every lane.
        (
            "claim",
            sql::CLAIM,
            format!(
                "ARRAY[{runner}], ARRAY[10], ARRAY[now()], ARRAY[true], 120000, {heads}, false, \
                 {class}"
            ),
        ),
        (
            "claim_from",
            sql::CLAIM,
            format!(
                "ARRAY[{runner}], ARRAY[10], ARRAY[now()], ARRAY[true], 120000, {places}, true, \
                 {class}"
            ),
        ),
        (
            "runners_lock_for_claim",
            sql::RUNNERS_LOCK_FOR_CLAIM,
            format!("ARRAY[{runner}], false"),
        ),
        ("runner_for_lease", sql::RUNNER_FOR_LEASE, token.to_owned()),
        (
            "lease_reject_unfit",
            sql::LEASE_REJECT_UNFIT,
            format!("ARRAY[{runner}]"),
        ),
        (
            "parked_lanes",
            sql::PARKED_LANES,
            "ARRAY['p/acme/ws:acme/0', 'r/00000000-0000-7000-8000-000000000002'], \
             ARRAY['a/acme/0']"
                .to_owned(),
        ),
        (
            "job_complete",
            sql::JOB_COMPLETE,
            format!("ARRAY[{job}], ARRAY[1::bigint], ARRAY[{token}], ARRAY['null'::jsonb], 30000"),
        ),
        (
            "job_fail",
            sql::JOB_FAIL,
            format!("ARRAY[{job}], ARRAY[1::bigint], ARRAY[{token}], ARRAY['x'], 30000"),
        ),
        (
            "job_release",
            sql::JOB_RELEASE,
            format!("{job}, 1, {token}, 30000"),
        ),
        (
            "job_heartbeat",
            sql::JOB_HEARTBEAT,
            format!("ARRAY[{job}], ARRAY[1::bigint], ARRAY[{token}], 120000, 30000"),
        ),
        (
            "job_events_append",
            sql::JOB_EVENTS_APPEND,
            format!("{job}, 1, {token}, ARRAY['stdout'], ARRAY['{{}}'::jsonb], 30000"),
        ),
        (
            "job_insert",
            sql::JOB_INSERT,
            format!("sha256('key1'::bytea), '[{item}]', 30000"),
        ),
        (
            "job_fence_miss",
            sql::JOB_FENCE_MISS,
            format!("{job}, {token}"),
        ),
        // The jobs list, filtered by state and outcome (v1.3) or not, searched (`q`) or not.
        (
            "jobs_list",
            sql::JOBS_LIST,
            "'acme', 'completed', NULL, 100, 4194304, 'failed', NULL, NULL".into(),
        ),
        (
            "jobs_list_desc",
            sql::JOBS_LIST_DESC,
            format!("'acme', NULL, {job}, 100, 4194304, 'failed', 'make 01a2', '01a2'"),
        ),
        // A page of the workspace feed (v1.4): one range per kind.
        (
            "feed_page",
            sql::FEED_PAGE,
            format!("'acme', ARRAY['state', 'stdout'], 0, {nil}, 0, 100"),
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
    for (name, _, _) in &statements {
        assert_lanes_by_key(name, plan(name));
    }
    // The claim merges its lanes, each an ordered range of its index; it never reads or
    // sorts a whole queue.
    for name in ["claim", "claim_from"] {
        assert_plan(
            name,
            plan(name),
            &[
                "Merge Append",
                "Index Scan using jobs_claim on",
                "Index Scan using jobs_claim_any on",
                "jobs_pkey",
                // The runners' leases from where they start (migration 0015), in the index.
                "Index Only Scan using jobs_leased_since",
                "(leased_at >= CASE",
                // Each lane from its start: one row comparison the index starts from.
                "(ROW((- priority), id) >= ROW(",
            ],
            &["Seq Scan"],
        );
        assert!(
            plan(name).contains("Index Scan using runners_pkey"),
            "{name} finds its runners by primary key:\n{}",
            plan(name)
        );
        // The pool lanes' candidates are never sorted, only merged (a Merge Append's key is a
        // merge of ordered ranges, not a sort): what it took, and a runner's few named jobs, are.
        let lines: Vec<&str> = plan(name).lines().collect();
        for pair in lines.windows(2) {
            let sort = pair[0]
                .trim_start()
                .trim_start_matches("->  ")
                .starts_with("Sort ");
            assert!(
                !(sort && (pair[1].contains("(- jobs") || pair[1].contains("own0."))),
                "{name} sorts job rows itself: {}",
                pair[1]
            );
        }
    }
    // The runners by key (locked in id order: the index's, or a sort of the tick's few ids).
    assert_plan(
        "runners_lock_for_claim",
        plan("runners_lock_for_claim"),
        &["runners_pkey"],
        &["Seq Scan"],
    );
    assert_plan(
        "runner_for_lease",
        plan("runner_for_lease"),
        &["runners_token_hash_key"],
        &["Seq Scan"],
    );
    // The rejection reads the runners' named lanes by the claim index, the runners by key.
    assert_plan(
        "lease_reject_unfit",
        plan("lease_reject_unfit"),
        &["Index Cond: (job_lane(", "runners_pkey", "jobs_pkey"],
        &["Seq Scan", "Sort"],
    );
    // The safety net probes each lane's index.
    assert_plan(
        "parked_lanes",
        plan("parked_lanes"),
        &["jobs_claim on", "jobs_claim_any on"],
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
    // A page of the feed reads one ordered range of the feed index per kind, each stopped at
    // the page's size: a reader far behind costs one page, never the workspace's history.
    assert_plan(
        "feed_page",
        plan("feed_page"),
        &["Index Scan using job_events_feed", "Limit"],
        &["Seq Scan"],
    );
}

/// A claim behind unfit work reads none of it (v1.4, "No class starves"): 5,000 parked jobs
/// requiring `gpu` sit ahead (same priority, lower ids) of runnable ones; a workspace runner
/// without capabilities, and one that runs only `arm64` jobs (exclusive: the plain lane closed,
/// its constrained lane full of `gpu` jobs),
/// each run the claim's generic plan (as a replica's pool connection does) and lease the first
/// job they can run. Neither claim may have read and filtered the unfit head: no plan node
/// discards rows by its filter.
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
         INSERT INTO jobs (id, workspace, owner, pool, state, kind, payload, max_attempts,
                           required_capabilities, no_runner_timeout_ms, no_runner_check_at)
         SELECT gen_random_uuid(), 'acme', 'ws:acme', 'workspace', 'parked', 'command', '{}', 3,
                '{arm64}', 300000, now() + interval '5 minutes'
           FROM generate_series(1, 3) g;
         ANALYZE jobs;",
    )
    .await
    .unwrap();
    // A runner that holds none of the table's leases, and its token.
    let row = db
        .query_one(
            "SELECT id FROM runners
              WHERE id NOT IN (SELECT leased_by FROM jobs WHERE leased_by IS NOT NULL)
              LIMIT 1",
            &[],
        )
        .await
        .unwrap();
    let runner: uuid::Uuid = row.get(0);
    // The claim from the lanes' heads, and answering where they start next; plain and arm64.
    for (name, places, caps, takes) in [
        ("claim", false, "{}", "{}"),
        ("claim_from", true, "{}", "{}"),
        ("claim arm64", false, "{arm64}", "{arm64}"),
        ("claim_from arm64", true, "{arm64}", "{arm64}"),
    ] {
        let tx = db.transaction().await.unwrap();
        tx.batch_execute(&format!(
            "SET LOCAL plan_cache_mode = force_generic_plan; SET LOCAL enable_seqscan = off;
             UPDATE runners SET capabilities = '{caps}', exclusive = '{caps}'
              WHERE id = '{runner}'"
        ))
        .await
        .unwrap();
        tx.batch_execute(&format!("PREPARE claim AS {}", sql::CLAIM))
            .await
            .unwrap();
        let nil = "'00000000-0000-0000-0000-000000000000'::uuid";
        let plan = first_column(
            &tx,
            &format!(
                "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) EXECUTE claim(ARRAY['{runner}'::uuid], \
                 ARRAY[1], ARRAY[NULL::timestamptz], ARRAY[true], 120000, \
                 ARRAY[-1001, -1001, -1001, -1001], ARRAY[{nil}, {nil}, {nil}, {nil}], {places}, \
                 'acme', 'ws:acme', '{caps}'::text[], '{caps}'::text[], '{{}}'::text[])"
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
            vec![takes.to_owned()],
            "{name}: one runnable job leased:\n{plan}"
        );
        assert_lanes_by_key(name, &plan);
        if caps != "{}" {
            assert!(
                plan.contains("jobs_claim_sets on"),
                "{name} reads the constrained lane by its sets:\n{plan}"
            );
        }
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
