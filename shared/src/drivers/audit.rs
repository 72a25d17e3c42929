//! The audit: what dynamo-saga left on a table, found by reading all of it.
//!
//! A transaction that ends leaves nothing on the items it wrote, and one that may have had writes in flight when it
//! ended is visited again once they can no longer land ([`crate::Config::revisit_after`]). The audit is for what
//! neither covers: tables written before that visit existed, and faults nobody foresaw. It scans each table named
//! (every item, one page at a time: its read units are the table's size in 4 KB units, halved, as any eventually
//! consistent scan's), and for each item that holds a lock asks the lock's transaction: a lock of a transaction that
//! has ended (or whose records have expired) is a trace; a lock of one still running is left alone. With `clear`, each
//! trace is removed with a conditional write on that very lock (the holder and the id it carries, as read), which
//! deletes an item created only to hold it. Tombstones (`_sagaTombstone`) are deletes a transaction wrote on purpose
//! and expire by their own time to live: they are not traces.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use serde::Serialize;

use crate::constants::{ATTR_TRANSIENT, ATTR_WRITTEN_BY, RESERVED_PREFIX};
use crate::dynamo::store::{Meter, Store};
use crate::error::TxError;
use crate::model::item_attrs::{flag, lock_holder, LockId};
use crate::model::value::{item_to_json, Item};
use crate::protocol::phase::revisit::{clear, Left};
use crate::protocol::records::{self, TxState};

/// One item that holds something of a transaction that has ended.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Trace {
    pub table_name: String,
    /// The item's key, in DynamoDB JSON.
    pub key: serde_json::Value,
    pub transaction_id: String,
    /// `COMMITTED`, `ROLLED_BACK`, or `EXPIRED` when its records are gone.
    pub transaction_state: String,
    /// The item exists only to hold the lock (it did not exist before the transaction).
    pub transient: bool,
    /// The `_saga*` attributes it carries.
    pub attributes: Vec<String>,
    /// Removed by this audit (with `clear`).
    pub cleared: bool,
}

/// What an audit of one table found.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct TableAudit {
    pub table_name: String,
    /// Items read.
    pub scanned: u64,
    /// Items locked by a transaction still under way, left alone.
    pub in_progress: u64,
    pub traces: Vec<Trace>,
    /// Read units the scan consumed, as DynamoDB reported them.
    pub read_units: f64,
}

/// Progress of an audit, for a caller to show: the table, and the items read so far.
#[derive(Debug, Clone, Copy)]
pub struct Progress<'a> {
    pub table_name: &'a str,
    pub scanned: u64,
}

/// Scans `table` for dynamo-saga's attributes left by transactions that have ended, and with `clear` removes them (see
/// the module's docs). `progress` is called after every page.
pub async fn audit_table(
    store: &Store,
    table: &str,
    clear_traces: bool,
    mut progress: impl FnMut(Progress<'_>),
) -> Result<TableAudit, TxError> {
    let m = Meter::default();
    let key_names = store.schema(&m, table).await?.key_names.clone();
    let mut out = TableAudit { table_name: table.to_string(), ..TableAudit::default() };
    let mut states: HashMap<String, Holder> = HashMap::new();
    let mut start: Option<HashMap<String, AttributeValue>> = None;
    loop {
        let page = store
            .client
            .scan()
            .table_name(table)
            .set_exclusive_start_key(start.take())
            .return_consumed_capacity(aws_sdk_dynamodb::types::ReturnConsumedCapacity::Total)
            .send()
            .await
            .map_err(|e| TxError::DynamoDb {
                op: "Scan",
                message: aws_sdk_dynamodb::error::DisplayErrorContext(&e).to_string(),
            })?;
        out.read_units += page.consumed_capacity().and_then(|c| c.capacity_units()).unwrap_or(0.0);
        let items = page.items.unwrap_or_default();
        out.scanned += items.len() as u64;
        let mut found = Vec::new();
        for item in items {
            let Some(owner) = lock_holder(&item).map(str::to_owned) else { continue };
            let tx_id = records::parse_owner(&owner).0.to_string();
            if !states.contains_key(&tx_id) {
                let state = ended(store, &m, &tx_id).await?;
                states.insert(tx_id.clone(), state);
            }
            let state = match &states[&tx_id] {
                Holder::Running => {
                    out.in_progress += 1;
                    continue;
                }
                Holder::Finished(state) => state.as_str(),
                Holder::Expired => "EXPIRED",
            };
            let key: Item =
                item.iter().filter(|(k, _)| key_names.contains(k)).map(|(k, v)| (k.clone(), v.clone())).collect();
            let t = trace(table, &key, &item, &tx_id, state);
            found.push((t, Left { table: table.to_string(), key, owner, id: LockId::of(&item) }));
        }
        for (mut t, left) in found {
            if clear_traces {
                t.cleared = clear(store, &m, vec![left]).await? == 1;
            }
            out.traces.push(t);
        }
        progress(Progress { table_name: table, scanned: out.scanned });
        match page.last_evaluated_key.filter(|k| !k.is_empty()) {
            Some(k) => start = Some(k),
            None => break,
        }
    }
    Ok(out)
}

/// Where the transaction holding a lock is.
enum Holder {
    Running,
    Finished(TxState),
    /// Its records are gone: it ended at least the retention period ago.
    Expired,
}

async fn ended(store: &Store, m: &Meter, tx_id: &str) -> Result<Holder, TxError> {
    match records::read_header(store, m, tx_id).await {
        Ok(h) if h.finished() => Ok(Holder::Finished(h.state)),
        Ok(_) => Ok(Holder::Running),
        Err(TxError::NotFound(_)) => Ok(Holder::Expired),
        Err(e) => Err(e),
    }
}

fn trace(table: &str, key: &Item, item: &Item, tx_id: &str, state: &str) -> Trace {
    let mut attributes: Vec<String> =
        item.keys().filter(|k| k.starts_with(RESERVED_PREFIX) && *k != ATTR_WRITTEN_BY).cloned().collect();
    attributes.sort();
    Trace {
        table_name: table.to_string(),
        key: item_to_json(key),
        transaction_id: tx_id.to_string(),
        transaction_state: state.to_string(),
        transient: flag(item, ATTR_TRANSIENT),
        attributes,
        cleared: false,
    }
}
