//! The reference runner: enrols with a join code, long-polls any replica for leases up to its
//! capacity, runs `command` jobs and reports them, and drains on SIGTERM.
//!
//! It speaks only the public contract, through [`crate::client`] and [`crate::wire`]; nothing
//! of the server is imported, so the runner makes sense on a machine that never runs one.
//!
//! # Layout
//!
//! - [`config`]: the credentials file (`runner.json`, mode 0600).
//! - [`servers`]: failover across several `--server` URLs with jittered back-off.
//! - [`cli`]: `leasehold runner connect|run`, the runner's command line.
//! - [`join_url`]: the payload a join URL (`https://HOST/j/<short>`) hands out, over HTTPS.
//! - [`service`]: the systemd unit `runner connect --service` installs.
//! - [`job`]: one job from lease to report: heartbeat, output, result, release.
//! - [`executor`]: runs a command in its own process group and classifies how it ended.
//! - [`output`]: output lines to batched job events, bounded; the result's tails.
//! - [`source`]: a job's repository commit, checked out exactly.
//! - [`sandbox`]: direct execution or bubblewrap; the job's environment allow-list.
//! - [`contain`]: nothing a job started outlives it (a cgroup per job, a uid per job with a
//!   range, the sweep, the subreaper).
//! - [`holder`]: one process per runner configuration on a machine (a lock beside it).
//! - [`workdir`]: one locked directory per runner, one fresh directory per job.
//! - `startup`: what a runner checks and sets up before its first lease.
//!
//! # Invariants
//!
//! The runner never holds more leases than its capacity; every job task owns its heartbeat;
//! a job the service takes back is killed at once and never reported; on drain no new lease
//! is asked for, running jobs get until the drain deadline, and what is left is released so
//! another runner takes it without waiting for the lease to lapse.

pub mod artifacts;
pub mod cli;
pub mod config;
pub mod contain;
pub mod descriptors;
pub mod executor;
pub mod holder;
pub mod job;
pub mod join_url;
pub mod mailbox;
pub mod output;
pub mod sandbox;
pub mod servers;
pub mod service;
pub mod source;
mod startup;
pub mod workdir;

use std::collections::HashMap;
use std::future::Future;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::AbortOnDropHandle;
use uuid::Uuid;

use crate::wire;
pub use config::RunnerConfig;
use job::JobEnd;
pub use sandbox::Sandbox;
use servers::{CallError, Servers};
pub use startup::REFUSE_UNCONFINED;
use workdir::WorkRoot;

/// How often the runner reports itself (and the jobs it holds) when nothing else is said.
const RUNNER_HEARTBEAT: Duration = Duration::from_secs(20);

/// How `leasehold runner run` was asked to behave.
#[derive(Debug, Clone)]
pub struct Options {
    pub config: RunnerConfig,
    /// The configuration file, when there is one: the sandbox check proves jobs cannot read it.
    pub config_path: Option<PathBuf>,
    /// Parent of the runner's work directory (`<work_dir>/<runner id>/<job id>`).
    pub work_dir: PathBuf,
    pub sandbox: Sandbox,
    /// Take one job, report it, exit. Always so for an ephemeral runner.
    pub once: bool,
    /// How long running jobs may go on after a drain starts before they are released.
    pub drain_timeout: Duration,
    /// Overrides the capacity in the configuration.
    pub capacity: Option<i64>,
    /// `wait_ms` of each lease long-poll.
    pub poll_wait: Duration,
    /// Repository URLs this runner offers to build (`--repo-target`), advertised as git
    /// targets for an operator to approve.
    pub repo_targets: Vec<String>,
    /// Hosts a job's git credential may be sent to (`--git-credential-host`).
    pub git_credential_hosts: Vec<String>,
    /// Who jobs run as: the runner's user, one other unprivileged user (`--job-user`), or a
    /// uid of a range per concurrent job (`--job-user-range`); the latter two need root.
    pub job_users: workdir::JobUsers,
    /// Run jobs even where nothing confines them (root, no sandbox, no job user): without it
    /// such a runner refuses to start.
    pub unconfined: bool,
    /// Become the subreaper of the jobs' orphans and reap them (the runner process alone;
    /// not inside `leasehold dev`, whose other children have waiters of their own).
    pub subreaper: bool,
}

impl Options {
    /// Defaults for a configuration: no sandbox, a 10 minute drain, 30 s long-polls.
    pub fn new(config: RunnerConfig, work_dir: PathBuf) -> Self {
        Self {
            config,
            config_path: None,
            work_dir,
            sandbox: Sandbox::None,
            once: false,
            drain_timeout: Duration::from_secs(600),
            capacity: None,
            poll_wait: Duration::from_secs(30),
            repo_targets: Vec::new(),
            git_credential_hosts: Vec::new(),
            subreaper: false,
            job_users: workdir::JobUsers::Runner,
            unconfined: false,
        }
    }
}

/// Asks a running runner to stop: first drain, then release.
#[derive(Debug, Clone, Default)]
pub struct Stopper {
    /// Stop leasing; let running jobs finish until the drain deadline.
    pub drain: CancellationToken,
    /// Kill what still runs and release its lease now.
    pub release: CancellationToken,
}

impl Stopper {
    pub fn new() -> Self {
        Self::default()
    }

    /// One more stop request (a signal): the first drains, the second releases.
    pub fn escalate(&self) {
        if self.drain.is_cancelled() {
            tracing::info!("second stop request: releasing running jobs now");
            self.release.cancel();
        } else {
            tracing::info!("draining: no new jobs; running jobs may finish");
            self.drain.cancel();
        }
    }
}

/// What the job tasks share.
pub struct Shared {
    pub(crate) servers: Arc<Servers>,
    pub(crate) work: WorkRoot,
    pub(crate) sandbox: Sandbox,
    /// A cgroup per job, where cgroup v2 is writable.
    pub(crate) cgroups: Option<contain::Cgroups>,
    /// Who jobs run as.
    pub(crate) users: Users,
    pub(crate) runner_id: Uuid,
    pub(crate) git_credential_hosts: Vec<String>,
    /// Jobs held now: epoch, and the token that stops the job when the service takes it back.
    running: Mutex<HashMap<Uuid, (i64, CancellationToken)>>,
    /// Woken whenever a job stops being held: a later lease of the same job (a retry handed
    /// straight back to this runner) waits for the earlier one's task to end.
    untracked: tokio::sync::Notify,
    /// Reports of finished jobs for the next lease call (v1.2 `done`).
    pub(crate) mailbox: mailbox::Mailbox,
}

impl Shared {
    /// Hold `id` at `epoch`: `false` while an earlier lease of the same job is still ending
    /// on this runner (reporting, removing its directory), which the two must never share.
    fn try_track(&self, id: Uuid, epoch: i64, lost: &CancellationToken) -> bool {
        let mut running = self.running.lock().expect("running lock");
        if running.contains_key(&id) {
            return false;
        }
        running.insert(id, (epoch, lost.clone()));
        if self.servers.revoked().is_cancelled() {
            lost.cancel();
        }
        true
    }

    /// Hold `id` at `epoch` once no earlier lease of it is held here.
    async fn track(&self, id: Uuid, epoch: i64, lost: &CancellationToken) {
        loop {
            let ended = self.untracked.notified();
            tokio::pin!(ended);
            ended.as_mut().enable();
            if self.try_track(id, epoch, lost) {
                return;
            }
            tracing::info!(job = %id, epoch, "an earlier lease of this job is still ending here; waiting for it");
            ended.await;
        }
    }

    fn untrack(&self, id: Uuid) {
        self.running.lock().expect("running lock").remove(&id);
        self.untracked.notify_waiters();
    }

    fn held(&self) -> Vec<wire::Running> {
        self.running
            .lock()
            .expect("running lock")
            .iter()
            .map(|(id, (epoch, _))| wire::Running {
                id: *id,
                epoch: *epoch,
            })
            .collect()
    }

    fn take_back(&self, ids: &[Uuid]) {
        let running = self.running.lock().expect("running lock");
        for id in ids {
            if let Some((_, lost)) = running.get(id) {
                tracing::warn!(job = %id, "the service no longer assigns this job to us; stopping it");
                lost.cancel();
            }
        }
    }
}

/// Who a runner's jobs run as, once started.
pub(crate) enum Users {
    Runner,
    Shared(workdir::JobUser),
    Pool(contain::UidPool),
}

/// Jobs by how they ended, for the log line at exit.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Summary {
    pub completed: u32,
    pub failed: u32,
    pub lost: u32,
    pub released: u32,
    pub unreported: u32,
}

impl Summary {
    fn add(&mut self, end: JobEnd) {
        match end {
            JobEnd::Completed => self.completed += 1,
            JobEnd::Failed => self.failed += 1,
            JobEnd::Lost => self.lost += 1,
            JobEnd::Released => self.released += 1,
            JobEnd::Unreported => self.unreported += 1,
        }
    }
}

/// The version this runner reports on every heartbeat and lease call.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// How long a runner the service calls outdated waits before asking for a lease again.
const OUTDATED_PAUSE: Duration = Duration::from_secs(60);

fn heartbeat_body(opts: &Options, capacity: i64) -> wire::RunnerHeartbeat {
    wire::RunnerHeartbeat {
        version: Some(VERSION.to_owned()),
        capabilities: Some(opts.config.capabilities.clone()),
        exclusive: Some(opts.config.exclusive.clone()),
        capacity: Some(capacity),
        running: None,
        repo_targets: Some(
            opts.repo_targets
                .iter()
                .map(wire::AdvertisedTarget::git)
                .collect(),
        ),
    }
}

/// Report the runner and the jobs it holds every [`RUNNER_HEARTBEAT`]; stop the jobs the
/// service lists as no longer ours.
async fn runner_heartbeat(shared: Arc<Shared>) {
    let mut tick = tokio::time::interval(RUNNER_HEARTBEAT);
    tick.tick().await;
    loop {
        tick.tick().await;
        let body = wire::RunnerHeartbeat {
            version: Some(VERSION.to_owned()),
            running: Some(shared.held()),
            ..Default::default()
        };
        let r = shared
            .servers
            .call(
                Instant::now() + RUNNER_HEARTBEAT,
                Duration::from_secs(10),
                |c| {
                    let body = body.clone();
                    async move { c.runner_heartbeat(&body).await }
                },
            )
            .await;
        match r {
            Ok(reply) => shared.take_back(&reply.cancelled),
            Err(e) => tracing::warn!(error = %e, "runner heartbeat failed"),
        }
    }
}

/// The job each running task is for.
type Tasks = HashMap<tokio::task::Id, Uuid>;

/// How a job task ended. A task that panicked is logged at warn with its job and the panic's
/// message, and counted as unreported: its lease lapses and the service re-delivers the job.
fn job_end(
    done: Result<(tokio::task::Id, JobEnd), tokio::task::JoinError>,
    tasks: &mut Tasks,
) -> JobEnd {
    match done {
        Ok((task, end)) => {
            tasks.remove(&task);
            end
        }
        Err(e) => {
            let job = tasks.remove(&e.id());
            let why = if e.is_panic() {
                let payload = e.into_panic();
                payload
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_owned())
                    .or_else(|| payload.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "a panic without a message".to_owned())
            } else {
                "cancelled".to_owned()
            };
            let job = job.map_or_else(|| "unknown".to_owned(), |j| j.to_string());
            tracing::warn!(%job, panic = %why, "a job task panicked; its lease will lapse and the job will be re-delivered");
            JobEnd::Unreported
        }
    }
}

/// Run until drained (or, with `once`, until one job is reported).
///
/// # Errors
/// The token is refused (revoked runner), the work directory or sandbox is unusable, or the
/// service stays unreachable at start.
pub async fn run(opts: Options, stopper: Stopper) -> anyhow::Result<Summary> {
    // Nothing the runner was started with reaches a job (v1.3, "What a job inherits").
    descriptors::close_on_exec_above_stderr();
    let config = &opts.config;
    // Before anything is touched (a uid's leftovers, the work directory): a second process of
    // this runner refuses here, whatever its work directory.
    let holder = holder::Holder::acquire(
        &holder::lock_path(
            opts.config_path.as_deref(),
            &opts.work_dir,
            config.runner_id,
        ),
        config.runner_id,
        &opts.work_dir,
    )?;
    let capacity = opts.capacity.unwrap_or(config.capacity).clamp(1, 256);
    let once = opts.once || config.ephemeral;
    let servers = Arc::new(
        Servers::new(&config.servers, Some(&config.token), &config.trust)?.for_runner(
            servers::Identity {
                config_path: opts.config_path.clone(),
                runner_id: config.runner_id,
                ca_cert: config.trust.ca_cert.clone(),
            },
        ),
    );

    let confined = startup::confine(&opts, capacity, &holder).await?;
    // After the probes: the reaper leaves alone only the children spawned by the executor.
    let _reaper = if opts.subreaper {
        Some(startup::reap_orphans()?)
    } else {
        None
    };
    startup::announce(&servers, &opts, capacity, once, &confined).await?;

    let shared = Arc::new(Shared {
        servers: servers.clone(),
        work: confined.work,
        sandbox: confined.sandbox,
        cgroups: confined.cgroups,
        users: confined.users,
        runner_id: config.runner_id,
        git_credential_hosts: opts.git_credential_hosts.clone(),
        running: Mutex::new(HashMap::new()),
        untracked: tokio::sync::Notify::new(),
        mailbox: mailbox::Mailbox::default(),
    });
    let _presence = AbortOnDropHandle::new(tokio::spawn(runner_heartbeat(shared.clone())));
    let _revoked = stop_when_revoked(shared.clone(), stopper.clone());
    let _deadline = release_at_drain_deadline(&stopper, opts.drain_timeout);

    let mut jobs = JobTasks::default();
    let result = lease_until_stopped(
        &opts, capacity, once, &servers, &shared, &stopper, &mut jobs,
    )
    .await;
    let summary = jobs.wait_all().await;
    tracing::info!(?summary, "runner stopped");
    // An ephemeral runner's token dies once its job settled: that is its end, not a refusal.
    let settled_its_one = once && summary.completed + summary.failed > 0 && summary.lost == 0;
    if servers.revoked().is_cancelled() && !settled_its_one {
        anyhow::bail!("{REVOKED}");
    }
    result.map(|()| summary)
}

/// The one line a runner whose token the service refuses exits with.
pub const REVOKED: &str = "this runner was revoked: the service refused its token (401), so      its running jobs were stopped and it exits; enrol it again with a new join code      (`leasehold runner connect CODE`) to run jobs here";

/// On the first 401 of any call (the token is revoked), stop every running job at once
/// without reporting it (no call can succeed) and stop leasing.
fn stop_when_revoked(shared: Arc<Shared>, stopper: Stopper) -> AbortOnDropHandle<()> {
    AbortOnDropHandle::new(tokio::spawn(async move {
        shared.servers.revoked().cancelled().await;
        let running: Vec<CancellationToken> = shared
            .running
            .lock()
            .expect("running lock")
            .values()
            .map(|(_, lost)| lost.clone())
            .collect();
        for lost in running {
            lost.cancel();
        }
        stopper.drain.cancel();
    }))
}

/// After a drain starts, the drain deadline escalates it to a release.
fn release_at_drain_deadline(stopper: &Stopper, timeout: Duration) -> AbortOnDropHandle<()> {
    AbortOnDropHandle::new(tokio::spawn({
        let stopper = stopper.clone();
        async move {
            stopper.drain.cancelled().await;
            tokio::select! {
                _ = tokio::time::sleep(timeout) => {
                    tracing::info!(timeout_ms = timeout.as_millis() as u64, "drain deadline passed; releasing running jobs");
                    stopper.release.cancel();
                }
                _ = stopper.release.cancelled() => {}
            }
        }
    }))
}

/// Lease jobs and start a task for each, up to `capacity` at once, until a drain starts (or,
/// with `once`, one job was taken); errors pause with back-off, and a refused token ends it.
async fn lease_until_stopped(
    opts: &Options,
    capacity: i64,
    once: bool,
    servers: &Servers,
    shared: &Arc<Shared>,
    stopper: &Stopper,
    jobs: &mut JobTasks,
) -> anyhow::Result<()> {
    let mut taken = 0usize;
    let mut failures = 0u32;
    let poll_wait_ms = opts.poll_wait.as_millis().min(60_000) as i64;
    loop {
        jobs.collect_finished();
        if stopper.drain.is_cancelled() || (once && taken > 0) {
            return Ok(());
        }
        // Every slot busy: wait for a job to end, and take the report of one that finishes
        // meanwhile into the lease call that follows at once (v1.2 `done`).
        let mut letters = Vec::new();
        if capacity - (jobs.len() as i64) <= 0 && matches!(shared.users, Users::Pool(_)) {
            // A job's uid is free again only once its task has cleaned up after the report
            // (v1.4: never lease what cannot start at once): wait for a task to end, and let
            // reports go alone rather than lease for a slot whose uid is still held.
            jobs.one_ends_or(&stopper.drain).await;
            continue;
        }
        if capacity - (jobs.len() as i64) <= 0 {
            shared.mailbox.open();
            tokio::select! {
                () = jobs.one_ends_or(&stopper.drain) => {}
                () = shared.mailbox.arrived() => {}
            }
            letters = shared.mailbox.close();
            if letters.is_empty() {
                continue;
            }
        }
        // A job whose report is in hand holds its slot only until this call answers.
        let free = capacity - jobs.len() as i64 + letters.len() as i64;
        let (done, receipts): (Vec<_>, Vec<_>) = letters.into_iter().unzip();
        let req = wire::Lease {
            version: Some(VERSION.to_owned()),
            repo_targets: None,
            exclusive: None,
            // With reports in hand the call does not long-poll: their jobs learn what became
            // of them (and end) at once; the next turn long-polls as usual.
            wait_ms: Some(if done.is_empty() { poll_wait_ms } else { 0 }),
            max_jobs: Some(if once { 1 } else { free }),
            capabilities: None,
            done: (!done.is_empty()).then_some(done),
        };
        let leased = tokio::select! {
            // A job leased in the instant this poll is abandoned is re-delivered after its
            // lease lapses; the epoch fences it.
            _ = stopper.drain.cancelled() => return Ok(()),
            r = servers.call(
                Instant::now() + opts.poll_wait + Duration::from_secs(60),
                opts.poll_wait + Duration::from_secs(15),
                |c| {
                    let req = req.clone();
                    async move { c.lease_reporting(&req).await }
                },
            ) => r,
        };
        // Each carried report learns its entry; one not answered (the call failed) is dropped
        // here, at once (not after the pause a refusal leads to below), and its job sends it
        // alone.
        if let Ok(answer) = &leased {
            for (tx, status) in receipts.into_iter().zip(answer.done.iter()) {
                let _ = tx.send(status.clone());
            }
        } else {
            drop(receipts);
        }
        match leased.map(|l| l.jobs) {
            Ok(list) => {
                failures = 0;
                for j in list {
                    tracing::info!(job = %j.id, epoch = j.epoch, attempt = j.attempt, kind = %j.kind, "leased");
                    taken += 1;
                    let id = j.id;
                    jobs.spawn(id, job::run(shared.clone(), j, stopper.clone()));
                }
            }
            Err(e) if e.is_unauthorized() => {
                return Err(anyhow::anyhow!("{REVOKED}"));
            }
            Err(CallError::Api(e)) if e.code() == Some("runner_outdated") => {
                // Running jobs keep heartbeating and report as usual; no new lease until the
                // runner is upgraded (or the minimum lowered).
                if let crate::client::ClientError::Api { message, .. } = &e {
                    tracing::error!(version = VERSION, running = jobs.len(), "{message}");
                }
                tokio::select! {
                    _ = tokio::time::sleep(OUTDATED_PAUSE) => {}
                    _ = stopper.drain.cancelled() => {}
                }
            }
            Err(e) => {
                let pause = crate::client::backoff(failures);
                failures += 1;
                match &e {
                    CallError::Api(_) => tracing::error!(error = %e, "lease refused"),
                    CallError::Unreachable(_) => tracing::warn!(error = %e, "no replica answered"),
                }
                tokio::select! {
                    _ = tokio::time::sleep(pause) => {}
                    _ = stopper.drain.cancelled() => {}
                }
            }
        }
    }
}

/// The job tasks of a run, the job each is for, and how the finished ones ended.
#[derive(Default)]
struct JobTasks {
    set: JoinSet<JobEnd>,
    tasks: Tasks,
    summary: Summary,
}

impl JobTasks {
    fn len(&self) -> usize {
        self.set.len()
    }

    fn spawn(&mut self, id: Uuid, job: impl Future<Output = JobEnd> + Send + 'static) {
        let task = self.set.spawn(job);
        self.tasks.insert(task.id(), id);
    }

    /// Count the tasks that have ended, without waiting.
    fn collect_finished(&mut self) {
        while let Some(done) = self.set.try_join_next_with_id() {
            self.summary.add(job_end(done, &mut self.tasks));
        }
    }

    /// Wait until one task ends or `drain` fires.
    async fn one_ends_or(&mut self, drain: &CancellationToken) {
        tokio::select! {
            Some(done) = self.set.join_next_with_id() => {
                self.summary.add(job_end(done, &mut self.tasks));
            }
            _ = drain.cancelled() => {}
        }
    }

    /// Wait for every task, and say how their jobs ended.
    async fn wait_all(mut self) -> Summary {
        if !self.set.is_empty() {
            tracing::info!(running = self.set.len(), "waiting for running jobs");
        }
        while let Some(done) = self.set.join_next_with_id().await {
            self.summary.add(job_end(done, &mut self.tasks));
        }
        self.summary
    }
}

/// Enrol with a join code through the first replica that answers, checking certificates with
/// `trust`, and return the configuration to save (with that trust).
///
/// # Errors
/// The code is refused (used, expired, unknown: the contract's opaque 401), a certificate is
/// refused, or no server answers.
pub async fn enroll(
    servers_urls: &[String],
    trust: &crate::client::Trust,
    req: &wire::Enroll,
) -> anyhow::Result<RunnerConfig> {
    let servers = Servers::new(servers_urls, None, trust)?;
    let created = servers
        .call(
            Instant::now() + Duration::from_secs(30),
            Duration::from_secs(10),
            |c| {
                let req = req.clone();
                async move { c.enroll(&req).await }
            },
        )
        .await
        .map_err(|e| match e {
            e if e.is_unauthorized() => {
                anyhow::anyhow!("the join code was refused: it is unknown, already used or expired")
            }
            CallError::Api(crate::client::ClientError::Api { message, .. }) => {
                anyhow::anyhow!("enrolment refused: {message}")
            }
            CallError::Api(crate::client::ClientError::Tls(why)) => {
                anyhow::anyhow!("cannot enrol: {why}")
            }
            e => anyhow::anyhow!("cannot reach the service: {e}"),
        })?;
    Ok(RunnerConfig {
        servers: servers_urls.to_vec(),
        runner_id: created.runner.id,
        token: created.token,
        label: created.runner.label,
        owner: created.runner.owner,
        workspace: created.runner.workspace,
        capacity: i64::from(created.runner.capacity),
        capabilities: created.runner.capabilities,
        exclusive: created.runner.exclusive,
        ephemeral: created.runner.ephemeral,
        trust: trust.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Collects what the fmt subscriber writes.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[tokio::test]
    async fn a_panicked_job_task_is_logged_at_warn_with_its_job() {
        let log = Captured::default();
        let sink = log.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || sink.clone())
            .with_ansi(false)
            .with_max_level(tracing::Level::WARN)
            .finish();
        let _guard = tracing::subscriber::set_default(subscriber);

        let job = Uuid::now_v7();
        let mut jobs: JoinSet<JobEnd> = JoinSet::new();
        let mut tasks = Tasks::new();
        let task = jobs.spawn(async { panic!("the payload parser tripped") });
        tasks.insert(task.id(), job);
        let done = jobs.join_next_with_id().await.expect("one task");
        assert_eq!(job_end(done, &mut tasks), JobEnd::Unreported);
        assert!(tasks.is_empty());

        let text = String::from_utf8(log.0.lock().unwrap().clone()).unwrap();
        assert!(text.contains("WARN"), "{text}");
        assert!(text.contains(&job.to_string()), "names the job: {text}");
        assert!(
            text.contains("the payload parser tripped"),
            "says why: {text}"
        );
    }
}
