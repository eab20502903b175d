//! The store's error: the database is unreachable (503, retry) or something else went wrong
//! (a bug: 500, logged, never sent to a client).

use thiserror::Error;

#[derive(Debug, Error)]
pub enum StoreError {
    /// The database cannot be reached or is shutting down; nothing was half-written.
    #[error("database unavailable: {0}")]
    Unavailable(String),
    /// The database returned something the schema rules out (a bug).
    #[error("invalid row: {0}")]
    Invalid(String),
    /// Any other database error: logged by SQLSTATE and statement name only, since the
    /// server's message may quote the values a request sent.
    #[error("database error {sqlstate} in {statement}")]
    Db {
        sqlstate: String,
        /// The `sql/` file of the statement, when known.
        statement: &'static str,
        #[source]
        source: tokio_postgres::Error,
    },
}

impl StoreError {
    /// Whether the database could not be reached (503) rather than failed (500).
    pub fn is_unavailable(&self) -> bool {
        matches!(self, StoreError::Unavailable(_))
    }

    /// The error of running the `sql/` statement whose text is `sql`.
    pub fn from_statement(sql: &'static str, e: tokio_postgres::Error) -> Self {
        match Self::from(e) {
            StoreError::Db {
                sqlstate, source, ..
            } => StoreError::Db {
                sqlstate,
                statement: super::sql::name_of(sql),
                source,
            },
            other => other,
        }
    }
}

impl From<tokio_postgres::Error> for StoreError {
    fn from(e: tokio_postgres::Error) -> Self {
        if is_unavailable(&e) {
            StoreError::Unavailable(e.to_string())
        } else {
            StoreError::Db {
                sqlstate: e.code().map_or("-", |c| c.code()).to_owned(),
                statement: "-",
                source: e,
            }
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

/// Connection lost, refused, or the server is shutting down / starting / out of connections.
fn is_unavailable(e: &tokio_postgres::Error) -> bool {
    if e.is_closed() {
        return true;
    }
    match e.code() {
        Some(code) => {
            let c = code.code();
            c.starts_with("08") || c.starts_with("57P") || c == "53300" || c == "53400"
        }
        // No SQLSTATE: an I/O or protocol-level failure of the connection.
        None => e.as_db_error().is_none(),
    }
}
