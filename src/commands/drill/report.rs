//! The drill's report: a table for people and a JSON document with a fixed set of keys for
//! machines (documented in docs/drill.md; keys are only ever added).

use std::collections::BTreeMap;
use std::fmt::Write;

use serde_json::{json, Value};

use super::check::Verdict;
use super::{DrillArgs, FaultKind};

pub struct Report {
    seed: u64,
    cluster: &'static str,
    seconds: u64,
    external: bool,
    replicas: usize,
    runners: usize,
    requested: Vec<&'static str>,
    skipped: Vec<(&'static str, String)>,
    verdict: Verdict,
}

/// One fault kind's count and worst times.
#[derive(Default)]
struct ByKind {
    count: u64,
    repair: u64,
    lease: Option<u64>,
    ready: Option<u64>,
}

fn ms(v: Option<u64>) -> String {
    v.map_or_else(|| "-".to_owned(), |v| format!("{v} ms"))
}

impl Report {
    pub fn new(
        args: &DrillArgs,
        requested: &[FaultKind],
        seed: u64,
        external: bool,
        replicas: usize,
        skipped: &[(FaultKind, String)],
        verdict: &Verdict,
    ) -> Self {
        Self {
            seed,
            cluster: match (external, args.cluster) {
                (true, _) => "existing",
                (false, super::ClusterKind::Embedded) => "embedded",
                (false, super::ClusterKind::Patroni) => "patroni",
            },
            seconds: args.seconds,
            external,
            replicas,
            runners: args.runners,
            requested: requested.iter().map(|k| k.name()).collect(),
            skipped: skipped.iter().map(|(k, r)| (k.name(), r.clone())).collect(),
            verdict: verdict.clone(),
        }
    }

    /// Per fault kind: how many, and the worst recovery times.
    fn by_kind(&self) -> BTreeMap<&str, ByKind> {
        let mut out: BTreeMap<&str, ByKind> = BTreeMap::new();
        for r in &self.verdict.recoveries {
            let e = out.entry(r.kind.as_str()).or_default();
            e.count += 1;
            e.repair = e.repair.max(r.to_repair_ms);
            e.lease = e.lease.max(r.to_lease_ms);
            e.ready = e.ready.max(r.to_ready_ms);
        }
        out
    }

    pub fn table(&self) -> String {
        let v = &self.verdict;
        let mut t = String::new();
        let _ = writeln!(
            t,
            "leasehold drill: {} s of faults, seed {}, {} deployment ({}), {} replicas, {} runners",
            self.seconds,
            self.seed,
            if self.external { "existing" } else { "own" },
            self.cluster,
            self.replicas,
            self.runners
        );
        let _ = writeln!(
            t,
            "  jobs     dispatched {}  completed {}  other terminal {}  lost {}",
            v.dispatched, v.completed, v.other_terminal, v.lost
        );
        let _ = writeln!(
            t,
            "  leases   {}  reports accepted {}  stale refused {}  other refused {}  unknown {}",
            v.leases, v.reports_accepted, v.stale_refused, v.other_refused, v.unknown_reports
        );
        let _ = writeln!(
            t,
            "  http     503 answers {}  other 5xx {}",
            v.http_503, v.http_5xx_other
        );
        let _ = writeln!(
            t,
            "  {:<16} {:>6} {:>16} {:>16} {:>16}",
            "fault", "count", "max to repair", "max to lease", "max to ready"
        );
        for (kind, k) in self.by_kind() {
            let _ = writeln!(
                t,
                "  {kind:<16} {:>6} {:>16} {:>16} {:>16}",
                k.count,
                ms(Some(k.repair)),
                ms(k.lease),
                ms(k.ready)
            );
        }
        for (kind, why) in &self.skipped {
            let _ = writeln!(t, "  skipped {kind}: {why}");
        }
        if v.violations.is_empty() {
            let _ = writeln!(t, "  violations: none\nPASS");
        } else {
            let _ = writeln!(t, "  violations ({}):", v.violations.len());
            for s in v.violations.iter().take(20) {
                let _ = writeln!(t, "    {s}");
            }
            let _ = writeln!(t, "FAIL");
        }
        t
    }

    pub fn json(&self) -> Value {
        let v = &self.verdict;
        json!({
            "ok": v.ok(),
            "seed": self.seed,
            "seconds": self.seconds,
            "deployment": if self.external { "existing" } else { "own" },
            "cluster": self.cluster,
            "replicas": self.replicas,
            "runners": self.runners,
            "faults_requested": self.requested,
            "faults_skipped": self.skipped.iter()
                .map(|(k, r)| json!({"kind": k, "reason": r})).collect::<Vec<_>>(),
            "jobs": {
                "dispatched": v.dispatched,
                "completed": v.completed,
                "other_terminal": v.other_terminal,
                "lost": v.lost,
            },
            "leases": v.leases,
            "reports": {
                "accepted": v.reports_accepted,
                "stale_refused": v.stale_refused,
                "other_refused": v.other_refused,
                "unknown": v.unknown_reports,
            },
            "http": {"503": v.http_503, "other_5xx": v.http_5xx_other},
            "faults": v.recoveries.iter().map(|r| json!({
                "kind": r.kind,
                "target": r.target,
                "at_ms": r.at_ms,
                "to_repair_ms": r.to_repair_ms,
                "to_lease_ms": r.to_lease_ms,
                "to_ready_ms": r.to_ready_ms,
            })).collect::<Vec<_>>(),
            "recovery": self.by_kind().into_iter().map(|(kind, k)| {
                (kind.to_owned(), json!({
                    "count": k.count,
                    "max_to_repair_ms": k.repair,
                    "max_to_lease_ms": k.lease,
                    "max_to_ready_ms": k.ready,
                }))
            }).collect::<serde_json::Map<_, _>>(),
            "violations": v.violations,
        })
    }
}
