//! Shares: how one lock, apply or rollback step of a large transaction is spread over several processes.
//!
//! A step takes up to [`Config::fan_out`](crate::config::Config::fan_out) shares of
//! [`Config::share_batches`](crate::config::Config::share_batches) batches each. The process that runs the step (the
//! phase's Lambda function, the in-process coordinator) does everything that touches the header as before, once for the
//! whole step: lock claims the pass and records the batches locked, apply and rollback record their progress. Only the
//! items' writes are shared: the first share in this process, each other one by the store's workers when it has them
//! ([`Store::with_workers`]: another invocation of the same function, version included), otherwise in this process too.
//! Every share writes under the step's own pass, lock ids and conditions, so a share is exactly the writes the step
//! would have sent itself, from another process. A share that fails fails the step, which its driver runs again (the
//! state machine's retry), as when the step's own process dies: its writes are then of unknown outcome, which lock
//! already handles (the next pass takes the items over, the transaction is visited after its end).
//!
//! A share no worker could be started for (the function's concurrency used up) runs in the step's own process, a few
//! batches at a time while the store's deadline allows ([`Store::deadline`]): the step then records the batches
//! before the first one left undone, and its next call goes on from there, rather than running past the Lambda's
//! deadline and being killed with nothing recorded.
//!
//! A share crosses to a worker as JSON (`{"Share": {...}}`), and its result comes back as JSON.

use futures::future::join_all;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::dynamo::store::Store;
use crate::error::TxError;
use crate::protocol::records::TxState;

/// One share of a step: which transaction, which attempt, which batches, and for lock, which pass.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "Phase", rename_all = "PascalCase")]
pub enum Share {
    #[serde(rename_all = "PascalCase")]
    Lock {
        transaction_id: String,
        attempt: u32,
        /// The pass the step claimed, and the first batch it did not take over from an earlier pass
        /// (see `phase::lock`).
        pass: u64,
        earlier: usize,
        from: usize,
        to: usize,
    },
    #[serde(rename_all = "PascalCase")]
    Apply { transaction_id: String, attempt: u32, from: usize, to: usize },
    #[serde(rename_all = "PascalCase")]
    Rollback { transaction_id: String, attempt: u32, from: usize, to: usize },
}

impl Share {
    fn transaction_id(&self) -> &str {
        match self {
            Share::Lock { transaction_id, .. }
            | Share::Apply { transaction_id, .. }
            | Share::Rollback { transaction_id, .. } => transaction_id,
        }
    }

    /// The batches the share holds.
    fn batches(&self) -> std::ops::Range<usize> {
        match self {
            Share::Lock { from, to, .. } | Share::Apply { from, to, .. } | Share::Rollback { from, to, .. } => {
                *from..*to
            }
        }
    }

    /// The same share of the step, holding the batches of `part` only.
    fn of(&self, part: std::ops::Range<usize>) -> Share {
        let mut share = self.clone();
        match &mut share {
            Share::Lock { from, to, .. } | Share::Apply { from, to, .. } | Share::Rollback { from, to, .. } => {
                (*from, *to) = (part.start, part.end);
            }
        }
        share
    }
}

/// What the shares of a step came to: each share's result (a share run here piece by piece gives one for each piece
/// it ran), and, when a share run here stopped for the store's deadline, the first batch it left undone.
#[derive(Debug)]
pub struct Shared<R> {
    pub results: Vec<R>,
    pub stopped_at: Option<usize>,
}

/// The shares of the step over `run` (at most [`Config::step_batches`](crate::config::Config::step_batches) batches):
/// as many as `fan_out` allows while each takes at least a quarter of `share_batches` (so that a small step is not
/// spread over invocations that would each do little), the batches dealt evenly, the larger shares first.
pub fn split(cfg: &crate::config::Config, run: std::ops::Range<usize>) -> Vec<std::ops::Range<usize>> {
    let len = run.len();
    let least = (cfg.share_batches / 4).max(1);
    let shares = len.div_ceil(least).clamp(1, cfg.fan_out.max(1));
    let (each, more) = (len / shares, len % shares);
    let mut from = run.start;
    (0..shares)
        .map(|i| {
            let to = from + each + usize::from(i < more);
            let share = from..to;
            from = to;
            share
        })
        .collect()
}

/// Runs `shares` side by side and gives each one's result, in order: the first with `here` in this process, the
/// others by the store's workers when it has them, otherwise with `here` too. A share a worker could not be started
/// for (the function's concurrency used up: `Throttled`) runs here instead, a few batches at a time while the store's
/// deadline allows ([`Shared::stopped_at`]). The step fails with the first share's error, once every share has ended.
pub(crate) async fn side_by_side<R, F, Fut>(store: &Store, shares: Vec<Share>, here: F) -> Result<Shared<R>, TxError>
where
    R: DeserializeOwned,
    F: Fn(Share) -> Fut,
    Fut: std::future::Future<Output = Result<R, TxError>>,
{
    let here = &here;
    let runs = shares.into_iter().enumerate().map(|(i, share)| async move {
        let Some(workers) = store.workers().filter(|_| i > 0) else {
            return Ok(Shared { results: vec![here(share).await?], stopped_at: None });
        };
        let sent = serde_json::to_value(&share).map_err(|e| TxError::Internal(format!("a share: {e}")))?;
        match workers.run(serde_json::json!({ "TransactionId": share.transaction_id(), "Share": sent })).await {
            Ok(v) => {
                let result =
                    serde_json::from_value(v).map_err(|e| TxError::Internal(format!("a share's result: {e}")))?;
                Ok(Shared { results: vec![result], stopped_at: None })
            }
            Err(TxError::Throttled(why)) => {
                tracing::warn!(tx_id = share.transaction_id(), %why, "no worker for a share: running it here");
                in_pieces(store, share, here).await
            }
            Err(e) => Err(e),
        }
    });
    let mut all = Shared { results: Vec::new(), stopped_at: None };
    for shared in join_all(runs).await {
        let shared = shared?;
        all.results.extend(shared.results);
        all.stopped_at = match (all.stopped_at, shared.stopped_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }
    Ok(all)
}

/// Runs `share` here, [`PIECE_BATCHES`] of the step's shares' batches at a time (as many writes in flight as a whole
/// share has), until it is done or the store's deadline has passed; then the first batch it left undone.
async fn in_pieces<R, F, Fut>(store: &Store, share: Share, here: F) -> Result<Shared<R>, TxError>
where
    F: Fn(Share) -> Fut,
    Fut: std::future::Future<Output = Result<R, TxError>>,
{
    let batches = share.batches();
    let size = (store.cfg.share_batches / PIECE_BATCHES).max(1);
    let mut results = Vec::new();
    let mut from = batches.start;
    while from < batches.end {
        if store.deadline().is_some_and(|d| std::time::Instant::now() >= d) {
            tracing::warn!(
                tx_id = share.transaction_id(),
                batch = from,
                "the call's time is up: the rest of the step is left for its next call"
            );
            return Ok(Shared { results, stopped_at: Some(from) });
        }
        let to = (from + size).min(batches.end);
        results.push(here(share.of(from..to)).await?);
        from = to;
    }
    Ok(Shared { results, stopped_at: None })
}

/// A share run in the step's own process goes a quarter of the step's share size at a time.
const PIECE_BATCHES: usize = 4;

/// Runs a step over the batches of `run` in shares side by side ([`split`], [`side_by_side`]): `share` makes the share
/// of some batches for a worker, `here` runs some batches in this process. A run too small to share runs whole here.
pub(crate) async fn in_shares<T, S, F, Fut>(
    store: &Store,
    run: std::ops::Range<usize>,
    share: S,
    here: F,
) -> Result<Shared<Done<T>>, TxError>
where
    T: DeserializeOwned,
    S: Fn(std::ops::Range<usize>) -> Share,
    F: Fn(std::ops::Range<usize>) -> Fut,
    Fut: std::future::Future<Output = Result<T, TxError>>,
{
    let parts = split(&store.cfg, run.clone());
    if parts.len() < 2 {
        return Ok(Shared { results: vec![Done::Done(here(run).await?)], stopped_at: None });
    }
    let here = &here;
    side_by_side(
        store,
        parts.into_iter().map(share).collect(),
        |s| async move { here(s.batches()).await.map(Done::Done) },
    )
    .await
}

impl<T> Shared<Done<T>> {
    /// The state the transaction had left for, when a share found it gone: the step's fold then writes nothing, for
    /// whoever moved the transaction on has the header.
    pub fn ended(&self) -> Option<TxState> {
        self.results.iter().find_map(|d| match d {
            Done::Ended(state) => Some(*state),
            Done::Done(_) => None,
        })
    }
}

/// What a worker answers for a share: its result, or the state the transaction had left for, which ends the share
/// with nothing written.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub enum Done<T> {
    Done(T),
    Ended(TxState),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_is_split_into_even_shares_of_at_least_a_quarter_of_share_batches() {
        let cfg = crate::config::Config { fan_out: 3, share_batches: 2, ..crate::config::Config::new("tx") };
        assert_eq!(split(&cfg, 0..5), vec![0..2, 2..4, 4..5]);
        assert_eq!(split(&cfg, 4..5), vec![4..5]);
        let one = crate::config::Config::new("tx");
        assert_eq!(split(&one, 0..20), vec![0..20], "by default a step is one share of 20 batches");
        let deployed = crate::config::Config { fan_out: 16, share_batches: 20, ..crate::config::Config::new("tx") };
        let sizes = |run| split(&deployed, run).iter().map(|r| r.len()).collect::<Vec<_>>();
        assert_eq!(sizes(0..320), vec![20; 16], "a full step: fan_out shares of share_batches");
        assert_eq!(sizes(0..102), [7, 7, 7, 7, 7, 7].into_iter().chain([6; 10]).collect::<Vec<_>>());
        assert_eq!(sizes(0..12), vec![4, 4, 4], "shares of at least five batches");
        assert_eq!(sizes(0..4), vec![4], "a step of fewer than five batches is one share");
        let shares = split(&deployed, 10..112);
        assert_eq!((shares[0].start, shares[15].end), (10, 112), "the shares cover the run, in order");
        assert!(shares.windows(2).all(|w| w[0].end == w[1].start));
    }

    #[test]
    fn a_share_crosses_as_json_named_by_its_phase() {
        let share = Share::Lock { transaction_id: "t".into(), attempt: 2, pass: 7, earlier: 1, from: 4, to: 6 };
        let v = serde_json::to_value(&share).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"Phase": "Lock", "TransactionId": "t", "Attempt": 2, "Pass": 7, "Earlier": 1, "From": 4, "To": 6})
        );
        assert_eq!(serde_json::from_value::<Share>(v).unwrap(), share);
    }
}
