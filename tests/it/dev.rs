//! `leasehold dev`'s banner (issue 35 row 11): the commands it prints run as printed, pasted
//! into a fresh shell with no `leasehold` on `PATH` and no environment of ours; it names the
//! `/ui` page; on a taken port it names the address and `--listen`.

use std::process::Stdio;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tokio::io::AsyncBufReadExt;

use crate::procs::{TempDir, BIN, LONG};

/// `leasehold dev --listen LISTEN --data-dir DATA` with none of our LEASEHOLD_* variables.
fn dev(data: &std::path::Path, listen: &str, stderr: &std::path::Path) -> tokio::process::Child {
    tokio::process::Command::new(BIN)
        .args(["dev", "--listen", listen, "--data-dir"])
        .arg(data)
        .env_remove("LEASEHOLD_SERVER")
        .env_remove("LEASEHOLD_API_KEY")
        .env("LEASEHOLD_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(stderr).unwrap())
        .kill_on_drop(true)
        .spawn()
        .unwrap()
}

#[tokio::test]
async fn the_dev_banner_commands_run_as_printed_and_a_taken_port_names_listen() {
    let dir = TempDir::new("dev-banner");
    let data = dir.join("state/dev-pg");
    let log = dir.join("dev.log");
    let mut child = dev(&data, "127.0.0.1:0", &log);
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let mut printed = Vec::new();
    tokio::time::timeout(LONG, async {
        while let Some(line) = lines.next_line().await.unwrap() {
            let key = line.starts_with("ak_");
            printed.push(line);
            if key {
                return;
            }
        }
        panic!(
            "dev exited: {printed:?} {:?}",
            std::fs::read_to_string(&log)
        );
    })
    .await
    .expect("dev prints its admin key");

    // The submit command, pasted as printed into a shell without our environment or PATH.
    let submit = printed
        .iter()
        .map(|l| l.trim())
        .find(|l| l.contains(" job submit --wait -- echo hello"))
        .unwrap_or_else(|| panic!("prints a submit command: {printed:#?}"))
        .to_owned();
    let out = tokio::time::timeout(
        LONG,
        tokio::process::Command::new("sh")
            .args(["-c", &submit])
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("the submit command finishes")
    .unwrap();
    assert!(
        out.status.success() && out.stdout == b"hello\n",
        "`{submit}`: {out:?}\n{printed:#?}\n{:?}",
        std::fs::read_to_string(&log)
    );

    // The page's address.
    let ui = printed
        .iter()
        .find_map(|l| l.split_whitespace().find(|w| w.ends_with("/ui")))
        .unwrap_or_else(|| panic!("names /ui: {printed:#?}"))
        .to_owned();
    let page = reqwest::get(&ui).await.unwrap();
    assert!(page.status().is_success(), "{ui}: {}", page.status());
    let body = page.text().await.unwrap();
    assert!(
        body.contains("<html") || body.contains("<!doctype"),
        "{body}"
    );

    kill(
        Pid::from_raw(i32::try_from(child.id().unwrap()).unwrap()),
        Signal::SIGTERM,
    )
    .unwrap();
    tokio::time::timeout(LONG, child.wait())
        .await
        .expect("dev stops on SIGTERM")
        .unwrap();

    // A port someone else holds: dev says which address and how to choose another.
    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = held.local_addr().unwrap().to_string();
    let log2 = dir.join("dev2.log");
    let mut taken = dev(&data, &addr, &log2);
    let status = tokio::time::timeout(LONG, taken.wait())
        .await
        .expect("dev on a taken port exits")
        .unwrap();
    let err = std::fs::read_to_string(&log2).unwrap();
    assert!(!status.success(), "{err}");
    assert!(err.contains(&addr) && err.contains("--listen"), "{err}");
    drop(held);
}
