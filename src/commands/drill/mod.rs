//! `leasehold drill`: runs a deployment under faults on a schedule while dispatchers and
//! runners work through the contract, records what every call answered, and proves the
//! invariants with a pure checker ([`check`]) throughout and at the end (docs/drill.md).
//!
//! By default it starts its own deployment: a private primary with a synchronous streaming
//! standby ([`cluster`]), or with `--cluster patroni` etcd, Patroni nodes and HAProxy
//! ([`patroni`]), `--replicas` `leasehold serve` processes of this binary on fixed ports, and
//! `--runners` `leasehold drill-worker` processes ([`worker`]). With `--server` (and
//! `--database-url` or `--api-key`) it drives an existing deployment, and skips and lists the
//! faults it cannot inject there, unless `--fault-command` gives the command that does.
//!
//! Invariant of the command itself: it exits non-zero on any violation, so it can gate a
//! release.

pub mod check;
pub mod cluster;
mod faults;
pub mod history;
pub mod patroni;
mod procs;
mod report;
pub mod worker;

use std::collections::HashMap;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{bail, Context};
use futures_util::StreamExt;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use serde_json::json;
use uuid::Uuid;

use crate::client::Client;
use crate::wire;
use check::Event;
use cluster::Cluster;
use history::Recorder;

pub use faults::FaultKind;
use faults::{inject, run_hook};
use procs::{free_port, start_worker, Db, Own, ReplicaProc, OWN_LEASE_TTL_MS};

/// The database of the drill's own deployment.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum ClusterKind {
    /// A primary and a synchronous standby; the drill fails over with `pg_ctl promote`.
    #[default]
    Embedded,
    /// One etcd, `--patroni-nodes` Patroni nodes (`synchronous_mode: true`) and HAProxy;
    /// replicas alternate between the multi-host URL and HAProxy.
    Patroni,
}

/// The faults injected when `--faults` is not given.
const DEFAULT_FAULTS: &[FaultKind] = &[
    FaultKind::KillReplica,
    FaultKind::TermReplica,
    FaultKind::RestartDb,
    FaultKind::FailoverDb,
    FaultKind::FreezeRunner,
    FaultKind::CutRunner,
];
/// ... and on a Patroni cluster, these too.
const PATRONI_FAULTS: &[FaultKind] = &[
    FaultKind::SwitchoverDb,
    FaultKind::RestartEtcd,
    FaultKind::CutReplication,
];

#[derive(clap::Args, Debug)]
pub struct DrillArgs {
    /// Drive these replicas (base URLs) instead of starting a deployment.
    #[arg(long = "server", num_args = 1..)]
    pub servers: Vec<String>,
    /// The existing deployment's database: used to mint a drill API key when --api-key is
    /// not given. Never read from the environment, so a stray DATABASE_URL cannot aim the
    /// drill at a database by accident.
    #[arg(long)]
    pub database_url: Option<String>,
    /// An admin API key of a workspace set aside for drills (existing deployment).
    #[arg(long, env = "LEASEHOLD_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// Faults to inject, in a shuffled cycle [default: kill-replica, term-replica,
    /// restart-db, failover-db, freeze-runner, cut-runner; with --cluster patroni also
    /// switchover-db, restart-etcd, cut-replication; and every kind given a --fault-command].
    #[arg(long, value_enum, value_delimiter = ',')]
    pub faults: Option<Vec<FaultKind>>,
    /// Inject a fault kind by running a shell command instead, `KIND=COMMAND` (repeatable),
    /// e.g. `failover-db='patronictl -c /etc/patroni/patroni.yml failover --force'`; the fault
    /// is repaired when the command exits (0, else it is a violation). Makes the database
    /// faults possible against an existing deployment. Against the drill's own Patroni
    /// cluster, `$LEASEHOLD_DRILL_PATRONI_CONFIG` is a node's configuration for `patronictl -c`.
    #[arg(long = "fault-command", value_parser = parse_fault_command)]
    pub fault_commands: Vec<(FaultKind, String)>,
    /// The database of the drill's own deployment.
    #[arg(long, value_enum, default_value = "embedded")]
    pub cluster: ClusterKind,
    /// Patroni nodes (--cluster patroni): 2 or 3.
    #[arg(long, default_value_t = 3)]
    pub patroni_nodes: usize,
    /// Pause between one fault's repair and the next fault (e.g. 5s, 500ms, 1m).
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub every: Duration,
    /// How long faults are injected; the drill then lets every job settle and checks.
    #[arg(long, default_value_t = 120)]
    pub seconds: u64,
    /// Seed of the fault schedule (which fault, which target); random if not given.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Replicas of the drill's own deployment.
    #[arg(long, default_value_t = 2)]
    pub replicas: usize,
    /// Runner processes.
    #[arg(long, default_value_t = 3)]
    pub runners: usize,
    /// Dispatches per second.
    #[arg(long, default_value_t = 10.0)]
    pub rate: f64,
    /// The first replica the drill starts fails every Nth dispatcher tick after its commit
    /// (`LEASEHOLD_FAULT_FAIL_TICKS`, issue 51): its waiters must be answered and what it
    /// leased given back. 0: never.
    #[arg(long, default_value_t = 50)]
    pub fail_ticks: u64,
    /// Print the report as JSON on stdout (the table goes to stderr).
    #[arg(long)]
    pub json: bool,
    /// Write every recorded event to this file, one per line, for investigating a failure.
    #[arg(long)]
    pub history: Option<PathBuf>,
}

/// `KIND=COMMAND`.
fn parse_fault_command(s: &str) -> Result<(FaultKind, String), String> {
    use clap::ValueEnum;
    let (kind, command) = s
        .split_once('=')
        .ok_or_else(|| format!("expected KIND=COMMAND, got {s}"))?;
    let kind = FaultKind::from_str(kind.trim(), false)?;
    let command = command.trim();
    if command.is_empty() {
        return Err(format!("an empty command for {}", kind.name()));
    }
    Ok((kind, command.to_owned()))
}

impl DrillArgs {
    /// The fault kinds asked for: `--faults`, or the defaults for the cluster plus every kind
    /// given a command.
    pub fn requested_faults(&self) -> Vec<FaultKind> {
        if let Some(f) = &self.faults {
            return f.clone();
        }
        let mut kinds = DEFAULT_FAULTS.to_vec();
        if self.cluster == ClusterKind::Patroni && self.servers.is_empty() {
            kinds.extend_from_slice(PATRONI_FAULTS);
        }
        for (k, _) in &self.fault_commands {
            if !kinds.contains(k) {
                kinds.push(*k);
            }
        }
        kinds
    }

    fn hook(&self, kind: FaultKind) -> Option<&str> {
        self.fault_commands
            .iter()
            .rev()
            .find(|(k, _)| *k == kind)
            .map(|(_, c)| c.as_str())
    }
}

/// `5s`, `500ms`, `2m`, or plain seconds.
fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, unit) = s
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .map_or((s, "s"), |i| s.split_at(i));
    let n: f64 = num.parse().map_err(|_| format!("not a duration: {s}"))?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "s" => n,
        "m" => n * 60.0,
        _ => return Err(format!("unknown unit in {s} (ms, s, m)")),
    };
    Ok(Duration::from_secs_f64(secs))
}

/// Live counters for the progress line.
#[derive(Default)]
struct Progress {
    faults: AtomicU64,
    current: Mutex<String>,
}

/// Run the drill; the exit status is 0 only when no invariant was violated.
///
/// # Errors
/// The deployment could not be started or reached.
pub async fn run(args: DrillArgs) -> anyhow::Result<i32> {
    let seed = args.seed.unwrap_or_else(|| rand::rng().random());
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let external = !args.servers.is_empty();
    let requested = args.requested_faults();
    anyhow::ensure!(args.rate > 0.0, "--rate must be positive");
    anyhow::ensure!(
        !external || args.cluster == ClusterKind::Embedded,
        "--cluster starts a deployment of the drill's own; against --server, drive your cluster with --fault-command"
    );
    anyhow::ensure!(args.runners > 0, "--runners must be at least 1");
    anyhow::ensure!(
        external || args.replicas > 0,
        "--replicas must be at least 1"
    );
    let history = Recorder::new();
    let logs = std::env::temp_dir().join(format!("leasehold-drill-{seed}"));
    std::fs::create_dir_all(&logs)?;
    let tty = std::io::stderr().is_terminal();

    // ---- the deployment ------------------------------------------------------------------
    let mut skipped: Vec<(FaultKind, String)> = Vec::new();
    let mut own: Option<Own> = None;
    let workspace = format!("drill-{:08x}", seed as u32);
    for &k in &requested {
        if args.hook(k).is_some() || skipped.iter().any(|(s, _)| *s == k) {
            continue;
        }
        if external && k.needs_own_deployment() {
            skipped.push((
                k,
                "needs processes and a database the drill started itself (or a --fault-command)"
                    .into(),
            ));
        } else if !external && k.needs_patroni() && args.cluster != ClusterKind::Patroni {
            skipped.push((k, "needs --cluster patroni (or a --fault-command)".into()));
        }
    }
    let (urls, api_key) = if external {
        let key = match (&args.api_key, &args.database_url) {
            (Some(k), _) => k.clone(),
            (None, Some(db)) => mint_key(db, &workspace).await?,
            (None, None) => bail!("--server needs --api-key (an admin key) or --database-url"),
        };
        (args.servers.clone(), key)
    } else {
        let (db, database_urls) = match args.cluster {
            ClusterKind::Embedded => {
                eprintln!(
                    "drill: starting a primary, a synchronous standby and {} replicas",
                    args.replicas
                );
                let cluster = tokio::task::block_in_place(|| Cluster::start(true))?;
                cluster.make_synchronous().await?;
                let url = cluster.url("postgres");
                (Db::Embedded(cluster), vec![url])
            }
            ClusterKind::Patroni => {
                eprintln!(
                    "drill: starting etcd, {} Patroni nodes, HAProxy and {} replicas",
                    args.patroni_nodes, args.replicas
                );
                let cluster =
                    patroni::PatroniCluster::start(args.patroni_nodes, patroni::Timings::default())
                        .await?;
                let urls = vec![
                    cluster.multi_host_url("postgres"),
                    cluster.haproxy_url("postgres"),
                ];
                (Db::Patroni(cluster), urls)
            }
        };
        // Migrate once, before the replicas race to.
        let key = mint_key(&database_urls[0], &workspace).await?;
        let mut replicas = Vec::new();
        for i in 0..args.replicas {
            let mut r = ReplicaProc {
                name: format!("replica-{i}"),
                port: free_port()?,
                child: None,
                // The first replica fails ticks (the fleet's fault), the others do not.
                fail_ticks: if i == 0 { args.fail_ticks } else { 0 },
            };
            r.start(&database_urls[i % database_urls.len()], &logs)
                .await?;
            replicas.push(r);
        }
        let urls = replicas.iter().map(ReplicaProc::url).collect();
        own = Some(Own {
            db,
            database_urls,
            replicas,
            logs: logs.clone(),
        });
        (urls, key)
    };
    let clients: Vec<Client> = urls
        .iter()
        .map(|u| Client::new(u, Some(api_key.clone())))
        .collect();
    let capability = format!("drill-{}", &Uuid::new_v4().simple().to_string()[..8]);

    // ---- runners -------------------------------------------------------------------------
    let max_ttl = Arc::new(AtomicU64::new(if external { 0 } else { OWN_LEASE_TTL_MS }));
    let mut workers = Vec::new();
    for i in 0..args.runners {
        let req = wire::CreateRunner {
            label: format!("drill-runner-{i}"),
            os: Some("linux".into()),
            capabilities: Some(vec![capability.clone()]),
            capacity: Some(1),
            ..Default::default()
        };
        let created = retry(Duration::from_secs(30), || {
            clients[0].pair_runner(wire::Tier::Workspace, &req)
        })
        .await
        .context("pairing a drill runner")?;
        workers.push(start_worker(
            &format!("runner-{i}"),
            &urls,
            &capability,
            &created.token,
            &logs,
            &history,
            &max_ttl,
        )?);
    }

    // ---- load and probes -----------------------------------------------------------------
    let stop = Arc::new(AtomicBool::new(false));
    let dispatcher = tokio::spawn(dispatch_loop(
        clients.clone(),
        capability.clone(),
        args.rate,
        history.clone(),
        stop.clone(),
    ));
    // Probes go on through the settling, so every repair is followed by a probe.
    let probe_stop = Arc::new(AtomicBool::new(false));
    let prober = tokio::spawn(probe_loop(
        urls.clone(),
        history.clone(),
        probe_stop.clone(),
    ));
    let progress = Arc::new(Progress::default());
    let ticker = tokio::spawn(progress_loop(history.clone(), progress.clone(), tty));

    // ---- faults --------------------------------------------------------------------------
    let mut kinds: Vec<FaultKind> = requested
        .iter()
        .copied()
        .filter(|k| !skipped.iter().any(|(s, _)| s == k))
        .collect();
    kinds.sort();
    kinds.dedup();
    // A fault command against the drill's own Patroni cluster can call `patronictl -c`.
    let hook_env: Vec<(String, String)> = match own.as_ref().map(|o| &o.db) {
        Some(Db::Patroni(p)) => vec![(
            "LEASEHOLD_DRILL_PATRONI_CONFIG".to_owned(),
            p.config_path(0).display().to_string(),
        )],
        _ => Vec::new(),
    };
    let end = tokio::time::Instant::now() + Duration::from_secs(args.seconds);
    let mut cycle: Vec<FaultKind> = Vec::new();
    loop {
        let next = tokio::time::Instant::now() + args.every;
        if next >= end {
            tokio::time::sleep_until(end).await;
            break;
        }
        tokio::time::sleep_until(next).await;
        if kinds.is_empty() {
            continue;
        }
        if cycle.is_empty() {
            cycle = kinds.clone();
            cycle.shuffle(&mut rng);
        }
        let kind = cycle.pop().expect("a fault");
        *progress.current.lock().expect("progress lock") = kind.name().to_owned();
        progress.faults.fetch_add(1, Ordering::Relaxed);
        // A database fault starts from a healthy cluster, so its times measure only itself.
        if let Some(Own {
            db: Db::Patroni(p), ..
        }) = own.as_ref()
        {
            if kind.is_database() {
                if let Err(e) = p.wait_healthy(faults::PATRONI_SETTLE).await {
                    stop.store(true, Ordering::Relaxed);
                    probe_stop.store(true, Ordering::Relaxed);
                    return Err(e.context(format!("before {}", kind.name())));
                }
            }
        }
        // Waiting for a healthy cluster can take the run past its end: no fault starts after
        // it (its repair would land in the settling, unjudged by the load it is meant to meet).
        if tokio::time::Instant::now() >= end {
            break;
        }
        let at = history.now();
        let result = match args.hook(kind) {
            Some(command) => {
                let patroni = match own.as_ref().map(|o| &o.db) {
                    Some(Db::Patroni(p)) => Some(p),
                    _ => None,
                };
                run_hook(kind, command, &hook_env, patroni, &logs, &history).await
            }
            None => {
                inject(
                    kind,
                    &mut rng,
                    own.as_mut(),
                    &mut workers,
                    &max_ttl,
                    &history,
                )
                .await
            }
        };
        match result {
            Ok((target, healed)) => history.push(Event::Fault {
                kind: kind.name().into(),
                target,
                at_ms: at,
                healed_ms: healed,
            }),
            Err(e) => {
                // The drill could not repair its own deployment: nothing after is meaningful.
                stop.store(true, Ordering::Relaxed);
                probe_stop.store(true, Ordering::Relaxed);
                return Err(e.context(format!("injecting {}", kind.name())));
            }
        }
        progress.current.lock().expect("progress lock").clear();
    }

    // ---- settle and judge ----------------------------------------------------------------
    *progress.current.lock().expect("progress lock") = "settling".into();
    stop.store(true, Ordering::Relaxed);
    let _ = dispatcher.await;
    let acked = history.dispatched_jobs();
    let settle_for = Duration::from_secs(60)
        + Duration::from_millis(max_ttl.load(Ordering::Relaxed).saturating_mul(3));
    let finals = settle(&clients, &acked, settle_for).await;
    // Every replica must be ready at the end.
    let all_ready = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            if ready_all(&urls).await {
                // A ready probe like the prober's: the last repair is judged by it too.
                history.push(Event::AllReady {
                    at_ms: history.now(),
                });
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await
    .is_ok();
    if !all_ready {
        history.push(Event::Violation {
            what: "not every replica answered /readyz 200 at the end".into(),
        });
    }
    probe_stop.store(true, Ordering::Relaxed);
    for w in &mut workers {
        let _ = w.child.start_kill();
        let _ = w.child.wait().await;
    }
    let _ = prober.await;
    ticker.abort();
    if tty {
        eprintln!();
    }
    for (job, state, epoch) in finals {
        history.push(Event::Final { job, state, epoch });
    }
    let verdict = check::check(&history.snapshot());
    if let Some(path) = &args.history {
        let text: String = history
            .snapshot()
            .iter()
            .map(|e| format!("{e:?}\n"))
            .collect();
        std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    let report = report::Report::new(
        &args,
        &requested,
        seed,
        external,
        urls.len(),
        &skipped,
        &verdict,
    );
    if args.json {
        eprint!("{}", report.table());
        println!("{}", serde_json::to_string_pretty(&report.json())?);
    } else {
        print!("{}", report.table());
    }
    if let Some(own) = own {
        drop(own.replicas);
        tokio::task::block_in_place(|| drop(own.db));
    }
    if verdict.ok() {
        let _ = std::fs::remove_dir_all(&logs);
    } else {
        eprintln!("drill: replica and runner logs kept in {}", logs.display());
    }
    Ok(i32::from(!verdict.ok()))
}

/// Retry `f` on errors until `within` passes.
async fn retry<T, F, Fut>(within: Duration, mut f: F) -> crate::client::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = crate::client::Result<T>>,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match f().await {
            Ok(v) => return Ok(v),
            Err(e) if tokio::time::Instant::now() > deadline => return Err(e),
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

/// An admin key of `workspace`, minted straight in the database (as `admin create-key` does).
async fn mint_key(database_url: &str, workspace: &str) -> anyhow::Result<String> {
    crate::replica::migrate_with_patience(database_url, Duration::from_secs(30)).await?;
    crate::commands::admin::create_key(database_url, workspace, "drill", true)
        .await
        .context("minting the drill's API key")
}

/// Dispatch at `rate` per second until `stop`, each job under its own idempotency key retried
/// (through the next replica) until it is answered, so every job made is acknowledged.
async fn dispatch_loop(
    clients: Vec<Client>,
    capability: String,
    rate: f64,
    history: Recorder,
    stop: Arc<AtomicBool>,
) {
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / rate));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut via = 0usize;
    for n in 0u64.. {
        tick.tick().await;
        if stop.load(Ordering::Relaxed) {
            return;
        }
        let key = Uuid::now_v7().to_string();
        let mut d = wire::Dispatch::new(
            wire::Target::Pool {
                pool: wire::PoolName::Workspace,
            },
            json!({ "n": n }),
        );
        d.required_capabilities = Some(vec![capability.clone()]);
        d.max_attempts = Some(20);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            via += 1;
            match clients[via % clients.len()]
                .dispatch_idempotent(&d, &key)
                .await
            {
                Ok((_, job)) => {
                    history.dispatched(job.id);
                    break;
                }
                Err(e) => {
                    history.error("dispatch", &e);
                    if tokio::time::Instant::now() > deadline || stop.load(Ordering::Relaxed) {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }
}

async fn ready_all(urls: &[String]) -> bool {
    static HTTP: std::sync::OnceLock<reqwest::Client> = std::sync::OnceLock::new();
    let http = HTTP.get_or_init(reqwest::Client::new);
    let checks = urls.iter().map(|u| async move {
        http.get(format!("{u}/readyz"))
            .timeout(Duration::from_secs(1))
            .send()
            .await
            .is_ok_and(|r| r.status().is_success())
    });
    futures_util::future::join_all(checks)
        .await
        .into_iter()
        .all(|ok| ok)
}

/// Every 200 ms: does every replica answer `/readyz` 200?
async fn probe_loop(urls: Vec<String>, history: Recorder, stop: Arc<AtomicBool>) {
    while !stop.load(Ordering::Relaxed) {
        if ready_all(&urls).await {
            history.push(Event::AllReady {
                at_ms: history.now(),
            });
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn progress_loop(history: Recorder, progress: Arc<Progress>, tty: bool) {
    let mut last_line = 0u64;
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let v = check::check_live(&history.snapshot());
        let line = format!(
            "[{:>4}s] jobs {} dispatched, {} done · faults {} · now: {} · violations {}",
            history.now() / 1000,
            v.dispatched,
            v.reports_accepted,
            progress.faults.load(Ordering::Relaxed),
            {
                let c = progress.current.lock().expect("progress lock");
                if c.is_empty() {
                    "-".to_owned()
                } else {
                    c.clone()
                }
            },
            v.violations.len(),
        );
        if tty {
            eprint!("\r\x1b[2K{line}");
        } else if history.now() >= last_line + 10_000 {
            eprintln!("{line}");
            last_line = history.now();
        }
    }
}

/// A job's state (`None`: not found) and epoch, as last seen.
type Seen = (Option<String>, i64);

/// Wait (up to `within`) until every acknowledged job is terminal; the states seen last.
async fn settle(
    clients: &[Client],
    jobs: &[Uuid],
    within: Duration,
) -> Vec<(Uuid, Option<String>, i64)> {
    let deadline = tokio::time::Instant::now() + within;
    let mut states: HashMap<Uuid, Seen> = HashMap::new();
    let mut pending: Vec<Uuid> = jobs.to_vec();
    loop {
        let got: Vec<(Uuid, Option<Seen>)> =
            futures_util::stream::iter(pending.iter().enumerate().map(|(i, &id)| {
                let c = clients[i % clients.len()].clone();
                async move {
                    match c.job(id).await {
                        Ok(j) => (id, Some((Some(j.state.to_string()), j.epoch))),
                        Err(e) if e.status().is_some_and(|s| s.as_u16() == 404) => {
                            (id, Some((None, 0)))
                        }
                        Err(_) => (id, None),
                    }
                }
            }))
            .buffer_unordered(16)
            .collect()
            .await;
        for (id, seen) in got {
            if let Some(seen) = seen {
                states.insert(id, seen);
            }
        }
        pending.retain(|id| {
            states
                .get(id)
                .is_none_or(|(s, _)| matches!(s.as_deref(), Some("parked" | "leased")))
        });
        if pending.is_empty() || tokio::time::Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    jobs.iter()
        .map(|id| {
            let (s, e) = states.get(id).cloned().unwrap_or((None, 0));
            (*id, s, e)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::parse_duration;
    use std::time::Duration;

    #[test]
    fn durations_parse_with_and_without_units() {
        assert_eq!(parse_duration("5s"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("3"), Ok(Duration::from_secs(3)));
        assert!(parse_duration("5h").is_err());
        assert!(parse_duration("soon").is_err());
    }
}
