//! save: a copy of each locked item about to change, written to the transactions table before it changes, and the
//! check that DynamoDB will accept every update.
//!
//! The copy is the item as it is now minus the lock attributes: nothing has been applied to a locked item before its
//! batch is saved. An item already applied (a second coordinator got further) is skipped: its image was written
//! before the apply, and the item no longer shows what it was.
//!
//! Items are read eventually consistent, at half the read units. Once this attempt's lock is on an item, only this
//! attempt writes it, so a copy that shows the lock is either the item as it is or, if another coordinator applied
//! it a moment ago, the item as it was before, which is the image anyway. A copy without the lock (from before it)
//! is read again strongly consistent.
//!
//! Each update is evaluated on the item it reads ([`crate::eval::apply_update`], with the key and index key types
//! of the table's description): one DynamoDB would refuse (`ADD` to a string, a path through a missing map, a number
//! past 38 digits, an item past 400 KB, an index key of the wrong type) cancels the transaction here with
//! `ValidationError` on that action, before any batch is saved or applied. Apply still cancels on a refusal the
//! evaluation did not foresee.

use std::collections::HashMap;

use super::*;
use crate::error::CancellationReason;
use crate::records::{flag, Decision, Image};
use crate::request::Op;
use crate::value::key_order;

pub async fn save(store: &Store, tx_id: &str, batch: usize) -> Result<Report, TxError> {
    let m = Meter::default();
    let h = match header_in(store, &m, tx_id, TxState::Pending).await? {
        Ok(h) => h,
        Err(o) => return Ok(Report::new(o, &m)),
    };
    if h.saved > batch {
        return Ok(Report::new(Outcome::Done, &m));
    }
    if h.locked < h.batches {
        return Err(TxError::Internal(format!("save of batch {batch} before every batch was locked")));
    }
    let plan = records::read_plan(store, &m, tx_id).await?;
    let actions: Vec<(usize, Action)> =
        records::read_batch(store, &m, tx_id, &plan, batch).await?.into_iter().filter(|(_, a)| a.op.writes()).collect();

    let mut by_table: HashMap<&str, Vec<Item>> = HashMap::new();
    for (_, a) in &actions {
        by_table.entry(&a.table).or_default().push(a.key.clone());
    }
    let owner = h.owner();
    let mut current: HashMap<Vec<u8>, Item> = HashMap::new();
    for (table, keys) in by_table {
        let schema = store.schema(&m, table).await?;
        // Eventually consistent, at half the price: once this attempt's lock is on an item nobody else writes it, so
        // a copy that shows the lock is the item as it is. A copy from before the lock, or none, is read again
        // strongly consistent.
        for item in store.batch_get_eventually(&m, table, keys.clone()).await? {
            if lock_holder(&item) == Some(owner.as_str()) {
                current.insert(key_order(table, &item, &schema.key_names), item);
            }
        }
        let stale: Vec<Item> = keys.into_iter().filter(|k| !current.contains_key(&key_order(table, k, &schema.key_names))).collect();
        if !stale.is_empty() {
            for item in store.batch_get(&m, table, stale).await? {
                current.insert(key_order(table, &item, &schema.key_names), item);
            }
        }
    }
    let mut writes = Vec::new();
    let mut refused = Vec::new();
    for (pos, a) in &actions {
        let schema = store.schema(&m, &a.table).await?;
        let item = current.remove(&key_order(&a.table, &a.key, &schema.key_names));
        let Some(item) = item.filter(|i| lock_holder(i) == Some(owner.as_str())) else {
            // Not ours any more: only a decided transaction loses its locks.
            let now = records::read_header(store, &m, tx_id).await?;
            if now.state != TxState::Pending || now.attempt != h.attempt {
                return Ok(Report::new(Outcome::Ended { state: now.state }, &m));
            }
            return Err(TxError::Internal(format!("{} is not locked by pending transaction {tx_id}", a.describe())));
        };
        if flag(&item, ATTR_APPLIED) {
            continue;
        }
        if let Some(message) = refusal(a, &item, &schema) {
            refused.push((a.index, CancellationReason::new(CancellationReason::VALIDATION_ERROR, message)));
            continue;
        }
        let image = match (flag(&item, ATTR_TRANSIENT), item.get(ATTR_STONE)) {
            // Locked in place of a tombstone: the tombstone is what a rollback puts back.
            (true, Some(AttributeValue::M(stone))) => Image::Existed(stone.clone()),
            (true, _) => Image::Transient,
            (false, _) => Image::Existed(records::strip_reserved(item)),
        };
        writes.push(records::image_request(store, tx_id, h.attempt, *pos, &image, h.deadline));
    }
    if !refused.is_empty() {
        return Ok(Report::new(decided(store, &m, &h, &Decision::actions(refused)).await?, &m));
    }
    store.batch_write(&m, &store.cfg.tx_table, writes).await?;
    beat_parent(store, &m, &h).await?;
    let outcome = progress(store, &m, &h, H_SAVED, batch + 1).await?.unwrap_or(Outcome::Done);
    Ok(Report::new(outcome, &m))
}

/// Why DynamoDB would refuse action `a`'s update on `locked` (the item as this transaction's lock holds it), or
/// `None` when it accepts it or `a` is not an update. An item that exists only to hold the lock (in place of nothing,
/// or of a tombstone) is absent to the update.
fn refusal(a: &Action, locked: &Item, schema: &crate::request::TableSchema) -> Option<String> {
    if a.op != Op::Update {
        return None;
    }
    let update = a.update.as_deref().unwrap_or_default();
    let (names, values) = match crate::expr::parse_update(update) {
        Ok(parsed) => used(a, &parsed.refs),
        Err(_) => (a.names.clone(), a.values.clone()),
    };
    let before = (!flag(locked, ATTR_TRANSIENT)).then(|| records::strip_reserved(locked.clone()));
    crate::eval::apply_update(before.as_ref(), &a.key, update, &names, &values, &schema.key_types())
        .err()
        .map(|e| format!("{}: {e}", a.describe()))
}
