//! Job states and which of them are terminal. A job settles exactly once; terminal states
//! never change again (the SQL of every transition only matches live states).

/// The six states of a job (see ARCHITECTURE.md's state machine).
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
