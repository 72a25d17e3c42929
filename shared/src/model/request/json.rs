//! The request's JSON edge: DynamoDB's `TransactWriteItems` JSON, as the API, events, the state machine and the CLI
//! take it, parsed into the typed request ([`ParsedRequest`]), with dynamo-saga's own fields (`Parent`, `Options`, a
//! `Delete`'s `Tombstone`, a `Put`'s `Ratchet`).

use std::collections::HashMap;

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use super::checks;
use super::{
    bad, Op, Options, ParsedRequest, RawAction, Tombstone, RATCHET_CONDITION, RATCHET_NAME, RESERVED_OVERHEAD,
};
use crate::config::Config;
use crate::constants::{ATTR_STONE, MAX_ITEM_BYTES, RESERVED_PREFIX};
use crate::error::TxError;
use crate::model::value::{self, Item};
use dynamo_saga_expressions::expr;

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
    checks::check_count(list.len(), cfg)?;
    let items = list.iter().enumerate().map(|(i, a)| parse_action(i, a, cfg)).collect::<Result<Vec<_>, _>>()?;

    let client_request_token = match top.get("ClientRequestToken") {
        None | Some(Value::Null) => None,
        Some(Value::String(t)) => {
            checks::check_token(t)?;
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
    // What this edge hashed before the typed request had a hash of its own: a retry of a request begun then, with the
    // same token, is still recognised.
    let canonical = serde_json::to_vec(body).expect("a Value always serialises");
    let legacy_hash = Sha256::digest(&canonical).iter().map(|b| format!("{b:02x}")).collect::<String>();
    Ok(ParsedRequest::new(items, client_request_token, parent, options, Some(legacy_hash)))
}

fn parse_options(v: Option<&Value>, cfg: &Config) -> Result<Options, TxError> {
    let mut o = Options::defaults(cfg);
    let Some(v) = v.filter(|v| !v.is_null()) else { return Ok(o) };
    let m = v.as_object().ok_or_else(|| bad(None, "Options must be an object"))?;
    for (k, x) in m {
        let n =
            || x.as_u64().ok_or_else(|| bad(None, format!("Options.{k} must be a whole number of seconds, 0 or more")));
        match k.as_str() {
            // null means "wait as long as the deadline allows"
            "LockWaitSeconds" => o.lock_wait_seconds = if x.is_null() { None } else { Some(n()?) },
            "DeadlineSeconds" => {
                o.deadline_seconds = n()?;
                checks::check_deadline(o.deadline_seconds, cfg)?;
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
    checks::check_table(t, cfg)?;
    Ok(t.clone())
}

/// The value placeholder a `Ratchet` adds to the condition, beside [`RATCHET_NAME`].
const RATCHET_VALUE: &str = ":_sagaRatchet";

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
        Some(v) => value::item_from_json(v).map_err(|m| e(format!("{opname}: {key_field}: {m}")))?,
    };
    checks::check_key_or_item(opname, op, &key_or_item).map_err(e)?;
    let update = string_field(body, opname, "UpdateExpression").map_err(e)?;
    let mut condition = string_field(body, opname, "ConditionExpression").map_err(e)?;
    checks::check_required(op, update.as_deref(), condition.as_deref()).map_err(e)?;
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
    checks::check_expressions(opname, op, &key_or_item, update.as_deref(), condition.as_deref(), &names, &values)
        .map_err(e)?;
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
        checks::check_put_size(&key_or_item).map_err(e)?;
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
    let names = match body.get("ExpressionAttributeNames") {
        None | Some(Value::Null) => HashMap::new(),
        Some(Value::Object(m)) => m
            .iter()
            .map(|(k, v)| match v {
                Value::String(s) => Ok((k.clone(), s.clone())),
                _ => Err(format!("{opname}: ExpressionAttributeNames[{k:?}] must be a non-empty string")),
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(format!("{opname}: ExpressionAttributeNames must be an object")),
    };
    checks::check_names(opname, &names)?;
    Ok(names)
}

/// An action's ExpressionAttributeValues, in DynamoDB JSON with placeholders as DynamoDB allows them.
fn expression_values(body: &Map<String, Value>, opname: &str) -> Result<Item, String> {
    let values = match body.get("ExpressionAttributeValues") {
        None | Some(Value::Null) => Item::new(),
        Some(v) => value::item_from_json(v).map_err(|m| format!("{opname}: ExpressionAttributeValues: {m}"))?,
    };
    checks::check_values(opname, &values)?;
    Ok(values)
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
