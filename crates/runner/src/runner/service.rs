//! `leasehold runner connect ... --service`: the shipped `deploy/leasehold-runner.service`
//! filled in for this machine (the user, this binary, the configuration, the work directory,
//! how jobs are confined), installed and started where systemd runs, printed with the commands
//! that install it where it does not.
//!
//! Invariants: the unit runs exactly the `runner run` this machine would run by hand (same
//! binary, configuration and work directory), never unconfined as root (bubblewrap when it is
//! installed, else a uid per job); a path is quoted for systemd, so no path can add an argument,
//! a variable expansion or a specifier, and a path with a control character (a newline would
//! start a unit line of its own) is refused; every printed command is quoted for `sh`, so it
//! pastes as the words it names; nothing here prints the token (the unit names the
//! configuration file only).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::Context;

pub use crate::wire::command::shell_word;

/// The shipped unit the generated one is filled in from.
pub const TEMPLATE: &str = include_str!("../../../../deploy/leasehold-runner.service");

/// The unit's name.
pub const NAME: &str = "leasehold-runner.service";

/// What the unit is filled in with.
#[derive(Debug, Clone)]
pub struct Unit {
    /// `None`: a user unit (systemd's per-user manager runs it as its user); `Some`: a system
    /// unit running as this user and group.
    pub user: Option<(String, String)>,
    pub exe: PathBuf,
    pub config: PathBuf,
    pub work_dir: PathBuf,
    /// `runner run` flags that confine jobs (`--sandbox bubblewrap`, `--job-user-range A-B`).
    pub confinement: Vec<String>,
}

impl Unit {
    /// The unit for this process's user: a system unit as root, else a user unit; jobs under
    /// bubblewrap when `bwrap` is on `PATH`, else (as root) each as a uid of its own.
    ///
    /// # Errors
    /// This binary's path cannot be found.
    pub fn for_this_machine(config: &Path, work_dir: &Path) -> anyhow::Result<Self> {
        let exe = std::env::current_exe().context("finding this binary's path")?;
        for p in [&exe, config, work_dir] {
            check_path(p)?;
        }
        let root = nix::unistd::geteuid().is_root();
        let user = root.then(|| ("root".to_owned(), "root".to_owned()));
        let bwrap = std::env::var_os("PATH")
            .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join("bwrap").is_file()));
        let confinement = if bwrap {
            vec!["--sandbox".into(), "bubblewrap".into()]
        } else if root {
            vec!["--job-user-range".into(), "60000-60063".into()]
        } else {
            vec![]
        };
        Ok(Self {
            user,
            exe,
            config: config.to_owned(),
            work_dir: work_dir.to_owned(),
            confinement,
        })
    }

    /// The `runner run` arguments the unit starts.
    fn args(&self) -> Vec<String> {
        let mut args = vec![
            path(&self.exe),
            "runner".into(),
            "run".into(),
            "--config".into(),
            path(&self.config),
            "--work-dir".into(),
            path(&self.work_dir),
        ];
        args.extend(self.confinement.iter().cloned());
        args.extend(["--drain-timeout".into(), "600".into()]);
        args
    }

    /// The unit's text: the shipped template with this machine's values.
    pub fn render(&self) -> String {
        let body = TEMPLATE
            .find("[Unit]")
            .map_or(TEMPLATE, |at| &TEMPLATE[at..]);
        let mut out = String::from(
            "# Written by `leasehold runner connect --service` from the shipped\n\
             # deploy/leasehold-runner.service (see the comments there).\n",
        );
        let mut continued = false;
        for line in body.lines() {
            if continued {
                continued = line.ends_with('\\');
                continue;
            }
            let key = line.split('=').next().unwrap_or_default();
            match (key, &self.user) {
                ("User", Some((user, _))) => {
                    out.push_str(&format!("User={}\n", quote(user, false)))
                }
                ("Group", Some((_, group))) => {
                    out.push_str(&format!("Group={}\n", quote(group, false)));
                }
                ("User" | "Group", None) => {}
                ("ExecStart", _) => {
                    continued = line.ends_with('\\');
                    let args: Vec<String> = self.args().iter().map(|a| quote(a, true)).collect();
                    out.push_str(&format!("ExecStart={}\n", args.join(" ")));
                }
                ("ReadWritePaths", _) => {
                    let mut writable = vec![quote(&path(&self.work_dir), false)];
                    if let Some(dir) = self.config.parent() {
                        writable.push(quote(&path(dir), false));
                    }
                    out.push_str(&format!("ReadWritePaths={}\n", writable.join(" ")));
                }
                ("WantedBy", None) => out.push_str("WantedBy=default.target\n"),
                _ => {
                    out.push_str(line);
                    out.push('\n');
                }
            }
        }
        out
    }
}

fn path(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

/// A path the unit or a printed command may name: valid UTF-8 (what is written is what the
/// file system holds) and without a control character. systemd.syntax(7) reads a unit line by
/// line, so a newline, even quoted, would start a line of its own (`ExecStartPre=...`,
/// `User=root`), and a terminal would act on the others.
///
/// # Errors
/// The path has a control character or is not UTF-8, with a message naming it.
pub fn check_path(p: &Path) -> anyhow::Result<()> {
    let Some(text) = p.to_str() else {
        anyhow::bail!(
            "the path {p:?} is not valid UTF-8, which a systemd unit cannot name exactly; \
             choose another for --service"
        );
    };
    anyhow::ensure!(
        !text.chars().any(char::is_control),
        "the path {text:?} has a control character, which a systemd unit cannot carry safely; \
         choose a path without one for --service"
    );
    Ok(())
}

/// One word of a unit file: `%` doubled (no specifier), `$` doubled in a command line (`exec`:
/// no variable expansion, which only `Exec*=` lines do), and double-quoted with `\` and `"`
/// escaped when it holds anything but plain characters. Control characters are refused before
/// ([`check_path`]).
fn quote(word: &str, exec: bool) -> String {
    let mut word = word.replace('%', "%%");
    if exec {
        word = word.replace('$', "$$");
    }
    if !word.is_empty()
        && word
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/._-:=,+@%".contains(&b))
    {
        return word;
    }
    format!("\"{}\"", word.replace('\\', "\\\\").replace('"', "\\\""))
}

/// A command line for `sh`, each word quoted by [`shell_word`].
pub fn shell_line<S: AsRef<str>>(words: &[S]) -> String {
    words
        .iter()
        .map(|w| shell_word(w.as_ref()))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Whether systemd is this machine's init (what `sd_booted` checks).
pub fn systemd_runs() -> bool {
    Path::new("/run/systemd/system").is_dir()
}

/// Where the unit goes: the system's unit directory, or the user's.
fn unit_dir(system: bool) -> anyhow::Result<PathBuf> {
    if system {
        return Ok(PathBuf::from("/etc/systemd/system"));
    }
    let config = match std::env::var_os("XDG_CONFIG_HOME").filter(|v| !v.is_empty()) {
        Some(x) => PathBuf::from(x),
        None => PathBuf::from(std::env::var_os("HOME").context("HOME is not set")?).join(".config"),
    };
    Ok(config.join("systemd").join("user"))
}

/// Write the unit; where systemd runs, enable and start it; else print it and the commands
/// that do. Returns the path written.
///
/// # Errors
/// The unit cannot be written, or systemctl failed.
pub fn install(unit: &Unit) -> anyhow::Result<PathBuf> {
    let text = unit.render();
    let system = unit.user.is_some();
    // ReadWritePaths= names it: a missing one would stop the unit from starting.
    std::fs::create_dir_all(&unit.work_dir)
        .with_context(|| format!("creating {}", unit.work_dir.display()))?;
    let ctl = |args: &[&str]| -> anyhow::Result<()> {
        let mut cmd = Command::new("systemctl");
        if !system {
            cmd.arg("--user");
        }
        let status = cmd.args(args).status().context("running systemctl")?;
        anyhow::ensure!(status.success(), "systemctl {} failed", args.join(" "));
        Ok(())
    };
    let user_flag = if system { "" } else { " --user" };
    if systemd_runs() {
        let dir = unit_dir(system)?;
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let path = dir.join(NAME);
        std::fs::write(&path, &text).with_context(|| format!("writing {}", path.display()))?;
        ctl(&["daemon-reload"])?;
        ctl(&["enable", "--now", NAME])?;
        println!("installed {} and started it", path.display());
        println!("follow it with: journalctl{user_flag} -u {NAME} -f");
        return Ok(path);
    }
    // No systemd here: write the unit beside the configuration and say how to install it.
    let beside = unit
        .config
        .parent()
        .map_or_else(|| PathBuf::from(NAME), |d| d.join(NAME));
    std::fs::write(&beside, &text).with_context(|| format!("writing {}", beside.display()))?;
    let dir = unit_dir(system)?;
    println!(
        "systemd is not running here; the unit, written to {}:",
        beside.display()
    );
    println!();
    print!("{text}");
    println!();
    println!("install and start it where systemd runs with:");
    let installed = dir.join(NAME);
    println!(
        "  {} && {} && systemctl{user_flag} daemon-reload && systemctl{user_flag} enable --now {NAME}",
        shell_line(&["mkdir", "-p", &path(&dir)]),
        shell_line(&["cp", &path(&beside), &path(&installed)]),
    );
    println!("or run it in the foreground: {}", shell_line(&unit.args()));
    Ok(beside)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit(user: Option<(&str, &str)>) -> Unit {
        Unit {
            user: user.map(|(u, g)| (u.into(), g.into())),
            exe: "/opt/lh/leasehold".into(),
            config: "/home/a b/.config/leasehold/runner.json".into(),
            work_dir: "/var/lib/100%/work".into(),
            confinement: vec!["--sandbox".into(), "bubblewrap".into()],
        }
    }

    #[test]
    fn the_shipped_unit_is_filled_in() {
        let text = unit(Some(("ci", "ci"))).render();
        assert!(text.contains("\nUser=ci\nGroup=ci\n"), "{text}");
        assert!(
            text.contains(
                "\nExecStart=/opt/lh/leasehold runner run --config \"/home/a b/.config/leasehold/runner.json\" \
                 --work-dir /var/lib/100%%/work --sandbox bubblewrap --drain-timeout 600\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("\nReadWritePaths=/var/lib/100%%/work \"/home/a b/.config/leasehold\"\n"),
            "{text}"
        );
        assert!(
            !text.contains("leasehold-runner\n") && !text.contains("    --"),
            "{text}"
        );
        assert!(text.contains("KillMode=mixed") && text.contains("WantedBy=multi-user.target"));

        let user = unit(None).render();
        assert!(
            !user.contains("User=") && !user.contains("Group="),
            "{user}"
        );
        assert!(user.contains("WantedBy=default.target"), "{user}");
    }

    #[test]
    fn words_are_quoted_for_sh() {
        assert_eq!(shell_word("/a/b"), "/a/b");
        assert_eq!(shell_word("a b"), "'a b'");
        assert_eq!(shell_word("it's $x"), "'it'\\''s $x'");
        assert_eq!(shell_line(&["cp", "a;b"]), "cp 'a;b'");
    }

    #[test]
    fn words_are_quoted_for_systemd() {
        assert_eq!(quote("/a/b", true), "/a/b");
        assert_eq!(quote("a b", true), "\"a b\"");
        assert_eq!(quote("50%", true), "50%%");
        assert_eq!(quote("x\"y\\", true), "\"x\\\"y\\\\\"");
        assert_eq!(quote("/$HOME", true), "\"/$$HOME\"");
        assert_eq!(quote("/$HOME", false), "\"/$HOME\"");
        assert!(check_path(Path::new("/a\nUser=root")).is_err());
        assert!(check_path(Path::new("/a b/$x%")).is_ok());
    }
}
