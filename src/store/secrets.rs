//! Workspace secrets in the store: sealed values in, sealed values out.
//!
//! Invariant: this module sees only ciphertexts; sealing and opening happen in the API layer
//! with the replica's key ([`crate::domain::sealing`]), so no plaintext ever reaches a statement.

use super::{sql, Result, Store};
use crate::domain::records::SecretInfo;
use crate::domain::sealing::Sealed;

impl Store {
    /// Create or replace a sealed secret.
    pub async fn put_secret(&self, workspace: &str, name: &str, sealed: &Sealed) -> Result<()> {
        self.execute(
            sql::SECRET_PUT,
            &[&workspace, &name, &sealed.nonce, &sealed.ciphertext],
        )
        .await
        .map(drop)
    }

    /// A workspace's secrets by name (never a value).
    pub async fn secrets(&self, workspace: &str) -> Result<Vec<SecretInfo>> {
        let rows = self.query(sql::SECRETS_LIST, &[&workspace]).await?;
        Ok(rows
            .iter()
            .map(|r| SecretInfo {
                name: r.get("name"),
                created_at: r.get("created_at"),
                updated_at: r.get("updated_at"),
            })
            .collect())
    }

    /// `true` when the secret existed.
    pub async fn delete_secret(&self, workspace: &str, name: &str) -> Result<bool> {
        Ok(self
            .execute(sql::SECRET_DELETE, &[&workspace, &name])
            .await?
            == 1)
    }

    /// Of `names`, those that exist in `workspace`.
    pub async fn existing_secrets(&self, workspace: &str, names: &[String]) -> Result<Vec<String>> {
        if names.is_empty() {
            return Ok(Vec::new());
        }
        let rows = self
            .query(sql::SECRETS_EXISTING, &[&workspace, &names])
            .await?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    /// The sealed values of `names` in `workspace` (missing names are simply absent).
    pub async fn sealed_secrets(
        &self,
        workspace: &str,
        names: &[String],
    ) -> Result<Vec<(String, Sealed)>> {
        if names.is_empty() {
            return Ok(Vec::new());
        }
        let rows = self
            .query(sql::SECRETS_SEALED, &[&workspace, &names])
            .await?;
        Ok(rows
            .iter()
            .map(|r| {
                (
                    r.get("name"),
                    Sealed {
                        nonce: r.get("nonce"),
                        ciphertext: r.get("ciphertext"),
                    },
                )
            })
            .collect())
    }

    /// Every sealed value as (workspace, name, sealed), for re-sealing under a new key.
    pub async fn all_sealed_secrets(&self) -> Result<Vec<(String, String, Sealed)>> {
        let rows = self.query(sql::SECRETS_ALL_SEALED, &[]).await?;
        Ok(rows
            .iter()
            .map(|r| {
                (
                    r.get("workspace"),
                    r.get("name"),
                    Sealed {
                        nonce: r.get("nonce"),
                        ciphertext: r.get("ciphertext"),
                    },
                )
            })
            .collect())
    }
}
