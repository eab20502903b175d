//! The shipped configuration templates (`deploy/patroni.yml`, `deploy/haproxy-patroni.cfg`)
//! filled for this machine.

use anyhow::{bail, Context};

use super::Node;

/// Fill `{{key}}` placeholders; every one must be given.
///
/// # Errors
/// A placeholder was left unfilled.
pub fn fill(template: &str, values: &[(&str, String)]) -> anyhow::Result<String> {
    let mut out = template.to_owned();
    for (k, v) in values {
        out = out.replace(&format!("{{{{{k}}}}}"), v);
    }
    // Only lines that are not comments must be complete (the header documents the keys).
    if let Some(line) = out
        .lines()
        .find(|l| l.contains("{{") && !l.trim_start().starts_with('#'))
    {
        bail!("unfilled placeholder in: {line}");
    }
    Ok(out)
}

/// The shipped HAProxy configuration for this machine: `bind` on loopback `port`, and one
/// `server` line per node with the shipped first server line's options (its check port
/// replaced by the node's REST port).
///
/// # Errors
/// The template has no `bind` or no `server` line.
pub fn haproxy_config(template: &str, port: u16, nodes: &[Node]) -> anyhow::Result<String> {
    let mut out = String::new();
    let mut bound = false;
    let mut shape: Option<Vec<String>> = None;
    for line in template.lines() {
        let t = line.trim_start();
        if t.starts_with("bind ") {
            out.push_str(&format!("    bind 127.0.0.1:{port}\n"));
            bound = true;
        } else if t.starts_with("server ") {
            shape.get_or_insert_with(|| t.split_whitespace().map(str::to_owned).collect());
        } else {
            out.push_str(line);
            out.push('\n');
        }
    }
    let shape = shape.context("no server line in the HAProxy template")?;
    anyhow::ensure!(bound, "no bind line in the HAProxy template");
    for n in nodes {
        let mut words = shape.clone();
        words[1] = n.name.clone();
        words[2] = format!("127.0.0.1:{}", n.pg_port);
        if let Some(i) = words.iter().position(|w| w == "port") {
            if let Some(w) = words.get_mut(i + 1) {
                *w = n.rest_port.to_string();
            }
        }
        out.push_str(&format!("    {}\n", words.join(" ")));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    use crate::commands::drill::patroni::{Node, HAPROXY_TEMPLATE, PATRONI_TEMPLATE};

    #[test]
    fn the_shipped_templates_fill_for_this_machine() {
        let values: Vec<(&str, String)> = [
            "name",
            "rest_listen",
            "rest_connect",
            "etcd_hosts",
            "pg_listen",
            "pg_connect",
            "data_dir",
            "bin_dir",
            "pgpass",
            "socket_dir",
            "cidr",
            "ttl",
            "loop_wait",
            "retry_timeout",
            "archive_command",
            "superuser_password",
            "replication_password",
        ]
        .into_iter()
        .map(|k| (k, "x".to_owned()))
        .collect();
        let filled = fill(PATRONI_TEMPLATE, &values).expect("every placeholder known");
        assert!(filled.contains("synchronous_mode: true"));
        assert!(
            fill(PATRONI_TEMPLATE, &values[1..]).is_err(),
            "a missing value is an error"
        );
        let nodes: Vec<Node> = (0..2)
            .map(|i| Node {
                name: format!("pg{i}"),
                pg_port: 5000 + i,
                rest_port: 8000 + i,
                link_port: 0,
                dir: PathBuf::new(),
                patroni: None,
            })
            .collect();
        let cfg = haproxy_config(HAPROXY_TEMPLATE, 4321, &nodes).unwrap();
        assert!(cfg.contains("bind 127.0.0.1:4321"), "{cfg}");
        assert!(cfg.contains("server pg1 127.0.0.1:5001 "), "{cfg}");
        assert!(cfg.contains("check port 8001"), "{cfg}");
        assert!(cfg.contains("GET /primary"), "{cfg}");
        assert_eq!(cfg.matches("server pg").count(), 2, "{cfg}");
    }
}
