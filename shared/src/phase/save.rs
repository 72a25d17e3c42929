//! save: a copy of each locked item about to change, written to the transactions table before it changes.
//!
//! The copy is the item as it is now minus the lock attributes: nothing has been applied to a locked item before its
//! batch is saved. An item already applied (a second coordinator got further) is skipped: its image was written
//! before the apply, and the item no longer shows what it was.

use std::collections::HashMap;

use super::*;
use crate::records::{flag, Image};
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
    let mut current: HashMap<Vec<u8>, Item> = HashMap::new();
    for (table, keys) in by_table {
        let schema = store.schema(&m, table).await?;
        for item in store.batch_get(&m, table, keys).await? {
            current.insert(key_order(table, &item, &schema.key_names), item);
        }
    }
    let owner = h.owner();
    let mut writes = Vec::new();
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
        let image = match (flag(&item, ATTR_TRANSIENT), item.get(ATTR_STONE)) {
            // Locked in place of a tombstone: the tombstone is what a rollback puts back.
            (true, Some(AttributeValue::M(stone))) => Image::Existed(stone.clone()),
            (true, _) => Image::Transient,
            (false, _) => Image::Existed(records::strip_reserved(item)),
        };
        writes.push(records::image_request(store, tx_id, h.attempt, *pos, &image, h.deadline));
    }
    store.batch_write(&m, &store.cfg.tx_table, writes).await?;
    beat_parent(store, &m, &h).await?;
    let outcome = progress(store, &m, &h, H_SAVED, batch + 1).await?.unwrap_or(Outcome::Done);
    Ok(Report::new(outcome, &m))
}
