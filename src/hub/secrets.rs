//! What the API asks about a workspace's secrets: setting, listing and deleting them, which of
//! a dispatch's names exist (and their scope), and the sealed values a lease hands over. Values
//! stay sealed here; the API opens them for the lease answer only.

use std::future::Future;

use super::Hub;
use crate::domain::sealing::Sealed;
use crate::store::records::SecretInfo;
use crate::store::{Result, SealedSecret, SecretScope};

impl Hub {
    /// Set a secret of `workspace` (sealed); `None` keeps a scope as it is.
    ///
    /// # Errors
    /// The database failed.
    pub async fn put_secret(
        &self,
        workspace: &str,
        name: &str,
        sealed: &Sealed,
        runners: Option<&str>,
        dispatch: Option<&str>,
    ) -> Result<()> {
        self.store
            .put_secret(workspace, name, sealed, runners, dispatch)
            .await
    }

    /// The secrets of `workspace`, never their values.
    ///
    /// # Errors
    /// The database failed.
    pub async fn secrets(&self, workspace: &str) -> Result<Vec<SecretInfo>> {
        self.store.secrets(workspace).await
    }

    /// Delete a secret of `workspace`.
    ///
    /// # Errors
    /// The database failed. `Ok(false)`: no such secret.
    pub async fn delete_secret(&self, workspace: &str, name: &str) -> Result<bool> {
        self.store.delete_secret(workspace, name).await
    }

    /// Which of `names` are secrets of `workspace`, with their scopes.
    ///
    /// # Errors
    /// The database failed.
    pub async fn existing_secrets(
        &self,
        workspace: &str,
        names: &[String],
    ) -> Result<Vec<SecretScope>> {
        self.store.existing_secrets(workspace, names).await
    }

    /// The sealed values of `names` in `workspace` (name, value, workspace runners only), for a
    /// lease answer: the store's own future, so the lease costs no await of its own here.
    ///
    /// # Errors
    /// The database failed.
    pub fn sealed_secrets<'a>(
        &'a self,
        workspace: &'a str,
        names: &'a [String],
    ) -> impl Future<Output = Result<Vec<SealedSecret>>> + 'a {
        self.store.sealed_secrets(workspace, names)
    }

    /// Which of the jobs `ids` an admin dispatched or last retried: only those may be handed
    /// a `dispatch: admin` secret.
    ///
    /// # Errors
    /// The database failed.
    pub async fn dispatched_by_admin(&self, ids: &[uuid::Uuid]) -> Result<Vec<uuid::Uuid>> {
        self.store.dispatched_by_admin(ids).await
    }
}
