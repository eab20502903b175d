//! Ids as people type them: a whole UUID, or a unique start or end of one (the page shows an
//! id's last 8 characters). Jobs are found through the list call: ids are time-ordered, so
//! every id with a given start sits just after that start padded with zeros (one page of two
//! tells unique from ambiguous); an end is searched for (`q`), so the server walks every job of
//! the workspace and answers those whose id or command holds it (a server before `q` answers
//! every job: then the newest [`SCAN_JOBS`] are looked at). Runners are found in the lists the
//! caller may read.
//!
//! Invariant: a prefix resolves only when exactly one visible object has it; otherwise the
//! error says none or names the candidates, and nothing is called on a guess.

use anyhow::bail;
use uuid::Uuid;

use crate::client::{Client, JobQuery};
use crate::wire;

/// How many listed jobs an id's end is looked for among: the search's matches, or the newest
/// jobs from a server that does not search.
pub const SCAN_JOBS: usize = 5000;

/// The hex digits of a prefix (hyphens dropped), when `text` can be the start of an id but is
/// not a whole one.
fn prefix_of(text: &str) -> Option<String> {
    crate::wire::input::id_digits(text).filter(|hex| hex.len() < 32)
}

fn not_an_id(text: &str, what: &str) -> anyhow::Error {
    anyhow::anyhow!(
        "{text:?} is not a {what} id: give the whole id, or at least its first 4 hex digits \
         (the 8 the page shows)"
    )
}

/// The job `text` names: a whole id as it is, a prefix when one job of the workspace has it.
///
/// # Errors
/// Not an id or a prefix, no job or several with that prefix, or the list call failed.
pub async fn job(client: &Client, text: &str) -> anyhow::Result<Uuid> {
    if let Ok(id) = Uuid::parse_str(text.trim()) {
        return Ok(id);
    }
    let prefix = prefix_of(text.trim()).ok_or_else(|| not_an_id(text, "job"))?;
    let padded = format!("{prefix:0<32}");
    let after = Uuid::parse_str(&padded).map_err(|_| not_an_id(text, "job"))?;
    let page = client
        .list_jobs(&JobQuery {
            state: None,
            outcome: None,
            limit: Some(2),
            after: Some(after),
            newest_first: false,
            search: None,
        })
        .await?;
    let mut hits: Vec<Uuid> = page
        .jobs
        .iter()
        .map(|j| j.id)
        .filter(|id| id.simple().to_string().starts_with(&prefix))
        .collect();
    if hits.is_empty() {
        hits = ending_with(client, &prefix).await?;
    }
    match hits.as_slice() {
        [one] => Ok(*one),
        [] => bail!("no job of this workspace has an id starting or ending {text}"),
        _ => bail!(
            "several jobs have an id starting or ending {text} (such as {}): give more of the id",
            hits.iter()
                .map(Uuid::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// The jobs whose id ends with the hex digits `end`, newest first; two at most.
async fn ending_with(client: &Client, end: &str) -> anyhow::Result<Vec<Uuid>> {
    let mut hits = Vec::new();
    let mut after = None;
    let mut seen = 0;
    while seen < SCAN_JOBS {
        let page = client
            .list_jobs(&JobQuery {
                state: None,
                outcome: None,
                limit: Some(500),
                after,
                newest_first: true,
                search: Some(end),
            })
            .await?;
        seen += page.jobs.len();
        hits.extend(
            page.jobs
                .iter()
                .map(|j| j.id)
                .filter(|id| id.simple().to_string().ends_with(end)),
        );
        if hits.len() > 1 {
            break;
        }
        match page.next {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    Ok(hits)
}

/// The runner `text` names among `runners`: a whole id as it is (even if not listed), a prefix
/// when one of them has it.
///
/// # Errors
/// Not an id or a prefix, or no runner or several with that prefix.
pub fn runner(runners: &[wire::Runner], text: &str) -> anyhow::Result<Uuid> {
    if let Ok(id) = Uuid::parse_str(text.trim()) {
        return Ok(id);
    }
    let prefix = prefix_of(text.trim()).ok_or_else(|| not_an_id(text, "runner"))?;
    let by = |f: &dyn Fn(&str) -> bool| -> Vec<&wire::Runner> {
        runners
            .iter()
            .filter(|r| f(&r.id.simple().to_string()))
            .collect()
    };
    let mut hits = by(&|id| id.starts_with(&prefix));
    if hits.is_empty() {
        hits = by(&|id| id.ends_with(&prefix));
    }
    match hits.as_slice() {
        [one] => Ok(one.id),
        [] => bail!("no runner you can see has an id starting or ending {text}"),
        _ => bail!(
            "several runners have an id starting or ending {text} ({}): give more of the id",
            hits.iter()
                .map(|r| format!("{} {}", r.id, r.label))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prefix_is_four_to_thirty_one_hex_digits() {
        assert_eq!(prefix_of("01a2499E").as_deref(), Some("01a2499e"));
        assert_eq!(prefix_of("01a2499e-80db").as_deref(), Some("01a2499e80db"));
        for bad in ["", "01a", "xyz12345"] {
            assert!(prefix_of(bad).is_none(), "{bad}");
        }
    }
}
