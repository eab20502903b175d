//! The store's error: the database is unreachable (503, retry) or something else went wrong
//! (a bug: 500, logged, never sent to a client).
//!
//! Invariant: a `StoreError` carries no request data. A PostgreSQL error's message, detail and
//! context can quote the values a statement was given (a job's payload, a token's hash), so
//! only its SQLSTATE and the name of the statement that failed are kept; whatever logs a
//! `StoreError`, by `Display` or `Debug`, logs nothing a client sent.

use std::sync::atomic::{AtomicU64, Ordering};

use thiserror::Error;

use super::sql;

/// How many statements of this process failed because a migration changed what their
/// prepared form reads ([`stale_plan`]). A store that sees it move clears every statement
/// cache of its pool on its next checkout, so each connection prepares its statements anew.
static STALE_PLANS: AtomicU64 = AtomicU64::new(0);

/// [`STALE_PLANS`] now.
pub(super) fn stale_plans() -> u64 {
    STALE_PLANS.load(Ordering::Relaxed)
}

/// PostgreSQL refuses to run a prepared statement whose result columns changed since it was
/// prepared (SQLSTATE 0A000 from `RevalidateCachedQuery`), before it runs anything: during a
/// rolling upgrade, the replicas not yet upgraded meet it on their pooled connections once
/// the first upgraded one has migrated. Preparing the statement again is the cure.
fn stale_plan(e: &tokio_postgres::Error) -> bool {
    e.as_db_error().is_some_and(|d| {
        d.code().code() == "0A000"
            && (d.routine() == Some("RevalidateCachedQuery")
                || d.message()
                    .contains("cached plan must not change result type"))
    })
}

#[derive(Debug, Error)]
pub enum StoreError {
    /// The database cannot be reached or is shutting down; nothing was half-written.
    #[error("database unavailable: {0}")]
    Unavailable(String),
    /// An operation did not finish within its deadline (a COMMIT waiting for a synchronous
    /// standby that is gone, a lock held too long): it was cancelled, and a write it made may
    /// have committed.
    #[error("database deadline passed: {0}")]
    TimedOut(String),
    /// The database returned something the schema rules out (a bug).
    #[error("invalid row: {0}")]
    Invalid(String),
    /// Any other database error.
    #[error("database error: SQLSTATE {sqlstate} in {statement}")]
    Db {
        /// The five-character SQLSTATE, or `-----` for a client-side error without one.
        sqlstate: String,
        /// The file under `sql/` that failed; `transaction` for BEGIN / COMMIT and for a
        /// statement inside a transaction not tagged with [`At::at`].
        statement: &'static str,
    },
}

impl StoreError {
    /// Whether the database could not be reached or did not answer in time (503) rather than
    /// failed (500).
    pub fn is_unavailable(&self) -> bool {
        matches!(self, StoreError::Unavailable(_) | StoreError::TimedOut(_)) || self.is_conflict()
    }

    /// Whether PostgreSQL rolled the transaction back to break a deadlock or a serialization
    /// conflict (40P01, 40001): nothing was written, and the same transaction may simply run
    /// again ([`super::Store::retrying_conflicts`]). One that still fails after its retries is a
    /// 503, never a 500: the caller may retry too.
    pub fn is_conflict(&self) -> bool {
        matches!(self, StoreError::Db { sqlstate, .. } if sqlstate == "40P01" || sqlstate == "40001")
    }

    /// The same error for another caller of a shared statement (a coalesced batch), when it
    /// is one every caller shares: unreachable or timed out. `None` for the others, which
    /// belong to one input.
    pub fn shared(&self) -> Option<StoreError> {
        match self {
            StoreError::Unavailable(m) => Some(StoreError::Unavailable(m.clone())),
            StoreError::TimedOut(m) => Some(StoreError::TimedOut(m.clone())),
            _ => None,
        }
    }

    /// The error of running the statement `sql` (one of [`sql::ALL`]): keeps its SQLSTATE and
    /// file name, drops the message.
    pub fn pg(sql: &str, e: tokio_postgres::Error) -> Self {
        Self::named(sql::name(sql), e)
    }

    fn named(statement: &'static str, e: tokio_postgres::Error) -> Self {
        crate::telemetry::metrics::db_error(e.code().map(|c| c.code()));
        let sqlstate = e.code().map(|c| c.code().to_owned());
        if stale_plan(&e) {
            // Nothing ran; the caller retries (503) on connections whose statements are
            // prepared anew.
            STALE_PLANS.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(
                statement,
                "a prepared statement went stale (the schema changed under this replica: a \
                 newer one migrated?); preparing every statement again"
            );
            StoreError::Unavailable(format!("schema changed under a prepared {statement}"))
        } else if is_unavailable(&e) {
            // A server-side refusal is named by its SQLSTATE; a connection-level failure's
            // text (refused, reset, closed) holds no request data.
            let why = match &sqlstate {
                Some(code) => format!("SQLSTATE {code}"),
                None => e.to_string(),
            };
            StoreError::Unavailable(format!("{why} ({statement})"))
        } else {
            StoreError::Db {
                sqlstate: sqlstate.unwrap_or_else(|| "-----".to_owned()),
                statement,
            }
        }
    }
}

/// BEGIN, COMMIT and statements run without [`StoreError::pg`].
impl From<tokio_postgres::Error> for StoreError {
    fn from(e: tokio_postgres::Error) -> Self {
        Self::named("transaction", e)
    }
}

impl From<deadpool_postgres::PoolError> for StoreError {
    fn from(e: deadpool_postgres::PoolError) -> Self {
        match e {
            deadpool_postgres::PoolError::Backend(e) => Self::named("connect", e),
            other => StoreError::Unavailable(other.to_string()),
        }
    }
}

/// Tags a failed statement of a transaction with its name: `tx.query(..).await.at(sql::X)?`.
pub trait At<T> {
    /// # Errors
    /// The statement failed; the error names it.
    fn at(self, sql: &str) -> Result<T, StoreError>;
}

impl<T> At<T> for Result<T, tokio_postgres::Error> {
    fn at(self, sql: &str) -> Result<T, StoreError> {
        self.map_err(|e| StoreError::pg(sql, e))
    }
}

/// Connection lost, refused, the server is shutting down / starting / out of connections, or a
/// write reached a read-only server (25006: a standby, mid-failover).
fn is_unavailable(e: &tokio_postgres::Error) -> bool {
    if e.is_closed() {
        return true;
    }
    match e.code() {
        Some(code) => {
            let c = code.code();
            c.starts_with("08")
                || c.starts_with("57P")
                || c == "53300"
                || c == "53400"
                || c == "25006"
        }
        // No SQLSTATE: an I/O or protocol-level failure of the connection.
        None => e.as_db_error().is_none(),
    }
}
