//! One leased job from lease to report: heartbeat, work directory, execution, output, result.
//!
//! Invariants: the lease heartbeat and the output shipper are owned by the job (abort-on-drop
//! handles), so neither outlives it and a dead job never keeps its lease alive. When the
//! service says the job is no longer ours (409 or 404 on a heartbeat or events call, or the
//! runner heartbeat lists it as cancelled), the process group is killed at once and nothing
//! more is reported: the fence would refuse it, and the job belongs to someone else now. A
//! payload the runner cannot understand is reported with `fail`; anything that ran (or could
//! not start) with `complete`. On release (draining past its deadline) the command is killed
//! and the lease handed back with `release`, so another runner takes the job at once. A job's
//! secrets reach only its command's environment and are masked in its output; a job with a
//! source runs only in a checkout of exactly its commit, or fails.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;
use tokio_util::task::AbortOnDropHandle;

use super::executor::{self, Execution};
use super::output::{self, Output};
use super::servers::{CallError, Servers};
use super::{Shared, Stopper};
use crate::wire::LeasedJob;

/// How long a terminal report is retried across replicas before the runner gives up (the
/// lease then lapses and the job is re-delivered).
const REPORT_PATIENCE: Duration = Duration::from_secs(600);
/// One attempt of a short call.
const ATTEMPT: Duration = Duration::from_secs(20);

/// What became of a job, for the runner's log and its `--once` exit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobEnd {
    Completed,
    Failed,
    /// The service took it back (cancelled, superseded); nothing was reported.
    Lost,
    /// Handed back while draining.
    Released,
    /// No replica took the report in time.
    Unreported,
}

/// Renew the lease every `interval` until dropped; fire `lost` when the service says the job
/// is not ours any more.
async fn heartbeat(
    servers: Arc<Servers>,
    job: LeasedJob,
    lost: CancellationToken,
    interval: Duration,
) {
    let mut tick = tokio::time::interval_at(Instant::now() + interval, interval);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let deadline = Instant::now() + interval;
        let r = servers
            .call(
                deadline,
                interval.max(Duration::from_secs(1)),
                |c| async move { c.heartbeat_job(job.id, job.epoch).await },
            )
            .await;
        match r {
            Ok(_) => {}
            Err(e) if gone(&e) => {
                tracing::warn!(job = %job.id, reason = e.code().unwrap_or("?"), "lease lost; stopping the job");
                lost.cancel();
                return;
            }
            Err(e) => tracing::warn!(job = %job.id, error = %e, "heartbeat failed; retrying"),
        }
    }
}

/// The answers that mean "this job is not yours": 409 (terminal or superseded), 404 (not
/// visible any more) and 401 (the runner itself was revoked).
fn gone(e: &CallError) -> bool {
    e.is_conflict() || e.is_unauthorized() || e.code() == Some("not_found")
}

/// Run `job` to its end and report it.
pub async fn run(shared: Arc<Shared>, job: LeasedJob, stopper: Stopper) -> JobEnd {
    let id = job.id;
    let lost = CancellationToken::new();
    shared.track(id, job.epoch, &lost).await;
    let end = run_tracked(&shared, job, &lost, &stopper).await;
    shared.untrack(id);
    tracing::info!(job = %id, end = ?end, "job done");
    end
}

async fn run_tracked(
    shared: &Arc<Shared>,
    job: LeasedJob,
    lost: &CancellationToken,
    stopper: &Stopper,
) -> JobEnd {
    let servers = shared.servers.clone();
    let interval = Duration::from_millis(job.heartbeat_interval_ms.max(100));
    let _heartbeat = AbortOnDropHandle::new(tokio::spawn(heartbeat(
        servers.clone(),
        job.clone(),
        lost.clone(),
        interval,
    )));

    let spec = match crate::wire::command::parse(&job.kind, &job.payload) {
        Ok(spec) => spec,
        Err(message) => {
            tracing::warn!(job = %job.id, %message, "cannot run this job; reporting failure");
            return settle(shared, lost, &job, Settle::Fail(message))
                .await
                .map_or(JobEnd::Unreported, |_| JobEnd::Failed);
        }
    };
    // The program only: arguments may carry secrets.
    tracing::info!(job = %job.id, attempt = job.attempt, program = %spec.argv[0], "job started");
    // The uid this job runs as; with a range, one no other live job has.
    let slot = match &shared.users {
        super::Users::Pool(pool) => match pool.take() {
            Some(slot) => Some(slot),
            None => {
                tracing::error!(job = %job.id, "no free uid in --job-user-range; releasing the job");
                release(&servers, &job).await;
                return JobEnd::Released;
            }
        },
        _ => None,
    };
    let user = match (&shared.users, &slot) {
        (super::Users::Shared(u), _) => Some(u.clone()),
        (_, Some(slot)) => Some(super::workdir::JobUser::of_uid(slot.uid)),
        _ => None,
    };
    if let Some(slot) = &slot {
        // Whatever still runs as this uid, or lies in the shared temporary directories, is no
        // job's: nothing may wait for the next one.
        super::contain::clear_uid(slot.uid).await;
    }
    let dir = match shared.work.job_dir(&job.id.to_string()) {
        Ok(d) => d,
        Err(e) => {
            // The machine, not the job, is at fault: give the job back for another runner.
            tracing::error!(job = %job.id, error = %e, "cannot create a work directory; releasing the job");
            release(&servers, &job).await;
            return JobEnd::Released;
        }
    };

    // Every secret value, and a credential (with the forms git sends it in), is masked in
    // what the job streams.
    let mut masks: Vec<String> = job.secrets.0.values().cloned().collect();
    if let Some(credential) = job.source.as_ref().and_then(|s| s.credential.as_ref()) {
        masks.push(credential.0.clone());
        masks.extend(super::source::credential_masks(&credential.0));
    }
    let out = Output::masking(masks.iter().map(String::as_str));
    if let Some(source) = &job.source {
        let fetched = tokio::select! {
            r = super::source::materialise(source, &dir.work, &dir.home, &shared.git_credential_hosts) => Some(r),
            _ = lost.cancelled() => None,
        };
        match fetched {
            None => {
                dir.remove().await;
                return JobEnd::Lost;
            }
            Some(Ok(())) => {
                tracing::info!(job = %job.id, commit = %source.commit_sha, "source checked out");
            }
            Some(Err(message)) => {
                // Never run anywhere but at the job's commit: the job fails, nothing falls back.
                tracing::warn!(job = %job.id, commit = %source.commit_sha, "cannot check out the job's commit; reporting failure");
                dir.remove().await;
                let message = format!("source: {message}");
                return settle(shared, lost, &job, Settle::Fail(message))
                    .await
                    .map_or(JobEnd::Unreported, |_| JobEnd::Failed);
            }
        }
    }
    // Checked out as the runner (git refuses a repository another user owns), then the whole
    // directory is handed to the job's user.
    if let Err(e) = dir.hand_to(user.as_ref()).await {
        tracing::error!(job = %job.id, error = %e, "cannot hand the work directory to the job's user; releasing the job");
        dir.remove().await;
        release(&servers, &job).await;
        return JobEnd::Released;
    }
    let shipped = CancellationToken::new();
    let shipper = AbortOnDropHandle::new(tokio::spawn({
        let (out, servers, shipped, lost) =
            (out.clone(), servers.clone(), shipped.clone(), lost.clone());
        async move {
            let r = output::ship(out, servers, job.id, job.epoch, shipped).await;
            if r.is_err() {
                lost.cancel();
            }
        }
    }));

    // Stop the command when the job is lost, or when draining runs out of time.
    let stop = CancellationToken::new();
    let execution = {
        let stop_on = {
            let (stop, lost, release) = (stop.clone(), lost.clone(), stopper.release.clone());
            async move {
                tokio::select! {
                    _ = lost.cancelled() => {}
                    _ = release.cancelled() => {}
                }
                stop.cancel();
            }
        };
        let _watch = AbortOnDropHandle::new(tokio::spawn(stop_on));
        // Secrets first, so none can pose as one of the runner's own variables.
        let mut job_env: BTreeMap<String, String> = job.secrets.0.clone();
        job_env.insert("LEASEHOLD_JOB_ID".to_owned(), job.id.to_string());
        job_env.insert("LEASEHOLD_ATTEMPT".to_owned(), job.attempt.to_string());
        job_env.insert("LEASEHOLD_WORKSPACE".to_owned(), job.workspace.clone());
        job_env.insert(
            "LEASEHOLD_RUNNER_ID".to_owned(),
            shared.runner_id.to_string(),
        );
        job_env.insert(
            super::holder::RUN_VAR.to_owned(),
            shared.work.run().to_string(),
        );
        let ctx = executor::Context {
            dir: &dir,
            sandbox: &shared.sandbox,
            cgroups: shared.cgroups.as_ref(),
            job_user: user.as_ref(),
            own_uid: slot.is_some(),
            job_env,
        };
        executor::execute(&spec, ctx, out.clone(), stop).await
    };

    let end = match execution {
        Execution::Stopped if lost.is_cancelled() => JobEnd::Lost,
        Execution::Stopped => {
            drop(shipper);
            release(&servers, &job).await;
            JobEnd::Released
        }
        Execution::Finished(result) => {
            tracing::info!(job = %job.id, outcome = ?result.outcome, exit_code = ?result.exit_code, "command ended");
            // Output first, so a follower sees every line before the job turns terminal.
            shipped.cancel();
            let _ = tokio::time::timeout(Duration::from_secs(60), shipper).await;
            // Artifacts next, whatever the exit: visible before the job settles.
            if !spec.artifacts.is_empty() && !lost.is_cancelled() {
                let up = super::artifacts::upload(
                    &servers,
                    &job,
                    &dir.work,
                    &spec.artifacts,
                    user.as_ref(),
                    lost,
                )
                .await;
                tracing::info!(job = %job.id, files = up.files, skipped = up.skipped, failed = up.failed, "artifacts uploaded");
            }
            if lost.is_cancelled() {
                JobEnd::Lost
            } else {
                let value = serde_json::to_value(&result).expect("a result serialises");
                match settle(shared, lost, &job, Settle::Complete(value)).await {
                    Some(()) => JobEnd::Completed,
                    None if lost.is_cancelled() => JobEnd::Lost,
                    None => JobEnd::Unreported,
                }
            }
        }
    };
    dir.remove().await;
    if let Some(slot) = &slot {
        // Artifacts are up and the directory is gone: nothing of the job needs what it left.
        super::contain::clear_uid(slot.uid).await;
    }
    end
}

/// A job's terminal report.
enum Settle {
    Complete(serde_json::Value),
    Fail(String),
}

/// Report a finished job: in the lease call that follows at once, when the lease loop waits
/// for this job's slot (v1.2 `done`, [`super::mailbox`]), else alone ([`report`]). A report no
/// lease answer carried is sent alone, retried as always. `None` when it was not accepted.
async fn settle(
    shared: &Shared,
    lost: &CancellationToken,
    job: &LeasedJob,
    settle: Settle,
) -> Option<()> {
    let (id, epoch) = (job.id, job.epoch);
    let done = match &settle {
        Settle::Complete(value) => crate::wire::DoneReport {
            id,
            epoch,
            result: Some(value.clone()),
            fail: None,
        },
        Settle::Fail(message) => crate::wire::DoneReport {
            id,
            epoch,
            result: None,
            fail: Some(message.clone()),
        },
    };
    if let Some(receipt) = shared.mailbox.offer(done) {
        if let Ok(status) = receipt.await {
            return match (status.status, status.code.as_deref()) {
                (200, _) => Some(()),
                (409, code) => {
                    tracing::info!(job = %id, reason = code.unwrap_or("?"), "report refused: the job is not ours any more");
                    lost.cancel();
                    None
                }
                (status, code) => {
                    tracing::error!(job = %id, status, code = code.unwrap_or("?"), "the report was refused; its lease will lapse and it will be re-delivered");
                    None
                }
            };
        }
    }
    let servers = &shared.servers;
    match settle {
        Settle::Complete(value) => {
            report(servers, lost, id, |c| {
                let value = value.clone();
                async move { c.complete(id, epoch, value).await }
            })
            .await
        }
        Settle::Fail(message) => {
            report(servers, lost, id, |c| {
                let message = message.clone();
                async move { c.fail(id, epoch, &message).await }
            })
            .await
        }
    }
}

/// Send a terminal report through any replica, patiently. `None` when it was not accepted.
async fn report<T, F, Fut>(
    servers: &Servers,
    lost: &CancellationToken,
    id: uuid::Uuid,
    f: F,
) -> Option<()>
where
    F: FnMut(crate::client::Client) -> Fut,
    Fut: std::future::Future<Output = crate::client::Result<T>>,
{
    let deadline = Instant::now() + REPORT_PATIENCE;
    match servers.call(deadline, ATTEMPT, f).await {
        Ok(_) => Some(()),
        Err(e) if e.is_conflict() => {
            // Settled by someone else (or our own earlier attempt whose answer was lost).
            tracing::info!(job = %id, reason = e.code().unwrap_or("?"), "report refused: the job is not ours any more");
            lost.cancel();
            None
        }
        Err(e) => {
            tracing::error!(job = %id, error = %e, "could not report the job; its lease will lapse and it will be re-delivered");
            None
        }
    }
}

/// Hand the lease back so another runner can take the job now, not after the TTL.
async fn release(servers: &Servers, job: &LeasedJob) {
    let (id, epoch) = (job.id, job.epoch);
    let r = servers
        .call(
            Instant::now() + Duration::from_secs(30),
            ATTEMPT,
            |c| async move { c.release(id, epoch).await },
        )
        .await;
    match r {
        Ok(_) => tracing::info!(job = %id, "released"),
        Err(e) => {
            tracing::warn!(job = %id, error = %e, "release failed; the lease will lapse instead")
        }
    }
}
