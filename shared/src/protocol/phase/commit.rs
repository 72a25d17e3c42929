//! commit: the header moves `PENDING` -> `COMMITTED` in one conditional write. This write is the commit point: before
//! it, anyone may roll the transaction back; after it, nobody can. Protocol 2 commits once every batch is locked and
//! checked, with nothing applied yet; protocol 1 once every batch is applied.
//!
//! With a parent, the same call checks the parent's `lockToken` still names this transaction, so a coordinator whose
//! parent lock was taken over cannot commit. Where the tables take no `TransactWriteItems` (multi-Region strongly
//! consistent tables), the parent lock is sealed by a conditional write of its own just before the commit
//! ([`crate::protocol::parent::seal_parent`]): no waiter can take it over before the commit lands.

use aws_sdk_dynamodb::types::{ConditionCheck, TransactWriteItem, Update};

use super::{decided, now, ph, Outcome, Report};
use crate::constants::{H_ATTEMPT, H_LOCKED, H_SAVED, H_STATE, H_UPDATED_AT, H_VERSION, PARENT_LOCK_TOKEN};
use crate::dynamo::store::{Meter, Store, Transacted, Usage};
use crate::error::TxError;
use crate::model::request::Parent;
use crate::model::value::{n, s};
use crate::protocol::parent::seal_parent;
use crate::protocol::records::{self, Decision, Header, HeaderWrite, TxState};

pub async fn commit(store: &Store, tx_id: &str) -> Result<Report, TxError> {
    let m = Meter::default();
    let h = records::read_header(store, &m, tx_id).await?;
    commit_from(store, m, h).await
}

/// [`commit`] from the header `h` its caller has just read.
pub(crate) async fn commit_from(store: &Store, m: Meter, h: Header) -> Result<Report, TxError> {
    let tx_id = h.id.as_str();
    match h.state {
        TxState::Committed => return Ok(Report::new(Outcome::Done, &m)),
        TxState::RolledBack => return Ok(Report::new(Outcome::Ended { state: h.state }, &m)),
        TxState::Pending => {}
    }
    if h.commits_first() && h.saved < h.batches {
        return Err(TxError::Internal(format!("commit with {} of {} batches checked", h.saved, h.batches)));
    }
    if !h.commits_first() && h.applied < h.batches {
        return Err(TxError::Internal(format!("commit with {} of {} batches applied", h.applied, h.batches)));
    }
    let usage = m.usage();
    let committed = match &h.parent {
        Some(p) if store.cfg.transactions_allowed() => match commit_checking_parent(store, &m, &h, p).await? {
            Some(committed) => committed,
            None => return parent_lost(store, &m, &h, p).await,
        },
        Some(p) => {
            // No TransactWriteItems to check the parent's token in the commit's own call: the parent is sealed
            // first, and the commit sent within the ordinary lease after the seal was.
            loop {
                let sealed_at = std::time::Instant::now();
                if !seal_parent(store, &m, &h).await? {
                    return parent_lost(store, &m, &h, p).await;
                }
                if sealed_at.elapsed() < store.cfg.lease {
                    break;
                }
            }
            commit_header(store, &m, &h, &usage).await?
        }
        None => commit_header(store, &m, &h, &usage).await?,
    };
    if committed {
        tracing::info!(tx_id, "committed");
        return Ok(Report::new(Outcome::Done, &m));
    }
    let now = records::read_header(store, &m, tx_id).await?;
    Ok(Report::new(
        if now.state == TxState::Committed { Outcome::Done } else { Outcome::Ended { state: now.state } },
        &m,
    ))
}

/// The commit's header write alone: `PENDING` -> `COMMITTED` at the version `h` was read at, adding `usage`.
async fn commit_header(store: &Store, m: &Meter, h: &Header, usage: &Usage) -> Result<bool, TxError> {
    let committed = [(H_STATE, s(TxState::Committed.as_str()))];
    records::update_header(store, m, &h.id, records::Expect::at(h), &committed, None, usage).await
}

/// The commit with a parent, in one `TransactWriteItems`: the parent's `lockToken` still names `h`'s attempt, and the
/// header moves `PENDING` -> `COMMITTED` at `h`'s attempt. `None` when the parent was lost; `Some(false)` when the
/// header was no longer pending at that attempt.
async fn commit_checking_parent(store: &Store, m: &Meter, h: &Header, p: &Parent) -> Result<Option<bool>, TxError> {
    let check = ConditionCheck::builder()
        .table_name(&p.table_name)
        .set_key(Some(p.key.clone()))
        .condition_expression(format!("{} = {}", ph::PARENT_TOKEN, ph::TX))
        .expression_attribute_names(ph::PARENT_TOKEN, PARENT_LOCK_TOKEN)
        .expression_attribute_values(ph::TX, s(h.owner()))
        .build()
        .map_err(|e| TxError::Internal(e.to_string()))?;
    let (attempt_cond, attempt_value) = match h.attempt {
        0 => (format!("attribute_not_exists({})", ph::ATTEMPT), None),
        a => (format!("{} = {}", ph::ATTEMPT, ph::ATTEMPT_N), Some(n(a))),
    };
    let update = Update::builder()
        .table_name(&store.cfg.tx_table)
        .set_key(Some(records::header_key(&h.id)))
        .update_expression(format!("SET {} = :c, #ver = #ver + :one, #upd = {}", ph::STATE, ph::NOW))
        .condition_expression(format!("{} = {} AND {attempt_cond}", ph::STATE, ph::PENDING))
        .expression_attribute_names(ph::STATE, H_STATE)
        .expression_attribute_names(ph::ATTEMPT, H_ATTEMPT)
        .expression_attribute_names("#ver", H_VERSION)
        .expression_attribute_names("#upd", H_UPDATED_AT)
        .expression_attribute_values(":c", s(TxState::Committed.as_str()))
        .expression_attribute_values(":one", n(1))
        .expression_attribute_values(ph::NOW, now())
        .expression_attribute_values(ph::PENDING, s(TxState::Pending.as_str()));
    let update = match attempt_value {
        Some(v) => update.expression_attribute_values(ph::ATTEMPT_N, v),
        None => update,
    };
    let update = update.build().map_err(|e| TxError::Internal(e.to_string()))?;
    let req = store
        .client
        .transact_write_items()
        .transact_items(TransactWriteItem::builder().condition_check(check).build())
        .transact_items(TransactWriteItem::builder().update(update).build());
    match store.transact(m, req).await? {
        Transacted::Done => Ok(Some(true)),
        Transacted::Canceled(r) if r.first().is_some_and(|r| r.0 == "ConditionalCheckFailed") => Ok(None),
        Transacted::Canceled(_) => Ok(Some(false)),
        Transacted::Rejected(msg) => Err(TxError::DynamoDb { op: "TransactWriteItems", message: msg }),
    }
}

/// The attempt lost its parent lock before it could commit: rolled back, and tried again (not the request's doing).
async fn parent_lost(store: &Store, m: &Meter, h: &Header, p: &Parent) -> Result<Report, TxError> {
    let what = crate::model::value::key_display(&p.table_name, &p.key);
    let d = Decision::retry(None, None, &what, format!("the lock on the Parent item {what} was lost before commit"));
    Ok(Report::new(decided(store, m, h, &d).await?, m))
}

/// Whether a driver that runs save and then commit (the in-process coordinator; the state machine runs each in its own
/// Lambda) can do both in one header write: a transaction of protocol 2 without a parent (whose lease save beats and
/// whose lock the commit checks), whose items begin checked, with every batch locked and none saved yet. Save then
/// has nothing to write but its watermark, which the commit write sets with the state.
pub(crate) fn with_save(h: &Header) -> bool {
    h.state == TxState::Pending
        && h.commits_first()
        && h.parent.is_none()
        && h.items_checked
        && h.locked >= h.batches
        && h.saved < h.batches
}

/// Save and commit in one conditional header write (see [`with_save`]): every batch recorded saved and the state
/// `COMMITTED`, only while every batch is recorded locked by this attempt.
pub(crate) async fn save_and_commit(store: &Store, m: Meter, h: Header) -> Result<Report, TxError> {
    let w = HeaderWrite {
        set: vec![(H_STATE, s(TxState::Committed.as_str())), (H_SAVED, n(h.batches))],
        equal: vec![(H_LOCKED, Some(n(h.batches)))],
        ..HeaderWrite::default()
    };
    if records::write_header(store, &m, &h.id, records::Expect::at(&h), w, &m.usage()).await? {
        tracing::info!(tx_id = %h.id, "committed");
        return Ok(Report::new(Outcome::Done, &m));
    }
    let now = records::read_header(store, &m, &h.id).await?;
    Ok(Report::new(
        if now.state == TxState::Committed { Outcome::Done } else { Outcome::Ended { state: now.state } },
        &m,
    ))
}
