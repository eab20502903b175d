//! Joining by URL and the one pasted command: `GET /j/<short>` (a join code's connect payload,
//! handed out once), `GET /install.sh` (the installer, `deploy/install.sh`) and
//! `GET /download/leasehold-<os>-<arch>` (this replica's own binary, with its SHA-256).
//!
//! Invariants: a short code's payload is handed out at most once, across replicas and
//! concurrent calls (one statement burns it, `sql/join_url_burn.sql`); an unknown, used or
//! expired short code gets one identical 404, and each such answer takes a token from the
//! caller's rate-limit bucket (429 once it is empty), so short codes cannot be guessed faster
//! than failed authentications; nothing here needs or reads a credential.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{header, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Json;
use sha2::{Digest, Sha256};
use tokio::io::AsyncReadExt;

use super::client_address::ClientIp;
use super::error::{ApiError, ApiResult};
use super::AppState;
use crate::domain::join_url;
use crate::wire;

/// The installer script the replica serves.
pub const INSTALL_SH: &str = include_str!("../../deploy/install.sh");

/// A join URL minted with a join code: the URL handed to the operator, and what the store
/// keeps (the short code's lookup hash and the sealed payload).
pub struct Minted {
    pub url: String,
    pub hash: Vec<u8>,
    pub sealed: Vec<u8>,
}

/// A join URL for `connect`, when the first public URL is https (a join URL hands out a
/// credential, so never over plain HTTP); `None` otherwise.
pub fn mint(public_urls: &[String], connect: Option<&str>) -> Option<Minted> {
    let base = public_urls.first()?.trim_end_matches('/');
    let https = base
        .get(..8)
        .is_some_and(|s| s.eq_ignore_ascii_case("https://"));
    let connect = connect.filter(|_| https)?;
    let short = join_url::generate();
    Some(Minted {
        url: format!("{base}/j/{short}"),
        hash: join_url::lookup_hash(&short),
        sealed: join_url::seal(&short, connect),
    })
}

/// `GET /j/<short>`: `200 {"connect":"lh1..."}` once; the opaque 404 for anything else.
pub async fn fetch(
    State(st): State<Arc<AppState>>,
    ClientIp(ip): ClientIp,
    uri: Uri,
) -> ApiResult<Response> {
    // The raw path, so no extractor can answer anything but the one 404.
    let short = uri.path().strip_prefix("/j/").unwrap_or_default();
    if join_url::is_well_formed(short) {
        let sealed = st.hub.burn_join_url(&join_url::lookup_hash(short)).await?;
        if let Some(connect) = sealed.and_then(|s| join_url::open(short, &s)) {
            return Ok((
                [(header::CACHE_CONTROL, "no-store")],
                Json(wire::JoinUrl { connect }),
            )
                .into_response());
        }
    }
    st.spend_rate_token(ip)?;
    Err(ApiError::NotFound)
}

/// `HEAD /j/<short>`: refused (405), so a probe (`curl -I`, a link checker) never burns the
/// payload it could not read.
pub async fn head_refused() -> ApiError {
    ApiError::MethodNotAllowed
}

/// `GET /install.sh`: the installer (`sh -c "$(curl -fsSL https://HOST/install.sh || echo exit
/// 1)" install.sh URL`, as `join-code create` prints it).
pub async fn install_sh() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/x-shellscript; charset=utf-8"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        INSTALL_SH,
    )
}

/// The file name of this replica's own binary: `leasehold-<os>-<arch>` (`leasehold-linux-x86_64`).
pub fn own_download() -> String {
    format!(
        "leasehold-{}-{}",
        std::env::consts::OS,
        std::env::consts::ARCH
    )
}

/// The running binary's path and SHA-256 (hex), read once per process.
async fn own_binary() -> ApiResult<&'static (std::path::PathBuf, String)> {
    static BINARY: tokio::sync::OnceCell<(std::path::PathBuf, String)> =
        tokio::sync::OnceCell::const_new();
    BINARY
        .get_or_try_init(|| async {
            tokio::task::spawn_blocking(|| {
                let path = std::env::current_exe()?;
                let mut file = std::fs::File::open(&path)?;
                let mut hasher = Sha256::new();
                std::io::copy(&mut file, &mut hasher)?;
                let hex: String = hasher
                    .finalize()
                    .iter()
                    .map(|b| format!("{b:02x}"))
                    .collect();
                Ok::<_, std::io::Error>((path, hex))
            })
            .await
            .map_err(|_| ApiError::Internal)?
            .map_err(|e| {
                tracing::error!(error = %e, "reading this replica's own binary");
                ApiError::Internal
            })
        })
        .await
}

/// `GET /download/{file}`: this replica's binary for its own platform (header
/// `X-Checksum-Sha256`), or `{file}.sha256` (`sha256sum` format); any other platform is a 404
/// that names the one served.
pub async fn download(Path(file): Path<String>) -> ApiResult<Response> {
    let own = own_download();
    if file == format!("{own}.sha256") {
        let (_, sha) = own_binary().await?;
        return Ok((
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            format!("{sha}  {own}\n"),
        )
            .into_response());
    }
    if file != own {
        let body = wire::ErrorBody {
            error: wire::ErrorDetail {
                code: "not_found".into(),
                message: format!(
                    "this replica serves only its own platform's binary, {own}; no {file} here"
                ),
                state: None,
                min_version: None,
            },
        };
        return Ok((StatusCode::NOT_FOUND, Json(body)).into_response());
    }
    let (path, sha) = own_binary().await?;
    let file = tokio::fs::File::open(path).await.map_err(|e| {
        tracing::error!(error = %e, "opening this replica's own binary");
        ApiError::Internal
    })?;
    let len = file.metadata().await.map(|m| m.len()).unwrap_or(0);
    // Read in chunks until the end or the first error, which ends the body.
    let chunks = futures_util::stream::unfold(Some(file), |file| async move {
        let mut file = file?;
        let mut buf = vec![0u8; 64 * 1024];
        match file.read(&mut buf).await {
            Ok(0) => None,
            Ok(n) => {
                buf.truncate(n);
                Some((Ok::<_, std::io::Error>(buf), Some(file)))
            }
            Err(e) => Some((Err(e), None)),
        }
    });
    Ok((
        [
            (header::CONTENT_TYPE, "application/octet-stream".to_owned()),
            (header::CONTENT_LENGTH, len.to_string()),
            (
                header::HeaderName::from_static("x-checksum-sha256"),
                sha.clone(),
            ),
        ],
        Body::from_stream(chunks),
    )
        .into_response())
}
