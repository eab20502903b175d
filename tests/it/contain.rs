//! Containment of hostile jobs by the real runner (`leasehold runner run` as a child process,
//! real replicas on PostgreSQL, jobs submitted with the CLI), issue 18's runner rows.
//!
//! Invariants defended: a job running as a job user leaves nothing behind, not even a
//! process it detached with `setsid` and a cleared environment (row 1), and cannot move
//! itself out of its cgroup (row 2); with `--job-user-range` concurrent jobs run as different
//! uids, cannot read each other's environment or write each other's directories, and nothing
//! of a job's uid outlives it (row 1); as root, a sandboxed job runs as an unprivileged uid
//! and reads neither `/etc/shadow` nor a root-only file (row 3); each non-trivial line of a
//! multi-line secret is masked in what a job streams, however it is printed (row 4); a job
//! user runs a job with a source (row 9); as root a runner with nothing to confine its jobs
//! refuses to start unless told `--unconfined`, and then says what a job can reach (row 13);
//! `leasehold dev` as root runs its jobs as `nobody`; a uid of the range reaches its next job
//! with nothing the last one left in the shared temporary directories or IPC (issue 35 row 7).
//!
//! These need root (job users, cgroups); some need bubblewrap or cgroup v2. Without them a
//! test says why and returns, or fails when `CI=true`.

use nix::sys::signal::Signal;
use uuid::Uuid;

use crate::procs::{
    enrol, marker, none_alive, processes_with, runner, saved, submit_wait, KillOnDrop, Proc,
    RunnerRig, SealingServer, TempDir, LONG,
};
use crate::support::{eventually, TestApp};

fn root() -> Option<String> {
    (!nix::unistd::geteuid().is_root()).then(|| "the test must run as root".to_owned())
}

/// Whether a live `sleep` process carries `marker` (not merely a shell or bwrap whose
/// arguments hold it).
fn sleeping(marker: &str) -> bool {
    processes_with(marker).iter().any(|(pid, state, _)| {
        *state != 'Z'
            && std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| c.starts_with(b"sleep\0"))
    })
}

fn runner_id(config: &std::path::Path) -> String {
    saved(config)["runner_id"].as_str().unwrap().to_owned()
}

/// The runner's log once it has connected (or exited).
async fn connected(r: &Proc) -> String {
    eventually(LONG, "the runner connects", || async {
        let log = r.log();
        log.contains("runner connected").then_some(log)
    })
    .await
}

/// Why this process cannot make a cgroup v2 below its own, if it cannot.
fn cgroup_v2_unwritable() -> Option<String> {
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let Some(mount) = mounts.lines().find_map(|l| {
        let (left, right) = l.split_once(" - ")?;
        right
            .starts_with("cgroup2 ")
            .then(|| left.split_whitespace().nth(4).map(str::to_owned))?
    }) else {
        return Some("no cgroup2 mount".into());
    };
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap();
    let rel = own
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .unwrap_or("/");
    let probe = std::path::Path::new(&mount)
        .join(rel.trim_start_matches('/'))
        .join(format!("lh-test-probe-{}", Uuid::now_v7().simple()));
    match std::fs::create_dir(&probe) {
        Ok(()) => {
            let _ = std::fs::remove_dir(&probe);
            None
        }
        Err(e) => Some(format!("cannot create {}: {e}", probe.display())),
    }
}

/// Row 1 and row 2: a job running as `--job-user` detaches a process with `setsid env -i`
/// (no environment marker left to find) after trying to move it into its parent cgroup and
/// the root cgroup; when the job ends, that process is dead.
#[tokio::test]
async fn a_job_users_detached_env_less_process_dies_with_its_job_and_cannot_leave_its_cgroup() {
    if !crate::support::require("root", root()) {
        return;
    }
    let rig = RunnerRig::new(TestApp::spawn().await, "contain-jobuser").await;
    let config = rig.enrol(&[]).await;
    if !crate::support::require("a writable cgroup v2", cgroup_v2_unwritable()) {
        return;
    }
    let r = rig.runner(&config, &["--job-user", "nobody"], &[]);
    let m = marker();
    let _cleanup = KillOnDrop(m.clone());
    // Its cgroup's parent and the hierarchy's root, from what the job itself can read.
    let script = format!(
        r#"cg=$(sed -n 's/^0:://p' /proc/self/cgroup)
mnt=$(awk '$9 == "cgroup2" {{ print $5; exit }}' /proc/self/mountinfo)
parent="$mnt${{cg%/*}}"
echo "in $cg"
for target in "$parent" "$mnt"; do
    if (echo $$ > "$target/cgroup.procs") 2>/dev/null; then echo "moved into $target"; else echo refused; fi
done
setsid env -i sh -c 'echo $$ > "$1/cgroup.procs" 2>/dev/null; echo $$ > "$2/cgroup.procs" 2>/dev/null; exec sleep {m}1' sh "$parent" "$mnt" </dev/null >/dev/null 2>&1 &
setsid env -i sleep {m}2 </dev/null >/dev/null 2>&1 &
echo detached"#
    );
    let out = rig.sh(&script).await;
    assert_eq!(out.code, Some(0), "{out:?}\nrunner log:\n{}", r.log());
    none_alive(
        &format!("{m}1"),
        "the detached process that tried to leave its cgroup dies with the job",
    )
    .await;
    none_alive(
        &format!("{m}2"),
        "the detached env-less process dies with the job",
    )
    .await;
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert!(
        lines[0].contains(&format!("leasehold-{}-", runner_id(&config))),
        "the job has a cgroup of its own: {lines:?}"
    );
    assert_eq!(
        &lines[1..],
        ["refused", "refused", "detached"],
        "a job user cannot write any cgroup.procs: {out:?}"
    );
}

/// Row 1 (`--job-user-range`): two jobs at once run as two uids of the range; one cannot read
/// the other's `/proc/PID/environ` or write into its directory; when a job ends nothing runs
/// as its uid any more, even what it detached with a cleared environment.
#[tokio::test]
async fn a_uid_range_keeps_concurrent_jobs_apart_and_kills_everything_of_a_jobs_uid() {
    if !crate::support::require("root", root()) {
        return;
    }
    let rig = RunnerRig::new(TestApp::spawn().await, "contain-range").await;
    let (config, r) = rig
        .start_runner(
            &["--capacity", "2"],
            &["--job-user-range", "61700-61707", "--capacity", "2"],
        )
        .await;
    let m = marker();
    let _cleanup = KillOnDrop(m.clone());
    let secret = "s3cr3t-of-job-A";
    // Job A: holds a secret in its environment, detaches a process, and waits.
    let a_id = rig
        .submit(&[
            "--env",
            &format!("TOKEN={secret}"),
            "--",
            "sh",
            "-c",
            &format!(
                "id -u; setsid env -i sleep {m}9 </dev/null >/dev/null 2>&1 & exec sleep {m}1"
            ),
        ])
        .await;
    let (a_pid, _, _) = eventually(LONG, "job A runs", || async {
        processes_with(&format!("{m}1"))
            .into_iter()
            .find(|(_, s, _)| *s != 'Z')
    })
    .await;
    let a_uid = std::fs::read_to_string(format!("/proc/{a_pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|l| l.split_whitespace().next().map(str::to_owned))
        .unwrap();
    let a_root = rig
        .dir
        .join("work")
        .join(runner_id(&config))
        .join(a_id.to_string());
    // Job B, at the same time: tries to read A's environment and write A's directory.
    let b = rig
        .sh(&format!(
            "id -u; cat /proc/{a_pid}/environ && echo read-environ; \
                 echo planted > {w}/planted && echo wrote-work; \
                 echo planted > {r}/planted && echo wrote-root; \
                 cat {c} && echo read-config; \
                 cg=$(sed -n 's/^0:://p' /proc/self/cgroup); \
                 mnt=$(awk '$9 == \"cgroup2\" {{ print $5; exit }}' /proc/self/mountinfo); \
                 (echo $$ > \"$mnt${{cg%/*}}/cgroup.procs\") 2>/dev/null && echo left-cgroup; \
                 exit 0",
            w = a_root.join("work").display(),
            r = a_root.display(),
            c = config.display(),
        ))
        .await;
    assert_eq!(b.code, Some(0), "{b:?}\nrunner log:\n{}", r.log());
    let b_uid = b.stdout.lines().next().unwrap_or_default().to_owned();
    assert_ne!(b_uid, a_uid, "two live jobs, two uids: {b:?}");
    assert!(
        (61700..=61707).contains(&b_uid.parse::<u32>().unwrap())
            && (61700..=61707).contains(&a_uid.parse::<u32>().unwrap()),
        "uids of the range: {a_uid}, {b_uid}"
    );
    assert!(!b.stdout.contains(secret), "{b:?}");
    assert!(!b.stdout.contains("read-environ"), "{b:?}");
    assert!(!b.stdout.contains("wrote-"), "{b:?}");
    assert!(!b.stdout.contains("read-config"), "{b:?}");
    assert!(!b.stdout.contains("rnr_"), "the runner's token: {b:?}");
    assert!(!b.stdout.contains("left-cgroup"), "{b:?}");
    assert!(!a_root.join("work").join("planted").exists());
    assert!(!a_root.join("planted").exists());

    eventually(LONG, "what job A detached runs", || async {
        sleeping(&format!("{m}9")).then_some(())
    })
    .await;
    rig.alice.cancel(a_id).await.unwrap();
    none_alive(&format!("{m}1"), "job A is killed when cancelled").await;
    none_alive(
        &format!("{m}9"),
        "what job A detached with a cleared environment dies with it",
    )
    .await;
    let uid: u32 = a_uid.parse().unwrap();
    eventually(LONG, "nothing runs as job A's uid", || async {
        (!live_uids().contains(&uid)).then_some(())
    })
    .await;
}

/// Issue 56 row 2 (v1.4 "A lease to a caller that is gone": the reference runner never takes a
/// lease it cannot start at once): with `--job-user-range`, a batch of short jobs twice the
/// size of the range runs with one lease each; the runner never takes a job it has no free uid
/// for (a uid frees only after its job's cleanup, later than the command's end).
#[tokio::test]
async fn a_uid_range_runner_never_leases_a_job_it_has_no_free_uid_for() {
    if !crate::support::require("root", root()) {
        return;
    }
    let rig = RunnerRig::new(TestApp::spawn().await, "contain-slots").await;
    let (_config, r) = rig
        .start_runner(
            &["--capacity", "2"],
            &["--job-user-range", "61760-61761", "--capacity", "2"],
        )
        .await;
    connected(&r).await;
    let n = 12;
    let out = crate::procs::cli(
        &rig.url(),
        &rig.key,
        &[
            "job",
            "submit",
            "--count",
            &n.to_string(),
            "--",
            "sh",
            "-c",
            "echo $MATRIX_INDEX",
        ],
        LONG,
    )
    .await;
    assert_eq!(out.code, Some(0), "{out:?}");
    let jobs = eventually(LONG, "every job completes", || async {
        let jobs = rig.alice.jobs(None, None, None).await.ok()?.jobs;
        (jobs.len() == n && jobs.iter().all(|j| j.state == "completed")).then_some(jobs)
    })
    .await;
    let log = r.log();
    assert!(!log.contains("no free uid"), "{log}");
    for j in &jobs {
        assert_eq!(j.attempts, 1, "job {} leased more than once:\n{log}", j.id);
    }
}

/// Real uids of every live (not zombie) process.
fn live_uids() -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let status = std::fs::read_to_string(e.path().join("status")).ok()?;
            let state = status.lines().find_map(|l| l.strip_prefix("State:"))?;
            if state.trim().starts_with('Z') {
                return None;
            }
            status
                .lines()
                .find_map(|l| l.strip_prefix("Uid:"))?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .collect()
}

/// Row 3: a root runner's sandboxed job runs as `nobody` (bwrap started as that uid), so it
/// reads neither `/etc/shadow` nor a root-owned 0600 file in a directory the sandbox mounts.
#[tokio::test]
async fn as_root_a_sandboxed_job_runs_unprivileged_and_reads_no_root_only_file() {
    if !crate::support::require("root", root())
        || !crate::support::require("bubblewrap", crate::runner_e2e::bwrap_unusable())
    {
        return;
    }
    let rig = RunnerRig::new(TestApp::spawn().await, "contain-bwrap-root").await;
    let config = rig.enrol(&["--capacity", "3"]).await;
    // A root-only file under /etc, which the sandbox mounts read-only.
    let secret_file = format!("/etc/leasehold-test-{}.key", Uuid::now_v7().simple());
    struct Remove(String);
    impl Drop for Remove {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }
    let _remove = Remove(secret_file.clone());
    {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&secret_file)
            .unwrap();
        f.write_all(b"host-key-material\n").unwrap();
    }
    let r = rig.runner(&config, &["--sandbox", "bubblewrap"], &[]);
    // A peer job holding a secret, with a process it detached with a cleared environment.
    // One marker (a number `sleep` takes), split so the snooper can put it together.
    let m = marker();
    let (m1, m2) = m.split_at(3);
    let _cleanup = KillOnDrop(m.clone());
    let peer_id = rig
        .submit(&[
            "--env",
            "TOKEN=peer-s3cret",
            "--",
            "sh",
            "-c",
            &format!(
                "setsid env -i sleep {m1}{m2}5 </dev/null >/dev/null 2>&1 & exec sleep {m1}{m2}6"
            ),
        ])
        .await;
    eventually(LONG, "the peer job and what it detached run", || async {
        (sleeping(&format!("{m}6")) && sleeping(&format!("{m}5"))).then_some(())
    })
    .await;
    // The patterns are put together at run time, and handed to grep in a file (by the shell's
    // own printf), so no command line of the snooper's holds them.
    let (cat_file, snoop) = (
        format!("cat {secret_file}"),
        format!(
            "a={m1}; b={m2}; s=peer-; t=s3cret; printf '%s\\n' \"$a$b\" \"$s$t\" > patterns; \
             cat /proc/[0-9]*/cmdline /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' \
             | grep -c -F -f patterns; exit 0"
        ),
    );
    let (who, shadow, file, snoop) = tokio::join!(
        rig.sh("id -u; grep CapEff /proc/self/status"),
        rig.sh("cat /etc/shadow"),
        rig.sh(&cat_file),
        rig.sh(&snoop),
    );
    assert_eq!(
        (snoop.code, snoop.stdout.as_str()),
        (Some(0), "0\n"),
        "a sandboxed job sees no other job's processes or environment: {snoop:?}"
    );
    rig.alice.cancel(peer_id).await.unwrap();
    none_alive(&format!("{m1}{m2}6"), "the cancelled sandboxed job dies").await;
    none_alive(
        &format!("{m1}{m2}5"),
        "what the sandboxed job detached with a cleared environment dies with it",
    )
    .await;
    let nobody = nix::unistd::User::from_name("nobody").unwrap().unwrap();
    assert_eq!(who.code, Some(0), "{who:?}\nrunner log:\n{}", r.log());
    let lines: Vec<&str> = who.stdout.lines().collect();
    assert_eq!(lines[0], nobody.uid.to_string(), "{who:?}");
    assert!(lines[1].ends_with("0000000000000000"), "{who:?}");
    assert_ne!(shadow.code, Some(0), "{shadow:?}");
    assert!(!shadow.stdout.contains("root:"), "{shadow:?}");
    assert_ne!(file.code, Some(0), "{file:?}");
    assert!(!file.stdout.contains("host-key-material"), "{file:?}");
}

/// Row 4: a multi-line secret printed line by line, out of order and amid other text, has
/// each non-trivial line masked in the streamed (and stored) output; trivial lines are not.
#[tokio::test]
async fn each_line_of_a_multi_line_secret_is_masked_in_what_a_job_streams() {
    if !crate::support::require("root", root()) {
        return;
    }
    let dir = TempDir::new("contain-mask");
    // `_server` keeps the process running to the end of the test.
    let SealingServer {
        server: _server,
        url,
        key,
        admin,
    } = SealingServer::start(&dir).await;
    let lines = [
        "-----BEGIN OPENSSH PRIVATE KEY-----",
        "b3BlbnNzaC1rZXktdjEAAAAABG5vbmU",
        "QyNTUxOQAAACBmYWtlLWtleS1tYXRlcmlhbA",
        "}",
        "-----END OPENSSH PRIVATE KEY-----",
    ];
    admin
        // Its runner is personal: the secret must be one personal runners may receive.
        .put_secret_scoped("SSH_KEY", &lines.join("\n"), Some("any"), None)
        .await
        .unwrap();
    let config = enrol(&admin, &[&url], dir.path(), false, &[]).await;
    let r = runner(&config, &dir.join("work"), &["--job-user", "nobody"], &[]);
    // Reversed (tac), one line inside other text, one by one with pauses between.
    let script = "printf '%s\\n' \"$SSH_KEY\" | tac; \
                  echo \"key: $(printf '%s\\n' \"$SSH_KEY\" | sed -n 2p) end\"; \
                  printf '%s\\n' \"$SSH_KEY\" | while read -r l; do echo \"$l\"; sleep 0.05; done";
    let out = submit_wait(
        &url,
        &key,
        &["--secret", "SSH_KEY", "--", "sh", "-c", script],
    )
    .await;
    assert_eq!(out.code, Some(0), "{out:?}\nrunner log:\n{}", r.log());
    let job = admin.jobs(None, None, None).await.unwrap().jobs.remove(0);
    let events = serde_json::to_string(&admin.events(job.id, 0, 0).await.unwrap()).unwrap();
    for text in [&out.stdout, &events] {
        for line in lines.iter().filter(|l| l.len() >= 4) {
            assert!(!text.contains(line), "{line} leaked: {text}");
        }
    }
    assert!(out.stdout.contains("key: *** end"), "{}", out.stdout);
    assert_eq!(
        out.stdout.lines().filter(|l| *l == "***").count(),
        2 * 4,
        "every non-trivial line, both times it is printed whole: {}",
        out.stdout
    );
    assert_eq!(
        out.stdout.lines().filter(|l| *l == "}").count(),
        2,
        "a trivial line is not masked alone: {}",
        out.stdout
    );
}

/// Row 9: with `--job-user`, a job with a source is checked out (as the runner) and then
/// runs as the job user, who owns and can write the checkout.
#[tokio::test]
async fn a_job_user_runs_a_job_with_a_source() {
    if !crate::support::require("root", root()) || !crate::sources::have_git("contain") {
        return;
    }
    let rig = RunnerRig::with_role(TestApp::spawn().await, "contain-source", true).await;
    let alice = &rig.alice;
    let (_, bare, first, _) = crate::sources::two_commit_repo(&rig.dir);
    let repo = format!("file://{}", bare.display());
    let config = rig.enrol(&["--repo-target", &repo]).await;
    let me = alice
        .runners(leasehold::wire::Tier::Personal)
        .await
        .unwrap()
        .remove(0);
    alice
        .set_repo_target(me.id, me.repo_targets[0].id, true)
        .await
        .unwrap();
    let r = rig.runner(&config, &["--job-user", "nobody"], &[]);
    let source = format!("{repo}@{first}");
    let out = rig
        .submit_wait(&[
            "--source",
            &source,
            "--",
            "sh",
            "-c",
            "id -u; cat file; echo changed > file && git rev-parse HEAD",
        ])
        .await;
    let nobody = nix::unistd::User::from_name("nobody").unwrap().unwrap();
    assert_eq!(out.code, Some(0), "{out:?}\nrunner log:\n{}", r.log());
    assert_eq!(
        out.stdout,
        format!("{}\nv1\n{first}\n", nobody.uid),
        "runs as the job user in its checkout of exactly the commit"
    );
}

/// Row 13: as root, a runner with no sandbox and no job user refuses to start, naming
/// `--unconfined`; with it, it starts and warns at start what a job can reach.
#[tokio::test]
async fn as_root_an_unconfined_runner_refuses_to_start_unless_told_and_then_says_what_jobs_reach() {
    if !crate::support::require("root", root()) {
        return;
    }
    let rig = RunnerRig::new(TestApp::spawn().await, "contain-refuse").await;
    let (config, mut refused) = rig.start_runner(&[], &[]).await;
    assert!(!refused.exit(LONG).await.success());
    let log = refused.log();
    assert!(log.contains("refusing to start"), "{log}");
    assert!(log.contains("--unconfined"), "says how to go on: {log}");
    assert!(
        log.contains("--sandbox bubblewrap"),
        "and the safe ways: {log}"
    );

    let mut r = rig.runner(&config, &["--unconfined"], &[]);
    let log = connected(&r).await;
    let warning = log
        .lines()
        .find(|l| l.contains("WARN") && l.contains("UNCONFINED"))
        .unwrap_or_else(|| panic!("a warning at start: {log}"));
    for reach in ["token", "every file", "environment", "cgroup"] {
        assert!(warning.contains(reach), "names {reach}: {warning}");
    }
    r.signal(Signal::SIGTERM);
    assert!(r.exit(LONG).await.success(), "{}", r.log());
}

/// Row 13, `leasehold dev`: run as root in a 0700 directory (a root checkout), its local
/// runner runs jobs as `nobody`, never as root, and `job submit --wait -- echo hello` prints
/// hello.
#[tokio::test]
async fn leasehold_dev_as_root_runs_its_jobs_as_nobody() {
    use tokio::io::AsyncBufReadExt;
    if !crate::support::require("root", root()) {
        return;
    }
    let dir = TempDir::new("contain-dev");
    let checkout = dir.join("checkout");
    std::fs::create_dir_all(&checkout).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&checkout, std::fs::Permissions::from_mode(0o700)).unwrap();
    let log = std::fs::File::create(dir.join("dev.log")).unwrap();
    let mut dev = tokio::process::Command::new(crate::procs::BIN)
        .args(["dev", "--listen", "127.0.0.1:0"])
        .current_dir(&checkout)
        .env_remove("LEASEHOLD_SERVER")
        .env_remove("LEASEHOLD_API_KEY")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(dev.stdout.take().unwrap()).lines();
    let (mut url, mut key, mut data) = (None, None, None);
    let read = async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if let Some(rest) = line.strip_prefix("leasehold dev is running at ") {
                url = rest.split_whitespace().next().map(str::to_owned);
            } else if let Some(rest) = line.strip_prefix("PostgreSQL data: ") {
                data = rest.split_whitespace().next().map(str::to_owned);
            } else if line.starts_with("ak_") {
                key = Some(line);
                break;
            }
        }
    };
    tokio::time::timeout(LONG, read).await.unwrap_or_else(|_| {
        panic!(
            "dev did not start: {:?}",
            std::fs::read_to_string(dir.join("dev.log"))
        )
    });
    let (url, key) = (
        url.expect("the URL is printed"),
        key.expect("a key is printed"),
    );
    let out = submit_wait(&url, &key, &["--", "sh", "-c", "echo hello; id -u"]).await;
    let nobody = nix::unistd::User::from_name("nobody").unwrap().unwrap();
    assert_eq!(
        (out.code, out.stdout.clone()),
        (Some(0), format!("hello\n{}\n", nobody.uid)),
        "{out:?}\ndev log:\n{}",
        std::fs::read_to_string(dir.join("dev.log")).unwrap_or_default()
    );
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(dev.id().unwrap() as i32),
        Signal::SIGTERM,
    )
    .unwrap();
    let _ = tokio::time::timeout(LONG, dev.wait()).await;
    // The private PostgreSQL may have been placed outside the checkout (postgres cannot
    // reach it); remove it too.
    if let Some(data) = data.filter(|d| !d.starts_with(checkout.to_str().unwrap())) {
        if let Some(parent) = std::path::Path::new(&data).parent() {
            let _ = std::fs::remove_dir_all(parent);
        }
    }
}

/// `leasehold runner run --config CONFIG EXTRA...` with `HOME` set to `home` and no
/// `--work-dir`, as a root runner started from root's own (0700) home would be.
fn runner_in_home(config: &std::path::Path, home: &std::path::Path, extra: &[&str]) -> Proc {
    let log = config.with_extension(format!("{}.log", Uuid::now_v7().simple()));
    let child = tokio::process::Command::new(crate::procs::BIN)
        .args(["runner", "run", "--config", config.to_str().unwrap()])
        .args(extra)
        .env("HOME", home)
        .env("LEASEHOLD_LOG", "info")
        .env_remove("XDG_STATE_HOME")
        .env_remove("LEASEHOLD_WORK_DIR")
        .env_remove("LEASEHOLD_SERVER")
        .env_remove("LEASEHOLD_API_KEY")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    Proc { child, log }
}

/// Issue 35 rows 6 and 10: as root with `HOME` a 0700 directory and no `--work-dir`, a runner
/// with `--job-user-range`, and one with `--sandbox bubblewrap`, starts and runs a job as an
/// unprivileged uid (the default work directory is outside any home); one given a work
/// directory its job users cannot reach refuses, naming the directory and `--work-dir`.
#[tokio::test]
async fn as_root_with_a_private_home_the_confined_runners_start_and_run_jobs() {
    use std::os::unix::fs::PermissionsExt;
    if !crate::support::require("root", root()) {
        return;
    }
    let rig = RunnerRig::new(TestApp::spawn().await, "contain-home").await;
    let home = rig.dir.join("home");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o700)).unwrap();

    let config = rig.enrol(&[]).await;
    // The rig's work directory, under a directory only root may enter.
    std::fs::set_permissions(rig.dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let mut refused = rig.runner(&config, &["--job-user-range", "61720-61720"], &[]);
    assert!(!refused.exit(LONG).await.success());
    let log = refused.log();
    assert!(log.contains("refusing to start"), "{log}");
    assert!(log.contains("--work-dir"), "names the flag: {log}");
    assert!(
        log.contains(rig.dir.path().to_str().unwrap()),
        "names the directory: {log}"
    );
    std::fs::set_permissions(rig.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();

    let mut r = runner_in_home(&config, &home, &["--job-user-range", "61720-61720"]);
    let out = rig.sh("id -u; pwd").await;
    assert_eq!(out.code, Some(0), "{out:?}\nrunner log:\n{}", r.log());
    assert!(
        out.stdout.starts_with("61720\n/var/lib/leasehold/work/"),
        "{out:?}"
    );
    r.signal(Signal::SIGTERM);
    assert!(r.exit(LONG).await.success(), "{}", r.log());

    if !crate::support::require("bubblewrap", crate::runner_e2e::bwrap_unusable()) {
        return;
    }
    let config = rig.enrol(&[]).await;
    let mut r = runner_in_home(&config, &home, &["--sandbox", "bubblewrap"]);
    let out = rig.sh("id -u").await;
    let nobody = nix::unistd::User::from_name("nobody").unwrap().unwrap();
    assert_eq!(
        (out.code, out.stdout.clone()),
        (Some(0), format!("{}\n", nobody.uid)),
        "{out:?}\nrunner log:\n{}",
        r.log()
    );
    r.signal(Signal::SIGTERM);
    assert!(r.exit(LONG).await.success(), "{}", r.log());
}

/// Issue 35 row 13: `runner connect` onto an existing configuration refuses, naming the
/// file and `--force`, and leaves it as it was; with `--force` it replaces it.
#[tokio::test]
async fn runner_connect_never_silently_replaces_a_configuration() {
    let rig = RunnerRig::new(TestApp::spawn().await, "contain-connect").await;
    let config = rig.enrol(&[]).await;
    let before = std::fs::read(&config).unwrap();
    let code = |rig: &RunnerRig| {
        let alice = rig.alice.clone();
        async move {
            alice
                .create_join_code(&leasehold::wire::CreateJoinCode {
                    tier: leasehold::wire::Tier::Personal,
                    ttl_s: None,
                    ephemeral: None,
                })
                .await
                .unwrap()
                .code
        }
    };
    let url = rig.url();
    let first = code(&rig).await;
    let path = config.to_str().unwrap();
    let out = crate::procs::runner_connect(&[&first, "--server", &url, "--config", path]).await;
    assert_ne!(out.code, Some(0), "{out:?}");
    assert!(
        out.stderr.contains(path) && out.stderr.contains("--force"),
        "{out:?}"
    );
    assert_eq!(std::fs::read(&config).unwrap(), before, "left as it was");
    let out =
        crate::procs::runner_connect(&[&first, "--server", &url, "--config", path, "--force"])
            .await;
    assert_eq!(
        out.code,
        Some(0),
        "the refusal did not burn the code: {out:?}"
    );
    assert_ne!(std::fs::read(&config).unwrap(), before, "replaced");
}

/// Issue 35 row 7: with `--job-user-range`, what one job left outside its directory never
/// reaches the next job given the same uid: its files in `/tmp`, `/var/tmp` and `/dev/shm`
/// (even in a directory it made unreadable to itself), a link it planted to a root-only file
/// (the link goes, the file stays untouched), and its System V shared memory, semaphores and
/// message queues are gone before the next job starts.
#[tokio::test]
async fn a_uid_of_the_range_reaches_its_next_job_with_nothing_the_last_one_left() {
    use std::os::unix::fs::PermissionsExt;
    if !crate::support::require("root", root()) {
        return;
    }
    let uid = 61740;
    let rig = RunnerRig::new(TestApp::spawn().await, "contain-leftovers").await;
    let (_config, r) = rig
        .start_runner(&[], &["--job-user-range", &format!("{uid}-{uid}")])
        .await;
    let tag = format!("lh-leftover-{}", Uuid::now_v7().simple());
    // A root-only file the job links to: clearing must not follow the link.
    let guarded = rig.dir.join("root-only");
    std::fs::write(&guarded, "root's").unwrap();
    std::fs::set_permissions(&guarded, std::fs::Permissions::from_mode(0o600)).unwrap();

    let a = rig
        .sh(&format!(
            "set -e; umask 077; id -u; \
             echo secret > /dev/shm/{tag}; echo secret > /var/tmp/{tag}; \
             mkdir -p /tmp/{tag}/deep; echo secret > /tmp/{tag}/deep/f; chmod 000 /tmp/{tag}/deep /tmp/{tag}; \
             ln -s {g} /tmp/{tag}-link; \
             ipcmk -M 4096 >/dev/null; ipcmk -S 1 >/dev/null; ipcmk -Q >/dev/null; echo left",
            g = guarded.display(),
        ))
        .await;
    assert_eq!(
        (a.code, a.stdout.clone()),
        (Some(0), format!("{uid}\nleft\n")),
        "{a:?}\nrunner log:\n{}",
        r.log()
    );

    let b = rig
        .sh(&format!(
            "id -u; for f in /dev/shm/{tag} /var/tmp/{tag} /tmp/{tag} /tmp/{tag}-link; do \
               [ -e \"$f\" ] || [ -L \"$f\" ] && echo \"found $f\"; done; \
             ipcs -m -s -q | awk '$3 == \"{uid}\" {{ print \"ipc\", $0 }}'; exit 0"
        ))
        .await;
    assert_eq!(b.code, Some(0), "{b:?}\nrunner log:\n{}", r.log());
    assert_eq!(
        b.stdout,
        format!("{uid}\n"),
        "the same uid, and nothing of job A's"
    );
    for leftover in [
        format!("/dev/shm/{tag}"),
        format!("/var/tmp/{tag}"),
        format!("/tmp/{tag}"),
        format!("/tmp/{tag}-link"),
    ] {
        assert!(
            std::fs::symlink_metadata(&leftover).is_err(),
            "{leftover} is still there"
        );
    }
    assert_eq!(ipc_objects_of(uid), Vec::<String>::new());
    assert_eq!(std::fs::read_to_string(&guarded).unwrap(), "root's");
    let meta = std::fs::metadata(&guarded).unwrap();
    assert_eq!(
        (
            std::os::unix::fs::MetadataExt::uid(&meta),
            meta.permissions().mode() & 0o777
        ),
        (0, 0o600),
        "the linked file keeps its owner and mode"
    );
}

/// The System V IPC objects (`/proc/sysvipc`) whose owner or creator is `uid`.
fn ipc_objects_of(uid: u32) -> Vec<String> {
    let mut found = Vec::new();
    for kind in ["shm", "sem", "msg"] {
        let text = std::fs::read_to_string(format!("/proc/sysvipc/{kind}")).unwrap();
        let mut lines = text.lines();
        let header: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
        let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
        let (owner, creator) = (col("uid"), col("cuid"));
        for line in lines {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields[owner] == uid.to_string() || fields[creator] == uid.to_string() {
                found.push(format!("{kind}: {line}"));
            }
        }
    }
    found
}

/// Issue 46 row 2 (v1.3 "What a job inherits"): a runner started holding more than 0, 1 and 2
/// (its configuration on descriptor 8, as `8<runner.json` leaves it, and one end of a socket
/// pair on 9) starts its jobs with 0, 1 and 2 only, standard input `/dev/null`, in every
/// confinement mode: as root `--unconfined`, `--job-user`, `--job-user-range` and
/// `--sandbox bubblewrap` (as another user, the runner's own user unconfined).
#[tokio::test]
async fn a_job_starts_with_descriptors_0_1_2_only_whatever_the_runner_was_started_with() {
    let as_root = nix::unistd::geteuid().is_root();
    let mut modes: Vec<(&str, Vec<&str>)> = vec![(
        "unconfined",
        if as_root {
            vec!["--unconfined"]
        } else {
            vec![]
        },
    )];
    if crate::support::require("root", root()) {
        modes.push(("job user", vec!["--job-user", "nobody"]));
        // A range no other test uses: two runners given one uid wait on each other's claim.
        modes.push(("uid range", vec!["--job-user-range", "61750-61753"]));
    }
    if crate::support::require("bubblewrap", crate::runner_e2e::bwrap_unusable()) {
        modes.push(("bubblewrap", vec!["--sandbox", "bubblewrap"]));
    }
    let rig = RunnerRig::new(TestApp::spawn().await, "contain-fds").await;
    // The job lists its shell's descriptors by number (a listing that opens the directory
    // would show its own), then tries to read descriptor 8.
    // No command substitution in the loop: its pipe would be the shell's own descriptor.
    let script = "for n in $(seq 0 63); do [ -e /proc/$$/fd/$n ] && \
                  { printf 'fd %s ' $n; readlink /proc/$$/fd/$n; }; done; \
                  cat <&8 && echo read-fd-8; exit 0";
    for (mode, run) in modes {
        let config = rig.enrol(&[]).await;
        let (mine, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        let held = vec![
            (8, std::fs::File::open(&config).unwrap().into()),
            (9, std::os::fd::OwnedFd::from(theirs)),
        ];
        let r = crate::procs::runner_holding(&config, &rig.dir.join("work"), &run, &[], held);
        drop(mine);
        let out = rig.sh(script).await;
        assert_eq!(
            out.code,
            Some(0),
            "{mode}: {out:?}\nrunner log:\n{}",
            r.log()
        );
        let fds: Vec<&str> = out
            .stdout
            .lines()
            .filter(|l| l.starts_with("fd "))
            .collect();
        assert_eq!(fds.len(), 3, "{mode}: only 0, 1, 2: {fds:?}\n{}", r.log());
        assert_eq!(fds[0], "fd 0 /dev/null", "{mode}: standard input");
        assert!(
            fds[1].starts_with("fd 1 ") && fds[2].starts_with("fd 2 "),
            "{mode}: {fds:?}"
        );
        assert!(!out.stdout.contains("read-fd-8"), "{mode}: {out:?}");
        assert!(
            !out.stdout.contains("rnr_"),
            "{mode}: the token leaked: {out:?}"
        );
        // A payload's `stdin` is still the job's standard input.
        let fed = rig
            .submit_wait(&["--stdin", "fed-input", "--", "sh", "-c", "cat; echo"])
            .await;
        assert_eq!(fed.stdout.trim(), "fed-input", "{mode}: {fed:?}");
        drop(r);
    }
}
