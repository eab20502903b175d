//! The page at `/ui` (jobs, a job's log and timeline, runners, the pool): static files compiled
//! into the binary, no build step and no external request. The page signs in with an API key the user gives it (kept in the tab's
//! session storage) and reads the public API only, so it shows exactly what that key may see.

use axum::extract::Path;
use axum::http::header;
use axum::response::{IntoResponse, Response};

use super::error::ApiError;

/// The files of the page: name, content type, bytes.
const FILES: &[(&str, &str, &[u8])] = &[
    (
        "app.css",
        "text/css; charset=utf-8",
        include_bytes!("ui/app.css"),
    ),
    (
        "app.js",
        "text/javascript; charset=utf-8",
        include_bytes!("ui/app.js"),
    ),
    (
        "job.js",
        "text/javascript; charset=utf-8",
        include_bytes!("ui/job.js"),
    ),
    (
        "feed.js",
        "text/javascript; charset=utf-8",
        include_bytes!("ui/feed.js"),
    ),
    ("icon.svg", "image/svg+xml", include_bytes!("ui/icon.svg")),
];

/// Headers every file of the page carries: nothing outside this origin may load.
const POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
                      connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

fn file(content_type: &'static str, bytes: &'static [u8]) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CONTENT_SECURITY_POLICY, POLICY),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::REFERRER_POLICY, "no-referrer"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        bytes,
    )
        .into_response()
}

/// `GET /ui`.
pub async fn index() -> Response {
    file("text/html; charset=utf-8", include_bytes!("ui/index.html"))
}

/// `GET /ui/{file}`: one of [`FILES`], else 404.
pub async fn asset(Path(name): Path<String>) -> Response {
    match FILES.iter().find(|(n, _, _)| *n == name) {
        Some((_, content_type, bytes)) => file(content_type, bytes),
        None => ApiError::NotFound.into_response(),
    }
}
