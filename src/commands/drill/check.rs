//! The drill's checker: a pure function of a history of events (no I/O, no clock), so the
//! invariants it enforces can be tested on histories written by hand.
//!
//! Invariants (docs/drill.md):
//! 1. every acknowledged job (dispatch answered 201) reaches a terminal state: none is lost;
//! 2. it reaches exactly one: no job has two accepted terminal reports, and an accepted report
//!    agrees with the state the job ends in;
//! 3. never two runners accepted at one epoch of a job (lease or report);
//! 4. every stale report (its epoch superseded by a lease granted before it was sent) is refused
//!    with 409, and counted;
//! 5. no 5xx answer but 503 (the contract's "retry": the database unreachable, a replica
//!    draining).
//!
//! 6. after every fault, every replica answers `/readyz` 200 again within
//!    [`READY_WITHIN_MS`] of the repair (a new leader elected, a server restarted, a cut healed).
//!
//! It also measures, per fault, the time from the fault to its repair (for a failover or a
//! switchover, to the new leader), to the next lease served and to the next moment every
//! replica answered `/readyz` 200, the last two counted from the first event after the repair,
//! as nothing can recover before that.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;
use uuid::Uuid;

/// Every replica is ready again this soon after a fault's repair.
pub const READY_WITHIN_MS: u64 = 15_000;

/// What became of a terminal report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// 200: the report settled the job.
    Accepted,
    /// 409: the report was refused as superseded or late.
    Refused,
    /// No answer, or 503: unknown whether it landed.
    Unknown,
}

/// One observation. `at_ms` is milliseconds on the drill's clock (one clock for all).
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// A dispatch answered 201.
    Dispatched { job: Uuid, at_ms: u64 },
    /// A lease answer handed `job` at `epoch` to `runner`.
    Leased {
        job: Uuid,
        epoch: i64,
        runner: String,
        at_ms: u64,
    },
    /// A terminal report (`complete`) for `job` at `epoch`, sent at `at_ms`.
    Reported {
        job: Uuid,
        epoch: i64,
        runner: String,
        outcome: Outcome,
        at_ms: u64,
    },
    /// An HTTP answer of 500 or more.
    ServerError {
        status: u16,
        what: String,
        at_ms: u64,
    },
    /// Every replica answered `/readyz` 200.
    AllReady { at_ms: u64 },
    /// A fault: injected at `at_ms`, repaired by `healed_ms`.
    Fault {
        kind: String,
        target: String,
        at_ms: u64,
        healed_ms: u64,
    },
    /// A violation seen outside the history (a replica that exited non-zero after SIGTERM).
    Violation { what: String },
    /// The state a job was seen in at the end.
    Final {
        job: Uuid,
        state: Option<String>,
        epoch: i64,
    },
}

/// One fault and how long the deployment took to recover from it.
#[derive(Debug, Clone, Serialize)]
pub struct Recovery {
    pub kind: String,
    pub target: String,
    pub at_ms: u64,
    /// Fault → repaired (a new leader leads, a server is back, a runner thawed).
    pub to_repair_ms: u64,
    /// Fault → first lease served after the repair; `None` if none followed.
    pub to_lease_ms: Option<u64>,
    /// Fault → first probe with every replica ready after the repair.
    pub to_ready_ms: Option<u64>,
}

/// The checker's verdict.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Verdict {
    pub dispatched: u64,
    pub completed: u64,
    /// Terminal in another state (failed `lease_lost` after too many lapses, ...).
    pub other_terminal: u64,
    pub lost: u64,
    pub leases: u64,
    pub reports_accepted: u64,
    pub stale_refused: u64,
    /// Refused reports that were not stale by the history (a cut runner's, a lapsed lease).
    pub other_refused: u64,
    pub unknown_reports: u64,
    pub http_503: u64,
    pub http_5xx_other: u64,
    pub recoveries: Vec<Recovery>,
    pub violations: Vec<String>,
}

impl Verdict {
    pub fn ok(&self) -> bool {
        self.violations.is_empty()
    }
}

/// Check a finished `history` (in any order), with the final state of every job.
pub fn check(history: &[Event]) -> Verdict {
    judge(history, true)
}

/// Check a history still being written: every invariant but those about how jobs end.
pub fn check_live(history: &[Event]) -> Verdict {
    judge(history, false)
}

fn judge(history: &[Event], end: bool) -> Verdict {
    let mut v = Verdict::default();
    let mut dispatched: BTreeMap<Uuid, u64> = BTreeMap::new();
    // (job, epoch) -> runner that holds it
    let mut holders: HashMap<(Uuid, i64), String> = HashMap::new();
    // job -> [(epoch, granted at)]
    let mut grants: HashMap<Uuid, Vec<(i64, u64)>> = HashMap::new();
    let mut accepted: HashMap<Uuid, Vec<i64>> = HashMap::new();
    let mut finals: HashMap<Uuid, Option<String>> = HashMap::new();
    let mut lease_times: Vec<u64> = Vec::new();
    let mut ready_times: Vec<u64> = Vec::new();
    let mut faults = Vec::new();

    for e in history {
        match e {
            Event::Dispatched { job, at_ms } => {
                dispatched.insert(*job, *at_ms);
            }
            Event::Leased {
                job,
                epoch,
                runner,
                at_ms,
            } => {
                v.leases += 1;
                lease_times.push(*at_ms);
                grants.entry(*job).or_default().push((*epoch, *at_ms));
                if let Some(other) = holders.insert((*job, *epoch), runner.clone()) {
                    v.violations.push(format!(
                        "job {job} epoch {epoch} leased twice (to {other} and to {runner})"
                    ));
                }
            }
            Event::ServerError { status, what, .. } => {
                if *status == 503 {
                    v.http_503 += 1;
                } else {
                    v.http_5xx_other += 1;
                    v.violations.push(format!("{what} answered {status}"));
                }
            }
            Event::AllReady { at_ms } => ready_times.push(*at_ms),
            Event::Fault {
                kind,
                target,
                at_ms,
                healed_ms,
            } => faults.push((kind.clone(), target.clone(), *at_ms, *healed_ms)),
            Event::Final { job, state, .. } => {
                finals.insert(*job, state.clone());
            }
            Event::Violation { what } => v.violations.push(what.clone()),
            Event::Reported { .. } => {}
        }
    }
    // Reports, once every grant is known.
    for e in history {
        let Event::Reported {
            job,
            epoch,
            runner,
            outcome,
            at_ms,
        } = e
        else {
            continue;
        };
        let superseded = grants
            .get(job)
            .is_some_and(|g| g.iter().any(|(ep, at)| ep > epoch && at < at_ms));
        match outcome {
            Outcome::Accepted => {
                v.reports_accepted += 1;
                accepted.entry(*job).or_default().push(*epoch);
                if superseded {
                    v.violations.push(format!(
                        "stale report accepted: job {job} epoch {epoch} by {runner}, after a later epoch was leased"
                    ));
                }
                if let Some(holder) = holders.get(&(*job, *epoch)) {
                    if holder != runner {
                        v.violations.push(format!(
                            "job {job} epoch {epoch} held by {holder} but {runner}'s report was accepted"
                        ));
                    }
                }
            }
            Outcome::Refused if superseded => v.stale_refused += 1,
            Outcome::Refused => v.other_refused += 1,
            Outcome::Unknown => v.unknown_reports += 1,
        }
    }
    for (job, epochs) in &accepted {
        if epochs.len() > 1 {
            v.violations.push(format!(
                "job {job} settled {} times (epochs {epochs:?})",
                epochs.len()
            ));
        }
        if let Some(Some(state)) = finals.get(job) {
            if state != "completed" {
                v.violations.push(format!(
                    "job {job}: a completion was accepted but the job ended {state}"
                ));
            }
        }
    }
    v.dispatched = dispatched.len() as u64;
    for job in dispatched.keys().filter(|_| end) {
        match finals.get(job) {
            Some(Some(s)) if s == "completed" => v.completed += 1,
            Some(Some(s)) if s != "parked" && s != "leased" => v.other_terminal += 1,
            Some(Some(s)) => {
                v.lost += 1;
                v.violations
                    .push(format!("job {job} never settled (still {s})"));
            }
            Some(None) | None => {
                v.lost += 1;
                v.violations
                    .push(format!("job {job} was acknowledged but is gone"));
            }
        }
    }
    lease_times.sort_unstable();
    ready_times.sort_unstable();
    let first_after = |times: &[u64], t: u64| {
        let i = times.partition_point(|&x| x < t);
        times.get(i).copied()
    };
    for (kind, target, at, healed) in faults {
        let ready = first_after(&ready_times, healed);
        if end && ready.is_none_or(|t| t - healed > READY_WITHIN_MS) {
            v.violations.push(format!(
                "after {kind} ({target}), not every replica was ready within {} s of the repair ({})",
                READY_WITHIN_MS / 1000,
                ready.map_or_else(|| "never".to_owned(), |t| format!("{} ms", t - healed))
            ));
        }
        v.recoveries.push(Recovery {
            to_repair_ms: healed.saturating_sub(at),
            to_lease_ms: first_after(&lease_times, healed).map(|t| t - at),
            to_ready_ms: ready.map(|t| t - at),
            kind,
            target,
            at_ms: at,
        });
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u128) -> Uuid {
        Uuid::from_u128(n)
    }

    fn leased(job: Uuid, epoch: i64, runner: &str, at_ms: u64) -> Event {
        Event::Leased {
            job,
            epoch,
            runner: runner.into(),
            at_ms,
        }
    }

    fn reported(job: Uuid, epoch: i64, runner: &str, outcome: Outcome, at_ms: u64) -> Event {
        Event::Reported {
            job,
            epoch,
            runner: runner.into(),
            outcome,
            at_ms,
        }
    }

    fn done(job: Uuid, epoch: i64) -> Event {
        Event::Final {
            job,
            state: Some("completed".into()),
            epoch,
        }
    }

    /// A frozen runner's late report refused, the job redelivered and settled once.
    fn healthy() -> Vec<Event> {
        let (a, b, c) = (id(1), id(2), id(3));
        vec![
            Event::Dispatched { job: a, at_ms: 0 },
            Event::Dispatched { job: b, at_ms: 1 },
            leased(a, 1, "r1", 5),
            leased(b, 1, "r2", 6),
            reported(b, 1, "r2", Outcome::Accepted, 8),
            // r1 froze; the lease lapsed and r2 took a at epoch 2.
            leased(a, 2, "r2", 100),
            reported(a, 2, "r2", Outcome::Accepted, 110),
            reported(a, 1, "r1", Outcome::Refused, 120),
            Event::Fault {
                kind: "freeze-runner".into(),
                target: "r1".into(),
                at_ms: 10,
                healed_ms: 115,
            },
            Event::AllReady { at_ms: 130 },
            Event::Dispatched { job: c, at_ms: 2 },
            leased(c, 1, "r3", 140),
            reported(c, 1, "r3", Outcome::Accepted, 150),
            done(c, 1),
            Event::ServerError {
                status: 503,
                what: "lease".into(),
                at_ms: 50,
            },
            done(a, 2),
            done(b, 1),
        ]
    }

    #[test]
    fn a_healthy_history_passes_and_counts_the_stale_report() {
        let v = check(&healthy());
        assert!(v.ok(), "{:?}", v.violations);
        assert_eq!(v.dispatched, 3);
        assert_eq!(v.completed, 3);
        assert_eq!(v.stale_refused, 1);
        assert_eq!(v.http_503, 1);
        assert_eq!(v.recoveries[0].to_lease_ms, Some(130));
        assert_eq!(v.recoveries[0].to_ready_ms, Some(120));
    }

    #[test]
    fn a_job_reported_twice_fails() {
        let mut h = healthy();
        h.push(reported(id(2), 1, "r2", Outcome::Accepted, 9));
        let v = check(&h);
        assert!(!v.ok());
        assert!(v.violations.iter().any(|s| s.contains("settled 2 times")));
    }

    #[test]
    fn a_stale_epoch_accepted_fails() {
        let mut h = healthy();
        h.retain(|e| !matches!(e, Event::Reported { runner, epoch: 1, .. } if runner == "r1"));
        h.push(reported(id(1), 1, "r1", Outcome::Accepted, 120));
        let v = check(&h);
        assert!(!v.ok());
        assert!(v
            .violations
            .iter()
            .any(|s| s.contains("stale report accepted")));
    }

    #[test]
    fn two_runners_at_one_epoch_fail() {
        let mut h = healthy();
        h.push(leased(id(1), 2, "r3", 101));
        assert!(check(&h)
            .violations
            .iter()
            .any(|s| s.contains("leased twice")));
    }

    #[test]
    fn a_lost_job_and_a_500_fail() {
        let mut h = healthy();
        h.push(Event::Dispatched {
            job: id(4),
            at_ms: 2,
        });
        h.push(Event::ServerError {
            status: 500,
            what: "dispatch".into(),
            at_ms: 3,
        });
        let v = check(&h);
        assert_eq!(v.lost, 1);
        assert_eq!(v.http_5xx_other, 1);
        assert_eq!(v.violations.len(), 2);
    }

    #[test]
    fn replicas_not_ready_within_15_s_of_a_repair_fail() {
        let mut h = healthy();
        // A switchover repaired at 200 ms (the new leader), replicas ready only 15.2 s later.
        h.push(Event::Fault {
            kind: "switchover-db".into(),
            target: "pg0 -> pg1".into(),
            at_ms: 160,
            healed_ms: 200,
        });
        h.push(Event::AllReady { at_ms: 15_400 });
        let v = check(&h);
        assert!(
            v.violations
                .iter()
                .any(|s| s.contains("switchover-db") && s.contains("15200 ms")),
            "{:?}",
            v.violations
        );
        assert_eq!(v.recoveries[1].to_repair_ms, 40);
        // Ready 14.9 s after the repair passes.
        h.push(Event::AllReady { at_ms: 15_100 });
        assert!(check(&h).ok(), "{:?}", check(&h).violations);
        // A repair never followed by a ready probe fails.
        let mut never = healthy();
        never.push(Event::Fault {
            kind: "restart-etcd".into(),
            target: "etcd".into(),
            at_ms: 500,
            healed_ms: 600,
        });
        assert!(check(&never).violations.iter().any(|s| s.contains("never")));
        assert!(check_live(&never).ok(), "the live check waits for the end");
    }
}
