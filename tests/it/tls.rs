//! HTTPS end to end: `leasehold serve --tls-cert` with certificates the tests make (rcgen), a
//! runner enrolled with the pasted `lh1.` payload leasing and completing a job over HTTPS, a
//! server whose key does not match the pin refused, a certificate from an unknown CA refused
//! with a clear error, and the certificate re-read on SIGHUP while open connections go on.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use leasehold::client::{Client, Pin, Trust};
use leasehold::replica::{self, Replica};
use leasehold::tooling::serve_process::ServeProcess;
use leasehold::wire::{self, connect::Connect};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use rustls::pki_types::CertificateDer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::procs::{cli, runner, runner_connect, saved, submit_wait, TempDir, BIN};
use crate::support::{eventually, fresh_database, key_in, test_config};

const LONG: Duration = Duration::from_secs(60);

/// The names every test certificate is valid for.
fn names() -> Vec<String> {
    vec!["localhost".into(), "127.0.0.1".into()]
}

/// A certificate and its key written as PEM files in `dir` (`NAME.crt`, `NAME.key`).
struct Pair {
    cert: PathBuf,
    key: PathBuf,
    der: CertificateDer<'static>,
}

impl Pair {
    fn write(dir: &Path, name: &str, cert: &rcgen::Certificate, key: &rcgen::KeyPair) -> Self {
        let pair = Self {
            cert: dir.join(format!("{name}.crt")),
            key: dir.join(format!("{name}.key")),
            der: cert.der().clone(),
        };
        std::fs::write(&pair.cert, cert.pem()).unwrap();
        std::fs::write(&pair.key, key.serialize_pem()).unwrap();
        pair
    }

    /// A self-signed certificate for [`names`] with a fresh key.
    fn self_signed(dir: &Path, name: &str) -> Self {
        let made = rcgen::generate_simple_self_signed(names()).unwrap();
        Self::write(dir, name, &made.cert, &made.signing_key)
    }

    fn pin(&self) -> Pin {
        Pin::of_cert(&self.der).unwrap()
    }

    /// Put `other`'s files where this pair's are (as an operator renewing in place does).
    fn replace_with(&self, other: &Pair) {
        std::fs::copy(&other.cert, &self.cert).unwrap();
        std::fs::copy(&other.key, &self.key).unwrap();
    }
}

/// A private CA (its certificate in `NAME.crt`) that issues certificates for [`names`].
struct Ca {
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
    cert: PathBuf,
    dir: PathBuf,
}

impl Ca {
    fn new(dir: &Path, name: &str) -> Self {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.distinguished_name.push(
            rcgen::DnType::CommonName,
            format!("leasehold test CA {name}"),
        );
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        let path = dir.join(format!("{name}.crt"));
        std::fs::write(&path, cert.pem()).unwrap();
        Self {
            issuer: rcgen::Issuer::new(params, key),
            cert: path,
            dir: dir.to_owned(),
        }
    }

    fn issue(&self, name: &str) -> Pair {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(names())
            .unwrap()
            .signed_by(&key, &self.issuer)
            .unwrap();
        Pair::write(&self.dir, name, &cert, &key)
    }
}

/// An in-process replica serving HTTPS with `pair` on `database_url`; with `public`, its own
/// URL is its `LEASEHOLD_PUBLIC_URL` (the port is bound first, so it is known).
async fn tls_replica(database_url: &str, pair: &Pair, public: bool) -> (Replica, String) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("https://{}", listener.local_addr().unwrap());
    let mut config = test_config(database_url);
    config.tls_cert = Some(pair.cert.clone());
    config.tls_key = Some(pair.key.clone());
    if public {
        config.public_url = vec![url.clone()];
    }
    let replica = replica::start(config, listener)
        .await
        .expect("replica starts");
    assert_eq!(replica.url(), url);
    (replica, url)
}

/// A port free right now on the loopback, for a `serve` process whose public URL must name it.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn operator(url: &str, key: &str, ca: &Path) -> Client {
    Client::with_trust(url, Some(key.to_owned()), &Trust::ca(Some(ca.to_owned()))).unwrap()
}

async fn mint(operator: &Client) -> wire::JoinCode {
    operator
        .create_join_code(&wire::CreateJoinCode {
            tier: wire::Tier::Personal,
            ttl_s: None,
            ephemeral: None,
        })
        .await
        .unwrap()
}

/// The required path: `serve --tls-cert` with a self-signed certificate and a public URL; the
/// operator's `join-code create` prints one line; that line, pasted with nothing else, enrols a
/// runner that then leases and completes a job over HTTPS, checking the key pin.
#[tokio::test]
async fn a_runner_enrolled_with_the_pasted_payload_leases_and_completes_a_job_over_https() {
    let dir = TempDir::new("tls-e2e");
    let pair = Pair::self_signed(dir.path(), "server");
    let db = fresh_database().await;
    let listen = format!("127.0.0.1:{}", free_port());
    let public = format!("https://{listen}");
    let mut serve = ServeProcess::start_on(
        BIN,
        &listen,
        &db,
        [
            ("LEASEHOLD_TLS_CERT", pair.cert.to_str().unwrap()),
            ("LEASEHOLD_TLS_KEY", pair.key.to_str().unwrap()),
            ("LEASEHOLD_PUBLIC_URL", public.as_str()),
            ("LEASEHOLD_SWEEP_INTERVAL_MS", "200"),
        ],
        std::process::Stdio::inherit(),
    )
    .await
    .expect("serve --tls-cert listens");
    assert_eq!(serve.url, public, "serve prints its https URL");
    let key = key_in(&db, "acme", "alice", false).await;
    let ca = pair.cert.to_str().unwrap();

    // The operator's CLI over HTTPS, trusting the self-signed certificate with --ca-cert.
    let out = cli(
        &public,
        &key,
        &["join-code", "create", "--ca-cert", ca],
        LONG,
    )
    .await;
    assert_eq!(out.code, Some(0), "{out:?}");
    let line = out.stdout.lines().next().unwrap_or_default().trim();
    let payload = line
        .strip_prefix("leasehold runner connect ")
        .unwrap_or_else(|| panic!("one line to paste: {line}"));
    assert!(!payload.contains(' '), "one word: {payload}");
    let decoded = Connect::decode(payload).unwrap();
    assert_eq!(decoded.servers, vec![public.clone()]);
    assert_eq!(
        decoded.pin,
        Some(pair.pin().to_string()),
        "self-signed: pinned"
    );

    // Pasted as is: no --server, no --ca-cert.
    let config = dir.join("runner.json");
    let out = runner_connect(&[payload, "--config", config.to_str().unwrap()]).await;
    assert_eq!(out.code, Some(0), "{out:?}");
    let saved = saved(&config);
    assert_eq!(saved["servers"], serde_json::json!([public]));
    assert_eq!(saved["pin"], serde_json::json!(pair.pin().to_string()));
    assert!(saved.get("ca_cert").is_none(), "{saved}");

    let mut r = runner(&config, &dir.join("work"), &["--unconfined"], &[]);
    let out = submit_wait(
        &public,
        &key,
        &["--ca-cert", ca, "--", "sh", "-c", "echo over-tls"],
    )
    .await;
    assert_eq!(out.code, Some(0), "{out:?}\nrunner log:\n{}", r.log());
    assert_eq!(out.stdout, "over-tls\n");
    let jobs = operator(&public, &key, &pair.cert)
        .jobs(None, None, None)
        .await
        .unwrap()
        .jobs;
    assert_eq!(jobs.len(), 1);
    assert_eq!(jobs[0].state, "completed");
    assert_eq!(
        jobs[0].provenance.as_ref().unwrap()["runner"],
        saved["runner_id"]
    );

    r.signal(Signal::SIGTERM);
    assert!(r.exit(LONG).await.success(), "{}", r.log());
    serve.terminate(LONG).await.unwrap();
}

/// A payload whose pin names another key is refused before the join code leaves the machine
/// (the code still enrols afterwards), and a runner whose configured server changes key is
/// refused on its later calls.
#[tokio::test]
async fn a_server_whose_key_does_not_match_the_pin_is_refused() {
    let dir = TempDir::new("tls-pin");
    let db = fresh_database().await;
    let a = Pair::self_signed(dir.path(), "a");
    let b = Pair::self_signed(dir.path(), "b");
    let (_ra, url_a) = tls_replica(&db, &a, true).await;
    let (_rb, url_b) = tls_replica(&db, &b, true).await;
    let key = key_in(&db, "acme", "alice", false).await;
    let code = mint(&operator(&url_a, &key, &a.cert)).await;
    let honest = Connect::decode(code.connect.as_deref().unwrap()).unwrap();
    assert_eq!(honest.pin, Some(a.pin().to_string()));

    // Server B answers at the address the payload names, with its own key.
    let swapped = Connect {
        servers: vec![url_b.clone()],
        ..honest.clone()
    }
    .encode();
    let config = dir.join("runner.json");
    let connect = |payload: String| {
        let config = config.to_str().unwrap().to_owned();
        async move { runner_connect(&[&payload, "--config", &config]).await }
    };
    let out = connect(swapped).await;
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(
        out.stderr.contains("certificate verification failed")
            && out.stderr.contains("does not match the pinned key")
            && out.stderr.contains(&a.pin().to_string())
            && out.stderr.contains(&b.pin().to_string()),
        "says which key came and which was pinned: {}",
        out.stderr
    );
    assert!(!config.exists(), "nothing written");

    let out = connect(code.connect.clone().unwrap()).await;
    assert_eq!(out.code, Some(0), "the code was never sent to B: {out:?}");

    // The same runner, its server now answering with another key: every call is refused.
    let mut saved: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&config).unwrap()).unwrap();
    saved["servers"] = serde_json::json!([url_b]);
    std::fs::write(&config, serde_json::to_vec(&saved).unwrap()).unwrap();
    std::fs::set_permissions(&config, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let mut r = runner(&config, &dir.join("work"), &["--unconfined"], &[]);
    eventually(LONG, "the runner logs the pin refusal", || async {
        r.log()
            .contains("does not match the pinned key")
            .then_some(())
    })
    .await;
    let anyone =
        Client::with_trust(&url_a, Some(key.clone()), &Trust::ca(Some(a.cert.clone()))).unwrap();
    let runners = anyone.runners(wire::Tier::Personal).await.unwrap();
    assert_eq!(runners.len(), 1);
    assert_eq!(
        runners[0].last_seen_at,
        Some(runners[0].created_at),
        "not seen since enrolment: no call of the runner reached B: {:?}",
        runners[0]
    );
    r.signal(Signal::SIGTERM);
    r.exit(LONG).await;
}

/// A certificate the client cannot trust (another CA's, or any private CA's without
/// --ca-cert) is refused with words that say so and name --ca-cert; the right CA works.
#[tokio::test]
async fn a_certificate_from_an_unknown_ca_is_refused_with_a_clear_error() {
    let dir = TempDir::new("tls-ca");
    let db = fresh_database().await;
    let ca = Ca::new(dir.path(), "ca");
    let other = Ca::new(dir.path(), "other");
    let leaf = ca.issue("server");
    let (_replica, url) = tls_replica(&db, &leaf, true).await;
    let key = key_in(&db, "acme", "alice", false).await;

    let ca_path = ca.cert.to_str().unwrap();
    let other_path = other.cert.to_str().unwrap();
    for args in [vec!["pool", "--ca-cert", other_path], vec!["pool"]] {
        let out = cli(&url, &key, &args, LONG).await;
        assert_eq!(out.code, Some(1), "{args:?}: {out:?}");
        assert!(
            out.stderr.contains("certificate verification failed")
                && out.stderr.contains("not signed by a trusted CA")
                && out.stderr.contains("--ca-cert"),
            "{args:?}: {}",
            out.stderr
        );
    }
    let out = cli(&url, &key, &["pool", "--ca-cert", ca_path], LONG).await;
    assert_eq!(out.code, Some(0), "{out:?}");

    // The runner's side says the same, and a CA-issued certificate carries no pin.
    let code = mint(&operator(&url, &key, &ca.cert)).await;
    let payload = Connect::decode(code.connect.as_deref().unwrap()).unwrap();
    assert_eq!(payload.pin, None, "a CA-issued certificate is not pinned");
    let config = dir.join("runner.json");
    let connect = |ca: &str| {
        let args = [
            code.connect.as_deref().unwrap(),
            "--config",
            config.to_str().unwrap(),
            "--ca-cert",
            ca,
        ]
        .map(str::to_owned);
        async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            runner_connect(&args).await
        }
    };
    let out = connect(other_path).await;
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(
        out.stderr.contains("certificate verification failed") && out.stderr.contains("--ca-cert"),
        "{}",
        out.stderr
    );
    let out = connect(ca_path).await;
    assert_eq!(out.code, Some(0), "{out:?}");
    assert_eq!(
        saved(&config)["ca_cert"],
        serde_json::json!(std::fs::canonicalize(&ca.cert).unwrap()),
        "kept for `runner run`"
    );
}

/// Without LEASEHOLD_PUBLIC_URL a join code has `"connect": null`; with a plain-HTTP one it
/// carries the URLs and no pin.
#[tokio::test]
async fn the_connect_payload_comes_only_with_a_public_url() {
    let app = crate::support::TestApp::spawn().await;
    let alice = app.operator("acme", "alice", false).await;
    let (status, raw): (_, serde_json::Value) = alice
        .call(
            reqwest::Method::POST,
            "/v1/join-codes",
            Some(&serde_json::json!({"tier": "personal"})),
            &[],
        )
        .await
        .unwrap();
    assert_eq!(status, 201);
    assert_eq!(raw["connect"], serde_json::Value::Null, "{raw}");
    assert!(raw.as_object().unwrap().contains_key("connect"));

    let public = crate::support::TestApp::spawn_with(1, |c| {
        c.public_url = vec!["http://a.example:8080".into(), "http://b.example".into()];
    })
    .await;
    let code = mint(&public.operator("acme", "alice", false).await).await;
    let payload = Connect::decode(code.connect.as_deref().unwrap()).unwrap();
    assert_eq!(payload.code, code.code);
    assert_eq!(
        payload.servers,
        vec!["http://a.example:8080", "http://b.example"]
    );
    assert_eq!(payload.pin, None, "no TLS here, no pin");
}

/// One HTTP/1.1 request on an open TLS stream; the status code.
async fn get_on<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
    stream: &mut S,
    path: &str,
) -> u16 {
    stream
        .write_all(format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = tokio::time::timeout(LONG, stream.read(&mut chunk))
            .await
            .expect("an answer")
            .unwrap();
        assert!(n > 0, "closed: {}", String::from_utf8_lossy(&buf));
        buf.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&buf).into_owned();
        let Some(end) = text.find("\r\n\r\n") else {
            continue;
        };
        let length: usize = text[..end]
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case("content-length")
                    .then(|| v.trim().parse().unwrap())
            })
            .expect("a Content-Length");
        if buf.len() >= end + 4 + length {
            return text[9..12].parse().unwrap();
        }
    }
}

/// A TLS connection to `addr` trusting `ca`; returns it with the certificate the server showed.
async fn open(
    addr: &str,
    ca: &Path,
) -> (
    tokio_rustls::client::TlsStream<tokio::net::TcpStream>,
    CertificateDer<'static>,
) {
    let config = Trust::ca(Some(ca.to_owned())).client_config(true).unwrap();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    let tls = connector.connect(name, tcp).await.unwrap();
    let shown = tls.get_ref().1.peer_certificates().unwrap()[0].clone();
    (tls, shown)
}

/// SIGHUP re-reads the pair: a connection opened before goes on working, a new one sees the new
/// certificate; a broken file on a later SIGHUP keeps the one in use (and says so in the log).
#[tokio::test]
async fn sighup_reloads_the_certificate_and_open_connections_go_on() {
    let dir = TempDir::new("tls-hup");
    let ca = Ca::new(dir.path(), "ca");
    let live = ca.issue("live");
    let renewed = ca.issue("renewed");
    let db = fresh_database().await;
    let log = dir.join("serve.log");
    let mut serve = ServeProcess::start(
        BIN,
        &db,
        [
            ("LEASEHOLD_TLS_CERT", live.cert.to_str().unwrap()),
            ("LEASEHOLD_TLS_KEY", live.key.to_str().unwrap()),
        ],
        std::fs::File::create(&log).unwrap().into(),
    )
    .await
    .expect("serve --tls-cert listens");
    let addr = serve.url.strip_prefix("https://").unwrap().to_owned();
    let pid = Pid::from_raw(i32::try_from(serve.pid().unwrap()).unwrap());

    let (mut before, shown) = open(&addr, &ca.cert).await;
    assert_eq!(shown, live.der);
    assert_eq!(get_on(&mut before, "/healthz").await, 200);

    live.replace_with(&renewed);
    kill(pid, Signal::SIGHUP).unwrap();
    eventually(
        LONG,
        "a new connection sees the renewed certificate",
        || async { (open(&addr, &ca.cert).await.1 == renewed.der).then_some(()) },
    )
    .await;
    assert_eq!(
        get_on(&mut before, "/healthz").await,
        200,
        "the connection opened before the reload goes on"
    );
    assert_eq!(before.get_ref().1.peer_certificates().unwrap()[0], live.der);

    // A broken file: the renewed certificate stays in use.
    std::fs::write(&live.cert, "not a certificate").unwrap();
    kill(pid, Signal::SIGHUP).unwrap();
    eventually(LONG, "the failed reload is logged", || async {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains("TLS certificate reload failed")
            .then_some(())
    })
    .await;
    let (mut after, shown) = open(&addr, &ca.cert).await;
    assert_eq!(shown, renewed.der, "the last good certificate stays");
    assert_eq!(get_on(&mut after, "/healthz").await, 200);
    assert_eq!(get_on(&mut before, "/healthz").await, 200);
    serve.terminate(LONG).await.unwrap();
}

/// The shipped `deploy/haproxy-tls.cfg` with its `bind` on `port` and `pem`, its first server at
/// `replica` (the others dropped) and a `maxconn` this machine's file limit allows.
fn haproxy_tls_config(port: u16, pem: &Path, replica: &str) -> String {
    let shipped = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/haproxy-tls.cfg"),
    )
    .unwrap();
    let mut out = String::new();
    for line in shipped.lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("maxconn ") {
            out.push_str("    maxconn 1000\n");
        } else if trimmed.starts_with("bind ") {
            let shipped_crt = "/etc/haproxy/certs/leasehold.pem";
            assert!(
                line.contains("*:8443") && line.contains(shipped_crt),
                "{line}"
            );
            out.push_str(
                &line
                    .replace("*:8443", &format!("127.0.0.1:{port}"))
                    .replace(shipped_crt, pem.to_str().unwrap()),
            );
            out.push('\n');
        } else if trimmed.starts_with("server replica1 ") {
            out.push_str(&line.replace("leasehold-1:8080", replica));
            out.push('\n');
        } else if !trimmed.starts_with("server replica") {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// HAProxy terminating TLS with the shipped `deploy/haproxy-tls.cfg` in front of a plain-HTTP
/// replica reading its PROXY header: the CLI and a runner reach the service over HTTPS through
/// it, trusting the balancer's private CA.
#[tokio::test]
async fn haproxy_terminating_tls_serves_the_cli_and_a_runner() {
    let Some(haproxy) = crate::support::haproxy("haproxy_terminating_tls") else {
        return;
    };
    let dir = TempDir::new("haproxy-tls");
    let ca = Ca::new(dir.path(), "ca");
    let leaf = ca.issue("balancer");
    let pem = dir.join("leasehold.pem");
    std::fs::write(
        &pem,
        std::fs::read_to_string(&leaf.cert).unwrap() + &std::fs::read_to_string(&leaf.key).unwrap(),
    )
    .unwrap();
    let db = fresh_database().await;
    let port = free_port();
    let lb = format!("https://127.0.0.1:{port}");
    let replica = crate::support::serve_process(
        &db,
        &[
            ("LEASEHOLD_PROXY_PROTOCOL", "true"),
            ("LEASEHOLD_TRUSTED_PROXIES", "127.0.0.1"),
            ("LEASEHOLD_PUBLIC_URL", &lb),
        ],
    )
    .await;
    let config = dir.join("haproxy.cfg");
    std::fs::write(
        &config,
        haproxy_tls_config(port, &pem, replica.url.trim_start_matches("http://")),
    )
    .unwrap();
    let mut haproxy = tokio::process::Command::new(haproxy)
        .arg("-db")
        .arg("-f")
        .arg(&config)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("start haproxy");
    let key = key_in(&db, "acme", "alice", false).await;
    let alice = operator(&lb, &key, &ca.cert);
    let deadline = tokio::time::Instant::now() + LONG;
    while alice.pool().await.is_err() {
        if let Some(status) = haproxy.try_wait().unwrap() {
            panic!("haproxy exited: {status}");
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the balancer answers over HTTPS"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // The payload names the balancer and carries no pin (the replica holds no certificate).
    let code = mint(&alice).await;
    let payload = Connect::decode(code.connect.as_deref().unwrap()).unwrap();
    assert_eq!(payload.servers, vec![lb.clone()]);
    assert_eq!(payload.pin, None);
    let runner_config = dir.join("runner.json");
    let ca_path = ca.cert.to_str().unwrap();
    let out = runner_connect(&[
        code.connect.as_deref().unwrap(),
        "--config",
        runner_config.to_str().unwrap(),
        "--ca-cert",
        ca_path,
    ])
    .await;
    assert_eq!(out.code, Some(0), "{out:?}");
    let mut r = runner(&runner_config, &dir.join("work"), &["--unconfined"], &[]);
    let out = submit_wait(
        &lb,
        &key,
        &["--ca-cert", ca_path, "--", "echo", "through-haproxy"],
    )
    .await;
    assert_eq!(out.code, Some(0), "{out:?}\nrunner log:\n{}", r.log());
    assert_eq!(out.stdout, "through-haproxy\n");
    r.signal(Signal::SIGTERM);
    r.exit(LONG).await;
}

/// `leasehold dev --tls` serves HTTPS with a self-signed pair it keeps (key mode 0600) beside
/// its data directory, prints the certificate's path and the key's pin, and both trust it.
#[tokio::test]
async fn dev_tls_makes_a_self_signed_pair_and_says_how_to_trust_it() {
    let dir = TempDir::new("dev-tls");
    let port = free_port();
    let data = dir.join("state/dev-pg");
    let mut dev = tokio::process::Command::new(BIN)
        .args(["dev", "--tls", "--no-runner", "--listen"])
        .arg(format!("127.0.0.1:{port}"))
        .arg("--data-dir")
        .arg(&data)
        .env("LEASEHOLD_LOG", "warn")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines =
        tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(dev.stdout.take().unwrap()));
    let mut printed = Vec::new();
    tokio::time::timeout(Duration::from_secs(120), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            let key = line.starts_with("ak_");
            printed.push(line);
            if key {
                return;
            }
        }
        panic!("dev exited: {printed:?}");
    })
    .await
    .expect("dev prints its admin key");
    let field = |prefix: &str| {
        printed
            .iter()
            .find_map(|l| l.trim().strip_prefix(prefix))
            .unwrap_or_else(|| panic!("prints {prefix}: {printed:#?}"))
            .trim()
            .to_owned()
    };
    let server = field("export LEASEHOLD_SERVER=");
    let key = field("export LEASEHOLD_API_KEY=");
    let cert = PathBuf::from(field("export LEASEHOLD_CA_CERT="));
    let pin: Pin = field("key pin:").parse().unwrap();
    assert_eq!(server, format!("https://127.0.0.1:{port}"));
    assert_eq!(
        cert,
        std::fs::canonicalize(dir.join("state/dev-tls.crt")).unwrap()
    );
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(dir.join("state/dev-tls.key"))
            .unwrap()
            .permissions(),
    );
    assert_eq!(mode & 0o777, 0o600, "the TLS key is owner-only");
    let der = certificate_of(&cert);
    assert_eq!(
        Pin::of_cert(&der).unwrap(),
        pin,
        "the printed pin is the key's"
    );

    for trust in [
        Trust::ca(Some(cert.clone())),
        Trust {
            ca_cert: None,
            pin: Some(pin),
        },
    ] {
        let client = Client::with_trust(&server, Some(key.clone()), &trust).unwrap();
        client
            .pool()
            .await
            .unwrap_or_else(|e| panic!("{trust:?}: {e}"));
    }
    // The banner names the running binary by its absolute path.
    let paste = printed
        .iter()
        .find_map(|l| {
            l.split_once(" runner connect ")
                .map(|(_, p)| p.trim().to_owned())
        })
        .unwrap_or_else(|| panic!("prints runner connect: {printed:#?}"));
    let payload = Connect::decode(&paste).unwrap();
    assert_eq!(payload.servers, vec![server.clone()]);
    assert_eq!(payload.pin, Some(pin.to_string()));

    kill(
        Pid::from_raw(i32::try_from(dev.id().unwrap()).unwrap()),
        Signal::SIGTERM,
    )
    .unwrap();
    let status = tokio::time::timeout(LONG, dev.wait())
        .await
        .expect("dev stops on SIGTERM")
        .unwrap();
    assert!(status.success(), "{status}");
}

/// The first certificate in a PEM file.
fn certificate_of(path: &Path) -> CertificateDer<'static> {
    leasehold::tls::load_certs(path).unwrap().remove(0)
}

/// Without TLS a SIGHUP (`systemctl reload`) changes nothing: serve goes on answering over
/// plain HTTP.
#[tokio::test]
async fn sighup_without_tls_leaves_a_plain_replica_serving() {
    let db = fresh_database().await;
    let mut serve = crate::support::serve_process(&db, &[]).await;
    assert!(serve.url.starts_with("http://"), "{}", serve.url);
    let pid = Pid::from_raw(i32::try_from(serve.pid().unwrap()).unwrap());
    kill(pid, Signal::SIGHUP).unwrap();
    kill(pid, Signal::SIGHUP).unwrap();
    crate::support::readiness(&serve.url, 200, LONG).await;
    assert!(
        serve.child.try_wait().unwrap().is_none(),
        "serve survived SIGHUP"
    );
    let key = key_in(&db, "acme", "alice", false).await;
    Client::new(&serve.url, Some(key)).pool().await.unwrap();
    assert!(serve.terminate(LONG).await.unwrap().success());
}

/// A self-signed certificate as `openssl req -x509` makes it (`CA:TRUE`), for 127.0.0.1
/// only: `(cert, key)` in `dir`; `None` (after `require`) without openssl.
fn openssl_self_signed(dir: &Path) -> Option<(PathBuf, PathBuf)> {
    let (cert, key) = (dir.join("openssl.crt"), dir.join("openssl.key"));
    let made = std::process::Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
        ])
        .args(["-nodes", "-days", "2", "-subj", "/CN=127.0.0.1"])
        .args(["-addext", "subjectAltName=IP:127.0.0.1", "-keyout"])
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output();
    let missing = match &made {
        Ok(out) if out.status.success() => None,
        Ok(out) => Some(format!(
            "openssl req -x509 failed: {}",
            String::from_utf8_lossy(&out.stderr)
        )),
        Err(e) => Some(format!("openssl: {e}")),
    };
    if !crate::support::require("openssl", missing) {
        return None;
    }
    let text = std::process::Command::new("openssl")
        .args(["x509", "-noout", "-text", "-in"])
        .arg(&cert)
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&text.stdout).contains("CA:TRUE"),
        "openssl's usual self-signed certificate says CA:TRUE"
    );
    Some((cert, key))
}

/// The usual self-signed certificate (`openssl req -x509`, which says `CA:TRUE`) given as its
/// own `--ca-cert` is trusted by the CLI, `runner connect` and `runner run`; called by a name
/// it does not list, it is refused in words that say so and do not tell the user to pass the
/// `--ca-cert` they passed.
#[tokio::test]
async fn an_openssl_self_signed_ca_true_certificate_is_trusted_as_its_own_ca_cert() {
    let dir = TempDir::new("tls-openssl");
    let Some((cert, key_file)) = openssl_self_signed(dir.path()) else {
        return;
    };
    let db = fresh_database().await;
    let listen = format!("127.0.0.1:{}", free_port());
    let url = format!("https://{listen}");
    let mut serve = ServeProcess::start_on(
        BIN,
        &listen,
        &db,
        [
            ("LEASEHOLD_TLS_CERT", cert.to_str().unwrap()),
            ("LEASEHOLD_TLS_KEY", key_file.to_str().unwrap()),
        ],
        std::process::Stdio::inherit(),
    )
    .await
    .expect("serve --tls-cert takes openssl's pair");
    let key = key_in(&db, "acme", "alice", false).await;
    let ca = cert.to_str().unwrap();

    let out = cli(&url, &key, &["pool", "--ca-cert", ca], LONG).await;
    assert_eq!(out.code, Some(0), "{out:?}");

    let by_name = url.replace("127.0.0.1", "localhost");
    let out = cli(&by_name, &key, &["pool", "--ca-cert", ca], LONG).await;
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(
        out.stderr.contains("not valid for localhost") && out.stderr.contains("127.0.0.1"),
        "{}",
        out.stderr
    );
    assert!(
        !out.stderr.contains("pass --ca-cert") && !out.stderr.contains("Other("),
        "{}",
        out.stderr
    );

    // The runner's side: enrol with a bare code, --server and --ca-cert; then run a job.
    let code = mint(&operator(&url, &key, &cert)).await;
    let config = dir.join("runner.json");
    let out = runner_connect(&[
        &code.code,
        "--server",
        &url,
        "--ca-cert",
        ca,
        "--config",
        config.to_str().unwrap(),
    ])
    .await;
    assert_eq!(out.code, Some(0), "{out:?}");
    let mut r = runner(&config, &dir.join("work"), &["--unconfined"], &[]);
    let out = submit_wait(&url, &key, &["--ca-cert", ca, "--", "echo", "ca-true"]).await;
    assert_eq!(out.code, Some(0), "{out:?}\nrunner log:\n{}", r.log());
    assert_eq!(out.stdout, "ca-true\n");
    r.signal(Signal::SIGTERM);
    assert!(r.exit(LONG).await.success(), "{}", r.log());
    serve.terminate(LONG).await.unwrap();
}

/// A pinned payload's code (and so the token it buys) never goes over plain HTTP, whatever the
/// scheme's case: `runner connect <pinned lh1> --server HTTP://...`, or a pinned payload naming
/// `Http://...`, is refused before anything reaches that address; a payload carrying a terminal
/// escape sequence is echoed with it escaped.
#[tokio::test]
async fn a_pinned_payload_never_goes_over_http_in_any_case_and_echoes_are_escaped() {
    let dir = TempDir::new("tls-http-case");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap();
    let pin = Pair::self_signed(dir.path(), "pinned").pin().to_string();
    let payload = |server: String| {
        Connect {
            code: "jc_never_sent".into(),
            servers: vec![server],
            pin: Some(pin.clone()),
        }
        .encode()
    };
    let config = dir.join("runner.json");
    let config = config.to_str().unwrap();
    let https = payload(format!("https://{addr}"));
    let plain_server = format!("HTTP://{addr}");
    let plain_payload = payload(format!("Http://{addr}"));
    for args in [
        vec![https.as_str(), "--server", plain_server.as_str()],
        vec![plain_payload.as_str()],
    ] {
        let out = runner_connect(&[&args[..], &["--config", config]].concat()).await;
        assert_eq!(out.code, Some(1), "{args:?}: {out:?}");
        assert!(
            out.stderr.contains("pins the server's key") && out.stderr.contains("https://"),
            "{}",
            out.stderr
        );
    }
    assert!(
        matches!(listener.accept(), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "nothing was sent to the plain-HTTP address"
    );
    assert!(!Path::new(config).exists(), "nothing enrolled");

    let hostile = payload("\u{1b}[31mhttps://x\u{1b}]0;owned\u{7}".into());
    let out = runner_connect(&[&hostile, "--config", config]).await;
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(
        out.stderr.contains("\\u{1b}[31mhttps://x"),
        "escaped: {}",
        out.stderr
    );
    assert!(
        !out.stderr.contains('\u{1b}') && !out.stderr.contains('\u{7}'),
        "no raw control character: {:?}",
        out.stderr
    );
}

/// Issue 47 item 6: a runner enrolled over http whose server now answers HTTPS on that address
/// (`leasehold dev` restarted with `--tls`), or the reverse, says so in words and prints the
/// command that enrols it again, instead of logging a bare transport error forever.
#[tokio::test]
async fn a_runner_whose_server_changed_scheme_says_so_and_how_to_enrol_again() {
    let dir = TempDir::new("tls-scheme");
    let pair = Pair::self_signed(dir.path(), "server");
    let db = fresh_database().await;
    let plain = crate::support::start_replica(test_config(&db)).await;
    let plain_url = format!("http://{}", plain.addr);
    let (_tls, tls_url) = tls_replica(&db, &pair, false).await;
    let key = key_in(&db, "acme", "alice", false).await;
    let alice = Client::new(&plain_url, Some(key.clone()));
    let ca = pair.cert.to_str().unwrap();

    // Enrolled over http, then the address answers HTTPS.
    let config = crate::procs::enrol(&alice, &[&plain_url], dir.path(), false, &[]).await;
    let tls_addr = tls_url.strip_prefix("https://").unwrap();
    let mut saved_config = saved(&config);
    saved_config["servers"] = serde_json::json!([format!("http://{tls_addr}")]);
    std::fs::write(&config, saved_config.to_string()).unwrap();
    let r = runner(&config, &dir.join("work"), &["--unconfined"], &[]);
    eventually(LONG, "the runner says its server answers HTTPS", || async {
        let log = r.log();
        (log.contains("answers HTTPS") && log.contains("enrolled over http")).then_some(())
    })
    .await;
    let log = r.log();
    assert!(
        log.contains("leasehold join-code create")
            && log.contains("leasehold runner connect")
            && log.contains(&format!("--server {tls_url}"))
            && log.contains(&format!("--config {}", config.display())),
        "{log}"
    );
    drop(r);

    // Enrolled over https, then the address answers plain HTTP.
    let config = crate::procs::enrol(
        &alice,
        &[&tls_url],
        &dir.join("second"),
        false,
        &["--ca-cert", ca],
    )
    .await;
    let plain_addr = plain_url.strip_prefix("http://").unwrap();
    let mut saved_config = saved(&config);
    saved_config["servers"] = serde_json::json!([format!("https://{plain_addr}")]);
    std::fs::write(&config, saved_config.to_string()).unwrap();
    let r = runner(&config, &dir.join("work2"), &["--unconfined"], &[]);
    eventually(
        LONG,
        "the runner says its server answers plain HTTP",
        || async {
            let log = r.log();
            (log.contains("answers plain HTTP") && log.contains("enrolled over https"))
                .then_some(())
        },
    )
    .await;
    let log = r.log();
    assert!(
        log.contains(&format!("--server {plain_url}")) && log.contains("leasehold runner connect"),
        "{log}"
    );
    drop(r);

    // The walk's case: the server is down a moment (dev stopped), then comes back on the same
    // address in HTTPS: the runner names it at once, not a probe interval later.
    let config = crate::procs::enrol(&alice, &[&plain_url], &dir.join("third"), false, &[]).await;
    let port = free_port();
    let mut saved_config = saved(&config);
    saved_config["servers"] = serde_json::json!([format!("http://127.0.0.1:{port}")]);
    std::fs::write(&config, saved_config.to_string()).unwrap();
    let r = runner(&config, &dir.join("work3"), &["--unconfined"], &[]);
    eventually(LONG, "the runner finds no server", || async {
        r.log().contains("server did not answer").then_some(())
    })
    .await;
    let listener = TcpListener::bind(("127.0.0.1", port)).await.unwrap();
    let mut config3 = test_config(&db);
    config3.tls_cert = Some(pair.cert.clone());
    config3.tls_key = Some(pair.key.clone());
    let _back = replica::start(config3, listener).await.unwrap();
    eventually(
        Duration::from_secs(20),
        "the runner names the server back in HTTPS within 20 s (the probe interval is 30 s)",
        || async { r.log().contains("answers HTTPS").then_some(()) },
    )
    .await;
}
