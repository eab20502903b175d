//! Reports of finished jobs carried by the next lease call (contract v1.2, `done`).
//!
//! Invariant: a report is never delayed. The lease loop opens the mailbox only while it waits
//! for a slot (every slot busy), and it leases the moment a report arrives, so a report put in
//! the mailbox goes out at once in that lease call. While the mailbox is closed (the loop is
//! long-polling, draining, or gone) [`Mailbox::offer`] refuses and the job reports alone, as
//! before. A report the lease call did not carry to an answer (the call failed, the loop was
//! stopped) comes back as `None`, and the job sends it alone, retried as always.

use std::sync::Mutex;

use tokio::sync::{oneshot, Notify};

use crate::wire::{DoneReport, DoneStatus};

/// What became of an offered report: its entry of the lease answer, or `None` when no lease
/// answer carried it (then the job reports alone).
pub type Receipt = oneshot::Receiver<DoneStatus>;

type Letter = (DoneReport, oneshot::Sender<DoneStatus>);

#[derive(Default)]
pub struct Mailbox {
    inner: Mutex<Inner>,
    arrived: Notify,
}

#[derive(Default)]
struct Inner {
    open: bool,
    letters: Vec<Letter>,
}

impl Mailbox {
    /// Hand `report` to the lease loop, if it is waiting to lease; `None`: report alone.
    pub fn offer(&self, report: DoneReport) -> Option<Receipt> {
        let mut inner = self.inner.lock().expect("mailbox lock");
        // The contract's bound on `done`; past it (never with capacity <= 100) report alone.
        if !inner.open || inner.letters.len() >= 100 {
            return None;
        }
        let (tx, rx) = oneshot::channel();
        inner.letters.push((report, tx));
        drop(inner);
        self.arrived.notify_one();
        Some(rx)
    }

    /// Accept reports until [`Self::close`]; `arrived` resolves once one is there.
    pub fn open(&self) {
        self.inner.lock().expect("mailbox lock").open = true;
    }

    /// Resolves once a report was offered since the mailbox opened (or a stale wake: the caller
    /// then finds none and waits again).
    pub async fn arrived(&self) {
        self.arrived.notified().await;
    }

    /// Stop accepting, and take what was offered.
    pub fn close(&self) -> Vec<(DoneReport, oneshot::Sender<DoneStatus>)> {
        let mut inner = self.inner.lock().expect("mailbox lock");
        inner.open = false;
        std::mem::take(&mut inner.letters)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report() -> DoneReport {
        DoneReport {
            id: uuid::Uuid::nil(),
            epoch: 1,
            result: Some(serde_json::Value::Null),
            fail: None,
        }
    }

    #[test]
    fn a_closed_mailbox_refuses_and_an_open_one_hands_over_what_it_took() {
        let m = Mailbox::default();
        assert!(m.offer(report()).is_none());
        m.open();
        let receipt = m.offer(report()).expect("open");
        let letters = m.close();
        assert_eq!(letters.len(), 1);
        assert!(m.offer(report()).is_none());
        // A letter dropped unanswered tells the job to report alone.
        drop(letters);
        assert!(receipt.blocking_recv().is_err());
    }
}
