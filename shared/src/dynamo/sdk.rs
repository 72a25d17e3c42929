//! The library in `aws-sdk-dynamodb`'s own terms: the request's SDK edge, where the SDK's [`TransactWriteItem`] values
//! become the typed request the protocol runs (for [`crate::Coordinator::transact_write_items`], the builder in the
//! shape of `client.transact_write_items()`), or the DynamoDB JSON the CLI, the API and the state machine take; and a
//! cancellation turned into the SDK's [`TransactionCanceledException`], so a caller matches its reasons as it matches
//! DynamoDB's.

use aws_sdk_dynamodb::types::error::TransactionCanceledException;
use aws_sdk_dynamodb::types::{self as sdk, TransactWriteItem};
use serde_json::{json, Map, Value};
use std::collections::HashMap;

use crate::config::Config;
use crate::error::{Cancellation, CancellationReason, TxError};
use crate::model::request::{checks, Op, Options, ParsedRequest, RawAction};
use crate::model::value::{self, Item};

/// The typed request of the SDK's values: each [`TransactWriteItem`] checked as the JSON edge checks the same
/// action in DynamoDB JSON ([`crate::model::request::parse`]), with the same errors, and no JSON in between.
pub(crate) fn parse(
    items: &[TransactWriteItem],
    token: Option<&str>,
    parent: Option<&(String, Item)>,
    lock_wait_seconds: Option<Option<u64>>,
    deadline_seconds: Option<u64>,
    cfg: &Config,
) -> Result<ParsedRequest, TxError> {
    checks::check_count(items.len(), cfg)?;
    let actions = items.iter().enumerate().map(|(i, item)| action(i, item, cfg)).collect::<Result<Vec<_>, _>>()?;
    if let Some(t) = token {
        checks::check_token(t)?;
    }
    let parent = match parent {
        Some((table, key)) => {
            checks::check_table(table, cfg).map_err(|m| TxError::invalid(None, format!("Parent: {m}")))?;
            value::check_item(key).map_err(|m| TxError::invalid(None, format!("Parent: Key: {m}")))?;
            Some((table.clone(), key.clone()))
        }
        None => None,
    };
    let mut options = Options::defaults(cfg);
    if let Some(wait) = lock_wait_seconds {
        options.lock_wait_seconds = wait;
    }
    if let Some(deadline) = deadline_seconds {
        checks::check_deadline(deadline, cfg)?;
        options.deadline_seconds = deadline;
    }
    Ok(ParsedRequest::new(actions, token.map(String::from), parent, options, None))
}

/// The one of `ConditionCheck`, `Put`, `Delete` and `Update` an item sets, as the parts every edge checks.
struct Parts<'a> {
    op: Op,
    table: &'a str,
    key_or_item: &'a Item,
    update: Option<&'a str>,
    condition: Option<&'a str>,
    names: Option<&'a HashMap<String, String>>,
    values: Option<&'a Item>,
    returning: Option<&'a sdk::ReturnValuesOnConditionCheckFailure>,
}

fn parts(item: &TransactWriteItem) -> Result<Parts<'_>, String> {
    let mut set = Vec::new();
    if let Some(c) = item.condition_check() {
        set.push(Parts {
            op: Op::ConditionCheck,
            table: c.table_name(),
            key_or_item: c.key(),
            update: None,
            condition: Some(c.condition_expression()),
            names: c.expression_attribute_names(),
            values: c.expression_attribute_values(),
            returning: c.return_values_on_condition_check_failure(),
        });
    }
    if let Some(p) = item.put() {
        set.push(Parts {
            op: Op::Put,
            table: p.table_name(),
            key_or_item: p.item(),
            update: None,
            condition: p.condition_expression(),
            names: p.expression_attribute_names(),
            values: p.expression_attribute_values(),
            returning: p.return_values_on_condition_check_failure(),
        });
    }
    if let Some(d) = item.delete() {
        set.push(Parts {
            op: Op::Delete,
            table: d.table_name(),
            key_or_item: d.key(),
            update: None,
            condition: d.condition_expression(),
            names: d.expression_attribute_names(),
            values: d.expression_attribute_values(),
            returning: d.return_values_on_condition_check_failure(),
        });
    }
    if let Some(u) = item.update() {
        set.push(Parts {
            op: Op::Update,
            table: u.table_name(),
            key_or_item: u.key(),
            update: Some(u.update_expression()),
            condition: u.condition_expression(),
            names: u.expression_attribute_names(),
            values: u.expression_attribute_values(),
            returning: u.return_values_on_condition_check_failure(),
        });
    }
    match set.len() {
        1 => Ok(set.remove(0)),
        0 => Err("sets none of ConditionCheck, Put, Delete and Update".into()),
        _ => Err(format!(
            "sets {}: a TransactWriteItem holds exactly one action",
            set.iter().map(|p| p.op.as_str()).collect::<Vec<_>>().join(" and ")
        )),
    }
}

/// One action, checked in the order the JSON edge checks it.
fn action(i: usize, item: &TransactWriteItem, cfg: &Config) -> Result<RawAction, TxError> {
    let e = |m: String| TxError::invalid(Some(i), m);
    let p = parts(item).map_err(e)?;
    let opname = p.op.as_str();
    checks::check_table(p.table, cfg).map_err(|m| e(format!("{opname}: {m}")))?;
    let key_field = if p.op == Op::Put { "Item" } else { "Key" };
    value::check_item(p.key_or_item).map_err(|m| e(format!("{opname}: {key_field}: {m}")))?;
    checks::check_key_or_item(opname, p.op, p.key_or_item).map_err(e)?;
    checks::check_required(p.op, p.update, p.condition).map_err(e)?;
    let names = p.names.cloned().unwrap_or_default();
    checks::check_names(opname, &names).map_err(e)?;
    let values = p.values.cloned().unwrap_or_default();
    value::check_item(&values).map_err(|m| e(format!("{opname}: ExpressionAttributeValues: {m}")))?;
    checks::check_values(opname, &values).map_err(e)?;
    let return_old = match p.returning {
        None | Some(sdk::ReturnValuesOnConditionCheckFailure::None) => false,
        Some(sdk::ReturnValuesOnConditionCheckFailure::AllOld) => true,
        Some(other) => {
            return Err(e(format!(
                "{opname}: ReturnValuesOnConditionCheckFailure must be ALL_OLD or NONE, not {:?}",
                other.as_str()
            )))
        }
    };
    checks::check_expressions(opname, p.op, p.key_or_item, p.update, p.condition, &names, &values).map_err(e)?;
    if p.op == Op::Put {
        checks::check_put_size(p.key_or_item).map_err(e)?;
    }
    Ok(RawAction {
        op: p.op,
        table: p.table.to_owned(),
        key_or_item: p.key_or_item.clone(),
        update: p.update.map(String::from),
        condition: p.condition.map(String::from),
        names,
        values,
        return_old,
        tombstone: None,
    })
}

/// One action in DynamoDB JSON, as the CLI, the API and the state machine take it.
pub(crate) fn action_json(item: &TransactWriteItem) -> Result<Value, String> {
    let p = parts(item)?;
    let mut b = Map::new();
    b.insert("TableName".into(), Value::String(p.table.to_owned()));
    let field = if p.op == Op::Put { "Item" } else { "Key" };
    b.insert(field.into(), value::item_to_json(p.key_or_item));
    if let Some(u) = p.update {
        b.insert("UpdateExpression".into(), Value::String(u.to_owned()));
    }
    if let Some(c) = p.condition {
        b.insert("ConditionExpression".into(), Value::String(c.to_owned()));
    }
    if let Some(names) = p.names {
        let names = names.iter().map(|(k, v)| (k.clone(), Value::String(v.clone())));
        b.insert("ExpressionAttributeNames".into(), Value::Object(names.collect()));
    }
    if let Some(values) = p.values {
        b.insert("ExpressionAttributeValues".into(), value::item_to_json(values));
    }
    if let Some(rv) = p.returning {
        b.insert("ReturnValuesOnConditionCheckFailure".into(), Value::String(rv.as_str().to_owned()));
    }
    let kind = p.op.as_str();
    Ok(json!({ kind: b }))
}

/// A snapshot read's request in DynamoDB JSON (`{"TransactItems": [{"Get": {...}}, ...]}`), from the SDK's
/// `TransactGetItem`s. An item without its `Get` is refused, naming it.
pub fn transact_get_items_json(items: &[aws_sdk_dynamodb::types::TransactGetItem]) -> Result<Value, TxError> {
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let g = item.get().ok_or_else(|| TxError::invalid(Some(i), format!("TransactItems[{i}]: no Get")))?;
        let mut b = Map::new();
        b.insert("TableName".into(), Value::String(g.table_name().to_owned()));
        b.insert("Key".into(), value::item_to_json(g.key()));
        if let Some(p) = g.projection_expression() {
            b.insert("ProjectionExpression".into(), Value::String(p.to_owned()));
        }
        if let Some(names) = g.expression_attribute_names() {
            let names = names.iter().map(|(k, v)| (k.clone(), Value::String(v.clone())));
            b.insert("ExpressionAttributeNames".into(), Value::Object(names.collect()));
        }
        out.push(json!({ "Get": b }));
    }
    Ok(json!({ "TransactItems": out }))
}

impl CancellationReason {
    /// This reason as the SDK's `CancellationReason` (the item, when there is one, as the SDK's attribute values).
    pub fn to_sdk(&self) -> sdk::CancellationReason {
        sdk::CancellationReason::builder()
            .code(self.code.clone())
            .set_message(self.message.clone())
            .set_item(self.item.as_ref().and_then(|i| value::item_from_json(i).ok()))
            .build()
    }
}

impl Cancellation {
    /// This cancellation as the SDK's `TransactionCanceledException`: the same message and one reason per action in
    /// request order, so code written for DynamoDB's cancellations reads it unchanged. (The `Parent` item's reason,
    /// which DynamoDB has no place for, stays in [`Cancellation::parent_cancellation_reason`].)
    pub fn to_sdk(&self) -> TransactionCanceledException {
        TransactionCanceledException::builder()
            .message(self.message.clone())
            .set_cancellation_reasons(Some(self.cancellation_reasons.iter().map(CancellationReason::to_sdk).collect()))
            .build()
    }
}

#[cfg(test)]
mod tests {
    use super::action_json;
    use aws_sdk_dynamodb::types::{AttributeValue, ConditionCheck, Delete, Put, TransactWriteItem, Update};
    use serde_json::json;

    fn s(v: &str) -> AttributeValue {
        AttributeValue::S(v.into())
    }

    #[test]
    fn each_action_becomes_the_dynamodb_json_the_api_takes() {
        let put = Put::builder()
            .table_name("t")
            .item("pk", s("a"))
            .item("n", AttributeValue::N("1".into()))
            .condition_expression("attribute_not_exists(pk)")
            .return_values_on_condition_check_failure("ALL_OLD".into())
            .build()
            .unwrap();
        assert_eq!(
            action_json(&TransactWriteItem::builder().put(put).build()).unwrap(),
            json!({"Put": {"TableName": "t", "Item": {"pk": {"S": "a"}, "n": {"N": "1"}},
                "ConditionExpression": "attribute_not_exists(pk)", "ReturnValuesOnConditionCheckFailure": "ALL_OLD"}})
        );
        let update = Update::builder()
            .table_name("t")
            .key("pk", s("a"))
            .update_expression("SET #v = :v")
            .expression_attribute_names("#v", "v")
            .expression_attribute_values(":v", AttributeValue::Ss(vec!["x".into()]))
            .build()
            .unwrap();
        assert_eq!(
            action_json(&TransactWriteItem::builder().update(update).build()).unwrap(),
            json!({"Update": {"TableName": "t", "Key": {"pk": {"S": "a"}}, "UpdateExpression": "SET #v = :v",
                "ExpressionAttributeNames": {"#v": "v"}, "ExpressionAttributeValues": {":v": {"SS": ["x"]}}}})
        );
        let delete = Delete::builder().table_name("t").key("pk", s("b")).build().unwrap();
        assert_eq!(
            action_json(&TransactWriteItem::builder().delete(delete).build()).unwrap(),
            json!({"Delete": {"TableName": "t", "Key": {"pk": {"S": "b"}}}})
        );
        let check =
            ConditionCheck::builder().table_name("t").key("pk", s("c")).condition_expression("attribute_exists(pk)");
        assert_eq!(
            action_json(&TransactWriteItem::builder().condition_check(check.build().unwrap()).build()).unwrap(),
            json!({"ConditionCheck": {"TableName": "t", "Key": {"pk": {"S": "c"}}, "ConditionExpression": "attribute_exists(pk)"}})
        );
    }

    #[test]
    fn an_item_with_no_action_or_two_is_refused() {
        let e = action_json(&TransactWriteItem::builder().build()).unwrap_err();
        assert!(e.contains("sets none"), "{e}");
        let delete = Delete::builder().table_name("t").key("pk", s("b")).build().unwrap();
        let check = ConditionCheck::builder()
            .table_name("t")
            .key("pk", s("c"))
            .condition_expression("attribute_exists(pk)")
            .build()
            .unwrap();
        let e = action_json(&TransactWriteItem::builder().delete(delete).condition_check(check).build()).unwrap_err();
        assert!(e.contains("ConditionCheck and Delete"), "{e}");
    }

    /// The SDK's values and the same request in DynamoDB JSON, each parsed at its own edge.
    mod edges {
        use super::*;
        use crate::config::Config;
        use crate::model::request::{self, ParsedRequest};
        use crate::TxError;

        fn n(v: &str) -> AttributeValue {
            AttributeValue::N(v.into())
        }

        fn both(items: &[TransactWriteItem]) -> (Result<ParsedRequest, TxError>, Result<ParsedRequest, TxError>) {
            let cfg = Config::new("tx");
            let typed = super::super::parse(items, Some("token-1"), None, Some(Some(5)), Some(60), &cfg);
            let actions: Vec<_> = items.iter().map(|i| action_json(i).unwrap()).collect();
            let body = json!({"TransactItems": actions, "ClientRequestToken": "token-1",
                "Options": {"LockWaitSeconds": 5, "DeadlineSeconds": 60}});
            (typed, request::parse(&body, &cfg))
        }

        fn update(key: &str, values: &[(&str, AttributeValue)]) -> TransactWriteItem {
            let mut u = Update::builder().table_name("orders").key("pk", s(key)).update_expression("SET #v = :v");
            u = u.expression_attribute_names("#v", "v");
            for (k, v) in values {
                u = u.expression_attribute_values(*k, v.clone());
            }
            TransactWriteItem::builder().update(u.build().unwrap()).build()
        }

        fn put(item: &[(&str, AttributeValue)]) -> TransactWriteItem {
            let mut p = Put::builder().table_name("orders");
            for (k, v) in item {
                p = p.item(*k, v.clone());
            }
            TransactWriteItem::builder().put(p.build().unwrap()).build()
        }

        #[test]
        fn a_request_parses_to_the_same_typed_request_and_hash_at_either_edge() {
            let check = ConditionCheck::builder()
                .table_name("stock")
                .key("pk", s("widget"))
                .condition_expression("#q >= :n")
                .expression_attribute_names("#q", "qty")
                .expression_attribute_values(":n", n("2"))
                .return_values_on_condition_check_failure("ALL_OLD".into())
                .build()
                .unwrap();
            let delete = Delete::builder().table_name("carts").key("pk", s("c1")).build().unwrap();
            let items = vec![
                put(&[("pk", s("o1")), ("lines", AttributeValue::Ss(vec!["a".into(), "b".into()]))]),
                update("o2", &[(":v", AttributeValue::M([("x".to_string(), n("1.50"))].into()))]),
                TransactWriteItem::builder().delete(delete).build(),
                TransactWriteItem::builder().condition_check(check).build(),
            ];
            let (typed, json) = both(&items);
            let (typed, json) = (typed.unwrap(), json.unwrap());
            assert_eq!(typed.items, json.items);
            assert_eq!(typed.options, json.options);
            assert_eq!(typed.client_request_token, json.client_request_token);
            assert_eq!(typed.body_hash, json.body_hash, "the same request hashes the same at either edge");
            assert!(typed.legacy_hash.is_none() && json.legacy_hash.is_some());
            assert_ne!(json.legacy_hash.as_deref(), Some(json.body_hash.as_str()));
            // Any change to a value is another request.
            let other = vec![
                items[0].clone(),
                update("o2", &[(":v", AttributeValue::M([("x".to_string(), n("1.5"))].into()))]),
            ];
            let same = vec![items[0].clone(), items[1].clone()];
            assert_ne!(both(&other).0.unwrap().body_hash, both(&same).0.unwrap().body_hash);
        }

        #[test]
        fn bad_values_are_refused_with_the_same_error_at_either_edge() {
            let big = "x".repeat(400 * 1024);
            let cases: Vec<(&str, Vec<TransactWriteItem>)> = vec![
                ("a number DynamoDB refuses", vec![put(&[("pk", s("o1")), ("n", n("1x"))])]),
                ("too many digits", vec![update("o1", &[(":v", n("1234567890123456789012345678901234567890"))])]),
                ("an empty set", vec![update("o1", &[(":v", AttributeValue::Ss(vec![]))])]),
                (
                    "a set with a duplicate",
                    vec![put(&[("pk", s("o1")), ("ns", AttributeValue::Ns(vec!["1".into(), "1.0".into()]))])],
                ),
                ("a reserved attribute", vec![put(&[("pk", s("o1")), ("_sagaLock", s("x"))])]),
                ("an unused value", vec![update("o1", &[(":v", n("1")), (":w", n("2"))])]),
                ("an undefined value", vec![update("o1", &[])]),
                ("an item over 400 KB", vec![put(&[("pk", s("o1")), ("big", s(&big))])]),
            ];
            for (what, items) in cases {
                let (typed, json) = both(&items);
                let (typed, json) = (typed.unwrap_err().to_string(), json.unwrap_err().to_string());
                assert_eq!(typed, json, "{what}");
            }
            let bad_table = Delete::builder().table_name("ab").key("pk", s("c1")).build().unwrap();
            let (typed, json) = both(&[TransactWriteItem::builder().delete(bad_table).build()]);
            assert_eq!(typed.unwrap_err().to_string(), json.unwrap_err().to_string());
            let cfg = Config::new("tx");
            // DynamoDB takes NULL only as true; the SDK's value can say false, which DynamoDB JSON cannot carry.
            let null = put(&[("pk", s("o1")), ("z", AttributeValue::Null(false))]);
            let e = super::super::parse(&[null], None, None, None, None, &cfg).unwrap_err();
            assert!(e.to_string().contains("NULL value must be true"), "{e}");
            let e = super::super::parse(&[], None, None, None, None, &cfg).unwrap_err();
            assert!(e.to_string().contains("TransactItems must not be empty"), "{e}");
            let e =
                super::super::parse(&[update("o1", &[(":v", n("1"))])], None, None, None, Some(0), &cfg).unwrap_err();
            assert!(e.to_string().contains("DeadlineSeconds must be between 1"), "{e}");
        }
    }
}
