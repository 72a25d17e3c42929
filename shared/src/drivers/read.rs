//! Reads while transactions run (the Java transactions library's isolation levels), and a condition for writers outside
//! the protocol.
//!
//! - [`Isolation::Uncommitted`]: the item as it is, without dynamo-saga's attributes. It may show an item a committed
//!   transaction has not applied yet (or, on protocol 1, a value a pending transaction has applied and will later roll
//!   back), and it hides items that exist only to hold a lock.
//! - [`Isolation::Committed`]: never a value that might still be rolled back, nor a transaction half applied. An
//!   item locked by a transaction that has not committed is read as it is (protocol 2 writes nothing but the lock
//!   before its commit; for protocol 1, from the image saved before the transaction applied anything to it); an item
//!   locked by a committed transaction is read as that transaction leaves it (protocol 2: its update evaluated on the
//!   item, its `Put`'s item, a `Delete` absent, before apply writes it; or, with [`CommittedReads::Apply`], that one
//!   item's write applied by the reader, as apply would, and the item read again). Reading a locked item costs a few
//!   more reads (the holder's header, and for a committed or applied item its plan, one or more request pages, and
//!   on protocol 1 the image).
//!
//! - [`Isolation::ReadLock`]: the items are locked by a transaction of their own ([`lock_for_read`]) and read
//!   while it holds them, so the reads are one consistent cut of committed values, and then released by rolling
//!   that transaction back, which a read lock always does (the Java transactions library's "code a read transaction
//!   exactly like a write, except that at the conclusion of the transaction you always roll back"). It waits for
//!   transactions that hold the items, and it writes: a lock and an unlock per item, as a transaction's condition check
//!   costs.
//!
//! At every level, a tombstone left by a `Delete` with `Tombstone` reads as absent.
//!
//! The other two levels never write and never wait. To keep items locked while deciding what to write, hold a
//! [`ReadLock`]; to make a read part of a writing transaction, put a `ConditionCheck` on the item in its request.

use serde::{Deserialize, Serialize};

use crate::config::CommittedReads;
use crate::constants::{ATTR_APPLIED, ATTR_LOCK, ATTR_TRANSIENT};
use crate::drivers::driver::Driver;
use crate::dynamo::store::{Meter, Store};
use crate::error::TxError;
use crate::model::item_attrs::{flag, lock_holder, strip_reserved, LockId};
use crate::model::request::{is_tombstone, Op};
use crate::model::value::{item_to_json, Item};
use crate::protocol::phase::begin;
use crate::protocol::records::{self, TxState};
use crate::protocol::stored_request::Image;

/// How much a read may see of transactions that are still running.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Isolation {
    Uncommitted,
    Committed,
    #[serde(rename = "read-lock")]
    ReadLock,
}

impl std::str::FromStr for Isolation {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "uncommitted" => Ok(Isolation::Uncommitted),
            "committed" => Ok(Isolation::Committed),
            "read-lock" => Ok(Isolation::ReadLock),
            other => Err(format!("isolation must be committed, uncommitted or read-lock, not {other:?}")),
        }
    }
}

/// `GetItem` at `isolation` (strongly consistent).
pub async fn get_item(store: &Store, table: &str, key: Item, isolation: Isolation) -> Result<Option<Item>, TxError> {
    if isolation == Isolation::ReadLock {
        return Ok(read_locked(store, vec![(table.to_owned(), key)]).await?.pop().flatten());
    }
    let m = Meter::default();
    let item = match store.get(&m, table, key.clone()).await {
        Err(e) if e.is_missing_table() => {
            return Err(TxError::invalid(None, format!("table {table:?} does not exist")))
        }
        item => item?,
    };
    resolve(store, &m, &Holders::default(), table, key, item, isolation).await
}

/// `BatchGetItem` at `isolation`: the items that exist (as `isolation` sees them), in any order.
pub async fn batch_get_item(
    store: &Store,
    table: &str,
    keys: Vec<Item>,
    isolation: Isolation,
) -> Result<Vec<Item>, TxError> {
    if isolation == Isolation::ReadLock {
        let keys = keys.into_iter().map(|k| (table.to_owned(), k)).collect();
        return Ok(read_locked(store, keys).await?.into_iter().flatten().collect());
    }
    let m = Meter::default();
    let schema = store.schema(&m, table).await?;
    let mut out = Vec::new();
    let holders = Holders::default();
    for item in store.batch_get(&m, table, keys).await? {
        let key = key_of(&item, &schema.key_names);
        if let Some(i) = resolve(store, &m, &holders, table, key, Some(item), isolation).await? {
            out.push(i);
        }
    }
    Ok(out)
}

/// The items a `Query` returned, each seen at `isolation`, item by item (the query itself reads the items as they
/// are; a committed read of one locked item then looks at its transaction). Items that read as absent are dropped.
pub async fn resolve_all(
    store: &Store,
    table: &str,
    items: Vec<Item>,
    isolation: Isolation,
) -> Result<Vec<Item>, TxError> {
    let m = Meter::default();
    let schema = store.schema(&m, table).await?;
    if isolation == Isolation::ReadLock {
        let keys = items.iter().map(|i| (table.to_owned(), key_of(i, &schema.key_names))).collect();
        return Ok(read_locked(store, keys).await?.into_iter().flatten().collect());
    }
    let mut out = Vec::with_capacity(items.len());
    let holders = Holders::default();
    for item in items {
        let key = key_of(&item, &schema.key_names);
        if let Some(i) = resolve(store, &m, &holders, table, key, Some(item), isolation).await? {
            out.push(i);
        }
    }
    Ok(out)
}

/// Items held by a read lock: a transaction of `ConditionCheck`s that has locked every one of them and changed
/// nothing. While it is held, writers that respect locks wait (dynamo-saga transactions) or fail their condition
/// (writers using [`unlocked_condition`]); an older transaction that needs one of the items rolls it back, as it
/// would any younger transaction, which [`ReadLock::held`] reports. Refresh a lock held longer than a third of the
/// lease, or a waiting younger transaction judges it stale and rolls it back. Dropped without [`ReadLock::release`],
/// the locks stay until the sweeper or a waiting transaction rolls the transaction back.
#[derive(Debug, Clone)]
pub struct ReadLock {
    pub transaction_id: String,
    /// Each requested key's item as committed when every lock was held (none when it does not exist), in request
    /// order.
    pub items: Vec<Option<Item>>,
    driver: Driver,
}

/// Takes a read lock on `keys` (table, key) and reads them. `options` are the request's `Options`
/// (`LockWaitSeconds`, `DeadlineSeconds`). Errors with `TransactionCanceled` when the lock could not be taken (the
/// wait ran out, or an older transaction took an item first), having released whatever it held.
pub async fn lock_for_read(
    store: &Store,
    keys: Vec<(String, Item)>,
    options: Option<serde_json::Value>,
) -> Result<ReadLock, TxError> {
    let driver = Driver::new(store.clone());
    let checks: Vec<serde_json::Value> = keys
        .iter()
        .map(|(table, key)| {
            let name = key.keys().min().cloned().unwrap_or_default();
            serde_json::json!({"ConditionCheck": {"TableName": table, "Key": item_to_json(key),
                "ConditionExpression": "attribute_exists(#k) OR attribute_not_exists(#k)", "ExpressionAttributeNames": {"#k": name}}})
        })
        .collect();
    let mut body = serde_json::json!({ "TransactItems": checks });
    if let Some(o) = options {
        body["Options"] = o;
    }
    let id = begin::begin(store, &body).await?.transaction_id;
    driver.drive_locks(&id).await?;
    let m = Meter::default();
    let reads = keys.into_iter().map(|(table, key)| {
        let m = &m;
        async move {
            let item = store.get(m, &table, key.clone()).await?;
            resolve(store, m, &Holders::default(), &table, key, item, Isolation::Uncommitted).await
        }
    });
    let items = futures::future::try_join_all(reads).await;
    let lock = ReadLock { transaction_id: id, items: Vec::new(), driver };
    match items {
        Ok(items) => Ok(ReadLock { items, ..lock }),
        Err(e) => {
            lock.release().await?;
            Err(e)
        }
    }
}

impl ReadLock {
    /// Whether this read lock still holds every item (no older transaction has rolled it back).
    pub async fn held(&self) -> Result<bool, TxError> {
        let h = records::read_header(self.driver.store(), &Meter::default(), &self.transaction_id).await?;
        Ok(h.state == TxState::Pending && !h.finished())
    }

    /// Tells waiting transactions this read lock is alive (a new header version), so they do not judge it stale.
    /// False when it no longer holds its items.
    pub async fn refresh(&self) -> Result<bool, TxError> {
        let m = Meter::default();
        let h = records::read_header(self.driver.store(), &m, &self.transaction_id).await?;
        records::update_header(
            self.driver.store(),
            &m,
            &self.transaction_id,
            records::Expect { state: TxState::Pending, attempt: Some(h.attempt), touched_at: None },
            &[],
            None,
            &m.usage(),
        )
        .await
    }

    /// Lets every item go by rolling the transaction back (nothing was changed, so nothing is restored). Safe to
    /// call after an older transaction has rolled it back, and twice.
    pub async fn release(self) -> Result<(), TxError> {
        self.driver.cancel(&self.transaction_id, "a read lock ends by rolling back").await
    }
}

/// Locks `keys`, reads them, and lets them go.
async fn read_locked(store: &Store, keys: Vec<(String, Item)>) -> Result<Vec<Option<Item>>, TxError> {
    let lock = lock_for_read(store, keys, None).await?;
    let items = lock.items.clone();
    lock.release().await?;
    Ok(items)
}

/// Who holds a parent lock (the DynamoDB Lock Client's `getLock`), read without taking it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct ParentLock {
    /// The holder's transaction id (the parent item's `lockToken`, which is `<id>.<n>` from its second attempt on).
    pub holder: String,
    /// The holder's attempt that holds the lock, counted from 1.
    pub attempt: u32,
    /// When the holder took the lock, ms since the epoch on its clock (`lockTokenAt`).
    pub locked_at: u64,
    /// The record version number the holder moves at every heartbeat (`recordVersionNumber`). A waiter judges the
    /// lock stale only after seeing the same number for a whole lease (`lease_seconds`, the item's `leaseDuration`),
    /// measured on its own clock.
    pub record_version_number: u64,
    pub lease_seconds: u64,
    /// The holder's header, when its records still exist: its state and progress.
    pub holder_header: Option<records::Header>,
}

/// The parent lock on `table`/`key`, if anyone holds it. Errors with `NotFound` when the item does not exist.
pub async fn parent_lock(store: &Store, table: &str, key: Item) -> Result<Option<ParentLock>, TxError> {
    let m = Meter::default();
    let item = store
        .get(&m, table, key.clone())
        .await?
        .ok_or_else(|| TxError::NotFound(crate::model::value::key_display(table, &key)))?;
    let Some(lock) = crate::model::item_attrs::ParentLockAttrs::of(&item) else { return Ok(None) };
    let (holder, attempt) = records::parse_owner(&lock.holder);
    let holder_header = match records::read_header(store, &m, holder).await {
        Ok(h) => Some(h),
        Err(TxError::NotFound(_)) => None,
        Err(e) => return Err(e),
    };
    Ok(Some(ParentLock {
        locked_at: lock.locked_at.unwrap_or(0),
        record_version_number: lock.record_version_number.unwrap_or(0),
        lease_seconds: lock.lease_seconds.unwrap_or(store.cfg.lease.as_secs()),
        holder: holder.to_owned(),
        attempt: attempt + 1,
        holder_header,
    }))
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

/// The headers of the transactions holding the items one read resolves, each read once: items a transaction holds are
/// all seen at the state one read of its header found, and cost one `GetItem` between them. `None`: no such
/// transaction (its records expired).
type Holders = std::sync::Mutex<std::collections::HashMap<String, Option<records::Header>>>;

/// The header of `holder`, from `holders` when this read has read it already.
async fn holder_header(
    store: &Store,
    m: &Meter,
    holders: &Holders,
    holder: &str,
) -> Result<Option<records::Header>, TxError> {
    if let Some(h) = holders.lock().expect("holders lock").get(holder) {
        return Ok(h.clone());
    }
    let h = match records::read_header(store, m, holder).await {
        Ok(h) => Some(h),
        Err(TxError::NotFound(_)) => None,
        Err(e) => return Err(e),
    };
    holders.lock().expect("holders lock").insert(holder.to_string(), h.clone());
    Ok(h)
}

/// What `isolation` makes of `item` (as read) at `key`. A tombstone reads as absent.
async fn resolve(
    store: &Store,
    m: &Meter,
    holders: &Holders,
    table: &str,
    key: Item,
    item: Option<Item>,
    isolation: Isolation,
) -> Result<Option<Item>, TxError> {
    let Some(item) = item.filter(|i| !is_tombstone(i)) else { return Ok(None) };
    let transient = flag(&item, ATTR_TRANSIENT);
    let applied = flag(&item, ATTR_APPLIED);
    let Some(owner) = lock_holder(&item).map(str::to_owned) else {
        return Ok(Some(strip_reserved(item)));
    };
    let (holder, attempt) = records::parse_owner(&owner);
    // What the item was before its holder, as far as anyone but a committed holder of protocol 2 is concerned: an
    // item created to hold a lock, and not written yet, does not exist.
    let as_is = if transient && !applied { None } else { Some(strip_reserved(item.clone())) };
    if isolation == Isolation::Uncommitted {
        return Ok(as_is);
    }
    let header = match holder_header(store, m, holders, holder).await? {
        // A lock an earlier attempt left behind: that attempt applied nothing to the item.
        Some(h) if h.attempt != attempt => return Ok(as_is),
        header => header,
    };
    if let Some(h) = header.as_ref().filter(|h| h.commits_first()) {
        // Protocol 2 writes nothing to an item but its lock before the commit, and unlocks it as it applies it: a
        // locked item of a committed transaction is read as its action leaves it.
        if h.state != TxState::Committed {
            return Ok(as_is);
        }
        if store.cfg.committed_reads == CommittedReads::Evaluate {
            return committed_holder_value(store, m, h, table, &key, &item, as_is).await;
        }
        return match crate::protocol::stored_request::find_action(store, m, holder, table, &key).await? {
            // A lock that carries another id than the one its batch was recorded locked with was taken by a lock write
            // that landed after apply wrote the item: the item is as the transaction left it.
            Some((batch, _, a)) if h.lock_id(batch, a.index).is_some_and(|id| LockId::of(&item) != Some(id)) => {
                Ok(as_is)
            }
            // CommittedReads::Apply: the reader applies the item's write first, as apply would.
            Some((batch, _, a)) if batch >= h.applied && !h.finished() => {
                if let Some(message) = crate::protocol::phase::apply::apply_item(store, m, h, batch, &a).await? {
                    return Err(TxError::ApplyRejected { tx_id: h.id.clone(), action: a.describe(), message });
                }
                // Applied, by this read or by apply: the item as it is now, which another transaction may hold.
                let now = store.get(m, table, key.clone()).await?;
                holders.lock().expect("holders lock").remove(&h.id);
                Box::pin(resolve(store, m, holders, table, key, now, isolation)).await
            }
            // A lock on an item of a batch already applied was taken again by a lock run that woke after the commit:
            // the item is as the transaction left it.
            _ => Ok(as_is),
        };
    }
    if transient && !applied {
        return Ok(None);
    }
    match header.map(|h| h.state) {
        Some(TxState::Committed) => {
            match crate::protocol::stored_request::find_action(store, m, holder, table, &key).await? {
                Some((_, _, a)) if a.op == Op::Delete => Ok(None),
                _ => Ok(Some(strip_reserved(item))),
            }
        }
        // Pending or rolled back: what the item was before the transaction touched it.
        Some(_) if applied => {
            let (_, pos, _) = crate::protocol::stored_request::find_action(store, m, holder, table, &key)
                .await?
                .ok_or_else(|| TxError::Internal(format!("{holder} holds an item that is not in its request")))?;
            match crate::protocol::stored_request::read_image(store, m, holder, attempt, pos).await? {
                Some(Image::Existed(before)) if is_tombstone(&before) => Ok(None),
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

/// `item` (at `table`/`key`, as read: `as_is` without dynamo-saga's attributes, `None` for an item that only holds a
/// lock) as committed protocol-2 transaction `h`, which holds its lock, leaves it: its action evaluated on it when
/// apply has not written it yet, or as it is when the lock was taken again by a lock write that landed after apply.
pub(crate) async fn committed_holder_value(
    store: &Store,
    m: &Meter,
    h: &records::Header,
    table: &str,
    key: &Item,
    item: &Item,
    as_is: Option<Item>,
) -> Result<Option<Item>, TxError> {
    let found = crate::protocol::stored_request::find_action(store, m, &h.id, table, key).await?;
    holder_value(store, m, h, found.map(|(batch, _, a)| (batch, a)), item, as_is).await
}

/// [`committed_holder_value`], given the action of `h` on the item and its batch (`None`: `h` has none on it).
pub(crate) async fn holder_value(
    store: &Store,
    m: &Meter,
    h: &records::Header,
    found: Option<(usize, crate::model::request::Action)>,
    item: &Item,
    as_is: Option<Item>,
) -> Result<Option<Item>, TxError> {
    let Some((batch, a)) = found else {
        return Ok(as_is);
    };
    match h.lock_id(batch, a.index) {
        // The lock its batch was recorded locked with, which apply removes as it writes the item: not applied yet,
        // whatever the header read after the item says of the batch.
        Some(id) if LockId::of(item) == Some(id) => committed_value(store, m, h, &a, as_is).await,
        // Another id: a lock write that landed after apply wrote the item; the item is as the transaction left it.
        Some(_) => Ok(as_is),
        // A transaction begun before lock writes carried ids: its batch not recorded applied yet.
        None if batch >= h.applied && !h.finished() => committed_value(store, m, h, &a, as_is).await,
        // A lock on an item of a batch already applied was taken again by a lock run that woke after the commit.
        None => Ok(as_is),
    }
}

/// The value committed action `a` of protocol-2 transaction `h` leaves on an item it has not applied yet, `before`
/// being the item as it was. An update is evaluated as DynamoDB will apply it.
async fn committed_value(
    store: &Store,
    m: &Meter,
    h: &records::Header,
    a: &crate::model::request::Action,
    before: Option<Item>,
) -> Result<Option<Item>, TxError> {
    Ok(match a.op {
        Op::Put => a.item.clone(),
        Op::Delete => None,
        Op::ConditionCheck => before,
        Op::Update => {
            let schema = store.schema(m, &a.table).await?;
            let after = crate::protocol::phase::evaluate(a, before.as_ref(), &schema).map_err(|e| {
                TxError::ApplyRejected { tx_id: h.id.clone(), action: a.describe(), message: e.to_string() }
            })?;
            Some(strip_reserved(after))
        }
    })
}
