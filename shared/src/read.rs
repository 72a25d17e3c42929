//! Reads while transactions run (seed 000, Part Two: isolation), and a condition for writers outside the protocol.
//!
//! - [`Isolation::Uncommitted`]: the item as it is, without dynamo-saga's attributes. It may show a value a pending
//!   transaction has applied and will later roll back, and it hides items that exist only to hold a lock.
//! - [`Isolation::Committed`]: never a value that might still be rolled back. An item locked by a transaction that
//!   has not committed is read from the image saved before the transaction applied anything to it (or as it is, when
//!   nothing was applied yet); an item locked by a committed transaction is read as that transaction leaves it (a
//!   committed `Delete` reads as absent before complete removes the item). Reading a locked item costs a few more
//!   reads (the holder's header, and for an applied item its plan, one or more request pages and the image).
//!
//! Reads never write and never wait. A read that takes part in a transaction (a read lock) is a `ConditionCheck`
//! in that transaction's request: it holds the item's lock until the transaction ends, so writers wait for it.

use serde::{Deserialize, Serialize};

use crate::constants::*;
use crate::error::TxError;
use crate::records::{self, flag, lock_holder, strip_reserved, Image, TxState};
use crate::request::{Action, Op};
use crate::store::{Meter, Store};
use crate::value::{key_order, Item};

/// How much a read may see of transactions that are still running.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Isolation {
    Uncommitted,
    Committed,
}

impl std::str::FromStr for Isolation {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "uncommitted" => Ok(Isolation::Uncommitted),
            "committed" => Ok(Isolation::Committed),
            other => Err(format!("isolation must be committed or uncommitted, not {other:?}")),
        }
    }
}

/// `GetItem` at `isolation` (strongly consistent).
pub async fn get_item(store: &Store, table: &str, key: Item, isolation: Isolation) -> Result<Option<Item>, TxError> {
    let m = Meter::default();
    let item = store.get(&m, table, key.clone()).await?;
    resolve(store, &m, table, key, item, isolation).await
}

/// `BatchGetItem` at `isolation`: the items that exist (as `isolation` sees them), in any order.
pub async fn batch_get_item(store: &Store, table: &str, keys: Vec<Item>, isolation: Isolation) -> Result<Vec<Item>, TxError> {
    let m = Meter::default();
    let schema = store.schema(&m, table).await?;
    let mut out = Vec::new();
    for item in store.batch_get(&m, table, keys).await? {
        let key = key_of(&item, &schema.key_names);
        if let Some(i) = resolve(store, &m, table, key, Some(item), isolation).await? {
            out.push(i);
        }
    }
    Ok(out)
}

/// The items a `Query` returned, each seen at `isolation`, item by item (the query itself reads the items as they
/// are; a committed read of one locked item then looks at its transaction). Items that read as absent are dropped.
pub async fn resolve_all(store: &Store, table: &str, items: Vec<Item>, isolation: Isolation) -> Result<Vec<Item>, TxError> {
    let m = Meter::default();
    let schema = store.schema(&m, table).await?;
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        let key = key_of(&item, &schema.key_names);
        if let Some(i) = resolve(store, &m, table, key, Some(item), isolation).await? {
            out.push(i);
        }
    }
    Ok(out)
}

/// A condition expression for writers outside the protocol, so they never write an item a transaction holds:
/// `attribute_not_exists(#sagaLock)`, with the name to add to `ExpressionAttributeNames`. Combine it with the
/// writer's own condition using `AND`. A write it stops fails with `ConditionalCheckFailedException`; retry it later.
pub fn unlocked_condition() -> (&'static str, (&'static str, &'static str)) {
    ("attribute_not_exists(#sagaLock)", ("#sagaLock", ATTR_LOCK))
}

fn key_of(item: &Item, key_names: &[String]) -> Item {
    key_names.iter().filter_map(|k| item.get(k).map(|v| (k.clone(), v.clone()))).collect()
}

/// What `isolation` makes of `item` (as read) at `key`.
async fn resolve(store: &Store, m: &Meter, table: &str, key: Item, item: Option<Item>, isolation: Isolation) -> Result<Option<Item>, TxError> {
    let Some(item) = item else { return Ok(None) };
    let transient = flag(&item, ATTR_TRANSIENT);
    let applied = flag(&item, ATTR_APPLIED);
    let Some(holder) = lock_holder(&item).map(str::to_owned) else {
        return Ok(Some(strip_reserved(item)));
    };
    // An item created to hold a lock, and not written yet, does not exist for anyone.
    if transient && !applied {
        return Ok(None);
    }
    if isolation == Isolation::Uncommitted {
        return Ok(Some(strip_reserved(item)));
    }
    let state = match records::read_header(store, m, &holder).await {
        Ok(h) => Some(h.state),
        Err(TxError::NotFound(_)) => None,
        Err(e) => return Err(e),
    };
    match state {
        Some(TxState::Committed) => match find_action(store, m, &holder, table, &key).await? {
            Some((_, a)) if a.op == Op::Delete => Ok(None),
            _ => Ok(Some(strip_reserved(item))),
        },
        // Pending or rolled back: what the item was before the transaction touched it.
        Some(_) if applied => {
            let (pos, _) = find_action(store, m, &holder, table, &key)
                .await?
                .ok_or_else(|| TxError::Internal(format!("{holder} holds an item that is not in its request")))?;
            match records::read_image(store, m, &holder, pos).await? {
                Some(Image::Existed(before)) => Ok(Some(strip_reserved(before))),
                Some(Image::Transient) => Ok(None),
                None => Err(TxError::Internal(format!("{holder} applied an item without saving its image"))),
            }
        }
        Some(_) => Ok(Some(strip_reserved(item))),
        // The holder's records have expired: its lock is stale and its outcome unknown; the item is what is left.
        None => Ok(Some(strip_reserved(item))),
    }
}

/// The action (and its lock-order position) of transaction `tx_id` on `table`/`key`: a binary search over the
/// batches, which are in lock order, reading one batch's request pages per step.
async fn find_action(store: &Store, m: &Meter, tx_id: &str, table: &str, key: &Item) -> Result<Option<(usize, Action)>, TxError> {
    let plan = records::read_plan(store, m, tx_id).await?;
    let names = store.schema(m, table).await?.key_names;
    let target = key_order(table, key, &names);
    let order = |a: &Action| {
        let a = a.clone();
        async move {
            let names = store.schema(m, &a.table).await?.key_names;
            Ok::<_, TxError>(key_order(&a.table, &a.key, &names))
        }
    };
    // The last batch whose first action does not sort after the key.
    let (mut lo, mut hi) = (0, plan.batch_count());
    while hi - lo > 1 {
        let mid = (lo + hi) / 2;
        let batch = records::read_batch(store, m, tx_id, &plan, mid).await?;
        let Some((_, first)) = batch.first() else { break };
        if order(first).await? <= target {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    for (pos, a) in records::read_batch(store, m, tx_id, &plan, lo).await? {
        if a.table == table && order(&a).await? == target {
            return Ok(Some((pos, a)));
        }
    }
    Ok(None)
}
