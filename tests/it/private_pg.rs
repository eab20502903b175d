//! The private PostgreSQL of `leasehold dev`, the tests and the bench.
//!
//! Invariants defended: as root, a data directory the `postgres` OS user cannot reach (a
//! checkout inside a 0700 home) still gives a working server, placed where that user can
//! reach it and said where, and found again by the next start; what another user planted at
//! that place (a directory, a symbolic link, a root-owned directory without leasehold's
//! marker) is refused and left exactly as it was, and a password file swapped for a link is
//! not read (issue 52 row 1); and the server trusts nobody: a connection without the generated
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

/// As root: a checkout in a fresh 0700 directory, the place its cluster is relocated to (its
/// parent) and a planted cluster of `nobody`'s (`pg/` with `PG_VERSION` and a password file).
pub struct Planted {
    pub home: std::path::PathBuf,
    pub asked: std::path::PathBuf,
    pub parent: std::path::PathBuf,
}

pub const NOBODY: u32 = 65534;
pub const ATTACKER_PASSWORD: &str = "attackerpw";

impl Planted {
    pub fn new(what: &str) -> Self {
        let home = std::env::temp_dir().join(format!("leasehold-{what}-{}", Uuid::now_v7()));
        std::fs::create_dir_all(&home).unwrap();
        std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o700)).unwrap();
        let asked = home.join("checkout").join(".leasehold").join("dev-pg");
        std::fs::create_dir_all(&asked).unwrap();
        let asked = asked.canonicalize().unwrap();
        let moved = leasehold::tooling::private_pg::relocated(&asked);
        let parent = moved.parent().unwrap().to_owned();
        Self {
            home,
            asked,
            parent,
        }
    }

    /// `nobody`'s directory at `at` holding a cluster's `pg/` and its password.
    pub fn plant_cluster(at: &std::path::Path) {
        let pg = at.join("pg");
        std::fs::create_dir_all(&pg).unwrap();
        std::fs::write(pg.join("PG_VERSION"), "16\n").unwrap();
        std::fs::write(
            pg.join("leasehold.password"),
            format!("{ATTACKER_PASSWORD}\n"),
        )
        .unwrap();
        for p in [
            at.to_owned(),
            pg.clone(),
            pg.join("PG_VERSION"),
            pg.join("leasehold.password"),
        ] {
            std::os::unix::fs::lchown(&p, Some(NOBODY), Some(NOBODY)).unwrap();
        }
        std::fs::set_permissions(at, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    /// Every file under `at` is still `nobody`'s, the modes as planted, the password its own.
    pub fn assert_untouched(at: &std::path::Path) {
        use std::os::unix::fs::MetadataExt;
        let pg = at.join("pg");
        for p in [
            at.to_owned(),
            pg.clone(),
            pg.join("PG_VERSION"),
            pg.join("leasehold.password"),
        ] {
            let meta = std::fs::symlink_metadata(&p).unwrap();
            assert_eq!(meta.uid(), NOBODY, "{} is still nobody's", p.display());
        }
        let mode = std::fs::metadata(at).unwrap().mode() & 0o7777;
        assert_eq!(mode, 0o755, "{} keeps its mode", at.display());
        let password = std::fs::read_to_string(pg.join("leasehold.password")).unwrap();
        assert_eq!(password.trim(), ATTACKER_PASSWORD);
    }
}

impl Drop for Planted {
    fn drop(&mut self) {
        if std::fs::symlink_metadata(&self.parent).is_ok_and(|m| m.is_symlink()) {
            let _ = std::fs::remove_file(&self.parent);
        }
        let _ = std::fs::remove_dir_all(&self.parent);
        let _ = std::fs::remove_dir_all(&self.home);
    }
}

/// Noticed beside issue 52 row 1: as root, a data directory the `postgres` user already owns is
/// not walked again with `chown -R` (what that user put in it would change hands): a
/// root-owned file in it stays root's across a second start.
#[tokio::test]
async fn as_root_a_second_start_walks_nothing_the_postgres_user_owns() {
    use std::os::unix::fs::MetadataExt;
    if !as_root("as_root_a_second_start_walks_nothing_the_postgres_user_owns") {
        return;
    }
    let base = std::env::temp_dir().join(format!("lh-pg-owned-{}", Uuid::now_v7()));
    std::fs::create_dir(&base).unwrap();
    std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o755)).unwrap();
    let data = base.join("data");
    let mut first = start_kept(data.clone()).await.expect("first start");
    first.stop();
    drop(first);
    let planted = data.join("root-owned");
    std::fs::write(&planted, "root's").unwrap();
    let mut second = start_kept(data.clone()).await.expect("second start");
    assert_eq!(
        std::fs::metadata(&planted).unwrap().uid(),
        0,
        "a file in a directory the postgres user owns did not change hands"
    );
    second.stop();
    drop(second);
    let _ = std::fs::remove_dir_all(&base);
}

fn as_root(test: &str) -> bool {
    let missing = (!nix::unistd::geteuid().is_root())
        .then(|| "not running as root (nothing is relocated)".to_owned());
    crate::support::require(test, missing)
}

async fn start_kept(dir: std::path::PathBuf) -> anyhow::Result<PrivatePg> {
    tokio::task::spawn_blocking(move || PrivatePg::start(&dir, false, false))
        .await
        .unwrap()
}

/// Issue 52 row 1: as root, whatever another user planted at the relocation's computable
/// name is refused and left as it was: a directory of theirs holding a cluster and its
/// password; a symbolic link to one; a directory of root's without leasehold's marker. The
/// place leasehold made itself is found again by the next start; a password file in it that
/// the server's user swapped for a link is refused, never read.
#[tokio::test]
async fn as_root_a_planted_relocation_is_refused_and_left_as_it_was() {
    if !as_root("as_root_a_planted_relocation_is_refused_and_left_as_it_was") {
        return;
    }
    let place = Planted::new("planted");

    // A directory of another user's, with a cluster and its password.
    Planted::plant_cluster(&place.parent);
    let err = start_kept(place.asked.clone())
        .await
        .err()
        .expect("refused");
    let text = format!("{err:#}");
    assert!(
        text.contains(&place.parent.display().to_string()) && text.contains("did not make it"),
        "{text}"
    );
    assert!(!text.contains(ATTACKER_PASSWORD), "{text}");
    Planted::assert_untouched(&place.parent);
    std::fs::remove_dir_all(&place.parent).unwrap();

    // A symbolic link to such a directory.
    let elsewhere = std::env::temp_dir().join(format!("leasehold-elsewhere-{}", Uuid::now_v7()));
    Planted::plant_cluster(&elsewhere);
    std::os::unix::fs::symlink(&elsewhere, &place.parent).unwrap();
    let err = start_kept(place.asked.clone())
        .await
        .err()
        .expect("refused");
    assert!(format!("{err:#}").contains("a symbolic link"), "{err:#}");
    Planted::assert_untouched(&elsewhere);
    std::fs::remove_file(&place.parent).unwrap();
    std::fs::remove_dir_all(&elsewhere).unwrap();

    // A directory of root's, group postgres, mode 0710, but no marker of leasehold's.
    let (_, gid) = leasehold::tooling::private_pg::postgres_owner().unwrap();
    std::fs::create_dir(&place.parent).unwrap();
    std::os::unix::fs::lchown(&place.parent, Some(0), Some(gid)).unwrap();
    std::fs::set_permissions(&place.parent, std::fs::Permissions::from_mode(0o710)).unwrap();
    let err = start_kept(place.asked.clone())
        .await
        .err()
        .expect("refused");
    assert!(format!("{err:#}").contains("no marker"), "{err:#}");
    assert!(!place.parent.join("pg").exists(), "nothing made in it");
    std::fs::remove_dir(&place.parent).unwrap();

    // Made by leasehold: used, and found again by the next start.
    let pg = start_kept(place.asked.clone()).await.expect("starts");
    assert_eq!(pg.data_dir(), place.parent.join("pg"));
    connects(&pg.url("postgres"))
        .await
        .expect("the server works");
    let first = pg.url("postgres");
    drop(pg);
    let pg = start_kept(place.asked.clone()).await.expect("starts again");
    assert_eq!(
        pg.url("postgres").split('@').next(),
        first.split('@').next(),
        "its password"
    );
    connects(&pg.url("postgres"))
        .await
        .expect("the same cluster works");
    let data = pg.data_dir().to_owned();
    drop(pg);

    // Its password file swapped for a link (as the server's own user could): not read.
    let (uid, gid) = leasehold::tooling::private_pg::postgres_owner().unwrap();
    let decoy = data.join("decoy");
    std::fs::write(&decoy, format!("{ATTACKER_PASSWORD}\n")).unwrap();
    std::os::unix::fs::lchown(&decoy, Some(uid), Some(gid)).unwrap();
    std::fs::set_permissions(&decoy, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::remove_file(data.join("leasehold.password")).unwrap();
    std::os::unix::fs::symlink("decoy", data.join("leasehold.password")).unwrap();
    let err = start_kept(place.asked.clone())
        .await
        .err()
        .expect("refused");
    assert!(format!("{err:#}").contains("leasehold.password"), "{err:#}");
}
