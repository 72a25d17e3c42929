//! rollback: with a reason (the state machine's Abort), decide the transaction `ROLLED_BACK` if it is still pending;
//! then, batch by batch, put every saved image back, delete every item the transaction created, and unlock the rest.
//!
//! Protocol 2 rolls back before anything but locks was written: each item is unlocked, and an item that exists only
//! to hold the lock is deleted (or given its tombstone back). No images are read.
//!
//! Only batches whose locking had started are visited, one step each; one more step passes all the others. Every write
//! is conditional on this transaction's lock, so an item restored once is never touched again.

use super::parent::release_parent;
use super::{concurrently, progress, release_item, Outcome, Release, Report};
use crate::constants::H_RESTORED;
use crate::error::TxError;
use crate::plan::Part;
use crate::records::{self, Decision, TxState};
use crate::request::Action;
use crate::store::{Meter, Store};
use crate::stored::Image;

/// Rolls back batch `batch`. `why` decides the rollback of a pending transaction, and is recorded. Without it, a
/// pending transaction is left alone: the rollback it was called for has ended, and the transaction has started its
/// next attempt since (a late or repeated call of this phase must not end that attempt).
pub async fn rollback(store: &Store, tx_id: &str, batch: usize, why: Option<&Decision>) -> Result<Report, TxError> {
    let m = Meter::default();
    let mut h = records::read_header(store, &m, tx_id).await?;
    if h.state == TxState::Pending {
        let Some(d) = why else { return Ok(Report::new(Outcome::Ended { state: h.state }, &m)) };
        if records::decide_rollback(store, &m, tx_id, Some(h.attempt), d).await? != TxState::RolledBack {
            h = records::read_header(store, &m, tx_id).await?;
            return Ok(Report::new(Outcome::Ended { state: h.state }, &m));
        }
        h = records::read_header(store, &m, tx_id).await?;
    }
    if h.state != TxState::RolledBack || h.finished() {
        return Ok(Report::new(Outcome::Ended { state: h.state }, &m));
    }
    if h.restored > batch {
        return Ok(Report::new(Outcome::Done, &m));
    }
    if batch < h.lock_started {
        let plan = crate::stored::read_plan(store, &m, tx_id).await?;
        let actions = crate::stored::read_batch(store, &m, tx_id, &plan, batch, Part::Heads).await?;
        let positions: Vec<usize> = actions.iter().filter(|(_, a)| a.op.writes()).map(|(p, _)| *p).collect();
        let mut images = if h.commits_first() {
            Default::default()
        } else {
            crate::stored::read_images(store, &m, tx_id, h.attempt, &positions).await?
        };
        let work: Vec<(Action, Release)> = actions
            .into_iter()
            .map(|(pos, a)| {
                let how = match images.remove(&pos) {
                    Some(Image::Existed(item)) => Release::Restore(item),
                    Some(Image::Transient) => Release::Delete,
                    None => Release::Keep,
                };
                (a, how)
            })
            .collect();
        let owner = h.owner();
        concurrently(work, store.cfg.concurrency, |(a, how)| {
            let (m, owner) = (&m, &owner);
            async move { release_item(store, m, owner, &a, how).await }
        })
        .await?;
    }
    // The batches whose locking never started hold nothing of this attempt: the step that meets the first of them
    // passes them all.
    let restored = if batch < h.lock_started { batch + 1 } else { h.batches };
    if restored == h.batches {
        // Everything the attempt held goes with its last batch, the parent too: nothing is held while another
        // attempt is awaited.
        release_parent(store, &m, &h).await?;
    }
    let outcome = progress(store, &m, &h, H_RESTORED, restored).await?.unwrap_or(Outcome::Done);
    Ok(Report::new(outcome, &m))
}
