//! The request: DynamoDB's `TransactWriteItems` JSON with any number of actions, its parsing and its validation.
//!
//! Validation happens in two steps. [`parse`] checks everything that needs no table metadata; [`validate`] checks keys
//! against each table's key schema and returns the actions ready to plan. Both run before anything is written.

use std::collections::{BTreeSet, HashMap};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::config::Config;
use crate::constants::{
    ATTR_STONE, ATTR_TOMBSTONE, MAX_DEADLINE_SECONDS, MAX_ITEM_BYTES, MAX_TOKEN_LEN, RESERVED_PREFIX,
};
use crate::error::TxError;
use crate::schema::TableSchema;
use crate::value::{self, Item};
use dynamo_saga_expressions::expr::{self, ExprRefs, PathElem};

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

/// A `Delete`'s `Tombstone` (seed 002): instead of removing the item, the delete leaves its key, `Attributes` (such
/// as the timestamp a `Ratchet` compares) and a time to live, `TimeToLiveSeconds` from when the transaction
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

/// The optional parent item held locked for the whole transaction (seed 003).
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

/// A request that passed [`parse`]: shape, values and expressions are valid; keys are not yet checked.
#[derive(Debug, Clone)]
pub struct ParsedRequest {
    pub items: Vec<RawAction>,
    pub client_request_token: Option<String>,
    pub parent: Option<(String, Item)>,
    pub options: Options,
    /// SHA-256 of the canonical request body, to recognise a retry of the same request under the same token.
    pub body_hash: String,
}

/// One action after shape checks, before key-schema checks.
#[derive(Debug, Clone)]
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
}

fn bad(action: Option<usize>, msg: impl Into<String>) -> TxError {
    TxError::invalid(action, msg)
}

/// Checks the request's shape, values and expressions. Needs no table metadata.
pub fn parse(body: &Value, cfg: &Config) -> Result<ParsedRequest, TxError> {
    let top = body.as_object().ok_or_else(|| bad(None, "the request must be a JSON object with TransactItems"))?;
    for (k, v) in top {
        // TransactWriteItems' own reporting options are taken as DynamoDB takes them: the capacity a transaction
        // consumed is always reported (`Usage`), and item collection metrics are not.
        let allowed: &[&str] = match k.as_str() {
            "TransactItems" | "ClientRequestToken" | "Parent" | "Options" => continue,
            "ReturnConsumedCapacity" => &["INDEXES", "TOTAL", "NONE"],
            "ReturnItemCollectionMetrics" => &["SIZE", "NONE"],
            _ => {
                return Err(bad(
                    None,
                    format!(
                        "unknown field {k:?} (expected TransactItems, ClientRequestToken, Parent, Options, \
                         ReturnConsumedCapacity, ReturnItemCollectionMetrics)"
                    ),
                ))
            }
        };
        if !v.as_str().is_some_and(|v| allowed.contains(&v)) {
            return Err(bad(None, format!("{k} must be one of {}, not {v}", allowed.join(", "))));
        }
    }
    let list = match top.get("TransactItems") {
        Some(Value::Array(a)) => a,
        Some(_) => return Err(bad(None, "TransactItems must be an array")),
        None => return Err(bad(None, "TransactItems is required")),
    };
    if list.is_empty() {
        return Err(bad(None, "TransactItems must not be empty"));
    }
    if list.len() > cfg.max_actions {
        return Err(bad(
            None,
            format!("the transaction has {} actions; the configured maximum is {}", list.len(), cfg.max_actions),
        ));
    }
    let items = list.iter().enumerate().map(|(i, a)| parse_action(i, a, cfg)).collect::<Result<Vec<_>, _>>()?;

    let client_request_token = match top.get("ClientRequestToken") {
        None | Some(Value::Null) => None,
        Some(Value::String(t)) => {
            if t.is_empty() || t.len() > MAX_TOKEN_LEN || !t.bytes().all(|b| b.is_ascii_graphic()) {
                return Err(bad(
                    None,
                    format!(
                        "ClientRequestToken must be 1 to {MAX_TOKEN_LEN} printable ASCII characters without spaces"
                    ),
                ));
            }
            Some(t.clone())
        }
        Some(_) => return Err(bad(None, "ClientRequestToken must be a string")),
    };

    let parent = match top.get("Parent") {
        None | Some(Value::Null) => None,
        Some(Value::Object(p)) => {
            for k in p.keys() {
                if k != "TableName" && k != "Key" {
                    return Err(bad(None, format!("Parent: unknown field {k:?} (expected TableName, Key)")));
                }
            }
            let table = table_name(p, cfg).map_err(|m| bad(None, format!("Parent: {m}")))?;
            let key = p.get("Key").ok_or_else(|| bad(None, "Parent: Key is required"))?;
            let key = value::item_from_json(key).map_err(|m| bad(None, format!("Parent: Key: {m}")))?;
            Some((table, key))
        }
        Some(_) => return Err(bad(None, "Parent must be an object with TableName and Key")),
    };

    let options = parse_options(top.get("Options"), cfg)?;
    let canonical = serde_json::to_vec(body).expect("a Value always serialises");
    let body_hash = Sha256::digest(&canonical).iter().map(|b| format!("{b:02x}")).collect::<String>();
    Ok(ParsedRequest { items, client_request_token, parent, options, body_hash })
}

fn parse_options(v: Option<&Value>, cfg: &Config) -> Result<Options, TxError> {
    let mut o = Options {
        lock_wait_seconds: Some(cfg.default_lock_wait.as_secs()),
        deadline_seconds: cfg.default_deadline.as_secs(),
    };
    let Some(v) = v.filter(|v| !v.is_null()) else { return Ok(o) };
    let m = v.as_object().ok_or_else(|| bad(None, "Options must be an object"))?;
    for (k, x) in m {
        let n =
            || x.as_u64().ok_or_else(|| bad(None, format!("Options.{k} must be a whole number of seconds, 0 or more")));
        match k.as_str() {
            // null means "wait as long as the deadline allows"
            "LockWaitSeconds" => o.lock_wait_seconds = if x.is_null() { None } else { Some(n()?) },
            "DeadlineSeconds" => {
                let d = n()?;
                let max = cfg.max_deadline.as_secs();
                if d == 0 || d > max {
                    let why = if max < MAX_DEADLINE_SECONDS {
                        " (this deployment's limit: SAGA_MAX_DEADLINE_SECONDS)"
                    } else {
                        ""
                    };
                    return Err(bad(None, format!("Options.DeadlineSeconds must be between 1 and {max}{why}")));
                }
                o.deadline_seconds = d;
            }
            _ => {
                return Err(bad(
                    None,
                    format!("Options: unknown field {k:?} (expected LockWaitSeconds, DeadlineSeconds)"),
                ))
            }
        }
    }
    Ok(o)
}

fn table_name(obj: &Map<String, Value>, cfg: &Config) -> Result<String, String> {
    let t = match obj.get("TableName") {
        Some(Value::String(t)) => t,
        Some(_) => return Err("TableName must be a string".into()),
        None => return Err("TableName is required".into()),
    };
    if t.len() < 3 || t.len() > 255 || !t.bytes().all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b)) {
        return Err(format!("TableName {t:?} is not a valid table name"));
    }
    if !cfg.table_allowed(t) {
        return Err(format!("table {t:?} is not in the allowed tables"));
    }
    Ok(t.clone())
}

/// The placeholders a `Ratchet` adds to a `Put`'s condition (callers cannot use names starting with `#_saga`), and
/// the condition.
pub const RATCHET_NAME: &str = "#_sagaRatchet";
const RATCHET_VALUE: &str = ":_sagaRatchet";
pub const RATCHET_CONDITION: &str = "attribute_not_exists(#_sagaRatchet) OR #_sagaRatchet <= :_sagaRatchet";

/// A `Put`'s `Ratchet` (`{"AttributeName": "ts"}`): the attribute, which the item must carry as a number or a
/// string. The put then takes effect only if the stored item has no such attribute or one not greater.
fn ratchet_attribute(r: &Value, item: &Item) -> Result<String, String> {
    let obj = r.as_object().ok_or("must be an object with AttributeName")?;
    if let Some(k) = obj.keys().find(|k| *k != "AttributeName") {
        return Err(format!("unknown field {k:?} (expected AttributeName)"));
    }
    let name = match obj.get("AttributeName") {
        Some(Value::String(n)) if !n.is_empty() => n.clone(),
        Some(_) => return Err("AttributeName must be a non-empty string".into()),
        None => return Err("AttributeName is required".into()),
    };
    if name.starts_with(RESERVED_PREFIX) {
        return Err(format!(
            "attribute {name:?} is reserved for dynamo-saga (names starting with {RESERVED_PREFIX:?})"
        ));
    }
    match item.get(&name) {
        Some(aws_sdk_dynamodb::types::AttributeValue::N(_) | aws_sdk_dynamodb::types::AttributeValue::S(_)) => Ok(name),
        Some(_) => Err(format!("the item's {name:?} must be a number or a string to order writes by")),
        None => Err(format!("the item has no {name:?} attribute to order writes by")),
    }
}

fn parse_action(i: usize, a: &Value, cfg: &Config) -> Result<RawAction, TxError> {
    let e = |m: String| bad(Some(i), m);
    let (op, opname, body) = action_body(a).map_err(e)?;
    check_fields(op, opname, body).map_err(e)?;
    let table = table_name(body, cfg).map_err(|m| e(format!("{opname}: {m}")))?;
    let key_field = if op == Op::Put { "Item" } else { "Key" };
    let key_or_item = match body.get(key_field) {
        None => return Err(e(format!("{opname}: {key_field} is required"))),
        Some(v) => value::item_from_json(v)
            .and_then(|i| value::check_attributes(&i).map(|_| i))
            .map_err(|m| e(format!("{opname}: {key_field}: {m}")))?,
    };
    let update = string_field(body, opname, "UpdateExpression").map_err(e)?;
    let mut condition = string_field(body, opname, "ConditionExpression").map_err(e)?;
    if op == Op::Update && update.as_deref().is_none_or(|u| u.trim().is_empty()) {
        return Err(e("Update: UpdateExpression is required".into()));
    }
    if op == Op::ConditionCheck && condition.as_deref().is_none_or(|c| c.trim().is_empty()) {
        return Err(e("ConditionCheck: ConditionExpression is required".into()));
    }
    let mut names = expression_names(body, opname).map_err(e)?;
    let mut values = expression_values(body, opname).map_err(e)?;
    let return_old = match string_field(body, opname, "ReturnValuesOnConditionCheckFailure").map_err(e)?.as_deref() {
        None | Some("NONE") => false,
        Some("ALL_OLD") => true,
        Some(other) => {
            return Err(e(format!(
                "{opname}: ReturnValuesOnConditionCheckFailure must be ALL_OLD or NONE, not {other:?}"
            )))
        }
    };
    // Expressions: syntax, placeholders defined and used, no reserved attribute named.
    // Parsed once per text (`expr` keeps what it parsed): a request's actions mostly share their expressions.
    let condition_refs = match condition.as_deref() {
        Some(c) => Some(expr::parse_condition(c).map_err(|x| e(format!("{opname}: ConditionExpression: {x}")))?),
        None => None,
    };
    let update_expr = match update.as_deref() {
        Some(u) => Some(expr::parse_update(u).map_err(|x| e(format!("{opname}: UpdateExpression: {x}")))?),
        None => None,
    };
    let all_refs: Vec<&ExprRefs> =
        condition_refs.as_deref().into_iter().chain(update_expr.as_deref().map(|u| &u.refs)).collect();
    check_placeholders(opname, &all_refs, &names, &values).map_err(e)?;
    let item_names = (op == Op::Put).then_some(&key_or_item);
    check_reserved_names(opname, &all_refs, &names, item_names).map_err(e)?;
    let tombstone = match body.get("Tombstone") {
        None | Some(Value::Null) => None,
        Some(t) => Some(parse_tombstone(t, &key_or_item).map_err(|m| e(format!("Delete: Tombstone: {m}")))?),
    };
    if let Some(r) = body.get("Ratchet") {
        let carrier = match (&tombstone, op) {
            (_, Op::Put) => &key_or_item,
            (Some(t), _) => &t.attributes,
            (None, _) => {
                return Err(e(
                    "Delete: Ratchet needs a Tombstone whose Attributes carry the attribute to order writes by".into(),
                ))
            }
        };
        let attr = ratchet_attribute(r, carrier).map_err(|m| e(format!("{opname}: Ratchet: {m}")))?;
        // A timestamp ratchet, as part of the condition: the lock evaluates it on the stored item, and the item stays
        // locked until the transaction ends, so nothing newer can be written between check and apply.
        condition = Some(match condition {
            Some(c) => expr::and(&c, RATCHET_CONDITION),
            None => RATCHET_CONDITION.to_owned(),
        });
        values.insert(RATCHET_VALUE.to_owned(), carrier[&attr].clone());
        names.insert(RATCHET_NAME.to_owned(), attr);
    }
    if op == Op::Put {
        // The item replaces the locked one whole, without dynamo-saga's attributes: it has DynamoDB's limit to itself.
        let size = value::item_size(&key_or_item);
        if size > MAX_ITEM_BYTES {
            return Err(e(format!(
                "Put: Item size has exceeded the maximum allowed size of 400 KB ({size} bytes; at most {MAX_ITEM_BYTES})"
            )));
        }
    }
    Ok(RawAction { op, table, key_or_item, update, condition, names, values, return_old, tombstone })
}

/// An action's one operation, its name and its body.
fn action_body(a: &Value) -> Result<(Op, &str, &Map<String, Value>), String> {
    let obj = a.as_object().ok_or("an action must be an object with one of Put, Update, Delete, ConditionCheck")?;
    if obj.len() != 1 {
        let names: Vec<&str> = obj.keys().map(String::as_str).collect();
        return Err(format!(
            "an action must have exactly one of Put, Update, Delete, ConditionCheck; found {}",
            if names.is_empty() { "none".to_string() } else { names.join(", ") }
        ));
    }
    let (opname, body) = obj.iter().next().expect("one operation");
    let op = Op::from_key(opname)
        .ok_or_else(|| format!("unknown action {opname:?} (expected Put, Update, Delete or ConditionCheck)"))?;
    let body = body.as_object().ok_or_else(|| format!("{opname} must be an object"))?;
    Ok((op, opname.as_str(), body))
}

/// The fields an action of `op` may have, as `TransactWriteItems` takes them, and dynamo-saga's own.
fn allowed_fields(op: Op) -> &'static [&'static str] {
    match op {
        Op::Put => &[
            "TableName",
            "Item",
            "ConditionExpression",
            "ExpressionAttributeNames",
            "ExpressionAttributeValues",
            "ReturnValuesOnConditionCheckFailure",
            "Ratchet",
        ],
        Op::Update => &[
            "TableName",
            "Key",
            "UpdateExpression",
            "ConditionExpression",
            "ExpressionAttributeNames",
            "ExpressionAttributeValues",
            "ReturnValuesOnConditionCheckFailure",
        ],
        Op::Delete => &[
            "TableName",
            "Key",
            "ConditionExpression",
            "ExpressionAttributeNames",
            "ExpressionAttributeValues",
            "ReturnValuesOnConditionCheckFailure",
            "Tombstone",
            "Ratchet",
        ],
        Op::ConditionCheck => &[
            "TableName",
            "Key",
            "ConditionExpression",
            "ExpressionAttributeNames",
            "ExpressionAttributeValues",
            "ReturnValuesOnConditionCheckFailure",
        ],
    }
}

/// Refuses a field an action of `op` does not have.
fn check_fields(op: Op, opname: &str, body: &Map<String, Value>) -> Result<(), String> {
    match body.keys().find(|k| !allowed_fields(op).contains(&k.as_str())) {
        Some(k) => Err(format!("{opname}: unknown field {k:?}")),
        None => Ok(()),
    }
}

/// Field `k` of an action's body, a string when present.
fn string_field(body: &Map<String, Value>, opname: &str, k: &str) -> Result<Option<String>, String> {
    match body.get(k) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(format!("{opname}: {k} must be a string")),
    }
}

/// An action's ExpressionAttributeNames, each placeholder and name as DynamoDB allows them.
fn expression_names(body: &Map<String, Value>, opname: &str) -> Result<HashMap<String, String>, String> {
    match body.get("ExpressionAttributeNames") {
        None | Some(Value::Null) => Ok(HashMap::new()),
        Some(Value::Object(m)) => m
            .iter()
            .map(|(k, v)| match v {
                Value::String(s) => {
                    placeholder(k)
                        .map_err(|m| format!("{opname}: ExpressionAttributeNames contains invalid key: {m}"))?;
                    value::check_name(s).map_err(|m| {
                        format!("{opname}: ExpressionAttributeNames contains invalid value: {m} for key {k}")
                    })?;
                    Ok((k.clone(), s.clone()))
                }
                _ => Err(format!("{opname}: ExpressionAttributeNames[{k:?}] must be a non-empty string")),
            })
            .collect(),
        Some(_) => Err(format!("{opname}: ExpressionAttributeNames must be an object")),
    }
}

/// An action's ExpressionAttributeValues, in DynamoDB JSON with placeholders as DynamoDB allows them.
fn expression_values(body: &Map<String, Value>, opname: &str) -> Result<Item, String> {
    let values = match body.get("ExpressionAttributeValues") {
        None | Some(Value::Null) => Item::new(),
        // How deep a value may nest depends on where the expression writes it: the evaluator judges that.
        Some(v) => value::item_from_json(v)
            .and_then(|i| value::check_map_keys(&i).map(|_| i))
            .map_err(|m| format!("{opname}: ExpressionAttributeValues: {m}"))?,
    };
    if let Some(m) = values.keys().find_map(|k| placeholder(k).err()) {
        return Err(format!("{opname}: ExpressionAttributeValues contains invalid key: {m}"));
    }
    Ok(values)
}

/// Every placeholder the expressions use is defined, every one defined is used, and none is dynamo-saga's own.
fn check_placeholders(
    opname: &str,
    refs: &[&ExprRefs],
    names: &HashMap<String, String>,
    values: &Item,
) -> Result<(), String> {
    for p in refs.iter().flat_map(|r| r.name_placeholders.iter()) {
        if !names.contains_key(p) {
            return Err(format!("{opname}: the expression uses {p} but ExpressionAttributeNames does not define it"));
        }
    }
    for p in refs.iter().flat_map(|r| r.value_placeholders.iter()) {
        if !values.contains_key(p) {
            return Err(format!("{opname}: the expression uses {p} but ExpressionAttributeValues does not define it"));
        }
    }
    if let Some(p) = names.keys().chain(values.keys()).find(|p| p.starts_with("#_saga") || p.starts_with(":_saga")) {
        return Err(format!(
            "{opname}: placeholder {p} is reserved for dynamo-saga (placeholders starting with #_saga or :_saga)"
        ));
    }
    for k in names.keys() {
        if !refs.iter().any(|r| r.name_placeholders.contains(k)) {
            return Err(format!("{opname}: ExpressionAttributeNames defines {k} but no expression uses it"));
        }
    }
    for k in values.keys() {
        if !refs.iter().any(|r| r.value_placeholders.contains(k)) {
            return Err(format!("{opname}: ExpressionAttributeValues defines {k} but no expression uses it"));
        }
    }
    Ok(())
}

/// No attribute the action names (in its expressions, its names, or a `Put`'s `item`) is one of dynamo-saga's own.
fn check_reserved_names(
    opname: &str,
    refs: &[&ExprRefs],
    names: &HashMap<String, String>,
    item: Option<&Item>,
) -> Result<(), String> {
    let mut named: BTreeSet<&str> = names.values().map(String::as_str).collect();
    for p in refs.iter().flat_map(|r| r.paths.iter()) {
        for el in &p.0 {
            if let PathElem::Name(n) = el {
                named.insert(n);
            }
        }
    }
    named.extend(item.into_iter().flat_map(|i| i.keys().map(String::as_str)));
    match named.into_iter().find(|n| n.starts_with(RESERVED_PREFIX)) {
        Some(n) => Err(format!(
            "{opname}: attribute {n:?} is reserved for dynamo-saga (names starting with {RESERVED_PREFIX:?})"
        )),
        None => Ok(()),
    }
}

/// A placeholder of ExpressionAttributeNames or ExpressionAttributeValues, with its `#` or `:`, is at most 255 bytes.
fn placeholder(k: &str) -> Result<(), String> {
    match k.len() > dynamo_saga_expressions::eval::MAX_PLACEHOLDER_BYTES {
        true => Err(format!("The expression attribute map contains a key that is too long; size of key: {}", k.len())),
        false => Ok(()),
    }
}

/// Longest time to live a tombstone may ask for: ten years.
const MAX_TOMBSTONE_TTL_SECONDS: u64 = 10 * 365 * 24 * 3600;

/// `{"Attributes": {...}, "TimeToLiveAttribute": "expiresAt", "TimeToLiveSeconds": 604800}`; the key is checked
/// against the table in [`validate`].
fn parse_tombstone(t: &Value, key: &Item) -> Result<Tombstone, String> {
    let obj = t.as_object().ok_or("must be an object with TimeToLiveAttribute and TimeToLiveSeconds")?;
    if let Some(k) =
        obj.keys().find(|k| !["Attributes", "TimeToLiveAttribute", "TimeToLiveSeconds"].contains(&k.as_str()))
    {
        return Err(format!("unknown field {k:?} (expected Attributes, TimeToLiveAttribute, TimeToLiveSeconds)"));
    }
    let attributes = match obj.get("Attributes") {
        None | Some(Value::Null) => Item::new(),
        Some(v) => value::item_from_json(v)
            .and_then(|i| value::check_attributes(&i).map(|_| i))
            .map_err(|m| format!("Attributes: {m}"))?,
    };
    let ttl_attribute = match obj.get("TimeToLiveAttribute") {
        Some(Value::String(n)) if !n.is_empty() => n.clone(),
        Some(_) => return Err("TimeToLiveAttribute must be a non-empty string".into()),
        None => return Err("TimeToLiveAttribute is required".into()),
    };
    let ttl_seconds = match obj.get("TimeToLiveSeconds").map(Value::as_u64) {
        Some(Some(n)) if (1..=MAX_TOMBSTONE_TTL_SECONDS).contains(&n) => n,
        Some(_) => {
            return Err(format!("TimeToLiveSeconds must be a whole number from 1 to {MAX_TOMBSTONE_TTL_SECONDS}"))
        }
        None => return Err("TimeToLiveSeconds is required".into()),
    };
    if let Some(n) = attributes.keys().chain([&ttl_attribute]).find(|n| n.starts_with(RESERVED_PREFIX)) {
        return Err(format!("attribute {n:?} is reserved for dynamo-saga (names starting with {RESERVED_PREFIX:?})"));
    }
    if attributes.contains_key(&ttl_attribute) {
        return Err(format!(
            "Attributes must not carry {ttl_attribute:?}, the TimeToLiveAttribute, which the tombstone sets"
        ));
    }
    if let Some(n) = attributes.keys().chain([&ttl_attribute]).find(|n| key.contains_key(*n)) {
        return Err(format!("{n:?} is a key attribute; the tombstone keeps the Key as it is"));
    }
    // A later transaction locks the tombstone by keeping it whole (with its time to live) inside a lock item with
    // the key again: size that item, with a ULID for the writer and the longest epoch-seconds number.
    let t = Tombstone { attributes, ttl_attribute, ttl_seconds };
    let mut stone = t.item(key, "01ARZ3NDEKTSV4RRFFQ69G5FAV");
    stone.insert(t.ttl_attribute.clone(), aws_sdk_dynamodb::types::AttributeValue::N(u64::MAX.to_string()));
    let tombstone = value::item_size(&stone);
    let mut lock_item = key.clone();
    lock_item.insert(ATTR_STONE.to_owned(), aws_sdk_dynamodb::types::AttributeValue::M(stone));
    let size = value::item_size(&lock_item) + RESERVED_OVERHEAD;
    if size > MAX_ITEM_BYTES {
        return Err(format!(
            "the tombstone is {tombstone} bytes; a transaction that later locks it needs {size}, over DynamoDB's 400 KB item limit ({MAX_ITEM_BYTES} bytes)"
        ));
    }
    Ok(t)
}

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

fn check_key(key: &Item, schema: &TableSchema) -> Result<(), String> {
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
