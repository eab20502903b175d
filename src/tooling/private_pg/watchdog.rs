//! The watchdog: a detached shell that outlives this process and stops what it started (a
//! private server, or the drill's cluster) once this process is gone, however it died.
//!
//! Invariant: it signals a postmaster only when the process its data directory's
//! `postmaster.pid` names runs in that directory (a postmaster's working directory is its data
//! directory). The file is the cluster owner's to write, the `postgres` user's when we are
//! root: a pid planted there never makes a root watchdog signal another process. Paths reach
//! the script as arguments, never spliced into its text.

use std::ffi::OsStr;
use std::process::{Child, Command, Stdio};

/// `stop_postmaster DIR SIGNAL`: signal the postmaster `DIR/postmaster.pid` names if it runs in
/// `DIR` (canonical), and print its pid; nothing, and status 1, otherwise.
pub const STOP_POSTMASTER: &str = r#"stop_postmaster() {
    p=$(head -n 1 "$1/postmaster.pid" 2>/dev/null)
    case "$p" in ''|*[!0-9]*) return 1 ;; esac
    [ "$(readlink "/proc/$p/cwd" 2>/dev/null)" = "$1" ] || return 1
    kill -"$2" "$p" 2>/dev/null && echo "$p"
}
"#;

/// Start `sh -c script sh ARGS...` detached (its own process group, no terminal): the script
/// reads `ARGS` as `$1`, `$2`, ...
///
/// # Errors
/// `sh` could not be started.
pub fn spawn_watchdog(script: &str, args: &[&OsStr]) -> std::io::Result<Child> {
    let mut cmd = Command::new("sh");
    // Out of the terminal's foreground group, like the server it watches.
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    cmd.arg("-c")
        .arg(script)
        .arg("sh")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
}

#[cfg(test)]
mod tests {
    use std::process::{Command, Stdio};

    use super::STOP_POSTMASTER;

    /// `stop_postmaster DIR TERM` in a shell; whether it signalled something.
    fn stop(dir: &std::path::Path) -> bool {
        Command::new("sh")
            .arg("-c")
            .arg(format!("{STOP_POSTMASTER}stop_postmaster \"$1\" TERM"))
            .arg("sh")
            .arg(dir)
            .stdout(Stdio::null())
            .status()
            .unwrap()
            .success()
    }

    fn alive(child: &mut std::process::Child) -> bool {
        child.try_wait().unwrap().is_none()
    }

    #[test]
    fn a_pid_planted_in_the_pid_file_is_not_signalled_and_the_directorys_own_is() {
        let dir = std::env::temp_dir().join(format!("lh-watchdog-{}", uuid::Uuid::now_v7()));
        std::fs::create_dir(&dir).unwrap();
        let dir = dir.canonicalize().unwrap();
        // Another process, elsewhere: its pid planted in the file.
        let mut victim = Command::new("sleep").arg("60").spawn().unwrap();
        std::fs::write(dir.join("postmaster.pid"), format!("{}\n", victim.id())).unwrap();
        assert!(
            !stop(&dir),
            "a process outside the directory is not signalled"
        );
        assert!(alive(&mut victim));
        std::fs::write(dir.join("postmaster.pid"), "1; kill 0\n").unwrap();
        assert!(!stop(&dir), "a line that is not a pid is not run");
        // The process that runs in the directory is.
        let mut own = Command::new("sleep")
            .arg("60")
            .current_dir(&dir)
            .spawn()
            .unwrap();
        std::fs::write(dir.join("postmaster.pid"), format!("{}\n", own.id())).unwrap();
        assert!(stop(&dir), "the directory's own process is signalled");
        own.wait().unwrap();
        assert!(alive(&mut victim));
        victim.kill().unwrap();
        victim.wait().unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
