//! `leasehold secrets set|list|delete`: workspace secrets for jobs.
//!
//! Invariant: a value is read from standard input only, never from the command line (where
//! `ps` and shell history would keep it), and never printed.

use std::io::Read;

use anyhow::Context;
use clap::Subcommand;

use super::{print_json, print_table, when, Conn};
use crate::wire;

#[derive(Debug, Subcommand)]
pub enum SecretsCommand {
    /// Create or replace a secret; the value is read from standard input (one trailing newline
    /// is dropped). Needs an admin key.
    Set {
        /// `^[A-Z_][A-Z0-9_]{0,63}$`: jobs see it as this environment variable.
        name: String,
        /// Which runners may receive it: `workspace` (workspace-owned runners only) or `any`
        /// (members' personal runners too).
        #[arg(long, value_parser = ["workspace", "any"], default_value = "workspace")]
        runners: String,
        /// Who may name it in a dispatch: `member` (any member) or `admin` (admins only).
        #[arg(long, value_parser = ["member", "admin"], default_value = "member")]
        dispatch: String,
    },
    /// The workspace's secrets (names and dates; values are never shown).
    List,
    /// Delete a secret; jobs naming it are then rejected `secret_missing`. Needs an admin key.
    Delete { name: String },
}

/// The value on standard input, without one trailing newline.
fn read_value() -> anyhow::Result<String> {
    let mut value = String::new();
    std::io::stdin()
        .read_to_string(&mut value)
        .context("reading the secret's value from standard input")?;
    if value.ends_with('\n') {
        value.pop();
        if value.ends_with('\r') {
            value.pop();
        }
    }
    anyhow::ensure!(
        !value.is_empty(),
        "no value on standard input (e.g. `printf %s \"$TOKEN\" | leasehold secrets set NAME`)"
    );
    Ok(value)
}

/// # Errors
/// The service refused the call or could not be reached, or stdin had no value.
pub async fn run(conn: &Conn, command: SecretsCommand) -> anyhow::Result<i32> {
    let client = conn.client()?;
    match command {
        SecretsCommand::Set {
            name,
            runners,
            dispatch,
        } => {
            let value = read_value()?;
            client
                .put_secret_scoped(&name, &value, Some(&runners), Some(&dispatch))
                .await?;
            if conn.json {
                print_json(&serde_json::json!({ "name": name }));
            } else {
                println!("secret {name} set");
            }
        }
        SecretsCommand::List => {
            let secrets = client.secrets().await?;
            if conn.json {
                print_json(&wire::SecretList { secrets });
                return Ok(0);
            }
            let rows: Vec<Vec<String>> = secrets
                .iter()
                .map(|s| {
                    vec![
                        s.name.clone(),
                        s.runners.clone(),
                        s.dispatch.clone(),
                        when(Some(s.created_at)),
                        when(Some(s.updated_at)),
                    ]
                })
                .collect();
            print_table(
                &["NAME", "RUNNERS", "DISPATCH", "CREATED", "UPDATED"],
                &rows,
            );
        }
        SecretsCommand::Delete { name } => {
            client.delete_secret(&name).await?;
            if conn.json {
                print_json(&serde_json::json!({ "deleted": name }));
            } else {
                println!("secret {name} deleted");
            }
        }
    }
    Ok(0)
}
