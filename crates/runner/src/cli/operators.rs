//! `leasehold runners|join-code|pool|preflight`: what an operator needs to enrol, see and
//! retire runners.
//!
//! Invariant: a join code is printed only by the command that creates it (the contract's one
//! showing), as the whole `leasehold runner connect <payload>` line when the server hands out a
//! connect payload (and, v1.2, the installer line with its join URL); nothing else here prints
//! a secret.

use clap::Subcommand;
use uuid::Uuid;

use super::jobs::TargetArgs;
use super::{print_json, print_table, when, Conn};
use crate::wire::{self, Tier};

#[derive(Debug, Subcommand)]
pub enum RunnersCommand {
    /// Every runner of the workspace you can see, both tiers (TIER: personal or workspace).
    List {
        /// Only your own personal runners.
        #[arg(long, conflicts_with = "workspace")]
        mine: bool,
        /// Kept for scripts: the same as no flag (every runner of the workspace).
        #[arg(long, hide = true)]
        workspace: bool,
    },
    /// Revoke a runner (its id or a unique prefix): its token dies at once, its pool jobs go
    /// back to the queue. A workspace runner needs an admin key; a personal one, its owner.
    Revoke {
        id: String,
        /// Kept for scripts: the runner's tier is found by itself.
        #[arg(long, hide = true)]
        workspace: bool,
    },
    /// The repository targets a runner advertised, and their status.
    Targets { id: Uuid },
    /// Approve a runner's repository target: jobs with that source may run there.
    Approve { id: Uuid, target: Uuid },
    /// Revoke a runner's repository target: no new job with that source runs there.
    RevokeTarget { id: Uuid, target: Uuid },
}

#[derive(Debug, Subcommand)]
pub enum JoinCodeCommand {
    /// Mint a one-time code for `leasehold runner connect`.
    Create {
        /// Enrol a workspace-owned runner (needs an admin key) instead of a personal one.
        #[arg(long)]
        workspace: bool,
        /// The runner takes one job and its token dies once that job settles.
        #[arg(long)]
        ephemeral: bool,
        /// How long the code stays valid (1 s..10m): `10m`, `90s`, or seconds.
        #[arg(long, value_name = "DURATION", value_parser = crate::wire::input::parse_seconds)]
        ttl: Option<f64>,
    },
}

/// `personal` or `workspace`, from a runner's owner (`ws:<workspace>` owns workspace runners).
pub fn tier_of(r: &wire::Runner) -> &'static str {
    if r.owner.starts_with("ws:") {
        "workspace"
    } else {
        "personal"
    }
}

fn tier(workspace: bool) -> Tier {
    if workspace {
        Tier::Workspace
    } else {
        Tier::Personal
    }
}

/// The jobs a runner holds now, each by its id's last 8 characters (as the page shows them;
/// `job get` takes them), or `-`.
fn running(jobs: &[uuid::Uuid]) -> String {
    if jobs.is_empty() {
        return "-".into();
    }
    jobs.iter()
        .map(|id| {
            let id = id.simple().to_string();
            id[id.len() - 8..].to_owned()
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// # Errors
/// The service refused the call or could not be reached.
pub async fn runners(conn: &Conn, command: RunnersCommand) -> anyhow::Result<i32> {
    let client = conn.client()?;
    match command {
        RunnersCommand::List { mine, workspace: _ } => {
            let runners = client.runners(tier(!mine)).await?;
            if conn.json {
                print_json(&wire::RunnerList { runners });
                return Ok(0);
            }
            let rows: Vec<Vec<String>> = runners
                .iter()
                .map(|r| {
                    vec![
                        r.id.to_string(),
                        tier_of(r).to_owned(),
                        r.label.clone(),
                        r.owner.clone(),
                        r.presence.to_string(),
                        format!("{}/{}", r.active_leases, r.capacity),
                        running(&r.current_jobs),
                        if r.capabilities.is_empty() {
                            "-".into()
                        } else if r.exclusive.is_empty() {
                            r.capabilities.join(",")
                        } else {
                            format!(
                                "{} (only jobs requiring {})",
                                r.capabilities.join(","),
                                r.exclusive.join(",")
                            )
                        },
                        match (&r.version, r.outdated) {
                            (Some(v), true) => format!("{v} (outdated)"),
                            (None, true) => "- (outdated)".into(),
                            (Some(v), false) => v.clone(),
                            (None, false) => "-".into(),
                        },
                        when(r.last_seen_at),
                    ]
                })
                .collect();
            print_table(
                &[
                    "ID",
                    "TIER",
                    "LABEL",
                    "OWNER",
                    "PRESENCE",
                    "LEASES",
                    "RUNNING",
                    "CAPABILITIES",
                    "VERSION",
                    "LAST SEEN",
                ],
                &rows,
            );
            Ok(0)
        }
        RunnersCommand::Targets { id } => {
            let runner = client
                .runners(Tier::Workspace)
                .await?
                .into_iter()
                .find(|r| r.id == id)
                .ok_or_else(|| anyhow::anyhow!("no runner {id} in this workspace"))?;
            print_targets(conn, &runner);
            Ok(0)
        }
        RunnersCommand::Approve { id, target } => {
            let runner = client.set_repo_target(id, target, true).await?;
            print_targets(conn, &runner);
            Ok(0)
        }
        RunnersCommand::RevokeTarget { id, target } => {
            let runner = client.set_repo_target(id, target, false).await?;
            print_targets(conn, &runner);
            Ok(0)
        }
        RunnersCommand::Revoke { id, workspace: _ } => {
            let roster = client.runners(Tier::Workspace).await?;
            let id = super::ids::runner(&roster, &id)?;
            let found = roster.iter().find(|r| r.id == id);
            let tier = match found {
                Some(r) if r.owner.starts_with("ws:") => Tier::Workspace,
                Some(r) => {
                    let mine = client.runners(Tier::Personal).await?;
                    if !mine.iter().any(|m| m.id == id) {
                        anyhow::bail!(
                            "runner {id} ({}) is {}'s personal runner: only {} can revoke it",
                            r.label,
                            r.owner,
                            r.owner
                        );
                    }
                    Tier::Personal
                }
                None => anyhow::bail!("no runner {id} in this workspace (already revoked?)"),
            };
            match client.revoke_runner(tier, id).await {
                Ok(()) => {}
                Err(e) if e.status().map(|s| s.as_u16()) == Some(403) => anyhow::bail!(
                    "runner {id} is a workspace runner: revoking it needs an admin key of this \
                     workspace"
                ),
                Err(e) => return Err(e.into()),
            }
            if conn.json {
                print_json(&serde_json::json!({"revoked": id}));
            } else {
                println!(
                    "{} runner {id} revoked",
                    if tier == Tier::Workspace {
                        "workspace"
                    } else {
                        "personal"
                    }
                );
            }
            Ok(0)
        }
    }
}

fn print_targets(conn: &Conn, runner: &wire::Runner) {
    if conn.json {
        print_json(runner);
        return;
    }
    let rows: Vec<Vec<String>> = runner
        .repo_targets
        .iter()
        .map(|t| {
            vec![
                t.id.to_string(),
                t.status.to_string(),
                t.provider.clone(),
                t.repository.clone(),
                t.label.clone().unwrap_or_else(|| "-".into()),
            ]
        })
        .collect();
    print_table(
        &["TARGET", "STATUS", "PROVIDER", "REPOSITORY", "LABEL"],
        &rows,
    );
}

/// # Errors
/// The service refused the call or could not be reached.
pub async fn join_code(conn: &Conn, command: JoinCodeCommand) -> anyhow::Result<i32> {
    let client = conn.client()?;
    let JoinCodeCommand::Create {
        workspace,
        ephemeral,
        ttl,
    } = command;
    let code = client
        .create_join_code(&wire::CreateJoinCode {
            tier: tier(workspace),
            ttl_s: ttl.map(|t| t.round() as i64),
            ephemeral: ephemeral.then_some(true),
        })
        .await?;
    let which = if workspace {
        "a workspace runner (owned by the workspace: it serves --pool workspace, for every \
         member)"
    } else {
        "a personal runner (yours: it serves your --pool personal jobs only); for a workspace \
         runner that serves every member, an admin runs `leasehold join-code create --workspace`"
    };
    if !conn.json {
        eprintln!("this code enrols {which}");
    }
    if conn.json {
        print_json(&code);
    } else if let Some(payload) = &code.connect {
        // The server knows its public URLs: one line to paste on the runner's machine.
        println!("leasehold runner connect {payload}");
        if let Some(url) = &code.url {
            println!("{}", install_line(url, payload));
        }
        eprintln!(
            "valid until {}, once. Paste the line above on the runner's machine.",
            when(Some(code.expires_at)),
        );
    } else {
        println!("{}", code.code);
        eprintln!(
            "valid until {}, once. On the runner's machine:\n  leasehold runner connect {} --server {}",
            when(Some(code.expires_at)),
            code.code,
            client.base()
        );
    }
    Ok(0)
}

/// The one command that installs leasehold on a fresh machine and enrols it with the join URL
/// `url`: `sh -c "$(curl -fsSL https://HOST/install.sh || echo exit 1)" install.sh URL
/// --service`. When the download fails, curl says why (`-S`) and the script sh runs is
/// `exit 1`, so the line fails visibly (`curl ... | sh` ran an empty script and exited 0); the
/// line reads the same in sh, bash, zsh and fish. For a self-signed server (the payload pins its
/// key) curl pins that key instead of checking a CA, and the script hands the pin on to
/// `runner connect`.
pub fn install_line(url: &str, payload: &str) -> String {
    let base = url.rsplit_once("/j/").map_or(url, |(b, _)| b);
    let pin = wire::connect::Connect::decode(payload)
        .ok()
        .and_then(|c| c.pin);
    let (curl, args) = match pin {
        Some(pin) => (
            format!("curl -fsSL -k --pinnedpubkey {pin}"),
            format!("--pin {pin} {url}"),
        ),
        None => ("curl -fsSL".to_owned(), url.to_owned()),
    };
    format!("sh -c \"$({curl} {base}/install.sh || echo exit 1)\" install.sh {args} --service")
}

/// # Errors
/// The service refused the call or could not be reached.
pub async fn pool(conn: &Conn) -> anyhow::Result<i32> {
    let pool = conn.client()?.pool().await?;
    if conn.json {
        print_json(&pool);
        return Ok(0);
    }
    println!(
        "runners  {} online, {} dormant, {} never seen",
        pool.runners.online, pool.runners.dormant, pool.runners.never
    );
    println!(
        "slots    {} of {} busy (online runners)",
        pool.slots.active, pool.slots.capacity
    );
    println!(
        "jobs     {} parked, {} leased",
        pool.jobs.parked, pool.jobs.leased
    );
    Ok(0)
}

/// Exit status 0 when a job would find a runner, 1 when something blocks it.
///
/// # Errors
/// The service refused the call or could not be reached.
pub async fn preflight(
    conn: &Conn,
    target: &TargetArgs,
    require: Vec<String>,
    source: Option<String>,
) -> anyhow::Result<i32> {
    let source = source
        .map(|s| super::jobs::parse_source(&s).map_err(|e| anyhow::anyhow!("--source: {e}")))
        .transpose()?
        .map(serde_json::to_value)
        .transpose()?;
    let report = conn
        .client()?
        .preflight(&wire::Preflight {
            target: target.target(),
            required_capabilities: (!require.is_empty()).then_some(require),
            source,
        })
        .await?;
    if conn.json {
        print_json(&report);
    } else {
        println!("{}", if report.ok { "ok" } else { "blocked" });
        for b in &report.blockers {
            println!("  blocker  {}: {}", b.code, b.message);
        }
        for w in &report.warnings {
            println!("  warning  {}: {}", w.code, w.message);
        }
    }
    Ok(if report.ok { 0 } else { 1 })
}
