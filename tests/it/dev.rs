//! `leasehold dev`'s banner (issue 35 row 11): the commands it prints run as printed, pasted
//! into a fresh shell with no `leasehold` on `PATH` and no environment of ours; it names the
//! `/ui` page; on a taken port it names the address and `--listen`.
//!
//! `dev` owns its data directory (issue 47 item 1): a second `dev` on the same directory leaves
//! the first (and its PostgreSQL) running and says where it is; a PostgreSQL `dev` did not
//! start is never stopped by it; a stale `postmaster.pid` (no live process) is recovered.
//!
//! Run as root from a checkout the `postgres` user cannot reach, `dev` never uses a cluster
//! another user planted where its database would move (issue 52 row 1): it stops, naming the
//! place, prints no `DATABASE_URL`, and leaves what it found as it was.
//!
//! A `dev` killed outright (SIGKILL) leaves no PostgreSQL behind: its watchdog stops the
//! postmaster that runs in its data directory (a pid planted in `postmaster.pid` is never
//! signalled: tooling::private_pg::watchdog).
//!
//! Ctrl-C in `dev`'s terminal (SIGINT to its whole process group) gives the local runner's
//! jobs back before anything stops, so the next `dev` runs them at once, and `job logs` shows
//! where each lease's output starts (issue 47 item 4).

use std::process::Stdio;

use std::time::Duration;

use leasehold::client::Client;
use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::Pid;
use tokio::io::AsyncBufReadExt;

use crate::procs::{cli, TempDir, BIN, LONG};
use crate::support::eventually;

/// `leasehold dev --listen LISTEN --data-dir DATA` with none of our LEASEHOLD_* variables, in
/// a process group of its own, as a shell starts a foreground command.
fn dev(data: &std::path::Path, listen: &str, stderr: &std::path::Path) -> tokio::process::Child {
    tokio::process::Command::new(BIN)
        .args(["dev", "--listen", listen, "--data-dir"])
        .arg(data)
        .env_remove("LEASEHOLD_SERVER")
        .env_remove("LEASEHOLD_API_KEY")
        .env("LEASEHOLD_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(stderr).unwrap())
        .kill_on_drop(true)
        .process_group(0)
        .spawn()
        .unwrap()
}

/// A running `leasehold dev` and what it printed up to its admin key.
pub struct Dev {
    pub child: tokio::process::Child,
    pub printed: Vec<String>,
    pub log: std::path::PathBuf,
}

impl Dev {
    /// Start `dev` and read its banner; `None` (with what it printed) when it exits first.
    pub async fn start(
        data: &std::path::Path,
        listen: &str,
        log: std::path::PathBuf,
    ) -> Result<Dev, (std::process::ExitStatus, Vec<String>, String)> {
        let mut child = dev(data, listen, &log);
        let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let mut printed = Vec::new();
        let done = tokio::time::timeout(LONG, async {
            while let Some(line) = lines.next_line().await.unwrap() {
                let key = line.starts_with("ak_");
                printed.push(line);
                if key {
                    return true;
                }
            }
            false
        })
        .await
        .expect("dev prints its banner or exits");
        if !done {
            let status = tokio::time::timeout(LONG, child.wait())
                .await
                .expect("dev exits once its output ends")
                .unwrap();
            return Err((status, printed, std::fs::read_to_string(&log).unwrap()));
        }
        Ok(Dev {
            child,
            printed,
            log,
        })
    }

    /// The base URL of its banner's first line.
    fn base(&self) -> String {
        self.printed[0]
            .split_whitespace()
            .find(|w| w.starts_with("http"))
            .unwrap_or_else(|| panic!("names its URL: {:#?}", self.printed))
            .to_owned()
    }

    /// Where its PostgreSQL keeps its data, as printed.
    fn pg_data(&self) -> std::path::PathBuf {
        let line = self
            .printed
            .iter()
            .find_map(|l| l.strip_prefix("PostgreSQL data: "))
            .unwrap_or_else(|| panic!("names its data: {:#?}", self.printed));
        line.split(" (").next().unwrap().into()
    }

    fn pid(&self) -> u32 {
        self.child.id().unwrap()
    }

    /// The value of `export NAME=...` in its banner.
    pub fn exported(&self, name: &str) -> String {
        let prefix = format!("export {name}=");
        self.printed
            .iter()
            .find_map(|l| l.trim().strip_prefix(&prefix))
            .unwrap_or_else(|| panic!("exports {name}: {:#?}", self.printed))
            .to_owned()
    }

    /// The pasted submit command of its banner, run in a fresh shell: what it printed.
    async fn submit_hello(&self) -> std::process::Output {
        let submit = self
            .printed
            .iter()
            .map(|l| l.trim())
            .find(|l| l.contains(" job submit --wait -- echo hello"))
            .unwrap_or_else(|| panic!("prints a submit command: {:#?}", self.printed))
            .to_owned();
        tokio::time::timeout(
            LONG,
            tokio::process::Command::new("sh")
                .args(["-c", &submit])
                .env_clear()
                .env("PATH", "/usr/bin:/bin")
                .stdin(Stdio::null())
                .kill_on_drop(true)
                .output(),
        )
        .await
        .expect("the submit command finishes")
        .unwrap()
    }

    async fn stop(mut self) {
        kill(
            Pid::from_raw(i32::try_from(self.pid()).unwrap()),
            Signal::SIGTERM,
        )
        .unwrap();
        let status = tokio::time::timeout(LONG, self.child.wait())
            .await
            .expect("dev stops on SIGTERM")
            .unwrap();
        assert!(
            status.success(),
            "{status}: {:?}",
            std::fs::read_to_string(&self.log)
        );
    }
}

async fn ready(base: &str) -> u16 {
    reqwest::get(format!("{base}/readyz"))
        .await
        .map_or(0, |r| r.status().as_u16())
}

#[tokio::test]
async fn a_dev_killed_outright_leaves_no_postgresql_behind() {
    let dir = TempDir::new("dev-killed");
    let data = dir.join("state/dev-pg");
    let mut dev = Dev::start(&data, "127.0.0.1:0", dir.join("dev.log"))
        .await
        .unwrap_or_else(|e| panic!("dev starts: {e:?}"));
    let pid_file = dev.pg_data().join("postmaster.pid");
    let postmaster: i32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .lines()
        .next()
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    kill(
        Pid::from_raw(i32::try_from(dev.pid()).unwrap()),
        Signal::SIGKILL,
    )
    .unwrap();
    dev.child.wait().await.unwrap();
    eventually(LONG, "the watchdog stops dev's PostgreSQL", || async {
        kill(Pid::from_raw(postmaster), None).is_err().then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_second_dev_on_one_data_directory_leaves_the_first_running() {
    let dir = TempDir::new("dev-twice");
    let data = dir.join("state/dev-pg");
    let first = Dev::start(&data, "127.0.0.1:0", dir.join("first.log"))
        .await
        .unwrap_or_else(|e| panic!("the first dev starts: {e:?}"));
    let base = first.base();
    assert_eq!(ready(&base).await, 200);

    // A second dev on the same directory (another port, so only the directory is shared).
    match Dev::start(&data, "127.0.0.1:0", dir.join("second.log")).await {
        Ok(second) => panic!(
            "a second dev started on the first's data directory: {:#?}; the first's /readyz: {}",
            second.printed,
            ready(&base).await
        ),
        Err((status, printed, err)) => {
            assert!(!status.success(), "{status}: {printed:?} {err}");
            let said = format!("{}\n{err}", printed.join("\n"));
            assert!(
                said.contains(&base) && said.contains(&first.pid().to_string()),
                "names where the first runs ({base}, pid {}): {said}",
                first.pid()
            );
            assert!(
                said.contains("LEASEHOLD_SERVER="),
                "says how to reach it: {said}"
            );
        }
    }
    // The first is untouched: its database answers and it runs a job.
    assert_eq!(
        ready(&base).await,
        200,
        "{:?}",
        std::fs::read_to_string(&first.log)
    );
    let out = first.submit_hello().await;
    assert!(
        out.status.success() && out.stdout == b"hello\n",
        "{out:?}\n{:?}",
        std::fs::read_to_string(&first.log)
    );
    let pg_data = first.pg_data();
    first.stop().await;

    // A PostgreSQL someone else started on that directory is left running.
    let mut theirs = leasehold::tooling::private_pg::PrivatePg::start(&pg_data, false, false)
        .expect("start a server of our own on the directory");
    let refused = Dev::start(&data, "127.0.0.1:0", dir.join("third.log")).await;
    let Err((status, printed, err)) = refused else {
        panic!("dev started over a PostgreSQL it did not start");
    };
    assert!(!status.success(), "{printed:?} {err}");
    assert!(
        err.contains("postmaster.pid") || err.contains("PostgreSQL"),
        "says why: {err}"
    );
    let db = crate::support::connect(&theirs.url("postgres")).await;
    db.simple_query("SELECT 1")
        .await
        .expect("the foreign server still answers");
    drop(db);
    theirs.stop();
    drop(theirs);

    // A postmaster.pid whose process is gone (a crash) is recovered.
    let mut gone = std::process::Command::new("true").spawn().unwrap();
    let dead = gone.id();
    gone.wait().unwrap();
    std::fs::write(
        pg_data.join("postmaster.pid"),
        format!("{dead}\n{}\n0\n5432\n", pg_data.display()),
    )
    .unwrap();
    let again = Dev::start(&data, "127.0.0.1:0", dir.join("fourth.log"))
        .await
        .unwrap_or_else(|e| panic!("dev recovers a stale postmaster.pid: {e:?}"));
    assert_eq!(ready(&again.base()).await, 200);
    again.stop().await;
}

/// The job's events once it has shipped `n` chunks of output.
async fn outputs(client: &Client, id: uuid::Uuid, n: usize) -> Option<Vec<leasehold::wire::Event>> {
    let events = client.events(id, 0, 0).await.ok()?.events;
    let outputs = events.iter().filter(|e| e.kind == "stdout").count();
    (outputs >= n).then_some(events)
}

#[tokio::test]
async fn ctrl_c_on_dev_gives_the_running_job_back_and_the_logs_tell_its_leases_apart() {
    let dir = TempDir::new("dev-ctrl-c");
    let data = dir.join("state/dev-pg");
    let first = Dev::start(&data, "127.0.0.1:0", dir.join("first.log"))
        .await
        .unwrap_or_else(|e| panic!("dev starts: {e:?}"));
    let (url, key) = (
        first.exported("LEASEHOLD_SERVER"),
        first.exported("LEASEHOLD_API_KEY"),
    );
    let submitted = cli(
        &url,
        &key,
        &["job", "submit", "--", "sh", "-c", "echo started; sleep 60"],
        LONG,
    )
    .await;
    let id = crate::procs::job_id(&submitted);
    let client = Client::new(&url, Some(key.clone()));
    eventually(LONG, "the job runs", || outputs(&client, id, 1)).await;

    // Ctrl-C: the terminal signals the whole foreground process group.
    killpg(Pid::from_raw(first.pid() as i32), Signal::SIGINT).unwrap();
    let mut child = first.child;
    let status = tokio::time::timeout(LONG, child.wait())
        .await
        .expect("dev stops on Ctrl-C")
        .unwrap();
    assert!(
        status.success(),
        "{status}: {:?}",
        std::fs::read_to_string(&first.log)
    );

    // The next dev's runner runs it again at once: its lease was given back.
    let second = Dev::start(&data, "127.0.0.1:0", dir.join("second.log"))
        .await
        .unwrap_or_else(|e| panic!("dev starts again: {e:?}"));
    let (url, key) = (
        second.exported("LEASEHOLD_SERVER"),
        second.exported("LEASEHOLD_API_KEY"),
    );
    let client = Client::new(&url, Some(key.clone()));
    let events = eventually(
        Duration::from_secs(30),
        "the job runs again within 30 s",
        || outputs(&client, id, 2),
    )
    .await;
    let given_back = events.iter().any(|e| {
        e.kind == "state" && e.data["state"] == "parked" && e.data["reason"] == "released"
    });
    assert!(given_back, "{events:#?}");

    // Its logs: the first lease's output, a line saying where the second starts, its output.
    let logs = cli(&url, &key, &["job", "logs", &id.to_string()], LONG).await;
    let lines: Vec<&str> = logs.stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{logs:?}");
    assert_eq!(lines[0], "started");
    assert!(
        lines[1].starts_with("--- attempt 1, lease 2") && lines[1].contains("released"),
        "{logs:?}"
    );
    assert_eq!(lines[2], "started");
    second.stop().await;
}

#[tokio::test]
async fn the_dev_banner_commands_run_as_printed_and_a_taken_port_names_listen() {
    let dir = TempDir::new("dev-banner");
    let data = dir.join("state/dev-pg");
    let child = Dev::start(&data, "127.0.0.1:0", dir.join("dev.log"))
        .await
        .unwrap_or_else(|e| panic!("dev starts: {e:?}"));
    let printed = child.printed.clone();
    let log = child.log.clone();

    // The submit command, pasted as printed into a shell without our environment or PATH.
    let out = child.submit_hello().await;
    assert!(
        out.status.success() && out.stdout == b"hello\n",
        "{out:?}\n{printed:#?}\n{:?}",
        std::fs::read_to_string(&log)
    );

    // The page's address.
    let ui = printed
        .iter()
        .find_map(|l| l.split_whitespace().find(|w| w.ends_with("/ui")))
        .unwrap_or_else(|| panic!("names /ui: {printed:#?}"))
        .to_owned();
    let page = reqwest::get(&ui).await.unwrap();
    assert!(page.status().is_success(), "{ui}: {}", page.status());
    let body = page.text().await.unwrap();
    assert!(
        body.contains("<html") || body.contains("<!doctype"),
        "{body}"
    );

    child.stop().await;

    // A port someone else holds: dev says which address and how to choose another.
    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = held.local_addr().unwrap().to_string();
    let log2 = dir.join("dev2.log");
    let mut taken = dev(&data, &addr, &log2);
    let status = tokio::time::timeout(LONG, taken.wait())
        .await
        .expect("dev on a taken port exits")
        .unwrap();
    let err = std::fs::read_to_string(&log2).unwrap();
    assert!(!status.success(), "{err}");
    assert!(err.contains(&addr) && err.contains("--listen"), "{err}");
    drop(held);
}

/// Issue 52 row 1, the attack as it was made: root runs `leasehold dev` from a checkout in a
/// 0700 directory, and another user has planted a cluster (with its own password) at
/// `/var/tmp/leasehold-<hash of the path>`. `dev` stops before starting anything, naming that
/// directory; it prints no `DATABASE_URL` and the planted password nowhere, and the planted
/// directory is still its planter's, mode and password unchanged.
#[tokio::test]
async fn as_root_dev_refuses_a_cluster_planted_where_its_database_would_move() {
    use crate::private_pg::{Planted, ATTACKER_PASSWORD};
    let missing = (!nix::unistd::geteuid().is_root())
        .then(|| "not running as root (nothing is relocated)".to_owned());
    if !crate::support::require("as_root_dev_refuses_a_planted_cluster", missing) {
        return;
    }
    let place = Planted::new("dev-planted");
    Planted::plant_cluster(&place.parent);
    let log = place.home.join("dev.log");
    match Dev::start(&place.asked, "127.0.0.1:0", log).await {
        Ok(dev) => {
            let printed = dev.printed.join("\n");
            dev.stop().await;
            panic!("dev used the planted cluster: {printed}");
        }
        Err((status, printed, log)) => {
            let printed = printed.join("\n");
            assert!(!status.success(), "{status}");
            assert!(!printed.contains("DATABASE_URL"), "{printed}");
            assert!(
                !printed.contains(ATTACKER_PASSWORD) && !log.contains(ATTACKER_PASSWORD),
                "{printed}\n{log}"
            );
            assert!(
                log.contains(&place.parent.display().to_string()),
                "names the planted directory: {log}"
            );
        }
    }
    Planted::assert_untouched(&place.parent);
}
