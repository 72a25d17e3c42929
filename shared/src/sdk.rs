//! The library in `aws-sdk-dynamodb`'s own terms: the SDK's [`TransactWriteItem`] values as the DynamoDB JSON the
//! protocol runs (for [`crate::Coordinator::transact_write_items`], the builder in the shape of
//! `client.transact_write_items()`), and a cancellation turned into the SDK's [`TransactionCanceledException`], so a
//! caller matches its reasons as it matches DynamoDB's.

use aws_sdk_dynamodb::types::error::TransactionCanceledException;
use aws_sdk_dynamodb::types::{self as sdk, AttributeValue, TransactWriteItem};
use serde_json::{json, Map, Value};
use std::collections::HashMap;

use crate::error::{Cancellation, CancellationReason};
use crate::value;

/// One action in DynamoDB JSON: the one of `ConditionCheck`, `Put`, `Delete` and `Update` the item sets.
pub(crate) fn action_json(item: &TransactWriteItem) -> Result<Value, String> {
    let mut set = Vec::new();
    if let Some(c) = item.condition_check() {
        let mut b = common(c.table_name(), c.expression_attribute_names(), c.expression_attribute_values());
        b.insert("Key".into(), value::item_to_json(c.key()));
        b.insert("ConditionExpression".into(), Value::String(c.condition_expression().to_owned()));
        returning(&mut b, c.return_values_on_condition_check_failure());
        set.push(("ConditionCheck", b));
    }
    if let Some(p) = item.put() {
        let mut b = common(p.table_name(), p.expression_attribute_names(), p.expression_attribute_values());
        b.insert("Item".into(), value::item_to_json(p.item()));
        condition(&mut b, p.condition_expression());
        returning(&mut b, p.return_values_on_condition_check_failure());
        set.push(("Put", b));
    }
    if let Some(d) = item.delete() {
        let mut b = common(d.table_name(), d.expression_attribute_names(), d.expression_attribute_values());
        b.insert("Key".into(), value::item_to_json(d.key()));
        condition(&mut b, d.condition_expression());
        returning(&mut b, d.return_values_on_condition_check_failure());
        set.push(("Delete", b));
    }
    if let Some(u) = item.update() {
        let mut b = common(u.table_name(), u.expression_attribute_names(), u.expression_attribute_values());
        b.insert("Key".into(), value::item_to_json(u.key()));
        b.insert("UpdateExpression".into(), Value::String(u.update_expression().to_owned()));
        condition(&mut b, u.condition_expression());
        returning(&mut b, u.return_values_on_condition_check_failure());
        set.push(("Update", b));
    }
    match set.len() {
        1 => {
            let (kind, body) = set.remove(0);
            Ok(json!({ kind: body }))
        }
        0 => Err("sets none of ConditionCheck, Put, Delete and Update".into()),
        _ => Err(format!(
            "sets {}: a TransactWriteItem holds exactly one action",
            set.iter().map(|(k, _)| *k).collect::<Vec<_>>().join(" and ")
        )),
    }
}

fn common(
    table: &str,
    names: Option<&HashMap<String, String>>,
    values: Option<&HashMap<String, AttributeValue>>,
) -> Map<String, Value> {
    let mut b = Map::new();
    b.insert("TableName".into(), Value::String(table.to_owned()));
    if let Some(names) = names {
        let names = names.iter().map(|(k, v)| (k.clone(), Value::String(v.clone())));
        b.insert("ExpressionAttributeNames".into(), Value::Object(names.collect()));
    }
    if let Some(values) = values {
        b.insert("ExpressionAttributeValues".into(), value::item_to_json(values));
    }
    b
}

fn condition(b: &mut Map<String, Value>, expression: Option<&str>) {
    if let Some(e) = expression {
        b.insert("ConditionExpression".into(), Value::String(e.to_owned()));
    }
}

fn returning(b: &mut Map<String, Value>, rv: Option<&sdk::ReturnValuesOnConditionCheckFailure>) {
    if let Some(rv) = rv {
        b.insert("ReturnValuesOnConditionCheckFailure".into(), Value::String(rv.as_str().to_owned()));
    }
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
}
