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
pub(crate) mod end;
pub mod lock;
mod refusals;
pub mod release;
pub mod resume;
pub mod retry;
pub mod revisit;
pub mod rollback;
pub mod save;
pub(crate) mod writes;

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use serde::{Deserialize, Serialize};

use crate::dynamo::store::{Meter, Store, Usage};
use crate::error::TxError;
use crate::model::request::Action;
use crate::model::value::Item;
use crate::model::value::{n, now_ms};
use crate::protocol::records::{self, Header, TxState};
use dynamo_saga_expressions::expr::ExprRefs;

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
    /// Another transaction holds a lock; wait and run the phase again (see [`crate::drivers::coordinator`]).
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

pub(crate) use crate::model::item_attrs::ph;

/// The batches a lock, apply or rollback step from `batch` takes: up to
/// [`Config::fan_out`](crate::config::Config::fan_out) shares of
/// [`Config::share_batches`](crate::config::Config::share_batches) batches each, of the `batches`.
fn run_from(cfg: &crate::config::Config, batch: usize, batches: usize) -> std::ops::Range<usize> {
    batch..run_end(cfg, batch, batches)
}

/// Where a lock, apply or rollback step from `batch` ends (see [`run_from`]).
pub(crate) fn run_end(cfg: &crate::config::Config, batch: usize, batches: usize) -> usize {
    batch.saturating_add(cfg.step_batches()).min(batches)
}

/// The opening every phase of batches shares, on the header `h` its caller has read: `h` when the transaction is in
/// `state`, unfinished, and the phase's watermark (`done`: the batches it has recorded) has not passed `batch`;
/// otherwise the report the phase ends with, having written nothing: `Ended` in another state, `Done` for a batch
/// already recorded.
fn opening(
    h: Header,
    m: &Meter,
    state: TxState,
    done: fn(&Header) -> usize,
    batch: usize,
) -> Result<Header, Box<Report>> {
    if h.state != state || h.finished() {
        return Err(Box::new(Report::new(Outcome::Ended { state: h.state }, m)));
    }
    if done(&h) > batch {
        return Err(Box::new(Report::new(Outcome::Done, m)));
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
    schema: &crate::model::schema::TableSchema,
) -> Result<Item, dynamo_saga_expressions::eval::EvalError> {
    let (update, names, values) = update_parts(a);
    dynamo_saga_expressions::eval::apply_update(before, &a.key, update, &names, &values, &schema.key_types())
}

/// Why DynamoDB would refuse update action `a` whatever the item it meets
/// ([`dynamo_saga_expressions::eval::check_update`]): what begin checks, from the request alone.
pub(crate) fn check_update(
    a: &Action,
    schema: &crate::model::schema::TableSchema,
) -> Result<(), dynamo_saga_expressions::eval::EvalError> {
    let (update, names, values) = update_parts(a);
    dynamo_saga_expressions::eval::check_update(&a.key, update, &names, &values, &schema.key_types()).map(|_| ())
}

/// Whether action `a`'s expressions still fit DynamoDB's limits with what the protocol adds to them: the lock's
/// condition, and the removal of the lock attributes in an update's apply. An expression native takes within a
/// hundred bytes of 4 KB may not leave that room; it is refused before anything is written.
pub(crate) fn check_room(a: &Action) -> Result<(), String> {
    // It depends on the expressions' text alone, which a request's actions mostly share: checked once per text.
    static CHECKED: std::sync::OnceLock<std::sync::Mutex<HashMap<String, Result<(), String>>>> =
        std::sync::OnceLock::new();
    let key = format!(
        "{}\u{0}{}\u{0}{}",
        a.op == crate::model::request::Op::Update,
        a.condition.as_deref().unwrap_or(""),
        a.update.as_deref().unwrap_or("")
    );
    let checked = CHECKED.get_or_init(Default::default);
    if let Some(known) = checked.lock().unwrap_or_else(|p| p.into_inner()).get(&key) {
        return known.clone();
    }
    let verdict = check_room_of(a);
    let mut map = checked.lock().unwrap_or_else(|p| p.into_inner());
    if map.len() >= 1024 {
        map.clear();
    }
    map.insert(key, verdict.clone());
    verdict
}

fn check_room_of(a: &Action) -> Result<(), String> {
    if let Some(c) = &a.condition {
        dynamo_saga_expressions::expr::parse_condition(&lock::lock_condition(false, Some(c)))
            .map_err(|e| format!("ConditionExpression with the lock's condition: {e}"))?;
    }
    if a.op == crate::model::request::Op::Update {
        let applied = writes::applied_update_expression(a).map_err(|e| e.to_string())?;
        dynamo_saga_expressions::expr::parse_update(&applied)
            .map_err(|e| format!("UpdateExpression with the lock attributes' removal: {e}"))?;
    }
    Ok(())
}

/// Update action `a`'s expression with the names and values it uses (the action's also serve its condition).
fn update_parts(a: &Action) -> (&str, HashMap<String, String>, Item) {
    let update = a.update.as_deref().unwrap_or_default();
    let (names, values) = match dynamo_saga_expressions::expr::parse_update(update) {
        Ok(parsed) => used(a, &parsed.refs),
        Err(_) => (a.names.clone(), a.values.clone()),
    };
    (update, names, values)
}

/// Why DynamoDB would refuse action `a`'s update on `before` (see [`evaluate`]), or `None` when it accepts it or `a`
/// is not an update.
fn refusal(a: &Action, before: Option<&Item>, schema: &crate::model::schema::TableSchema) -> Option<String> {
    if a.op != crate::model::request::Op::Update {
        return None;
    }
    evaluate(a, before, schema).err().map(|e| format!("{}: {e}", a.describe()))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_takes_fan_out_shares_of_share_batches() {
        let cfg = crate::config::Config { fan_out: 3, share_batches: 2, ..crate::config::Config::new("tx") };
        assert_eq!(run_end(&cfg, 1, 100), 7, "a step takes fan_out shares");
        assert_eq!(run_end(&cfg, 1, 4), 4);
    }
}
