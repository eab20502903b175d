//! Runs one command to its end and classifies how it ended.
//!
//! Invariants: the command leads its own process group (bubblewrap's, when sandboxed), runs
//! in a cgroup of its own where cgroups are writable (placed there by the runner before it
//! starts, whatever uid it runs as), and when it ends, times out or is stopped, its cgroup,
//! its whole group and, for a uid of a range, every process of that uid are killed, and then
//! every process still carrying the job's `LEASEHOLD_JOB_ID` (see [`super::contain`]):
//! nothing a job started outlives it, not even what it detached with `setsid` and a cleared
//! environment. The payload's `env` never overrides the `LEASEHOLD_*` variables. A stop
//! request (cancelled, superseded, released) kills the group with SIGKILL at once; a timeout
//! sends SIGTERM, then SIGKILL after [`TERM_GRACE`]. A command that fails,
//! times out or cannot start is a *result* (see [`CommandResult`]), never an error of the
//! runner.

use std::collections::BTreeMap;
use std::io::ErrorKind;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::time::Duration;

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::io::AsyncWriteExt;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::contain;
use super::descriptors;
use super::output::{pump, Output, Stream};
use super::sandbox::{is_executable, which, Sandbox, DEFAULT_PATH};
use super::workdir::JobDir;
use crate::wire::command::{CommandResult, CommandSpec, Outcome};

/// Between SIGTERM and SIGKILL when a command times out.
pub const TERM_GRACE: Duration = Duration::from_secs(5);
/// How long the pipes may stay open and silent after the command ended before the runner
/// stops reading (a process outside the job's reach may hold them open). Time the readers
/// spend held back by a slow server does not count.
const DRAIN_PIPES: Duration = Duration::from_secs(2);

/// How an execution ended.
#[derive(Debug)]
pub enum Execution {
    /// The command ran (or could not start); report this.
    Finished(CommandResult),
    /// `stop` fired and the command's process group was killed; report nothing.
    Stopped,
}

/// Send `signal` to process group `pgid`; a group already gone is fine.
fn signal_group(pgid: i32, signal: Signal) {
    if let Err(e) = killpg(Pid::from_raw(pgid), signal) {
        if e != nix::errno::Errno::ESRCH {
            tracing::warn!(pgid, error = %e, "could not signal the job's process group");
        }
    }
}

/// Kills and removes a job's cgroup when dropped, off the async threads.
struct CgroupGuard(Option<contain::JobCgroup>);

impl Drop for CgroupGuard {
    fn drop(&mut self) {
        if let Some(cg) = self.0.take() {
            tokio::task::spawn_blocking(move || cg.kill_and_remove());
        }
    }
}

/// What a job needs besides its spec.
pub struct Context<'a> {
    pub dir: &'a JobDir,
    pub sandbox: &'a Sandbox,
    /// The user this job runs as, when not the runner's.
    pub job_user: Option<&'a super::workdir::JobUser>,
    /// `job_user`'s uid is this job's alone (a uid of a range): when the job ends, every
    /// process of that uid is killed.
    pub own_uid: bool,
    /// Where each job gets a cgroup, if anywhere.
    pub cgroups: Option<&'a contain::Cgroups>,
    /// `LEASEHOLD_*` variables describing the job.
    pub job_env: BTreeMap<String, String>,
}

fn start_failed(output: &Output, started: Instant, exit_code: i32, message: String) -> Execution {
    output.note(Stream::Stderr, &format!("leasehold: {message}"));
    Execution::Finished(CommandResult {
        outcome: Outcome::StartFailed,
        exit_code: Some(exit_code),
        signal: None,
        timed_out: false,
        duration_ms: started.elapsed().as_millis() as u64,
        stdout_tail: output.tail(Stream::Stdout),
        stderr_tail: output.tail(Stream::Stderr),
        error: Some(message),
    })
}

/// The job's variables: the payload's `env`, then the runner's `LEASEHOLD_*` variables over
/// it. Payload variables named `LEASEHOLD_*` are ignored: they could hide the job's processes
/// from the sweep, or pose as another job.
fn job_environment(
    payload: &BTreeMap<String, String>,
    job: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let mut env: BTreeMap<String, String> = payload
        .iter()
        .filter(|(k, _)| !k.starts_with("LEASEHOLD_"))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    env.extend(job.iter().map(|(k, v)| (k.clone(), v.clone())));
    env
}

/// Where the command starts: the job's `work/`, or `cwd` relative to it (or absolute).
fn working_dir(dir: &JobDir, cwd: Option<&str>) -> PathBuf {
    match cwd {
        None => dir.work.clone(),
        Some(c) => dir.work.join(c),
    }
}

/// Run `spec` until it ends or `stop` fires, streaming its output into `output`.
pub async fn execute(
    spec: &CommandSpec,
    ctx: Context<'_>,
    output: Arc<Output>,
    stop: CancellationToken,
) -> Execution {
    let started = Instant::now();
    let cwd = working_dir(ctx.dir, spec.cwd.as_deref());
    if !cwd.is_dir() {
        return start_failed(
            &output,
            started,
            126,
            format!("working directory {} does not exist", cwd.display()),
        );
    }
    let env = job_environment(&spec.env, &ctx.job_env);
    // bwrap (or the shell that moves a job into its cgroup) would report a missing program
    // as its own failure; find it first, on the PATH the command will see, so the result is
    // classified the same in every mode.
    let program = &spec.argv[0];
    let path = match (env.get("PATH"), ctx.sandbox) {
        (Some(p), _) => p.clone(),
        (None, Sandbox::Bubblewrap { .. }) => DEFAULT_PATH.to_owned(),
        (None, Sandbox::None) => std::env::var("PATH").unwrap_or_else(|_| DEFAULT_PATH.into()),
    };
    let found = if program.contains('/') {
        Some(cwd.join(program)).filter(|p| p.exists())
    } else {
        which(program, &path)
    };
    match found {
        None => {
            return start_failed(
                &output,
                started,
                127,
                format!("cannot start '{program}': not found"),
            )
        }
        Some(p) if !is_executable(&p) => {
            return start_failed(
                &output,
                started,
                126,
                format!("cannot start '{program}': not an executable file"),
            )
        }
        Some(_) => {}
    }
    let launch = match ctx
        .sandbox
        .launch(&spec.argv, &env, &cwd, &ctx.dir.root, &ctx.dir.home)
    {
        Ok(l) => l,
        Err(e) => return start_failed(&output, started, 126, format!("{e:#}")),
    };
    let job_user = ctx.job_user;
    let cgroup = ctx.cgroups.and_then(|c| {
        let name = ctx.dir.root.file_name()?.to_string_lossy().into_owned();
        c.job(&name)
            .map_err(|e| tracing::warn!(error = %e, "no cgroup for this job; its process group and the sweep contain it"))
            .ok()
    });
    let mut cmd = match &cgroup {
        // The command waits until the runner has put it in its cgroup, so nothing it starts
        // is outside.
        Some(_) => {
            let mut c = tokio::process::Command::new("/bin/sh");
            c.arg("-c")
                .arg(contain::WAIT_FOR_GO)
                .arg("leasehold-job")
                .arg(&launch.program);
            c
        }
        None => tokio::process::Command::new(&launch.program),
    };
    let piped_stdin = cgroup.is_some() || spec.stdin.is_some();
    cmd.args(&launch.args)
        .current_dir(&launch.cwd)
        .process_group(0)
        .kill_on_drop(true)
        .stdin(if piped_stdin {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // The runner's own environment (a DATABASE_URL, an API key) is not the job's business, nor
    // its descriptors beyond 0, 1 and 2 (marked close-on-exec at start, and again here for any
    // a library opened since without the flag).
    cmd.env_clear().envs(&launch.env);
    descriptors::close_on_exec_above_stderr();
    if let Some(u) = job_user {
        // Supplementary groups are dropped too (std does so when root sets a uid).
        cmd.uid(u.uid).gid(u.gid);
    }
    // Removed (after killing what is left in it) however this function returns.
    let _cgroup_guard = CgroupGuard(cgroup.clone());
    let mut child = match contain::spawn_tracked(&mut cmd) {
        Ok(c) => c,
        Err(e) => {
            let code = if e.kind() == ErrorKind::NotFound {
                127
            } else {
                126
            };
            return start_failed(
                &output,
                started,
                code,
                format!("cannot start '{}': {e}", spec.argv[0]),
            );
        }
    };
    let mut stdin = child.stdin.take();
    if let Some(cg) = &cgroup {
        let pid = child.id().expect("a just-spawned child has a pid") as i32;
        let placed = cg.adopt(pid);
        let line = if spec.stdin.is_some() {
            contain::GO
        } else {
            contain::GO_WITHOUT_INPUT
        };
        let go = match (placed, stdin.as_mut()) {
            (Ok(()), Some(pipe)) => pipe.write_all(line).await.map_err(|e| e.to_string()),
            (Err(e), _) => Err(format!("cannot move the job into its cgroup: {e}")),
            (Ok(()), None) => Err("no standard input to start the job on".into()),
        };
        if let Err(message) = go {
            signal_group(pid, Signal::SIGKILL);
            let _ = child.wait().await;
            contain::forget(pid);
            return start_failed(&output, started, 126, message);
        }
        if spec.stdin.is_none() {
            // The command reads /dev/null; the pipe is closed.
            stdin = None;
        }
    }
    let pgid = child.id().expect("a just-spawned child has a pid") as i32;
    let marker = ctx
        .job_env
        .get("LEASEHOLD_JOB_ID")
        .map(|id| format!("LEASEHOLD_JOB_ID={id}"));
    // Whatever the command started goes with it, in its group or not.
    let kill_all = || {
        if let Some(cg) = &cgroup {
            cg.kill();
        }
        signal_group(pgid, Signal::SIGKILL);
        if let Some(m) = &marker {
            let n = contain::sweep(m);
            if n > 0 {
                tracing::info!(
                    pgid,
                    killed = n,
                    "killed processes the job left outside its group"
                );
            }
        }
    };
    let own_uid = ctx.own_uid.then_some(job_user).flatten().map(|u| u.uid);
    let mut pipes = JoinSet::new();
    if let (Some(mut stdin), Some(text)) = (stdin, spec.stdin.clone()) {
        pipes.spawn(async move {
            // A command that does not read its input is not an error.
            let _ = stdin.write_all(text.as_bytes()).await;
        });
    }
    if let Some(out) = child.stdout.take() {
        pipes.spawn(pump(out, Stream::Stdout, output.clone()));
    }
    if let Some(err) = child.stderr.take() {
        pipes.spawn(pump(err, Stream::Stderr, output.clone()));
    }

    let timeout = async {
        match spec.timeout {
            Some(t) => tokio::time::sleep(t).await,
            None => std::future::pending().await,
        }
    };
    let mut timed_out = false;
    // `None`: stopped (cancelled, or the runner is going away), before or after a timeout.
    let status: Option<std::io::Result<ExitStatus>> = tokio::select! {
        status = child.wait() => Some(status),
        _ = stop.cancelled() => None,
        _ = timeout => {
            timed_out = true;
            signal_group(pgid, Signal::SIGTERM);
            tokio::select! {
                status = child.wait() => Some(status),
                _ = tokio::time::sleep(TERM_GRACE) => {
                    signal_group(pgid, Signal::SIGKILL);
                    Some(child.wait().await)
                }
                _ = stop.cancelled() => None,
            }
        }
    };
    let Some(status) = status else {
        kill_all();
        let _ = child.wait().await;
        contain::forget(pgid);
        if let Some(uid) = own_uid {
            contain::kill_uid(uid).await;
        }
        pipes.abort_all();
        return Execution::Stopped;
    };
    contain::forget(pgid);
    kill_all();
    if let Some(uid) = own_uid {
        contain::kill_uid(uid).await;
    }
    let duration_ms = started.elapsed().as_millis() as u64;
    // Read what is left; a reader held back by the shipper is making progress, not stuck.
    let mut seen = output.bytes_read();
    loop {
        tokio::select! {
            more = pipes.join_next() => if more.is_none() { break },
            _ = tokio::time::sleep(DRAIN_PIPES) => {
                let now = output.bytes_read();
                if now == seen && !output.is_held_back() {
                    pipes.abort_all();
                    output.note(
                        Stream::Stderr,
                        "leasehold: a process outside the job's reach kept its output open; stopped reading",
                    );
                    break;
                }
                seen = now;
            }
        }
    }
    let (exit_code, signal) = match &status {
        Ok(s) => (s.code(), s.signal()),
        Err(_) => (None, None),
    };
    let outcome = if timed_out {
        Outcome::TimedOut
    } else if signal.is_some() {
        Outcome::Signalled
    } else if exit_code == Some(0) {
        Outcome::Succeeded
    } else {
        Outcome::Failed
    };
    Execution::Finished(CommandResult {
        outcome,
        exit_code,
        signal,
        timed_out,
        duration_ms,
        stdout_tail: output.tail(Stream::Stdout),
        stderr_tail: output.tail(Stream::Stderr),
        error: status
            .err()
            .map(|e| format!("waiting for the command: {e}")),
    })
}
