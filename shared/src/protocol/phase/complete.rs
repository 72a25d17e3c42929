//! complete: after commit, unlock every item of a batch and carry out its deferred deletes (a tombstone, put at
//! apply, gets its time to live): protocol 1.
//!
//! Protocol 2 has unlocked every item at apply: complete records the items done, every batch at once, and leaves the
//! parent lock and the header's end to release.

use super::{opening, progress, Outcome, Report};
use crate::constants::H_COMPLETED;
use crate::dynamo::lanes::concurrently;
use crate::dynamo::store::{Meter, Store};
use crate::error::TxError;
use crate::model::plan::Part;
use crate::model::request::Op;
use crate::model::value::now_ms;
use crate::protocol::records::{Header, TxState};
use crate::protocol::unlock::{release_item, Release};

pub async fn complete(store: &Store, tx_id: &str, batch: usize) -> Result<Report, TxError> {
    let m = Meter::default();
    let h = crate::protocol::records::read_header(store, &m, tx_id).await?;
    complete_from(store, m, h, batch).await
}

/// [`complete`] from the header `h` its caller has just read.
pub(crate) async fn complete_from(store: &Store, m: Meter, h: Header, batch: usize) -> Result<Report, TxError> {
    let h = match opening(h, &m, TxState::Committed, |h| h.completed, batch) {
        Ok(h) => h,
        Err(report) => return Ok(*report),
    };
    let tx_id = h.id.as_str();
    if h.commits_first() {
        if h.applied < h.batches {
            return Err(TxError::Internal(format!("complete with {} of {} batches applied", h.applied, h.batches)));
        }
        let outcome = progress(store, &m, &h, H_COMPLETED, h.batches).await?.unwrap_or(Outcome::Done);
        return Ok(Report::new(outcome, &m));
    }
    let plan = crate::protocol::stored_request::read_plan(store, &m, tx_id).await?;
    let actions = crate::protocol::stored_request::read_batch(store, &m, tx_id, &plan, batch, Part::Heads).await?;
    let owner = h.owner();
    concurrently(actions, store.cfg.concurrency, |(_, a)| {
        let (m, owner) = (&m, &owner);
        async move {
            let how = match (&a.op, &a.tombstone) {
                (Op::Delete, Some(t)) => Release::Expire(t.ttl_attribute.clone(), t.expires_at(now_ms())),
                (Op::Delete, None) => Release::Delete,
                _ => Release::Keep,
            };
            release_item(store, m, owner, &a, how).await
        }
    })
    .await?;
    let outcome = progress(store, &m, &h, H_COMPLETED, batch + 1).await?.unwrap_or(Outcome::Done);
    Ok(Report::new(outcome, &m))
}
