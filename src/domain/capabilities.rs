//! Capability names: what runners advertise and jobs require.
//!
//! Advertised lists are forgiving (bad or unknown names are dropped); required lists are strict
//! (a bad or unknown name is the caller's error), so a job can never require something no runner
//! could ever advertise by accident.
//!
//! [`unfit`] is "this runner may run this job" in Rust, for the dispatch's 422 to a named
//! runner; SQL's `job_fits()` (migration 0011) is the same rule for every statement, and a
//! property test (`tests/it/fits.rs`) holds the two to the same answer on random inputs.

use std::collections::BTreeSet;

/// `^[a-z0-9][a-z0-9._:-]{0,62}$`
pub fn is_valid_name(name: &str) -> bool {
    let b = name.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && (b[0].is_ascii_lowercase() || b[0].is_ascii_digit())
        && b.iter().all(|c| {
            c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, b'.' | b'_' | b':' | b'-')
        })
}

/// The server's vocabulary: `None` accepts every valid name.
#[derive(Debug, Clone, Default)]
pub struct Vocabulary(Option<BTreeSet<String>>);

impl Vocabulary {
    /// From `LEASEHOLD_CAPABILITY_VOCABULARY`: comma-separated; unset or blank means any.
    pub fn parse(spec: Option<&str>) -> Self {
        let names: BTreeSet<String> = spec
            .unwrap_or("")
            .split(',')
            .map(str::trim)
            .filter(|n| is_valid_name(n))
            .map(str::to_owned)
            .collect();
        Self((!names.is_empty()).then_some(names))
    }

    fn knows(&self, name: &str) -> bool {
        self.0.as_ref().is_none_or(|v| v.contains(name))
    }

    /// What a runner advertises: invalid or unknown names dropped, sorted, de-duplicated.
    pub fn advertised(&self, names: &[String]) -> Vec<String> {
        names
            .iter()
            .filter(|n| is_valid_name(n) && self.knows(n))
            .cloned()
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect()
    }

    /// What a runner advertises with an exclusive (canary) set: both filtered as advertised
    /// names are, and every exclusive name also an advertised capability.
    pub fn advertised_with_exclusive(
        &self,
        capabilities: &[String],
        exclusive: &[String],
    ) -> (Vec<String>, Vec<String>) {
        let exclusive = self.advertised(exclusive);
        let mut all = capabilities.to_vec();
        all.extend(exclusive.iter().cloned());
        (self.advertised(&all), exclusive)
    }

    /// What a job requires: sorted, de-duplicated, or the first bad name as the error.
    ///
    /// # Errors
    /// The offending name, when malformed or outside the vocabulary.
    pub fn required(&self, names: &[String]) -> Result<Vec<String>, String> {
        if let Some(bad) = names.iter().find(|n| !is_valid_name(n) || !self.knows(n)) {
            return Err(bad.clone());
        }
        Ok(names
            .iter()
            .cloned()
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect())
    }
}

/// What a job asks of a runner (the arguments of SQL's `job_fits()` on the job's side).
#[derive(Debug, Clone, Copy)]
pub struct JobNeeds<'a> {
    pub required: &'a [String],
    /// `provider || ' ' || repository` of the job's source.
    pub source_key: Option<&'a str>,
    /// It names a `workspace` secret.
    pub needs_workspace_runner: bool,
}

/// What a runner offers (the arguments of `job_fits()` on the runner's side).
#[derive(Debug, Clone, Copy)]
pub struct RunnerOffers<'a> {
    pub capabilities: &'a [String],
    pub exclusive: &'a [String],
    /// Source keys of its approved repository targets.
    pub sources: &'a [String],
    /// It is a workspace runner (not a personal one).
    pub workspace_runner: bool,
}

/// Why a runner may not run a job: the first rule it breaks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unfit<'a> {
    /// The job needs a workspace runner and this one is personal.
    WorkspaceRunner,
    /// A required capability the runner does not advertise.
    Missing(&'a str),
    /// An exclusive name of the runner the job does not require.
    Exclusive(&'a str),
    /// The runner holds no approved target for the job's source.
    Source,
}

/// `None` when the runner may run the job; otherwise the first rule it breaks. The same rule as
/// SQL's `job_fits()`.
pub fn unfit<'a>(job: &JobNeeds<'a>, runner: &RunnerOffers<'a>) -> Option<Unfit<'a>> {
    if job.needs_workspace_runner && !runner.workspace_runner {
        return Some(Unfit::WorkspaceRunner);
    }
    if let Some(missing) = job
        .required
        .iter()
        .find(|c| !runner.capabilities.contains(c))
    {
        return Some(Unfit::Missing(missing));
    }
    if let Some(x) = runner.exclusive.iter().find(|x| !job.required.contains(x)) {
        return Some(Unfit::Exclusive(x));
    }
    match job.source_key {
        Some(key) if !runner.sources.iter().any(|s| s == key) => Some(Unfit::Source),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn names_follow_the_contract_pattern() {
        assert!(is_valid_name("docker"));
        assert!(is_valid_name("gpu:a100"));
        assert!(is_valid_name("0day"));
        assert!(!is_valid_name("Docker"));
        assert!(!is_valid_name("-x"));
        assert!(!is_valid_name(&"a".repeat(64)));
    }

    #[test]
    fn vocabulary_drops_advertised_and_refuses_required_unknowns() {
        let any = Vocabulary::parse(None);
        assert_eq!(
            any.advertised(&v(&["linux", "BAD", "docker", "linux"])),
            v(&["docker", "linux"])
        );
        let vocab = Vocabulary::parse(Some("linux, docker"));
        assert_eq!(vocab.advertised(&v(&["linux", "gpu"])), v(&["linux"]));
        assert_eq!(vocab.required(&v(&["gpu"])), Err("gpu".to_string()));
        assert_eq!(vocab.required(&v(&["docker"])), Ok(v(&["docker"])));
        assert_eq!(
            vocab.advertised_with_exclusive(&v(&["docker"]), &v(&["linux", "gpu"])),
            (v(&["docker", "linux"]), v(&["linux"])),
            "an exclusive name the vocabulary drops is dropped from both"
        );
    }
}
