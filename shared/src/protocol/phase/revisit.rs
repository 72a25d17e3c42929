//! revisit: the second look at a finished transaction that may have had writes in flight when it ended
//! ([`Header::needs_revisit`]). Once [`Config::revisit_after`](crate::Config::revisit_after) has passed since it
//! finished, no write of it can land any more; every item it named (and its parent) is read once, and whatever of the
//! transaction is still there (a lock, an item created only to hold one, a tombstone's stand-in) is removed with a
//! conditional write on that very lock: the holder and the id it carries, as read. Nothing else is touched, so a visit
//! that runs twice, or late, changes nothing more.
//!
//! The sweeper makes the visit on its schedule, the state machine after its Release step (Standard workflows), and
//! `dynamo-saga sweep` when it is due. The header keeps the transaction in the open-transactions index, in a
//! `revisit#N` partition, until it is made.

use std::collections::BTreeMap;

use crate::constants::{
    H_FINISHED_AT, H_OPEN_SHARD, H_REVISITED_AT, H_REVISIT_AT, H_REVISIT_CLEARED, PARENT_LOCK_TOKEN,
};
use crate::dynamo::lanes::concurrently;
use crate::dynamo::store::{Meter, Store, Usage};
use crate::error::TxError;
use crate::model::item_attrs::{lock_holder, LockId};
use crate::model::plan::Part;
use crate::model::value::{n, now_ms, Item};
use crate::protocol::parent::unlock_parent;
use crate::protocol::records::{self, Expect, Header, HeaderWrite};
use crate::protocol::unlock::{release_key, Release};

/// What a visit (`Coordinator::revisit`, the sweeper, the state machine) found.
#[derive(Debug, Clone, PartialEq)]
pub enum Revisit {
    /// Nothing to do: the transaction was not to be visited, or was visited already.
    Nothing,
    /// Not due before this time (epoch milliseconds): a write of the transaction may still land until then.
    NotDue { at_ms: u64 },
    /// Visited now: the items read, and those that still held something of the transaction and were cleared.
    Done { items: usize, cleared: usize, usage: Usage },
}

/// Visits `tx_id` again when that is due (see the module's docs).
pub async fn revisit(store: &Store, tx_id: &str) -> Result<Revisit, TxError> {
    let m = Meter::default();
    let h = records::read_header(store, &m, tx_id).await?;
    revisit_from(store, m, h).await
}

/// [`revisit`] from the header `h` its caller has just read.
pub async fn revisit_from(store: &Store, m: Meter, h: Header) -> Result<Revisit, TxError> {
    let Some(at_ms) = h.revisit_at.filter(|_| h.finished()) else { return Ok(Revisit::Nothing) };
    if now_ms() < at_ms {
        return Ok(Revisit::NotDue { at_ms });
    }
    let keys = named_keys(store, &m, &h).await?;
    let items: usize = keys.values().map(Vec::len).sum();
    let mut left: Vec<Left> = Vec::new();
    for (table, keys) in keys {
        // Every key of a table names the same attributes: the key schema, without asking DynamoDB for it.
        let key_names: Vec<String> = keys.first().map(|k| k.keys().cloned().collect()).unwrap_or_default();
        for item in store.batch_get(&m, &table, keys).await? {
            let Some(owner) = lock_holder(&item).filter(|o| records::parse_owner(o).0 == h.id) else { continue };
            let key = item.iter().filter(|(k, _)| key_names.contains(k)).map(|(k, v)| (k.clone(), v.clone()));
            left.push(Left {
                table: table.clone(),
                key: key.collect(),
                owner: owner.to_owned(),
                id: LockId::of(&item),
            });
        }
    }
    let cleared = clear(store, &m, left).await?;
    let cleared = cleared + clear_parent(store, &m, &h).await?;
    let usage = m.usage();
    let w = HeaderWrite {
        set: vec![(H_REVISITED_AT, n(now_ms())), (H_REVISIT_CLEARED, n(cleared))],
        remove: vec![H_REVISIT_AT, H_OPEN_SHARD],
        require: vec![(H_FINISHED_AT, true), (H_REVISIT_AT, true)],
        ..HeaderWrite::default()
    };
    let expect = Expect { state: h.state, attempt: None, touched_at: None };
    records::write_header(store, &m, &h.id, expect, w, &usage).await?;
    if cleared > 0 {
        tracing::warn!(tx_id = %h.id, cleared, "writes of the transaction landed after its end; cleared");
    } else {
        tracing::info!(tx_id = %h.id, items, "visited again after its end: nothing of it left");
    }
    Ok(Revisit::Done { items, cleared, usage: m.usage() })
}

/// Every item the request names, by table (begin refuses a request that names an item twice).
async fn named_keys(store: &Store, m: &Meter, h: &Header) -> Result<BTreeMap<String, Vec<Item>>, TxError> {
    let mut keys: BTreeMap<String, Vec<Item>> = BTreeMap::new();
    if h.batches == 0 {
        return Ok(keys);
    }
    let plan = crate::protocol::stored_request::read_plan(store, m, &h.id).await?;
    for (_, _, a) in
        crate::protocol::stored_request::read_batches(store, m, &h.id, &plan, 0..h.batches, Part::Heads).await?
    {
        keys.entry(a.table).or_default().push(a.key);
    }
    Ok(keys)
}

/// A lock of the transaction found on an item: the item's table and key, the lock's holder (an attempt's lock value)
/// and the id it carries.
pub(crate) struct Left {
    pub(crate) table: String,
    pub(crate) key: Item,
    pub(crate) owner: String,
    pub(crate) id: Option<LockId>,
}

/// Lets go of each lock found, as it was read: only a lock with that holder and that id is removed, and an item it
/// created is deleted (or given back its tombstone). Returns how many it cleared.
pub(crate) async fn clear(store: &Store, m: &Meter, left: Vec<Left>) -> Result<usize, TxError> {
    let cleared = concurrently(left, store.cfg.concurrency, |l| async move {
        let kept = release_key(store, m, &l.owner, &l.table, &l.key, Release::Keep, l.id).await?;
        Ok(kept.is_none())
    })
    .await?;
    Ok(cleared.into_iter().filter(|c| *c).count())
}

/// Lets go of the parent, when a late parent-lock write of the transaction holds it.
async fn clear_parent(store: &Store, m: &Meter, h: &Header) -> Result<usize, TxError> {
    let Some(p) = &h.parent else { return Ok(0) };
    let Some(item) = store.get(m, &p.table_name, p.key.clone()).await? else { return Ok(0) };
    let holder = match item.get(PARENT_LOCK_TOKEN) {
        Some(aws_sdk_dynamodb::types::AttributeValue::S(t)) if records::parse_owner(t).0 == h.id => t.clone(),
        _ => return Ok(0),
    };
    unlock_parent(store, m, p, &holder).await?;
    Ok(1)
}
