//! Workspace secrets in the store: sealed values in, sealed values out.
//!
//! Invariant: this module sees only ciphertexts; sealing and opening happen in the API layer
//! with the replica's key ([`crate::domain::sealing`]), so no plaintext ever reaches a statement.

use super::{sql, Result, Store};
use crate::domain::sealing::Sealed;
use crate::store::records::SecretInfo;

/// A secret's scope, as a dispatch checks it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretScope {
    pub name: String,
    /// Only workspace-owned runners may receive it (`runners = 'workspace'`).
    pub workspace_runners_only: bool,
    /// Only admins may name it in a dispatch (`dispatch = 'admin'`).
    pub admin_dispatch_only: bool,
}

/// A secret's sealed value for a lease, with its scope.
pub struct SealedSecret {
    pub name: String,
    pub sealed: Sealed,
    /// Only workspace-owned runners may receive it (`runners = 'workspace'`).
    pub workspace_only: bool,
    /// Only a job an admin dispatched (or last retried) may receive it (`dispatch = 'admin'`).
    pub admin_only: bool,
}

impl Store {
    /// Create or replace a sealed secret with its scope: `runners` (`workspace` | `any`) and
    /// `dispatch` (`member` | `admin`), each `None` to keep the secret's (a new one takes
    /// `workspace` and `member`).
    pub async fn put_secret(
        &self,
        workspace: &str,
        name: &str,
        sealed: &Sealed,
        runners: Option<&str>,
        dispatch: Option<&str>,
    ) -> Result<()> {
        self.execute(
            sql::SECRET_PUT,
            &[
                &workspace,
                &name,
                &sealed.nonce,
                &sealed.ciphertext,
                &runners,
                &dispatch,
            ],
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
                runners: r.get("runners"),
                dispatch: r.get("dispatch"),
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

    /// Of `names`, those that exist in `workspace`, with their scope.
    pub async fn existing_secrets(
        &self,
        workspace: &str,
        names: &[String],
    ) -> Result<Vec<SecretScope>> {
        if names.is_empty() {
            return Ok(Vec::new());
        }
        let rows = self
            .query(sql::SECRETS_EXISTING, &[&workspace, &names])
            .await?;
        Ok(rows
            .iter()
            .map(|r| SecretScope {
                name: r.get("name"),
                workspace_runners_only: r.get::<_, &str>("runners") == "workspace",
                admin_dispatch_only: r.get::<_, &str>("dispatch") == "admin",
            })
            .collect())
    }

    /// The sealed values of `names` in `workspace` (missing names are simply absent), each
    /// with its scope.
    pub async fn sealed_secrets(
        &self,
        workspace: &str,
        names: &[String],
    ) -> Result<Vec<SealedSecret>> {
        if names.is_empty() {
            return Ok(Vec::new());
        }
        let rows = self
            .query(sql::SECRETS_SEALED, &[&workspace, &names])
            .await?;
        Ok(rows
            .iter()
            .map(|r| SealedSecret {
                name: r.get("name"),
                sealed: Sealed {
                    nonce: r.get("nonce"),
                    ciphertext: r.get("ciphertext"),
                },
                workspace_only: r.get::<_, &str>("runners") == "workspace",
                admin_only: r.get::<_, &str>("dispatch") == "admin",
            })
            .collect())
    }

    /// Which of the jobs `ids` an admin dispatched or last retried (v1.3: a lease hands a
    /// `dispatch: admin` secret only to those).
    pub async fn dispatched_by_admin(&self, ids: &[uuid::Uuid]) -> Result<Vec<uuid::Uuid>> {
        let rows = self.query(sql::JOBS_DISPATCHED_BY_ADMIN, &[&ids]).await?;
        Ok(rows
            .iter()
            .filter(|r| r.get::<_, bool>("by_admin"))
            .map(|r| r.get("id"))
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
