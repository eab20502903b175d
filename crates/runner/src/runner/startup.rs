//! What a runner checks and sets up before its first lease: who its jobs run as, its work
//! directory, the sandbox and job-user probes, the containment it can give jobs (and the
//! warnings where it cannot), the orphan reaper, and the first heartbeat that announces it.
//!
//! Invariant: a runner that cannot confine its jobs as asked refuses to start (a root runner
//! with nothing to confine them needs `--unconfined`), and it never leases before the service
//! has accepted its token.

use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context};
use tokio::time::Instant;
use tokio_util::task::AbortOnDropHandle;

use super::sandbox::DEFAULT_PATH;
use super::servers::Servers;
use super::workdir::{self, JobUser, WorkRoot};
use super::{contain, heartbeat_body, Options, Sandbox, Users};

/// Why a root runner with nothing to confine its jobs refuses to start.
pub const REFUSE_UNCONFINED: &str = "refusing to start: this runner runs as root and nothing \
     would confine its jobs (they would run as root: read this runner's token and environment, \
     every file, every process); run them with --sandbox bubblewrap, --job-user USER or \
     --job-user-range FIRST-LAST, or pass --unconfined to run them as root anyway";

/// What a job can reach where containment does not hold, one warning line each, for the
/// start; empty where it holds.
fn exposure(
    root: bool,
    sandboxed: bool,
    users: &Users,
    capacity: i64,
    cgroups: bool,
) -> Vec<String> {
    let mut said = Vec::new();
    match users {
        _ if sandboxed => {}
        Users::Runner if root => said.push(
            "UNCONFINED: jobs run as root with every capability: a job can read this runner's \
             token and configuration, every file on this machine, the environment (secrets) of \
             every process including other jobs, write anywhere, move itself out of its \
             cgroup, kill anything and sniff local traffic"
                .to_owned(),
        ),
        Users::Runner => said.push(format!(
            "jobs run as this runner's own user (uid {}) without a sandbox: a job can read this \
             runner's token and configuration and every file that user can, the environment \
             (secrets) of the runner's other jobs, write their directories, signal them, and \
             move its processes out of its cgroup where that user may write the runner's \
             cgroup; use --sandbox bubblewrap, or run the runner as root with --job-user-range",
            nix::unistd::Uid::effective()
        )),
        Users::Shared(u) if capacity > 1 => said.push(format!(
            "jobs share the uid of --job-user {} ({}) and up to {capacity} run at once: a job \
             can read the environment (secrets) of another job running at the same time (and \
             of any other process of that user, other runners' jobs included), signal it and \
             write its directory; use --job-user-range for a uid per job",
            u.name, u.uid
        )),
        Users::Shared(u) => said.push(format!(
            "jobs run as --job-user {} ({}), shared with anything else running as that user \
             (other runners' jobs included): a job can read their environment and signal \
             them; use --job-user-range for uids of this runner's alone",
            u.name, u.uid
        )),
        Users::Pool(_) => {}
    }
    if !cgroups && !sandboxed && !matches!(users, Users::Pool(_)) {
        said.push(
            "cgroup v2 is not writable here: a process a job detaches (setsid) with a cleared \
             environment outlives the job"
                .to_owned(),
        );
    }
    said
}

/// What [`confine`] set up for the jobs.
pub(super) struct Confined {
    pub(super) work: WorkRoot,
    pub(super) sandbox: Sandbox,
    pub(super) cgroups: Option<contain::Cgroups>,
    pub(super) users: Users,
    /// How jobs are contained, for the start's log line.
    containment: String,
}

/// Decide who jobs run as, open the work directory, and prove the sandbox and the job user
/// confine jobs as asked; warn of what a job can still reach.
///
/// # Errors
/// Nothing would confine a root runner's jobs (without `--unconfined`), a job user needs root,
/// or the work directory, the uid range or a probe fails.
pub(super) async fn confine(
    opts: &Options,
    capacity: i64,
    holder: &super::holder::Holder,
) -> anyhow::Result<Confined> {
    let config = &opts.config;
    let root = nix::unistd::Uid::effective().is_root();
    let sandboxed = opts.sandbox != Sandbox::None;
    // As root, a sandboxed job still runs as an unprivileged uid: uid 0 in the sandbox's
    // namespace is root outside, owner of every root-owned file.
    let job_users = match &opts.job_users {
        workdir::JobUsers::Runner if root && sandboxed => {
            workdir::JobUsers::Shared(workdir::JobUser::lookup("nobody").context(
                "as root, --sandbox bubblewrap runs jobs as an unprivileged user and there is \
                 no `nobody`: name one with --job-user or --job-user-range",
            )?)
        }
        other => other.clone(),
    };
    if root && !sandboxed && job_users == workdir::JobUsers::Runner && !opts.unconfined {
        bail!(REFUSE_UNCONFINED);
    }
    anyhow::ensure!(
        root || job_users == workdir::JobUsers::Runner,
        "--job-user and --job-user-range need the runner to run as root (to start jobs as \
         another user)"
    );
    let users = match job_users {
        workdir::JobUsers::Runner => Users::Runner,
        workdir::JobUsers::Shared(u) => Users::Shared(u),
        workdir::JobUsers::Range { first, last } => Users::Pool(contain::UidPool::open(
            first,
            last,
            capacity as usize,
            std::path::Path::new(contain::UID_LOCKS),
        )?),
    };
    // The user the probes run as: the one jobs run as.
    let probe_user = match &users {
        Users::Runner => None,
        Users::Shared(u) => Some(u.clone()),
        Users::Pool(p) => Some(workdir::JobUser::of_uid(p.uids()[0])),
    };
    if let Users::Pool(pool) = &users {
        // Nothing may run as a uid before a job gets it (a crashed run's leftovers).
        for &uid in pool.uids() {
            contain::kill_uid(uid).await;
        }
    }

    let work = WorkRoot::open(
        &opts.work_dir,
        config.runner_id,
        probe_user.is_some(),
        holder.run(),
        holder.left_behind(),
    )?;
    if let Some(user) = &probe_user {
        reachable(work.path(), user)?;
    }
    let hidden = opts
        .config_path
        .as_ref()
        .and_then(|p| std::fs::canonicalize(p).ok());
    let sandbox = opts.sandbox.clone().hiding(hidden.clone());
    sandbox
        .check(&work, hidden.as_deref(), probe_user.as_ref())
        .await
        .context("refusing to start")?;
    if let Some(user) = &probe_user {
        check_job_user(&work, user, hidden.as_deref())
            .await
            .context("refusing to start")?;
    }

    let cgroups = contain::Cgroups::open(&config.runner_id.to_string());
    for line in exposure(root, sandboxed, &users, capacity, cgroups.is_some()) {
        tracing::warn!("{line}");
    }
    let containment = match (&cgroups, &users) {
        (Some(c), Users::Pool(p)) => format!(
            "a cgroup per job, in {}, and a uid per job ({} held)",
            c.path().display(),
            p.uids().len()
        ),
        (Some(c), _) => format!("a cgroup per job, in {}", c.path().display()),
        (None, Users::Pool(p)) => format!(
            "cgroup v2 not writable: a uid per job ({} held), killed whole at its end",
            p.uids().len()
        ),
        (None, _) if opts.subreaper => {
            "cgroup v2 not writable: process group, subreaper and LEASEHOLD_JOB_ID sweep".into()
        }
        (None, _) => "cgroup v2 not writable: process group and LEASEHOLD_JOB_ID sweep".into(),
    };
    Ok(Confined {
        work,
        sandbox,
        cgroups,
        users,
        containment,
    })
}

/// Become the subreaper of the jobs' orphans and reap them every 2 s until the handle drops.
///
/// # Errors
/// The process cannot become a subreaper.
pub(super) fn reap_orphans() -> anyhow::Result<AbortOnDropHandle<()>> {
    contain::become_subreaper().context("becoming the subreaper of the jobs' processes")?;
    Ok(AbortOnDropHandle::new(tokio::spawn(async {
        let mut tick = tokio::time::interval(Duration::from_secs(2));
        loop {
            tick.tick().await;
            let _ = tokio::task::spawn_blocking(contain::reap_orphans).await;
        }
    })))
}

/// Say who we are (version, capabilities, capacity) and prove the token works.
///
/// # Errors
/// The service refused the token, or no replica answered within a minute.
pub(super) async fn announce(
    servers: &Servers,
    opts: &Options,
    capacity: i64,
    once: bool,
    confined: &Confined,
) -> anyhow::Result<()> {
    let containment = &confined.containment;
    let work = &confined.work;
    let hello = heartbeat_body(opts, capacity);
    let announced = servers
        .call(
            Instant::now() + Duration::from_secs(60),
            Duration::from_secs(10),
            |c| {
                let hello = hello.clone();
                async move { c.runner_heartbeat(&hello).await }
            },
        )
        .await;
    match announced {
        Ok(reply) => tracing::info!(
            runner = %reply.runner.id, label = %reply.runner.label, owner = %reply.runner.owner,
            capacity, sandbox = ?opts.sandbox, %containment, once, work_dir = %work.path().display(),
            "runner connected"
        ),
        Err(e) if e.is_unauthorized() => bail!(
            "the service refused this runner's token: it was revoked, or it is an ephemeral \
             runner whose job has settled; enrol again with `leasehold runner connect`"
        ),
        Err(e) => bail!("cannot reach the service: {e}"),
    }
    Ok(())
}

/// Refuse a work directory `user` cannot reach: every directory above it must let others
/// search it (as root's 0700 home does not), or be `user`'s.
///
/// # Errors
/// A directory above `path` shuts `user` out; the message names it and `--work-dir`.
fn reachable(path: &Path, user: &JobUser) -> anyhow::Result<()> {
    use std::os::unix::fs::MetadataExt;
    for dir in path.ancestors().skip(1) {
        let Ok(meta) = std::fs::metadata(dir) else {
            continue;
        };
        let passes = meta.mode() & 0o001 != 0
            || (meta.uid() == user.uid && meta.mode() & 0o100 != 0)
            || (meta.gid() == user.gid && meta.mode() & 0o010 != 0);
        if !passes {
            bail!(
                "refusing to start: jobs run as {} and cannot reach the work directory {}: {} \
                 (mode {:o}) does not let them through; pass --work-dir with a directory \
                 outside it (as root the default is {})",
                user.name,
                path.display(),
                dir.display(),
                meta.mode() & 0o7777,
                super::cli::ROOT_WORK_DIR
            );
        }
    }
    Ok(())
}

/// Run a probe job as `user`: it must write its work directory and `HOME` and must not be
/// able to read `config` (the runner's token).
///
/// # Errors
/// The job user cannot reach its directory, or can read the configuration.
async fn check_job_user(
    root: &WorkRoot,
    user: &JobUser,
    config: Option<&Path>,
) -> anyhow::Result<()> {
    let dir = root.job_dir("job-user-probe")?;
    dir.hand_to(Some(user)).await?;
    let script = r#"
[ -z "$1" ] || ! cat "$1" >/dev/null 2>&1 || { echo "it can read the runner's configuration $1" >&2; exit 3; }
echo ok > probe && echo ok > "$2/h" || { echo "it cannot write its work directory" >&2; exit 3; }
"#;
    let out = tokio::process::Command::new("/bin/sh")
        .args(["-c", script, "probe"])
        .arg(config.map(Path::as_os_str).unwrap_or_default())
        .arg(&dir.home)
        .current_dir(&dir.work)
        .env_clear()
        .env("PATH", DEFAULT_PATH)
        .uid(user.uid)
        .gid(user.gid)
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .with_context(|| {
            format!(
                "starting a probe job as the job user in {} (pass --work-dir with a directory \
                 that user can reach)",
                dir.work.display()
            )
        })?;
    let wrote = dir.work.join("probe").exists() && dir.home.join("h").exists();
    dir.remove().await;
    if !out.status.success() || !wrote {
        anyhow::bail!(
            "--job-user {} does not keep jobs apart: {} (the work directory's parents must be \
             searchable by that user; the configuration must be readable by the runner only)",
            user.name,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}
