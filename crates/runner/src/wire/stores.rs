//! The bodies of the workspace's stores: secrets (v1.1) and artifacts (v1.2), re-exported from
//! [`super`] as the other wire types are.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

// ---- secrets ----------------------------------------------------------------------------

/// `PUT /v1/secrets/{name}`.
#[derive(utoipa::ToSchema, Clone, Serialize, Deserialize)]
pub struct PutSecret {
    pub value: String,
    /// `workspace` (default: handed only to workspace-owned runners) or `any` (personal
    /// runners too).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runners: Option<String>,
    /// `member` (default: any member may name it in a dispatch) or `admin` (only admins).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dispatch: Option<String>,
}

impl std::fmt::Debug for PutSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PutSecret")
            .field("value", &"<redacted>")
            .field("runners", &self.runners)
            .field("dispatch", &self.dispatch)
            .finish()
    }
}

/// A secret as listed: never its value.
#[derive(utoipa::ToSchema, Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SecretInfo {
    pub name: String,
    /// `workspace` or `any`: which runners may receive it.
    pub runners: String,
    /// `member` or `admin`: who may name it in a dispatch.
    pub dispatch: String,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize)]
pub struct SecretList {
    pub secrets: Vec<SecretInfo>,
}

// ---- artifacts (v1.2) -------------------------------------------------------------------

/// `201` of `PUT /v1/runner/jobs/{id}/artifacts/{path}`.
#[derive(utoipa::ToSchema, Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ArtifactUploaded {
    pub path: String,
    pub size: i64,
    /// Lowercase hex SHA-256 of the bytes.
    pub sha256: String,
}

/// An artifact as listed.
#[derive(utoipa::ToSchema, Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Artifact {
    pub path: String,
    /// The epoch of the attempt that uploaded it (v1.3).
    pub epoch: i64,
    pub size: i64,
    pub sha256: String,
    pub created_at: DateTime<Utc>,
}

/// `GET /v1/jobs/{id}/artifacts`: a page, newest epoch first, then by path (v1.3).
#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize)]
pub struct ArtifactList {
    pub artifacts: Vec<Artifact>,
    /// Set when the page is full: the next page's `after`.
    #[serde(default)]
    pub next: Option<String>,
}
