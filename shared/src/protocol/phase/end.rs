//! How a transaction ends: when its records expire, whether and when it is visited again for writes that may land
//! after its end, and the single header write that ends a committed transaction together with its last apply run.

use crate::constants::{
    ATTR_EXPIRES_AT, H_APPLIED, H_COMPLETED, H_FINISHED_AT, H_OPEN_SHARD, H_REVISIT_AT, REVISIT_SHARD_PREFIX,
};
use crate::dynamo::store::{Meter, Store};
use crate::error::TxError;
use crate::model::value::{n, now_ms, s};
use crate::protocol::records::{self, Expect, Header, HeaderWrite, TxState};

/// How a transaction finishing now ends: when its records expire, and, when it must be visited again for writes that
/// may land after its end ([`Header::needs_revisit`]), when, and the index partition the sweeper finds it in then.
pub(crate) struct End {
    pub(crate) expires_at: u64,
    pub(crate) revisit_at: Option<u64>,
    pub(crate) shard: String,
}

impl End {
    pub(crate) fn of(store: &Store, h: &Header, now: u64) -> Self {
        let retention = store.cfg.retention.as_secs();
        let revisit_at = h.needs_revisit().then(|| now + store.cfg.revisit_after.as_millis() as u64);
        let expires_at = (revisit_at.unwrap_or(now) / 1000).max(now / 1000) + retention;
        let shard = format!("{REVISIT_SHARD_PREFIX}{}", records::shard_of(&h.id));
        if let Some(at) = revisit_at {
            tracing::info!(tx_id = %h.id, revisit_at = at, "a write of this transaction may land after its end: it is visited again then");
        }
        End { expires_at, revisit_at, shard }
    }
}

/// Whether a driver that runs the last apply run, complete and release (the in-process coordinator; the state machine
/// runs each in its own Lambda) can end them with one header write: a committed transaction of protocol 2 without a
/// parent, for which complete and release only write the header.
pub(crate) fn with_apply(h: &Header, run_end: usize) -> bool {
    h.state == TxState::Committed && h.commits_first() && h.parent.is_none() && run_end >= h.batches && !h.finished()
}

/// The end of a committed transaction (see [`with_apply`]) whose last apply run this process has just written: every
/// batch recorded applied and completed, and the transaction finished, in one conditional header write. `Some` when the
/// header has left the state or attempt `h` shows, or another driver recorded the batches first.
pub(crate) async fn finish_applied(store: &Store, m: &Meter, h: &Header) -> Result<Option<super::Outcome>, TxError> {
    let now = now_ms();
    let end = End::of(store, h, now);
    let mut w = HeaderWrite {
        set: vec![(H_COMPLETED, n(h.batches)), (H_FINISHED_AT, n(now)), (ATTR_EXPIRES_AT, n(end.expires_at))],
        remove: vec![H_OPEN_SHARD],
        watermark: Some((H_APPLIED, h.batches)),
        require: vec![(H_FINISHED_AT, false)],
        ..HeaderWrite::default()
    };
    if let Some(at) = end.revisit_at {
        w.remove.clear();
        w.set.push((H_OPEN_SHARD, s(end.shard)));
        w.set.push((H_REVISIT_AT, n(at)));
    }
    let expect = Expect { state: TxState::Committed, attempt: Some(h.attempt), touched_at: None };
    if records::write_header(store, m, &h.id, expect, w, &m.usage()).await? {
        tracing::info!(tx_id = %h.id, state = h.state.as_str(), "finished");
        return Ok(None);
    }
    let now = records::read_header(store, m, &h.id).await?;
    Ok((now.state != h.state || now.attempt != h.attempt).then_some(super::Outcome::Ended { state: now.state }))
}
