//! The API reference for people (`docs/api-reference.md`, `leasehold openapi --markdown`): the
//! OpenAPI document of [`super::openapi`] as Markdown, every call with its credential, query,
//! body, answer and errors, then every type with its fields.
//!
//! Invariant: it is made from the document alone, so it says what the route table and the wire
//! types say, nothing kept by hand; `tests/it/docs.rs` checks the committed file is this text.

use std::fmt::Write;

use serde_json::Value;

/// The reference, from the document a replica serves.
pub fn markdown() -> String {
    render(super::openapi::document())
}

const METHODS: [&str; 5] = ["get", "put", "post", "delete", "patch"];

/// Which section a call is in, by its first tag.
const SECTIONS: [(&str, &str); 3] = [
    ("operators", "Operators and dispatchers (API key)"),
    ("runner", "Runners (runner token, or a join code)"),
    ("operations", "Operations and the page (no credential)"),
];

fn render(doc: &Value) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# leasehold HTTP API reference\n\n\
         Generated from the route table by `leasehold openapi --markdown`: the same document a \
         replica serves at `/openapi.json`, as Markdown (`tests/it/docs.rs` checks this file is \
         current). What the calls mean, and the rules they keep: [api.md](api.md).\n\n\
         Every error answer is `{{\"error\":{{\"code\",\"message\"}}}}` \
         ([`ErrorBody`](#errorbody)).\n"
    );
    let paths = doc["paths"].as_object().cloned().unwrap_or_default();
    let mut calls: Vec<(String, String, Value)> = Vec::new();
    for (path, item) in &paths {
        for m in METHODS {
            if let Some(op) = item.get(m) {
                calls.push((m.to_uppercase(), path.clone(), op.clone()));
            }
        }
    }
    // The route table's order, as the document's operation ids keep it.
    let order: Vec<String> = super::every_route()
        .iter()
        .map(|r| format!("{} {}", r.method, r.path))
        .collect();
    calls.sort_by_key(|(m, p, _)| {
        order
            .iter()
            .position(|o| *o == format!("{m} {p}"))
            .unwrap_or(usize::MAX)
    });
    for (tag, title) in SECTIONS {
        let _ = writeln!(out, "## {title}\n");
        let _ = writeln!(out, "| call | credential | summary |\n| --- | --- | --- |");
        let mine: Vec<&(String, String, Value)> = calls
            .iter()
            .filter(|(_, _, op)| op["tags"][0] == tag)
            .collect();
        for (m, p, op) in &mine {
            let _ = writeln!(
                out,
                "| [`{m} {p}`](#{}) | {} | {} |",
                anchor(&format!("{m} {p}")),
                credential(op),
                cell(op["summary"].as_str().unwrap_or(""))
            );
        }
        out.push('\n');
        for (m, p, op) in mine {
            call(&mut out, m, p, op);
        }
    }
    let _ = writeln!(out, "## Types\n");
    if let Some(schemas) = doc["components"]["schemas"].as_object() {
        for (name, schema) in schemas {
            type_section(&mut out, name, schema);
        }
    }
    out
}

/// GitHub's anchor of a heading's text: lower case, punctuation but `-` and `_` dropped,
/// spaces turned to `-`.
pub fn anchor(text: &str) -> String {
    text.to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// Prose from the document as Markdown text: `<` escaped, so `ws:<workspace>` is not a tag.
fn text(s: &str) -> String {
    s.replace('<', "\\<")
}

/// A value for a table cell: no line breaks, no bars.
fn cell(s: &str) -> String {
    text(s).replace('\n', " ").replace('|', "\\|")
}

fn credential(op: &Value) -> &'static str {
    match op["security"].as_array().and_then(|s| s.first()) {
        None => "none",
        Some(s) if s.get("runnerToken").is_some() => "runner token",
        Some(s) if s["apiKey"].as_array().is_some_and(|r| !r.is_empty()) => "API key, admin",
        Some(_) => "API key, member",
    }
}

/// A schema reference as a link to its type, or the schema's type in words.
fn type_of(schema: &Value) -> String {
    if let Some(r) = schema["$ref"].as_str() {
        let name = r.rsplit('/').next().unwrap_or(r);
        return format!("[`{name}`](#{})", anchor(name));
    }
    for (key, joint) in [("allOf", " and "), ("oneOf", " or ")] {
        if let Some(parts) = schema[key].as_array() {
            let parts: Vec<String> = parts.iter().map(type_of).collect();
            return parts.join(joint);
        }
    }
    if let Some(props) = schema["properties"].as_object() {
        let fields: Vec<String> = props
            .iter()
            .map(|(name, s)| format!("`{name}`: {}", type_of(s)))
            .collect();
        return format!("object {{{}}}", fields.join(", "));
    }
    if let Some(values) = schema["enum"].as_array() {
        let names: Vec<String> = values
            .iter()
            .map(|v| format!("`{}`", v.as_str().unwrap_or("?")))
            .collect();
        return format!("one of {}", names.join(", "));
    }
    let types: Vec<String> = match &schema["type"] {
        Value::String(t) => vec![t.clone()],
        Value::Array(ts) => ts
            .iter()
            .filter_map(|t| t.as_str().map(str::to_owned))
            .collect(),
        _ => return "any JSON".into(),
    };
    let words: Vec<String> = types
        .iter()
        .map(|t| match t.as_str() {
            "array" => format!("array of {}", type_of(&schema["items"])),
            "string" if schema["format"].is_string() => {
                format!("string ({})", schema["format"].as_str().unwrap_or(""))
            }
            "object" if schema["additionalProperties"].is_object() => {
                format!("object of {}", type_of(&schema["additionalProperties"]))
            }
            other => other.to_owned(),
        })
        .collect();
    words.join(" or ")
}

fn call(out: &mut String, method: &str, path: &str, op: &Value) {
    let _ = writeln!(out, "### `{method} {path}`\n");
    let _ = writeln!(out, "{}\n", text(op["summary"].as_str().unwrap_or("")));
    let _ = writeln!(out, "- credential: {}", credential(op));
    for p in op["parameters"].as_array().into_iter().flatten() {
        let _ = writeln!(
            out,
            "- {} `{}` ({}{}){}",
            p["in"].as_str().unwrap_or("?"),
            p["name"].as_str().unwrap_or("?"),
            type_of(&p["schema"]),
            if p["required"] == true {
                ", required"
            } else {
                ""
            },
            p["description"]
                .as_str()
                .map(|d| format!(": {}", text(d)))
                .unwrap_or_default()
        );
    }
    if let Some(body) = op["requestBody"]["content"]["application/json"]["schema"].as_object() {
        let _ = writeln!(
            out,
            "- body: {} (`Content-Type: application/json`)",
            type_of(&Value::Object(body.clone()))
        );
    }
    if let Some(responses) = op["responses"].as_object() {
        for (status, r) in responses {
            let description = r["description"].as_str().unwrap_or("");
            let content = r["content"].as_object().and_then(|c| c.iter().next());
            let what = match content {
                Some((media, c)) if media == "application/json" => type_of(&c["schema"]),
                Some((media, _)) => format!("`{media}`"),
                None => "no body".into(),
            };
            if status.starts_with('2') {
                let _ = writeln!(out, "- answer `{status}`: {what}");
            } else {
                let _ = writeln!(out, "- `{status}`: {}", text(description));
            }
        }
    }
    out.push('\n');
}

fn type_section(out: &mut String, name: &str, schema: &Value) {
    let _ = writeln!(out, "### `{name}`\n");
    if let Some(d) = schema["description"].as_str() {
        let _ = writeln!(out, "{}\n", text(d.trim()));
    }
    let Some(props) = schema["properties"].as_object() else {
        let _ = writeln!(out, "{}\n", type_of(schema));
        return;
    };
    let required: Vec<&str> = schema["required"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let _ = writeln!(
        out,
        "| field | type | required | about |\n| --- | --- | --- | --- |"
    );
    for (field, s) in props {
        let _ = writeln!(
            out,
            "| `{field}` | {} | {} | {} |",
            cell(&type_of(s)),
            if required.contains(&field.as_str()) {
                "yes"
            } else {
                ""
            },
            cell(s["description"].as_str().unwrap_or("").trim())
        );
    }
    out.push('\n');
}
