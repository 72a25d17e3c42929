//! The request: DynamoDB's `TransactWriteItems` with any number of actions, typed once at the edge it came through
//! (JSON: [`parse`]; the SDK's values: [`crate::dynamo::sdk`]), and its validation.
//!
//! Validation happens in two steps. Each edge checks everything that needs no table metadata, with the same checks
//! (`checks`); [`validate`] checks keys against each table's key schema and returns the actions ready to plan. Both
//! run before anything is written.

use std::collections::{BTreeSet, HashMap};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::config::Config;
use crate::constants::{ATTR_TOMBSTONE, MAX_ITEM_BYTES};
use crate::error::TxError;
use crate::model::schema::TableSchema;
use crate::model::value::{self, Item};

pub(crate) mod checks;
mod hash;
mod json;

pub use json::parse;

/// The four kinds of action `TransactWriteItems` takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Op {
    Put,
    Update,
    Delete,
    ConditionCheck,
}

impl Op {
    fn from_key(k: &str) -> Option<Op> {
        Some(match k {
            "Put" => Op::Put,
            "Update" => Op::Update,
            "Delete" => Op::Delete,
            "ConditionCheck" => Op::ConditionCheck,
            _ => return None,
        })
    }
    pub fn as_str(self) -> &'static str {
        match self {
            Op::Put => "Put",
            Op::Update => "Update",
            Op::Delete => "Delete",
            Op::ConditionCheck => "ConditionCheck",
        }
    }
    /// Whether the action changes the item (and so needs a saved image).
    pub fn writes(self) -> bool {
        !matches!(self, Op::ConditionCheck)
    }
}

/// One validated action.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Action {
    /// Position in the caller's `TransactItems` (request order), used for `CancellationReasons`.
    #[serde(rename = "i")]
    pub index: usize,
    #[serde(rename = "o")]
    pub op: Op,
    #[serde(rename = "t")]
    pub table: String,
    #[serde(rename = "k", with = "item_json")]
    pub key: Item,
    /// The whole item of a `Put`.
    #[serde(rename = "it", default, skip_serializing_if = "Option::is_none", with = "opt_item_json")]
    pub item: Option<Item>,
    #[serde(rename = "u", default, skip_serializing_if = "Option::is_none")]
    pub update: Option<String>,
    #[serde(rename = "c", default, skip_serializing_if = "Option::is_none")]
    pub condition: Option<String>,
    #[serde(rename = "n", default, skip_serializing_if = "HashMap::is_empty")]
    pub names: HashMap<String, String>,
    #[serde(rename = "v", default, skip_serializing_if = "HashMap::is_empty", with = "item_json")]
    pub values: Item,
    /// `ReturnValuesOnConditionCheckFailure: ALL_OLD`.
    #[serde(rename = "r", default, skip_serializing_if = "std::ops::Not::not")]
    pub return_old: bool,
    /// A `Delete` written as a tombstone.
    #[serde(rename = "ts", default, skip_serializing_if = "Option::is_none")]
    pub tombstone: Option<Tombstone>,
}

/// A `Delete`'s `Tombstone` (hedged writes): instead of removing the item, the delete leaves its key, `Attributes`
/// (such as the timestamp a `Ratchet` compares) and a time to live, `TimeToLiveSeconds` from when the transaction
/// completes, in `TimeToLiveAttribute` (epoch seconds, the attribute the table's TTL is set on). The tombstone is put
/// at apply, like a `Put`, and gets its time to live at complete, so it cannot expire while the item is locked.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tombstone {
    #[serde(rename = "a", default, skip_serializing_if = "HashMap::is_empty", with = "item_json")]
    pub attributes: Item,
    #[serde(rename = "n")]
    pub ttl_attribute: String,
    #[serde(rename = "s")]
    pub ttl_seconds: u64,
}

impl Tombstone {
    /// The tombstone item for `key`, written by transaction `tx_id`, without its time to live.
    pub fn item(&self, key: &Item, tx_id: &str) -> Item {
        let mut item = key.clone();
        item.extend(self.attributes.clone());
        item.insert(ATTR_TOMBSTONE.into(), aws_sdk_dynamodb::types::AttributeValue::S(tx_id.into()));
        item
    }

    /// The time to live of a tombstone completed at `now_ms` (epoch seconds).
    pub fn expires_at(&self, now_ms: u64) -> aws_sdk_dynamodb::types::AttributeValue {
        aws_sdk_dynamodb::types::AttributeValue::N((now_ms / 1000 + self.ttl_seconds).to_string())
    }
}

/// Whether `item` is a tombstone left by a `Delete` with `Tombstone`.
pub fn is_tombstone(item: &Item) -> bool {
    item.contains_key(ATTR_TOMBSTONE)
}

impl Action {
    /// Whether this is an insert: a `Put` whose own condition says the item does not exist.
    pub(crate) fn inserts(&self) -> bool {
        self.op == Op::Put
            && self
                .condition
                .as_deref()
                .is_some_and(|c| c.replace(RATCHET_CONDITION, "").contains("attribute_not_exists"))
    }

    /// Whether this action's own condition says its item exists (`attribute_exists`).
    pub(crate) fn needs_item(&self) -> bool {
        self.condition.as_deref().is_some_and(|c| c.contains("attribute_exists"))
    }

    pub fn describe(&self) -> String {
        format!("{} {}", self.op.as_str(), value::key_display(&self.table, &self.key))
    }
}

/// The optional parent item held locked for the whole transaction (fenced: every write of the transaction depends on
/// it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Parent {
    pub table_name: String,
    #[serde(with = "item_json")]
    pub key: Item,
}

/// `Options` of a request, with the configured defaults filled in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Options {
    /// Longest wait for another transaction's lock; `None` waits until the deadline.
    pub lock_wait_seconds: Option<u64>,
    pub deadline_seconds: u64,
}

/// A request parsed at its edge ([`parse`], [`crate::dynamo::sdk`]): shape, values and expressions are valid; keys are
/// not yet checked.
#[derive(Debug, Clone)]
pub struct ParsedRequest {
    pub items: Vec<RawAction>,
    pub client_request_token: Option<String>,
    pub parent: Option<(String, Item)>,
    pub options: Options,
    /// SHA-256 of the typed request, to recognise a retry of the same request under the same token.
    pub body_hash: String,
    /// SHA-256 of the request's JSON as it came (the JSON edge only), the hash a request begun before the typed
    /// request's had: a retry of such a request under its token is recognised by it.
    pub legacy_hash: Option<String>,
}

impl ParsedRequest {
    /// A request of these parts, with its hash.
    pub(crate) fn new(
        items: Vec<RawAction>,
        client_request_token: Option<String>,
        parent: Option<(String, Item)>,
        options: Options,
        legacy_hash: Option<String>,
    ) -> ParsedRequest {
        let body_hash = hash::request_hash(&items, client_request_token.as_deref(), parent.as_ref(), &options);
        ParsedRequest { items, client_request_token, parent, options, body_hash, legacy_hash }
    }
}

/// A request as a driver receives it: DynamoDB JSON (the API, events, the state machine, the CLI), or already typed
/// (the library's SDK builder, [`crate::dynamo::sdk`]). Each is parsed once, at its edge.
#[derive(Debug, Clone)]
pub enum Request<'a> {
    Json(&'a Value),
    Parsed(Box<ParsedRequest>),
}

impl Request<'_> {
    /// The typed request: JSON parsed and checked ([`parse`]), a typed one as it is.
    pub fn parse(self, cfg: &Config) -> Result<ParsedRequest, TxError> {
        match self {
            Request::Json(body) => parse(body, cfg),
            Request::Parsed(p) => Ok(*p),
        }
    }
}

impl<'a> From<&'a Value> for Request<'a> {
    fn from(body: &'a Value) -> Self {
        Request::Json(body)
    }
}

/// One action after shape checks, before key-schema checks.
#[derive(Debug, Clone, PartialEq)]
pub struct RawAction {
    pub op: Op,
    pub table: String,
    /// The `Key`, or for a `Put` its whole `Item`.
    pub key_or_item: Item,
    pub update: Option<String>,
    pub condition: Option<String>,
    pub names: HashMap<String, String>,
    pub values: Item,
    pub return_old: bool,
    pub tombstone: Option<Tombstone>,
}

/// A fully validated request, ready to plan.
#[derive(Debug, Clone)]
pub struct ValidRequest {
    pub actions: Vec<Action>,
    pub client_request_token: Option<String>,
    pub parent: Option<Parent>,
    pub options: Options,
    pub body_hash: String,
    pub legacy_hash: Option<String>,
}

fn bad(action: Option<usize>, msg: impl Into<String>) -> TxError {
    TxError::invalid(action, msg)
}

/// The placeholders a `Ratchet` adds to a `Put`'s condition (callers cannot use names starting with `#_saga`), and
/// the condition.
pub const RATCHET_NAME: &str = "#_sagaRatchet";
pub const RATCHET_CONDITION: &str = "attribute_not_exists(#_sagaRatchet) OR #_sagaRatchet <= :_sagaRatchet";

/// Bytes the reserved attributes add to a locked item (lock id, time, applied and transient flags).
pub const RESERVED_OVERHEAD: usize = 9 + 26 + 13 + 21 + 12 + 1 + 14 + 1;

/// Checks keys against the tables' key schemas and the same item appearing twice; returns the actions to plan.
pub fn validate(p: ParsedRequest, schemas: &HashMap<String, TableSchema>) -> Result<ValidRequest, TxError> {
    let mut seen: HashMap<Vec<u8>, usize> = HashMap::new();
    let mut actions = Vec::with_capacity(p.items.len());
    for (i, raw) in p.items.into_iter().enumerate() {
        let schema =
            schemas.get(&raw.table).ok_or_else(|| bad(Some(i), format!("table {:?} does not exist", raw.table)))?;
        let (key, item) = if raw.op == Op::Put {
            let key = extract_key(&raw.key_or_item, schema).map_err(|m| bad(Some(i), format!("Put: Item: {m}")))?;
            (key, Some(raw.key_or_item))
        } else {
            check_key(&raw.key_or_item, schema).map_err(|m| bad(Some(i), format!("{}: Key: {m}", raw.op.as_str())))?;
            (raw.key_or_item, None)
        };
        let order = value::key_order(&raw.table, &key, &schema.key_names);
        if let Some(first) = seen.insert(order, i) {
            return Err(bad(
                Some(i),
                format!(
                "the transaction names item {} twice (actions {first} and {i}); DynamoDB allows one action per item",
                value::key_display(&raw.table, &key)
            ),
            ));
        }
        actions.push(Action {
            index: i,
            op: raw.op,
            table: raw.table,
            key,
            item,
            update: raw.update,
            condition: raw.condition,
            names: raw.names,
            values: raw.values,
            return_old: raw.return_old,
            tombstone: raw.tombstone,
        });
    }
    let parent = match p.parent {
        None => None,
        Some((table, key)) => {
            let schema =
                schemas.get(&table).ok_or_else(|| bad(None, format!("Parent: table {table:?} does not exist")))?;
            check_key(&key, schema).map_err(|m| bad(None, format!("Parent: Key: {m}")))?;
            // A Put of the parent item keeps the parent lock's attributes until the transaction is released.
            let put_of_parent = actions.iter().find(|a| a.table == table && a.key == key && a.op == Op::Put);
            if let Some(a) = put_of_parent {
                let size = a.item.as_ref().map_or(0, value::item_size) + RESERVED_OVERHEAD;
                if size > MAX_ITEM_BYTES {
                    return Err(bad(Some(a.index), format!("Put: the item is {size} bytes with the parent lock's attributes, over DynamoDB's 400 KB item limit ({MAX_ITEM_BYTES} bytes)")));
                }
            }
            Some(Parent { table_name: table, key })
        }
    };
    Ok(ValidRequest {
        actions,
        client_request_token: p.client_request_token,
        parent,
        options: p.options,
        body_hash: p.body_hash,
        legacy_hash: p.legacy_hash,
    })
}

/// The tables a parsed request touches, so the caller can fetch their schemas.
pub fn tables_of(p: &ParsedRequest) -> BTreeSet<String> {
    let mut t: BTreeSet<String> = p.items.iter().map(|a| a.table.clone()).collect();
    if let Some((pt, _)) = &p.parent {
        t.insert(pt.clone());
    }
    t
}

fn check_key_value(
    name: &str,
    want: &str,
    v: &aws_sdk_dynamodb::types::AttributeValue,
    sort: bool,
) -> Result<(), String> {
    use aws_sdk_dynamodb::types::AttributeValue as A;
    let (got, len) = match v {
        A::S(s) => ("S", s.len()),
        A::N(_) => ("N", 1),
        A::B(b) => ("B", b.as_ref().len()),
        _ => ("a non-scalar type", 1),
    };
    if got != want {
        return Err(format!("key attribute {name:?} must be of type {want}, got {got}"));
    }
    let max = if sort { 1024 } else { 2048 };
    if len == 0 || len > max {
        return Err(format!("key attribute {name:?} must be 1 to {max} bytes long"));
    }
    Ok(())
}

pub(crate) fn check_key(key: &Item, schema: &TableSchema) -> Result<(), String> {
    for (i, (n, t)) in schema.key_names.iter().zip(&schema.key_types).enumerate() {
        let v = key.get(n).ok_or_else(|| format!("missing key attribute {n:?}"))?;
        check_key_value(n, t, v, i == 1)?;
    }
    let extra: Vec<&String> = key.keys().filter(|k| !schema.key_names.contains(k)).collect();
    if !extra.is_empty() {
        return Err(format!("{extra:?} is not part of the table's key ({})", schema.key_names.join(", ")));
    }
    Ok(())
}

fn extract_key(item: &Item, schema: &TableSchema) -> Result<Item, String> {
    let mut key = Item::new();
    for (i, (n, t)) in schema.key_names.iter().zip(&schema.key_types).enumerate() {
        let v = item.get(n).ok_or_else(|| format!("missing key attribute {n:?}"))?;
        check_key_value(n, t, v, i == 1)?;
        key.insert(n.clone(), v.clone());
    }
    Ok(key)
}

pub(crate) mod item_json {
    use super::*;
    use serde::{Deserializer, Serializer};
    pub fn serialize<S: Serializer>(item: &Item, s: S) -> Result<S::Ok, S::Error> {
        value::item_to_json(item).serialize(s)
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Item, D::Error> {
        let v = Value::deserialize(d)?;
        value::item_from_json(&v).map_err(serde::de::Error::custom)
    }
}

pub(crate) mod opt_item_json {
    use super::*;
    use serde::{Deserializer, Serializer};
    pub fn serialize<S: Serializer>(item: &Option<Item>, s: S) -> Result<S::Ok, S::Error> {
        item.as_ref().map(value::item_to_json).serialize(s)
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Item>, D::Error> {
        let v = Option::<Value>::deserialize(d)?;
        v.map(|v| value::item_from_json(&v).map_err(serde::de::Error::custom)).transpose()
    }
}
