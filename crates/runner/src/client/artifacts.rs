//! The artifact calls of [`Client`]: a runner's streamed upload, the workspace's list and
//! streamed download. Bodies are streams both ways, never a whole file in memory, and no
//! total timeout applies (a long transfer that keeps moving is never cut off).

use reqwest::{header, Method, StatusCode};
use uuid::Uuid;

use super::{api_error, Client, ClientError, Result};
use crate::wire;

impl Client {
    fn artifact_request(&self, method: Method, path: &str) -> reqwest::RequestBuilder {
        let mut req = self.http.request(method, format!("{}{}", self.base, path));
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        req
    }

    async fn checked(&self, req: reqwest::RequestBuilder) -> Result<reqwest::Response> {
        let resp = req
            .send()
            .await
            .map_err(|e| match crate::tls::explain(&e) {
                Some(why) => ClientError::Tls(format!("{}: {why}", self.base)),
                None => ClientError::Transport(e),
            })?;
        let status = resp.status();
        if status.is_success() {
            return Ok(resp);
        }
        let bytes = resp.bytes().await.unwrap_or_default();
        Err(api_error(status, &bytes))
    }

    /// Upload `body` as artifact `path` of job `id`, held at `epoch` (runner token);
    /// `length`, when known, is sent as `Content-Length` (else the body is chunked).
    ///
    /// # Errors
    /// Transport failures, or the contract's error (409 `artifact_exists`, 413 `too_large`,
    /// the fence's 409s).
    pub async fn upload_artifact(
        &self,
        id: Uuid,
        epoch: i64,
        path: &str,
        body: reqwest::Body,
        length: Option<u64>,
    ) -> Result<wire::ArtifactUploaded> {
        let mut req = self
            .artifact_request(
                Method::PUT,
                &format!("/v1/runner/jobs/{id}/artifacts/{path}?epoch={epoch}"),
            )
            .header(header::CONTENT_TYPE, "application/octet-stream")
            .body(body);
        if let Some(n) = length {
            req = req.header(header::CONTENT_LENGTH, n);
        }
        let resp = self.checked(req).await?;
        let status = resp.status();
        let bytes = resp.bytes().await?;
        serde_json::from_slice(&bytes).map_err(|e| ClientError::Api {
            status,
            code: "bad_response".into(),
            message: e.to_string(),
            state: None,
        })
    }

    /// Job `id`'s artifacts, newest epoch first, then by path: every page, followed.
    ///
    /// # Errors
    /// Transport failures, or the contract's error.
    pub async fn artifacts(&self, id: Uuid) -> Result<Vec<wire::Artifact>> {
        let mut all = Vec::new();
        let mut after = None;
        loop {
            let page = self
                .artifacts_page(id, Some(1000), after.as_deref())
                .await?;
            all.extend(page.artifacts);
            match page.next {
                Some(next) => after = Some(next),
                None => return Ok(all),
            }
        }
    }

    /// One page of job `id`'s artifacts: at most `limit` (default 100) after `after` (the
    /// previous page's `next`).
    ///
    /// # Errors
    /// Transport failures, or the contract's error.
    pub async fn artifacts_page(
        &self,
        id: Uuid,
        limit: Option<u32>,
        after: Option<&str>,
    ) -> Result<wire::ArtifactList> {
        // A cursor is `<epoch>:<path>`, whose characters a query carries as they are.
        let mut q = Vec::new();
        if let Some(l) = limit {
            q.push(format!("limit={l}"));
        }
        if let Some(a) = after {
            q.push(format!("after={a}"));
        }
        self.get(&format!("/v1/jobs/{id}/artifacts?{}", q.join("&")))
            .await
    }

    /// The answer to a download of artifact `path` of job `id` (the newest epoch's file of it;
    /// `range`: a `Range` header value): `200` or `206` with the bytes still to be read from it
    /// as a stream.
    ///
    /// # Errors
    /// Transport failures, or the contract's error.
    pub async fn download_artifact(
        &self,
        id: Uuid,
        path: &str,
        range: Option<&str>,
    ) -> Result<reqwest::Response> {
        self.download_artifact_at(id, path, None, range).await
    }

    /// As [`Client::download_artifact`], of the file epoch `epoch` uploaded (`None`: the
    /// newest epoch's).
    ///
    /// # Errors
    /// Transport failures, or the contract's error.
    pub async fn download_artifact_at(
        &self,
        id: Uuid,
        path: &str,
        epoch: Option<i64>,
        range: Option<&str>,
    ) -> Result<reqwest::Response> {
        let query = epoch.map(|e| format!("?epoch={e}")).unwrap_or_default();
        let mut req = self.artifact_request(
            Method::GET,
            &format!("/v1/jobs/{id}/artifacts/{path}{query}"),
        );
        if let Some(r) = range {
            req = req.header(header::RANGE, r);
        }
        let resp = self.checked(req).await?;
        debug_assert!(matches!(
            resp.status(),
            StatusCode::OK | StatusCode::PARTIAL_CONTENT
        ));
        Ok(resp)
    }
}
