//! Snapshot reads: `TransactGetItems` of any number of items, each as it was at one instant between the call's start
//! and its end, at the price of two strongly consistent reads an item and without a write.
//!
//! The request is `TransactGetItems`'s: `TransactItems` of `Get` (`TableName`, `Key`, `ProjectionExpression`,
//! `ExpressionAttributeNames`), across the allowed tables; the answer its `Responses`, in request order, an absent
//! item as an empty response.
//!
//! ## How
//!
//! Every item is read twice, strongly consistent (`BatchGetItem`, 100 keys a call, every call of one pass in flight
//! at once), the second pass starting once the first has ended. Every write of dynamo-saga to an item leaves a trace
//! until a read sees it: its lock until it is applied, then the id of its transaction
//! ([`crate::constants::ATTR_WRITTEN_BY`]), which a later transaction's write replaces with its own. So an item read
//! the same, attributes and all, at both passes took no transaction's write in between, and every such item held its
//! value from the end of the first pass to the start of the second: one instant they all held.
//!
//! An item locked at both passes by the same lock is read as its transaction leaves it at that instant, which the
//! holder's header says, read twice: once between the passes (after the first has ended, before the second starts)
//! and again during the second. Not committed at the second read (pending, rolled back, or a lock of an earlier
//! attempt or of records that expired), the item as it was; committed already at the first, as its action leaves it
//! (an update evaluated as apply will write it, a `Put`'s item, a `Delete` absent). The instant is then the second
//! pass's start: every holder committed at the first read was committed then, and every holder not committed at the
//! second was not. A holder that committed between the two header reads, an item that changed, or a lock of a
//! protocol-1 transaction, makes the read take a third pass and compare it with the second (the header read during
//! the second standing for the one between), and so on: up to [`MAX_PASSES`], with a short pause after a
//! pass that saw items change. Past that, the read is cancelled with `TransactionConflict` for each item that did not
//! settle (`None` for the others), as `TransactGetItems` reports a conflict with a running transaction.
//!
//! ## What it promises
//!
//! - Every item as committed at one instant: never part of a dynamo-saga transaction, never a value a pending
//!   transaction holds. Items that exist at both passes, and tombstones (which read as absent and carry their
//!   transaction's id), are exact.
//! - An item absent at both passes was absent at both; if, between them, one transaction created it and a later one
//!   deleted it again, nothing is left on it to see, and the snapshot may show part of either. Read keys that are
//!   created and deleted while others read them with a read lock ([`crate::read::lock_for_read`]).
//! - Writers outside the protocol: a write that leaves an item different between the two passes is seen, and the read
//!   takes another pass. One that changes an item and puts it back as it was between the two passes is not (it leaves
//!   no transaction id). A transaction's write DynamoDB would refuse with the id (an item within 33 bytes of 400 KB, or
//!   of a local index's share; an update expression near 4 KB) is written without it, and is seen the same way.
//! - `Parent` items: their values are exact; their lock attributes (`lockToken`, `recordVersionNumber`, ...) are
//!   those one pass read, and a parent lock taken and released between the two passes, which leaves the item as it
//!   was, is not seen.
//! - Exactness needs every writer of the items to leave the transaction's id: dynamo-saga from this version on. A
//!   function or process of an earlier version, still running during an upgrade, writes without it.
//!
//! ## What it costs
//!
//! Read units as two strongly consistent `BatchGetItem` passes bill them (one unit per 4 KB of each item a pass,
//! one for an absent item), the price of native `TransactGetItems` (two units per 4 KB); two `GetItem`s of a header
//! for each transaction holding an item (one a pass after the first); and for the items of a committed transaction not
//! yet applied, their actions from the transaction's stored request (each found by a search over its batches, or every
//! batch read once when that reads less). Two round trips without contention; three when the first pass finds items
//! locked, the headers' read between the passes.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use aws_sdk_dynamodb::types::{AttributeValue, TransactGetItem};
use dynamo_saga_expressions::expr::{self, PathElem};
use futures::StreamExt;
use serde_json::{json, Value};

use crate::constants::{ATTR_APPLIED, ATTR_TRANSIENT, RESERVED_PREFIX};
use crate::drivers::read::holder_value;
use crate::dynamo::store::{Meter, Store, Usage};
use crate::error::{Cancellation, CancellationReason, TxError};
use crate::model::item_attrs::{flag, lock_holder, strip_reserved};
use crate::model::plan::Part;
use crate::model::request::{check_key, checks, is_tombstone, Action};
use crate::model::value::{self, item_to_json, key_order, Item};
use crate::protocol::records::{self, Header, TxState};
use crate::protocol::stored_request;

/// Passes a read takes at most before it is cancelled with `TransactionConflict`.
pub const MAX_PASSES: u32 = 8;

/// One `Get` of the request.
#[derive(Debug, Clone, PartialEq)]
pub struct Get {
    pub table: String,
    pub key: Item,
    /// The `ProjectionExpression`'s paths, with `ExpressionAttributeNames` substituted: each a list of attribute
    /// names and list indexes.
    pub projection: Option<Vec<Vec<Step>>>,
}

/// One step of a projected path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    Name(String),
    Index(u32),
}

/// A snapshot read's answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    /// Each `Get`'s item, in request order (`None`: absent), projected as the `Get` asked.
    pub responses: Vec<Option<Item>>,
    /// Passes over the items it took (two without contention).
    pub passes: u32,
    /// What it read: calls and read units.
    pub usage: Usage,
}

impl Snapshot {
    /// The answer as `TransactGetItems` gives it: `{"Responses": [{"Item": {...}} or {}, ...]}`, with the passes and
    /// the read units it took.
    pub fn to_json(&self) -> Value {
        let responses: Vec<Value> = self
            .responses
            .iter()
            .map(|r| r.as_ref().map_or_else(|| json!({}), |i| json!({"Item": item_to_json(i)})))
            .collect();
        json!({"Responses": responses, "Passes": self.passes, "ReadUnits": self.usage.read_units, "Calls": self.usage.calls})
    }
}

/// Reads the items `request` (`TransactGetItems`'s JSON) names as one snapshot (see the module's documentation).
/// A bad request is refused with `ValidationError` naming the item, before anything is read.
pub async fn transact_get_items(store: &Store, request: &Value) -> Result<Snapshot, TxError> {
    let m = Meter::default();
    let gets = validate(store, &m, request).await?;
    read(store, &m, &gets).await
}

/// [`transact_get_items`] of the SDK's `TransactGetItem`s.
pub async fn transact_get_items_sdk(store: &Store, items: &[TransactGetItem]) -> Result<Snapshot, TxError> {
    transact_get_items(store, &crate::dynamo::sdk::transact_get_items_json(items)?).await
}

/// The request's `Get`s, each checked as `TransactGetItems` checks it: a table this deployment may read that exists,
/// a key of its key schema, no item twice, a projection that parses with every name it uses defined and every name
/// defined used, and no name of dynamo-saga's.
pub async fn validate(store: &Store, m: &Meter, request: &Value) -> Result<Vec<Get>, TxError> {
    let obj = request.as_object().ok_or_else(|| TxError::invalid(None, "the request must be a JSON object"))?;
    if let Some(k) = obj.keys().find(|k| *k != "TransactItems") {
        return Err(TxError::invalid(None, format!("unknown field {k:?} (expected TransactItems)")));
    }
    let items = obj
        .get("TransactItems")
        .and_then(Value::as_array)
        .ok_or_else(|| TxError::invalid(None, "TransactItems is required, a list of {\"Get\": {...}}"))?;
    if items.is_empty() {
        return Err(TxError::invalid(None, "TransactItems must name at least one item"));
    }
    if items.len() > store.cfg.max_actions {
        return Err(TxError::invalid(
            None,
            format!(
                "TransactItems names {} items, over this deployment's {} (SAGA_MAX_ACTIONS)",
                items.len(),
                store.cfg.max_actions
            ),
        ));
    }
    let mut gets = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        gets.push(
            parse_get(item, &store.cfg)
                .map_err(|e| TxError::invalid(Some(i), format!("TransactItems[{i}].Get: {e}")))?,
        );
    }
    let mut seen: HashMap<Vec<u8>, usize> = HashMap::new();
    for (i, g) in gets.iter().enumerate() {
        let schema = match store.schema(m, &g.table).await {
            Err(e)
                if e.is_missing_table()
                    || matches!(&e, TxError::Validation(v) if v.message.ends_with("does not exist")) =>
            {
                return Err(TxError::invalid(
                    Some(i),
                    format!("TransactItems[{i}].Get: table {:?} does not exist", g.table),
                ))
            }
            schema => schema?,
        };
        check_key(&g.key, &schema).map_err(|e| {
            TxError::invalid(
                Some(i),
                format!("TransactItems[{i}].Get: Key: the provided key element does not match the schema: {e}"),
            )
        })?;
        if let Some(first) = seen.insert(key_order(&g.table, &g.key, &schema.key_names), i) {
            return Err(TxError::invalid(
                Some(i),
                format!("TransactItems[{i}].Get: Transaction request cannot include multiple operations on one item (TransactItems[{first}] names it too)"),
            ));
        }
    }
    Ok(gets)
}

fn parse_get(item: &Value, cfg: &crate::config::Config) -> Result<Get, String> {
    let obj = item.as_object().ok_or("each of TransactItems must be {\"Get\": {...}}")?;
    let get = match (obj.len(), obj.get("Get")) {
        (1, Some(Value::Object(g))) => g,
        _ => return Err("each of TransactItems must have exactly one member, Get (a snapshot read only reads)".into()),
    };
    const FIELDS: [&str; 4] = ["TableName", "Key", "ProjectionExpression", "ExpressionAttributeNames"];
    if let Some(k) = get.keys().find(|k| !FIELDS.contains(&k.as_str())) {
        return Err(format!("unknown field {k:?} (expected {})", FIELDS.join(", ")));
    }
    let table = match get.get("TableName") {
        Some(Value::String(t)) => t.clone(),
        Some(_) => return Err("TableName must be a string".into()),
        None => return Err("TableName is required".into()),
    };
    checks::check_table(&table, cfg)?;
    let key = match get.get("Key") {
        Some(k) => value::item_from_json(k).map_err(|e| format!("Key: {e}"))?,
        None => return Err("Key is required".into()),
    };
    value::check_attributes(&key).map_err(|e| format!("Key: {e}"))?;
    let names: BTreeMap<String, String> = match get.get("ExpressionAttributeNames") {
        None => BTreeMap::new(),
        Some(Value::Object(n)) if !n.is_empty() => n
            .iter()
            .map(|(k, v)| match v {
                Value::String(s) => Ok((k.clone(), s.clone())),
                _ => Err(format!("ExpressionAttributeNames: {k:?} must name an attribute (a string)")),
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err("ExpressionAttributeNames must not be empty".into()),
    };
    let projection = match get.get("ProjectionExpression") {
        None if names.is_empty() => None,
        None => return Err("ExpressionAttributeNames can only be specified when using expressions".into()),
        Some(Value::String(p)) => Some(projection(p, &names)?),
        Some(_) => return Err("ProjectionExpression must be a string".into()),
    };
    Ok(Get { table, key, projection })
}

/// A `ProjectionExpression`'s paths with the names substituted.
fn projection(text: &str, names: &BTreeMap<String, String>) -> Result<Vec<Vec<Step>>, String> {
    let refs = expr::parse_projection(text).map_err(|e| format!("ProjectionExpression: {e}"))?;
    if let Some(p) = refs.name_placeholders.iter().find(|p| !names.contains_key(*p)) {
        return Err(format!(
            "ProjectionExpression: an expression attribute name used in the document path is not defined; attribute name: {p}"
        ));
    }
    let unused: Vec<&String> = names.keys().filter(|k| !refs.name_placeholders.contains(*k)).collect();
    if !unused.is_empty() {
        let keys: Vec<&str> = unused.iter().map(|k| k.as_str()).collect();
        return Err(format!(
            "Value provided in ExpressionAttributeNames unused in expressions: keys: {{{}}}",
            keys.join(", ")
        ));
    }
    refs.paths
        .iter()
        .map(|path| {
            path.0
                .iter()
                .map(|e| {
                    let name = match e {
                        PathElem::Name(n) => n.clone(),
                        PathElem::Placeholder(p) => names[p].clone(),
                        PathElem::Index(i) => return Ok(Step::Index(*i)),
                    };
                    if name.starts_with(RESERVED_PREFIX) {
                        return Err(format!(
                            "ProjectionExpression: attribute {name:?} is reserved for dynamo-saga (names starting with {RESERVED_PREFIX:?})"
                        ));
                    }
                    Ok(Step::Name(name))
                })
                .collect()
        })
        .collect()
}

/// One pass over every item, and the headers of the transactions holding items: for the first pass, those it found,
/// read after it ended; for each later one, those the pass before found, read during it.
struct Pass {
    items: Vec<Option<Item>>,
    headers: HashMap<String, Option<Header>>,
}

impl Pass {
    /// The transactions (ids) whose locks this pass found.
    fn holders(&self) -> Vec<String> {
        let ids: BTreeSet<String> = self
            .items
            .iter()
            .flatten()
            .filter_map(lock_holder)
            .map(|owner| records::parse_owner(owner).0.to_string())
            .collect();
        ids.into_iter().collect()
    }
}

/// Reads `gets` as one snapshot (see the module's documentation).
pub async fn read(store: &Store, m: &Meter, gets: &[Get]) -> Result<Snapshot, TxError> {
    let mut before = pass(store, m, gets, &[]).await?;
    // The headers of the transactions holding items, read after the first pass ends and before the second starts: a
    // holder committed then settles its items at the second pass.
    before.headers = headers(store, m, &before.holders()).await?;
    let mut passes = 1;
    loop {
        let now = pass(store, m, gets, &before.holders()).await?;
        passes += 1;
        let settled = settle(store, m, gets, &before, &now).await?;
        let unsettled = match settled {
            Ok(items) => {
                let responses = gets.iter().zip(items).map(|(g, i)| i.map(|i| project(i, g))).collect();
                return Ok(Snapshot { responses, passes, usage: m.usage() });
            }
            Err(unsettled) => unsettled,
        };
        if passes >= MAX_PASSES {
            let reasons = (0..gets.len())
                .map(|i| {
                    if unsettled.contains(&i) {
                        CancellationReason::new(
                            CancellationReason::TRANSACTION_CONFLICT,
                            format!("Transaction is ongoing for the item: it changed at each of {passes} reads"),
                        )
                    } else {
                        CancellationReason::none()
                    }
                })
                .collect();
            return Err(TxError::Canceled(Box::new(Cancellation::new(&ulid::Ulid::new().to_string(), reasons))));
        }
        // Items that changed are being written: give the writer a moment (10, 20, 40 ... ms).
        if unsettled.iter().any(|&i| before.items[i] != now.items[i]) {
            tokio::time::sleep(std::time::Duration::from_millis(10 << (passes - 2).min(5))).await;
        }
        before = now;
    }
}

/// Every item of `gets`, read strongly consistent, every call in flight at once up to the store's concurrency; with
/// the headers of `holders` read meanwhile.
async fn pass(store: &Store, m: &Meter, gets: &[Get], holders: &[String]) -> Result<Pass, TxError> {
    let mut by_table: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, g) in gets.iter().enumerate() {
        by_table.entry(&g.table).or_default().push(i);
    }
    let mut calls = Vec::new();
    for (table, indexes) in &by_table {
        for chunk in indexes.chunks(100) {
            calls.push((*table, chunk.to_vec()));
        }
    }
    let reads = futures::stream::iter(calls.into_iter().map(|(table, chunk)| async move {
        let keys = chunk.iter().map(|&i| gets[i].key.clone()).collect();
        let found = store.batch_get(m, table, keys).await?;
        Ok::<_, TxError>((table, chunk, found))
    }))
    .buffer_unordered(store.cfg.concurrency.max(1))
    .collect::<Vec<_>>();
    let (reads, headers) = futures::join!(reads, headers(store, m, holders));
    let mut items = vec![None; gets.len()];
    for read in reads {
        let (table, chunk, found) = read?;
        let names = store.schema(m, table).await?.key_names.clone();
        let at: HashMap<Vec<u8>, usize> = chunk.iter().map(|&i| (key_order(table, &gets[i].key, &names), i)).collect();
        for item in found {
            let key: Item = names.iter().filter_map(|k| item.get(k).map(|v| (k.clone(), v.clone()))).collect();
            if let Some(&i) = at.get(&key_order(table, &key, &names)) {
                items[i] = Some(item);
            }
        }
    }
    Ok(Pass { items, headers: headers? })
}

/// The header of each of `holders`, all read at once (`None`: its records have expired).
async fn headers(store: &Store, m: &Meter, holders: &[String]) -> Result<HashMap<String, Option<Header>>, TxError> {
    futures::future::join_all(holders.iter().map(|id| async move {
        match records::read_header(store, m, id).await {
            Ok(h) => Ok((id.clone(), Some(h))),
            Err(TxError::NotFound(_)) => Ok((id.clone(), None)),
            Err(e) => Err(e),
        }
    }))
    .await
    .into_iter()
    .collect()
}

/// An item a committed holder has not applied yet: its index, the item, and the item as it was before the holder.
type Held<'a> = (usize, &'a Item, Option<Item>);

/// What two consecutive passes settle: every item, as committed at an instant between them, or the items that did not
/// settle (changed between them, or held by a transaction whose commit may fall between them).
async fn settle(
    store: &Store,
    m: &Meter,
    gets: &[Get],
    before: &Pass,
    now: &Pass,
) -> Result<Result<Vec<Option<Item>>, Vec<usize>>, TxError> {
    let mut out = Vec::with_capacity(gets.len());
    let mut unsettled = Vec::new();
    // Items of committed holders not applied yet, by holder: each as its holder's action leaves it, worked out once
    // every item has been looked at.
    let mut held: BTreeMap<&str, Vec<Held>> = BTreeMap::new();
    for i in 0..gets.len() {
        let (was, is) = (&before.items[i], &now.items[i]);
        if was != is {
            unsettled.push(i);
            out.push(None);
            continue;
        }
        let Some(item) = is.as_ref().filter(|i| !is_tombstone(i)) else {
            out.push(None);
            continue;
        };
        let Some(owner) = lock_holder(item) else {
            out.push(Some(strip_reserved(item.clone())));
            continue;
        };
        let (holder, attempt) = records::parse_owner(owner);
        let as_is = if flag(item, ATTR_TRANSIENT) && !flag(item, ATTR_APPLIED) {
            None
        } else {
            Some(strip_reserved(item.clone()))
        };
        match now.headers.get(holder) {
            // The holder's records have expired: its lock is stale, the item what is left.
            Some(None) => out.push(as_is),
            // A lock an earlier attempt left: that attempt wrote nothing else to the item.
            Some(Some(h)) if h.attempt != attempt => out.push(as_is),
            Some(Some(h)) if h.commits_first() && h.state != TxState::Committed => out.push(as_is),
            Some(Some(h)) if h.commits_first() && committed(before, holder) => {
                held.entry(holder).or_default().push((i, item, as_is));
                out.push(None);
            }
            // Committed since the pass before (its commit may fall between the two passes), a protocol-1
            // transaction (which applies before it commits), or a holder not read yet.
            _ => {
                unsettled.push(i);
                out.push(None);
            }
        }
    }
    if !unsettled.is_empty() {
        return Ok(Err(unsettled));
    }
    for (holder, items) in held {
        let Some(Some(h)) = now.headers.get(holder) else {
            return Err(TxError::Internal(format!("snapshot: the header of {holder} was not read")));
        };
        let keys: Vec<(&str, &Item)> = items.iter().map(|(i, _, _)| (gets[*i].table.as_str(), &gets[*i].key)).collect();
        let mut actions = actions_on(store, m, &h.id, &keys).await?;
        for ((i, item, as_is), found) in items.into_iter().zip(actions.drain(..)) {
            out[i] = holder_value(store, m, h, found, item, as_is).await?;
        }
    }
    Ok(Ok(out))
}

/// The action of transaction `tx_id` on each of `keys` and its batch, in order (`None` where it has none): each found
/// by itself in the stored request (a search over its batches), or, when that would read more, every batch read once.
async fn actions_on(
    store: &Store,
    m: &Meter,
    tx_id: &str,
    keys: &[(&str, &Item)],
) -> Result<Vec<Option<(usize, Action)>>, TxError> {
    let plan = stored_request::read_plan(store, m, tx_id).await?;
    let batches = plan.batch_count();
    let search = usize::BITS as usize - batches.leading_zeros() as usize + 1;
    if keys.len() * search < batches {
        let mut out = Vec::with_capacity(keys.len());
        for (table, key) in keys {
            out.push(stored_request::find_action(store, m, tx_id, table, key).await?.map(|(b, _, a)| (b, a)));
        }
        return Ok(out);
    }
    let mut by_key: HashMap<Vec<u8>, (usize, Action)> = HashMap::new();
    for (b, _, a) in stored_request::read_batches(store, m, tx_id, &plan, 0..batches, Part::Whole).await? {
        let names = &store.schema(m, &a.table).await?.key_names;
        by_key.insert(key_order(&a.table, &a.key, names), (b, a));
    }
    let mut out = Vec::with_capacity(keys.len());
    for (table, key) in keys {
        let names = &store.schema(m, table).await?.key_names;
        out.push(by_key.remove(&key_order(table, key, names)));
    }
    Ok(out)
}

/// Whether the header of `holder` read during `pass` found it committed.
fn committed(pass: &Pass, holder: &str) -> bool {
    matches!(pass.headers.get(holder), Some(Some(h)) if h.state == TxState::Committed)
}

/// `item` with only the attributes `g`'s projection names (the whole item without one).
fn project(item: Item, g: &Get) -> Item {
    let Some(paths) = &g.projection else { return item };
    enum Node {
        Whole(AttributeValue),
        Map(BTreeMap<String, Node>),
        List(BTreeMap<u32, Node>),
    }
    fn insert(into: &mut Node, value: &AttributeValue, path: &[Step]) {
        let Some((first, rest)) = path.split_first() else {
            *into = Node::Whole(value.clone());
            return;
        };
        match (first, value) {
            (Step::Name(n), AttributeValue::M(m)) => {
                if let (Some(v), Node::Map(children)) = (m.get(n), &mut *into) {
                    insert(children.entry(n.clone()).or_insert_with(|| empty(rest)), v, rest);
                }
            }
            (Step::Index(i), AttributeValue::L(l)) => {
                if let (Some(v), Node::List(children)) = (l.get(*i as usize), &mut *into) {
                    insert(children.entry(*i).or_insert_with(|| empty(rest)), v, rest);
                }
            }
            _ => {}
        }
    }
    fn empty(rest: &[Step]) -> Node {
        match rest.first() {
            Some(Step::Index(_)) => Node::List(BTreeMap::new()),
            _ => Node::Map(BTreeMap::new()),
        }
    }
    fn build(node: Node) -> Option<AttributeValue> {
        match node {
            Node::Whole(v) => Some(v),
            // A map or list none of whose projected paths was found is left out, as DynamoDB leaves it out.
            Node::Map(m) => {
                let kept: std::collections::HashMap<String, AttributeValue> =
                    m.into_iter().filter_map(|(k, n)| Some((k, build(n)?))).collect();
                (!kept.is_empty()).then_some(AttributeValue::M(kept))
            }
            Node::List(l) => {
                let kept: Vec<AttributeValue> = l.into_values().filter_map(build).collect();
                (!kept.is_empty()).then_some(AttributeValue::L(kept))
            }
        }
    }
    let whole = AttributeValue::M(item.into_iter().collect());
    let mut root = Node::Map(BTreeMap::new());
    for path in paths {
        insert(&mut root, &whole, path);
    }
    match build(root) {
        Some(AttributeValue::M(m)) => m.into_iter().collect(),
        _ => Item::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn av(v: Value) -> AttributeValue {
        value::to_av(&v).unwrap()
    }

    fn get(projection: &str, names: &[(&str, &str)]) -> Get {
        let names = names.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Get { table: "t".into(), key: Item::new(), projection: Some(projection_of(projection, &names)) }
    }

    fn projection_of(p: &str, names: &BTreeMap<String, String>) -> Vec<Vec<Step>> {
        projection(p, names).unwrap()
    }

    #[test]
    fn a_projection_keeps_the_paths_it_names_as_dynamodb_does() {
        let item: Item = [
            ("pk".to_string(), av(json!({"S": "k"}))),
            ("a".to_string(), av(json!({"L": [{"N": "0"}, {"N": "1"}, {"N": "2"}, {"N": "3"}]}))),
            ("m".to_string(), av(json!({"M": {"x": {"S": "1"}, "y": {"M": {"z": {"BOOL": true}}}}}))),
            ("year".to_string(), av(json!({"N": "2026"}))),
        ]
        .into_iter()
        .collect();
        let p = project(item.clone(), &get("a[3], a[1], m.y.z, #y, gone, m.nope", &[("#y", "year")]));
        assert_eq!(
            item_to_json(&p),
            json!({"a": {"L": [{"N": "1"}, {"N": "3"}]}, "m": {"M": {"y": {"M": {"z": {"BOOL": true}}}}}, "year": {"N": "2026"}})
        );
        assert_eq!(
            project(item.clone(), &get("pk", &[])),
            [("pk".to_string(), av(json!({"S": "k"})))].into_iter().collect()
        );
        assert!(
            project(item.clone(), &get("a.b, m[0]", &[])).is_empty(),
            "a path through the wrong type finds nothing"
        );
        assert!(project(item.clone(), &get("m.y.nope, a[9]", &[])).is_empty(), "no map or list holding nothing found");
        let whole = Get { projection: None, ..get("pk", &[]) };
        assert_eq!(project(item.clone(), &whole), item);
    }

    #[test]
    fn a_bad_projection_is_refused_as_dynamodb_refuses_it() {
        let names = |n: &[(&str, &str)]| n.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        assert!(projection("#a", &names(&[])).unwrap_err().contains("not defined; attribute name: #a"));
        assert!(projection("a", &names(&[("#b", "b")])).unwrap_err().contains("unused in expressions: keys: {#b}"));
        assert!(projection("a, a.b", &names(&[])).unwrap_err().contains("overlap"));
        assert!(projection("_sagaLock", &names(&[])).unwrap_err().contains("reserved for dynamo-saga"));
        assert!(projection("#l", &names(&[("#l", "_sagaTx")])).unwrap_err().contains("reserved for dynamo-saga"));
        assert!(projection("", &names(&[])).is_err());
    }

    #[test]
    fn each_get_is_checked_before_anything_is_read() {
        let cfg = crate::config::Config::new("tx").with_allowed_tables(["Orders"]);
        let ok = json!({"Get": {"TableName": "Orders", "Key": {"pk": {"S": "a"}}}});
        assert!(parse_get(&ok, &cfg).is_ok());
        let bad = |v: Value| parse_get(&v, &cfg).unwrap_err();
        assert!(bad(json!({"Put": {"TableName": "Orders"}})).contains("exactly one member, Get"));
        assert!(bad(json!({"Get": {"TableName": "Other", "Key": {"pk": {"S": "a"}}}}))
            .contains("not in the allowed tables"));
        assert!(bad(json!({"Get": {"TableName": "Orders"}})).contains("Key is required"));
        assert!(bad(json!({"Get": {"TableName": "Orders", "Key": {"pk": {"Q": "a"}}}})).starts_with("Key: "));
        assert!(bad(
            json!({"Get": {"TableName": "Orders", "Key": {"pk": {"S": "a"}}, "ExpressionAttributeNames": {"#a": "a"}}})
        )
        .contains("only be specified when using expressions"));
        assert!(bad(json!({"Get": {"TableName": "Orders", "Key": {"pk": {"S": "a"}}, "ConsistentRead": true}}))
            .contains("unknown field \"ConsistentRead\""));
    }
}
