//! A vacuum of the job table as soon as an old snapshot horizon turns young again.
//!
//! While a snapshot stays open (an analytics query, a stuck session, a lagging standby's
//! feedback), vacuum can remove none of the job versions the queue leaves behind. When it ends,
//! autovacuum comes back to the table only at its launcher's next turn for the database (up to
//! `autovacuum_naptime`, a minute by default), and until then every claim and every report runs
//! through the bloat the snapshot kept (docs/perf.md, History: round 13). So the replica that
//! sees the horizon turn young sends `VACUUM jobs` at once, from a connection of its own.
//!
//! Invariants: at most one replica vacuums at a time (a session advisory lock, released when the
//! vacuum's connection closes), and a replica starts at most one a [`SPACING`], however often
//! a horizon near the threshold turns old and young again; a vacuum never holds a pool
//! connection, and its failure only logs (autovacuum still comes).

use std::time::{Duration, Instant};

/// The least time between two vacuums a replica starts.
pub const SPACING: Duration = Duration::from_secs(60);

use crate::store::{listener, sql};

/// Vacuum `jobs` on a connection of its own, unless another replica is at it.
pub async fn after_old_horizon(database_url: String) {
    let started = Instant::now();
    match vacuum(&database_url).await {
        Ok(true) => tracing::info!(
            ms = started.elapsed().as_millis() as u64,
            "an old snapshot ended: the job table was vacuumed"
        ),
        Ok(false) => {
            tracing::debug!("an old snapshot ended: another replica vacuums the job table")
        }
        Err(e) => {
            tracing::warn!(error = %e, "an old snapshot ended, and the job table could not be vacuumed; autovacuum will")
        }
    }
}

/// Whether this replica vacuumed (false: another one holds the lock).
async fn vacuum(database_url: &str) -> Result<bool, tokio_postgres::Error> {
    let (client, connection) = listener::connect_as(database_url, "leasehold-vacuum").await?;
    let connection = tokio::spawn(connection);
    let locked: bool = client
        .query_one(sql::VACUUM_TRY_LOCK, &[])
        .await?
        .get("locked");
    if locked {
        // The simple protocol: VACUUM runs outside any transaction block.
        client.batch_execute(sql::VACUUM_JOBS).await?;
    }
    // Closing the session releases the lock.
    drop(client);
    let _ = connection.await;
    Ok(locked)
}
