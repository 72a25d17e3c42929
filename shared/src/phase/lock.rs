//! lock: take the parent lock (first batch) and every item's lock. A run locks up to [`RUN_BATCHES`](crate::constants::RUN_BATCHES) batches at once,
//! every item of them with up to `SAGA_IN_FLIGHT` writes in flight, and then records them locked with one header
//! write; a run that meets another transaction's lock records the batches before it.
//!
//! The caller's condition is evaluated here, in the same conditional write that takes the lock, on the item as it
//! was before the transaction. An item that does not exist is created to hold the lock and marked transient; the
//! condition still sees it as absent, because the write that creates it is the one that evaluates the condition.
//! Meeting another transaction's lock is contention, reported with the holder, never a failure.
//!
//! The lock write returns the item as it was (`ReturnValues: ALL_OLD`, at no extra cost; a run that finds its own lock
//! gets it back from the failed condition). Protocol 2 evaluates each update there ([`crate::eval::apply_update`],
//! with the table's key and index key types): an update DynamoDB would refuse cancels the transaction with
//! `ValidationError` on that action, before anything can commit. A failed condition anywhere takes precedence, as
//! it does in a `TransactWriteItems` call.

use aws_sdk_dynamodb::types::AttributeValue;

use super::parent::{beat_parent, new_rvn, parent_lock_names, unlock_parent};
use super::{
    concurrently, decided, evaluate, in_state, now, ph, progress, queue, release_item, release_key, used, Contention,
    Outcome, Release, Report,
};
use crate::config::PrecommitCheck;
use crate::constants::{
    ATTR_GONE, ATTR_LOCK, ATTR_LOCKED_AT, ATTR_STONE, ATTR_TOMBSTONE, ATTR_TRANSIENT, H_LOCKED, H_LOCK_STARTED,
    MAX_TRANSACT_ACTIONS,
};
use crate::error::{CancellationReason, TxError};
use crate::items::lock_holder;
use crate::plan::Part;
use crate::records::{Decision, Header, TxState};
use crate::request::{is_tombstone, Action, Op, Parent};
use crate::store::{Meter, Store, Written};
use crate::value::{self, item_to_json, Item};
use crate::value::{n, s};
use crate::{expr, records};

enum ItemLock {
    Locked,
    /// Locked, and the write apply will send is one for DynamoDB to judge before the commit (protocol 2,
    /// [`crate::config::PrecommitCheck`]).
    Judge,
    /// Locked, and DynamoDB would refuse the action's update (protocol 2).
    Refused(CancellationReason),
    Failed(CancellationReason),
    Contended(Contention),
}

pub async fn lock(store: &Store, tx_id: &str, batch: usize) -> Result<Report, TxError> {
    let m = Meter::default();
    let h = records::read_header(store, &m, tx_id).await?;
    lock_from(store, m, h, batch).await
}

/// [`lock`] from the header `h` its caller has just read.
pub(crate) async fn lock_from(store: &Store, m: Meter, h: Header, batch: usize) -> Result<Report, TxError> {
    let h = match in_state(h, TxState::Pending) {
        Ok(h) => h,
        Err(state) => return Ok(Report::new(Outcome::Ended { state }, &m)),
    };
    let tx_id = h.id.as_str();
    if batch >= h.batches {
        return Err(TxError::Internal(format!("batch {batch} is out of range ({} batches)", h.batches)));
    }
    if h.locked > batch {
        return Ok(Report::new(Outcome::Done, &m));
    }
    if batch == 0 {
        // Another attempt first waits, holding nothing, for the transaction that rolled the last one back to end;
        // starting at once would take the locks that one is waiting for.
        if let Some(w) = &h.wait_for {
            if running(store, &m, &w.holder).await? {
                let c = Contention {
                    holder: w.holder.clone(),
                    action: w.action,
                    item: w.item.clone(),
                    key: None,
                    locked: false,
                };
                return Ok(Report::new(Outcome::Contended(c), &m));
            }
        }
        if let Some(p) = &h.parent {
            // FIFO: take a ticket, and try for the parent only when nobody is queued ahead.
            let ticket = queue::enqueue(store, &m, &h, p).await?;
            if let Some(holder) = queue::ahead(store, &m, tx_id, p, ticket).await? {
                let c = Contention {
                    holder,
                    action: None,
                    item: value::key_display(&p.table_name, &p.key),
                    key: None,
                    locked: false,
                };
                return Ok(Report::new(Outcome::Contended(c), &m));
            }
            match lock_parent(store, &m, &h, p).await? {
                ItemLock::Locked | ItemLock::Judge => {
                    queue::leave(store, &m, &records::Header { parent_ticket: Some(ticket), ..h.clone() }).await?
                }
                ItemLock::Contended(c) => return Ok(Report::new(Outcome::Contended(c), &m)),
                ItemLock::Failed(r) | ItemLock::Refused(r) => {
                    return Ok(Report::new(decided(store, &m, &h, &Decision::parent(r)).await?, &m))
                }
            }
        }
    }
    let plan = crate::stored::read_plan(store, &m, tx_id).await?;
    let run = super::run_from(batch, h.batches);
    let mut met = Met::default();
    lock_run(store, &m, &h, &plan, run.clone(), &mut met).await?;
    let Met { mut failed, mut refused, mut contention } = met;
    if !failed.is_empty() || (!refused.is_empty() && contention.is_empty()) {
        // DynamoDB reports every failing condition of a transaction; for transactions it could have run itself, do
        // the same by evaluating the remaining batches too.
        if h.actions <= MAX_TRANSACT_ACTIONS && run.end < plan.batch_count() {
            let mut later = Met::default();
            lock_run(store, &m, &h, &plan, run.end..plan.batch_count(), &mut later).await?;
            failed.append(&mut later.failed);
            refused.append(&mut later.refused);
        }
        let reasons = if failed.is_empty() { refused } else { failed };
        return Ok(Report::new(decided(store, &m, &h, &Decision::actions(reasons)).await?, &m));
    }
    // The batches before the first one that met another transaction's lock are locked whole: the run after the wait
    // starts there.
    let done = contention.iter().map(|c| c.batch).min().unwrap_or(run.end);
    if done > batch && batch > 0 {
        beat_parent(store, &m, &h).await?;
    }
    let ended = if done > batch { progress(store, &m, &h, H_LOCKED, done).await? } else { None };
    if let Some(ended) = ended {
        // The transaction was decided while this run was taking locks: whoever decided it may already have passed
        // these items, so let go of them here. Not after a commit of protocol 2: its locks are its items' "not
        // applied yet" marks, which only apply removes.
        if h.commits_first() && ended == (Outcome::Ended { state: TxState::Committed }) {
            return Ok(Report::new(ended, &m));
        }
        let actions = crate::stored::read_batches(store, &m, tx_id, &plan, run, Part::Heads).await?;
        let owner = h.owner();
        concurrently(actions, store.cfg.concurrency, |(_, _, a)| {
            let (m, owner) = (&m, &owner);
            async move { release_item(store, m, owner, &a, Release::Keep).await }
        })
        .await?;
        return Ok(Report::new(ended, &m));
    }
    if !contention.is_empty() {
        contention.sort_by_key(|c| c.contention.action);
        let mut contention = contention.into_iter().map(|c| c.contention);
        let first = contention.next().expect("a contention");
        let mut r = Report::new(Outcome::Contended(first), &m);
        r.also_contended = contention.collect();
        return Ok(r);
    }
    Ok(Report::new(Outcome::Done, &m))
}

/// What a lock run met besides locks taken.
#[derive(Default)]
struct Met {
    /// Conditions that failed.
    failed: Vec<(usize, CancellationReason)>,
    /// Updates DynamoDB would refuse (protocol 2).
    refused: Vec<(usize, CancellationReason)>,
    /// Items other transactions hold.
    contention: Vec<Held>,
}

/// An item another transaction holds, and the batch it is in.
struct Held {
    batch: usize,
    contention: Contention,
}

/// Records that locking of the batches of `run` has begun (so a rollback looks at them), then locks their items, all
/// of them at once. The locks are taken in no order: item locks go by age (wound-wait,
/// [`crate::drive::Driver::resolve`]), so of two transactions that each hold an item the other needs, the older rolls
/// the younger back and only the younger ever waits, and no two transactions wait for each other.
async fn lock_run(
    store: &Store,
    m: &Meter,
    h: &Header,
    plan: &crate::plan::Plan,
    run: std::ops::Range<usize>,
    met: &mut Met,
) -> Result<(), TxError> {
    if h.lock_started < run.end
        && !records::update_header(
            store,
            m,
            &h.id,
            records::Expect::at(h),
            &[],
            Some((H_LOCK_STARTED, run.end)),
            &Default::default(),
        )
        .await?
    {
        let now = records::read_header(store, m, &h.id).await?;
        if now.state != TxState::Pending || now.attempt != h.attempt {
            return Ok(());
        }
    }
    let actions = crate::stored::read_batches(store, m, &h.id, plan, run, Part::Heads).await?;
    let results = concurrently(actions, store.cfg.concurrency, |(batch, _, a)| async move {
        let r = match lock_item(store, m, h, &a).await {
            // DynamoDB refuses the lock write itself (the caller's condition, say, with a value it refuses): the
            // request's fault, named as `TransactWriteItems` names it, before anything can commit.
            Err(TxError::DynamoDb { message, .. }) if message.starts_with("ValidationException") => {
                let message = format!("{}: {message}", a.describe());
                ItemLock::Refused(CancellationReason::new(CancellationReason::VALIDATION_ERROR, message))
            }
            other => other?,
        };
        Ok((batch, a, r))
    })
    .await?;
    let mut judge = Vec::new();
    for (batch, a, r) in results {
        match r {
            ItemLock::Locked => {}
            ItemLock::Judge => judge.push(a),
            ItemLock::Refused(reason) => met.refused.push((a.index, reason)),
            ItemLock::Failed(reason) => met.failed.push((a.index, reason)),
            ItemLock::Contended(contention) => met.contention.push(Held { batch, contention }),
        }
    }
    if !judge.is_empty() && met.failed.is_empty() && met.refused.is_empty() {
        let owner = h.owner();
        let writes = judge
            .iter()
            .map(|a| Ok((a.index, super::apply::judged_write(a, &owner)?)))
            .collect::<Result<Vec<_>, TxError>>()?;
        for (index, message) in crate::judge::judge(store, m, &h.id, writes).await?.refused {
            let a = judge.iter().find(|a| a.index == index).map(|a| a.describe()).unwrap_or_default();
            let message = format!("{a}: {message}");
            met.refused.push((index, CancellationReason::new(CancellationReason::VALIDATION_ERROR, message)));
        }
    }
    Ok(())
}

/// What the lock expects to find at an item's key.
#[derive(Clone, PartialEq)]
enum Found {
    Absent,
    Present,
    /// A tombstone, as last read; the lock is conditional on its `_sagaTombstone` (the id of the transaction that
    /// wrote it) being unchanged.
    Tombstone(Item),
}

/// Locks one item with the caller's condition. The first try guesses whether the item exists (inserts usually say
/// so with `attribute_not_exists`); a wrong guess costs one failed conditional write and is corrected from the item
/// DynamoDB returns.
///
/// A tombstone is locked as an absent item: it is replaced by an item that holds the lock, marked transient, with
/// the tombstone kept in [`ATTR_STONE`] to be put back unless the transaction writes the item. The caller's condition
/// is evaluated on the tombstone with every attribute it reads redirected to one that never exists, except a
/// `Ratchet`'s, which compares against the tombstone's timestamp.
async fn lock_item(store: &Store, m: &Meter, h: &Header, a: &Action) -> Result<ItemLock, TxError> {
    let owner = h.owner();
    let pk = store.schema(m, &a.table).await?.key_names[0].clone();
    let absent_guess = a.op == Op::Put
        && a.condition
            .as_deref()
            .is_some_and(|c| c.replace(crate::request::RATCHET_CONDITION, "").contains("attribute_not_exists"));
    let mut found = if absent_guess { Found::Absent } else { Found::Present };
    for _ in 0..6 {
        let old = match &found {
            Found::Tombstone(stone) => {
                let caller = tombstone_condition(a)?;
                if caller.as_ref().is_some_and(|c| c.len() + LOCK_CONDITION_BYTES > expr::MAX_EXPR_BYTES) {
                    let msg = format!(
                        "{}: the condition, evaluated on a tombstone as on an absent item, needs more than DynamoDB's {} bytes",
                        a.describe(),
                        expr::MAX_EXPR_BYTES
                    );
                    return Ok(ItemLock::Failed(CancellationReason::new(CancellationReason::VALIDATION_ERROR, msg)));
                }
                lock_tombstone(store, m, &owner, a, stone, caller.as_deref()).await?
            }
            _ => lock_plain(store, m, &owner, a, &pk, found == Found::Absent).await?,
        };
        let old = match old {
            Locked::Now(before) => {
                let before = before.filter(|b| !is_tombstone(b)).map(crate::items::strip_reserved);
                return locked(store, m, h, a, before.as_ref()).await;
            }
            Locked::Not(old) => old,
        };
        let next = match (&old, lock_holder_of(&old)) {
            (Some(item), Some(o)) if o == owner => {
                // Locked by an earlier run of this phase: the item as it was is the item without the lock, unless the
                // lock created it.
                let before =
                    (!crate::items::flag(item, ATTR_TRANSIENT)).then(|| crate::items::strip_reserved(item.clone()));
                return locked(store, m, h, a, before.as_ref()).await;
            }
            (_, Some(o)) if records::parse_owner(o).0 == h.id => {
                // A late worker of an earlier attempt of this transaction locked it after that attempt was rolled
                // back: let that lock go and try again.
                release_key(store, m, o, &a.table, &a.key, Release::Keep).await?;
                found = Found::Present;
                continue;
            }
            (_, Some(o)) => {
                return Ok(ItemLock::Contended(Contention {
                    holder: o.to_string(),
                    action: Some(a.index),
                    item: value::key_display(&a.table, &a.key),
                    key: Some((a.table.clone(), a.key.clone())),
                    locked: true,
                }))
            }
            (None, None) => Found::Absent,
            (Some(o), None) if is_tombstone(o) => Found::Tombstone(o.clone()),
            (Some(_), None) => Found::Present,
        };
        if next == found {
            let mut r = CancellationReason::new(
                CancellationReason::CONDITIONAL_CHECK_FAILED,
                CancellationReason::CONDITION_FAILED_MESSAGE,
            );
            if a.return_old && found == Found::Present {
                r.item = old.map(|o| item_to_json(&crate::items::strip_reserved(o)));
            }
            return Ok(ItemLock::Failed(r));
        }
        found = next;
    }
    Err(TxError::Contended { holder: "unknown".into(), item: value::key_display(&a.table, &a.key) })
}

/// What one lock write came to.
enum Locked {
    /// Locked by this write; the item as it was (none when absent).
    Now(Option<Item>),
    /// Not locked by this write; the item as it is (none when absent).
    Not(Option<Item>),
}

/// An item locked by `h`'s attempt, with the item as it was before the transaction (`None`: absent): protocol 2
/// evaluates the action's update on it.
async fn locked(store: &Store, m: &Meter, h: &Header, a: &Action, before: Option<&Item>) -> Result<ItemLock, TxError> {
    if !h.commits_first() || a.op != Op::Update {
        return Ok(ItemLock::Locked);
    }
    let schema = store.schema(m, &a.table).await?;
    Ok(match evaluate(a, before, &schema) {
        Err(e) => {
            let message = format!("{}: {e}", a.describe());
            ItemLock::Refused(CancellationReason::new(CancellationReason::VALIDATION_ERROR, message))
        }
        Ok(after) => match store.cfg.precommit_check {
            PrecommitCheck::All => ItemLock::Judge,
            PrecommitCheck::NearLimits if crate::eval::near_limits(&after, &schema.key_types()) => ItemLock::Judge,
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

/// Locks an item that is absent or present (not a tombstone) for `owner` (the attempt's lock value).
async fn lock_plain(
    store: &Store,
    m: &Meter,
    owner: &str,
    a: &Action,
    pk: &str,
    absent: bool,
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
        .expression_attribute_values(ph::NOW, now())
        .return_values(aws_sdk_dynamodb::types::ReturnValue::AllOld);
    req = if absent {
        req.expression_attribute_names(ph::TRANSIENT, ATTR_TRANSIENT)
            .expression_attribute_values(ph::TRUE, AttributeValue::Bool(true))
    } else {
        req.expression_attribute_names(ph::TOMBSTONE, ATTR_TOMBSTONE)
    };
    Ok(match store.update(m, req).await? {
        Written::Done(before) => Locked::Now(before),
        Written::ConditionFailed(old) => Locked::Not(old),
    })
}

/// The caller's condition as a tombstone sees it: every attribute it reads but the ratchet's redirected to one that
/// no item has.
fn tombstone_condition(a: &Action) -> Result<Option<String>, TxError> {
    a.condition
        .as_deref()
        .map(|c| expr::redirect_paths(c, &[crate::request::RATCHET_NAME], ph::GONE))
        .transpose()
        .map_err(|e| TxError::Internal(format!("stored condition: {e}")))
}

/// Room the lock's own conditions take beside the caller's, in bytes.
const LOCK_CONDITION_BYTES: usize = 200;

/// Locks the tombstone `stone` (as last read) by replacing it with a transient lock item that keeps it; `caller` is
/// the caller's condition from [`tombstone_condition`].
async fn lock_tombstone(
    store: &Store,
    m: &Meter,
    owner: &str,
    a: &Action,
    stone: &Item,
    caller: Option<&str>,
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
    item.insert(ATTR_LOCKED_AT.into(), now());
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
    Ok(match store.put(m, req).await? {
        // The tombstone reads as absent.
        Written::Done(_) => Locked::Now(None),
        Written::ConditionFailed(old) => Locked::Not(old),
    })
}

fn lock_holder_of(old: &Option<crate::value::Item>) -> Option<&str> {
    old.as_ref().and_then(lock_holder)
}

/// Whether transaction `tx_id` has not ended yet (it may be pending, or decided and not finished).
async fn running(store: &Store, m: &Meter, tx_id: &str) -> Result<bool, TxError> {
    match records::read_header(store, m, tx_id).await {
        Ok(h) => Ok(!h.finished()),
        Err(TxError::NotFound(_)) => Ok(false),
        Err(e) => Err(e),
    }
}

/// The parent lock (seed 003): `lockToken` on the parent item, which must exist, with seed 001's lease and record
/// version number. A lock an earlier attempt of this transaction left is let go first.
async fn lock_parent(store: &Store, m: &Meter, h: &Header, p: &Parent) -> Result<ItemLock, TxError> {
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

enum ParentLock {
    Done(ItemLock),
    /// Held by another lock value.
    Held(crate::items::ParentLockAttrs),
}

async fn lock_parent_once(store: &Store, m: &Meter, owner: &str, p: &Parent) -> Result<ParentLock, TxError> {
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
        Written::ConditionFailed(Some(old)) => match crate::items::ParentLockAttrs::of(&old) {
            Some(l) if l.holder == owner => ParentLock::Done(ItemLock::Locked),
            Some(l) => ParentLock::Held(l),
            None => return Err(TxError::Internal("the parent lock condition failed on an unlocked parent".into())),
        },
    })
}
