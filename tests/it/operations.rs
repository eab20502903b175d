//! The production checklist's files (`deploy/production/`, docs/operations.md "Deploying on
//! three hosts") are the ones that work, tried on this machine's loopback and temporary
//! directories (their own addresses, 10.0.0.10-13, are only ever read, never dialled).
//!
//! Invariants defended:
//! - `patroni-db{1,2,3}.yml` are exactly `deploy/patroni.yml` filled in for db1..db3 by the
//!   drill's own renderer ([`fill`]), so the production files never drift from the template the
//!   drill and `tests/it/patroni.rs` run; Patroni's own validator accepts them where installed.
//! - The three etcd configurations name one cluster, each member itself in it; started (moved
//!   to loopback) they form it, and serve the v3 API's HTTP gateway Patroni's client speaks.
//! - HAProxy accepts the front configuration, keepalived both halves of the pair (and they are
//!   halves of one pair), and `systemd-analyze verify` every shipped unit, `LimitNOFILE` kept.
//! - `leasehold.env.example` sets only variables `leasehold serve` reads, and says its mode.
//! - `role-and-database.sql`, run as the superuser, gives `leasehold serve` exactly what it
//!   needs: a replica running as that role migrates, is ready and serves a lease; the role is no
//!   superuser and owns what it made; no other role connects to its database.
//! - Backup and restore, as the checklist prints them: jobs parked through a real replica,
//!   `backup.sh` (pg_basebackup with its WAL, verified) while `archive-wal.sh` archives, more
//!   jobs after the backup, then `restore.sh` into an empty directory and a new PostgreSQL on
//!   it: to a point in time, exactly the jobs parked before it; to the archive's end, a replica
//!   there sees every job, parked before or after the backup, and leases each; and a Patroni
//!   node of the shipped template, started on that directory with an empty etcd, takes it over
//!   as leader and serves the same jobs.
//! - The rolling upgrade's middle: an older replica whose prepared statements a migration made
//!   stale answers `503` (never `500`) and serves the retry.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use leasehold::commands::drill::patroni::{fill, PATRONI_TEMPLATE};
use leasehold::tooling::private_pg::{find_bin_dir, find_tool, PrivatePg};
use leasehold::wire::Tier;
use uuid::Uuid;

use crate::procs::TempDir;
use crate::support::{
    connect, dispatch, key_in, lease, pair, readiness, require, serve_process, succeeds,
    workspace_pool,
};

fn production(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("deploy/production")
        .join(file)
}

fn read(file: &str) -> String {
    std::fs::read_to_string(production(file))
        .unwrap_or_else(|e| panic!("deploy/production/{file}: {e}"))
}

// ---- the Patroni renders ----------------------------------------------------------------------

/// The values of `deploy/patroni.yml`'s placeholders on host `n` (1..=3) of the checklist.
fn production_values(n: usize) -> Vec<(&'static str, String)> {
    let ip = format!("10.0.0.1{n}");
    vec![
        ("name", format!("db{n}")),
        // Every address, so the backup timer's `curl 127.0.0.1:8008/primary` reaches it too
        // (the firewall keeps :8008 to the three hosts).
        ("rest_listen", "0.0.0.0:8008".into()),
        ("rest_connect", format!("{ip}:8008")),
        (
            "etcd_hosts",
            "10.0.0.11:2379,10.0.0.12:2379,10.0.0.13:2379".into(),
        ),
        ("pg_listen", format!("{ip}:5432")),
        ("pg_connect", format!("{ip}:5432")),
        ("data_dir", "/var/lib/postgresql/15/leasehold".into()),
        ("socket_dir", "/var/run/postgresql".into()),
        ("pgpass", "/var/lib/postgresql/.pgpass_patroni".into()),
        // db1..db3 (and the floating front address 10.0.0.10): nothing else, runners included.
        ("cidr", "10.0.0.8/29".into()),
        ("bin_dir", "/usr/lib/postgresql/15/bin".into()),
        ("ttl", "30".into()),
        ("loop_wait", "10".into()),
        ("retry_timeout", "10".into()),
        (
            "archive_command",
            "/usr/local/lib/leasehold/archive-wal.sh %p /srv/leasehold-backup/wal/%f".into(),
        ),
        (
            "superuser_password",
            "from PATRONI_SUPERUSER_PASSWORD in /etc/patroni/patroni.env".into(),
        ),
        (
            "replication_password",
            "from PATRONI_REPLICATION_PASSWORD in /etc/patroni/patroni.env".into(),
        ),
    ]
}

/// `deploy/patroni.yml` rendered for host `n`: the template filled in by the drill's [`fill`],
/// its header (which documents the placeholders) replaced by one saying what this file is.
fn render(n: usize) -> String {
    let filled = fill(PATRONI_TEMPLATE, &production_values(n)).expect("every placeholder filled");
    let body: Vec<&str> = filled.lines().skip_while(|l| l.starts_with('#')).collect();
    format!(
        "# /etc/patroni/patroni.yml on db{n} (10.0.0.1{n}): deploy/patroni.yml filled in for this host.\n\
         # Generated, do not edit: tests/it/operations.rs renders the template and checks this file\n\
         # equals the render; after changing the template, `LEASEHOLD_BLESS=1 cargo test --test it\n\
         # operations::patroni` writes the three again. The passwords below are placeholders:\n\
         # Patroni takes them from /etc/patroni/patroni.env (patroni.env.example), which overrides\n\
         # this file. docs/operations.md explains every setting.\n{}\n",
        body.join("\n")
    )
}

#[test]
fn patroni_renders_are_the_template_filled_for_db1_db2_db3() {
    let bless = std::env::var_os("LEASEHOLD_BLESS").is_some();
    for n in 1..=3 {
        let file = format!("patroni-db{n}.yml");
        let want = render(n);
        if bless {
            std::fs::write(production(&file), &want).unwrap();
            continue;
        }
        let shipped = read(&file);
        assert!(
            shipped == want,
            "deploy/production/{file} is not deploy/patroni.yml rendered for db{n}; \
             `LEASEHOLD_BLESS=1 cargo test --test it operations::patroni` writes it. Expected:\n{want}"
        );
        for setting in [
            format!("name: db{n}"),
            format!("connect_address: 10.0.0.1{n}:5432"),
            "synchronous_mode: true".into(),
            "archive_mode: \"on\"".into(),
            "data-checksums".into(),
        ] {
            assert!(shipped.contains(&setting), "{file} lacks {setting}");
        }
    }
}

/// Patroni's own check of each render, where Patroni is installed: the settings' names and
/// types, and that the PostgreSQL binaries exist. The validator also dials every address it is
/// given, so it checks a copy moved to loopback (10.0.0.N to 127.0.0.N): nothing is sent to
/// the hosts' addresses, and that nothing answers there is expected.
#[test]
fn patroni_validates_the_renders() {
    let Some(patroni) = crate::support::installed(
        "patroni_validates_the_renders",
        &["/usr/bin/patroni", "/usr/local/bin/patroni"],
        "patroni is not installed (Debian: patroni; .ci/run installs it)",
    ) else {
        return;
    };
    if !Path::new("/usr/lib/postgresql/15/bin/postgres").exists() {
        let _ = require(
            "patroni_validates_the_renders",
            Some("the renders name PostgreSQL 15's binaries, not installed here".into()),
        );
        return;
    }
    let dir = TempDir::new("patroni-validate");
    for n in 1..=3 {
        let file = format!("patroni-db{n}.yml");
        let shipped = read(&file);
        assert!(shipped.contains(&format!("10.0.0.1{n}:5432")));
        let moved = dir.join(&file);
        std::fs::write(&moved, shipped.replace("10.0.0.", "127.0.0.")).unwrap();
        assert!(!std::fs::read_to_string(&moved).unwrap().contains("10.0.0."));
        let out = Command::new(patroni)
            .arg("--validate-config")
            .arg(&moved)
            .output()
            .unwrap();
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        // Expected: lines about the (moved) addresses and ports, whatever this machine has
        // there, and about two keys left out on purpose (`bootstrap.pg_hba`: the template sets
        // `postgresql.pg_hba`; `authentication.rewind`: pg_rewind runs as the superuser).
        let expected = |l: &str| {
            l.contains("127.0.0.1")
                || l.contains("0.0.0.0")
                || l.starts_with("bootstrap.pg_hba ")
                || l.starts_with("postgresql.authentication.rewind ")
        };
        let complaints: Vec<&str> = said
            .lines()
            .filter(|l| !l.trim().is_empty() && !expected(l))
            .collect();
        assert!(
            complaints.is_empty(),
            "patroni --validate-config {file} (moved to loopback): {said}"
        );
    }
}

// ---- etcd -------------------------------------------------------------------------------------

/// `key: value` of a flat YAML file, comments dropped.
fn flat_yaml(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter(|l| !l.trim_start().starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| {
            let (k, v) = l.split_once(':')?;
            Some((k.trim().to_owned(), v.trim().trim_matches('"').to_owned()))
        })
        .collect()
}

#[test]
fn the_etcd_configs_name_one_cluster() {
    let mut clusters = BTreeSet::new();
    for n in 1..=3 {
        let conf = flat_yaml(&read(&format!("etcd-db{n}.yml")));
        let get = |k: &str| {
            conf.iter()
                .find(|(key, _)| key == k)
                .map(|(_, v)| v.clone())
                .unwrap_or_else(|| panic!("etcd-db{n}.yml sets {k}"))
        };
        let ip = format!("10.0.0.1{n}");
        assert_eq!(get("name"), format!("db{n}"));
        assert_eq!(
            get("initial-advertise-peer-urls"),
            format!("http://{ip}:2380")
        );
        assert_eq!(get("listen-peer-urls"), format!("http://{ip}:2380"));
        assert_eq!(get("advertise-client-urls"), format!("http://{ip}:2379"));
        assert!(get("listen-client-urls").contains(&format!("http://{ip}:2379")));
        assert!(
            get("initial-cluster").contains(&format!("db{n}=http://{ip}:2380")),
            "etcd-db{n}.yml: the cluster names this member"
        );
        clusters.insert((get("initial-cluster"), get("initial-cluster-token")));
    }
    assert_eq!(clusters.len(), 1, "one initial cluster: {clusters:?}");
    // Patroni's etcd hosts are the members' client URLs.
    let patroni = read("patroni-db1.yml");
    assert!(patroni.contains("hosts: 10.0.0.11:2379,10.0.0.12:2379,10.0.0.13:2379"));
}

/// A free TCP port on `ip` (a loopback address).
fn free_port_on(ip: &str) -> u16 {
    std::net::TcpListener::bind((ip, 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The three shipped etcd configurations, each member moved from 10.0.0.1N to 127.0.0.1N
/// (free ports, a temporary data directory, no shared 127.0.0.1 listener): they start and
/// elect a leader together, as one cluster of three.
#[tokio::test]
async fn the_etcd_configs_start_one_cluster_of_three() {
    let Some(etcd) = crate::support::installed(
        "the_etcd_configs_start_one_cluster_of_three",
        &["/usr/bin/etcd", "/usr/local/bin/etcd"],
        "etcd is not installed (Debian: etcd-server; .ci/run installs it)",
    ) else {
        return;
    };
    let dir = TempDir::new("etcd3");
    let mut texts: Vec<String> = (1..=3).map(|n| read(&format!("etcd-db{n}.yml"))).collect();
    let mut clients = Vec::new();
    for n in 1..=3 {
        let (ip, lo) = (format!("10.0.0.1{n}"), format!("127.0.0.1{n}"));
        let (client, peer) = (free_port_on(&lo), free_port_on(&lo));
        for text in &mut texts {
            *text = text
                .replace(&format!("{ip}:2379"), &format!("{lo}:{client}"))
                .replace(&format!("{ip}:2380"), &format!("{lo}:{peer}"));
        }
        clients.push(format!("http://{lo}:{client}"));
    }
    let mut members = Vec::new();
    for (i, text) in texts.iter().enumerate() {
        let text = text.replace(",http://127.0.0.1:2379", "").replace(
            "/var/lib/etcd/leasehold",
            dir.join(&format!("data{i}")).to_str().unwrap(),
        );
        assert!(
            !text.contains("10.0.0.") && !text.contains("127.0.0.1:2379"),
            "{text}"
        );
        let config = dir.join(&format!("etcd{i}.yml"));
        std::fs::write(&config, text).unwrap();
        let log = std::fs::File::create(dir.join(&format!("etcd{i}.log"))).unwrap();
        members.push(
            tokio::process::Command::new(etcd)
                .arg("--config-file")
                .arg(&config)
                .stdin(std::process::Stdio::null())
                .stdout(log.try_clone().unwrap())
                .stderr(log)
                .kill_on_drop(true)
                .spawn()
                .unwrap(),
        );
    }
    let http = reqwest::Client::new();
    for url in &clients {
        crate::support::eventually(
            Duration::from_secs(60),
            &format!("etcd member {url} healthy (logs in {})", dir.0.display()),
            || async {
                let r = http
                    .get(format!("{url}/health"))
                    .timeout(Duration::from_secs(2))
                    .send()
                    .await
                    .ok()?;
                let body: serde_json::Value = r.json().await.ok()?;
                (body["health"] == "true").then_some(())
            },
        )
        .await;
    }
    // One cluster: every member lists the same three.
    let answer = http
        .post(format!("{}/v3/cluster/member/list", clients[0]))
        .header("content-type", "application/json")
        .body("{}")
        .send()
        .await
        .unwrap();
    let status = answer.status();
    let text = answer.text().await.unwrap();
    let r: serde_json::Value = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("member list: {status} {text:?}: {e}"));
    let mut names: Vec<&str> = r["members"]
        .as_array()
        .expect("members")
        .iter()
        .filter_map(|m| m["name"].as_str())
        .collect();
    names.sort_unstable();
    assert_eq!(names, ["db1", "db2", "db3"], "{r}");
    drop(members);
}

// ---- HAProxy and keepalived ----------------------------------------------------------------------

#[test]
fn haproxy_accepts_the_front_config() {
    let Some(haproxy) = crate::support::haproxy("haproxy_accepts_the_front_config") else {
        return;
    };
    let dir = TempDir::new("front-haproxy");
    // Its certificate file, which `-c` opens: a throw-away self-signed one in its place.
    let cert =
        rcgen::generate_simple_self_signed(vec!["leasehold.example.com".to_owned()]).unwrap();
    let pem = dir.join("leasehold.pem");
    std::fs::write(&pem, cert.cert.pem() + &cert.signing_key.serialize_pem()).unwrap();
    let shipped = read("haproxy.cfg");
    let shipped_crt = "/etc/haproxy/certs/leasehold.pem";
    assert!(shipped.contains(shipped_crt));
    for server in ["10.0.0.11:8080", "10.0.0.12:8080", "10.0.0.13:8080"] {
        assert!(shipped.contains(server), "a replica on {server}");
    }
    assert!(shipped.contains("send-proxy-v2") && shipped.contains("GET /readyz"));
    let config = dir.join("haproxy.cfg");
    std::fs::write(&config, shipped.replace(shipped_crt, pem.to_str().unwrap())).unwrap();
    succeeds(
        Command::new(haproxy).arg("-c").arg("-f").arg(&config),
        "haproxy -c",
    );
}

/// This machine's first network interface other than loopback (keepalived refuses `lo`).
fn an_interface() -> Option<String> {
    if Path::new("/sys/class/net/eth0").exists() {
        return Some("eth0".into());
    }
    let mut names: Vec<String> = std::fs::read_dir("/sys/class/net")
        .ok()?
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n != "lo")
        .collect();
    names.sort();
    names.into_iter().next()
}

#[test]
fn keepalived_accepts_both_halves_of_the_pair() {
    let a = read("keepalived-db1.conf");
    let b = read("keepalived-db2.conf");
    let setting = |text: &str, key: &str| -> String {
        text.lines()
            .map(str::trim)
            .find_map(|l| l.strip_prefix(&format!("{key} ")))
            .unwrap_or_else(|| panic!("keepalived config sets {key}"))
            .to_owned()
    };
    for key in ["virtual_router_id", "advert_int", "state", "interface"] {
        assert_eq!(setting(&a, key), setting(&b, key), "{key} the same on both");
    }
    assert!(a.contains("10.0.0.10/24") && b.contains("10.0.0.10/24"));
    assert_ne!(setting(&a, "priority"), setting(&b, "priority"));
    assert_eq!(setting(&a, "unicast_src_ip"), "10.0.0.11");
    assert_eq!(setting(&b, "unicast_src_ip"), "10.0.0.12");
    assert!(a.contains("nopreempt") && b.contains("nopreempt"));

    let test = "keepalived_accepts_both_halves_of_the_pair";
    let Some(keepalived) = crate::support::installed(
        test,
        &["/usr/sbin/keepalived", "/usr/local/sbin/keepalived"],
        "keepalived is not installed (apt-get install keepalived; .ci/run does)",
    ) else {
        return;
    };
    let interface = an_interface();
    if !require(
        test,
        interface
            .is_none()
            .then(|| "no network interface but loopback to check against".to_owned()),
    ) {
        return;
    }
    let interface = interface.unwrap();
    let dir = TempDir::new("keepalived");
    for (n, text) in [(1, &a), (2, &b)] {
        let config = dir.join(&format!("keepalived-db{n}.conf"));
        std::fs::write(&config, text.replace("eth0", &interface)).unwrap();
        // (-t exits 0 for a file that is not there: it is, just written.)
        succeeds(
            Command::new(keepalived).arg("-t").arg("-f").arg(&config),
            &format!("keepalived -t keepalived-db{n}.conf"),
        );
    }
}

// ---- systemd units ----------------------------------------------------------------------------

#[test]
fn systemd_verifies_every_shipped_unit() {
    let units = [
        ("etcd.service", production("etcd.service")),
        ("patroni.service", production("patroni.service")),
        (
            "leasehold-backup.service",
            production("leasehold-backup.service"),
        ),
        (
            "leasehold-backup.timer",
            production("leasehold-backup.timer"),
        ),
        (
            "leasehold.service",
            Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/leasehold.service"),
        ),
    ];
    for (name, path) in &units {
        let text = std::fs::read_to_string(path).unwrap();
        // The long-running services (the backup is a oneshot).
        if ["etcd.service", "patroni.service", "leasehold.service"].contains(name) {
            assert!(
                text.contains("\nLimitNOFILE=65536\n"),
                "{name} keeps LimitNOFILE"
            );
        }
    }
    // What the checklist's packages install must be here; leasehold's own files are put in
    // their place from this checkout (systemd-analyze checks every command is executable).
    let packaged = ["/usr/bin/etcd", "/usr/bin/patroni", "/usr/bin/curl"];
    let mut missing: Vec<&str> = packaged
        .into_iter()
        .filter(|p| !Path::new(p).exists())
        .collect();
    if Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_err()
    {
        missing.push("systemd-analyze");
    }
    let why = (!missing.is_empty()).then(|| {
        format!(
            "not installed: {} (Debian: etcd-server, patroni, curl, systemd; .ci/run installs them)",
            missing.join(", ")
        )
    });
    if !require("systemd_verifies_every_shipped_unit", why) {
        return;
    }
    let dir = TempDir::new("units");
    let lib = dir.join("lib");
    std::fs::create_dir_all(&lib).unwrap();
    for script in ["backup.sh", "restore.sh", "archive-wal.sh"] {
        std::fs::copy(production(script), lib.join(script)).unwrap();
    }
    let mut files = Vec::new();
    for (name, path) in &units {
        let text = std::fs::read_to_string(path)
            .unwrap()
            .replace(
                "/usr/local/bin/leasehold ",
                &format!("{} ", env!("CARGO_BIN_EXE_leasehold")),
            )
            .replace("/usr/local/lib/leasehold/", &format!("{}/", lib.display()));
        let file = dir.join(name);
        std::fs::write(&file, text).unwrap();
        files.push(file);
    }
    succeeds(
        Command::new("systemd-analyze")
            .args(["verify", "--man=no"])
            .args(&files),
        "systemd-analyze verify",
    );
}

// ---- the environment file ----------------------------------------------------------------------

#[test]
fn the_env_example_sets_only_what_serve_reads() {
    let example = read("leasehold.env.example");
    assert!(
        example.contains("-m 0600") && example.contains("-o root"),
        "it says its owner and mode"
    );
    let help = Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(["serve", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    let names: Vec<&str> = example
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| l.split_once('=').expect("NAME=value").0)
        .collect();
    for want in [
        "DATABASE_URL",
        "LEASEHOLD_SECRETS_KEY",
        "LEASEHOLD_PROXY_PROTOCOL",
        "LEASEHOLD_TRUSTED_PROXIES",
        "LEASEHOLD_PUBLIC_URL",
    ] {
        assert!(names.contains(&want), "the example sets {want}");
    }
    for name in names {
        assert!(
            help.contains(&format!("[env: {name}")),
            "`leasehold serve` reads no {name}"
        );
    }
    let url = example
        .lines()
        .find_map(|l| l.strip_prefix("DATABASE_URL="))
        .unwrap();
    assert!(url.contains("target_session_attrs=read-write"));
    for host in ["10.0.0.11:5432", "10.0.0.12:5432", "10.0.0.13:5432"] {
        assert!(url.contains(host), "every database host: {url}");
    }
}

/// `leasehold ARGS... --help` with `envs` set: its standard output.
fn help_of(path: &[String], envs: &[(String, String)]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(path)
        .arg("--help")
        .envs(envs.iter().map(|(k, v)| (k, v)))
        .output()
        .unwrap();
    assert!(out.status.success(), "{path:?} --help");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The names of the subcommands a help text lists (`help` aside).
fn subcommands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter(|l| l.starts_with("  ") && !l[2..].starts_with(' '))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_owned)
        .collect()
}

/// Issue 52 row 2: no help text shows the value of a setting that can be secret. Every
/// command's `--help` (both crates' commands: the people's and the runner's are the
/// `leasehold-runner` crate's, flattened in) runs with every variable any of them reads whose
/// name says it may carry a credential (a URL, a key, a token, a password) set to a value
/// holding a mark: `DATABASE_URL=postgres://leasehold:<mark>@...` above all. The mark is in no
/// help text; and a malformed secrets key is refused without quoting it.
#[test]
fn no_help_text_or_refusal_shows_a_secret_settings_value() {
    const MARK: &str = "Hx5secretMARK";
    let secret = |name: &str| {
        [
            "URL", "KEY", "TOKEN", "PASSWORD", "SECRET", "SERVER", "STORE",
        ]
        .iter()
        .any(|w| name.contains(w))
    };
    // Every command, and every variable their help texts name.
    let mut commands: Vec<Vec<String>> = vec![Vec::new()];
    let mut names = BTreeSet::new();
    let mut i = 0;
    while i < commands.len() {
        let path = commands[i].clone();
        let help = help_of(&path, &[]);
        for part in help.split("[env: ").skip(1) {
            let name: String = part
                .chars()
                .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
                .collect();
            names.insert(name);
        }
        for sub in subcommands(&help) {
            let mut next = path.clone();
            next.push(sub);
            commands.push(next);
        }
        i += 1;
    }
    assert!(
        commands.len() > 20,
        "the walk found the commands: {commands:?}"
    );
    for want in [
        "DATABASE_URL",
        "LEASEHOLD_API_KEY",
        "LEASEHOLD_SECRETS_KEY",
        "LEASEHOLD_SERVER",
    ] {
        assert!(names.contains(want), "some help names {want}: {names:?}");
    }
    let envs: Vec<(String, String)> = names
        .iter()
        .filter(|n| secret(n))
        .map(|n| {
            (
                n.clone(),
                format!("postgres://leasehold:{MARK}@db.example:5432/{MARK}"),
            )
        })
        .collect();
    for path in &commands {
        let help = help_of(path, &envs);
        let shown: Vec<&str> = help.lines().filter(|l| l.contains(MARK)).collect();
        assert!(
            shown.is_empty(),
            "`leasehold {}` --help shows {shown:?}",
            path.join(" ")
        );
    }
    // A refusal of a malformed key does not quote it either.
    let out = Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(["serve", "--listen", "127.0.0.1:0"])
        .env(
            "DATABASE_URL",
            format!("postgres://leasehold:{MARK}@127.0.0.1:1/x"),
        )
        .env("LEASEHOLD_SECRETS_KEY", format!("{MARK}-not-base64"))
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out.status.success(), "a malformed key is refused");
    assert!(
        !text.contains(MARK),
        "the refusal quotes the setting: {text}"
    );
}

// ---- the role and database, backup and restore --------------------------------------------------

/// Run `role-and-database.sql` with psql as the superuser of `admin_url`, the role's password
/// in `LEASEHOLD_DB_PASSWORD` (`None`: unset), as the checklist does.
fn run_role_sql(admin_url: &str, password: Option<&str>) -> std::process::Output {
    let psql = find_tool("psql").expect("psql installed with the server binaries");
    let mut cmd = Command::new(psql);
    cmd.arg("-X")
        .arg("-f")
        .arg(production("role-and-database.sql"))
        .arg(admin_url)
        .env_remove("LEASEHOLD_DB_PASSWORD");
    if let Some(p) = password {
        cmd.env("LEASEHOLD_DB_PASSWORD", p);
    }
    cmd.output().unwrap()
}

/// The role's URL on `pg`, in the form leasehold.env.example gives.
fn role_url(pg: &PrivatePg, password: &str) -> String {
    format!(
        "postgresql://leasehold:{password}@127.0.0.1:{}/leasehold?target_session_attrs=read-write",
        pg.port
    )
}

async fn role_and_database(pg: &PrivatePg) -> String {
    let admin = pg.url("postgres");
    let refused = run_role_sql(&admin, None);
    assert!(!refused.status.success(), "no password, no role");
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("LEASEHOLD_DB_PASSWORD"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    let password = Uuid::new_v4().simple().to_string();
    let out = run_role_sql(&admin, Some(&password));
    assert!(
        out.status.success(),
        "role-and-database.sql: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    role_url(pg, &password)
}

/// Start a private PostgreSQL off the async runtime.
async fn start_pg(dir: PathBuf, extra: Vec<String>) -> PrivatePg {
    tokio::task::spawn_blocking(move || {
        let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
        PrivatePg::start_with(&dir, true, true, &extra).expect("private PostgreSQL")
    })
    .await
    .unwrap()
}

const NO_RUNNER_FOR_AN_HOUR: (&str, &str) = ("LEASEHOLD_NO_RUNNER_TIMEOUT_MS", "3600000");

#[tokio::test]
async fn the_role_sql_gives_serve_exactly_what_it_needs() {
    let dir = TempDir::new("role-sql");
    let pg = start_pg(dir.join("pg"), vec![]).await;
    let url = role_and_database(&pg).await;

    let mut serve = serve_process(&url, &[NO_RUNNER_FOR_AN_HOUR]).await;
    readiness(&serve.url, 200, Duration::from_secs(30)).await;
    let key = key_in(&url, "acme", "ops", true).await;
    let operator = leasehold::client::Client::new(serve.url.clone(), Some(key));
    let (_, runner) = pair(&operator, Tier::Workspace, &[], 1).await;
    let job = dispatch(&operator, workspace_pool(), serde_json::json!({"n": 1})).await;
    let leased = lease(&runner, 10_000, 1).await;
    assert_eq!(leased.iter().map(|j| j.id).collect::<Vec<_>>(), [job.id]);

    let role = connect(&url).await;
    let row = role
        .query_one(
            "SELECT rolsuper, rolcreaterole, rolcreatedb, rolreplication FROM pg_roles
              WHERE rolname = current_user",
            &[],
        )
        .await
        .unwrap();
    let rights: [bool; 4] = [row.get(0), row.get(1), row.get(2), row.get(3)];
    assert_eq!(
        rights, [false; 4],
        "superuser, createrole, createdb, replication"
    );
    let foreign: i64 = role
        .query_one(
            "SELECT count(*) FROM pg_tables WHERE schemaname = 'public' AND tableowner <> 'leasehold'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(foreign, 0, "the role owns every table it made");

    // Another login role cannot even connect to leasehold's database.
    let admin = connect(&pg.url("postgres")).await;
    admin
        .batch_execute("CREATE ROLE other LOGIN PASSWORD 'other-password'")
        .await
        .unwrap();
    let other = format!(
        "postgresql://other:other-password@127.0.0.1:{}/leasehold",
        pg.port
    );
    let refused = tokio_postgres::connect(&other, tokio_postgres::NoTls)
        .await
        .err()
        .expect("refused");
    assert_eq!(
        refused.code(),
        Some(&tokio_postgres::error::SqlState::INSUFFICIENT_PRIVILEGE),
        "{refused:?}"
    );
    serve.terminate(Duration::from_secs(15)).await.unwrap();
}

/// Run a shipped script as the checklist does: as the `postgres` OS user (when we are root),
/// from `bin` (a copy that user can read), with `PGBIN` naming this machine's binaries.
fn as_postgres(
    bin: &Path,
    script: &str,
    args: &[&Path],
    env: &[(&str, &str)],
) -> std::process::Output {
    // Where `postgres` really lives: a PATH directory may link only initdb, pg_ctl, postgres.
    let pgbin = std::fs::canonicalize(find_bin_dir().unwrap().join("postgres"))
        .unwrap()
        .parent()
        .unwrap()
        .to_owned();
    let mut cmd = if nix::unistd::geteuid().is_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--", "env"]);
        c.arg(format!("PGBIN={}", pgbin.display()));
        c.args(env.iter().map(|(k, v)| format!("{k}={v}")));
        c.arg(bin.join(script));
        c
    } else {
        let mut c = Command::new(bin.join(script));
        c.env("PGBIN", &pgbin).envs(env.iter().copied());
        c
    };
    succeeds(cmd.args(args).current_dir("/"), script)
}

/// A directory the `postgres` OS user owns (when we are root).
fn postgres_dir(path: PathBuf) -> PathBuf {
    std::fs::create_dir_all(&path).unwrap();
    if nix::unistd::geteuid().is_root() {
        let (uid, gid) = leasehold::tooling::private_pg::postgres_owner().unwrap();
        std::os::unix::fs::chown(&path, Some(uid), Some(gid)).unwrap();
    }
    path
}

#[tokio::test]
async fn backup_and_restore_bring_back_every_parked_job() {
    let dir = TempDir::new("backup");
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    for script in ["backup.sh", "restore.sh", "archive-wal.sh"] {
        std::fs::copy(production(script), bin.join(script)).unwrap();
    }
    let wal = postgres_dir(dir.join("wal"));
    let base = postgres_dir(dir.join("base"));
    let restored = postgres_dir(dir.join("restored"));

    // The primary, archiving as deploy/patroni.yml has it (the script, the archive elsewhere).
    let mut pg = start_pg(
        dir.join("pg"),
        vec![
            "archive_mode=on".into(),
            format!(
                "archive_command={}/archive-wal.sh %p {}/%f",
                bin.display(),
                wal.display()
            ),
        ],
    )
    .await;
    // Under Patroni the server's settings live in its data directory (so in every backup);
    // this one was given max_connections on its command line, which a standby replaying its WAL
    // must match: keep it in the data directory too, as Patroni does.
    let admin = connect(&pg.url("postgres")).await;
    admin
        .batch_execute("ALTER SYSTEM SET max_connections = 500")
        .await
        .unwrap();
    let url = role_and_database(&pg).await;
    let mut serve = serve_process(&url, &[NO_RUNNER_FOR_AN_HOUR]).await;
    let key = key_in(&url, "acme", "ops", true).await;
    let operator = leasehold::client::Client::new(serve.url.clone(), Some(key));
    let (_, runner) = pair(&operator, Tier::Workspace, &[], 100).await;
    let mut parked = BTreeSet::new();
    for i in 0..10 {
        parked.insert(
            dispatch(
                &operator,
                workspace_pool(),
                serde_json::json!({"before": i}),
            )
            .await
            .id,
        );
    }

    // The backup, as the timer takes it (the replication connection through the URL form the
    // checklist gives).
    let backup_url = format!(
        "postgresql://postgres@127.0.0.1:{}/postgres?target_session_attrs=read-write",
        pg.port
    );
    let out = as_postgres(
        &bin,
        "backup.sh",
        &[Path::new(&backup_url), &base, &wal],
        &[("PGPASSWORD", pg.password())],
    );
    let taken = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    assert!(
        taken.starts_with(&base) && taken.join("backup_manifest").exists(),
        "{taken:?}"
    );

    // Jobs parked after the backup live only in the archived WAL: five before a point in time
    // (the database's clock, read once they are committed), five after it.
    let mut to_the_point = parked.clone();
    for i in 0..5 {
        let id = dispatch(&operator, workspace_pool(), serde_json::json!({"after": i}))
            .await
            .id;
        parked.insert(id);
        to_the_point.insert(id);
    }
    let point: String = admin
        .query_one(
            "SELECT to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    for i in 5..10 {
        parked.insert(
            dispatch(&operator, workspace_pool(), serde_json::json!({"after": i}))
                .await
                .id,
        );
    }
    let last: String = admin
        .query_one("SELECT pg_walfile_name(pg_switch_wal())", &[])
        .await
        .unwrap()
        .get(0);
    crate::support::eventually(Duration::from_secs(30), "the last segment archived", || {
        let archived = wal.join(&last);
        async move { archived.exists().then_some(()) }
    })
    .await;

    // The primary is gone for good.
    serve.terminate(Duration::from_secs(15)).await.unwrap();
    drop(admin);
    tokio::task::spawn_blocking(move || {
        pg.stop();
        drop(pg);
    })
    .await
    .unwrap();

    // Back to the point in time: the jobs parked before it, none after.
    let pitr = postgres_dir(dir.join("pitr"));
    as_postgres(
        &bin,
        "restore.sh",
        &[&taken, &pitr, &wal, Path::new(&point)],
        &[],
    );
    let pitr_pg = start_pg(pitr, vec![]).await;
    assert_eq!(job_ids(&pitr_pg).await, to_the_point, "restored to {point}");
    tokio::task::spawn_blocking(move || drop(pitr_pg))
        .await
        .unwrap();

    // The whole archive: the restore the checklist prints, then a new server on what it made.
    let out = as_postgres(&bin, "restore.sh", &[&taken, &restored, &wal], &[]);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("(timeline 2)"),
        "a new timeline after the archive: {said}"
    );
    // Kept when it stops (not temporary): Patroni takes the same directory over below.
    let new_pg = {
        let restored = restored.clone();
        tokio::task::spawn_blocking(move || PrivatePg::start(&restored, true, false))
            .await
            .unwrap()
            .expect("PostgreSQL on the restored directory")
    };
    let new_url = url.replace(
        &format!(":{}/", url_port(&url)),
        &format!(":{}/", new_pg.port),
    );
    assert_ne!(new_url, url);
    let mut serve = serve_process(&new_url, &[NO_RUNNER_FOR_AN_HOUR]).await;
    readiness(&serve.url, 200, Duration::from_secs(30)).await;

    // The runner paired before the backup leases every job, each once.
    let token = runner.token().expect("a runner token").to_owned();
    let runner = leasehold::client::Client::new(serve.url.clone(), Some(token));
    let mut got = BTreeSet::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while got.len() < parked.len() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "leased {} of {} jobs",
            got.len(),
            parked.len()
        );
        for j in lease(&runner, 1_000, 100).await {
            assert!(got.insert(j.id), "job {} leased twice", j.id);
        }
    }
    assert_eq!(got, parked, "every job parked before and after the backup");
    serve.terminate(Duration::from_secs(15)).await.unwrap();
    let superuser_password = new_pg.password().to_owned();
    tokio::task::spawn_blocking(move || drop(new_pg))
        .await
        .unwrap();

    // The checklist's next step: Patroni, finding no cluster in etcd, takes the directory over
    // as leader.
    patroni_takes_over(&dir, &restored, &superuser_password, &parked).await;
}

/// Start one etcd member and one Patroni node (the shipped template, on loopback) on the
/// restored data directory `data`; wait until Patroni leads on it, and check it serves every
/// job in `jobs`. Skipped (and counted) where Patroni or etcd is not installed.
async fn patroni_takes_over(dir: &TempDir, data: &Path, password: &str, jobs: &BTreeSet<Uuid>) {
    use leasehold::commands::drill::patroni::missing_tools;
    let missing = missing_tools();
    let why = (!missing.is_empty()).then(|| format!("not installed: {}", missing.join(", ")));
    if !require(
        "backup_and_restore: Patroni takes the restored directory over",
        why,
    ) {
        return;
    }
    let port = || free_port_on("127.0.0.1");
    let (etcd_client, etcd_peer, rest, pg_port) = (port(), port(), port(), port());
    let etcd_log = std::fs::File::create(dir.join("etcd.log")).unwrap();
    let _etcd = tokio::process::Command::new("etcd")
        .args(["--name", "e0", "--data-dir"])
        .arg(dir.join("etcd"))
        .arg(format!(
            "--listen-client-urls=http://127.0.0.1:{etcd_client}"
        ))
        .arg(format!(
            "--advertise-client-urls=http://127.0.0.1:{etcd_client}"
        ))
        .arg(format!("--listen-peer-urls=http://127.0.0.1:{etcd_peer}"))
        .arg(format!(
            "--initial-advertise-peer-urls=http://127.0.0.1:{etcd_peer}"
        ))
        .arg(format!("--initial-cluster=e0=http://127.0.0.1:{etcd_peer}"))
        .stdout(etcd_log.try_clone().unwrap())
        .stderr(etcd_log)
        .kill_on_drop(true)
        .spawn()
        .expect("etcd");
    let node = postgres_dir(dir.join("patroni"));
    let pgbin = std::fs::canonicalize(find_bin_dir().unwrap().join("postgres"))
        .unwrap()
        .parent()
        .unwrap()
        .to_owned();
    let config = fill(
        PATRONI_TEMPLATE,
        &[
            ("name", "db1".into()),
            ("rest_listen", format!("127.0.0.1:{rest}")),
            ("rest_connect", format!("127.0.0.1:{rest}")),
            ("etcd_hosts", format!("127.0.0.1:{etcd_client}")),
            ("pg_listen", format!("127.0.0.1:{pg_port}")),
            ("pg_connect", format!("127.0.0.1:{pg_port}")),
            ("data_dir", data.display().to_string()),
            ("bin_dir", pgbin.display().to_string()),
            ("pgpass", node.join("pgpass").display().to_string()),
            ("socket_dir", node.display().to_string()),
            ("cidr", "127.0.0.1/32".into()),
            ("ttl", "20".into()),
            ("loop_wait", "2".into()),
            ("retry_timeout", "6".into()),
            ("archive_command", "/bin/true".into()),
            ("superuser_password", password.into()),
            ("replication_password", "unused-here".into()),
        ],
    )
    .unwrap();
    let config_path = node.join("patroni.yml");
    std::fs::write(&config_path, config).unwrap();
    let (uid, gid) = if nix::unistd::geteuid().is_root() {
        leasehold::tooling::private_pg::postgres_owner().unwrap()
    } else {
        (
            nix::unistd::geteuid().as_raw(),
            nix::unistd::getegid().as_raw(),
        )
    };
    let log = std::fs::File::create(dir.join("patroni.log")).unwrap();
    let mut patroni = tokio::process::Command::new("patroni")
        .arg(&config_path)
        .current_dir(&node)
        .env("HOME", &node)
        .uid(uid)
        .gid(gid)
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .expect("patroni");
    let http = reqwest::Client::new();
    let logs = dir.0.display().to_string();
    crate::support::eventually(
        Duration::from_secs(90),
        &format!("Patroni leading on the restored directory (logs in {logs})"),
        || async {
            let r = http
                .get(format!("http://127.0.0.1:{rest}/primary"))
                .timeout(Duration::from_secs(2))
                .send()
                .await
                .ok()?;
            (r.status() == 200).then_some(())
        },
    )
    .await;
    let url = format!("postgresql://postgres:{password}@127.0.0.1:{pg_port}/leasehold");
    let ids: BTreeSet<Uuid> = connect(&url)
        .await
        .query("SELECT id FROM jobs", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(&ids, jobs, "the jobs, under Patroni");

    // Patroni stops its PostgreSQL on SIGTERM; a postmaster it left is stopped by hand.
    if let Some(pid) = patroni.id() {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
    }
    let _ = tokio::time::timeout(Duration::from_secs(30), patroni.wait()).await;
    drop(patroni);
    let _ = as_postgres_quiet(&pgbin, data);
}

/// `pg_ctl stop -m immediate` on `data` as its owner, whatever state it is in.
fn as_postgres_quiet(pgbin: &Path, data: &Path) -> std::io::Result<std::process::Output> {
    let mut cmd = Command::new(pgbin.join("pg_ctl"));
    if nix::unistd::geteuid().is_root() {
        use std::os::unix::process::CommandExt;
        let (uid, gid) = leasehold::tooling::private_pg::postgres_owner().unwrap();
        cmd.uid(uid).gid(gid);
    }
    cmd.args(["stop", "-m", "immediate", "-D"])
        .arg(data)
        .current_dir("/")
        .output()
}

/// Every job's id in the `leasehold` database of `pg`, read as its superuser.
async fn job_ids(pg: &PrivatePg) -> BTreeSet<Uuid> {
    connect(&pg.url("leasehold"))
        .await
        .query("SELECT id FROM jobs", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// The port of a `postgresql://user:pw@127.0.0.1:PORT/db` URL.
fn url_port(url: &str) -> u16 {
    url.split("127.0.0.1:")
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .and_then(|p| p.parse().ok())
        .expect("a loopback URL with a port")
}

/// The rolling upgrade's middle: a newer replica has migrated (here, a column added to `jobs`
/// by hand, as a migration would) under an older replica whose pooled connections hold
/// prepared statements reading `jobs`. PostgreSQL refuses those ("cached plan must not change
/// result type"); the older replica answers such a call `503` with `Retry-After` (never `500`),
/// prepares its statements anew, and the retry is served: reads, the job listing, a dispatch
/// and a runner's lease.
#[tokio::test]
async fn a_replica_keeps_serving_after_a_migration_changes_a_table_under_its_statements() {
    let app = crate::support::TestApp::spawn().await;
    let url = app.url(0);
    let key = app.key("upgrade", "alice", true).await;
    let operator = leasehold::client::Client::new(url.clone(), Some(key.clone()));
    let (_, runner) = pair(&operator, Tier::Workspace, &[], 2).await;
    let job = dispatch(
        &operator,
        workspace_pool(),
        serde_json::json!({"argv": ["true"]}),
    )
    .await;
    let http = reqwest::Client::new();
    let get = |path: String| {
        let (http, key) = (http.clone(), key.clone());
        async move {
            http.get(path)
                .bearer_auth(key)
                .send()
                .await
                .expect("the replica answers")
        }
    };
    let one = format!("{url}/v1/jobs/{}", job.id);
    let list = format!("{url}/v1/jobs?limit=10");
    // Every statement used below prepared on the pool's connections first.
    for path in [&one, &list] {
        assert_eq!(get(path.clone()).await.status(), 200);
    }

    connect(&app.database_url)
        .await
        .batch_execute("ALTER TABLE jobs ADD COLUMN upgrade_probe integer")
        .await
        .unwrap();

    for path in [&one, &list] {
        let mut statuses = Vec::new();
        loop {
            let answer = get(path.clone()).await;
            let status = answer.status().as_u16();
            statuses.push(status);
            if status == 503 {
                assert!(answer.headers().contains_key("retry-after"), "{path}");
            }
            if status != 503 || statuses.len() == 3 {
                break;
            }
        }
        assert_eq!(
            statuses.last(),
            Some(&200),
            "{path}: {statuses:?} (a stale statement is a 503 at most, then served)"
        );
    }
    // A dispatch and a lease after the change: served, at worst after a 503 each.
    let mut dispatched = None;
    for _ in 0..3 {
        match operator
            .dispatch(&leasehold::wire::Dispatch::new(
                workspace_pool(),
                serde_json::json!({"argv": ["true"]}),
            ))
            .await
        {
            Ok(job) => {
                dispatched = Some(job);
                break;
            }
            Err(e) => assert_eq!(crate::support::code(Err::<(), _>(e)), "unavailable"),
        }
    }
    assert!(dispatched.is_some(), "the dispatch is served");
    let mut leased = Vec::new();
    for _ in 0..3 {
        match runner.lease(&leasehold::wire::Lease::waiting(0, 2)).await {
            Ok(jobs) => {
                leased = jobs;
                break;
            }
            Err(e) => assert_eq!(crate::support::code(Err::<(), _>(e)), "unavailable"),
        }
    }
    assert_eq!(leased.len(), 2, "both parked jobs are leased");
}
