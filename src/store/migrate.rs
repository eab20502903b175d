//! Schema migrations over tokio-postgres, so they accept every URL the pool accepts (several
//! hosts with `target_session_attrs=read-write` included).
//!
//! Every `migrations/NNNN_*.sql` file is embedded at build time (build.rs) and applied in order
//! of its `NNNN` prefix, each in its own transaction together with its row in
//! `leasehold_migrations` (version, name, SHA-256 of the text). The whole run holds a session
//! advisory lock, so replicas that start together migrate once and the others wait.
//!
//! Invariants: an applied migration is never applied again; a replica refuses to start when
//! the text of a migration it applied before has changed (the schema would not be what the
//! file says). A file whose first line is `-- no-transaction` runs outside a transaction (for
//! `CREATE INDEX CONCURRENTLY`), and is recorded right after it succeeds.
//!
//! The migrator's own bookkeeping statements live here rather than in `sql/`: they run once per
//! start, before the schema they would be prepared against exists.

use std::collections::BTreeMap;

use anyhow::{bail, Context};
use sha2::{Digest, Sha256};

/// `pg_advisory_lock` key of the migrator ("leasehold" → a fixed 63-bit number).
const LOCK_KEY: i64 = 0x6c65_6173_6568_6f6c;

/// `(file name, text)` of every migration, sorted by name.
const FILES: &[(&str, &str)] = include!(concat!(env!("OUT_DIR"), "/migrations.rs"));

/// One migration file.
#[derive(Debug, Clone)]
pub struct Migration {
    pub version: i64,
    pub name: &'static str,
    pub sql: &'static str,
}

impl Migration {
    /// SHA-256 of the file's text.
    pub fn checksum(&self) -> Vec<u8> {
        Sha256::digest(self.sql.as_bytes()).to_vec()
    }

    fn transactional(&self) -> bool {
        self.sql.lines().next().map(str::trim) != Some("-- no-transaction")
    }
}

/// Every embedded migration, in version order.
///
/// # Errors
/// A file is not named `NNNN_name.sql`, or two files share a version.
pub fn migrations() -> anyhow::Result<Vec<Migration>> {
    let mut out: Vec<Migration> = Vec::with_capacity(FILES.len());
    for (name, sql) in FILES {
        let version = name
            .split_once('_')
            .and_then(|(n, _)| n.parse::<i64>().ok())
            .with_context(|| format!("migration {name} is not named NNNN_name.sql"))?;
        if let Some(prev) = out.iter().find(|m| m.version == version) {
            bail!(
                "migrations {} and {name} share version {version}",
                prev.name
            );
        }
        out.push(Migration { version, name, sql });
    }
    out.sort_by_key(|m| m.version);
    Ok(out)
}

/// Apply every pending migration.
///
/// # Errors
/// The database cannot be reached, an applied migration's text changed, or a migration failed
/// (and was rolled back).
pub async fn run(database_url: &str) -> anyhow::Result<()> {
    let wanted = migrations()?;
    let (mut client, connection) =
        super::listener::connect_as(database_url, "leasehold-migrate").await?;
    let driver = tokio::spawn(connection);
    client
        .execute("SELECT pg_advisory_lock($1)", &[&LOCK_KEY])
        .await?;
    let result = apply(&mut client, &wanted).await;
    // Dropping the connection releases the lock too; unlock first to hand it over at once.
    let _ = client
        .execute("SELECT pg_advisory_unlock($1)", &[&LOCK_KEY])
        .await;
    drop(client);
    let _ = driver.await;
    result
}

async fn apply(client: &mut tokio_postgres::Client, wanted: &[Migration]) -> anyhow::Result<()> {
    client
        .batch_execute(
            "CREATE TABLE IF NOT EXISTS leasehold_migrations (
                 version    bigint      PRIMARY KEY,
                 name       text        NOT NULL,
                 checksum   bytea       NOT NULL,
                 applied_at timestamptz NOT NULL DEFAULT now()
             )",
        )
        .await?;
    adopt_sqlx_history(client, wanted).await?;
    let applied: BTreeMap<i64, (String, Vec<u8>)> = client
        .query(
            "SELECT version, name, checksum FROM leasehold_migrations",
            &[],
        )
        .await?
        .into_iter()
        .map(|r| (r.get(0), (r.get(1), r.get(2))))
        .collect();
    for (version, (name, _)) in &applied {
        if !wanted.iter().any(|m| m.version == *version) {
            // A newer binary migrated this database; migrations only add, so carry on.
            tracing::warn!(
                version,
                name,
                "database has a migration this binary does not know"
            );
        }
    }
    for m in wanted {
        if let Some((_, checksum)) = applied.get(&m.version) {
            if *checksum != m.checksum() {
                bail!(
                    "migration {} was changed after it was applied; restore the file as it was \
                     and add a new migration instead",
                    m.name
                );
            }
            continue;
        }
        tracing::info!(migration = m.name, "applying migration");
        let record =
            "INSERT INTO leasehold_migrations (version, name, checksum) VALUES ($1, $2, $3)";
        if m.transactional() {
            let tx = client.transaction().await?;
            tx.batch_execute(m.sql)
                .await
                .with_context(|| format!("migration {}", m.name))?;
            tx.execute(record, &[&m.version, &m.name, &m.checksum()])
                .await?;
            tx.commit().await?;
        } else {
            client
                .batch_execute(m.sql)
                .await
                .with_context(|| format!("migration {}", m.name))?;
            client
                .execute(record, &[&m.version, &m.name, &m.checksum()])
                .await?;
        }
    }
    Ok(())
}

/// A database migrated by an older leasehold (sqlx's migrator, `_sqlx_migrations`) keeps its
/// history: its successful versions are recorded here once, with this binary's checksums.
async fn adopt_sqlx_history(
    client: &tokio_postgres::Client,
    wanted: &[Migration],
) -> anyhow::Result<()> {
    let row = client
        .query_one(
            "SELECT to_regclass('_sqlx_migrations') IS NOT NULL
                    AND NOT EXISTS (SELECT 1 FROM leasehold_migrations)",
            &[],
        )
        .await?;
    if !row.get::<_, bool>(0) {
        return Ok(());
    }
    let done: Vec<i64> = client
        .query("SELECT version FROM _sqlx_migrations WHERE success", &[])
        .await?
        .into_iter()
        .map(|r| r.get(0))
        .collect();
    for m in wanted.iter().filter(|m| done.contains(&m.version)) {
        client
            .execute(
                "INSERT INTO leasehold_migrations (version, name, checksum) VALUES ($1, $2, $3)",
                &[&m.version, &m.name, &m.checksum()],
            )
            .await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_file_is_embedded_in_version_order() {
        let all = migrations().unwrap();
        assert!(!all.is_empty());
        assert_eq!(all[0].name, "0001_schema.sql");
        assert!(all.windows(2).all(|w| w[0].version < w[1].version));
        let on_disk = std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/migrations"))
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .file_name()
                    .to_string_lossy()
                    .ends_with(".sql")
            })
            .count();
        assert_eq!(all.len(), on_disk);
    }

    /// SHA-256 of every migration that has landed on main. A landed migration is immutable: a
    /// database migrated with it refuses to start once its text changes, so a schema change is
    /// a new file (and a new line here), never an edit.
    const LANDED: &[(&str, &str)] = &[
        (
            "0001_schema.sql",
            "2499341ddfc9a2109c89dc6a594e51e4c2362c1e9e5723ba5022f5626ffe685f",
        ),
        (
            "0002_hot_path.sql",
            "18b8d8a08daf9a8f094046c188f7be2bf2fe45c9be366d5f8ef5dafe97340855",
        ),
        (
            "0004_secrets.sql",
            "61f92092b1d76a07d6590afe25d9665f4bf061816959c3ce9ef9bfbfef293895",
        ),
        (
            "0005_placement.sql",
            "fe0ce539bb3021f8c50d9097ec587bd0904c6cfd65658cba9d261eef5a644588",
        ),
        (
            "0009_traceparent.sql",
            "51de8183c0640449590bf5353397ced5039f577cbdcf2167f4e33f530d6e6f73",
        ),
        (
            "0010_repo_target_cap.sql",
            "c63cf1cb006d68912f53c72aef3c767fbae067ff2155bb959147a5f278f2a070",
        ),
        (
            "0011_secret_scope.sql",
            "b6ddc71bd896890501428df3e6c7922eb8160a9663260100fef7338666e7115e",
        ),
        (
            "0012_claim_class.sql",
            "1bb2d0770c7d5fe3185ac7b26cbecd93be81eccbc91e85dc2151fbf388768c58",
        ),
        (
            "0013_claim_bound.sql",
            "e616640d1437845fd0be292f5a8ad0b73c82b5e5e4db5aa4f1e34a7bcef3609d",
        ),
        (
            "0014_row_check.sql",
            "5571509b7f5ff4422be44396dd0ac98f297de42eb7f5a8fd2a87dfd8237fc9d9",
        ),
    ];

    #[test]
    fn landed_migrations_are_never_edited() {
        let all = migrations().unwrap();
        for (name, want) in LANDED {
            let m = all
                .iter()
                .find(|m| m.name == *name)
                .unwrap_or_else(|| panic!("landed migration {name} was removed"));
            let got: String = m.checksum().iter().map(|b| format!("{b:02x}")).collect();
            assert_eq!(
                &got, want,
                "{name} landed and must not change: put the change in a new migration file"
            );
        }
        let newest = LANDED.last().unwrap().0;
        for m in all.iter().filter(|m| m.name > newest) {
            eprintln!(
                "{} is new: add its checksum to LANDED once it lands",
                m.name
            );
        }
    }
}
