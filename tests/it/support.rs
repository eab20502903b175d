//! Test support: one private PostgreSQL per test binary (or `DATABASE_URL`), a fresh database
//! per test cloned from a migrated template, and replicas on port 0, in-process or as real
//! `leasehold serve` processes.

use std::sync::OnceLock;
use std::time::Duration;

use leasehold::client::Client;
use leasehold::config::Config;
use leasehold::replica::{self, Replica};
use leasehold::store::Store;
use leasehold::tooling::private_pg::PrivatePg;
pub use leasehold::tooling::serve_process::ServeProcess;
use leasehold::wire;
use tokio::net::TcpListener;
use uuid::Uuid;

const TEMPLATE: &str = "leasehold_template";

struct Shared {
    /// Keeps the private server alive for the binary's lifetime (the watchdog stops it after).
    _pg: Option<PrivatePg>,
    /// URL of the maintenance database, with `{db}` to fill in.
    base: String,
}

fn shared() -> &'static Shared {
    static SHARED: OnceLock<Shared> = OnceLock::new();
    SHARED.get_or_init(|| {
        std::thread::spawn(|| {
            let (pg, base) = match std::env::var("DATABASE_URL") {
                Ok(url) => {
                    let (head, _) = url.rsplit_once('/').expect("DATABASE_URL names a database");
                    (None, format!("{head}/{{db}}"))
                }
                Err(_) => {
                    let dir =
                        std::env::temp_dir().join(format!("leasehold-test-{}", Uuid::now_v7()));
                    let pg = PrivatePg::start(&dir, false, true).expect("private PostgreSQL");
                    let base = pg.url("{db}");
                    (Some(pg), base)
                }
            };
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                let admin = connect(&base.replace("{db}", "postgres")).await;
                for statement in [
                    format!("DROP DATABASE IF EXISTS {TEMPLATE}"),
                    format!("CREATE DATABASE {TEMPLATE}"),
                ] {
                    admin
                        .batch_execute(&statement)
                        .await
                        .expect("template database");
                }
                leasehold::store::migrate::run(&base.replace("{db}", TEMPLATE))
                    .await
                    .expect("migrate template");
            });
            Shared { _pg: pg, base }
        })
        .join()
        .expect("test database set-up")
    })
}

pub async fn connect(url: &str) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("connect");
    tokio::spawn(conn);
    client
}

/// An analytics query's snapshot, held until the returned transaction ends: a `REPEATABLE READ`
/// transaction on `client` that has run `read` (its snapshot is taken by its first statement).
pub async fn hold_snapshot<'a>(
    client: &'a mut tokio_postgres::Client,
    read: &str,
) -> tokio_postgres::Transaction<'a> {
    let snapshot = client
        .build_transaction()
        .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
        .start()
        .await
        .unwrap();
    snapshot.query_one(read, &[]).await.unwrap();
    snapshot
}

/// A private PostgreSQL of a test's own (in a temporary directory named after `what`), whose
/// settings and faults touch no other test; `durable` as [`PrivatePg::start`] takes it.
pub async fn private_pg(what: &str, durable: bool) -> PrivatePg {
    let dir = std::env::temp_dir().join(format!("leasehold-{what}-{}", Uuid::now_v7()));
    tokio::task::spawn_blocking(move || {
        PrivatePg::start(&dir, durable, true).expect("private PostgreSQL")
    })
    .await
    .unwrap()
}

/// Set `synchronous_standby_names` server-wide and wait until a new session sees it.
pub async fn sync_standbys(url: &str, names: &str) {
    let admin = connect(url).await;
    if names.is_empty() {
        admin
            .batch_execute("ALTER SYSTEM RESET synchronous_standby_names")
            .await
            .unwrap();
    } else {
        admin
            .batch_execute(&format!(
                "ALTER SYSTEM SET synchronous_standby_names = '{names}'"
            ))
            .await
            .unwrap();
    }
    admin
        .batch_execute("SELECT pg_reload_conf()")
        .await
        .unwrap();
    eventually(Duration::from_secs(10), "the reloaded setting", || async {
        let fresh = connect(url).await;
        let row = fresh
            .query_one("SHOW synchronous_standby_names", &[])
            .await
            .ok()?;
        (row.get::<_, String>(0) == names).then_some(())
    })
    .await;
}

/// Backends waiting for a synchronous standby now.
pub async fn waiting_for_standby(url: &str) -> i64 {
    connect(url)
        .await
        .query_one(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'",
            &[],
        )
        .await
        .unwrap()
        .get(0)
}

/// A fresh, migrated database of the shared server.
pub async fn fresh_database() -> String {
    let shared = shared();
    let name = format!("t_{}", Uuid::now_v7().simple());
    let admin = connect(&shared.base.replace("{db}", "postgres")).await;
    // Concurrent clones of one template can collide; retry briefly.
    for attempt in 0.. {
        match admin
            .batch_execute(&format!("CREATE DATABASE {name} TEMPLATE {TEMPLATE}"))
            .await
        {
            Ok(()) => break,
            Err(e) if attempt < 50 => {
                let _ = e;
                tokio::time::sleep(Duration::from_millis(20 + attempt * 5)).await;
            }
            Err(e) => panic!("create database: {e}"),
        }
    }
    shared.base.replace("{db}", &name)
}

/// Timings short enough for tests; each test overrides what it exercises.
pub fn test_config(database_url: &str) -> Config {
    let mut c = Config::new(database_url);
    c.listen = "127.0.0.1:0".parse().unwrap();
    c.sweep_interval_ms = 100;
    c.recheck_interval_ms = 500;
    c.pool_size = 8;
    c.auth_burst = 10_000;
    c.auth_refill_per_s = 1000.0;
    c
}

/// A test's database and the replicas serving it.
pub struct TestApp {
    pub database_url: String,
    /// The configuration every replica of this app runs with.
    pub config: Config,
    pub replicas: Vec<Replica>,
    pub store: Store,
}

impl TestApp {
    /// One replica with the test defaults.
    pub async fn spawn() -> Self {
        Self::spawn_with(1, |_| {}).await
    }

    /// `n` in-process replicas on one fresh database, with `tweak` applied to the config.
    pub async fn spawn_with(n: usize, tweak: impl FnOnce(&mut Config)) -> Self {
        let database_url = fresh_database().await;
        let mut config = test_config(&database_url);
        tweak(&mut config);
        let mut replicas = Vec::new();
        for _ in 0..n {
            replicas.push(start_replica(config.clone()).await);
        }
        let store = Store::connect(
            &format!("{database_url}?application_name=leasehold-test"),
            2,
            config.presence_window_ms,
        )
        .unwrap();
        Self {
            database_url,
            config,
            replicas,
            store,
        }
    }

    pub fn url(&self, replica: usize) -> String {
        format!("http://{}", self.replicas[replica].addr)
    }

    /// An API key minted straight in the store (as `leasehold admin create-key` does).
    pub async fn key(&self, workspace: &str, subject: &str, admin: bool) -> String {
        leasehold::commands::admin::mint_key(&self.store, workspace, subject, admin)
            .await
            .expect("mint a key")
    }

    /// A client on replica 0 with a fresh key.
    pub async fn operator(&self, workspace: &str, subject: &str, admin: bool) -> Client {
        Client::new(self.url(0), Some(self.key(workspace, subject, admin).await))
    }
}

pub async fn start_replica(config: Config) -> Replica {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    replica::start(config, listener)
        .await
        .expect("replica starts")
}

/// Pair a runner through `operator` and return it with a client holding its token.
pub async fn pair(
    operator: &Client,
    tier: wire::Tier,
    capabilities: &[&str],
    capacity: i64,
) -> (wire::Runner, Client) {
    let described = wire::CreateRunner {
        label: "test-runner".into(),
        os: Some("linux".into()),
        capabilities: Some(capabilities.iter().map(|s| s.to_string()).collect()),
        capacity: Some(capacity),
        ..Default::default()
    };
    pair_as(operator, tier, &described).await
}

/// [`pair`] a runner `described` so.
pub async fn pair_as(
    operator: &Client,
    tier: wire::Tier,
    described: &wire::CreateRunner,
) -> (wire::Runner, Client) {
    let created = operator
        .pair_runner(tier, described)
        .await
        .expect("pair runner");
    let client = operator.with_token(created.token);
    (created.runner, client)
}

/// An enrolment request with `code`, for one `linux` slot.
pub fn enrol_req(code: &str, label: &str) -> wire::Enroll {
    wire::Enroll {
        code: code.into(),
        label: label.into(),
        os: Some("linux".into()),
        version: Some("0.1.0".into()),
        capabilities: Some(vec!["linux".into()]),
        capacity: Some(1),
        ..Default::default()
    }
}

/// A join code of `tier` valid for ten minutes, minted by `operator`.
pub async fn join_code(operator: &Client, tier: wire::Tier, ephemeral: bool) -> String {
    operator
        .create_join_code(&wire::CreateJoinCode {
            tier,
            ttl_s: Some(600),
            ephemeral: Some(ephemeral),
        })
        .await
        .unwrap()
        .code
}

/// Dispatch `payload` to `target` with defaults.
pub async fn dispatch(
    operator: &Client,
    target: wire::Target,
    payload: serde_json::Value,
) -> wire::Job {
    operator
        .dispatch(&wire::Dispatch::new(target, payload))
        .await
        .expect("dispatch")
}

pub fn personal() -> wire::Target {
    wire::Target::Pool {
        pool: wire::PoolName::Personal,
    }
}

/// The target of a job named for runner `runner_id`.
pub fn to_runner(runner_id: Uuid) -> wire::Target {
    wire::Target::Runner { runner_id }
}

pub fn workspace_pool() -> wire::Target {
    wire::Target::Pool {
        pool: wire::PoolName::Workspace,
    }
}

/// Lease with a wait, `max_jobs` at most.
pub async fn lease(runner: &Client, wait_ms: i64, max_jobs: i64) -> Vec<wire::LeasedJob> {
    runner
        .lease(&wire::Lease::waiting(wait_ms, max_jobs))
        .await
        .expect("lease")
}

/// Poll `check` until it returns `Some`, failing after `deadline`.
pub async fn eventually<T, F, Fut>(deadline: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let end = tokio::time::Instant::now() + deadline;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < end,
            "timed out waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The error code of a failed client call.
pub fn code<T: std::fmt::Debug>(r: Result<T, leasehold::client::ClientError>) -> String {
    match r {
        Ok(v) => panic!("expected an error, got {v:?}"),
        Err(e) => e.code().unwrap_or("transport").to_owned(),
    }
}

/// The one way to mint an API key outside a [`TestApp`] (whose [`TestApp::key`] uses its
/// store): as `leasehold admin create-key` does, against `database_url`.
pub async fn key_in(database_url: &str, workspace: &str, subject: &str, admin: bool) -> String {
    leasehold::commands::admin::create_key(database_url, workspace, subject, admin)
        .await
        .expect("mint a key")
}

/// A real `leasehold serve` process (see [`ServeProcess`]) with the test's sweep interval,
/// its stderr on the test's, for tests that kill or signal a replica.
pub async fn serve_process(database_url: &str, env: &[(&str, &str)]) -> ServeProcess {
    let env = [("LEASEHOLD_SWEEP_INTERVAL_MS", "100")]
        .into_iter()
        .chain(env.iter().copied());
    ServeProcess::start(
        env!("CARGO_BIN_EXE_leasehold"),
        database_url,
        env,
        std::process::Stdio::inherit(),
    )
    .await
    .expect("leasehold serve listens")
}

/// Wait until `url` answers `/readyz` with `want`.
pub async fn readiness(url: &str, want: u16, within: Duration) {
    let http = reqwest::Client::new();
    eventually(within, &format!("{url}/readyz == {want}"), || async {
        let got = http
            .get(format!("{url}/readyz"))
            .timeout(Duration::from_secs(3))
            .send()
            .await
            .map(|r| r.status().as_u16())
            .unwrap_or(0);
        (got == want).then_some(())
    })
    .await;
}

/// `pg_dump --data-only` of `database_url`: every row, as text, to search for what must not be
/// stored in plain text.
pub fn data_dump(database_url: &str) -> String {
    let pg_dump = leasehold::tooling::private_pg::find_tool("pg_dump")
        .expect("pg_dump installed with the server binaries");
    let out = std::process::Command::new(pg_dump)
        .arg("--data-only")
        .arg(database_url)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Connections of the replicas' pools to `database_url`'s database, from `pg_stat_activity`.
pub async fn pool_connections(database_url: &str) -> i64 {
    let client = connect(database_url).await;
    client
        .query_one(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'leasehold-pool'",
            &[],
        )
        .await
        .unwrap()
        .get(0)
}

/// Waiters parked on the replica at `url`, from its `/metrics`.
pub async fn waiters(url: &str) -> Option<u64> {
    gauge(url, "leasehold_waiters").await
}

/// The value of the unlabelled gauge `name` on the replica at `url`, from its `/metrics`.
pub async fn gauge(url: &str, name: &str) -> Option<u64> {
    let m = reqwest::get(format!("{url}/metrics"))
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    m.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

/// Wait until exactly `n` waiters are parked on the replica at `url`.
pub async fn until_waiters(url: &str, n: u64, within: Duration) {
    eventually(within, &format!("{n} waiters parked on {url}"), || async {
        (waiters(url).await? == n).then_some(())
    })
    .await;
}

/// Whether a test that needs something outside the crate (a tool, root) can go on: `missing`
/// is `None` when it is here, else why not. Under CI (`CI=true`), where `.ci/run` installs
/// every tool the suite uses, a missing one fails the test; elsewhere the test says why,
/// records the skip in [`SKIPS_LOG`] and returns. libtest can only call such a test `ok`, so
/// the `skips` test target, which cargo runs after this one, counts the skips this `cargo test`
/// recorded and prints them at the end of the run: nothing is ever skipped silently.
#[must_use]
pub fn require(test: &str, missing: Option<String>) -> bool {
    let Some(why) = missing else {
        return true;
    };
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "{test} cannot run under CI: {why}"
    );
    eprintln!("SKIPPED {test}: {why}");
    record_skip(test, &why);
    false
}

/// Where skips are recorded: one line each, `<pid of cargo>\t<test>\t<why>`, so the `skips`
/// target reports only those of the `cargo test` that runs it (tests/skips.rs).
pub const SKIPS_LOG: &str = concat!(env!("CARGO_TARGET_TMPDIR"), "/skips.log");

fn record_skip(what: &str, why: &str) {
    use std::io::Write;
    let thread = std::thread::current();
    let test = thread.name().unwrap_or(what);
    let line = format!(
        "{}\t{test} ({what})\t{}\n",
        std::os::unix::process::parent_id(),
        why.replace(['\t', '\n'], " ")
    );
    let appended = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(SKIPS_LOG)
        .and_then(|mut f| f.write_all(line.as_bytes()));
    if let Err(e) = appended {
        eprintln!("could not record the skip in {SKIPS_LOG}: {e}");
    }
}

/// Run `cmd` and return its output, failing the test (with what the command printed, `what`
/// naming it) unless it succeeded.
pub fn succeeds(cmd: &mut std::process::Command, what: &str) -> std::process::Output {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{what}: {}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The first of `paths` that exists, for a test that runs that program; `None` (counted and
/// said by [`require`], a failure under `CI=true`) when none does, `why` saying how to get it.
pub fn installed(test: &str, paths: &[&'static str], why: &str) -> Option<&'static str> {
    let found = paths
        .iter()
        .copied()
        .find(|p| std::path::Path::new(p).exists());
    if found.is_none() {
        assert!(!require(test, Some(why.to_owned())));
    }
    found
}

/// Debian's HAProxy binary, for the balancer tests; `None` (see [`require`]) when it is missing.
pub fn haproxy(test: &str) -> Option<&'static str> {
    installed(
        test,
        &["/usr/sbin/haproxy", "/usr/local/sbin/haproxy"],
        "haproxy is not installed (apt-get install haproxy; .ci/run does)",
    )
}
