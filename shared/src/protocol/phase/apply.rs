//! apply: the requested writes: a run of batches at once (protocol 2), or one batch (protocol 1).
//!
//! Protocol 2, after the commit: each item is written once, the caller's write and the unlock together, conditioned
//! on this attempt's lock (a `Put` replaces the item, which drops the lock; an `Update` removes the lock attributes
//! in the same expression; a `Delete` deletes it, or puts its tombstone with its time to live; a `ConditionCheck`
//! only unlocks). The lock's disappearance is the item's "applied" mark: a run that finds the lock gone has nothing
//! left to do for that item, so an `ADD` moves once however often the phase runs. Nothing is fenced: after the
//! commit, the outcome no longer depends on who holds the parent.
//!
//! DynamoDB refusing an apply after the commit is what lock and save exist to prevent. If it happens all the same
//! (the evaluator and DynamoDB disagree, or a writer outside the protocol changed a locked item), the rest of the
//! batch is applied, the refused item keeps its lock, and the phase fails with `ApplyRejected`, logged as an error.
//! The transaction stays committed and open: committed reads of the item evaluate its write, writers wait, and the
//! sweeper applies it, exactly once, when DynamoDB accepts it (for example after the item is mended).
//!
//! Protocol 1: the requested writes of one batch (and the tombstones that deletes leave), in one TransactWriteItems
//! call fenced by a ConditionCheck on the parent's `lockToken` (or on the header still being PENDING when there is no
//! parent), so that a coordinator that lost its lock, or whose transaction was decided, cannot write.
//!
//! Each write also sets the applied flag and is conditional on the lock and on the flag being absent, so a retried
//! apply never applies an action twice (an `ADD` counter moves once). Deletes are deferred to complete; a tombstone is
//! put here, so that DynamoDB judges it before the commit, and gets its time to live at complete. An action
//! DynamoDB rejects cancels the transaction, naming that action: save has already refused the updates DynamoDB
//! would refuse, so this is what its evaluation cannot see (a tombstone whose attributes an index refuses).

use aws_sdk_dynamodb::types::{
    AttributeValue, ConditionCheck, Put, ReturnValuesOnConditionCheckFailure, TransactWriteItem, Update,
};

use super::{decided, now, ph, progress, used, Outcome, Report};
use crate::constants::{
    ATTR_APPLIED, ATTR_LOCK, ATTR_LOCKED_AT, ATTR_WRITTEN_BY, H_APPLIED, H_ATTEMPT, H_STATE, PARENT_LEASE,
    PARENT_LOCKED_AT, PARENT_LOCK_TOKEN, PARENT_RVN,
};
use crate::dynamo::lanes::concurrently;
use crate::dynamo::store::{Meter, Store, Transacted, Written};
use crate::error::{CancellationReason, TxError};
use crate::model::item_attrs::{flag, lock_holder, LockId};
use crate::model::plan::Part;
use crate::model::request::{Action, Op};
use crate::model::value;
use crate::model::value::Item;
use crate::model::value::{n, now_ms, s};
use crate::protocol::parent::{beat_parent, new_rvn, same_item};
use crate::protocol::records;
use crate::protocol::records::{Decision, Header, TxState};
use crate::protocol::shares::{Done, Share};
use crate::protocol::unlock::{put_held, release_key, Release};
use dynamo_saga_expressions::expr::{self, ClauseKind};

/// What one TransactWriteItems attempt came to.
enum Group {
    Applied,
    /// DynamoDB rejected the whole call (ValidationException): find the culprit one action at a time.
    Rejected(String),
    Failed(Vec<(usize, CancellationReason)>),
    Stop(Outcome),
}

pub async fn apply(store: &Store, tx_id: &str, batch: usize) -> Result<Report, TxError> {
    let m = Meter::default();
    let h = records::read_header(store, &m, tx_id).await?;
    apply_from(store, m, h, batch).await
}

/// [`apply`] from the header `h` its caller has just read.
pub(crate) async fn apply_from(store: &Store, m: Meter, h: Header, batch: usize) -> Result<Report, TxError> {
    let tx_id = h.id.clone();
    let tx_id = tx_id.as_str();
    // Protocol 2 applies after the commit, protocol 1 before it.
    let applies_in = if h.commits_first() { TxState::Committed } else { TxState::Pending };
    if h.state != applies_in || h.finished() {
        return Ok(Report::new(Outcome::Ended { state: h.state }, &m));
    }
    if h.commits_first() {
        return apply_committed(store, m, h, batch, false).await;
    }
    if h.applied > batch {
        return Ok(Report::new(Outcome::Done, &m));
    }
    if h.saved <= batch {
        return Err(TxError::Internal(format!("apply of batch {batch} before it was saved")));
    }
    let plan = crate::protocol::stored_request::read_plan(store, &m, tx_id).await?;
    let actions: Vec<Action> = crate::protocol::stored_request::read_batch(store, &m, tx_id, &plan, batch, Part::Whole)
        .await?
        .into_iter()
        .map(|(_, a)| a)
        .filter(|a| matches!(a.op, Op::Put | Op::Update) || a.tombstone.is_some())
        .collect();
    if !actions.is_empty() {
        let refs: Vec<&Action> = actions.iter().collect();
        let result = match apply_group(store, &m, &h, &refs).await? {
            Group::Rejected(_) => {
                let mut failed = Vec::new();
                for a in &refs {
                    match apply_group(store, &m, &h, &[a]).await? {
                        Group::Applied => {}
                        Group::Rejected(msg) => {
                            failed.push((a.index, CancellationReason::new(CancellationReason::VALIDATION_ERROR, msg)))
                        }
                        Group::Failed(f) => failed.extend(f),
                        Group::Stop(o) => return Ok(Report::new(o, &m)),
                    }
                }
                if failed.is_empty() {
                    Group::Applied
                } else {
                    Group::Failed(failed)
                }
            }
            other => other,
        };
        match result {
            Group::Applied | Group::Rejected(_) => {}
            Group::Stop(o) => return Ok(Report::new(o, &m)),
            Group::Failed(failed) => {
                let outcome = decided(store, &m, &h, &Decision::actions(failed)).await?;
                return Ok(Report::new(outcome, &m));
            }
        }
    }
    beat_parent(store, &m, &h).await?;
    let outcome = progress(store, &m, &h, H_APPLIED, batch + 1).await?.unwrap_or(Outcome::Done);
    Ok(Report::new(outcome, &m))
}

/// Applies the run from `batch` of the committed transaction `h` (protocol 2), and when it is the last, completes and
/// releases the transaction in the same header write, as a driver that runs those steps after it does
/// ([`super::end::with_apply`]).
pub(crate) async fn apply_and_finish(store: &Store, m: Meter, h: Header, batch: usize) -> Result<Report, TxError> {
    apply_committed(store, m, h, batch, true).await
}

/// Protocol 2: applies and unlocks every item of the batches of the run from `batch`
/// ([`RUN_BATCHES`](crate::constants::RUN_BATCHES) at most, all at once) of the committed transaction `h`, then records
/// them applied with one header write; with `finish`, when the run is the last, that write completes and releases the
/// transaction too.
async fn apply_committed(store: &Store, m: Meter, h: Header, batch: usize, finish: bool) -> Result<Report, TxError> {
    if h.applied > batch {
        return Ok(Report::new(Outcome::Done, &m));
    }
    let plan = crate::protocol::stored_request::read_plan(store, &m, &h.id).await?;
    let run = super::run_from(&store.cfg, batch, h.batches);
    let ApplyRun { refused, ended, stopped_at } = apply_shares(store, &m, &h, &plan, run.clone()).await?;
    if let Some(state) = ended {
        // A worker found the transaction gone from this attempt (finished, or another attempt's): whoever moved it on
        // has the header, which this step leaves untouched.
        return Ok(Report::new(Outcome::Ended { state }, &m));
    }
    if let Some((batch, action, message)) = refused.first() {
        for (_, action, message) in &refused {
            tracing::error!(tx_id = %h.id, action, message, "DynamoDB refused to apply a committed write; the item stays locked");
        }
        let message = match refused.len() {
            1 => message.clone(),
            k => format!("{message} (and {} more actions of batches {} to {})", k - 1, run.start, run.end - 1),
        };
        crate::protocol::records::note_refusal(store, &m, &h, *batch, action, &message).await?;
        return Err(TxError::ApplyRejected { tx_id: h.id.clone(), action: action.clone(), message });
    }
    // A share run here for want of a worker may have stopped for the call's deadline: the batches before the first
    // it left are recorded, and the next call applies from there (an item applied already is passed over).
    let end = stopped_at.unwrap_or(run.end);
    let ended = if finish && end == run.end && super::end::with_apply(&h, run.end) {
        super::end::finish_applied(store, &m, &h).await?
    } else {
        progress(store, &m, &h, H_APPLIED, end).await?
    };
    Ok(Report::new(ended.unwrap_or(Outcome::Done), &m))
}

/// A write DynamoDB refused at apply: its batch, the action, DynamoDB's message.
type Refusal = (usize, String, String);

/// What a worker's share of an apply step came to (`share`).
#[derive(Debug, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Applied {
    refused: Vec<Refusal>,
    usage: Option<crate::dynamo::store::Usage>,
}

/// What the shares of an apply step came to: the writes DynamoDB refused, the state a share found the transaction
/// had left for, and the first batch a share run here left undone for the call's deadline.
struct ApplyRun {
    refused: Vec<Refusal>,
    ended: Option<TxState>,
    stopped_at: Option<usize>,
}

/// Applies and unlocks every item of the batches of `run` of the committed transaction `h` (protocol 2), in shares side
/// by side ([`crate::protocol::shares`]).
async fn apply_shares(
    store: &Store,
    m: &Meter,
    h: &Header,
    plan: &crate::model::plan::Plan,
    run: std::ops::Range<usize>,
) -> Result<ApplyRun, TxError> {
    let shares = |r: std::ops::Range<usize>| Share::Apply {
        transaction_id: h.id.clone(),
        attempt: h.attempt,
        from: r.start,
        to: r.end,
    };
    let done = crate::protocol::shares::in_shares(store, run, shares, |r| async move {
        Ok(Applied { refused: apply_run(store, m, h, plan, r).await?, usage: None })
    })
    .await?;
    let ended = done.ended();
    let mut refused = Vec::new();
    for d in done.results {
        if let Done::Done(a) = d {
            refused.extend(a.refused);
            if let Some(u) = a.usage {
                m.add(&u);
            }
        }
    }
    Ok(ApplyRun { refused, ended, stopped_at: done.stopped_at })
}

/// Applies and unlocks every item of the batches of `run`, all at once: the writes DynamoDB refused.
async fn apply_run(
    store: &Store,
    m: &Meter,
    h: &Header,
    plan: &crate::model::plan::Plan,
    run: std::ops::Range<usize>,
) -> Result<Vec<Refusal>, TxError> {
    let actions = crate::protocol::stored_request::read_batches(store, m, &h.id, plan, run, Part::Whole).await?;
    let refused = concurrently(actions, store.cfg.concurrency, |(b, _, a)| async move {
        Ok(apply_item(store, m, h, b, &a).await?.map(|message| (b, a.describe(), message)))
    })
    .await?;
    Ok(refused.into_iter().flatten().collect())
}

#[cfg(feature = "internals")]
/// A worker's share of an apply step (`share`): the share's batches applied, as the step's own process would
/// have applied them.
pub(crate) async fn share(store: &Store, share: Share) -> Result<Done<Applied>, TxError> {
    let Share::Apply { transaction_id, attempt, from, to } = share else {
        return Err(TxError::Internal("an apply share is a share of apply".into()));
    };
    let m = Meter::default();
    let h = records::read_header(store, &m, &transaction_id).await?;
    if h.state != TxState::Committed || !h.commits_first() || h.finished() || h.attempt != attempt {
        return Ok(Done::Ended(h.state));
    }
    let plan = crate::protocol::stored_request::read_plan(store, &m, &h.id).await?;
    let refused = apply_run(store, &m, &h, &plan, from..to).await?;
    Ok(Done::Done(Applied { refused, usage: Some(m.usage()) }))
}

/// Applies and unlocks one item (action `a` of `batch`) while `h`'s attempt holds it with the lock its batch was
/// recorded locked with. `Some(message)` when DynamoDB refuses the write.
///
/// A lock of the attempt that carries another id was taken by a lock write that landed after the item was applied
/// (its batch was recorded locked, so every item of it held the recorded lock until apply removed it): it is left
/// unapplied, and removed.
pub(crate) async fn apply_item(
    store: &Store,
    m: &Meter,
    h: &Header,
    batch: usize,
    a: &Action,
) -> Result<Option<String>, TxError> {
    let owner = h.owner();
    let id = h.lock_id(batch, a.index);
    if h.lock_pass.is_some() && id.is_none() {
        return Err(TxError::Internal(format!("{} is applied before its batch was recorded locked", a.describe())));
    }
    let c = &store.client;
    // A Put or an update with the transaction's id (ATTR_WRITTEN_BY), and, when DynamoDB refuses that (an item or an
    // expression near a limit, which the checks before the commit judged without the id), the same write without it.
    let owner_ref = owner.as_str();
    let stamped = |stamp: bool| async move {
        let owner = owner_ref;
        match a.op {
            Op::Update => {
                let w = super::writes::UpdateWrite::of(a, owner, id, stamp)?;
                let req = c
                    .update_item()
                    .table_name(&a.table)
                    .set_key(Some(a.key.clone()))
                    .update_expression(w.update)
                    .condition_expression(w.condition)
                    .set_expression_attribute_names(Some(w.names))
                    .set_expression_attribute_values(Some(w.values));
                store.update(m, req).await
            }
            _ => {
                let mut item =
                    a.item.clone().ok_or_else(|| TxError::Internal(format!("{} has nothing to put", a.describe())))?;
                if stamp {
                    item.insert(ATTR_WRITTEN_BY.into(), s(&h.id));
                }
                if h.parent.as_ref().is_some_and(|p| same_item(p, a)) {
                    keep_parent_lock(&mut item, h, store.cfg.lease.as_secs());
                }
                put_held(store, m, owner, &a.table, item, id).await
            }
        }
    };
    let sent = match (&a.op, &a.tombstone) {
        (Op::Update | Op::Put, _) => match stamped(true).await {
            Err(TxError::DynamoDb { message, .. }) if message.starts_with("ValidationException") => {
                tracing::warn!(tx_id = %h.id, action = a.index, %message, "refused with the transaction's id: written without it");
                stamped(false).await
            }
            other => other,
        },
        (Op::Delete, Some(t)) => {
            let mut item = t.item(&a.key, &h.id);
            item.insert(t.ttl_attribute.clone(), t.expires_at(now_ms()));
            match put_held(store, m, &owner, &a.table, item, id).await {
                // The table's indexes refuse the time to live (an index key of another type): a tombstone that never
                // expires is better than a committed transaction that cannot finish.
                Err(TxError::DynamoDb { message, .. }) if message.starts_with("ValidationException") => {
                    tracing::warn!(tx_id = %h.id, table = %a.table, %message, "the tombstone's time to live was refused; it is kept without one");
                    put_held(store, m, &owner, &a.table, t.item(&a.key, &h.id), id).await
                }
                other => other,
            }
        }
        (Op::Delete, None) => release_key(store, m, &owner, &a.table, &a.key, Release::Delete, id).await.map(released),
        (Op::ConditionCheck, _) => {
            release_key(store, m, &owner, &a.table, &a.key, Release::Keep, id).await.map(released)
        }
    };
    let old = match sent {
        Ok(Written::Done(_)) => return Ok(None),
        Ok(Written::ConditionFailed(old)) => old,
        Err(TxError::DynamoDb { message, .. }) if message.starts_with("ValidationException") => {
            return Ok(Some(message))
        }
        Err(e) => return Err(e),
    };
    // The lock was gone (applied by an earlier run), or a lock write that landed late holds the item.
    if let (Some(expected), Some(old)) = (id, old) {
        if let Some(late) =
            LockId::of(&old).filter(|late| lock_holder(&old) == Some(owner.as_str()) && *late != expected)
        {
            tracing::warn!(tx_id = %h.id, action = a.index, lock_id = %late, "a lock write landed after its item was applied: removing it");
            release_key(store, m, &owner, &a.table, &a.key, Release::Keep, Some(late)).await?;
        }
    }
    Ok(None)
}

/// A release's outcome as a write's: released, or the item as it was.
fn released(old: Option<Item>) -> Written {
    match old {
        None => Written::Done(None),
        Some(old) => Written::ConditionFailed(Some(old)),
    }
}

/// The parent lock's attributes on an item that replaces the parent item, so the parent stays locked by `h`'s
/// attempt until it is released.
fn keep_parent_lock(item: &mut Item, h: &Header, lease_seconds: u64) {
    item.insert(PARENT_LOCK_TOKEN.into(), s(h.owner()));
    item.insert(PARENT_LOCKED_AT.into(), now());
    item.insert(PARENT_LEASE.into(), n(lease_seconds));
    item.insert(PARENT_RVN.into(), new_rvn());
}

/// Applies `todo` in one fenced call, dropping actions found already applied and trying again with the rest.
async fn apply_group(store: &Store, m: &Meter, h: &Header, todo: &[&Action]) -> Result<Group, TxError> {
    let mut todo: Vec<&Action> = todo.to_vec();
    for _ in 0..3 {
        if todo.is_empty() {
            return Ok(Group::Applied);
        }
        // The fence is its own ConditionCheck unless the parent item is itself written in this call.
        let fence_inline = h.parent.as_ref().is_some_and(|p| todo.iter().any(|a| same_item(p, a)));
        let mut items = Vec::with_capacity(todo.len() + 1);
        if !fence_inline {
            items.push(fence(store, h)?);
        }
        for a in &todo {
            items.push(write_item(h, a, store.cfg.lease.as_secs())?);
        }
        let req = store.client.transact_write_items().set_transact_items(Some(items));
        let reasons = match store.transact(m, req).await? {
            Transacted::Done => return Ok(Group::Applied),
            Transacted::Rejected(msg) => return Ok(Group::Rejected(msg)),
            Transacted::Canceled(r) => r,
        };
        let offset = usize::from(!fence_inline);
        if !fence_inline && reasons.first().is_some_and(|r| r.0 == CancellationReason::CONDITIONAL_CHECK_FAILED) {
            return fence_failed(store, m, h, None).await;
        }
        let mut done = Vec::new();
        let mut failed = Vec::new();
        for (k, a) in todo.iter().enumerate() {
            let Some((code, msg, item)) = reasons.get(k + offset) else { continue };
            match code.as_str() {
                CancellationReason::CONDITIONAL_CHECK_FAILED => {
                    let item = item.as_ref();
                    match item.and_then(lock_holder) {
                        Some(t) if t == h.owner() && item.is_some_and(|i| flag(i, ATTR_APPLIED)) => done.push(a.index),
                        // The lock is gone or another's (or, inline, the parent fence failed): stop here.
                        _ => return fence_failed(store, m, h, Some(a)).await,
                    }
                }
                "None" => {}
                _ => {
                    failed.push((a.index, CancellationReason { code: code.clone(), message: msg.clone(), item: None }))
                }
            }
        }
        if !failed.is_empty() {
            return Ok(Group::Failed(failed));
        }
        if done.is_empty() {
            return Err(TxError::DynamoDb {
                op: "TransactWriteItems",
                message: format!("cancelled without a reason to act on: {reasons:?}"),
            });
        }
        todo.retain(|a| !done.contains(&a.index));
    }
    Err(TxError::DynamoDb { op: "TransactWriteItems", message: "apply kept being cancelled".into() })
}

/// The fence failed: either the attempt was decided (stop, nothing written) or it lost a lock, the parent's or
/// `item`'s (roll back, and try again: that was not the request's doing).
async fn fence_failed(store: &Store, m: &Meter, h: &Header, item: Option<&Action>) -> Result<Group, TxError> {
    let now = records::read_header(store, m, &h.id).await?;
    if now.state != TxState::Pending || now.attempt != h.attempt {
        return Ok(Group::Stop(Outcome::Ended { state: now.state }));
    }
    // The item's own lock, unless the item is the parent (whose write carries the fence inline); else the parent's.
    let (action, what) = match (item, &h.parent) {
        (Some(a), p) if !p.as_ref().is_some_and(|p| same_item(p, a)) => {
            (Some(a.index), value::key_display(&a.table, &a.key))
        }
        (_, Some(p)) => (None, value::key_display(&p.table_name, &p.key)),
        (_, None) => return Err(TxError::Internal("the header fence failed on a pending attempt".into())),
    };
    let d = Decision::retry(None, action, &what, format!("the lock on {what} was lost before apply"));
    Ok(Group::Stop(decided(store, m, h, &d).await?))
}

fn fence(store: &Store, h: &Header) -> Result<TransactWriteItem, TxError> {
    let cc = match &h.parent {
        Some(p) => ConditionCheck::builder()
            .table_name(&p.table_name)
            .set_key(Some(p.key.clone()))
            .condition_expression(format!("{} = {}", ph::PARENT_TOKEN, ph::TX))
            .expression_attribute_names(ph::PARENT_TOKEN, PARENT_LOCK_TOKEN)
            .expression_attribute_values(ph::TX, s(h.owner())),
        None => {
            let b = ConditionCheck::builder()
                .table_name(&store.cfg.tx_table)
                .set_key(Some(records::header_key(&h.id)))
                .expression_attribute_names(ph::STATE, H_STATE)
                .expression_attribute_names(ph::ATTEMPT, H_ATTEMPT)
                .expression_attribute_values(ph::PENDING, s(TxState::Pending.as_str()));
            if h.attempt == 0 {
                b.condition_expression(format!(
                    "{} = {} AND attribute_not_exists({})",
                    ph::STATE,
                    ph::PENDING,
                    ph::ATTEMPT
                ))
            } else {
                b.condition_expression(format!(
                    "{} = {} AND {} = {}",
                    ph::STATE,
                    ph::PENDING,
                    ph::ATTEMPT,
                    ph::ATTEMPT_N
                ))
                .expression_attribute_values(ph::ATTEMPT_N, n(h.attempt))
            }
        }
    };
    let cc = cc.build().map_err(|e| TxError::Internal(e.to_string()))?;
    Ok(TransactWriteItem::builder().condition_check(cc).build())
}

fn write_item(h: &Header, a: &Action, lease_seconds: u64) -> Result<TransactWriteItem, TxError> {
    let inline_fence = h.parent.as_ref().is_some_and(|p| same_item(p, a));
    let mut cond = format!("{} = {} AND attribute_not_exists({})", ph::LOCK, ph::TX, ph::APPLIED);
    if inline_fence {
        cond.push_str(&format!(" AND {} = {}", ph::PARENT_TOKEN, ph::TX));
    }
    let internal = |e: String| TxError::Internal(e);
    let item = match a.op {
        Op::Put | Op::Delete => {
            let mut item = match (&a.item, &a.tombstone) {
                (Some(item), _) => item.clone(),
                (None, Some(t)) => t.item(&a.key, &h.id),
                (None, None) => return Err(internal(format!("{} has nothing to put", a.describe()))),
            };
            item.insert(ATTR_LOCK.into(), s(h.owner()));
            item.insert(ATTR_LOCKED_AT.into(), now());
            item.insert(ATTR_APPLIED.into(), AttributeValue::Bool(true));
            if inline_fence {
                keep_parent_lock(&mut item, h, lease_seconds);
            }
            let mut b = Put::builder()
                .table_name(&a.table)
                .set_item(Some(item))
                .condition_expression(cond)
                .expression_attribute_names(ph::LOCK, ATTR_LOCK)
                .expression_attribute_names(ph::APPLIED, ATTR_APPLIED)
                .expression_attribute_values(ph::TX, s(h.owner()))
                .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld);
            if inline_fence {
                b = b.expression_attribute_names(ph::PARENT_TOKEN, PARENT_LOCK_TOKEN);
            }
            TransactWriteItem::builder().put(b.build().map_err(|e| internal(e.to_string()))?).build()
        }
        Op::Update => {
            let caller = a.update.as_deref().unwrap_or_default();
            let parsed = expr::parse_update(caller).map_err(|e| internal(format!("stored update: {e}")))?;
            let (names, values) = used(a, &parsed.refs);
            let update = expr::add_actions(caller, ClauseKind::Set, &format!("{} = {}", ph::APPLIED, ph::TRUE))
                .map_err(|e| internal(format!("stored update: {e}")))?;
            let mut b = Update::builder()
                .table_name(&a.table)
                .set_key(Some(a.key.clone()))
                .update_expression(update)
                .condition_expression(cond)
                .set_expression_attribute_names(Some(names))
                .set_expression_attribute_values(Some(values))
                .expression_attribute_names(ph::LOCK, ATTR_LOCK)
                .expression_attribute_names(ph::APPLIED, ATTR_APPLIED)
                .expression_attribute_values(ph::TX, s(h.owner()))
                .expression_attribute_values(ph::TRUE, AttributeValue::Bool(true))
                .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld);
            if inline_fence {
                b = b.expression_attribute_names(ph::PARENT_TOKEN, PARENT_LOCK_TOKEN);
            }
            TransactWriteItem::builder().update(b.build().map_err(|e| internal(e.to_string()))?).build()
        }
        Op::ConditionCheck => return Err(internal("checks are not applied".into())),
    };
    Ok(item)
}
