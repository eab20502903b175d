//! Schema migrations, compiled into the binary and applied by sqlx's migrator under its
//! advisory lock, so replicas that start together migrate once.

use std::borrow::Cow;

use sqlx::migrate::{Migration, MigrationType, Migrator};
use sqlx::Connection;

macro_rules! migrations {
    ($($version:literal => $file:literal,)*) => {
        fn migrations() -> Vec<Migration> {
            vec![$(Migration::new(
                $version,
                Cow::Borrowed($file),
                MigrationType::Simple,
                Cow::Borrowed(include_str!(concat!("../../migrations/", $file))),
                false,
            ),)*]
        }
    };
}

migrations! {
    1 => "0001_schema.sql",
    2 => "0002_hot_path.sql",
    9 => "0009_traceparent.sql",
    4 => "0004_secrets.sql",
    5 => "0005_placement.sql",
}

/// Apply every pending migration.
///
/// # Errors
/// The database cannot be reached, or a migration failed (and was rolled back).
pub async fn run(database_url: &str) -> anyhow::Result<()> {
    let mut conn = sqlx::PgConnection::connect(database_url).await?;
    let migrator = Migrator {
        migrations: Cow::Owned(migrations()),
        ..Migrator::DEFAULT
    };
    migrator.run_direct(&mut conn).await?;
    conn.close().await?;
    Ok(())
}
