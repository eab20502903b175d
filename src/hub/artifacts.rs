//! What the API asks about artifacts: an upload's fence, its blob row (started and grown under
//! the artifact bounds, kept fresh, deleted when it does not finish) and its publication; a
//! job's list and one artifact's blob. The bytes themselves go through the replica's blob
//! store (`AppState::artifacts`).

use uuid::Uuid;

use super::Hub;
use crate::store::artifacts::{
    ArtifactBounds, ArtifactInfo, Published, Refused, Reservation, StoredArtifact, Upload,
};
use crate::store::jobs::Fenced;
use crate::store::Result;

impl Hub {
    /// Does the runner of `token_hash` hold job `job` at `epoch`, and is `path` taken?
    ///
    /// # Errors
    /// The database failed; a fence miss is the inner `Err`.
    pub async fn artifact_fence(
        &self,
        job: Uuid,
        epoch: i64,
        token_hash: &[u8],
        path: &str,
    ) -> Result<Fenced<bool>> {
        self.store
            .artifact_fence(job, epoch, token_hash, path)
            .await
    }

    /// Reserve room for an upload under `bounds` (its start records its blob before its first
    /// byte, holding one file): the bytes it now holds, or the bound that refused it.
    ///
    /// # Errors
    /// The database failed.
    pub async fn artifact_reserve(
        &self,
        r: &Reservation<'_>,
        bounds: &ArtifactBounds,
    ) -> Result<std::result::Result<u64, Refused>> {
        self.store.artifact_reserve(r, bounds).await
    }

    /// Mark an upload's blob as still moving (the stale-upload sweep leaves it).
    ///
    /// # Errors
    /// The database failed.
    pub async fn artifact_blob_touch(&self, blob: Uuid) -> Result<()> {
        self.store.artifact_blob_touch(blob).await
    }

    /// Make an upload visible, fenced again by its epoch.
    ///
    /// # Errors
    /// The database failed; a fence miss is the inner `Err`.
    pub async fn artifact_publish(&self, up: &Upload<'_>) -> Result<Fenced<Published>> {
        self.store.artifact_publish(up).await
    }

    /// Delete an unpublished upload's blob row (and its chunks).
    ///
    /// # Errors
    /// The database failed.
    pub async fn artifact_blob_delete(&self, blob: Uuid) -> Result<()> {
        self.store.artifact_blob_delete(blob).await
    }

    /// A page of a job's artifacts (at most `limit` after `(epoch, path)`), when the job is of
    /// `workspace`.
    ///
    /// # Errors
    /// The database failed. `Ok(None)`: no such job in the workspace.
    pub async fn artifacts(
        &self,
        job: Uuid,
        workspace: &str,
        after: Option<(i64, &str)>,
        limit: i64,
    ) -> Result<Option<Vec<ArtifactInfo>>> {
        self.store.artifacts(job, workspace, after, limit).await
    }

    /// One artifact of a job of `workspace` (the file of `epoch`, or the newest epoch's), with
    /// where its bytes are.
    ///
    /// # Errors
    /// The database failed. `Ok(None)`: no such job or artifact.
    pub async fn artifact(
        &self,
        job: Uuid,
        path: &str,
        epoch: Option<i64>,
        workspace: &str,
    ) -> Result<Option<StoredArtifact>> {
        self.store.artifact(job, path, epoch, workspace).await
    }
}
