//! The reference runner's checkout of a job's source (docs/api.md v1.1 "Repository
//! sources"), against real git repositories: one served from a local directory (a file URL)
//! and one over HTTP (git's dumb protocol, served by a small server in the test that demands a
//! credential).
//!
//! Invariants defended: exactly `commit_sha` is checked out (not the tip, no fallback when the
//! commit does not exist); a credential reaches git only as an HTTP header, only for a host in
//! the runner's `--git-credential-host` list, and is written to no file of the checkout.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::IntoResponse;
use leasehold::runner::source::materialise;
use leasehold::wire::{LeasedSource, Redacted};

use crate::procs::TempDir;

/// Run git in `dir`, returning its trimmed standard output.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args([
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@example.invalid",
            "-c",
            "init.defaultBranch=main",
        ])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// `false` when git is not installed, and the test `test` may skip (see [`support::require`]).
pub fn have_git(test: &str) -> bool {
    let ok = Command::new("git")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    crate::support::require(test, (!ok).then(|| "git is not installed".to_owned()))
}

/// A repository with two commits (`file` says `v1`, then `v2`), and a bare copy of it that a
/// dumb HTTP server can serve. Returns (work tree, bare repository, first commit, tip).
pub fn two_commit_repo(dir: &TempDir) -> (PathBuf, PathBuf, String, String) {
    let work = dir.join("origin");
    std::fs::create_dir_all(&work).unwrap();
    git(&work, &["init", "-q", "."]);
    std::fs::write(work.join("file"), "v1\n").unwrap();
    git(&work, &["add", "file"]);
    git(&work, &["commit", "-q", "-m", "one"]);
    let first = git(&work, &["rev-parse", "HEAD"]);
    std::fs::write(work.join("file"), "v2\n").unwrap();
    git(&work, &["commit", "-q", "-am", "two"]);
    let tip = git(&work, &["rev-parse", "HEAD"]);
    let bare = dir.join("served.git");
    git(
        dir.path(),
        &[
            "clone",
            "-q",
            "--bare",
            work.to_str().unwrap(),
            bare.to_str().unwrap(),
        ],
    );
    git(&bare, &["update-server-info"]);
    (work, bare, first, tip)
}

fn source(repository: &str, sha: &str, credential: Option<&str>) -> LeasedSource {
    LeasedSource {
        provider: "git".into(),
        repository: repository.into(),
        commit_sha: sha.into(),
        git_ref: Some("main".into()),
        credential: credential.map(|c| Redacted(c.into())),
    }
}

/// [`materialise`] of `commit` of `repository` (with `credential`, for `hosts`) into a fresh
/// job directory pair named `name` under `dir`: what it returned, and the (work, home) pair.
async fn checkout(
    dir: &TempDir,
    name: &str,
    (repository, commit, credential): (&str, &str, Option<&str>),
    hosts: &[String],
) -> (Result<(), String>, PathBuf, PathBuf) {
    let (work, home) = (
        dir.join(&format!("{name}-work")),
        dir.join(&format!("{name}-home")),
    );
    std::fs::create_dir_all(&work).unwrap();
    std::fs::create_dir_all(&home).unwrap();
    let done = materialise(&source(repository, commit, credential), &work, &home, hosts).await;
    (done, work, home)
}

/// Every byte of every file under `dir`.
fn all_bytes(dir: &Path) -> Vec<u8> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let p = entry.path();
        if p.is_dir() {
            out.extend(all_bytes(&p));
        } else if let Ok(b) = std::fs::read(&p) {
            out.extend(b);
        }
    }
    out
}

#[tokio::test]
async fn exactly_the_commit_is_checked_out_from_a_file_url_and_a_missing_one_fails() {
    if !have_git("exactly_the_commit_is_checked_out") {
        return;
    }
    let dir = TempDir::new("source-file");
    let (_, bare, first, tip) = two_commit_repo(&dir);
    let url = format!("file://{}", bare.display());
    let (done, work, _) = checkout(&dir, "a", (&url, &first, None), &[]).await;
    done.unwrap();
    assert_eq!(
        git(&work, &["rev-parse", "HEAD"]),
        first,
        "not the tip {tip}"
    );
    assert_eq!(std::fs::read_to_string(work.join("file")).unwrap(), "v1\n");
    assert_eq!(
        git(&work, &["status", "--porcelain"]),
        "",
        "a clean checkout"
    );

    let missing = "0123456789abcdef0123456789abcdef01234567";
    let (done, work, _) = checkout(&dir, "b", (&url, missing, None), &[]).await;
    let err = done.unwrap_err();
    assert!(err.contains("git fetch"), "{err}");
    assert!(!work.join("file").exists(), "no fallback to another commit");
    let (done, _, _) = checkout(&dir, "c", (&url, &first.to_uppercase(), None), &[]).await;
    let err = done.unwrap_err();
    assert!(err.contains("commit"), "{err}");
}

/// What the dumb HTTP server saw.
#[derive(Default)]
struct Seen {
    authorizations: Vec<Option<String>>,
    /// Git processes alive while a request was being answered.
    gits: usize,
    /// `pid: what` of every process whose environment or arguments held the credential in
    /// any form, while a request was being answered.
    leaks: Vec<String>,
}

/// Processes (other than this one) whose environment or command line contains one of
/// `needles`, and how many git processes are alive.
fn carriers(needles: &[String]) -> (usize, Vec<String>) {
    let me = std::process::id().to_string();
    let (mut gits, mut found) = (0, Vec::new());
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let pid = entry.file_name().to_string_lossy().into_owned();
        if pid == me || !pid.chars().all(|c| c.is_ascii_digit()) {
            continue;
        }
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        if String::from_utf8_lossy(&cmdline).starts_with("git") {
            gits += 1;
        }
        for what in ["environ", "cmdline"] {
            let bytes = std::fs::read(entry.path().join(what)).unwrap_or_default();
            for n in needles {
                if bytes.windows(n.len()).any(|w| w == n.as_bytes()) {
                    found.push(format!(
                        "{pid} {what}: {}",
                        String::from_utf8_lossy(&cmdline)
                    ));
                }
            }
        }
    }
    (gits, found)
}

/// A two-commit repository (see [`two_commit_repo`]) served over git's dumb HTTP protocol to
/// clients sending `token` as GitHub's `x-access-token` basic credential.
struct Served {
    dir: TempDir,
    /// The repository's URL, on `host`.
    url: String,
    host: String,
    first: String,
    /// The `Authorization` header the server wants.
    expected: String,
    seen: Arc<Mutex<Seen>>,
}

impl Served {
    async fn new(what: &str, token: &str) -> Self {
        use base64::Engine;
        let dir = TempDir::new(what);
        let (_, bare, first, _) = two_commit_repo(&dir);
        let expected = format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(format!("x-access-token:{token}"))
        );
        let (host, seen) = dumb_http(bare, expected.clone()).await;
        Self {
            url: format!("http://{host}/repo.git"),
            dir,
            host,
            first,
            expected,
            seen,
        }
    }

    /// [`checkout`] of the first commit with `token`, trusting `hosts` with it.
    async fn checkout(
        &self,
        name: &str,
        token: &str,
        hosts: &[String],
    ) -> (Result<(), String>, PathBuf, PathBuf) {
        checkout(
            &self.dir,
            name,
            (&self.url, &self.first, Some(token)),
            hosts,
        )
        .await
    }

    /// Whether the server was sent the credential it wants as an `Authorization` header.
    fn got_the_header(&self) -> bool {
        self.seen
            .lock()
            .unwrap()
            .authorizations
            .iter()
            .any(|a| a.as_deref() == Some(self.expected.as_str()))
    }
}

/// Serve `root` over git's dumb HTTP protocol, answering 401 without `expected` authorization.
async fn dumb_http(root: PathBuf, expected: String) -> (String, Arc<Mutex<Seen>>) {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let state = (root, expected, seen.clone());
    async fn serve_file(
        State((root, expected, seen)): State<(PathBuf, String, Arc<Mutex<Seen>>)>,
        headers: HeaderMap,
        uri: Uri,
    ) -> axum::response::Response {
        let auth = headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        // While git waits for this answer, look at every process's environment and arguments.
        let b64 = expected.trim_start_matches("Basic ").to_owned();
        let pair = String::from_utf8(
            base64::Engine::decode(&base64::engine::general_purpose::STANDARD, &b64).unwrap(),
        )
        .unwrap();
        let token = pair.split_once(':').unwrap().1.to_owned();
        let (gits, leaks) = carriers(&[b64, pair, token]);
        let mut s = seen.lock().unwrap();
        s.authorizations.push(auth.clone());
        s.gits += gits;
        s.leaks.extend(leaks);
        drop(s);
        if auth.as_deref() != Some(expected.as_str()) {
            return (
                StatusCode::UNAUTHORIZED,
                [("www-authenticate", "Basic realm=\"git\"")],
                "",
            )
                .into_response();
        }
        let rel = uri
            .path()
            .trim_start_matches('/')
            .trim_start_matches("repo.git/");
        if rel.contains("..") {
            return StatusCode::NOT_FOUND.into_response();
        }
        match std::fs::read(root.join(rel)) {
            Ok(bytes) => (StatusCode::OK, bytes).into_response(),
            Err(_) => StatusCode::NOT_FOUND.into_response(),
        }
    }
    let app = axum::Router::new().fallback(serve_file).with_state(state);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("127.0.0.1:{}", addr.port()), seen)
}

#[tokio::test]
async fn a_credential_goes_only_to_allowed_hosts_only_as_a_header_and_into_no_file() {
    if !have_git("a_credential_goes_only_to_allowed_hosts") {
        return;
    }
    let token = "ghs_Cr3dential-7wQ";
    let served = Served::new("source-http", token).await;

    // A host the runner does not trust never sees the credential, and the fetch fails.
    let (done, _, _) = served
        .checkout("untrusted", token, &["git.example.com".into()])
        .await;
    let err = done.unwrap_err();
    assert!(err.contains("git fetch"), "{err}");
    assert!(!err.contains(token));
    assert!(
        served
            .seen
            .lock()
            .unwrap()
            .authorizations
            .iter()
            .all(Option::is_none),
        "no Authorization header sent to an untrusted host"
    );

    // A trusted host gets it as a header; the checkout is exactly the commit.
    let (done, work, home) = served
        .checkout("trusted", token, std::slice::from_ref(&served.host))
        .await;
    done.unwrap();
    assert_eq!(git(&work, &["rev-parse", "HEAD"]), served.first);
    assert_eq!(std::fs::read_to_string(work.join("file")).unwrap(), "v1\n");
    assert!(
        served.got_the_header(),
        "the credential travelled as an Authorization header"
    );
    let files = all_bytes(&work);
    let b64 = served.expected.trim_start_matches("Basic ");
    for needle in [token, b64] {
        assert!(
            !files.windows(needle.len()).any(|w| w == needle.as_bytes()),
            "the credential was written into the checkout"
        );
    }
    assert!(!all_bytes(&home)
        .windows(token.len())
        .any(|w| w == token.as_bytes()));
}

/// Row 6 of issue 18: while git fetches with a credential, no process (git, its remote
/// helper, anything else) carries the token, its `user:token` pair or the header's base64 in
/// its environment or arguments: the header reaches git through a memfd only it may open.
#[tokio::test]
async fn no_git_process_carries_the_credential_in_its_environment_or_arguments() {
    if !have_git("no_git_process_carries_the_credential") {
        return;
    }
    let token = "ghs_N0t-in-the-3nvironment";
    let served = Served::new("source-noenv", token).await;
    let (done, work, _) = served
        .checkout("noenv", token, std::slice::from_ref(&served.host))
        .await;
    done.unwrap();
    assert_eq!(git(&work, &["rev-parse", "HEAD"]), served.first);
    assert!(served.got_the_header(), "the credential was sent");
    let seen = served.seen.lock().unwrap();
    assert!(seen.gits > 0, "git was seen running during its requests");
    assert!(seen.leaks.is_empty(), "{:#?}", seen.leaks);
}
