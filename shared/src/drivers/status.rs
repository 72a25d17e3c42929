//! What a transaction is doing, read from its header without changing anything: the answer of
//! `GET /transactions/{id}` and of `dynamo-saga status`.

use serde::{Deserialize, Serialize};

use crate::dynamo::store::{Meter, Store, Usage};
use crate::error::{Cancellation, TxError};
use crate::protocol::phase::resume::{next_step, Step};
use crate::protocol::records::{self, Attempt, Header, Refusal, TxState};

/// Batches done by each phase, out of [`Status::batches`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Progress {
    pub locked: usize,
    pub saved: usize,
    pub applied: usize,
    pub completed: usize,
    pub restored: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Status {
    pub transaction_id: String,
    /// `PENDING`, `COMMITTED` or `ROLLED_BACK`.
    pub state: TxState,
    /// Whether every phase has run (locks released, records left to TTL).
    pub finished: bool,
    /// The phase that runs next (`Lock`, `Save`, `Apply`, `Commit`, `Complete`, `Rollback`, `Retry`, `Release`,
    /// `Finished`) and its batch.
    pub next: Step,
    /// The attempt under way (or the last one), counted from 1. An attempt rolled back by another transaction's need
    /// (an older one needed one of its items, or it was found stalled) is followed by another.
    pub attempt: u32,
    /// Milliseconds the attempt under way has waited for other transactions' locks.
    pub waited_ms: u64,
    /// The attempts before this one: when each ran, how long it waited, which transaction rolled it back, and why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attempts: Vec<Attempt>,
    pub actions: usize,
    /// Carried out in one `TransactWriteItems` call with its header, taking no locks (0 batches): a request small
    /// enough, with nothing beyond native. Its usage counts that call but not the capacity it consumed, which the
    /// caller's result and the metrics line carry.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub direct: bool,
    pub batches: usize,
    /// The protocol its batches run: 2 commits before it applies each item with its unlock; 1 (transactions begun
    /// before protocol 2) applies before it commits. Absent when it was carried out in one call.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub protocol: Option<u32>,
    pub progress: Progress,
    /// For a rolled-back transaction: DynamoDB's shape, one `CancellationReasons` entry per action.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cancellation: Option<Cancellation>,
    /// DynamoDB calls and capacity so far, as DynamoDB reported them.
    pub usage: Usage,
    /// Milliseconds since the Unix epoch.
    pub created_at_ms: u64,
    /// When the header last moved, to within 10 s (`constants::UPDATED_AT_EVERY_MS`).
    pub updated_at_ms: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub finished_at_ms: Option<u64>,
    pub deadline_ms: u64,
    /// From creation to the end, or to now while it runs.
    pub elapsed_ms: u64,
    /// The Step Functions execution that runs it, when one does.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub execution_arn: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_request_token: Option<String>,
    /// The committed write DynamoDB refused to apply (`ApplyRejected`), while it stays unapplied: mend what it
    /// refuses, then resume the transaction (docs/operations.md).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refused: Option<Refusal>,
    /// A finished transaction that may have had writes in flight when it ended is visited again: when that visit is
    /// due, or when it was made and what it cleared.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revisit: Option<RevisitStatus>,
}

/// The visit for writes that land after a transaction's end ([`Status::revisit`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct RevisitStatus {
    /// When it is due (epoch milliseconds), until it is made.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub due_at_ms: Option<u64>,
    /// When it was made.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revisited_at_ms: Option<u64>,
    /// Items it cleared: locks or items of the transaction that landed after its end.
    pub cleared: u64,
}

impl From<&Header> for Status {
    fn from(h: &Header) -> Self {
        let end = h.finished_at.unwrap_or_else(crate::model::value::now_ms);
        Status {
            transaction_id: h.id.clone(),
            state: h.state,
            finished: h.finished(),
            next: next_step(h),
            attempt: h.attempt + 1,
            waited_ms: h.waited_ms,
            attempts: h.attempts.clone(),
            actions: h.actions,
            direct: h.direct(),
            batches: h.batches,
            protocol: (!h.direct()).then_some(h.protocol),
            progress: Progress {
                locked: h.locked,
                saved: h.saved,
                applied: h.applied,
                completed: h.completed,
                restored: h.restored,
            },
            cancellation: h.cancellation(),
            usage: h.usage,
            created_at_ms: h.created_at,
            updated_at_ms: h.updated_at,
            finished_at_ms: h.finished_at,
            deadline_ms: h.deadline,
            elapsed_ms: end.saturating_sub(h.created_at),
            execution_arn: h.execution_arn.clone(),
            client_request_token: h.client_request_token.clone(),
            refused: h
                .refused
                .clone()
                .filter(|r| h.state == TxState::Committed && !h.finished() && h.applied <= r.batch),
            revisit: (h.revisit_at.is_some() || h.revisited_at.is_some()).then_some(RevisitStatus {
                due_at_ms: h.revisit_at,
                revisited_at_ms: h.revisited_at,
                cleared: h.revisit_cleared,
            }),
        }
    }
}

/// `ValidationError` unless `tx_id` has the shape of a transaction id (a ULID: 26 letters and digits).
pub fn check_id(tx_id: &str) -> Result<(), TxError> {
    if tx_id.len() != 26 || !tx_id.chars().all(|c| c.is_ascii_alphanumeric()) {
        return Err(TxError::invalid(None, format!("{tx_id:?} is not a transaction id (26 letters and digits)")));
    }
    Ok(())
}

/// The status of transaction `tx_id`; `TransactionNotFound` when there is none (or its records have expired).
pub async fn status(store: &Store, tx_id: &str) -> Result<Status, TxError> {
    check_id(tx_id)?;
    let h = records::read_header(store, &Meter::default(), tx_id).await?;
    Ok(Status::from(&h))
}
