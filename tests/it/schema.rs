//! Every statement in `sql/` (and each one `build.rs` makes from one) prepares against the
//! migrated schema and returns every column its row mapping reads, so a renamed or dropped
//! column fails here and never in production.

use leasehold::store::rows::MAPPED;

use crate::support::TestApp;

#[tokio::test]
async fn every_statement_prepares_and_returns_what_its_mapping_reads() {
    let app = TestApp::spawn().await;
    let results = app.store.prepare_all().await.unwrap();
    assert_eq!(results.len(), leasehold::store::sql::ALL.len());
    let sql_files = std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/sql"))
        .unwrap()
        .count();
    assert_eq!(
        sql_files + leasehold::store::sql::DERIVED.len(),
        results.len(),
        "every file in sql/ is listed in store::sql::ALL (with the statements build.rs makes from one)"
    );
    let failed: Vec<_> = results.iter().filter(|(_, r)| r.is_err()).collect();
    assert!(
        failed.is_empty(),
        "statements that do not prepare: {failed:#?}"
    );
    for (file, wanted) in MAPPED {
        let (_, columns) = results
            .iter()
            .find(|(f, _)| f == file)
            .unwrap_or_else(|| panic!("{file} is not in sql/"));
        let names: Vec<&str> = columns
            .as_ref()
            .unwrap()
            .iter()
            .map(|(n, _)| n.as_str())
            .collect();
        let missing: Vec<_> = wanted.iter().filter(|w| !names.contains(w)).collect();
        assert!(
            missing.is_empty(),
            "{file} does not return {missing:?} (it returns {names:?})"
        );
    }
}

/// Migrations are recorded with their checksums: replicas starting together migrate once, a
/// second run is a no-op, and a migration whose text changed after it was applied stops the
/// start.
#[tokio::test]
async fn migrations_apply_once_under_the_lock_and_a_changed_one_is_refused() {
    use leasehold::store::migrate;
    // A database no replica serves: a replica's loops (sweeps, webhook deliveries) would take
    // locks on the tables the migrations drop and make, and a lost deadlock would fail a run.
    let url = crate::support::fresh_database().await;
    let db = crate::support::connect(&url).await;
    // Start from an empty schema so the concurrent runs have real work to race over.
    db.batch_execute("DROP SCHEMA public CASCADE; CREATE SCHEMA public")
        .await
        .unwrap();
    let runs: Vec<_> = (0..3)
        .map(|_| {
            let url = url.clone();
            tokio::spawn(async move { migrate::run(&url).await })
        })
        .collect();
    for r in runs {
        r.await.unwrap().expect("concurrent migration");
    }
    migrate::run(&url).await.expect("a second run is a no-op");
    let applied: Vec<i64> = db
        .query(
            "SELECT version FROM leasehold_migrations ORDER BY version",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let wanted: Vec<i64> = migrate::migrations()
        .unwrap()
        .iter()
        .map(|m| m.version)
        .collect();
    assert_eq!(applied, wanted);

    db.batch_execute("UPDATE leasehold_migrations SET checksum = '\\x00' WHERE version = 1")
        .await
        .unwrap();
    let err = migrate::run(&url).await.expect_err("a changed migration");
    assert!(
        err.to_string().contains("was changed after it was applied"),
        "{err:#}"
    );
}

/// The job row's one CHECK (migration 0014) refuses every row that one of the ten constraints
/// it replaced refused, one broken rule at a time, and accepts the valid row each starts from.
#[tokio::test]
async fn the_job_row_check_refuses_each_rule_it_carries() {
    let app = TestApp::spawn().await;
    let db = crate::support::connect(&app.database_url).await;
    let insert = |set: &str| {
        format!(
            "INSERT INTO jobs (id, workspace, owner, pool, state, kind, payload, max_attempts,
                               no_runner_timeout_ms, no_runner_check_at)
             VALUES (gen_random_uuid(), 'w', 'ws:w', 'workspace', 'parked', 'k', 'null', 3,
                     1000, now());
             UPDATE jobs SET {set} WHERE id = (SELECT id FROM jobs ORDER BY created_at DESC, id LIMIT 1)"
        )
    };
    db.batch_execute(&insert("priority = 5")).await.unwrap();
    let broken = [
        "state = 'lost'",
        "state = 'leased'",
        "lease_expires_at = now()",
        "state = 'completed'",
        "finished_at = now()",
        "pool = 'everyone'",
        "pool = NULL",
        "runner_id = gen_random_uuid()",
        "priority = 1001",
        "priority = -1001",
        "max_attempts = 0",
        "max_attempts = 101",
        "epoch = -1",
        "attempts = -1",
        "traceparent = repeat('0', 129)",
    ];
    for set in broken {
        let err = db
            .batch_execute(&format!("BEGIN; {}; COMMIT", insert(set)))
            .await
            .expect_err(set);
        db.batch_execute("ROLLBACK").await.unwrap();
        assert_eq!(
            err.as_db_error()
                .map(|e| (e.code().clone(), e.constraint())),
            Some((
                tokio_postgres::error::SqlState::CHECK_VIOLATION,
                Some("jobs_row_valid")
            )),
            "{set}: {err}"
        );
    }
    // Valid transitions still pass: leased with an expiry, settled with a finish.
    db.batch_execute(&insert(
        "state = 'leased', lease_expires_at = now(), traceparent = repeat('0', 128)",
    ))
    .await
    .unwrap();
    db.batch_execute(&insert("state = 'completed', finished_at = now()"))
        .await
        .unwrap();
}
