//! The checks every edge applies to a request's parts, whichever form they came in ([`super::json`],
//! [`crate::dynamo::sdk`]): table names, options, tokens, expression names and values, and an action's expressions
//! against them.

use std::collections::{BTreeSet, HashMap};

use super::{bad, Op, Options};
use crate::config::Config;
use crate::constants::{MAX_DEADLINE_SECONDS, MAX_ITEM_BYTES, MAX_TOKEN_LEN, RESERVED_PREFIX};
use crate::error::TxError;
use crate::model::value::{self, Item};
use dynamo_saga_expressions::expr::{self, ExprRefs, PathElem};

/// A request of `n` actions: at least one, at most the configured maximum.
pub(crate) fn check_count(n: usize, cfg: &Config) -> Result<(), TxError> {
    if n == 0 {
        return Err(bad(None, "TransactItems must not be empty"));
    }
    if n > cfg.max_actions {
        return Err(bad(
            None,
            format!("the transaction has {n} actions; the configured maximum is {}", cfg.max_actions),
        ));
    }
    Ok(())
}

/// A `ClientRequestToken`: 1 to 36 printable ASCII characters, as DynamoDB takes it.
pub(crate) fn check_token(t: &str) -> Result<(), TxError> {
    if t.is_empty() || t.len() > MAX_TOKEN_LEN || !t.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(bad(
            None,
            format!("ClientRequestToken must be 1 to {MAX_TOKEN_LEN} printable ASCII characters without spaces"),
        ));
    }
    Ok(())
}

/// A table name DynamoDB takes, of a table this deployment may write.
pub(crate) fn check_table(t: &str, cfg: &Config) -> Result<(), String> {
    if t.len() < 3 || t.len() > 255 || !t.bytes().all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b)) {
        return Err(format!("TableName {t:?} is not a valid table name"));
    }
    if !cfg.table_allowed(t) {
        return Err(format!("table {t:?} is not in the allowed tables"));
    }
    Ok(())
}

impl Options {
    /// The configured defaults.
    pub(crate) fn defaults(cfg: &Config) -> Options {
        Options {
            lock_wait_seconds: Some(cfg.default_lock_wait.as_secs()),
            deadline_seconds: cfg.default_deadline.as_secs(),
        }
    }
}

/// `Options.DeadlineSeconds`: 1 to the deployment's longest deadline.
pub(crate) fn check_deadline(d: u64, cfg: &Config) -> Result<(), TxError> {
    let max = cfg.max_deadline.as_secs();
    if d == 0 || d > max {
        let why = if max < MAX_DEADLINE_SECONDS { " (this deployment's limit: SAGA_MAX_DEADLINE_SECONDS)" } else { "" };
        return Err(bad(None, format!("Options.DeadlineSeconds must be between 1 and {max}{why}")));
    }
    Ok(())
}

/// The `Key` (or a `Put`'s `Item`) an action names, whose values are already valid: its attribute names and nesting
/// as DynamoDB allows them.
pub(crate) fn check_key_or_item(opname: &str, op: Op, item: &Item) -> Result<(), String> {
    let field = if op == Op::Put { "Item" } else { "Key" };
    value::check_attributes(item).map_err(|m| format!("{opname}: {field}: {m}"))
}

/// An `Update` has an `UpdateExpression` and a `ConditionCheck` a `ConditionExpression`.
pub(crate) fn check_required(op: Op, update: Option<&str>, condition: Option<&str>) -> Result<(), String> {
    if op == Op::Update && update.is_none_or(|u| u.trim().is_empty()) {
        return Err("Update: UpdateExpression is required".into());
    }
    if op == Op::ConditionCheck && condition.is_none_or(|c| c.trim().is_empty()) {
        return Err("ConditionCheck: ConditionExpression is required".into());
    }
    Ok(())
}

/// An action's `ExpressionAttributeNames`, each placeholder and name as DynamoDB allows them.
pub(crate) fn check_names(opname: &str, names: &HashMap<String, String>) -> Result<(), String> {
    let mut sorted: Vec<(&String, &String)> = names.iter().collect();
    sorted.sort();
    for (k, v) in sorted {
        placeholder(k).map_err(|m| format!("{opname}: ExpressionAttributeNames contains invalid key: {m}"))?;
        value::check_name(v)
            .map_err(|m| format!("{opname}: ExpressionAttributeNames contains invalid value: {m} for key {k}"))?;
    }
    Ok(())
}

/// An action's `ExpressionAttributeValues`, whose values are already valid: map keys and placeholders as DynamoDB
/// allows them. How deep a value may nest depends on where the expression writes it: the evaluator judges that.
pub(crate) fn check_values(opname: &str, values: &Item) -> Result<(), String> {
    value::check_map_keys(values).map_err(|m| format!("{opname}: ExpressionAttributeValues: {m}"))?;
    if let Some(m) = values.keys().find_map(|k| placeholder(k).err()) {
        return Err(format!("{opname}: ExpressionAttributeValues contains invalid key: {m}"));
    }
    Ok(())
}

/// An action's expressions: their syntax, every placeholder defined and used, no reserved attribute named (nor in a
/// `Put`'s item). Parsed once per text (`expr` keeps what it parsed): a request's actions mostly share their
/// expressions.
pub(crate) fn check_expressions(
    opname: &str,
    op: Op,
    key_or_item: &Item,
    update: Option<&str>,
    condition: Option<&str>,
    names: &HashMap<String, String>,
    values: &Item,
) -> Result<(), String> {
    let condition_refs = match condition {
        Some(c) => Some(expr::parse_condition(c).map_err(|x| format!("{opname}: ConditionExpression: {x}"))?),
        None => None,
    };
    let update_expr = match update {
        Some(u) => Some(expr::parse_update(u).map_err(|x| format!("{opname}: UpdateExpression: {x}"))?),
        None => None,
    };
    let all_refs: Vec<&ExprRefs> =
        condition_refs.as_deref().into_iter().chain(update_expr.as_deref().map(|u| &u.refs)).collect();
    check_placeholders(opname, &all_refs, names, values)?;
    check_reserved_names(opname, &all_refs, names, (op == Op::Put).then_some(key_or_item))
}

/// A `Put`'s item replaces the locked one whole, without dynamo-saga's attributes (apply leaves the transaction's id
/// off an item DynamoDB refuses with it): it has DynamoDB's limit to itself.
pub(crate) fn check_put_size(item: &Item) -> Result<(), String> {
    let size = value::item_size(item);
    if size > MAX_ITEM_BYTES {
        return Err(format!(
            "Put: Item size has exceeded the maximum allowed size of 400 KB ({size} bytes; at most {MAX_ITEM_BYTES})"
        ));
    }
    Ok(())
}

/// Every placeholder the expressions use is defined, every one defined is used, and none is dynamo-saga's own.
pub(crate) fn check_placeholders(
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
pub(crate) fn check_reserved_names(
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
pub(crate) fn placeholder(k: &str) -> Result<(), String> {
    match k.len() > dynamo_saga_expressions::eval::MAX_PLACEHOLDER_BYTES {
        true => Err(format!("The expression attribute map contains a key that is too long; size of key: {}", k.len())),
        false => Ok(()),
    }
}
