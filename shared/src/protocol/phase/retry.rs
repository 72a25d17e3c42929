//! retry: after an attempt was rolled back for a reason that was not the request's own (an older transaction needed
//! one of its items, a waiter found it stalled, its parent lock was taken over) and every lock of that attempt is
//! released, start the next attempt of the same transaction: the same id (so the same age under wound-wait), the
//! same stored request, the same `ClientRequestToken`. The new attempt first waits for the transaction that rolled
//! the last one back to end (see [`super::lock`]).
//!
//! No attempt starts after the transaction's deadline: the retry is then given up, and the reason it carries (a
//! `TransactionConflict` on the contended action, or the parent's reason) becomes the transaction's.
//!
//! Only a transaction's own driver runs this step (its execution, or the coordinator that runs it); a coordinator
//! helping another transaction to the end of its attempt stops before it.

use super::{Outcome, Report};
use crate::dynamo::store::{Meter, Store};
use crate::error::TxError;
use crate::model::value::now_ms;
use crate::protocol::records::{self, TxState};

pub async fn retry(store: &Store, tx_id: &str) -> Result<Report, TxError> {
    let m = Meter::default();
    let h = records::read_header(store, &m, tx_id).await?;
    if h.state != TxState::RolledBack || !h.retry_pending || h.finished() {
        return Ok(Report::new(Outcome::Ended { state: h.state }, &m));
    }
    if h.restored < h.batches {
        return Err(TxError::Internal(format!("retry of transaction {tx_id} before its attempt was rolled back")));
    }
    if now_ms() >= h.deadline {
        records::give_up(store, &m, &h, "the deadline passed before another attempt could start").await?;
        return Ok(Report::new(Outcome::Canceled, &m));
    }
    // The rollback let go of the parent; the next attempt queues for it again, with a new ticket.
    if records::restart(store, &m, &h).await? {
        tracing::info!(tx_id, attempt = h.attempt + 2, "starting another attempt");
    }
    Ok(Report::new(Outcome::Done, &m))
}
