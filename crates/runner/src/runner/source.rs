//! A job's repository source: exactly `commit_sha` of `repository`, checked out fresh in the
//! job's work directory before the command runs there.
//!
//! Invariants: the checkout is `git init`, a fetch of that one commit, a detached checkout of
//! it, and a check that `HEAD` is it; anything else fails the job, and nothing ever falls back
//! to another commit, branch or checkout. A credential reaches git only through in-memory
//! configuration: an `http.<url>.extraHeader` in a memfd the runner holds (close-on-exec, so
//! no job inherits it), which git reads as its global configuration through
//! `/proc/<runner pid>/fd/<n>` (readable only by processes allowed to inspect the runner):
//! never in git's environment or arguments, the URL, a file on disk, the command's
//! environment or an event, and only when the repository's host is one the runner was told
//! to trust (`--git-credential-host`). Its `Authorization` value and its base64 are masked in
//! the job's output ([`credential_masks`]). Git runs with a cleared environment, no system
//! configuration, no credential helper and no prompt.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use tokio::process::Command;

use super::sandbox::DEFAULT_PATH;
use crate::wire::LeasedSource;

/// Longest a fetch or checkout may take.
const GIT_TIMEOUT: Duration = Duration::from_secs(600);
/// Bytes of git's error output kept for the failure message.
const ERROR_TAIL: usize = 2048;

/// `scheme://authority/` of an http(s) URL, and its authority without user information.
fn http_origin(url: &str) -> Option<(String, String)> {
    let (scheme, rest) = url.split_once("://")?;
    let scheme = scheme.to_ascii_lowercase();
    if scheme != "http" && scheme != "https" {
        return None;
    }
    let authority = rest.split(['/', '?', '#']).next()?;
    let host = authority.rsplit('@').next()?.to_ascii_lowercase();
    if host.is_empty() {
        return None;
    }
    Some((format!("{scheme}://{authority}/"), host))
}

/// Whether `host` (`name` or `name:port`) is in the allowed list (entries `name` or `name:port`).
fn host_allowed(host: &str, allowed: &[String]) -> bool {
    let name = host
        .rsplit_once(':')
        .filter(|(_, port)| port.chars().all(|c| c.is_ascii_digit()))
        .map_or(host, |(n, _)| n);
    allowed.iter().any(|a| {
        let a = a.to_ascii_lowercase();
        a == host || a == name
    })
}

/// `user:secret` as given, or a bare token with the user `x-access-token` (the convention of
/// the large git hosts).
fn basic_pair(credential: &str) -> String {
    if credential.contains(':') {
        credential.to_owned()
    } else {
        format!("x-access-token:{credential}")
    }
}

/// The `Authorization` header for a credential, as HTTP Basic.
fn authorization(credential: &str) -> String {
    format!(
        "Authorization: Basic {}",
        STANDARD.encode(basic_pair(credential))
    )
}

/// What to mask in a job's output besides the credential itself: the `user:secret` pair git
/// sends (its base64 forms are masked with it) and the header's base64 value.
pub fn credential_masks(credential: &str) -> Vec<String> {
    let pair = basic_pair(credential);
    let encoded = STANDARD.encode(&pair);
    vec![pair, encoded]
}

/// Configuration only git may read: a memfd of this process (close-on-exec), which git opens
/// by `/proc/<pid>/fd/<n>`. Dropped (closed) when the checkout is done.
struct PrivateConfig(std::fs::File);

impl PrivateConfig {
    fn new(text: &str) -> std::io::Result<Self> {
        use std::io::Write;
        let fd = nix::sys::memfd::memfd_create(
            "leasehold-git-credential",
            nix::sys::memfd::MFdFlags::MFD_CLOEXEC,
        )?;
        let mut file = std::fs::File::from(fd);
        file.write_all(text.as_bytes())?;
        Ok(Self(file))
    }

    fn path(&self) -> String {
        use std::os::fd::AsRawFd;
        format!("/proc/{}/fd/{}", std::process::id(), self.0.as_raw_fd())
    }
}

/// A git configuration value, quoted.
fn quoted(value: &str) -> String {
    format!("\"{}\"", value.replace('\\', "\\\\").replace('"', "\\\""))
}

/// What git needs to run in `dir`: a cleared environment, `config` through the environment
/// (nothing secret) and `global` (the private configuration's path) as its global file.
fn git(
    dir: &Path,
    home: &Path,
    path: &str,
    config: &[(String, String)],
    global: Option<&str>,
) -> Command {
    let mut cmd = Command::new("git");
    cmd.current_dir(dir)
        .env_clear()
        .env("PATH", path)
        .env("HOME", home)
        .env("LANG", "C")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", global.unwrap_or("/dev/null"))
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_ASKPASS", "/bin/false")
        .env("GIT_CONFIG_COUNT", config.len().to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    for (i, (k, v)) in config.iter().enumerate() {
        cmd.env(format!("GIT_CONFIG_KEY_{i}"), k)
            .env(format!("GIT_CONFIG_VALUE_{i}"), v);
    }
    cmd
}

/// Run one git command; its standard output on success, else a message with its error tail.
async fn run(mut cmd: Command, what: &str) -> Result<String, String> {
    let out = tokio::time::timeout(GIT_TIMEOUT, cmd.output())
        .await
        .map_err(|_| format!("{what}: no answer within {} s", GIT_TIMEOUT.as_secs()))?
        .map_err(|e| format!("{what}: cannot run git: {e}"))?;
    if out.status.success() {
        return Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned());
    }
    let err = String::from_utf8_lossy(&out.stderr);
    let mut start = err.len().saturating_sub(ERROR_TAIL);
    while !err.is_char_boundary(start) {
        start += 1;
    }
    Err(format!("{what} failed: {}", err[start..].trim()))
}

/// Check out exactly `source.commit_sha` into the empty directory `dir`. `home` is the job's
/// home (git reads no configuration from it); `credential_hosts` are the hosts a credential
/// may be sent to.
///
/// # Errors
/// A message for the job's `fail` report: the source is malformed, the commit could not be
/// fetched, or `HEAD` is not that commit.
pub async fn materialise(
    source: &LeasedSource,
    dir: &Path,
    home: &Path,
    credential_hosts: &[String],
) -> Result<(), String> {
    let sha = &source.commit_sha;
    if source.provider != "git" {
        return Err(format!(
            "source.provider '{}' is not supported; this runner fetches git",
            source.provider
        ));
    }
    if sha.len() != 40
        || !sha
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        return Err("source.commit_sha is not a full commit id".into());
    }
    let repo = &source.repository;
    if repo.starts_with('-') {
        return Err("source.repository is not a repository URL".into());
    }
    let mut config = vec![
        ("credential.helper".to_owned(), String::new()),
        ("core.hooksPath".to_owned(), "/dev/null".to_owned()),
    ];
    let mut private = None;
    if let Some(credential) = &source.credential {
        match http_origin(repo) {
            Some((origin, host)) if host_allowed(&host, credential_hosts) => {
                let text = format!(
                    "[http {}]\n\textraHeader = {}\n",
                    quoted(&origin),
                    quoted(&authorization(&credential.0))
                );
                private = Some(
                    PrivateConfig::new(&text)
                        .map_err(|e| format!("cannot hold the credential for git: {e}"))?,
                );
                config.push(("http.followRedirects".to_owned(), "false".to_owned()));
            }
            Some((_, host)) => tracing::warn!(
                %host,
                "the job names a credential for a host not in --git-credential-host; fetching without it"
            ),
            None => tracing::warn!(
                "the job names a credential, but its repository is not an http(s) URL; fetching without it"
            ),
        }
    }
    let path = DEFAULT_PATH;
    let global = private.as_ref().map(PrivateConfig::path);
    let global = global.as_deref();
    let mut init = git(dir, home, path, &config, global);
    init.args(["init", "--quiet", "."]);
    run(init, "git init").await?;
    let fetch = |depth: bool| {
        let mut cmd = git(dir, home, path, &config, global);
        cmd.args(["fetch", "--quiet", "--no-tags", "--no-recurse-submodules"]);
        if depth {
            cmd.arg("--depth=1");
        }
        cmd.args(["--", repo, sha]);
        cmd
    };
    // A shallow fetch where the server allows it; the same commit in full where it does not
    // (dumb HTTP). Either way only `sha` is asked for.
    if run(fetch(true), "git fetch").await.is_err() {
        run(fetch(false), &format!("git fetch of {sha}")).await?;
    }
    let mut checkout = git(dir, home, path, &config, global);
    checkout.args([
        "-c",
        "advice.detachedHead=false",
        "checkout",
        "--quiet",
        "--detach",
        sha,
    ]);
    run(checkout, "git checkout").await?;
    let mut head = git(dir, home, path, &config, global);
    head.args(["rev-parse", "--verify", "HEAD^{commit}"]);
    let head = run(head, "git rev-parse").await?;
    if &head != sha {
        return Err(format!(
            "the checkout's HEAD is {head}, not the job's commit {sha}; refusing to run"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_go_only_to_allowed_http_hosts() {
        let allowed = vec!["git.example.com".to_owned(), "127.0.0.1:9000".to_owned()];
        let (origin, host) = http_origin("https://git.example.com/org/repo.git").unwrap();
        assert_eq!(origin, "https://git.example.com/");
        assert!(host_allowed(&host, &allowed));
        let (_, host) = http_origin("http://127.0.0.1:9000/r.git").unwrap();
        assert!(host_allowed(&host, &allowed));
        let (_, host) = http_origin("http://127.0.0.1:9001/r.git").unwrap();
        assert!(!host_allowed(&host, &allowed));
        let (_, host) = http_origin("https://evil.example.com/git.example.com").unwrap();
        assert!(!host_allowed(&host, &allowed));
        let (_, host) = http_origin("https://git.example.com@evil.example.com/r").unwrap();
        assert_eq!(host, "evil.example.com");
        assert!(http_origin("file:///srv/repo.git").is_none());
        assert!(http_origin("ssh://git.example.com/r").is_none());
    }

    #[test]
    fn the_credential_config_quotes_what_git_would_read_otherwise() {
        assert_eq!(quoted(r#"a"b\c"#), r#""a\"b\\c""#);
        let masks = credential_masks("tok");
        assert_eq!(
            masks,
            [
                "x-access-token:tok".to_owned(),
                STANDARD.encode("x-access-token:tok")
            ]
        );
    }

    #[tokio::test]
    async fn the_header_git_sends_is_masked_in_output_in_every_form() {
        use crate::runner::output::{pump, Output, Stream};
        let token = "ghs_T0ken";
        let mut masks = vec![token.to_owned()];
        masks.extend(credential_masks(token));
        let out = Output::masking(masks.iter().map(String::as_str));
        let header = authorization(token);
        let input = format!("{header}\nx-access-token:{token}\n");
        pump(input.as_bytes(), Stream::Stdout, out.clone()).await;
        let tail = out.tail(Stream::Stdout);
        assert_eq!(tail, "Authorization: Basic ***\n***\n");
    }

    #[test]
    fn a_bare_token_is_sent_as_basic_with_the_conventional_user() {
        assert_eq!(
            authorization("tok"),
            format!(
                "Authorization: Basic {}",
                STANDARD.encode("x-access-token:tok")
            )
        );
        assert_eq!(
            authorization("me:pw"),
            format!("Authorization: Basic {}", STANDARD.encode("me:pw"))
        );
    }
}
