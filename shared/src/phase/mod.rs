//! The protocol's phases, one module each, all of one shape:
//! `async fn phase(store, tx_id, batch) -> Result<Report, TxError>`.
//!
//! Every phase starts by reading the header and does nothing unless the transaction is in the state the phase works
//! on, so a coordinator that wakes up late writes nothing. Every write a phase makes is conditional on the item's lock
//! (or the header's state), so running a phase twice, or from two coordinators at once, ends in the same state.

pub mod apply;
pub mod begin;
pub mod commit;
pub mod complete;
pub mod direct;
pub mod lock;
pub mod parent;
pub mod queue;
pub mod release;
pub mod resume;
pub mod retry;
pub mod rollback;
pub mod save;

use std::collections::HashMap;
use std::future::Future;

use aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder;
use aws_sdk_dynamodb::types::AttributeValue;
use futures::StreamExt;
use serde::{Deserialize, Serialize};

use crate::constants::*;
use crate::error::TxError;
use crate::expr::ExprRefs;
use crate::items::lock_holder;
use crate::records::{self, Header, TxState};
use crate::request::Action;
use crate::store::{Meter, Store, Usage, Written};
use crate::value::Item;
use crate::value::{n, now_ms, s};

/// Another transaction holds a lock this transaction needs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Contention {
    /// The holder's transaction id.
    pub holder: String,
    /// The contended action (request order), or `None` for the parent item.
    pub action: Option<usize>,
    /// The contended item, for messages.
    pub item: String,
    /// The contended item's table and key, when it is one of the request's (not sent to the state machine).
    #[serde(skip)]
    pub key: Option<(String, Item)>,
    /// Whether `holder` was read from a lock (an attempt's lock value, see [`records::owner`]) rather than from a
    /// queue row or the transaction an attempt waits for (a transaction id).
    #[serde(skip)]
    pub locked: bool,
}

/// What a phase run came to. Errors are for what must be retried or caught; these are normal outcomes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "Outcome")]
pub enum Outcome {
    /// The phase did its work, or found it already done.
    Done,
    /// Another transaction holds a lock; wait and run the phase again (see [`crate::coordinator`]).
    Contended(Contention),
    /// This run found a reason the transaction cannot commit and decided it `ROLLED_BACK`; roll back next.
    Canceled,
    /// The transaction is no longer in a state this phase works on; nothing was written.
    Ended { state: TxState },
}

/// A phase run's outcome and the DynamoDB usage it cost.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Report {
    #[serde(flatten)]
    pub outcome: Outcome,
    pub usage: Usage,
    /// When the outcome is `Contended`: the batch's other contended items, so every holder can be dealt with at once.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub also_contended: Vec<Contention>,
}

impl Report {
    fn new(outcome: Outcome, m: &Meter) -> Self {
        Self { outcome, usage: m.usage(), also_contended: Vec::new() }
    }
}

/// Placeholders the library adds to requests; callers may not use names starting with `#_saga` / `:_saga`.
pub(crate) mod ph {
    pub const LOCK: &str = "#_sagaL";
    pub const LOCKED_AT: &str = "#_sagaA";
    pub const TRANSIENT: &str = "#_sagaT";
    pub const APPLIED: &str = "#_sagaP";
    pub const PK: &str = "#_sagaK";
    pub const PARENT_TOKEN: &str = "#_sagaLT";
    pub const PARENT_AT: &str = "#_sagaLA";
    pub const PARENT_LEASE: &str = "#_sagaLD";
    pub const PARENT_RVN: &str = "#_sagaRV";
    pub const LEASE: &str = ":_sagaLease";
    pub const RVN: &str = ":_sagaRvn";
    pub const STATE: &str = "#_sagaS";
    pub const TOMBSTONE: &str = "#_sagaTomb";
    pub const STONE: &str = "#_sagaStone";
    /// Stands for an attribute that no item has (see [`crate::expr::redirect_paths`]).
    pub const GONE: &str = "#_sagaGone";
    pub const SEEN: &str = ":_sagaSeen";
    pub const TX: &str = ":_sagaTx";
    pub const NOW: &str = ":_sagaNow";
    pub const TRUE: &str = ":_sagaTrue";
    pub const PENDING: &str = ":_sagaPending";
    pub const ATTEMPT: &str = "#_sagaAttempt";
    pub const ATTEMPT_N: &str = ":_sagaAttempt";
}

/// The batches a lock or apply run from `batch` takes: up to [`crate::constants::RUN_BATCHES`] of the `batches`.
fn run_from(batch: usize, batches: usize) -> std::ops::Range<usize> {
    batch..(batch + crate::constants::RUN_BATCHES).min(batches)
}

/// `h`, when the transaction is in `state` and unfinished; otherwise the state it is in, and the phase ends with
/// nothing written.
fn in_state(h: Header, state: TxState) -> Result<Header, TxState> {
    if h.state != state || h.finished() {
        return Err(h.state);
    }
    Ok(h)
}

/// Records a batch's progress on the header `h` was read from (the watermark only moves forward) together with the
/// run's usage. Returns `Some(outcome)` when the header has left `h`'s state or attempt, which means the run must stop.
async fn progress(
    store: &Store,
    m: &Meter,
    h: &Header,
    watermark: &str,
    value: usize,
) -> Result<Option<Outcome>, TxError> {
    let usage = m.usage();
    if records::update_header(store, m, &h.id, records::Expect::at(h), &[], Some((watermark, value)), &usage).await? {
        return Ok(None);
    }
    let now = records::read_header(store, m, &h.id).await?;
    if now.state != h.state || now.attempt != h.attempt {
        return Ok(Some(Outcome::Ended { state: now.state }));
    }
    Ok(None)
}

/// The caller's names and values that an expression uses (DynamoDB rejects unused ones).
fn used(a: &Action, refs: &ExprRefs) -> (HashMap<String, String>, Item) {
    let names = a
        .names
        .iter()
        .filter(|(k, _)| refs.name_placeholders.contains(*k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let values = a
        .values
        .iter()
        .filter(|(k, _)| refs.value_placeholders.contains(*k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    (names, values)
}

/// The item DynamoDB leaves after update action `a` on `before` (the item as it was before the transaction, without
/// dynamo-saga's attributes; `None`: absent), or the error it raises instead.
pub(crate) fn evaluate(
    a: &Action,
    before: Option<&Item>,
    schema: &crate::request::TableSchema,
) -> Result<Item, crate::eval::EvalError> {
    let (update, names, values) = update_parts(a);
    crate::eval::apply_update(before, &a.key, update, &names, &values, &schema.key_types())
}

/// Why DynamoDB would refuse update action `a` whatever the item it meets ([`crate::eval::check_update`]): what
/// begin checks, from the request alone.
pub(crate) fn check_update(a: &Action, schema: &crate::request::TableSchema) -> Result<(), crate::eval::EvalError> {
    let (update, names, values) = update_parts(a);
    crate::eval::check_update(&a.key, update, &names, &values, &schema.key_types()).map(|_| ())
}

/// Whether action `a`'s expressions still fit DynamoDB's limits with what the protocol adds to them: the lock's
/// condition, and the removal of the lock attributes in an update's apply. An expression native takes within a
/// hundred bytes of 4 KB may not leave that room; it is refused before anything is written.
pub(crate) fn check_room(a: &Action) -> Result<(), String> {
    if let Some(c) = &a.condition {
        crate::expr::parse_condition(&lock::lock_condition(false, Some(c)))
            .map_err(|e| format!("ConditionExpression with the lock's condition: {e}"))?;
    }
    if a.op == crate::request::Op::Update {
        let applied = apply::applied_update_expression(a).map_err(|e| e.to_string())?;
        crate::expr::parse_update(&applied)
            .map_err(|e| format!("UpdateExpression with the lock attributes' removal: {e}"))?;
    }
    Ok(())
}

/// Update action `a`'s expression with the names and values it uses (the action's also serve its condition).
fn update_parts(a: &Action) -> (&str, HashMap<String, String>, Item) {
    let update = a.update.as_deref().unwrap_or_default();
    let (names, values) = match crate::expr::parse_update(update) {
        Ok(parsed) => used(a, &parsed.refs),
        Err(_) => (a.names.clone(), a.values.clone()),
    };
    (update, names, values)
}

/// Why DynamoDB would refuse action `a`'s update on `before` (see [`evaluate`]), or `None` when it accepts it or `a`
/// is not an update.
fn refusal(a: &Action, before: Option<&Item>, schema: &crate::request::TableSchema) -> Option<String> {
    if a.op != crate::request::Op::Update {
        return None;
    }
    evaluate(a, before, schema).err().map(|e| format!("{}: {e}", a.describe()))
}

/// Runs `f` over `items` with at most `limit` in flight, starting the next as soon as any one ends (a slow write holds
/// one place, not the whole window), and returns the results in the order of `items`.
async fn concurrently<T, R, F, Fut>(items: Vec<T>, limit: usize, f: F) -> Result<Vec<R>, TxError>
where
    F: Fn(T) -> Fut,
    Fut: Future<Output = Result<R, TxError>>,
{
    let f = &f;
    let mut done: Vec<(usize, Result<R, TxError>)> = futures::stream::iter(items.into_iter().enumerate().map(
        move |(i, item)| {
            let run = f(item);
            async move { (i, run.await) }
        },
    ))
    .buffer_unordered(limit)
    .collect()
    .await;
    done.sort_by_key(|(i, _)| *i);
    done.into_iter().map(|(_, r)| r).collect()
}

/// How a transaction lets go of one item.
#[derive(Debug, Clone)]
pub(crate) enum Release {
    /// Remove the lock attributes; delete the item instead if it exists only to hold the lock.
    Keep,
    /// Delete the item (a committed `Delete`, or rolling back an item the transaction created); an item locked in
    /// place of a tombstone gets its tombstone back.
    Delete,
    /// Put the saved image back (rolling back an item that existed).
    Restore(Item),
    /// Unlock a committed `Delete`'s tombstone and give it its time to live (attribute, epoch seconds).
    Expire(String, AttributeValue),
}

/// Lets go of one item, only while `owner` (an attempt's lock value) holds it: a late or repeated release changes
/// nothing.
pub(crate) async fn release_item(
    store: &Store,
    m: &Meter,
    owner: &str,
    a: &Action,
    how: Release,
) -> Result<(), TxError> {
    release_key(store, m, owner, &a.table, &a.key, how).await
}

/// `REMOVE` of every attribute a lock leaves on an item, with their names: what Keep and Expire share.
fn unlock_clause(req: UpdateItemFluentBuilder) -> (UpdateItemFluentBuilder, String) {
    let (clause, names) = unlock_parts();
    let req = names.iter().fold(req, |req, (p, n)| req.expression_attribute_names(*p, *n));
    (req, clause)
}

/// The clause that removes the lock attributes, and the names it uses.
fn unlock_parts() -> (String, [(&'static str, &'static str); 5]) {
    let clause = format!("REMOVE {}, {}, {}, {}, {}", ph::LOCK, ph::LOCKED_AT, ph::TRANSIENT, ph::APPLIED, ph::STONE);
    let names = [
        (ph::LOCK, ATTR_LOCK),
        (ph::LOCKED_AT, ATTR_LOCKED_AT),
        (ph::TRANSIENT, ATTR_TRANSIENT),
        (ph::APPLIED, ATTR_APPLIED),
        (ph::STONE, ATTR_STONE),
    ];
    (clause, names)
}

/// [`release_item`] by table and key.
pub(crate) async fn release_key(
    store: &Store,
    m: &Meter,
    owner: &str,
    table: &str,
    key: &Item,
    how: Release,
) -> Result<(), TxError> {
    let c = &store.client;
    match how {
        Release::Keep => {
            let (req, unlock) = unlock_clause(c.update_item().table_name(table).set_key(Some(key.clone())));
            let req = req
                .update_expression(unlock)
                .condition_expression(format!(
                    "{} = {} AND (attribute_not_exists({}) OR attribute_exists({}))",
                    ph::LOCK,
                    ph::TX,
                    ph::TRANSIENT,
                    ph::APPLIED
                ))
                .expression_attribute_values(ph::TX, s(owner));
            if let Written::ConditionFailed(Some(old)) = store.update(m, req).await? {
                if lock_holder(&old) == Some(owner) {
                    // Created only to hold the lock and never written: it must not outlive the transaction.
                    Box::pin(release_key(store, m, owner, table, key, Release::Delete)).await?;
                }
            }
        }
        Release::Delete => {
            let req = c
                .delete_item()
                .table_name(table)
                .set_key(Some(key.clone()))
                .condition_expression(format!("{} = {} AND attribute_not_exists({})", ph::LOCK, ph::TX, ph::STONE))
                .expression_attribute_names(ph::LOCK, ATTR_LOCK)
                .expression_attribute_names(ph::STONE, ATTR_STONE)
                .expression_attribute_values(ph::TX, s(owner));
            if let Written::ConditionFailed(Some(old)) = store.delete(m, req).await? {
                if let (Some(tx), Some(AttributeValue::M(stone))) = (lock_holder(&old), old.get(ATTR_STONE)) {
                    if tx == owner {
                        // The item stood in for a tombstone: deleting it leaves the tombstone.
                        Box::pin(release_key(store, m, owner, table, key, Release::Restore(stone.clone()))).await?;
                    }
                }
            }
        }
        Release::Expire(attr, at) => {
            let (req, unlock) = unlock_clause(c.update_item().table_name(table).set_key(Some(key.clone())));
            let req = req
                .update_expression(format!("SET #_sagaTtl = :_sagaTtl {unlock}"))
                .condition_expression(format!("{} = {}", ph::LOCK, ph::TX))
                .expression_attribute_names("#_sagaTtl", attr)
                .expression_attribute_values(ph::TX, s(owner))
                .expression_attribute_values(":_sagaTtl", at);
            match store.update(m, req).await {
                Ok(_) => {}
                // The table's indexes refuse the time to live (an index key of another type): a tombstone that never
                // expires is better than a committed transaction that cannot finish.
                Err(TxError::DynamoDb { message, .. }) if message.starts_with("ValidationException") => {
                    tracing::warn!(owner, table, %message, "the tombstone's time to live was refused; it is kept without one");
                    Box::pin(release_key(store, m, owner, table, key, Release::Keep)).await?;
                }
                Err(e) => return Err(e),
            }
        }
        Release::Restore(item) => {
            put_held(store, m, owner, table, item).await?;
        }
    }
    Ok(())
}

/// Puts `item` in place of the one `owner` (an attempt's lock value) holds; nothing when it no longer holds it.
pub(crate) async fn put_held(
    store: &Store,
    m: &Meter,
    owner: &str,
    table: &str,
    item: Item,
) -> Result<Written, TxError> {
    let req = store
        .client
        .put_item()
        .table_name(table)
        .set_item(Some(item))
        .condition_expression(format!("{} = {}", ph::LOCK, ph::TX))
        .expression_attribute_names(ph::LOCK, ATTR_LOCK)
        .expression_attribute_values(ph::TX, s(owner));
    store.put(m, req).await
}

/// Decides the rollback of `h`'s attempt; reports `Canceled` when this run (or another) rolled it back.
async fn decided(store: &Store, m: &Meter, h: &Header, d: &records::Decision) -> Result<Outcome, TxError> {
    Ok(match records::decide_rollback(store, m, &h.id, Some(h.attempt), d).await? {
        TxState::RolledBack => Outcome::Canceled,
        state => Outcome::Ended { state },
    })
}

fn now() -> AttributeValue {
    n(now_ms())
}
