//! A private primary and its streaming standby, for the drill and the failover test: built
//! from the installed binaries (`pg_basebackup -R`), replicated synchronously, reached through
//! one two-host URL with `target_session_attrs=read-write` that stays valid across failovers
//! (the two ports never change: a rebuilt standby takes the old primary's port).
//!
//! Invariant: while a standby is attached and synchronous, every commit acknowledged by the
//! primary is on the standby; right after a promotion the new primary has no standby, so its
//! `synchronous_standby_names` is cleared (writes would otherwise block) until one is rebuilt.

use std::path::PathBuf;

use anyhow::Context;
use uuid::Uuid;

use crate::tooling::private_pg::PrivatePg;

/// The name every standby reports (`application_name` in its `primary_conninfo`).
pub const STANDBY_NAME: &str = "leasehold_standby";

pub struct Cluster {
    pub primary: PrivatePg,
    pub standby: Option<PrivatePg>,
    /// The two ports the URL lists, in order.
    ports: [u16; 2],
    /// Servers made so far (names their directories).
    generation: u32,
    /// Declared last: fields drop in order, so the servers (and their directories) are gone
    /// when this removes the directory that held them.
    root: RootDir,
}

/// The cluster's directory, removed on drop.
struct RootDir(PathBuf);

impl Drop for RootDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl Cluster {
    /// A primary (`durable`: fsync on) and a synchronous standby, under a fresh temporary
    /// directory. Blocks the thread (call from `spawn_blocking` or `block_in_place`).
    ///
    /// # Errors
    /// PostgreSQL or `pg_basebackup` is missing or failed.
    pub fn start(durable: bool) -> anyhow::Result<Self> {
        crate::tooling::private_pg::find_tool("pg_basebackup")
            .context("pg_basebackup (PostgreSQL client tools) not found")?;
        // Short paths: the server's Unix socket lives in its data directory (107 bytes at most).
        let root =
            std::env::temp_dir().join(format!("lh-{}", &Uuid::new_v4().simple().to_string()[..12]));
        std::fs::create_dir_all(&root)?;
        // Replication is synchronous: the primary waits for the standby's flush on commit.
        let primary = PrivatePg::start_with(
            &root.join("n0"),
            durable,
            true,
            &[
                "synchronous_commit=on",
                "wal_keep_size=256MB",
                // After a primary restart, synchronous commits wait until the standby
                // reconnects; it retries every wal_retrieve_retry_interval (default 5 s).
                "wal_retrieve_retry_interval=500ms",
            ],
        )?;
        let mut cluster = Self {
            ports: [primary.port, 0],
            primary,
            standby: None,
            generation: 0,
            root: RootDir(root),
        };
        let standby = cluster.new_standby(None)?;
        cluster.ports[1] = standby.port;
        cluster.standby = Some(standby);
        Ok(cluster)
    }

    fn new_standby(&mut self, port: Option<u16>) -> anyhow::Result<PrivatePg> {
        self.generation += 1;
        PrivatePg::standby_of(
            &self.primary,
            &self.root.0.join(format!("n{}", self.generation)),
            STANDBY_NAME,
            port,
            true,
        )
    }

    /// `postgresql://postgres:PW@127.0.0.1:P1,127.0.0.1:P2/<db>?target_session_attrs=read-write`
    /// (every node shares the first primary's password: standbys are copies of it).
    pub fn url(&self, db: &str) -> String {
        format!(
            "postgresql://postgres:{}@127.0.0.1:{},127.0.0.1:{}/{db}?target_session_attrs=read-write",
            self.primary.password(),
            self.ports[0],
            self.ports[1]
        )
    }

    /// Make the attached standby synchronous and wait until the primary reports it so.
    ///
    /// # Errors
    /// The primary is unreachable or the standby did not become synchronous within 30 s.
    pub async fn make_synchronous(&self) -> anyhow::Result<()> {
        let admin = connect(&self.primary.url("postgres")).await?;
        // Two statements: ALTER SYSTEM cannot run inside a (multi-statement) transaction.
        admin
            .batch_execute(&format!(
                "ALTER SYSTEM SET synchronous_standby_names = '{STANDBY_NAME}'"
            ))
            .await?;
        admin.batch_execute("SELECT pg_reload_conf()").await?;
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let sync = admin
                .query_opt(
                    "SELECT 1 FROM pg_stat_replication WHERE application_name = $1 AND sync_state = 'sync'",
                    &[&STANDBY_NAME],
                )
                .await?;
            if sync.is_some() {
                return Ok(());
            }
            anyhow::ensure!(
                tokio::time::Instant::now() < deadline,
                "the standby did not become synchronous within 30 s"
            );
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }

    /// Crash the primary: `pg_ctl stop -m immediate`.
    ///
    /// # Errors
    /// `pg_ctl` failed.
    pub fn crash_primary(&mut self) -> anyhow::Result<()> {
        self.primary.stop_immediate()
    }

    /// Promote the standby (`pg_ctl promote`), clear `synchronous_standby_names` on it (it has
    /// no standby of its own yet: writes must not wait for one), and make it the primary. The
    /// old primary's data directory is discarded.
    ///
    /// # Errors
    /// There is no standby, or promotion failed.
    pub async fn promote_standby(&mut self) -> anyhow::Result<()> {
        let standby = self.standby.take().context("no standby to promote")?;
        let standby = tokio::task::block_in_place(|| standby.promote().map(|()| standby))?;
        let admin = connect(&standby.url("postgres")).await?;
        admin
            .batch_execute("ALTER SYSTEM RESET synchronous_standby_names")
            .await?;
        admin.batch_execute("SELECT pg_reload_conf()").await?;
        let old = std::mem::replace(&mut self.primary, standby);
        tokio::task::block_in_place(|| drop(old));
        Ok(())
    }

    /// A new synchronous standby of the current primary, on the port the URL lists for it.
    ///
    /// # Errors
    /// The base backup failed.
    pub async fn rebuild_standby(&mut self) -> anyhow::Result<()> {
        let port = if self.primary.port == self.ports[0] {
            self.ports[1]
        } else {
            self.ports[0]
        };
        if let Some(old) = self.standby.take() {
            tokio::task::block_in_place(|| drop(old));
        }
        let standby = tokio::task::block_in_place(|| self.new_standby(Some(port)))?;
        self.standby = Some(standby);
        self.make_synchronous().await
    }

    /// Restart the primary (fast shutdown, start again on the same port).
    ///
    /// # Errors
    /// It did not come back.
    pub fn restart_primary(&mut self) -> anyhow::Result<()> {
        self.primary.stop();
        self.primary.start_server()
    }
}

async fn connect(url: &str) -> anyhow::Result<tokio_postgres::Client> {
    let (client, conn) = crate::store::listener::connect_as(url, "leasehold-drill").await?;
    tokio::spawn(conn);
    Ok(client)
}
