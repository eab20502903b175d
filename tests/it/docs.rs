//! What a reader of the repository is told holds (issue 47 item 7): README.md and docs/ link
//! and name only files of the repository (a clone has no `shared/`), and every path, module and
//! setting they and the code's comments name exists (issue 54 row 3); the API reference in
//! docs/ is the route table's, as `leasehold openapi --markdown` prints it now; and the
//! README's shell examples run as printed.
//!
//! Every ```sh block of the README is marked, on the line before it, `<!-- example: run -->`
//! or `<!-- example: skip, WHY -->`. The runnable ones run in order, in one shell, as a reader
//! pastes them into one terminal: against a real `leasehold dev` (its in-process runner takes
//! the jobs), with the two `export` lines `dev` printed, in a directory whose
//! `target/release/leasehold` is the binary under test. A command whose comment says `# prints
//! X` must print X as its first line (`...` at the end: X begins it). A command's exit status
//! other than 0 fails the test.

use std::path::PathBuf;
use std::process::Stdio;

use leasehold::api::reference::anchor;

use crate::procs::{TempDir, BIN, LONG};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// README.md and every Markdown file under docs/.
fn documents() -> Vec<PathBuf> {
    let mut files = vec![repo().join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(repo().join("docs"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    docs.sort();
    files.extend(docs);
    files
}

fn anchors(text: &str) -> Vec<String> {
    let mut in_code = false;
    let mut out = Vec::new();
    for line in text.lines() {
        if line.starts_with("```") {
            in_code = !in_code;
        }
        if !in_code && line.starts_with('#') {
            out.push(anchor(line.trim_start_matches('#').trim()));
        }
    }
    out
}

/// The targets of `[text](target)` links outside code blocks.
fn links(text: &str) -> Vec<String> {
    let mut in_code = false;
    let mut out = Vec::new();
    for line in text.lines() {
        if line.starts_with("```") {
            in_code = !in_code;
            continue;
        }
        if in_code {
            continue;
        }
        let mut rest = line;
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(end) = after.find(')') else { break };
            out.push(after[..end].to_owned());
            rest = &after[end..];
        }
    }
    out
}

#[test]
fn readme_and_docs_link_and_name_only_files_of_the_repository() {
    let mut wrong = Vec::new();
    for doc in documents() {
        let text = std::fs::read_to_string(&doc).unwrap();
        let name = doc.strip_prefix(repo()).unwrap().display().to_string();
        for target in links(&text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (path, anchor) = match target.split_once('#') {
                Some((p, a)) => (p, Some(a)),
                None => (target.as_str(), None),
            };
            let file = if path.is_empty() {
                doc.clone()
            } else {
                doc.parent().unwrap().join(path)
            };
            if !file.exists() {
                wrong.push(format!(
                    "{name}: links {target}, which is not in the repository"
                ));
                continue;
            }
            if let (Some(anchor), Some("md")) = (anchor, file.extension().and_then(|e| e.to_str()))
            {
                let heads = anchors(&std::fs::read_to_string(&file).unwrap());
                if !heads.iter().any(|h| h == anchor) {
                    wrong.push(format!(
                        "{name}: links {target}, a heading that is not there"
                    ));
                }
            }
        }
        // A path a clone does not have, linked or not.
        for (i, line) in text.lines().enumerate() {
            if line.contains("shared/") {
                wrong.push(format!(
                    "{name}:{}: names shared/, not in the repository: {line}",
                    i + 1
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn the_api_reference_is_the_route_tables() {
    let out = std::process::Command::new(BIN)
        .args(["openapi", "--markdown"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let now = String::from_utf8(out.stdout).unwrap();
    let kept = std::fs::read_to_string(repo().join("docs/api-reference.md")).unwrap_or_default();
    assert!(
        kept == now,
        "docs/api-reference.md is not what the route table says now; regenerate it: \
         cargo run --release -- openapi --markdown > docs/api-reference.md"
    );
    // Every route of the table is in it.
    for route in leasehold::api::every_route() {
        assert!(
            now.contains(&format!("`{} {}`", route.method, route.path)),
            "{} {}",
            route.method,
            route.path
        );
    }
}

/// One ```sh block of the README and how it is marked.
struct Example {
    line: usize,
    run: bool,
    body: String,
}

fn examples(readme: &str) -> Vec<Example> {
    let lines: Vec<&str> = readme.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if lines[i].trim() == "```sh" {
            let mark = i
                .checked_sub(1)
                .map(|p| lines[p].trim())
                .unwrap_or_default();
            let run = match mark {
                "<!-- example: run -->" => true,
                m if m.starts_with("<!-- example: skip, ") && m.ends_with("-->") => false,
                m => panic!(
                    "README.md:{}: a ```sh block without `<!-- example: run -->` or \
                     `<!-- example: skip, WHY -->` on the line before it (found {m:?})",
                    i + 1
                ),
            };
            let start = i + 1;
            let mut end = start;
            while lines[end].trim() != "```" {
                end += 1;
            }
            out.push(Example {
                line: i + 1,
                run,
                body: lines[start..end].join("\n"),
            });
            i = end;
        }
        i += 1;
    }
    out
}

/// The comment of a command line (from a `#` outside quotes after a space), and the command.
fn split_comment(line: &str) -> (&str, Option<&str>) {
    let (mut single, mut double) = (false, false);
    let bytes = line.as_bytes();
    for (i, &b) in bytes.iter().enumerate() {
        match b {
            b'\'' if !double => single = !single,
            b'"' if !single => double = !double,
            b'#' if !single && !double && (i == 0 || bytes[i - 1] == b' ') => {
                return (line[..i].trim_end(), Some(line[i + 1..].trim()));
            }
            _ => {}
        }
    }
    (line.trim_end(), None)
}

/// The commands of a block (continued lines joined), each with what it says it prints.
fn commands(body: &str) -> Vec<(String, Option<String>)> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut prints = None;
    for raw in body.lines() {
        let (code, comment) = split_comment(raw);
        if code.trim().is_empty() {
            continue;
        }
        if let Some(c) = comment.and_then(|c| c.strip_prefix("prints ")) {
            prints = Some(c.split(';').next().unwrap().trim().to_owned());
        }
        match code.strip_suffix('\\') {
            Some(more) => current.push_str(&format!("{more}\\\n")),
            None => {
                current.push_str(code);
                out.push((std::mem::take(&mut current), prints.take()));
            }
        }
    }
    out
}

#[tokio::test]
async fn the_readme_examples_run_as_printed() {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let examples = examples(&readme);
    // A debug build (`cargo run -- ...`) is what the README advises against.
    for e in &examples {
        for (command, _) in commands(&e.body) {
            assert!(
                !command.trim_start().starts_with("cargo run -- "),
                "README.md:{}: `{command}` builds a debug binary beside the release one",
                e.line
            );
        }
    }
    let runnable: Vec<&Example> = examples.iter().filter(|e| e.run).collect();
    assert!(!runnable.is_empty(), "some example is marked runnable");

    let dir = TempDir::new("readme");
    let release = dir.join("target/release");
    std::fs::create_dir_all(&release).unwrap();
    std::os::unix::fs::symlink(BIN, release.join("leasehold")).unwrap();
    let dev = crate::dev::Dev::start(
        &dir.join("state/dev-pg"),
        "127.0.0.1:0",
        dir.join("dev.log"),
    )
    .await
    .unwrap_or_else(|e| panic!("dev starts: {e:?}"));
    let exports: Vec<(String, String)> = ["LEASEHOLD_SERVER", "LEASEHOLD_API_KEY"]
        .into_iter()
        .map(|k| (k.to_owned(), dev.exported(k)))
        .collect();

    // One script, one shell: each command announced on stdout, then run.
    let mut script = String::from("set -e\n");
    let mut expected = Vec::new();
    for example in &runnable {
        for (command, prints) in commands(&example.body) {
            let n = expected.len();
            script.push_str(&format!("printf '\\n@@example {n}@@\\n'\n{command}\n"));
            expected.push((example.line, command, prints));
        }
    }
    let out = tokio::time::timeout(
        LONG,
        tokio::process::Command::new("sh")
            .args(["-c", &script])
            .current_dir(dir.path())
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("HOME", dir.path())
            .envs(exports.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("the examples finish")
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let mut outputs: Vec<&str> = stdout.split("\n@@example ").skip(1).collect();
    let failed_at = outputs.len().saturating_sub(1);
    assert!(
        out.status.success(),
        "README.md:{}: `{}` failed ({}):\n{}\n{stderr}",
        expected[failed_at].0,
        expected[failed_at].1,
        out.status,
        outputs.last().unwrap_or(&"")
    );
    assert_eq!(outputs.len(), expected.len(), "{stdout}");
    for (i, (line, command, prints)) in expected.iter().enumerate() {
        let Some(prints) = prints else { continue };
        let body = outputs[i].split_once("@@\n").map_or("", |(_, b)| b);
        let first = body.lines().next().unwrap_or_default();
        let ok = match prints.strip_suffix("...") {
            Some(start) => first.starts_with(start),
            None => first == prints,
        };
        assert!(
            ok,
            "README.md:{line}: `{command}` says it prints `{prints}`; it printed `{first}`"
        );
    }
    outputs.clear();
}

/// Every file of the repository the test reads names from: README.md, docs/, and the sources
/// (Rust, SQL, the lab's Python) whose comments name things.
fn named_in() -> Vec<PathBuf> {
    fn walk(dir: &std::path::Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, out);
            } else if p
                .extension()
                .is_some_and(|x| x == "rs" || x == "sql" || x == "py")
            {
                out.push(p);
            }
        }
    }
    let mut files = documents();
    // Not migrations/: an applied migration's text is checksummed, and keeps the names of its
    // day.
    for dir in ["src", "crates", "sql", "tests", "bench"] {
        walk(&repo().join(dir), &mut files);
    }
    files
}

/// The words of `text` that look like one of the repository's paths, module paths or settings.
fn names(text: &str) -> Vec<String> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || "_/.:-".contains(c)))
        .map(|w| w.trim_end_matches(['.', ':', ',']).to_owned())
        .filter(|w| !w.is_empty())
        .collect()
}

/// Names in README.md, docs/ and code comments name what exists (issue 54 row 3): a repository
/// path (`src/...`, `sql/...`, `docs/...`, ...) is a file or a folder; a module path of the
/// server (`store::horizon`, `hub::dispatcher`) is a module; a `LEASEHOLD_` setting is read
/// somewhere in the code. A renamed thing is renamed everywhere, or kept as an alias.
#[test]
fn every_path_module_and_setting_named_exists() {
    let roots = [
        "src/",
        "sql/",
        "docs/",
        "tests/",
        "crates/",
        "migrations/",
        "deploy/",
        "bench/",
        "scripts/",
        "vendor/",
        "patches/",
    ];
    let layers = [
        "store",
        "hub",
        "api",
        "domain",
        "commands",
        "tooling",
        "telemetry",
        "replica",
    ];
    // Every string literal of the code (and the shipped units and scripts) that is a
    // setting's name.
    let mut code = String::new();
    for f in named_in() {
        if f.extension().is_some_and(|x| x == "rs") {
            code.push_str(&std::fs::read_to_string(&f).unwrap());
        }
    }
    for dir in ["deploy", "scripts"] {
        let mut stack = vec![repo().join(dir)];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
                if e.path().is_dir() {
                    stack.push(e.path());
                } else if let Ok(text) = std::fs::read_to_string(e.path()) {
                    for w in names(&text) {
                        code.push_str(&format!(" \"{w}\" "));
                    }
                }
            }
        }
    }
    let mut missing = Vec::new();
    for f in named_in() {
        let text = std::fs::read_to_string(&f).unwrap();
        let rel = f.strip_prefix(repo()).unwrap().display().to_string();
        for (n, line) in text.lines().enumerate() {
            for w in names(line) {
                let at = format!("{rel}:{}: {w}", n + 1);
                if roots.iter().any(|r| w.starts_with(r)) {
                    if w.contains('<') || w.contains('*') || w.contains("NN") {
                        continue;
                    }
                    let path = w.split(':').next().unwrap_or(&w);
                    if !repo().join(path).exists() {
                        missing.push(format!("{at} (no such path)"));
                    }
                } else if let Some((layer, rest)) = w.split_once("::") {
                    if !layers.contains(&layer) || rest.is_empty() {
                        continue;
                    }
                    let module = rest.split("::").next().unwrap_or(rest);
                    if module
                        .chars()
                        .next()
                        .is_some_and(|c| c.is_ascii_uppercase())
                    {
                        continue;
                    }
                    let base = repo().join("src").join(layer);
                    let exists = base.join(format!("{module}.rs")).exists()
                        || base.join(module).join("mod.rs").exists()
                        || std::fs::read_to_string(base.join("mod.rs"))
                            .or_else(|_| {
                                std::fs::read_to_string(repo().join(format!("src/{layer}.rs")))
                            })
                            .is_ok_and(|m| {
                                m.contains(&format!("fn {module}"))
                                    || m.contains(&format!("mod {module}"))
                            });
                    if !exists {
                        missing.push(format!("{at} (no such module)"));
                    }
                } else if w.starts_with("LEASEHOLD_") && w.len() > 10 {
                    let setting: String = w
                        .chars()
                        .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
                        .collect();
                    if !code.contains(&format!("\"{setting}\"")) {
                        missing.push(format!("{at} (no setting reads it)"));
                    }
                }
            }
        }
    }
    missing.sort();
    missing.dedup();
    assert!(
        missing.is_empty(),
        "names of things that do not exist:\n{}",
        missing.join("\n")
    );
}
