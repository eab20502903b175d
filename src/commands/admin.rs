//! `leasehold admin`: operator tasks straight against the database (minting the first API
//! key, re-sealing secrets after a key rotation). Each migrates first, so it works on a fresh
//! database, and prints a key only once, on the last line of standard output.

use std::time::Duration;

use anyhow::Context;
use clap::Subcommand;
use uuid::Uuid;

use crate::domain::credentials::{Kind, Secret};
use crate::domain::sealing::{SealKey, Sealer};
use crate::replica;
use crate::store::Store;

#[derive(Subcommand)]
pub enum AdminCommand {
    /// Mint an API key; the key is the last line of standard output.
    CreateKey {
        #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
        database_url: String,
        #[arg(long)]
        workspace: String,
        #[arg(long)]
        subject: String,
        #[arg(long, value_parser = ["admin", "member"])]
        role: String,
    },
    /// Re-seal every workspace secret with LEASEHOLD_SECRETS_KEY, opening each with it or with
    /// LEASEHOLD_SECRETS_OLD_KEY (the last step of a key rotation).
    ResealSecrets {
        #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
        database_url: String,
        #[arg(
            long,
            env = "LEASEHOLD_SECRETS_KEY",
            hide_env_values = true,
            value_parser = crate::config::SealKeyArg
        )]
        secrets_key: SealKey,
        #[arg(
            long,
            env = "LEASEHOLD_SECRETS_OLD_KEY",
            hide_env_values = true,
            value_parser = crate::config::SealKeyArg
        )]
        secrets_old_key: Option<SealKey>,
    },
}

/// Run an `admin` subcommand; the result is the process's exit status.
///
/// # Errors
/// The database cannot be reached or migrated, or the task fails.
pub async fn run(command: AdminCommand) -> anyhow::Result<i32> {
    match command {
        AdminCommand::ResealSecrets {
            database_url,
            secrets_key,
            secrets_old_key,
        } => {
            replica::migrate_with_patience(&database_url, Duration::from_secs(10)).await?;
            let n = reseal_secrets(&database_url, &secrets_key, secrets_old_key.as_ref()).await?;
            println!("{n} secret(s) re-sealed with the current key");
            Ok(0)
        }
        AdminCommand::CreateKey {
            database_url,
            workspace,
            subject,
            role,
        } => {
            replica::migrate_with_patience(&database_url, Duration::from_secs(10)).await?;
            let key = create_key(&database_url, &workspace, &subject, role == "admin").await?;
            println!("{key}");
            Ok(0)
        }
    }
}

/// Mint an API key for `subject` in `workspace` against `database_url` and return it (shown
/// once).
///
/// # Errors
/// A name is invalid, or the key cannot be stored.
pub async fn create_key(
    database_url: &str,
    workspace: &str,
    subject: &str,
    admin: bool,
) -> anyhow::Result<String> {
    let store = Store::connect(database_url, 1, 90_000)?;
    mint_key(&store, workspace, subject, admin).await
}

/// Mint an API key through `store`: the one way keys are made outside the HTTP API (`admin
/// create-key`, `dev`, the bench and the tests all come here). Returns the key, shown once.
///
/// # Errors
/// A name is invalid, or the key cannot be stored.
pub async fn mint_key(
    store: &Store,
    workspace: &str,
    subject: &str,
    admin: bool,
) -> anyhow::Result<String> {
    anyhow::ensure!(
        crate::domain::owner::is_valid_name(workspace)
            && crate::domain::owner::is_valid_name(subject),
        "workspace and subject must be 1..128 of A-Z a-z 0-9 . _ @ -"
    );
    let key = Secret::generate(Kind::ApiKey);
    store
        .insert_key(Uuid::now_v7(), workspace, subject, admin, key.hash())
        .await
        .context("storing the key")?;
    Ok(key.reveal().to_owned())
}

/// Open every secret with the current or old key and seal it again with the current one.
async fn reseal_secrets(
    database_url: &str,
    key: &SealKey,
    old: Option<&SealKey>,
) -> anyhow::Result<usize> {
    let store = Store::connect(database_url, 1, 90_000)?;
    let sealer = Sealer::new(key, old);
    let all = store.all_sealed_secrets().await?;
    for (workspace, name, sealed) in &all {
        let value = sealer
            .open(workspace, name, sealed)
            .with_context(|| format!("secret {name} of workspace {workspace}"))?;
        store
            .put_secret(
                workspace,
                name,
                &sealer.seal(workspace, name, &value),
                None,
                None,
            )
            .await?;
    }
    Ok(all.len())
}
