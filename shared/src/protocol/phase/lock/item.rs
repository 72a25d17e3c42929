//! The lock writes of one item and of the parent: the guess, the takeover and the tombstone's lock.

use aws_sdk_dynamodb::types::AttributeValue;

use super::{evaluate, now, ph, used, Contention};
use super::{ItemLock, Pass};
use crate::config::PrecommitCheck;
use crate::constants::{ATTR_GONE, ATTR_LOCK, ATTR_LOCKED_AT, ATTR_STONE, ATTR_TOMBSTONE, ATTR_TRANSIENT};
use crate::dynamo::store::{Meter, Once, Store, Written};
use crate::error::{CancellationReason, TxError};
use crate::model::item_attrs::{lock_holder, LockId};
use crate::model::request::{is_tombstone, Action, Op, Parent};
use crate::model::value::{self, item_to_json, Item};
use crate::model::value::{n, s};
use crate::protocol::parent::{new_rvn, parent_lock_names, unlock_parent};
use crate::protocol::records;
use crate::protocol::records::Header;
use crate::protocol::unlock::{release_key, Release};
use dynamo_saga_expressions::expr;

/// The write a lock sends next to an item.
#[derive(Clone, PartialEq)]
pub(super) enum Write {
    /// The lock of an item expected absent (`true`: created to hold the lock, and marked transient) or present.
    Guess(bool),
    /// Gives a lock an earlier pass of this attempt took this pass's id.
    TakeOver,
    /// Replaces the tombstone (as last read) with a lock item that keeps it; the lock is conditional on its
    /// `_sagaTombstone` (the id of the transaction that wrote it) being unchanged.
    Tombstone(Item),
}

/// Most writes one item's lock takes: a takeover, a tombstone and a wrong guess each send another, and a write whose
/// outcome is unknown is followed by one more.
pub(super) const ITEM_LOCK_WRITES: usize = 24;

/// Locks one item (of `batch`) with the caller's condition for `pass`, and says which id the lock carries. An item of
/// a batch an earlier pass of this attempt claimed may hold that pass's lock: its first write takes it over, and only
/// if the item holds no such lock is it locked as any other. The first lock write of any other item guesses whether the
/// item exists (inserts usually say so with `attribute_not_exists`); a wrong guess costs one failed conditional write
/// and is corrected from the item DynamoDB returns. One write cannot serve both: DynamoDB gives an update of an absent
/// item its key before it evaluates the update, so nothing in the write can tell the item that was absent from one that
/// held only its key.
///
/// A tombstone is locked as an absent item: it is replaced by an item that holds the lock, marked transient, with
/// the tombstone kept in [`ATTR_STONE`] to be put back unless the transaction writes the item. The caller's condition
/// is evaluated on the tombstone with every attribute it reads redirected to one that never exists, except a
/// `Ratchet`'s, which compares against the tombstone's timestamp.
pub(super) async fn lock_item(
    store: &Store,
    m: &Meter,
    h: &Header,
    batch: usize,
    a: &Action,
    pass: Pass,
    unknown_seen: &std::sync::atomic::AtomicBool,
) -> Result<(ItemLock, Option<LockId>), TxError> {
    let owner = h.owner();
    let (mut id, earlier) = match pass {
        Pass::Id(p, earlier) => (Some(LockId::new(p)), batch < earlier),
        Pass::Legacy => (None, false),
    };
    let absent_guess = a.inserts() || (h.absent_tables.contains(&a.table) && !a.needs_item());
    let mut write = if earlier { Write::TakeOver } else { Write::Guess(absent_guess) };
    let mut unknown = 0u32;
    for _ in 0..ITEM_LOCK_WRITES {
        if pass_over(store, pass) {
            return Ok((ItemLock::Superseded, None));
        }
        let old = match send_write(store, m, &owner, a, &write, id).await? {
            Err(refused) => return Ok((refused, None)),
            Ok(Locked::Now(before)) => {
                // A lock taken over stood for the item as it was, unless it created the item.
                let before = match before {
                    Some(b)
                        if lock_holder(&b) == Some(owner.as_str())
                            && crate::model::item_attrs::flag(&b, ATTR_TRANSIENT) =>
                    {
                        None
                    }
                    other => other,
                };
                let before = before.filter(|b| !is_tombstone(b)).map(crate::model::item_attrs::strip_reserved);
                return Ok((locked(store, m, h, a, before.as_ref()).await?, id));
            }
            Ok(Locked::Not(old)) => old,
            Ok(Locked::Unknown(message)) => {
                // It may land yet: no later write to this item may carry its id.
                unknown += 1;
                unknown_seen.store(true, std::sync::atomic::Ordering::Relaxed);
                tracing::warn!(tx_id = %h.id, action = a.index, %message, "a lock write's outcome is unknown; the next carries a new id");
                id = id.and_then(LockId::next);
                if id.is_none() || unknown as usize >= ITEM_LOCK_WRITES / 2 {
                    return Err(TxError::DynamoDb { op: "UpdateItem", message });
                }
                crate::dynamo::store::backoff(unknown).await;
                continue;
            }
        };
        let next = match (&old, lock_holder_of(&old)) {
            (Some(item), Some(holder)) => met_lock(store, m, h, a, pass, &mut id, &write, item, holder).await?,
            _ => met_unlocked(a, &write, old),
        };
        match next {
            Next::Done(lock) => return Ok((lock, id)),
            Next::Send(w) => write = w,
        }
    }
    Err(TxError::Contended { holder: "unknown".into(), item: value::key_display(&a.table, &a.key) })
}

/// Whether `pass` may send no more writes. A pass sends nothing later than the operation timeout after it started, so
/// a lock write of it is signed by then, whatever holds its driver up: what bounds how late one may land
/// (`Config::revisit_after`). The items it has not reached go to the next pass.
pub(super) fn pass_over(store: &Store, pass: Pass) -> bool {
    match pass {
        Pass::Id(p, _) => crate::model::value::now_ms() > p + store.cfg.operation_timeout.as_millis() as u64,
        Pass::Legacy => false,
    }
}

/// Sends `write`; `Err` when the action cannot be locked at all (its condition cannot be evaluated on a tombstone).
pub(super) async fn send_write(
    store: &Store,
    m: &Meter,
    owner: &str,
    a: &Action,
    write: &Write,
    id: Option<LockId>,
) -> Result<Result<Locked, ItemLock>, TxError> {
    Ok(Ok(match write {
        Write::Tombstone(stone) => {
            let caller = tombstone_condition(a)?;
            if caller.as_ref().is_some_and(|c| c.len() + LOCK_CONDITION_BYTES > expr::MAX_EXPR_BYTES) {
                let msg = format!(
                    "{}: the condition, evaluated on a tombstone as on an absent item, needs more than DynamoDB's {} bytes",
                    a.describe(),
                    expr::MAX_EXPR_BYTES
                );
                return Ok(Err(ItemLock::Failed(CancellationReason::new(CancellationReason::VALIDATION_ERROR, msg))));
            }
            lock_tombstone(store, m, owner, a, stone, caller.as_deref(), id).await?
        }
        Write::TakeOver => take_over(store, m, owner, a, id.expect("a pass with ids takes locks over")).await?,
        Write::Guess(absent) => {
            let schema = store.schema(m, &a.table).await?;
            lock_plain(store, m, owner, a, schema.partition_key(), *absent, id).await?
        }
    }))
}

/// What a lock run does after a write that did not lock its item.
pub(super) enum Next {
    Done(ItemLock),
    Send(Write),
}

/// After a write met `item` locked by `holder`: this attempt's own lock is the lock (an earlier pass's is taken over),
/// an earlier attempt's is let go, and another transaction's is contention.
#[allow(clippy::too_many_arguments)]
pub(super) async fn met_lock(
    store: &Store,
    m: &Meter,
    h: &Header,
    a: &Action,
    pass: Pass,
    id: &mut Option<LockId>,
    write: &Write,
    item: &Item,
    holder: &str,
) -> Result<Next, TxError> {
    if holder == h.owner() {
        match (pass, LockId::of(item)) {
            // This pass's own earlier write, whose outcome was unknown, landed: one copy, already landed, so its id
            // is this lock's.
            (Pass::Id(p, _), Some(f)) if f.pass == p => *id = Some(f),
            (Pass::Id(p, _), Some(f)) if f.pass > p => return Ok(Next::Done(ItemLock::Superseded)),
            (Pass::Id(..), _) if *write != Write::TakeOver => return Ok(Next::Send(Write::TakeOver)),
            (Pass::Id(..), _) => {
                return Err(TxError::Internal(format!(
                    "{}: an earlier pass's lock was not taken over: {item:?}",
                    a.describe()
                )))
            }
            // Locked by an earlier run of this phase.
            (Pass::Legacy, _) => {}
        }
        // The item as it was is the item without the lock, unless the lock created it.
        let before = (!crate::model::item_attrs::flag(item, ATTR_TRANSIENT))
            .then(|| crate::model::item_attrs::strip_reserved(item.clone()));
        return Ok(Next::Done(locked(store, m, h, a, before.as_ref()).await?));
    }
    if records::parse_owner(holder).0 == h.id {
        // A late worker of an earlier attempt of this transaction locked it after that attempt was rolled back: let
        // that lock go and try again.
        release_key(store, m, holder, &a.table, &a.key, Release::Keep, None).await?;
        return Ok(Next::Send(Write::Guess(false)));
    }
    Ok(Next::Done(ItemLock::Contended(Contention {
        holder: holder.to_string(),
        action: Some(a.index),
        item: value::key_display(&a.table, &a.key),
        key: Some((a.table.clone(), a.key.clone())),
        locked: true,
    })))
}

/// After `write` failed on an item no lock holds (`old`: absent, a tombstone or an item): the write that fits it, or
/// the caller's condition failed when that write was the one sent.
pub(super) fn met_unlocked(a: &Action, write: &Write, old: Option<Item>) -> Next {
    let next = match &old {
        Some(o) if is_tombstone(o) => Write::Tombstone(o.clone()),
        None => Write::Guess(true),
        Some(_) => Write::Guess(false),
    };
    // No lock to take over: lock it as any other item.
    if *write == Write::TakeOver || next != *write {
        return Next::Send(next);
    }
    // The same write failed on the same item: the caller's condition does not hold.
    let mut r = CancellationReason::new(
        CancellationReason::CONDITIONAL_CHECK_FAILED,
        CancellationReason::CONDITION_FAILED_MESSAGE,
    );
    if a.return_old && !matches!(write, Write::Tombstone(_)) {
        r.item = old.map(|o| item_to_json(&crate::model::item_attrs::strip_reserved(o)));
    }
    Next::Done(ItemLock::Failed(r))
}

/// What one lock write came to.
pub(super) enum Locked {
    /// Locked by this write; the item as it was (none when absent).
    Now(Option<Item>),
    /// Not locked by this write; the item as it is (none when absent).
    Not(Option<Item>),
    /// Sent once, with no answer that says whether DynamoDB carried it out.
    Unknown(String),
}

/// Sends a lock write: once when it carries an id (so that no second copy of it can land), otherwise as any write.
pub(super) async fn send_lock(
    store: &Store,
    m: &Meter,
    req: aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder,
    id: Option<LockId>,
) -> Result<Locked, TxError> {
    let written = match id {
        Some(_) => match store.update_once(m, req).await? {
            Once::Known(w) => w,
            Once::Unknown(message) => return Ok(Locked::Unknown(message)),
        },
        None => store.update(m, req).await?,
    };
    Ok(match written {
        Written::Done(before) => Locked::Now(before),
        Written::ConditionFailed(old) => Locked::Not(old),
    })
}

/// The value of `_sagaLockedAt` a lock write sets: its id, or the time on a transaction begun before lock ids.
pub(super) fn locked_at(id: Option<LockId>) -> AttributeValue {
    match id {
        Some(id) => AttributeValue::N(id.number()),
        None => now(),
    }
}

/// An item locked by `h`'s attempt, with the item as it was before the transaction (`None`: absent): protocol 2
/// evaluates the action's update on it.
pub(super) async fn locked(
    store: &Store,
    m: &Meter,
    h: &Header,
    a: &Action,
    before: Option<&Item>,
) -> Result<ItemLock, TxError> {
    if !h.commits_first() || a.op != Op::Update {
        return Ok(ItemLock::Locked);
    }
    let schema = store.schema(m, &a.table).await?;
    Ok(match evaluate(a, before, &schema) {
        Err(e) => {
            let message = format!("{}: {e}", a.describe());
            ItemLock::Refused(CancellationReason::new(CancellationReason::VALIDATION_ERROR, message))
        }
        Ok(after) => match store.cfg.judged() {
            PrecommitCheck::All => ItemLock::Judge,
            PrecommitCheck::NearLimits if dynamo_saga_expressions::eval::near_limits(&after, &schema.key_types()) => {
                ItemLock::Judge
            }
            _ => ItemLock::Locked,
        },
    })
}

/// The condition of the write that locks an item expected `absent` or present (not a tombstone): the caller's
/// condition, if any, joined to the lock's own.
pub(crate) fn lock_condition(absent: bool, caller: Option<&str>) -> String {
    let own = if absent {
        format!("attribute_not_exists({})", ph::PK)
    } else {
        format!(
            "attribute_exists({}) AND attribute_not_exists({}) AND attribute_not_exists({})",
            ph::PK,
            ph::LOCK,
            ph::TOMBSTONE
        )
    };
    match caller {
        Some(c) => expr::and(&own, c),
        None => own,
    }
}

/// Locks an item that is absent or present (not a tombstone) for `owner` (the attempt's lock value), its lock
/// carrying `id`.
pub(super) async fn lock_plain(
    store: &Store,
    m: &Meter,
    owner: &str,
    a: &Action,
    pk: &str,
    absent: bool,
    id: Option<LockId>,
) -> Result<Locked, TxError> {
    let refs = match &a.condition {
        Some(c) => expr::parse_condition(c).map_err(|e| TxError::Internal(format!("stored condition: {e}")))?,
        None => Default::default(),
    };
    let (names, values) = used(a, &refs);
    let set = if absent {
        format!("SET {} = {}, {} = {}, {} = {}", ph::LOCK, ph::TX, ph::LOCKED_AT, ph::NOW, ph::TRANSIENT, ph::TRUE)
    } else {
        format!("SET {} = {}, {} = {}", ph::LOCK, ph::TX, ph::LOCKED_AT, ph::NOW)
    };
    let cond = lock_condition(absent, a.condition.as_deref());
    let mut req = store
        .client
        .update_item()
        .table_name(&a.table)
        .set_key(Some(a.key.clone()))
        .update_expression(set)
        .condition_expression(cond)
        .set_expression_attribute_names(Some(names))
        .set_expression_attribute_values(Some(values))
        .expression_attribute_names(ph::PK, pk)
        .expression_attribute_names(ph::LOCK, ATTR_LOCK)
        .expression_attribute_names(ph::LOCKED_AT, ATTR_LOCKED_AT)
        .expression_attribute_values(ph::TX, s(owner))
        .expression_attribute_values(ph::NOW, locked_at(id))
        .return_values(aws_sdk_dynamodb::types::ReturnValue::AllOld);
    req = if absent {
        req.expression_attribute_names(ph::TRANSIENT, ATTR_TRANSIENT)
            .expression_attribute_values(ph::TRUE, AttributeValue::Bool(true))
    } else {
        req.expression_attribute_names(ph::TOMBSTONE, ATTR_TOMBSTONE)
    };
    send_lock(store, m, req, id).await
}

/// Gives the lock `owner` holds on an item, taken by an earlier pass of the attempt, the id `id`: conditioned on the
/// lock's id being older (or absent), so that neither a late copy of this write nor one of the earlier pass's can
/// undo it, and a later pass's lock is left alone.
pub(super) async fn take_over(
    store: &Store,
    m: &Meter,
    owner: &str,
    a: &Action,
    id: LockId,
) -> Result<Locked, TxError> {
    let req = store
        .client
        .update_item()
        .table_name(&a.table)
        .set_key(Some(a.key.clone()))
        .update_expression(format!("SET {} = {}", ph::LOCKED_AT, ph::NOW))
        .condition_expression(format!(
            "{} = {} AND (attribute_not_exists({}) OR {} < {})",
            ph::LOCK,
            ph::TX,
            ph::LOCKED_AT,
            ph::LOCKED_AT,
            ph::NOW
        ))
        .expression_attribute_names(ph::LOCK, ATTR_LOCK)
        .expression_attribute_names(ph::LOCKED_AT, ATTR_LOCKED_AT)
        .expression_attribute_values(ph::TX, s(owner))
        .expression_attribute_values(ph::NOW, locked_at(Some(id)))
        .return_values(aws_sdk_dynamodb::types::ReturnValue::AllOld);
    send_lock(store, m, req, Some(id)).await
}

/// The caller's condition as a tombstone sees it: every attribute it reads but the ratchet's redirected to one that
/// no item has.
pub(super) fn tombstone_condition(a: &Action) -> Result<Option<String>, TxError> {
    a.condition
        .as_deref()
        .map(|c| expr::redirect_paths(c, &[crate::model::request::RATCHET_NAME], ph::GONE))
        .transpose()
        .map_err(|e| TxError::Internal(format!("stored condition: {e}")))
}

/// Room the lock's own conditions take beside the caller's, in bytes.
pub(super) const LOCK_CONDITION_BYTES: usize = 200;

/// Locks the tombstone `stone` (as last read) by replacing it with a transient lock item that keeps it; `caller` is
/// the caller's condition from [`tombstone_condition`].
pub(super) async fn lock_tombstone(
    store: &Store,
    m: &Meter,
    owner: &str,
    a: &Action,
    stone: &Item,
    caller: Option<&str>,
    id: Option<LockId>,
) -> Result<Locked, TxError> {
    let refs = match caller {
        Some(c) => expr::parse_condition(c).map_err(|e| TxError::Internal(format!("redirected condition: {e}")))?,
        None => Default::default(),
    };
    let (names, values) = used(a, &refs);
    let mut cond = format!("{} = {} AND attribute_not_exists({})", ph::TOMBSTONE, ph::SEEN, ph::LOCK);
    if let Some(c) = caller {
        cond = expr::and(&cond, c);
    }
    let mut item = a.key.clone();
    item.insert(ATTR_LOCK.into(), s(owner));
    item.insert(ATTR_LOCKED_AT.into(), locked_at(id));
    item.insert(ATTR_TRANSIENT.into(), AttributeValue::Bool(true));
    item.insert(ATTR_STONE.into(), AttributeValue::M(stone.clone()));
    let mut req = store
        .client
        .put_item()
        .table_name(&a.table)
        .set_item(Some(item))
        .condition_expression(cond)
        .set_expression_attribute_names(Some(names))
        .set_expression_attribute_values(Some(values))
        .expression_attribute_names(ph::TOMBSTONE, ATTR_TOMBSTONE)
        .expression_attribute_names(ph::LOCK, ATTR_LOCK)
        .expression_attribute_values(ph::SEEN, stone[ATTR_TOMBSTONE].clone());
    if refs.name_placeholders.contains(ph::GONE) {
        req = req.expression_attribute_names(ph::GONE, ATTR_GONE);
    }
    let written = match id {
        Some(_) => match store.put_once(m, req).await? {
            Once::Known(w) => w,
            Once::Unknown(message) => return Ok(Locked::Unknown(message)),
        },
        None => store.put(m, req).await?,
    };
    Ok(match written {
        // The tombstone reads as absent.
        Written::Done(_) => Locked::Now(None),
        Written::ConditionFailed(old) => Locked::Not(old),
    })
}

pub(super) fn lock_holder_of(old: &Option<crate::model::value::Item>) -> Option<&str> {
    old.as_ref().and_then(lock_holder)
}

/// The parent lock (fenced: every write of the transaction depends on it): `lockToken` on the parent item, which must
/// exist, with the DynamoDB Lock Client's lease and record version number. A lock an earlier attempt of this
/// transaction left is let go first.
pub(super) async fn lock_parent(store: &Store, m: &Meter, h: &Header, p: &Parent) -> Result<ItemLock, TxError> {
    let owner = h.owner();
    for _ in 0..3 {
        let l = match lock_parent_once(store, m, &owner, p).await? {
            ParentLock::Done(l) => return Ok(l),
            ParentLock::Held(l) => l,
        };
        if records::parse_owner(&l.holder).0 != h.id {
            return Ok(ItemLock::Contended(Contention {
                holder: l.holder,
                action: None,
                item: value::key_display(&p.table_name, &p.key),
                key: None,
                locked: true,
            }));
        }
        unlock_parent(store, m, p, &l.holder).await?;
    }
    Err(TxError::Contended { holder: h.id.clone(), item: value::key_display(&p.table_name, &p.key) })
}

pub(super) enum ParentLock {
    Done(ItemLock),
    /// Held by another lock value.
    Held(crate::model::item_attrs::ParentLockAttrs),
}

pub(super) async fn lock_parent_once(store: &Store, m: &Meter, owner: &str, p: &Parent) -> Result<ParentLock, TxError> {
    let pk = store.schema(m, &p.table_name).await?.key_names[0].clone();
    let req = store
        .client
        .update_item()
        .table_name(&p.table_name)
        .set_key(Some(p.key.clone()))
        .update_expression(format!(
            "SET {} = {}, {} = {}, {} = {}, {} = {}",
            ph::PARENT_TOKEN, ph::TX, ph::PARENT_AT, ph::NOW, ph::PARENT_LEASE, ph::LEASE, ph::PARENT_RVN, ph::RVN
        ))
        .condition_expression(format!(
            "attribute_exists({}) AND attribute_not_exists({}) AND attribute_not_exists({}) AND (attribute_not_exists({}) OR {} = {})",
            ph::PK, ph::TOMBSTONE, ph::STONE, ph::PARENT_TOKEN, ph::PARENT_TOKEN, ph::TX
        ))
        .expression_attribute_names(ph::TOMBSTONE, ATTR_TOMBSTONE)
        .expression_attribute_names(ph::STONE, ATTR_STONE)
        .expression_attribute_names(ph::PK, pk)
        .expression_attribute_values(ph::TX, s(owner))
        .expression_attribute_values(ph::NOW, now())
        .expression_attribute_values(ph::LEASE, n(store.cfg.lease.as_secs()))
        .expression_attribute_values(ph::RVN, new_rvn());
    let req = parent_lock_names(req);
    let missing = || {
        ItemLock::Failed(CancellationReason::new(
            CancellationReason::CONDITIONAL_CHECK_FAILED,
            format!("the Parent item {} does not exist", value::key_display(&p.table_name, &p.key)),
        ))
    };
    Ok(match store.update(m, req).await? {
        Written::Done(_) => ParentLock::Done(ItemLock::Locked),
        Written::ConditionFailed(None) => ParentLock::Done(missing()),
        // A tombstone, or a lock item standing in for one: the parent does not exist.
        Written::ConditionFailed(Some(old)) if is_tombstone(&old) || old.contains_key(ATTR_STONE) => {
            ParentLock::Done(missing())
        }
        Written::ConditionFailed(Some(old)) => match crate::model::item_attrs::ParentLockAttrs::of(&old) {
            Some(l) if l.holder == owner => ParentLock::Done(ItemLock::Locked),
            Some(l) => ParentLock::Held(l),
            None => return Err(TxError::Internal("the parent lock condition failed on an unlocked parent".into())),
        },
    })
}
