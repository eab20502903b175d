//! `leasehold job submit|get|cancel|retry|logs|list`: dispatch a command and follow it.
//! This file holds the commands; [`follow`] streams a job's events to its end and [`render`]
//! prints jobs and events for people.
//!
//! Invariant: `submit --wait` exits with the command's own exit status as a shell would
//! report it (see [`exit_code`]), so scripts can use it in place of running the command.

mod follow;
mod render;

use anyhow::Context;
use clap::{Args, Subcommand, ValueEnum};
use serde_json::Value;
use uuid::Uuid;

use self::follow::follow_job;
use self::render::{age, command_text, describe, exit_text, Printer, Show};
use super::{print_json, print_table, Conn};
use crate::client::{Client, JobQuery};
use crate::wire::command::{self, CommandSpec};
use crate::wire::{self, Job, Target};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PoolArg {
    Personal,
    Workspace,
    /// Either tier, whichever leases first (v1.1).
    Any,
}

/// Where a job goes: a pool (personal by default) or a named runner.
#[derive(Debug, Clone, Args)]
pub struct TargetArgs {
    /// The pool to dispatch to.
    #[arg(long, value_enum, conflicts_with = "runner")]
    pub pool: Option<PoolArg>,
    /// A named runner instead of a pool.
    #[arg(long, value_name = "ID")]
    pub runner: Option<Uuid>,
}

impl TargetArgs {
    pub fn target(&self) -> Target {
        match (self.runner, self.pool) {
            (Some(runner_id), _) => Target::Runner { runner_id },
            (None, Some(PoolArg::Workspace)) => Target::Pool {
                pool: crate::wire::PoolName::Workspace,
            },
            (None, Some(PoolArg::Any)) => Target::Pool {
                pool: crate::wire::PoolName::Any,
            },
            (None, _) => Target::Pool {
                pool: crate::wire::PoolName::Personal,
            },
        }
    }
}

#[derive(Debug, Clone, Args)]
pub struct SubmitArgs {
    #[command(flatten)]
    pub target: TargetArgs,
    /// A capability the runner must advertise (repeatable).
    #[arg(long = "require", value_name = "CAP")]
    pub require: Vec<String>,
    /// Higher runs first (-1000..1000).
    #[arg(long, allow_negative_numbers = true)]
    pub priority: Option<i64>,
    /// Follow the job: stream its output, show its state changes on stderr, and exit with the
    /// command's exit code.
    #[arg(long)]
    pub wait: bool,
    /// With --wait: dispatch and wait even when preflight finds no runner that can take the
    /// job (one may enrol later). Without it such a wait dispatches nothing and exits 1.
    #[arg(long, requires = "wait")]
    pub wait_anyway: bool,
    /// Environment variable for the command, `NAME=VALUE` (repeatable).
    #[arg(long = "env", value_name = "NAME=VALUE")]
    pub env: Vec<String>,
    /// Working directory, relative to the job's work directory.
    #[arg(long)]
    pub cwd: Option<String>,
    /// Kill the command after this long: `90s`, `5m`, `1h`, `500ms`, or seconds.
    #[arg(long, value_name = "DURATION", value_parser = crate::wire::input::parse_seconds)]
    pub timeout: Option<f64>,
    /// Text written to the command's standard input.
    #[arg(long)]
    pub stdin: Option<String>,
    /// Leases taken before a job whose runners keep vanishing fails (1..100).
    #[arg(long)]
    pub max_attempts: Option<i64>,
    /// Dispatch at most once per key in the workspace.
    #[arg(long)]
    pub idempotency_key: Option<String>,
    /// Park the job again up to N times (0..10) when an attempt ends in a reason of
    /// `--retry-on` (v1.2).
    #[arg(long, value_name = "N")]
    pub retry: Option<i64>,
    /// What retries it, comma-separated: `runner_failed`, `exit_code`, `lease_lost` (default
    /// all three).
    #[arg(
        long,
        value_name = "REASONS",
        requires = "retry",
        value_delimiter = ','
    )]
    pub retry_on: Vec<String>,
    /// Wait this long before the first retry, doubling for each next one (capped at an hour):
    /// `500ms`, `5s`, `2m`, `1h`, or milliseconds.
    #[arg(long, value_name = "DELAY", requires = "retry", value_parser = parse_delay_ms)]
    pub retry_delay: Option<i64>,
    /// Dispatch N copies in one call (`POST /v1/jobs/batch`: all parked or none), each with
    /// `MATRIX_INDEX` (0..N-1) in its environment; prints one id a line. With
    /// `--idempotency-key K`, copy i uses `K-i`.
    #[arg(long, value_name = "N", conflicts_with = "wait",
          value_parser = clap::value_parser!(u16).range(1..=1000))]
    pub count: Option<u16>,
    /// Files under the job's work directory (globs: `*`, `?`, `**`) the runner uploads as
    /// artifacts once the command ends, whatever its exit (repeatable).
    #[arg(long = "artifact", value_name = "GLOB")]
    pub artifacts: Vec<String>,
    /// A workspace secret the command receives as an environment variable (repeatable).
    #[arg(long = "secret", value_name = "NAME")]
    pub secrets: Vec<String>,
    /// Run in a checkout of exactly this commit: `REPOSITORY_URL@COMMIT_SHA` (40 hex).
    #[arg(long, value_name = "REPO@SHA")]
    pub source: Option<String>,
    /// The secret holding the credential git uses to fetch `--source` (never exported to the
    /// command).
    #[arg(long, value_name = "NAME", requires = "source")]
    pub source_credential: Option<String>,
    /// The command and its arguments, after `--` (or from the first word that is not an
    /// option of `submit`: everything after it is the command's). An unknown option before
    /// the command is an error, never the command (issue 47: `--wiat` once ran as one).
    #[arg(required = true, trailing_var_arg = true, value_name = "ARGV")]
    pub argv: Vec<String>,
}

#[derive(Debug, Subcommand)]
pub enum JobCommand {
    /// Dispatch a command; prints the job id (with --wait, follows it instead).
    Submit(Box<SubmitArgs>),
    /// Show a job (its id, or a unique prefix of it such as the 8 characters the page shows).
    Get { id: String },
    /// Cancel a job; a running command is killed by its runner at its next heartbeat.
    Cancel { id: String },
    /// Run a job again (v1.2): a finished job is parked again; a running one is superseded
    /// (its runner kills the command) and parked again.
    Retry {
        id: String,
        /// Retry at most once per key (a repeat shows the job as it is).
        #[arg(long)]
        idempotency_key: Option<String>,
    },
    /// Print a job's output.
    Logs {
        id: String,
        /// Keep printing until the job ends.
        #[arg(long, short)]
        follow: bool,
    },
    /// List a job's artifacts (every attempt's, newest first), or download them (`--download
    /// DIR [PATH...]`, sha256 checked: each path's newest file, or attempt `--epoch N`'s).
    Artifacts {
        id: String,
        /// Only the files of the attempt leased at this epoch.
        #[arg(long, value_name = "N")]
        epoch: Option<i64>,
        /// Download into this directory (every artifact, or the PATHs named).
        #[arg(long, value_name = "DIR")]
        download: Option<std::path::PathBuf>,
        /// Artifact paths to download (with --download).
        #[arg(requires = "download", value_name = "PATH")]
        paths: Vec<String>,
    },
    /// List the workspace's jobs, newest first: state, outcome, exit code, age, command.
    List {
        /// Only jobs in this state.
        #[arg(long, value_parser = clap::builder::PossibleValuesParser::new(
            wire::JobState::ALL.iter().map(|s| s.as_str())))]
        state: Option<String>,
        /// Only jobs that ended so (v1.3): a failed command is `completed` with outcome
        /// `failed`.
        #[arg(long, value_parser = clap::builder::PossibleValuesParser::new(
            wire::Outcome::ALL.iter().map(|o| o.as_str())))]
        outcome: Option<String>,
        /// At most this many (1..500).
        #[arg(long)]
        limit: Option<u32>,
        /// Jobs after this id (the `next` of the previous page).
        #[arg(long)]
        after: Option<Uuid>,
        /// Oldest first instead.
        #[arg(long)]
        oldest_first: bool,
        /// Only jobs whose command holds TEXT (in any case), or whose id is TEXT or starts or
        /// ends with it (the 8 characters the page shows).
        #[arg(long, value_name = "TEXT")]
        search: Option<String>,
    },
}

/// Run a `job` subcommand.
///
/// # Errors
/// The service refused the call or could not be reached.
pub async fn run(conn: &Conn, command: JobCommand) -> anyhow::Result<i32> {
    let client = conn.client()?;
    match command {
        JobCommand::Submit(args) => submit(&client, conn.json, *args).await,
        JobCommand::Artifacts {
            id,
            epoch,
            download,
            paths,
        } => {
            let id = super::ids::job(&client, &id).await?;
            super::artifacts::run(&client, conn.json, id, epoch, download.as_deref(), &paths).await
        }
        JobCommand::Get { id } => {
            let id = super::ids::job(&client, &id).await?;
            let job = client.job(id).await?;
            if conn.json {
                print_json(&job);
            } else {
                describe(&job);
            }
            Ok(0)
        }
        JobCommand::Cancel { id } => {
            let id = super::ids::job(&client, &id).await?;
            let job = client.cancel(id).await?;
            if conn.json {
                print_json(&job);
            } else if job.state == "cancelled" {
                println!("job {id} cancelled");
            } else {
                println!("job {id} had already ended: {}", job.state);
            }
            Ok(0)
        }
        JobCommand::Retry {
            id,
            idempotency_key,
        } => {
            let id = super::ids::job(&client, &id).await?;
            let job = client.retry_job(id, idempotency_key.as_deref()).await?;
            if conn.json {
                print_json(&job);
            } else {
                println!(
                    "job {id} parked again (retries {}, epoch {})",
                    job.retries, job.epoch
                );
            }
            Ok(0)
        }
        JobCommand::Logs { id, follow } => {
            let id = super::ids::job(&client, &id).await?;
            let mode = if conn.json { Show::Json } else { Show::Output };
            if follow {
                follow_job(&client, id, mode).await?;
            } else {
                let mut after = 0;
                let mut printer = Printer::new(mode, id);
                loop {
                    let page = client.events(id, after, 0).await?;
                    if page.events.is_empty() {
                        break;
                    }
                    for e in &page.events {
                        printer.print(e);
                    }
                    after = page.next;
                }
            }
            Ok(0)
        }
        JobCommand::List {
            state,
            outcome,
            limit,
            after,
            oldest_first,
            search,
        } => {
            let query = JobQuery {
                state: state.as_deref(),
                outcome: outcome.as_deref(),
                limit,
                after,
                newest_first: !oldest_first,
                search: search.as_deref(),
            };
            let page = client.list_jobs(&query).await?;
            if conn.json {
                print_json(&page);
                return Ok(0);
            }
            let now = chrono::Utc::now();
            let rows: Vec<Vec<String>> = page
                .jobs
                .iter()
                .map(|j| {
                    vec![
                        j.id.to_string(),
                        j.state.to_string(),
                        j.outcome.map_or_else(|| "-".into(), |o| o.to_string()),
                        exit_text(j),
                        age(now, j.created_at),
                        crate::wire::input::escaped(&command_text(j)),
                    ]
                })
                .collect();
            print_table(&["ID", "STATE", "OUTCOME", "EXIT", "AGE", "COMMAND"], &rows);
            if page.jobs.is_empty() && state.as_deref() == Some("failed") && outcome.is_none() {
                // State `failed` is a job the runner could not run; a command that exited
                // non-zero completed, and its outcome is `failed`.
                eprintln!(
                    "no job in state failed; a command that exited non-zero is completed with \
                     outcome failed: leasehold job list --outcome failed"
                );
            }
            if let Some(next) = page.next {
                let mut again = format!("leasehold job list --after {next}");
                for (flag, value) in [("--state", &state), ("--outcome", &outcome)] {
                    if let Some(v) = value {
                        again.push_str(&format!(" {flag} {v}"));
                    }
                }
                if oldest_first {
                    again.push_str(" --oldest-first");
                }
                if let Some(text) = &search {
                    again.push_str(" --search ");
                    again.push_str(&crate::wire::input::escaped(&command::shell_word(text)));
                }
                eprintln!("more: {again}");
            }
            Ok(0)
        }
    }
}

/// A `--retry-delay`: a number of milliseconds, or one with a unit (`ms`, `s`, `m`, `h`).
///
/// # Errors
/// Not a non-negative whole number with one of those units.
pub fn parse_delay_ms(text: &str) -> Result<i64, String> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(split);
    let n: i64 = digits
        .parse()
        .map_err(|_| format!("{text:?}: expected a delay such as 500ms, 5s, 2m or 1h"))?;
    let scale = match unit {
        "" | "ms" => 1,
        "s" => 1000,
        "m" => 60_000,
        "h" => 3_600_000,
        _ => return Err(format!("{text:?}: the unit must be ms, s, m or h")),
    };
    n.checked_mul(scale)
        .ok_or_else(|| format!("{text:?}: too long"))
}

/// `REPOSITORY@SHA` as a git source; the last `@` separates them (URLs may hold one).
///
/// # Errors
/// No `@`, or an empty side.
pub fn parse_source(text: &str) -> Result<wire::Source, String> {
    match text.rsplit_once('@') {
        Some((repo, sha)) if !repo.is_empty() && !sha.is_empty() => Ok(wire::Source {
            provider: "git".into(),
            repository: repo.to_owned(),
            commit_sha: sha.to_owned(),
            git_ref: None,
            credential_secret: None,
        }),
        _ => Err("expected REPOSITORY_URL@COMMIT_SHA".into()),
    }
}

fn payload(args: &SubmitArgs) -> anyhow::Result<Value> {
    anyhow::ensure!(
        args.argv.first().is_some_and(|p| !p.trim().is_empty()),
        "the command is empty: give the program to run after `--` (e.g. `-- make test`)"
    );
    let mut spec = CommandSpec::new(args.argv.clone());
    for pair in &args.env {
        let (k, v) = pair
            .split_once('=')
            .with_context(|| format!("--env {pair}: expected NAME=VALUE"))?;
        spec.env.insert(k.to_owned(), v.to_owned());
    }
    spec.cwd.clone_from(&args.cwd);
    if let Some(t) = args.timeout {
        spec.timeout = Some(command::timeout_from_secs(t).with_context(|| {
            format!(
                "--timeout must be a positive number of seconds, at most {}",
                command::MAX_TIMEOUT_S
            )
        })?);
    }
    spec.stdin.clone_from(&args.stdin);
    spec.artifacts.clone_from(&args.artifacts);
    Ok(spec.to_payload())
}

async fn submit(client: &Client, json_out: bool, args: SubmitArgs) -> anyhow::Result<i32> {
    let mut req = wire::Dispatch::new(args.target.target(), payload(&args)?);
    if !args.require.is_empty() {
        req.required_capabilities = Some(args.require.clone());
    }
    req.priority = args.priority;
    req.max_attempts = args.max_attempts;
    if let Some(limit) = args.retry {
        let mut policy = serde_json::json!({ "limit": limit });
        if !args.retry_on.is_empty() {
            policy["on"] = serde_json::json!(args.retry_on);
        }
        if let Some(d) = args.retry_delay {
            policy["delay_ms"] = serde_json::json!(d);
        }
        req.retry = Some(policy);
    }
    if !args.secrets.is_empty() {
        req.secrets = Some(args.secrets.clone());
    }
    if let Some(text) = &args.source {
        let mut source = parse_source(text).map_err(|e| anyhow::anyhow!("--source: {e}"))?;
        source.credential_secret = args.source_credential.clone();
        req.source = Some(serde_json::to_value(source)?);
    }
    if let Some(n) = args.count {
        return submit_many(client, json_out, &req, n, args.idempotency_key.as_deref()).await;
    }
    if args.wait && !args.wait_anyway {
        refuse_a_hopeless_wait(client, &req).await?;
    }
    let job = match &args.idempotency_key {
        Some(key) => client.dispatch_idempotent(&req, key).await?.1,
        None => client.dispatch(&req).await?,
    };
    warn_waiting(client, &job).await;
    if !args.wait {
        if json_out {
            print_json(&job);
        } else {
            println!("{}", job.id);
        }
        return Ok(0);
    }
    let mode = if json_out {
        Show::Quiet
    } else {
        Show::Everything
    };
    let job = tokio::select! {
        job = follow_job(client, job.id, mode) => job?,
        _ = tokio::signal::ctrl_c() => {
            eprintln!(
                "leasehold: stopped following; the job goes on (leasehold job cancel {})",
                job.id
            );
            return Ok(130);
        }
    };
    if json_out {
        print_json(&job);
    }
    Ok(exit_code(&job))
}

/// Say on stderr why a job just dispatched will wait, when a runner cannot take it now
/// (v1.4 `waiting`; a retry's delay and a busy pool are not worth a warning at dispatch), with
/// the near miss when there is one.
async fn warn_waiting(client: &Client, job: &Job) {
    if !matches!(
        job.waiting.as_deref(),
        Some("no_matching_runner" | "no_runner_online")
    ) {
        return;
    }
    if let Some(text) = render::waiting_text(job) {
        eprintln!("leasehold: warning: job {} waits: {text}", job.id);
    }
    if job.waiting.as_deref() == Some("no_matching_runner") {
        let target = if job.runner_id != "*" {
            None
        } else if job.owner.starts_with("ws:") {
            Some(crate::wire::PoolName::Workspace)
        } else {
            Some(crate::wire::PoolName::Personal)
        };
        if let Some(hint) = near_miss(client, target, &job.required_capabilities).await {
            eprintln!("leasehold: {hint}");
        }
    }
}

/// A runner of the other tier the caller could dispatch to that has what the job requires:
/// "your personal runner box2 has gpu; --pool personal, or enrol it with a workspace code".
/// `None` when there is none, or the lists cannot be read (this is only a hint).
async fn near_miss(
    client: &Client,
    pool: Option<crate::wire::PoolName>,
    required: &[String],
) -> Option<String> {
    use crate::wire::{PoolName, Tier};
    let fits = |r: &crate::wire::Runner| required.iter().all(|c| r.capabilities.contains(c));
    let needs = if required.is_empty() {
        "a runner".to_owned()
    } else {
        required.join(", ")
    };
    match pool? {
        PoolName::Workspace => {
            let mine = client.runners(Tier::Personal).await.ok()?;
            let r = mine.iter().find(|r| fits(r))?;
            Some(format!(
                "your personal runner {} ({}) has {needs}: dispatch with --pool personal, or \
                 enrol it again with a workspace join code (an admin's `leasehold join-code \
                 create --workspace`) to serve the workspace pool",
                r.label,
                &r.id.to_string()[..8]
            ))
        }
        PoolName::Personal => {
            let roster = client.runners(Tier::Workspace).await.ok()?;
            let r = roster
                .iter()
                .find(|r| r.owner.starts_with("ws:") && fits(r))?;
            Some(format!(
                "the workspace runner {} ({}) has {needs}: dispatch with --pool workspace",
                r.label,
                &r.id.to_string()[..8]
            ))
        }
        PoolName::Any => None,
    }
}

/// `submit --wait` for a job no runner can take would wait forever (or until the no-runner
/// clock fails it): ask preflight first and, when it finds a blocker, say so and dispatch
/// nothing.
async fn refuse_a_hopeless_wait(client: &Client, req: &wire::Dispatch) -> anyhow::Result<()> {
    let report = client
        .preflight(&wire::Preflight {
            target: req.target.clone(),
            required_capabilities: req.required_capabilities.clone(),
            source: req.source.clone(),
        })
        .await?;
    if report.ok {
        return Ok(());
    }
    let why: Vec<String> = report
        .blockers
        .iter()
        .map(|b| format!("{}: {}", b.code, b.message))
        .collect();
    let pool = match &req.target {
        wire::Target::Pool { pool } => Some(*pool),
        wire::Target::Runner { .. } => None,
    };
    let required = req.required_capabilities.clone().unwrap_or_default();
    let hint = near_miss(client, pool, &required)
        .await
        .map_or_else(String::new, |h| format!(" ({h})"));
    anyhow::bail!(
        "no runner can take this job ({}); nothing was dispatched{hint}. Enrol a runner for \
         this target (leasehold join-code), or pass --wait-anyway to dispatch and wait for one",
        why.join("; ")
    )
}

/// `submit --count N`: N copies of `req` in one batch dispatch, copy i told its index.
async fn submit_many(
    client: &Client,
    json_out: bool,
    req: &wire::Dispatch,
    n: u16,
    idempotency_key: Option<&str>,
) -> anyhow::Result<i32> {
    let items = (0..n)
        .map(|i| {
            let mut one = req.clone();
            if let Some(Value::Object(payload)) = one.payload.as_mut() {
                let env = payload
                    .entry("env")
                    .or_insert_with(|| Value::Object(Default::default()));
                if let Value::Object(env) = env {
                    env.insert("MATRIX_INDEX".into(), Value::String(i.to_string()));
                }
            }
            wire::BatchItem {
                dispatch: one,
                idempotency_key: idempotency_key.map(|k| format!("{k}-{i}")),
            }
        })
        .collect();
    let jobs = client.dispatch_batch(items).await?;
    // A batch answer is a list (its `waiting` may be null): ask for the first copy's.
    if let Some(first) = jobs.first() {
        if let Ok(job) = client.job(first.id).await {
            warn_waiting(client, &job).await;
        }
    }
    for job in &jobs {
        if json_out {
            print_json(job);
        } else {
            println!("{}", job.id);
        }
    }
    Ok(0)
}

/// The exit status `submit --wait` ends with: the command's own as a shell reports it (see
/// [`command::exit_status`]); 1 when the job did not complete.
pub fn exit_code(job: &Job) -> i32 {
    if job.state != "completed" {
        return 1;
    }
    command::exit_status(job.result.as_ref().unwrap_or(&Value::Null))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn job(state: &str, result: Value) -> Job {
        serde_json::from_value(json!({
            "id": Uuid::nil(), "workspace": "w", "owner": "o", "runner_id": "*", "state": state,
            "kind": "command", "payload": {}, "required_capabilities": [], "priority": 0,
            "epoch": 1, "attempts": 1, "max_attempts": 3, "created_at": "2026-01-01T00:00:00Z",
            "leased_at": null, "finished_at": null, "result": result, "error": null,
            "provenance": null, "billing_tenant": null
        }))
        .unwrap()
    }

    #[test]
    fn retry_delays_take_units() {
        assert_eq!(parse_delay_ms("250"), Ok(250));
        assert_eq!(parse_delay_ms("5s"), Ok(5000));
        assert_eq!(parse_delay_ms("2m"), Ok(120_000));
        assert_eq!(parse_delay_ms("1h"), Ok(3_600_000));
        assert!(parse_delay_ms("5 days").is_err());
        assert!(parse_delay_ms("-1s").is_err());
    }

    #[test]
    fn exit_codes_follow_the_shell() {
        assert_eq!(exit_code(&job("completed", json!({"exit_code": 3}))), 3);
        assert_eq!(
            exit_code(&job("completed", json!({"exit_code": null, "signal": 9}))),
            137
        );
        assert_eq!(
            exit_code(&job(
                "completed",
                json!({"exit_code": null, "signal": 15, "timed_out": true})
            )),
            124
        );
        assert_eq!(exit_code(&job("cancelled", Value::Null)), 1);
    }
}
