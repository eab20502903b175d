//! Credentials the store keeps: API keys and single-use join codes, each by the SHA-256 of its
//! plaintext (never the plaintext), and join URLs (a hash and a sealed payload). Invariant: a
//! revoked key and a burned or expired code are never found again, and a join URL's payload is
//! handed out at most once.

use uuid::Uuid;

use super::{sql, Result, Store};
use crate::store::records::{ApiKey, JoinGrant};

impl Store {
    pub async fn insert_key(
        &self,
        id: Uuid,
        workspace: &str,
        subject: &str,
        admin: bool,
        hash: &[u8],
    ) -> Result<()> {
        let role = if admin { "admin" } else { "member" };
        self.execute(sql::KEY_INSERT, &[&id, &workspace, &subject, &role, &hash])
            .await
            .map(drop)
    }

    pub async fn key_by_hash(&self, hash: &[u8]) -> Result<Option<ApiKey>> {
        Ok(self
            .query_opt(sql::KEY_BY_HASH, &[&hash])
            .await?
            .map(|r| ApiKey {
                id: r.get("id"),
                workspace: r.get("workspace"),
                subject: r.get("subject"),
                admin: r.get::<_, &str>("role") == "admin",
            }))
    }

    /// `true` if a live key of `workspace` was revoked.
    pub async fn revoke_key(&self, id: Uuid, workspace: &str) -> Result<bool> {
        Ok(self.execute(sql::KEY_REVOKE, &[&id, &workspace]).await? == 1)
    }

    pub async fn insert_join_code(
        &self,
        hash: &[u8],
        grant: &JoinGrant,
        ttl_s: i64,
        url: Option<(&[u8], &[u8])>,
    ) -> Result<chrono::DateTime<chrono::Utc>> {
        let (url_hash, url_sealed) = url.unzip();
        let rows = self
            .query(
                sql::JOIN_CODE_INSERT,
                &[
                    &hash,
                    &grant.workspace,
                    &grant.owner,
                    &grant.approved_by,
                    &grant.ephemeral,
                    &ttl_s,
                    &url_hash,
                    &url_sealed,
                ],
            )
            .await?;
        Ok(rows[0].get("expires_at"))
    }

    /// The sealed connect payload of the join URL whose short code hashes to `url_hash`, handed
    /// out once: `None` when unknown, already handed out, or its join code used or expired.
    pub async fn burn_join_url(&self, url_hash: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self
            .query_opt(sql::JOIN_URL_BURN, &[&url_hash])
            .await?
            .map(|r| r.get("url_sealed")))
    }
}
