//! The private PostgreSQL of `leasehold dev`, the tests and the bench.
//!
//! Invariants defended: as root, a data directory the `postgres` OS user cannot reach (a
//! checkout inside a 0700 home) still gives a working server, placed where that user can
//! reach it and said where; and the server trusts nobody: a connection without the generated
//! password is refused, over TCP and over its socket.

use std::os::unix::fs::PermissionsExt;

use leasehold::tooling::private_pg::PrivatePg;
use uuid::Uuid;

async fn start(dir: std::path::PathBuf) -> PrivatePg {
    tokio::task::spawn_blocking(move || PrivatePg::start(&dir, false, true))
        .await
        .unwrap()
        .expect("private PostgreSQL starts")
}

async fn connects(url: &str) -> Result<(), tokio_postgres::Error> {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls).await?;
    tokio::spawn(conn);
    client.simple_query("SELECT 1").await.map(|_| ())
}

#[tokio::test]
async fn as_root_a_checkout_in_a_private_directory_still_gets_its_database() {
    let missing = (!nix::unistd::geteuid().is_root()).then(|| {
        "not running as root (the server runs as ourselves, so any directory we can use, it can)"
            .to_owned()
    });
    if !crate::support::require("as_root_a_checkout_in_a_private_directory", missing) {
        return;
    }
    let home = std::env::temp_dir().join(format!("leasehold-private-{}", Uuid::now_v7()));
    std::fs::create_dir_all(&home).unwrap();
    std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o700)).unwrap();
    let asked = home.join("checkout").join(".leasehold").join("dev-pg");
    let pg = start(asked.clone()).await;
    assert_ne!(
        pg.data_dir(),
        asked.canonicalize().unwrap(),
        "moved where postgres can reach it"
    );
    assert!(
        pg.data_dir().starts_with("/var/tmp"),
        "{}",
        pg.data_dir().display()
    );
    connects(&pg.url("postgres"))
        .await
        .expect("the server works");
    drop(pg);
    std::fs::remove_dir_all(&home).unwrap();
}

#[tokio::test]
async fn the_private_server_asks_everyone_for_its_password() {
    let dir = std::env::temp_dir().join(format!("leasehold-auth-{}", Uuid::now_v7()));
    let pg = start(dir).await;
    let url = pg.url("postgres");
    connects(&url).await.expect("with the password");
    assert!(url.contains(":") && url.contains("@127.0.0.1:"));
    let without = format!("postgres://postgres@127.0.0.1:{}/postgres", pg.port);
    assert!(connects(&without).await.is_err(), "no trust over TCP");
    let socket = format!(
        "host={} port={} user=postgres dbname=postgres",
        pg.data_dir().display(),
        pg.port
    );
    assert!(connects(&socket).await.is_err(), "no trust over the socket");
}

#[tokio::test]
async fn a_cluster_made_with_trust_gets_a_password_when_started() {
    let dir = std::env::temp_dir().join(format!("leasehold-legacy-{}", Uuid::now_v7()));
    let pg = tokio::task::spawn_blocking({
        let dir = dir.clone();
        move || PrivatePg::start(&dir, false, false)
    })
    .await
    .unwrap()
    .unwrap();
    let data = pg.data_dir().to_owned();
    drop(pg);
    // As an older leasehold left it: trust for everyone, no password file.
    std::fs::write(
        data.join("pg_hba.conf"),
        "local all all trust\nhost all all 127.0.0.1/32 trust\n",
    )
    .unwrap();
    std::fs::remove_file(data.join("leasehold.password")).unwrap();
    let pg = start(dir).await;
    connects(&pg.url("postgres"))
        .await
        .expect("with the new password");
    let without = format!("postgres://postgres@127.0.0.1:{}/postgres", pg.port);
    assert!(connects(&without).await.is_err(), "trust is gone");
}
