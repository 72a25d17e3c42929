//! save: the last step before the commit, once every batch is locked.
//!
//! Protocol 2 needs nothing undone but locks, so save writes no copy of any item. What DynamoDB will accept was
//! checked before: begin checked each `Put`'s item and each tombstone against the table's index key types from the
//! request it holds (the 400 KB limit when it parsed it), and lock evaluated each update on the item its lock write
//! returned. Save confirms every batch is locked, beats the parent's lease, and records every batch saved in one
//! write, reading nothing but the header: a transaction is committed only after a run of save has seen every lock
//! taken.
//!
//! Protocol 1 (transactions begun before protocol 2, which apply before they commit): a copy of each locked item
//! about to change, written to the transactions table before it changes, and the same check of every update on the
//! item it reads. The copy is the item as it is now minus the lock attributes: nothing has been applied to a locked
//! item before its batch is saved. An item already applied (a second coordinator got further) is skipped: its image
//! was written before the apply, and the item no longer shows what it was. Items are read eventually consistent, at
//! half the read units; a copy that does not show this attempt's lock (from before it) is read again strongly
//! consistent.

use super::{decided, opening, progress, refusal, Outcome, Report};
use crate::constants::{ATTR_APPLIED, ATTR_STONE, ATTR_TRANSIENT, H_SAVED};
use crate::dynamo::store::{Meter, Store};
use crate::error::{CancellationReason, TxError};
use crate::model::item_attrs::{flag, lock_holder};
use crate::model::plan::Part;
use crate::model::request::Action;
use crate::model::value::{key_order, Item};
use crate::protocol::parent::beat_parent;
use crate::protocol::records::{self, Decision, Header, TxState};
use crate::protocol::stored_request::Image;
use aws_sdk_dynamodb::types::AttributeValue;
use std::collections::HashMap;

pub async fn save(store: &Store, tx_id: &str, batch: usize) -> Result<Report, TxError> {
    let m = Meter::default();
    let h = records::read_header(store, &m, tx_id).await?;
    save_from(store, m, h, batch).await
}

/// [`save`] from the header `h` its caller has just read.
pub(crate) async fn save_from(store: &Store, m: Meter, h: Header, batch: usize) -> Result<Report, TxError> {
    let h = match opening(h, &m, TxState::Pending, |h| h.saved, batch) {
        Ok(h) => h,
        Err(report) => return Ok(*report),
    };
    let tx_id = h.id.as_str();
    if h.locked < h.batches {
        return Err(TxError::Internal(format!("save of batch {batch} before every batch was locked")));
    }
    if h.commits_first() {
        if !h.items_checked {
            // Begun before begin checked the items that replace others: they are checked here, as they were then.
            let plan = crate::protocol::stored_request::read_plan(store, &m, tx_id).await?;
            let actions =
                crate::protocol::stored_request::read_batch(store, &m, tx_id, &plan, batch, Part::Whole).await?;
            let actions: Vec<&Action> = actions.iter().map(|(_, a)| a).collect();
            let refused = super::refusals::refused_items(store, &m, tx_id, actions, false).await?;
            if !refused.is_empty() {
                return Ok(Report::new(decided(store, &m, &h, &Decision::actions(refused)).await?, &m));
            }
        }
        beat_parent(store, &m, &h).await?;
        // Lock checked every item: nothing is left to do batch by batch, and one write records them all saved.
        let saved = if h.items_checked { h.batches } else { batch + 1 };
        let outcome = progress(store, &m, &h, H_SAVED, saved).await?.unwrap_or(Outcome::Done);
        return Ok(Report::new(outcome, &m));
    }
    let plan = crate::protocol::stored_request::read_plan(store, &m, tx_id).await?;
    let actions: Vec<(usize, Action)> =
        crate::protocol::stored_request::read_batch(store, &m, tx_id, &plan, batch, Part::Heads)
            .await?
            .into_iter()
            .filter(|(_, a)| a.op.writes())
            .collect();

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
        let stale: Vec<Item> =
            keys.into_iter().filter(|k| !current.contains_key(&key_order(table, k, &schema.key_names))).collect();
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
        let before = (!flag(&item, ATTR_TRANSIENT)).then(|| crate::model::item_attrs::strip_reserved(item.clone()));
        if let Some(message) = refusal(a, before.as_ref(), &schema) {
            refused.push((a.index, CancellationReason::new(CancellationReason::VALIDATION_ERROR, message)));
            continue;
        }
        let image = match (flag(&item, ATTR_TRANSIENT), item.get(ATTR_STONE)) {
            // Locked in place of a tombstone: the tombstone is what a rollback puts back.
            (true, Some(AttributeValue::M(stone))) => Image::Existed(stone.clone()),
            (true, _) => Image::Transient,
            (false, _) => Image::Existed(crate::model::item_attrs::strip_reserved(item)),
        };
        writes.push(crate::protocol::stored_request::image_request(store, tx_id, h.attempt, *pos, &image, h.deadline));
    }
    if !refused.is_empty() {
        return Ok(Report::new(decided(store, &m, &h, &Decision::actions(refused)).await?, &m));
    }
    store.batch_write(&m, &store.cfg.tx_table, writes).await?;
    beat_parent(store, &m, &h).await?;
    let outcome = progress(store, &m, &h, H_SAVED, batch + 1).await?.unwrap_or(Outcome::Done);
    Ok(Report::new(outcome, &m))
}
