//! The store's hooks for dynamo-saga's own tests and benchmark: an injected crash ([`Faults`]) and a bill by
//! DynamoDB's rules. Public only with the `test-hooks` feature.

#[cfg(feature = "test-hooks")]
use std::sync::Arc;

#[cfg(feature = "test-hooks")]
use super::Faults;
use super::{faults, Store};
use crate::error::TxError;
#[cfg(feature = "test-hooks")]
use crate::model::billing::Bill;

impl Store {
    /// A copy of this store that stops working (every call fails with [`TxError::InjectedFault`]) once it has sent
    /// `writes` write requests: the crash tests' stand-in for a Lambda that times out or dies between two writes.
    #[cfg(feature = "test-hooks")]
    pub fn crash_after(&self, writes: u64) -> Store {
        Store { faults: Some(Arc::new(Faults::new(writes, None))), ..self.clone() }
    }

    /// [`Store::crash_after`], and the first lock write past the budget is not lost but held: sent once the header
    /// of transaction `tx_id` shows it finished (polled for up to two minutes), by a task that outlives the call. The
    /// stand-in for a Lambda frozen or timed out with a write in flight, which lands after someone else ended its
    /// transaction.
    #[cfg(feature = "test-hooks")]
    pub fn crash_after_late(&self, writes: u64, tx_id: &str) -> Store {
        Store { faults: Some(Arc::new(Faults::new(writes, Some(tx_id)))), ..self.clone() }
    }

    /// A copy of this store that sends one write at a time (`Config::concurrency` and `Config::fan_out` 1) and
    /// awaits `pause` before each, given the writes sent so far: the writer stopped between every two of its writes
    /// for as long as the test reads.
    #[cfg(feature = "test-hooks")]
    pub fn pausing(&self, pause: super::Pause) -> Store {
        let cfg = crate::config::Config { concurrency: 1, fan_out: 1, ..(*self.cfg).clone() };
        Store {
            faults: Some(Arc::new(Faults::pausing(pause))),
            cfg: Arc::new(cfg),
            pace: crate::dynamo::pace::Pace::new(1),
            ..self.clone()
        }
    }

    /// When this write sent once is the one [`Store::crash_after_late`] holds: the crash it ends with, while a task of
    /// its own sends the write (`send` builds it) once the header of its transaction shows it finished.
    pub(super) fn hold_late<F, Fut>(&self, send: F) -> Option<TxError>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future + Send + 'static,
    {
        let f = self.faults.as_ref()?;
        let tx_id = f.held_late()?;
        faults::send_after_end(self.client.clone(), self.cfg.tx_table.clone(), tx_id, send());
        Some(TxError::InjectedFault(f.writes_sent()))
    }

    /// Write requests this store has sent (or refused, once crashed); `None` without [`Store::crash_after`].
    #[cfg(feature = "test-hooks")]
    pub fn writes_sent(&self) -> Option<u64> {
        self.faults.as_ref().map(|f| f.writes_sent())
    }

    /// Whether this store has sent every write its injected crash allows: the next write, or the end of the call,
    /// is where it dies.
    #[cfg(feature = "test-hooks")]
    pub fn fault_spent(&self) -> bool {
        self.faults.as_ref().is_some_and(|f| f.spent())
    }

    /// Whether this store's injected crash has happened.
    #[cfg(feature = "test-hooks")]
    pub fn crashed(&self) -> bool {
        self.faults.as_ref().is_some_and(|f| f.crashed())
    }

    /// A copy of this store that bills every call by DynamoDB's rules (`billing`): the benchmark's capacity
    /// pass. Each write reads the items it touches before and after it (outside the meter), so calls take longer.
    #[cfg(feature = "test-hooks")]
    pub fn with_billing(&self) -> Store {
        Store { billing: Some(Arc::default()), ..self.clone() }
    }

    /// What this store has been billed so far; `None` without [`Store::with_billing`].
    #[cfg(feature = "test-hooks")]
    pub fn bill(&self) -> Option<Bill> {
        self.billing.as_ref().map(|b| *b.lock().expect("bill lock"))
    }
}
