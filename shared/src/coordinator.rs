//! The in-process driver: runs a whole transaction through the same phase functions the Lambdas run, for Rust
//! services that do not use Step Functions (the role the Java dynamodb-transactions library's TransactionManager
//! plays). It is also how the sweeper and tests finish a transaction somebody else started.
//!
//! Contention between transactions is resolved by age (wound-wait: `drive`): the older transaction wins, a
//! younger holder is rolled back and tries again as the same transaction, and a wait longer than `LockWaitSeconds`
//! or past the deadline cancels with `TransactionConflict` naming the holder.

use std::time::Instant;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::drive::Driver;
use crate::error::TxError;
use crate::phase::{self, resume::Step};
use crate::records::{self, Decision, Header, TxState};
use crate::store::{Meter, Store, Usage};

/// The result of a committed transaction.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Committed {
    pub transaction_id: String,
    pub state: TxState,
    pub actions: usize,
    pub batches: usize,
    /// DynamoDB calls and capacity, summed over every phase run (recorded on the header).
    pub usage: Usage,
    pub elapsed_ms: u64,
}

/// Runs transactions in-process, each from its request (or its id) to its end.
#[derive(Debug, Clone)]
pub struct Coordinator {
    driver: Driver,
}

impl Coordinator {
    pub fn new(store: Store) -> Self {
        Self { driver: Driver::new(store) }
    }

    pub fn store(&self) -> &Store {
        self.driver.store()
    }

    /// Runs a whole transaction: submit it (a request one `TransactWriteItems` call can carry is carried out in that
    /// call, see `phase::direct`), or begin it and drive it to its end, starting another attempt whenever one is rolled
    /// back by another transaction's need. Errors with `TransactionCanceled` (and the reasons) when it rolled back:
    /// by its own conditions, a wait past `LockWaitSeconds`, or the deadline.
    pub async fn run(&self, body: &Value) -> Result<Committed, TxError> {
        let started = Instant::now();
        let begun = Box::pin(phase::begin::submit(self.driver.store(), body, None, None)).await?;
        if begun.created && begun.state == TxState::Committed {
            // Carried out in one call: the result carries the capacity that call consumed, which its header cannot.
            return Ok(Committed {
                transaction_id: begun.transaction_id,
                state: begun.state,
                actions: begun.actions,
                batches: begun.batches,
                usage: begun.usage,
                elapsed_ms: started.elapsed().as_millis() as u64,
            });
        }
        self.drive(&begun.transaction_id).await
    }

    /// Drives an existing transaction from wherever it stopped to its end, as its driver: an attempt rolled back by
    /// another transaction's need is followed by another.
    pub async fn drive(&self, tx_id: &str) -> Result<Committed, TxError> {
        let started = Instant::now();
        let h = Box::pin(self.driver.drive_until(tx_id, true, |_, _| false)).await?;
        finished(&h, started)
    }

    /// Rolls a transaction back unless it has committed (no other attempt follows), and drives it to its end.
    pub async fn cancel(&self, tx_id: &str, why: &str) -> Result<(), TxError> {
        let m = Meter::default();
        let h = records::read_header(self.driver.store(), &m, tx_id).await?;
        if h.state == TxState::Pending {
            records::decide_rollback(self.driver.store(), &m, tx_id, Some(h.attempt), &Decision::aborted(why)).await?;
        }
        let h = records::read_header(self.driver.store(), &m, tx_id).await?;
        if h.retry_pending {
            records::give_up(self.driver.store(), &m, &h, why).await?;
        }
        Box::pin(self.driver.drive_until(tx_id, false, |_, _| false)).await.map(|_| ())
    }

    /// Drives a pending transaction until every item is locked, meeting other transactions' locks as `drive`
    /// does (and starting another attempt when one is rolled back by another's need); it then holds every lock and
    /// has changed nothing. Errors with `TransactionCanceled` when it was rolled back instead (by its own condition,
    /// a wait past its limits, or the deadline), after finishing that rollback.
    ///
    /// `drive`: Coordinator::drive
    pub async fn drive_locks(&self, tx_id: &str) -> Result<Header, TxError> {
        let started = Instant::now();
        let h = Box::pin(
            self.driver
                .drive_until(tx_id, true, |h, step| h.state == TxState::Pending && !matches!(step, Step::Lock(_))),
        )
        .await?;
        match (h.state, finished(&h, started)) {
            (TxState::Pending, _) => Ok(h),
            (_, Err(e)) => Err(e),
            (_, Ok(_)) => {
                Err(TxError::Internal(format!("transaction {tx_id} committed while its locks were being taken")))
            }
        }
    }
}

fn finished(h: &Header, started: Instant) -> Result<Committed, TxError> {
    match h.state {
        TxState::Committed => Ok(Committed {
            transaction_id: h.id.clone(),
            state: h.state,
            actions: h.actions,
            batches: h.batches,
            usage: h.usage,
            elapsed_ms: started.elapsed().as_millis() as u64,
        }),
        _ => Err(h.rollback_error().unwrap_or_else(|| Decision::default().error(&h.id, h.actions))),
    }
}
