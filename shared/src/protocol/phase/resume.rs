//! resume: reads the header and says which phase runs next, so any coordinator (the state machine, the in-process
//! coordinator, the sweeper) can pick a transaction up wherever it stopped.

use crate::dynamo::store::{Meter, Store};
use crate::error::TxError;
use crate::protocol::records::{self, Header, TxState};
use serde::{Deserialize, Serialize};

/// The next phase run a transaction needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "Step", content = "Batch")]
pub enum Step {
    Lock(usize),
    Save(usize),
    Apply(usize),
    Commit,
    Complete(usize),
    Rollback(usize),
    /// Start another attempt, or give up when none can start: the last one was rolled back and released, and not by
    /// the request's own doing.
    Retry,
    Release,
    Finished,
}

/// Lock every batch first (so a failing condition anywhere cancels before anything changes), save every batch, then:
///
/// - protocol 2 ([`Header::commits_first`]): commit, apply every batch (each item's write and its unlock in one),
///   complete, release;
/// - protocol 1 (transactions begun before it): apply every batch, commit, complete every batch, release.
///
/// Each phase runs over all batches before the next starts, so a phase Lambda can do many batches in one call. An
/// attempt rolled back for a reason that was not the request's own is rolled back, then retried (or given up), then
/// released.
pub fn next_step(h: &Header) -> Step {
    if h.finished() {
        return Step::Finished;
    }
    let v2 = h.commits_first();
    match h.state {
        TxState::Pending if h.locked < h.batches => Step::Lock(h.locked),
        TxState::Pending if h.saved < h.batches => Step::Save(h.saved),
        TxState::Pending if !v2 && h.applied < h.batches => Step::Apply(h.applied),
        TxState::Pending => Step::Commit,
        TxState::Committed if v2 && h.applied < h.batches => Step::Apply(h.applied),
        TxState::Committed if h.completed < h.batches => Step::Complete(h.completed),
        TxState::RolledBack if h.restored < h.batches => Step::Rollback(h.restored),
        TxState::RolledBack if h.retry_pending => Step::Retry,
        TxState::Committed | TxState::RolledBack => Step::Release,
    }
}

/// Reads the header and returns it with the next step.
#[cfg(feature = "internals")]
pub async fn resume(store: &Store, tx_id: &str) -> Result<(Header, Step), TxError> {
    let m = Meter::default();
    let h = records::read_header(store, &m, tx_id).await?;
    let step = next_step(&h);
    Ok((h, step))
}

/// [`resume`] from the header as this process's last write of it left it, when it has not been used since
/// ([`records::last_header`]): what a driver's next step starts from.
pub async fn resume_written(store: &Store, tx_id: &str) -> Result<(Header, Step), TxError> {
    let m = Meter::default();
    let h = records::last_header(store, &m, tx_id).await?;
    let step = next_step(&h);
    Ok((h, step))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::constants::{H_ACTIONS, H_BATCHES, H_STATE, PROTOCOL, TX_PK};

    fn header(protocol: u32, state: TxState, [locked, saved, applied, completed]: [usize; 4]) -> Header {
        let item = std::collections::HashMap::from([
            (TX_PK.to_string(), crate::model::value::s("t")),
            (H_STATE.to_string(), crate::model::value::s(state.as_str())),
            (H_ACTIONS.to_string(), crate::model::value::n(300)),
            (H_BATCHES.to_string(), crate::model::value::n(3)),
        ]);
        let mut h = Header::from_item(&item).unwrap();
        (h.protocol, h.locked, h.saved, h.applied, h.completed) = (protocol, locked, saved, applied, completed);
        h
    }

    #[test]
    fn a_header_without_a_protocol_is_the_first_and_keeps_its_order() {
        let h = header(1, TxState::Pending, [0; 4]);
        assert_eq!(h.protocol, 1, "read from an item without the attribute");
        let order = [
            (TxState::Pending, [3, 3, 1, 0], Step::Apply(1)),
            (TxState::Pending, [3, 3, 3, 0], Step::Commit),
            (TxState::Committed, [3, 3, 3, 1], Step::Complete(1)),
            (TxState::Committed, [3, 3, 3, 3], Step::Release),
        ];
        for (state, marks, step) in order {
            assert_eq!(next_step(&header(1, state, marks)), step, "{state:?} {marks:?}");
        }
    }

    #[test]
    fn the_second_protocol_commits_before_it_applies() {
        let order = [
            (TxState::Pending, [1, 0, 0, 0], Step::Lock(1)),
            (TxState::Pending, [3, 2, 0, 0], Step::Save(2)),
            (TxState::Pending, [3, 3, 0, 0], Step::Commit),
            (TxState::Committed, [3, 3, 1, 0], Step::Apply(1)),
            (TxState::Committed, [3, 3, 3, 0], Step::Complete(0)),
            (TxState::Committed, [3, 3, 3, 3], Step::Release),
            (TxState::RolledBack, [3, 3, 0, 0], Step::Rollback(0)),
        ];
        for (state, marks, step) in order {
            assert_eq!(next_step(&header(PROTOCOL, state, marks)), step, "{state:?} {marks:?}");
        }
    }
}
