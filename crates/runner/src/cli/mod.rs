//! The command line for people and scripts:
//! `leasehold job|runners|join-code|pool|preflight|secrets|events|webhooks`. (The runner's own command line,
//! `leasehold runner connect|run`, lives with the runner.)
//!
//! It speaks only the public contract through [`crate::client`]. Output is for people by
//! default and JSON with `--json`; an error prints the service's message (never a debug dump)
//! and exits non-zero. Credentials come from `--server`/`--key` or `LEASEHOLD_SERVER` /
//! `LEASEHOLD_API_KEY`, and the key is never printed, not even by `--help`; a private CA from
//! `--ca-cert` / `LEASEHOLD_CA_CERT`.

pub mod artifacts;
pub mod events;
pub mod ids;
pub mod jobs;
pub mod operators;
pub mod secrets;
pub mod webhooks;

use std::fmt::Write as _;

use clap::{Args, Subcommand};

use crate::client::{Client, ClientError, Trust};

/// Where to call and as whom; every operator and dispatcher command takes these.
#[derive(Debug, Clone, Args)]
pub struct Conn {
    /// Base URL of the service.
    #[arg(long, env = "LEASEHOLD_SERVER", hide_env_values = true, global = true)]
    pub server: Option<String>,
    /// API key (`ak_...`).
    #[arg(long, env = "LEASEHOLD_API_KEY", hide_env_values = true, global = true)]
    pub key: Option<String>,
    /// Print JSON (the contract's objects) instead of text for people.
    #[arg(long, global = true)]
    pub json: bool,
    /// A PEM file of CA certificates to trust beside the system's, for a server whose
    /// certificate comes from a private CA (or is self-signed: then the certificate itself).
    #[arg(long, env = "LEASEHOLD_CA_CERT", global = true, value_name = "FILE")]
    pub ca_cert: Option<std::path::PathBuf>,
}

impl Conn {
    /// A client for the configured server and key.
    ///
    /// # Errors
    /// The server or the key is not given.
    pub fn client(&self) -> anyhow::Result<Client> {
        let server = self.server.clone().ok_or_else(|| {
            anyhow::anyhow!("no server: pass --server URL or set LEASEHOLD_SERVER")
        })?;
        let server = server_url(&server)?;
        let key = self
            .key
            .clone()
            .ok_or_else(|| anyhow::anyhow!("no API key: pass --key or set LEASEHOLD_API_KEY"))?;
        Client::with_trust(server, Some(key), &Trust::ca(self.ca_cert.clone()))
    }
}

/// `--server` as a base URL: as given when it has a scheme; a bare loopback address
/// (`127.0.0.1:18431`, `localhost:8080`, as `leasehold dev` prints) gets `http://`; any other
/// bare address is refused with the two forms to choose from (an API key is not sent over
/// plain HTTP to another machine on a guess).
///
/// # Errors
/// A bare address that is not a loopback one.
pub fn server_url(given: &str) -> anyhow::Result<String> {
    let given = given.trim();
    if given.contains("://") {
        return Ok(given.to_owned());
    }
    let host = given
        .rsplit_once(':')
        .map_or(given, |(h, _)| h)
        .trim_start_matches('[')
        .trim_end_matches(']');
    let loopback = host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    if loopback {
        return Ok(format!("http://{given}"));
    }
    anyhow::bail!(
        "--server {given} has no scheme: pass https://{given} (or http://{given} for a server \
         without TLS)"
    )
}

/// What a 401 to an API key means, for people: the contract's answer is the same whatever the
/// cause, so name the causes.
const UNAUTHORIZED_HINT: &str = "the service refused the API key (unauthorized): it is \
     mistyped or truncated, revoked, or a key of another server; check --key / \
     LEASEHOLD_API_KEY and --server / LEASEHOLD_SERVER";

/// Flags of [`Conn`] given before the command (`leasehold --json job list`), moved after the
/// command word where clap reads them; everything else is left in order.
pub fn hoist_globals(args: Vec<std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    const VALUED: [&str; 3] = ["--server", "--key", "--ca-cert"];
    let mut moved = Vec::new();
    let mut rest = Vec::new();
    let mut it = args.into_iter();
    if let Some(program) = it.next() {
        rest.push(program);
    }
    while let Some(a) = it.next() {
        let s = a.to_string_lossy();
        if s == "--json" || VALUED.iter().any(|v| s.starts_with(&format!("{v}="))) {
            moved.push(a);
        } else if VALUED.contains(&s.as_ref()) {
            moved.push(a);
            if let Some(v) = it.next() {
                moved.push(v);
            }
        } else {
            rest.push(a);
            rest.extend(it);
            break;
        }
    }
    if moved.is_empty() {
        return rest;
    }
    // Right after the command word (`job`), whose flattened [`Conn`] takes them for every
    // subcommand: never at the end, where `job submit CMD...` would take them as the command's.
    let cut = rest.len().min(2);
    let tail = rest.split_off(cut);
    rest.extend(moved);
    rest.extend(tail);
    rest
}

/// The people's commands, as `main` mounts them.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Dispatch, follow, inspect and cancel jobs.
    Job {
        #[command(flatten)]
        conn: Conn,
        #[command(subcommand)]
        command: jobs::JobCommand,
    },
    /// List and revoke runners.
    Runners {
        #[command(flatten)]
        conn: Conn,
        #[command(subcommand)]
        command: operators::RunnersCommand,
    },
    /// Mint join codes that enrol runners.
    JoinCode {
        #[command(flatten)]
        conn: Conn,
        #[command(subcommand)]
        command: operators::JoinCodeCommand,
    },
    /// How many runners and slots you can dispatch to, and how busy they are.
    Pool {
        #[command(flatten)]
        conn: Conn,
    },
    /// Would a job with these requirements find a runner?
    Preflight {
        #[command(flatten)]
        conn: Conn,
        #[command(flatten)]
        target: jobs::TargetArgs,
        /// A capability the job needs (repeatable).
        #[arg(long = "require", value_name = "CAP")]
        require: Vec<String>,
        /// The job's source, `REPOSITORY_URL@COMMIT_SHA`: is a runner approved for it?
        #[arg(long, value_name = "REPO@SHA")]
        source: Option<String>,
    },
    /// Workspace secrets that jobs receive as environment variables.
    Secrets {
        #[command(flatten)]
        conn: Conn,
        #[command(subcommand)]
        command: secrets::SecretsCommand,
    },
    /// The workspace's job events in commit order, a line each (`--follow` keeps reading).
    Events {
        #[command(flatten)]
        conn: Conn,
        #[command(flatten)]
        args: events::EventsArgs,
    },
    /// Webhooks that receive the workspace's events, signed (admin).
    Webhooks {
        #[command(flatten)]
        conn: Conn,
        #[command(subcommand)]
        command: webhooks::WebhooksCommand,
    },
}

/// Run a command; the result is the process's exit status.
///
/// # Errors
/// Anything that should be reported with [`render_error`] and exit status 1.
pub async fn run(command: Command) -> anyhow::Result<i32> {
    match command {
        Command::Job { conn, command } => jobs::run(&conn, command).await,
        Command::Runners { conn, command } => operators::runners(&conn, command).await,
        Command::JoinCode { conn, command } => operators::join_code(&conn, command).await,
        Command::Pool { conn } => operators::pool(&conn).await,
        Command::Preflight {
            conn,
            target,
            require,
            source,
        } => operators::preflight(&conn, &target, require, source).await,
        Command::Secrets { conn, command } => secrets::run(&conn, command).await,
        Command::Events { conn, args } => events::run(&conn, args).await,
        Command::Webhooks { conn, command } => webhooks::run(&conn, command).await,
    }
}

/// One line for people: the service's own message, or why it could not be reached, with its
/// control characters escaped (it may echo what was pasted or what a server answered).
pub fn render_error(e: &anyhow::Error) -> String {
    crate::wire::input::escaped(&render_chain(e))
}

/// [`render_error`] before escaping.
fn render_chain(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        if let Some(c) = cause.downcast_ref::<ClientError>() {
            match c {
                ClientError::Api { status, .. } if *status == reqwest::StatusCode::UNAUTHORIZED => {
                    let _ = write!(out, "{UNAUTHORIZED_HINT}");
                }
                ClientError::Api { code, message, .. } if message == code => {
                    let _ = write!(out, "{message}");
                }
                ClientError::Api { code, message, .. } => {
                    let _ = write!(out, "{message} ({code})");
                }
                ClientError::Transport(t) => {
                    let _ = write!(out, "cannot reach the service: {t}");
                }
                ClientError::Tls(why) => {
                    let _ = write!(out, "cannot reach the service: {why}");
                }
            }
            return out;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        let _ = write!(out, "{cause}");
    }
    out
}

/// Print `value` as pretty JSON on stdout.
pub fn print_json<T: serde::Serialize>(value: &T) {
    println!(
        "{}",
        serde_json::to_string_pretty(value).expect("wire types serialise")
    );
}

/// Print rows as left-aligned columns under `header`.
pub fn print_table(header: &[&str], rows: &[Vec<String>]) {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut s = String::new();
        for (i, (cell, w)) in cells.iter().zip(&widths).enumerate() {
            if i + 1 == cells.len() {
                s.push_str(cell);
            } else {
                let _ = write!(s, "{cell:<w$}  ");
            }
        }
        println!("{}", s.trim_end());
    };
    line(header.to_vec());
    for row in rows {
        line(row.iter().map(String::as_str).collect());
    }
}

/// A timestamp for people: `2026-01-02 15:04:05Z`.
pub fn when(t: Option<chrono::DateTime<chrono::Utc>>) -> String {
    t.map_or_else(
        || "-".into(),
        |t| t.format("%Y-%m-%d %H:%M:%SZ").to_string(),
    )
}
