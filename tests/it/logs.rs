//! What the logs may hold: a database error is logged by SQLSTATE and statement name only,
//! never with the request data that caused it (PostgreSQL's message and context quote it).

use std::io::Write;
use std::sync::{Arc, Mutex};

use leasehold::api::error::ApiError;
use leasehold::store::{NewJob, Store, StoreError};
use serde_json::json;
use uuid::Uuid;

use crate::support::fresh_database;

/// Log lines written by a tracing subscriber, kept in memory.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn a_database_error_is_logged_by_sqlstate_and_statement_never_with_the_payload() {
    let logs = Captured::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::TRACE)
        .finish();
    // The test runs on one thread, and so does everything it awaits.
    let _guard = tracing::subscriber::set_default(subscriber);

    let store = Store::connect(&fresh_database().await, 2, 90_000).unwrap();
    // A token in a job's env, followed by a NUL that PostgreSQL's jsonb refuses: the
    // database's error context quotes the JSON around it.
    let secret = "ghp_LeakCanary0123456789abcdefABCDEF";
    let key = leasehold::commands::admin::mint_key(&store, "acme", "alice", false)
        .await
        .unwrap();
    let job = NewJob {
        id: Uuid::now_v7(),
        key_hash: leasehold::domain::credentials::hash(&key),
        pool: Some("personal"),
        kind: "command".into(),
        payload: json!({"argv": ["true"], "env": {"TOKEN": format!("{secret}\u{0}XyzzyAfterNul")}}),
        max_attempts: 3,
        no_runner_timeout_ms: 300_000,
        ..NewJob::default()
    };
    let err = store
        .insert_jobs(&[job])
        .await
        .expect_err("PostgreSQL refuses \\u0000 in jsonb");
    match &err {
        StoreError::Db {
            sqlstate,
            statement,
        } => {
            assert_eq!(sqlstate, "22P05", "untranslatable character");
            assert_eq!(*statement, "job_insert.sql");
        }
        other => panic!("expected a database error, got {other}"),
    }
    // Every way the error reaches a log: Display and Debug in background loops, and the
    // handler's conversion to a 500.
    tracing::warn!(error = %err, "sweep failed");
    tracing::warn!(error = ?err, "sweep failed");
    assert!(matches!(ApiError::from(err), ApiError::Internal));

    let text = logs.text();
    assert!(
        text.contains("22P05") && text.contains("job_insert.sql"),
        "the log names the SQLSTATE and the statement:\n{text}"
    );
    for leak in ["ghp_", "LeakCanary", "XyzzyAfterNul", "TOKEN", "argv"] {
        assert!(
            !text.contains(leak),
            "request data {leak:?} reached the log:\n{text}"
        );
    }
}
