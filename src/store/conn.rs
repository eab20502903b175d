//! A pooled connection checked out for one store operation, and the deadlines every operation
//! runs under.
//!
//! Invariant: a connection goes back to the pool only when the operation using it said it is
//! done ([`Conn::release`]): every statement it sent has answered. A [`Conn`] dropped any other
//! way (the operation's deadline passed, the caller gave up, an error left a transaction
//! half-way) may still have a statement running, such as a COMMIT waiting for a synchronous
//! standby that is gone; the next caller would queue behind it. So it is taken out of the pool
//! (the pool opens a fresh one in its place), its running statement is cancelled, and it is
//! closed. A COMMIT cancelled while it waits for a standby has committed locally: a call that
//! timed out may have written (docs/contract-notes.md, "Deadlines").

use std::future::Future;
use std::ops::{Deref, DerefMut};
use std::time::Duration;

use deadpool_postgres::{Object, Timeouts};
use tokio_postgres::NoTls;

use super::{Result, StoreError};

/// How long a cancel request of a discarded connection may take before it is given up (the
/// connection is closed either way).
const CANCEL_PATIENCE: Duration = Duration::from_secs(5);

/// The deadlines of a [`super::Store`]'s operations.
#[derive(Debug, Clone, Copy)]
pub struct Deadlines {
    /// One operation: checkout, statements and commit.
    pub operation: Duration,
    /// The wait for a free pooled connection (and for a new one to open).
    pub checkout: Duration,
}

impl Default for Deadlines {
    fn default() -> Self {
        Self {
            operation: Duration::from_secs(30),
            checkout: Duration::from_secs(5),
        }
    }
}

impl Deadlines {
    /// What the pool is asked for on checkout.
    pub(super) fn pool_timeouts(&self) -> Timeouts {
        Timeouts {
            wait: Some(self.checkout),
            create: Some(self.checkout.min(Duration::from_secs(3))),
            recycle: Some(self.checkout.min(Duration::from_secs(3))),
        }
    }

    /// Run one operation under [`Deadlines::operation`]. Past it the operation is dropped
    /// (its connection discarded, see [`Conn`]) and the answer is [`StoreError::TimedOut`].
    ///
    /// # Errors
    /// The operation failed or did not finish in time.
    pub async fn bound<T>(
        &self,
        what: &'static str,
        op: impl Future<Output = Result<T>>,
    ) -> Result<T> {
        match tokio::time::timeout(self.operation, op).await {
            Ok(out) => out,
            Err(_) => {
                crate::telemetry::metrics::db_error(Some("deadline"));
                Err(StoreError::TimedOut(format!(
                    "{what} did not finish within {} ms",
                    self.operation.as_millis()
                )))
            }
        }
    }
}

/// A checked-out connection; see the module doc.
pub struct Conn(Option<Object>);

impl Conn {
    pub(super) fn new(object: Object) -> Self {
        Self(Some(object))
    }

    /// Every statement sent on it has answered: back to the pool.
    pub fn release(mut self) {
        drop(self.0.take());
    }
}

impl Deref for Conn {
    type Target = Object;

    fn deref(&self) -> &Object {
        self.0
            .as_ref()
            .expect("a Conn holds its connection until dropped")
    }
}

impl DerefMut for Conn {
    fn deref_mut(&mut self) -> &mut Object {
        self.0
            .as_mut()
            .expect("a Conn holds its connection until dropped")
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        let Some(object) = self.0.take() else {
            return;
        };
        // Out of the pool at once, so no other caller can check it out.
        let client = Object::take(object);
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let cancel = client.cancel_token();
        runtime.spawn(async move {
            if client.is_closed() {
                return;
            }
            // Whatever still runs on it stops, so the server does not keep a backend waiting
            // (a slot of max_connections) after the socket closes.
            let _ = tokio::time::timeout(CANCEL_PATIENCE, cancel.cancel_query(NoTls)).await;
            drop(client);
        });
    }
}
