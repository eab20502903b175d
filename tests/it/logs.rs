//! What the logs may hold: a database error is logged by SQLSTATE and statement name only,
//! never with the request data that caused it (PostgreSQL's message and context quote it);
//! and no statement's parameters are logged at any level, `trace` included (issue 52 row 6).

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

/// Issue 52 row 6: a replica at `LEASEHOLD_LOG=trace` logs no statement's parameters (nor the
/// text of a database notice): `tokio_postgres`, which logs each statement's parameters at
/// debug, is off at every level, as rmcp is. A job dispatched and read back through a real
/// `leasehold serve` carries a mark in its argv; no line of the log carries it.
#[tokio::test]
async fn at_trace_no_log_line_carries_a_statements_parameters() {
    let database_url = fresh_database().await;
    let dir = crate::procs::TempDir::new("logs-trace");
    let (server, url) =
        crate::procs::serve(&database_url, &dir, &[("LEASEHOLD_LOG", "trace")]).await;
    let key = crate::support::key_in(&database_url, "acme", "alice", true).await;
    let operator = leasehold::client::Client::new(&url, Some(key));
    let mark = "Pq4paramMARK";
    let job = crate::support::dispatch(
        &operator,
        crate::support::workspace_pool(),
        json!({"argv": ["echo", mark]}),
    )
    .await;
    operator.job(job.id).await.expect("read back");
    // A connection that sends no HTTP ends with an error the replica logs at trace: once that
    // line is there, the log is at trace (and written as each line is logged).
    {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut raw = tokio::net::TcpStream::connect(url.trim_start_matches("http://"))
            .await
            .unwrap();
        raw.write_all(b"\x00\x01 not http\r\n\r\n").await.unwrap();
        let mut rest = Vec::new();
        let _ = raw.read_to_end(&mut rest).await;
    }
    let log = crate::support::eventually(crate::procs::LONG, "a line at trace", || async {
        let log = server.log();
        log.contains("connection ended with an error")
            .then_some(log)
    })
    .await;
    let carried: Vec<&str> = log.lines().filter(|l| l.contains(mark)).collect();
    assert!(
        carried.is_empty(),
        "log lines carrying a statement's parameters: {:?}",
        carried
            .iter()
            .map(|l| &l[..l.len().min(300)])
            .collect::<Vec<_>>()
    );
}
