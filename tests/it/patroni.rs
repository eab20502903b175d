//! The production database shape, on real parts: etcd, two Patroni nodes (`synchronous_mode:
//! true`) and HAProxy from the installed packages, configured from the shipped
//! `deploy/patroni.yml` and `deploy/haproxy-patroni.cfg` ([`PatroniCluster`]). Replica A
//! reaches the primary by the multi-host URL with `target_session_attrs=read-write`, replica B
//! through HAProxy (checking Patroni's `/primary`); a runner long-polls each. A planned
//! switchover, then a crash of the leader (SIGKILL of its postmaster). Invariants, judged by
//! the drill's checker: every acknowledged dispatch completes exactly once (none lost), no 5xx
//! but 503, both replicas ready within 15 s of each new leader and serving leases through both
//! paths after it; the whole run takes under two minutes.
//!
//! The drill itself, `leasehold drill --cluster patroni`, runs once with a switchover injected by
//! `--fault-command` (`patronictl`), as an operator drives their own cluster.
//!
//! Both need `patroni`, `etcd` and `haproxy` (Debian: patroni, etcd-server, haproxy): without
//! them they fail under `CI=true`, and say why and return otherwise.

use std::time::{Duration, Instant};

use leasehold::client::Client;
use leasehold::commands::drill::check::{Event, READY_WITHIN_MS};
use leasehold::commands::drill::history::Recorder;
use leasehold::commands::drill::patroni::{missing_tools, PatroniCluster, Timings};
use leasehold::wire::Tier;

use crate::failover::{assert_every_job_completed, leases_after, Workload};
use crate::support::{eventually, key_in, pair, readiness, serve_process};

/// Whether the cluster's tools (and `also`) are installed; under `CI=true` their absence fails
/// the test, elsewhere it is said and the test returns.
fn installed(also: &[&'static str]) -> bool {
    let mut missing = missing_tools();
    missing.extend(also.iter().filter(|t| which(t).is_none()));
    if missing.is_empty() {
        return true;
    }
    let why = format!(
        "needs {} (Debian packages patroni, etcd-server, haproxy)",
        missing.join(", ")
    );
    crate::support::require("patroni", Some(why))
}

/// Leases `runner` was granted after `t`.
fn leases_by_after(history: &Recorder, runner: &str, t: u64) -> usize {
    history
        .count(|e| matches!(e, Event::Leased { at_ms, runner: r, .. } if *at_ms > t && r == runner))
}

/// After a fault repaired at `healed` (a new leader leads): both replicas ready within the
/// checker's bound, and leases through both paths again.
async fn recovered(
    replicas: &[&str],
    history: &Recorder,
    kind: &str,
    target: String,
    at: u64,
    healed: u64,
) {
    for url in replicas {
        readiness(url, 200, Duration::from_millis(READY_WITHIN_MS)).await;
    }
    history.push(Event::AllReady {
        at_ms: history.now(),
    });
    history.push(Event::Fault {
        kind: kind.into(),
        target,
        at_ms: at,
        healed_ms: healed,
    });
    eventually(
        Duration::from_secs(30),
        &format!("leases through both replicas after {kind}"),
        || async {
            (leases_by_after(history, "runner-a", healed) >= 3
                && leases_by_after(history, "runner-b", healed) >= 3)
                .then_some(())
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_switchover_and_a_leader_crash_on_patroni_lose_nothing_acknowledged() {
    if !installed(&[]) {
        return;
    }
    let started = Instant::now();
    let cluster = PatroniCluster::start(2, Timings::default())
        .await
        .expect("a Patroni cluster");
    let env = [
        ("LEASEHOLD_LEASE_TTL_MS", "3000"),
        ("LEASEHOLD_AUTH_BURST", "100000"),
    ];
    let direct = cluster.multi_host_url("postgres");
    let a = serve_process(&direct, &env).await;
    let b = serve_process(&cluster.haproxy_url("postgres"), &env).await;
    for r in [&a, &b] {
        readiness(&r.url, 200, Duration::from_secs(30)).await;
    }
    let key = key_in(&direct, "acme", "alice", true).await;
    let alice_a = Client::new(&a.url, Some(key.clone()));
    let alice_b = Client::new(&b.url, Some(key));

    let mut load = Workload::new();
    let history = load.history.clone();
    for (name, via) in [("runner-a", &alice_a), ("runner-b", &alice_b)] {
        let (_, r) = pair(via, Tier::Workspace, &["linux"], 2).await;
        load.work(r, name.into());
    }
    load.dispatch(vec![alice_a.clone(), alice_b.clone()]);
    eventually(Duration::from_secs(30), "runners working", || async {
        (leases_by_after(&history, "runner-a", 0) >= 5
            && leases_by_after(&history, "runner-b", 0) >= 5)
            .then_some(())
    })
    .await;
    let replicas = [a.url.as_str(), b.url.as_str()];

    // A planned switchover to the synchronous standby.
    let at = history.now();
    let old = cluster.leader().await.expect("a leader");
    let new = cluster.switchover().await.expect("switchover");
    let healed = history.now();
    eprintln!("patroni: switchover {old} -> {new} in {} ms", healed - at);
    recovered(
        &replicas,
        &history,
        "switchover-db",
        format!("{} -> {}", cluster.nodes[old].name, cluster.nodes[new].name),
        at,
        healed,
    )
    .await;
    cluster
        .wait_healthy(Duration::from_secs(60))
        .await
        .expect("the old leader streams again");

    // A crash of the leader: Patroni fails over to the synchronous standby.
    let at = history.now();
    let old = new;
    let new = cluster.crash_leader().await.expect("a failover");
    let healed = history.now();
    assert_ne!(old, new);
    eprintln!(
        "patroni: leader {old} crashed, {new} leads after {} ms",
        healed - at
    );
    recovered(
        &replicas,
        &history,
        "failover-db",
        format!("{} crashed", cluster.nodes[old].name),
        at,
        healed,
    )
    .await;

    load.stop_dispatching().await;
    let verdict = load.judge(&direct).await;
    assert_every_job_completed("patroni", &verdict);
    assert_eq!(verdict.lost, 0, "{verdict:?}");
    assert_eq!(verdict.http_5xx_other, 0, "{verdict:?}");
    assert_eq!(verdict.recoveries.len(), 2, "{verdict:?}");
    assert!(
        leases_after(&history, 0) as u64 >= verdict.dispatched,
        "{verdict:?}"
    );
    drop((a, b));
    tokio::task::block_in_place(|| drop(cluster));
    let took = started.elapsed();
    eprintln!("patroni: the whole run took {} ms", took.as_millis());
}

/// `leasehold drill --cluster patroni` end to end, a database fault injected by an operator's
/// command (`--fault-command`, here `patronictl switchover` against the drill's own cluster):
/// the command ran (its output says the switchover happened), the report counts the fault, and
/// the run passes the checker with nothing lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_drill_injects_a_switchover_through_a_fault_command() {
    if !installed(&["patronictl"]) {
        return;
    }
    let out = std::env::temp_dir().join(format!("lh-hook-{}", uuid::Uuid::now_v7()));
    let hook = format!(
        "switchover-db=patronictl -c \"$LEASEHOLD_DRILL_PATRONI_CONFIG\" switchover --force > '{}'",
        out.display()
    );
    let run = tokio::process::Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(["drill", "--cluster", "patroni", "--patroni-nodes", "2"])
        .args(["--faults", "switchover-db", "--fault-command", &hook])
        .args(["--seconds", "6", "--every", "2s", "--rate", "5", "--json"])
        .stderr(std::process::Stdio::inherit())
        .kill_on_drop(true)
        .output();
    let run = tokio::time::timeout(Duration::from_secs(240), run)
        .await
        .expect("the drill finishes")
        .expect("the drill runs");
    let said = std::fs::read_to_string(&out).unwrap_or_default();
    let _ = std::fs::remove_file(&out);
    let report: serde_json::Value =
        serde_json::from_slice(&run.stdout).expect("a JSON report on stdout");
    assert!(run.status.success(), "{report:#}");
    assert_eq!(report["ok"], true, "{report:#}");
    assert_eq!(report["cluster"], "patroni", "{report:#}");
    assert_eq!(report["jobs"]["lost"], 0, "{report:#}");
    assert_eq!(
        report["jobs"]["completed"], report["jobs"]["dispatched"],
        "{report:#}"
    );
    let faults = report["faults"].as_array().expect("faults");
    assert!(!faults.is_empty(), "{report:#}");
    assert!(
        faults
            .iter()
            .all(|f| f["kind"] == "switchover-db" && f["target"] == "fault-command"),
        "{report:#}"
    );
    assert!(said.contains("Successfully switched over"), "{said}");
}

fn which(program: &str) -> Option<std::path::PathBuf> {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join(program))
        .find(|p| p.is_file())
}
