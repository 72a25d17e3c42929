//! resume: reads the header and says which phase runs next, so any coordinator (the state machine, the in-process
//! coordinator, the sweeper) can pick a transaction up wherever it stopped.

use serde::{Deserialize, Serialize};

use super::*;

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

/// Lock every batch first (so a failing condition anywhere cancels before anything changes), save every batch, apply
/// every batch, commit, complete every batch, release. Each phase runs over all batches before the next starts, so a
/// phase Lambda can do many batches in one call. An attempt rolled back for a reason that was not the request's own
/// is rolled back, then retried (or given up), then released.
pub fn next_step(h: &Header) -> Step {
    if h.finished() {
        return Step::Finished;
    }
    match h.state {
        TxState::Pending if h.locked < h.batches => Step::Lock(h.locked),
        TxState::Pending if h.saved < h.batches => Step::Save(h.saved),
        TxState::Pending if h.applied < h.batches => Step::Apply(h.applied),
        TxState::Pending => Step::Commit,
        TxState::Committed if h.completed < h.batches => Step::Complete(h.completed),
        TxState::RolledBack if h.restored < h.batches => Step::Rollback(h.restored),
        TxState::RolledBack if h.retry_pending => Step::Retry,
        TxState::Committed | TxState::RolledBack => Step::Release,
    }
}

/// Reads the header and returns it with the next step.
pub async fn resume(store: &Store, tx_id: &str) -> Result<(Header, Step), TxError> {
    let m = Meter::default();
    let h = records::read_header(store, &m, tx_id).await?;
    let step = next_step(&h);
    Ok((h, step))
}
