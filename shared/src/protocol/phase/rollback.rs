//! rollback: with a reason (the state machine's Abort), decide the transaction `ROLLED_BACK` if it is still pending;
//! then, batch by batch, put every saved image back, delete every item the transaction created, and unlock the rest.
//!
//! Protocol 2 rolls back before anything but locks was written: each item is unlocked, and an item that exists only
//! to hold the lock is deleted (or given its tombstone back). No images are read.
//!
//! Only batches whose locking had started are visited: protocol 2 a step of up to `fan_out` shares of batches at a
//! time ([`crate::protocol::shares`]), protocol 1 one batch a step; one more step passes all the others. Every write is
//! conditional on this transaction's lock, so an item restored once is never touched again.

use super::{progress, Outcome, Report};
use crate::constants::H_RESTORED;
use crate::dynamo::lanes::concurrently;
use crate::dynamo::store::{Meter, Store, Usage};
use crate::error::TxError;
use crate::model::plan::Part;
use crate::model::request::Action;
use crate::protocol::parent::release_parent;
use crate::protocol::records::{self, Decision, Header, TxState};
use crate::protocol::shares::{Done, Share};
use crate::protocol::stored_request::Image;
use crate::protocol::unlock::{release_item, Release};

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
    if h.commits_first() && batch < h.lock_started {
        // Protocol 2: nothing but locks was written, so each item is let go of as it is, a step of shares at a time.
        let end = super::run_end(&store.cfg, batch, h.batches).min(h.lock_started);
        let end = match release_shares(store, &m, &h, batch..end).await? {
            Released::Ended(state) => {
                // A worker found the transaction gone from this attempt: whoever moved it on has the header.
                return Ok(Report::new(Outcome::Ended { state }, &m));
            }
            // A share run here for want of a worker stopped for the call's deadline: the batches before the first
            // it left are recorded, and the next call goes on from there.
            Released::Until(stopped) => stopped,
            Released::All => end,
        };
        let restored = if end == h.batches { end } else { end.max(batch + 1) };
        return finish_step(store, &m, &h, restored).await;
    }
    if batch < h.lock_started {
        let plan = crate::protocol::stored_request::read_plan(store, &m, tx_id).await?;
        let actions = crate::protocol::stored_request::read_batch(store, &m, tx_id, &plan, batch, Part::Heads).await?;
        let positions: Vec<usize> = actions.iter().filter(|(_, a)| a.op.writes()).map(|(p, _)| *p).collect();
        let mut images = if h.commits_first() {
            Default::default()
        } else {
            crate::protocol::stored_request::read_images(store, &m, tx_id, h.attempt, &positions).await?
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
    finish_step(store, &m, &h, restored).await
}

/// Records the batches before `restored` rolled back; with the last, the parent goes too.
async fn finish_step(store: &Store, m: &Meter, h: &Header, restored: usize) -> Result<Report, TxError> {
    // The batches whose locking never started hold nothing of this attempt: the step that reaches them passes them all.
    let restored = if restored >= h.lock_started { h.batches } else { restored };
    if restored == h.batches {
        // Everything the attempt held goes with its last batch, the parent too: nothing is held while another
        // attempt is awaited.
        release_parent(store, m, h).await?;
    }
    let outcome = progress(store, m, h, H_RESTORED, restored).await?.unwrap_or(Outcome::Done);
    Ok(Report::new(outcome, m))
}

/// What the shares of a rollback step came to.
enum Released {
    /// Every batch of the step let go of.
    All,
    /// The batches before this one: a share run here stopped there for the call's deadline.
    Until(usize),
    /// A share found the transaction had left this attempt, for this state.
    Ended(TxState),
}

/// Lets go of every item of the batches of `run` that `h`'s attempt holds (protocol 2), in shares side by side.
async fn release_shares(
    store: &Store,
    m: &Meter,
    h: &Header,
    run: std::ops::Range<usize>,
) -> Result<Released, TxError> {
    let plan = crate::protocol::stored_request::read_plan(store, m, &h.id).await?;
    let shares = |r: std::ops::Range<usize>| Share::Rollback {
        transaction_id: h.id.clone(),
        attempt: h.attempt,
        from: r.start,
        to: r.end,
    };
    let plan = &plan;
    let done = crate::protocol::shares::in_shares(store, run, shares, |r| async move {
        release_run(store, m, h, plan, r).await?;
        Ok(None::<Usage>)
    })
    .await?;
    let ended = done.ended();
    for d in &done.results {
        if let Done::Done(Some(u)) = d {
            m.add(u);
        }
    }
    Ok(match (ended, done.stopped_at) {
        (Some(state), _) => Released::Ended(state),
        (None, Some(stopped)) => Released::Until(stopped),
        (None, None) => Released::All,
    })
}

/// Lets go of every item of the batches of `run`, all at once.
async fn release_run(
    store: &Store,
    m: &Meter,
    h: &Header,
    plan: &crate::model::plan::Plan,
    run: std::ops::Range<usize>,
) -> Result<(), TxError> {
    let actions = crate::protocol::stored_request::read_batches(store, m, &h.id, plan, run, Part::Heads).await?;
    let owner = h.owner();
    concurrently(actions, store.cfg.concurrency, |(_, _, a)| {
        let owner = &owner;
        async move { release_item(store, m, owner, &a, Release::Keep).await }
    })
    .await?;
    Ok(())
}

#[cfg(feature = "internals")]
/// A worker's share of a rollback step (`share`): every item of the share's batches let go of. What the
/// worker's writes used.
pub(crate) async fn share(store: &Store, share: Share) -> Result<Done<Option<Usage>>, TxError> {
    let Share::Rollback { transaction_id, attempt, from, to } = share else {
        return Err(TxError::Internal("a rollback share is a share of rollback".into()));
    };
    let m = Meter::default();
    let h = records::read_header(store, &m, &transaction_id).await?;
    if h.state != TxState::RolledBack || !h.commits_first() || h.finished() || h.attempt != attempt {
        return Ok(Done::Ended(h.state));
    }
    let plan = crate::protocol::stored_request::read_plan(store, &m, &h.id).await?;
    release_run(store, &m, &h, &plan, from..to).await?;
    Ok(Done::Done(Some(m.usage())))
}
