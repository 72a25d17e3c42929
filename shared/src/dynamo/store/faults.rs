//! Injected crashes, for dynamo-saga's own crash tests: a store that behaves as if its process died after a number of
//! writes, and optionally one whose first write past that number lands late, after its transaction ended.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodb::Client;

use crate::constants::{H_FINISHED_AT, SK_HEADER, TX_PK, TX_SK};
use crate::error::TxError;

/// A store's injected crash: after `budget` writes, every call fails with [`TxError::InjectedFault`]. Only the
/// `test-hooks` feature makes one; without it every store has none.
#[derive(Debug)]
#[cfg_attr(not(feature = "test-hooks"), allow(dead_code))]
pub(crate) struct Faults {
    budget: u64,
    used: AtomicU64,
    dead: AtomicBool,
    /// With a late write: the transaction whose end the first write past the budget waits for, and whether that
    /// write was taken.
    late: Option<(String, AtomicBool)>,
    /// Awaited before each write with the number of writes sent so far: a test reads there, the writer stopped.
    pause: Option<Pause>,
}

/// What [`Faults`] awaits before each write: given the writes sent so far, a future that ends when the writer may go
/// on.
#[derive(Clone)]
#[cfg_attr(not(feature = "test-hooks"), allow(dead_code))]
pub struct Pause(pub std::sync::Arc<dyn Fn(u64) -> futures::future::BoxFuture<'static, ()> + Send + Sync>);

impl std::fmt::Debug for Pause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Pause")
    }
}

impl Faults {
    /// A crash after `budget` writes; with `late`, the first lock write past it is held until transaction `late` ends.
    #[cfg(feature = "test-hooks")]
    pub(crate) fn new(budget: u64, late: Option<&str>) -> Self {
        Faults {
            budget,
            used: AtomicU64::new(0),
            dead: AtomicBool::new(false),
            late: late.map(|tx_id| (tx_id.to_string(), AtomicBool::new(false))),
            pause: None,
        }
    }

    /// No crash: `pause` is awaited before each write.
    #[cfg(feature = "test-hooks")]
    pub(crate) fn pausing(pause: Pause) -> Self {
        Faults { pause: Some(pause), ..Faults::new(u64::MAX, None) }
    }

    /// What to await before the next write, with the writes sent so far, when this pauses the writer.
    pub(crate) fn pause(&self) -> Option<futures::future::BoxFuture<'static, ()>> {
        let pause = self.pause.as_ref()?;
        Some((pause.0)(self.used.load(Ordering::SeqCst)))
    }

    /// The transaction whose end a write sent once now waits for, when this write is the one held late.
    pub(crate) fn held_late(&self) -> Option<String> {
        let (tx_id, taken) = self.late.as_ref()?;
        if self.used.load(Ordering::SeqCst) < self.budget || taken.swap(true, Ordering::SeqCst) {
            return None;
        }
        self.dead.store(true, Ordering::SeqCst);
        tracing::warn!(tx_id, "injected fault: a lock write is held until the transaction ends");
        Some(tx_id.clone())
    }

    /// Write requests sent (or refused, once crashed).
    pub(crate) fn writes_sent(&self) -> u64 {
        self.used.load(Ordering::SeqCst).min(self.budget)
    }

    /// Whether every write the crash allows has been sent: the next write, or the end of the call, is where it dies.
    #[cfg(feature = "test-hooks")]
    pub(crate) fn spent(&self) -> bool {
        self.used.load(Ordering::SeqCst) >= self.budget
    }

    /// Whether the crash has happened.
    pub(crate) fn crashed(&self) -> bool {
        self.dead.load(Ordering::SeqCst)
    }

    /// Fails once the crash has happened.
    pub(crate) fn check_alive(&self) -> Result<(), TxError> {
        if self.crashed() {
            return Err(TxError::InjectedFault(self.budget));
        }
        Ok(())
    }

    /// Counts a write about to be sent; the one past the budget is the crash.
    pub(crate) fn before_write(&self) -> Result<(), TxError> {
        self.check_alive()?;
        if self.used.fetch_add(1, Ordering::SeqCst) >= self.budget {
            self.dead.store(true, Ordering::SeqCst);
            return Err(TxError::InjectedFault(self.budget));
        }
        Ok(())
    }
}

/// Sends `send` once the header of `tx_id` in `table` shows it finished (polled for up to two minutes), in a task of
/// its own that outlives the call.
pub(crate) fn send_after_end<F>(client: Client, table: String, tx_id: String, send: F)
where
    F: std::future::Future + Send + 'static,
{
    tokio::spawn(async move {
        for _ in 0..1_200 {
            let header = client
                .get_item()
                .table_name(&table)
                .key(TX_PK, AttributeValue::S(tx_id.clone()))
                .key(TX_SK, AttributeValue::S(SK_HEADER.into()))
                .consistent_read(true)
                .send()
                .await;
            if header.ok().and_then(|h| h.item).is_some_and(|h| h.contains_key(H_FINISHED_AT)) {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        send.await;
    });
}
