//! Job states and which of them are terminal. A job settles exactly once; terminal states
//! never change again (the SQL of every transition only matches live states).

/// The six states of a job (see docs/design.md, "State machine").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobState {
    Parked,
    Leased,
    Completed,
    Failed,
    Cancelled,
    Rejected,
}

impl JobState {
    pub const ALL: [JobState; 6] = [
        JobState::Parked,
        JobState::Leased,
        JobState::Completed,
        JobState::Failed,
        JobState::Cancelled,
        JobState::Rejected,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Parked => "parked",
            JobState::Leased => "leased",
            JobState::Completed => "completed",
            JobState::Failed => "failed",
            JobState::Cancelled => "cancelled",
            JobState::Rejected => "rejected",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|st| st.as_str() == s)
    }

    pub fn is_terminal(self) -> bool {
        !matches!(self, JobState::Parked | JobState::Leased)
    }
}

/// How a settled job ended (v1.3, "Outcome"): what people filter on and colour by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Succeeded,
    Failed,
    Cancelled,
    Rejected,
}

impl Outcome {
    pub const ALL: [Outcome; 4] = [
        Outcome::Succeeded,
        Outcome::Failed,
        Outcome::Cancelled,
        Outcome::Rejected,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Succeeded => "succeeded",
            Outcome::Failed => "failed",
            Outcome::Cancelled => "cancelled",
            Outcome::Rejected => "rejected",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|o| o.as_str() == s)
    }
}

/// A job's outcome: `None` while it is live; a completed job `succeeded` unless its result
/// names an `exit_code` other than 0 (any other value, `null` included: a command killed by a
/// signal has none), then `failed`, as a job in state `failed` is. SQL's `job_outcome()`
/// (migration 0037) is the same rule, for the list's filter.
pub fn outcome(state: JobState, result: Option<&serde_json::Value>) -> Option<Outcome> {
    match state {
        JobState::Parked | JobState::Leased => None,
        JobState::Completed => {
            let code = result.and_then(|r| r.as_object()?.get("exit_code"));
            match code {
                None => Some(Outcome::Succeeded),
                Some(c) if c.as_f64() == Some(0.0) => Some(Outcome::Succeeded),
                Some(_) => Some(Outcome::Failed),
            }
        }
        JobState::Failed => Some(Outcome::Failed),
        JobState::Cancelled => Some(Outcome::Cancelled),
        JobState::Rejected => Some(Outcome::Rejected),
    }
}
