//! What ships under `deploy/` and at the top of the repository for deploying builds and runs as
//! shipped. No Docker engine runs here, so the image and the compose file are checked by
//! reading them.
//!
//! Invariants defended:
//! - `deploy/Dockerfile` builds from the repository as it is: the files its build stage copies
//!   (its `COPY` lines, less what `.dockerignore` leaves out), materialised alone in a temporary
//!   directory, are a workspace `cargo metadata --locked --offline` accepts with every target
//!   of the real one (build scripts included), and every `include_str!`/`include_bytes!`/
//!   `include!` path in `src/` and `crates/` (and every directory a build script reads) is in it.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::procs::TempDir;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// One `COPY` of a Dockerfile stage: its context sources and its destination.
#[derive(Debug)]
pub(crate) struct Copy {
    pub(crate) sources: Vec<String>,
    pub(crate) dest: String,
}

/// A Dockerfile stage: its name, `WORKDIR` (the last one before each copy is enough for ours:
/// the test insists on one `WORKDIR` before the first copy) and its copies from the context.
#[derive(Debug, Default)]
pub(crate) struct Stage {
    name: String,
    workdir: String,
    pub(crate) copies: Vec<Copy>,
}

/// The Dockerfile's stages, with `\` continuations joined and comments dropped. `COPY --from=`
/// lines copy from another stage, not from the context, and are left out.
pub(crate) fn stages(dockerfile: &str) -> Vec<Stage> {
    let mut joined = Vec::new();
    let mut line = String::new();
    for raw in dockerfile.lines() {
        let t = raw.trim();
        if line.is_empty() && (t.starts_with('#') || t.is_empty()) {
            continue;
        }
        match t.strip_suffix('\\') {
            Some(head) => {
                line.push_str(head);
                line.push(' ');
            }
            None => {
                line.push_str(t);
                joined.push(std::mem::take(&mut line));
            }
        }
    }
    let mut stages: Vec<Stage> = Vec::new();
    for l in joined {
        let mut words = l.split_whitespace();
        let instruction = words.next().unwrap_or("").to_ascii_uppercase();
        let args: Vec<&str> = words.collect();
        match instruction.as_str() {
            "FROM" => stages.push(Stage {
                name: args.get(2).unwrap_or(&"").to_string(),
                ..Default::default()
            }),
            "WORKDIR" => stages.last_mut().expect("FROM first").workdir = args.join(" "),
            "COPY" | "ADD" => {
                if args.iter().any(|a| a.starts_with("--from=")) {
                    continue;
                }
                assert!(
                    !args.first().is_some_and(|a| a.starts_with('[')),
                    "the test reads only the shell form of COPY: {l}"
                );
                let plain: Vec<String> = args
                    .iter()
                    .filter(|a| !a.starts_with("--"))
                    .map(|s| s.to_string())
                    .collect();
                let (dest, sources) = plain.split_last().expect("COPY names a destination");
                stages.last_mut().expect("FROM first").copies.push(Copy {
                    sources: sources.to_vec(),
                    dest: dest.clone(),
                });
            }
            _ => {}
        }
    }
    stages
}

/// `.dockerignore`'s rules in order: (excluded?, pattern split into segments). A later rule
/// wins, as in Docker; `!` re-includes.
fn ignore_rules(text: &str) -> Vec<(bool, Vec<String>)> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let (exclude, pat) = match l.strip_prefix('!') {
                Some(p) => (false, p),
                None => (true, l),
            };
            let segments = pat
                .trim_matches('/')
                .split('/')
                .filter(|s| !s.is_empty() && *s != ".")
                .map(str::to_owned)
                .collect();
            (exclude, segments)
        })
        .collect()
}

/// Go's `filepath.Match` for one segment: `*` (any run), `?` (one character), literals.
fn glob(pat: &[u8], name: &[u8]) -> bool {
    match (pat.first(), name.first()) {
        (None, None) => true,
        (Some(b'*'), _) => glob(&pat[1..], name) || (!name.is_empty() && glob(pat, &name[1..])),
        (Some(b'?'), Some(_)) => glob(&pat[1..], &name[1..]),
        (Some(p), Some(n)) if p == n => glob(&pat[1..], &name[1..]),
        _ => false,
    }
}

/// Whether `pattern` (segments, `**` any number of them) matches the path `path` or one of its
/// parents (Docker excludes what is under an excluded directory).
fn matches(pattern: &[String], path: &[&str]) -> bool {
    match (pattern.first(), path.first()) {
        (None, _) => true,
        (Some(p), _) if p == "**" => (0..=path.len()).any(|i| matches(&pattern[1..], &path[i..])),
        (Some(p), Some(n)) => {
            glob(p.as_bytes(), n.as_bytes()) && matches(&pattern[1..], &path[1..])
        }
        (Some(_), None) => false,
    }
}

fn ignored(rules: &[(bool, Vec<String>)], rel: &str) -> bool {
    let path: Vec<&str> = rel.split('/').collect();
    rules
        .iter()
        .rev()
        .find(|(_, p)| matches(p, &path))
        .is_some_and(|(exclude, _)| *exclude)
}

/// Copy `rel` (a file or a directory, relative to the repository) to `to`, leaving out what the
/// rules ignore. Returns how many files it copied.
fn copy_in(rules: &[(bool, Vec<String>)], rel: &str, to: &Path) -> usize {
    if !rel.is_empty() && ignored(rules, rel) {
        return 0;
    }
    let from = repo().join(rel);
    let meta = std::fs::symlink_metadata(&from)
        .unwrap_or_else(|e| panic!("the Dockerfile copies {rel}, which is not here: {e}"));
    if meta.is_dir() {
        std::fs::create_dir_all(to).unwrap();
        let mut n = 0;
        for entry in std::fs::read_dir(&from).unwrap() {
            let name = entry.unwrap().file_name().into_string().unwrap();
            let child = if rel.is_empty() {
                name.clone()
            } else {
                format!("{rel}/{name}")
            };
            n += copy_in(rules, &child, &to.join(&name));
        }
        n
    } else {
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(&from, to).unwrap();
        1
    }
}

/// The build stage's tree: what the Dockerfile's first stage holds under its `WORKDIR` before
/// it runs cargo, materialised in `into`.
fn materialise_build_stage(into: &Path) {
    let dockerfile = std::fs::read_to_string(repo().join("deploy/Dockerfile")).unwrap();
    let ignore = std::fs::read_to_string(repo().join(".dockerignore")).unwrap_or_default();
    let rules = ignore_rules(&ignore);
    let stages = stages(&dockerfile);
    // The build context is the repository (docker-compose.yml: `context: .`); copying all of
    // it with a target directory or .git would cost gigabytes and prove nothing.
    let copies_all = stages
        .iter()
        .flat_map(|s| &s.copies)
        .any(|c| c.sources.iter().any(|s| s == "." || s == "./"));
    for heavy in ["target", ".git"] {
        assert!(
            !copies_all || ignored(&rules, heavy),
            ".dockerignore must leave out {heavy}"
        );
    }
    let build = stages.first().expect("a build stage");
    assert!(
        build.workdir.starts_with('/'),
        "the build stage sets an absolute WORKDIR before it copies: {build:?}"
    );
    let mut files = 0;
    for copy in &build.copies {
        let dest = if copy.dest.starts_with('/') {
            copy.dest
                .strip_prefix(&build.workdir)
                .unwrap_or_else(|| panic!("{copy:?} copies outside WORKDIR {}", build.workdir))
                .trim_start_matches('/')
                .to_owned()
        } else {
            copy.dest.trim_start_matches("./").to_owned()
        };
        let dest = dest.trim_end_matches('/');
        for source in &copy.sources {
            let rel = source.trim_start_matches("./").trim_end_matches('/');
            let rel = if rel == "." { "" } else { rel };
            let is_dir = repo().join(rel).is_dir();
            // A file copied to a directory (`./` or a trailing `/`, or several sources) keeps
            // its name; a directory's contents go into the destination.
            let target = if is_dir || !(copy.dest.ends_with('/') || copy.sources.len() > 1) {
                into.join(dest)
            } else {
                into.join(dest).join(Path::new(rel).file_name().unwrap())
            };
            files += copy_in(&rules, rel, &target);
        }
    }
    // Every later stage's context copies (the runtime's entrypoint script) must exist too.
    for stage in &stages[1..] {
        for copy in &stage.copies {
            for source in &copy.sources {
                assert!(
                    repo().join(source).exists() && !ignored(&rules, source),
                    "stage {} copies {source}, which is not in the context",
                    stage.name
                );
            }
        }
    }
    assert!(files > 0, "the build stage copies nothing");
}

/// `cargo metadata --locked --offline` (this platform's resolve) of the workspace at `dir`: every workspace target as
/// `kind name path-relative-to-dir`, or cargo's complaint.
fn workspace_targets(dir: &Path) -> Result<BTreeSet<String>, String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    // The resolve for this machine's platform only: the registry cache holds only what builds
    // here, and --offline cannot fetch the manifests of other platforms' crates.
    let rustc = std::process::Command::new(std::env::var("RUSTC").unwrap_or("rustc".into()))
        .arg("-vV")
        .output()
        .expect("rustc -vV runs");
    let host = String::from_utf8(rustc.stdout)
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("host: ").map(str::to_owned))
        .expect("rustc names its host");
    let out = std::process::Command::new(cargo)
        .current_dir(dir)
        .args(["metadata", "--locked", "--offline", "--filter-platform"])
        .arg(&host)
        .args(["--format-version", "1"])
        .output()
        .expect("cargo metadata runs");
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let root = Path::new(meta["workspace_root"].as_str().unwrap()).to_owned();
    let members = &meta["workspace_members"];
    let mut targets = BTreeSet::new();
    for package in meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| members.as_array().unwrap().contains(&p["id"]))
    {
        for t in package["targets"].as_array().unwrap() {
            let path = Path::new(t["src_path"].as_str().unwrap());
            targets.insert(format!(
                "{} {} {}",
                t["kind"],
                t["name"].as_str().unwrap(),
                path.strip_prefix(&root).unwrap_or(path).display()
            ));
        }
    }
    Ok(targets)
}

/// Every path the crate's sources embed at compile time, relative to the repository: the first
/// string literal of each `include_str!`/`include_bytes!`/`include!` (for a `concat!("dir/",
/// ...)`, the directory), resolved against its file; and each path a build script joins to its
/// manifest directory (build.rs reads `migrations/`). `include!(concat!(env!("OUT_DIR"), ...))` is generated.
fn embedded_paths() -> BTreeSet<String> {
    let include =
        regex_lite::Regex::new(r#"include(?:_str|_bytes)?!\(\s*(?:concat!\(\s*)?"([^"]+)""#)
            .unwrap();
    // `Path::new(env!("CARGO_MANIFEST_DIR")).join("x")` or, read at run time,
    // `Path::new(&manifest).join("x")`.
    let join =
        regex_lite::Regex::new(r#"(?:CARGO_MANIFEST_DIR"\)|&manifest)\)\s*\.join\("([^"]+)"\)"#)
            .unwrap();
    let mut found = BTreeSet::new();
    let mut pending = vec![repo().join("src"), repo().join("crates")];
    let mut sources = vec![repo().join("build.rs")];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                sources.push(path);
            }
        }
    }
    for file in sources {
        let text = std::fs::read_to_string(&file).unwrap();
        let base = file.parent().unwrap();
        for c in include.captures_iter(&text) {
            let resolved = normalise(&base.join(&c[1]));
            found.insert(
                resolved
                    .strip_prefix(repo())
                    .unwrap_or_else(|_| {
                        panic!("{} embeds {} outside the repository", file.display(), &c[1])
                    })
                    .display()
                    .to_string(),
            );
        }
        if file.file_name().is_some_and(|n| n == "build.rs") {
            for c in join.captures_iter(&text) {
                found.insert(c[1].to_owned());
            }
        }
    }
    found
}

/// `path` with its `..` and `.` components folded (without touching the file system).
fn normalise(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// Row 9 of issue 35: `docker compose up` could not build, since the Dockerfile copied neither
/// `vendor/` nor `build.rs` (nor `crates/`, nor `deploy/`'s embedded files).
#[test]
fn the_dockerfile_copies_a_workspace_that_builds() {
    let tree = TempDir::new("docker-context");
    materialise_build_stage(tree.path());

    let want = workspace_targets(repo()).expect("cargo metadata of the repository");
    let got = workspace_targets(tree.path()).unwrap_or_else(|e| {
        panic!("cargo metadata --locked on what deploy/Dockerfile copies fails:\n{e}")
    });
    let missing: Vec<&String> = want.difference(&got).collect();
    assert!(
        missing.is_empty(),
        "targets (build scripts included) the image's tree lacks: {missing:?}"
    );

    let embedded = embedded_paths();
    assert!(
        embedded.contains("sql") && embedded.contains("migrations"),
        "the scan found the statement and migration directories: {embedded:?}"
    );
    let absent: Vec<&String> = embedded
        .iter()
        .filter(|p| !tree.path().join(p).exists())
        .collect();
    assert!(
        absent.is_empty(),
        "files the sources embed that the image's tree lacks: {absent:?}"
    );
}
