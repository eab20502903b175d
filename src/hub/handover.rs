//! A lease's hand-over (v1.4, "A lease to a caller that is gone"): the jobs a tick leased for a
//! lease call stay guarded from the moment the tick answers the call until their answer has
//! been handed to the connection. A guard dropped before that (the call's handler dropped
//! because its client closed the connection, the answer lost with its channel, a panic, the
//! body never written) parks its jobs again at once with a `state` event `{"state":"parked",
//! "reason":"caller_gone"}` and the attempt given back: like a release, it never fails a job,
//! and nothing waits for its lease to lapse.
//!
//! Invariant: every job a tick leases for a call is in exactly one [`Handover`] until it is
//! delivered, settled by the hand-over itself (rejected for a secret, given back), or given
//! back by the guard's drop.

use std::sync::Weak;

use uuid::Uuid;

use super::wake_stages::WakeStages;
use crate::store::placement::GiveBack;

/// The jobs of one lease answer, given back unless [`Handover::delivered`] is called.
#[must_use = "dropping a hand-over gives its jobs back"]
pub struct Handover {
    hub: Weak<super::Hub>,
    token_hash: Vec<u8>,
    /// Leased and not yet delivered: (id, epoch).
    jobs: Vec<(Uuid, i64)>,
    /// When the tick that leased them reached each stage (observed once delivered).
    stages: Option<WakeStages>,
}

impl Handover {
    pub(super) fn new(hub: Weak<super::Hub>, token_hash: Vec<u8>, jobs: Vec<(Uuid, i64)>) -> Self {
        Self {
            hub,
            token_hash,
            jobs,
            stages: None,
        }
    }

    /// The same, its tick's stages to observe once it is delivered.
    pub(super) fn with_stages(mut self, stages: WakeStages) -> Self {
        self.stages = Some(stages);
        self
    }

    /// A hand-over of nothing.
    pub fn empty() -> Self {
        Self::new(Weak::new(), Vec::new(), Vec::new())
    }

    /// The answer reached the connection: its jobs are the caller's now.
    pub fn delivered(mut self) {
        if let (Some(stages), Some(hub)) = (self.stages.take(), self.hub.upgrade()) {
            if !self.jobs.is_empty() {
                stages.written(&hub.metrics, &self.jobs);
            }
        }
        self.jobs.clear();
    }

    /// This job left the lease another way (rejected for a secret, given back by the caller):
    /// no longer guarded.
    pub fn forget(&mut self, id: Uuid) {
        self.jobs.retain(|(j, _)| *j != id);
    }

    /// Forget every job (the hand-over gave them all back itself).
    pub fn forget_all(&mut self) {
        self.jobs.clear();
    }

    /// The jobs still guarded.
    pub fn len(&self) -> usize {
        self.jobs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty()
    }
}

impl Default for Handover {
    fn default() -> Self {
        Self::empty()
    }
}

impl Drop for Handover {
    fn drop(&mut self) {
        if self.jobs.is_empty() {
            return;
        }
        let jobs = std::mem::take(&mut self.jobs);
        let Some(hub) = self.hub.upgrade() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let token_hash = std::mem::take(&mut self.token_hash);
        runtime.spawn(async move {
            hub.metrics.caller_gone.inc_by(jobs.len() as u64);
            if let Err(e) = hub.give_back(&jobs, &token_hash, GiveBack::CallerGone).await {
                hub.metrics.background_failure("give_back");
                tracing::warn!(error = %e, "giving back the jobs of a lease whose caller is gone failed; they are re-delivered when their leases lapse");
            }
        });
    }
}
