//! Coalescing: concurrent calls that each want one row written are written by one statement.
//!
//! A [`Combiner`] owns a task that takes whatever calls have queued and runs them as one batch,
//! with at most `in_flight` batches running at once. An idle combiner runs a call at once (it
//! never waits for company), so coalescing adds no latency; under load, calls queue while the
//! batches in flight run, and the next batch takes them all (docs/perf.md: one
//! statement for ten jobs costs a fraction of ten).
//!
//! Invariants: every call gets exactly one answer (a call whose caller gave up before its batch
//! started is dropped unrun); a batch that fails is retried one call at a
//! time, so one call's bad input never fails another's, except when the failure is the
//! database's (unreachable, or past the store's operation deadline): then every call of the
//! batch gets it at once, never after a retry of each. A batch never runs longer than the
//! store's operation deadline (its statement is bounded), so a hung COMMIT holds its
//! in-flight slot for at most that long and cannot wedge the combiner.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot, Semaphore};

use super::{Result, StoreError};

type Reply<O> = oneshot::Sender<Result<O>>;
type BatchFn<I, O> =
    Arc<dyn Fn(Vec<I>) -> Pin<Box<dyn Future<Output = Result<Vec<O>>> + Send>> + Send + Sync>;

/// Hands single calls to a task that runs them in batches.
pub struct Combiner<I, O> {
    tx: mpsc::UnboundedSender<(I, Reply<O>)>,
}

impl<I, O> Combiner<I, O>
where
    I: Clone + Send + 'static,
    O: Send + 'static,
{
    /// Start the task (call from inside a Tokio runtime). `run` writes a batch and answers one
    /// output per input, in input order.
    pub fn start<F, Fut>(max_batch: usize, in_flight: usize, run: F) -> Self
    where
        F: Fn(Vec<I>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Vec<O>>> + Send + 'static,
    {
        let (tx, rx) = mpsc::unbounded_channel();
        let run: BatchFn<I, O> = Arc::new(move |items| Box::pin(run(items)));
        tokio::spawn(drive(rx, max_batch.max(1), in_flight.max(1), run));
        Self { tx }
    }

    /// Write one item, with whatever else is queued.
    ///
    /// # Errors
    /// The batch (or, after a batch failed, this item alone) failed.
    pub async fn submit(&self, item: I) -> Result<O> {
        let (reply, answer) = oneshot::channel();
        self.tx
            .send((item, reply))
            .map_err(|_| StoreError::Unavailable("shutting down".into()))?;
        answer
            .await
            .map_err(|_| StoreError::Unavailable("shutting down".into()))?
    }
}

async fn drive<I, O>(
    mut rx: mpsc::UnboundedReceiver<(I, Reply<O>)>,
    max_batch: usize,
    in_flight: usize,
    run: BatchFn<I, O>,
) where
    I: Clone + Send + 'static,
    O: Send + 'static,
{
    let slots = Arc::new(Semaphore::new(in_flight));
    loop {
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let Some(first) = rx.recv().await else {
            return;
        };
        let mut batch = vec![first];
        while batch.len() < max_batch {
            match rx.try_recv() {
                Ok(next) => batch.push(next),
                Err(_) => break,
            }
        }
        // A caller that gave up while its call queued (its deadline passed, its client left)
        // is no longer there to be answered: its call is not run.
        batch.retain(|(_, reply)| !reply.is_closed());
        if batch.is_empty() {
            continue;
        }
        let run = run.clone();
        tokio::spawn(async move {
            let (items, replies): (Vec<I>, Vec<Reply<O>>) = batch.into_iter().unzip();
            let n = items.len();
            match run(items.clone()).await {
                Ok(outputs) if outputs.len() == n => {
                    for (reply, out) in replies.into_iter().zip(outputs) {
                        let _ = reply.send(Ok(out));
                    }
                }
                Ok(_) => {
                    for reply in replies {
                        let _ = reply.send(Err(StoreError::Invalid(
                            "a batch answered the wrong number of rows".into(),
                        )));
                    }
                }
                Err(e) if n == 1 => {
                    let _ = replies.into_iter().next().map(|r| r.send(Err(e)));
                }
                Err(e) if e.shared().is_some() => {
                    for reply in replies {
                        let _ = reply.send(Err(e
                            .shared()
                            .unwrap_or(StoreError::Unavailable("the database failed".into()))));
                    }
                }
                Err(_) => {
                    // Find whose input failed it: each alone, until the database itself fails.
                    let mut shared: Option<StoreError> = None;
                    for (item, reply) in items.into_iter().zip(replies) {
                        let out = match shared.as_ref().and_then(StoreError::shared) {
                            Some(e) => Err(e),
                            None => run(vec![item]).await.and_then(|mut o| {
                                o.pop().ok_or_else(|| {
                                    StoreError::Invalid("a batch of one answered nothing".into())
                                })
                            }),
                        };
                        if let Err(e) = &out {
                            shared = shared.or_else(|| e.shared());
                        }
                        let _ = reply.send(out);
                    }
                }
            }
            drop(slot);
        });
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use tokio::sync::Semaphore;

    use super::*;

    /// A combiner of one batch in flight whose first call (item 0) waits for `gate`, and
    /// whose other batches fail as an unreachable database does; counts the batches run.
    fn gated(gate: Arc<Semaphore>, batches: Arc<AtomicUsize>) -> Combiner<u32, u32> {
        Combiner::start(16, 1, move |items: Vec<u32>| {
            let (gate, batches) = (gate.clone(), batches.clone());
            async move {
                batches.fetch_add(1, Ordering::SeqCst);
                if items == [0] {
                    let _ = gate.acquire().await;
                    return Ok(vec![0]);
                }
                Err(StoreError::Unavailable("down".into()))
            }
        })
    }

    /// Poll `fut` once: a submit sends its call when first polled.
    async fn poll_once<F: Future + Unpin>(fut: &mut F) {
        let _ = tokio::time::timeout(Duration::ZERO, fut).await;
    }

    #[tokio::test]
    async fn a_shared_failure_answers_the_whole_batch_without_retrying_each_call() {
        let (gate, batches) = (Arc::new(Semaphore::new(0)), Arc::new(AtomicUsize::new(0)));
        let c = gated(gate.clone(), batches.clone());
        let mut first = Box::pin(c.submit(0));
        poll_once(&mut first).await;
        let mut rest: Vec<_> = (1..=3).map(|i| Box::pin(c.submit(i))).collect();
        for r in &mut rest {
            poll_once(r).await;
        }
        gate.add_permits(1);
        assert_eq!(first.await.unwrap(), 0);
        for r in rest {
            assert!(r.await.unwrap_err().is_unavailable());
        }
        assert_eq!(
            batches.load(Ordering::SeqCst),
            2,
            "the failed batch of three ran once, not once more per call"
        );
    }

    #[tokio::test]
    async fn a_call_whose_caller_gave_up_while_it_queued_is_not_run() {
        let (gate, batches) = (Arc::new(Semaphore::new(0)), Arc::new(AtomicUsize::new(0)));
        let c = gated(gate.clone(), batches.clone());
        let mut first = Box::pin(c.submit(0));
        poll_once(&mut first).await;
        let mut abandoned = Box::pin(c.submit(7));
        poll_once(&mut abandoned).await;
        drop(abandoned);
        gate.add_permits(1);
        assert_eq!(first.await.unwrap(), 0);
        // The driver has taken (and dropped) the abandoned call once a later call is answered.
        gate.add_permits(1);
        let mut later = Box::pin(c.submit(0));
        assert_eq!((&mut later).await.unwrap(), 0);
        assert_eq!(
            batches.load(Ordering::SeqCst),
            2,
            "only the first and the later call ran"
        );
    }
}
