//! The store's error: the database is unreachable (503, retry) or something else went wrong
//! (a bug: 500, logged, never sent to a client).

use thiserror::Error;

#[derive(Debug, Error)]
pub enum StoreError {
    /// The database cannot be reached or is shutting down; nothing was half-written.
    #[error("database unavailable: {0}")]
    Unavailable(String),
    /// Any other database error.
    #[error("database error: {0}")]
    Db(#[source] tokio_postgres::Error),
}

impl From<tokio_postgres::Error> for StoreError {
    fn from(e: tokio_postgres::Error) -> Self {
        if is_unavailable(&e) {
            StoreError::Unavailable(e.to_string())
        } else {
            StoreError::Db(e)
        }
    }
}

impl From<deadpool_postgres::PoolError> for StoreError {
    fn from(e: deadpool_postgres::PoolError) -> Self {
        match e {
            deadpool_postgres::PoolError::Backend(e) => e.into(),
            other => StoreError::Unavailable(other.to_string()),
        }
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
