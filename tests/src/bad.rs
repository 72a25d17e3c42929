//! The catalogue of bad requests: each with the action it must name (request order) and a word its message must
//! contain. Used through the library (tests/validation.rs), the state machine and the staging API (tests/e2e.rs).

use serde_json::{json, Value};

use crate::{nv, sv};

/// An update of `pk` in `table` that is valid on its own.
pub fn upd(table: &str, pk: &str) -> Value {
    json!({"Update": {"TableName": table, "Key": {"pk": sv(pk)}, "UpdateExpression": "SET v = :v", "ExpressionAttributeValues": {":v": nv(1)}}})
}

/// Bad requests against table `a` (pk S, holding item `x`) and `b` (pk S + sk N), with `tx_table` the transactions
/// table and `max_actions` the configured maximum.
pub fn catalogue(a: &str, b: &str, tx_table: &str, max_actions: usize) -> Vec<(Value, Option<usize>, String)> {
    let ok = upd(a, "x");
    let cases: Vec<(Value, Option<usize>, &str)> = vec![
        (json!({"TransactItems": []}), None, "must not be empty"),
        (json!({}), None, "TransactItems is required"),
        (json!({"TransactItems": [ok.clone(), {}]}), Some(1), "exactly one of"),
        (
            json!({"TransactItems": [{"Put": {"TableName": a, "Item": {"pk": sv("p")}}, "Delete": {"TableName": a, "Key": {"pk": sv("q")}}}]}),
            Some(0),
            "exactly one of",
        ),
        (json!({"TransactItems": [{"Remove": {"TableName": a}}]}), Some(0), "unknown action"),
        (json!({"TransactItems": [{"Delete": {"Key": {"pk": sv("q")}}}]}), Some(0), "TableName is required"),
        (json!({"TransactItems": [{"Delete": {"TableName": a}}]}), Some(0), "Key is required"),
        (
            json!({"TransactItems": [{"Delete": {"TableName": a, "Key": {"id": sv("q")}}}]}),
            Some(0),
            "missing key attribute \"pk\"",
        ),
        (json!({"TransactItems": [{"Delete": {"TableName": a, "Key": {"pk": nv(1)}}}]}), Some(0), "must be of type S"),
        (
            json!({"TransactItems": [{"Delete": {"TableName": a, "Key": {"pk": sv("q"), "extra": sv("e")}}}]}),
            Some(0),
            "not part of the table's key",
        ),
        (
            json!({"TransactItems": [{"Delete": {"TableName": b, "Key": {"pk": sv("q")}}}]}),
            Some(0),
            "missing key attribute \"sk\"",
        ),
        (
            json!({"TransactItems": [ok.clone(), {"Delete": {"TableName": "not-allowed", "Key": {"pk": sv("q")}}}]}),
            Some(1),
            "not in the allowed tables",
        ),
        (
            json!({"TransactItems": [{"Delete": {"TableName": tx_table, "Key": {"pk": sv("q")}}}]}),
            Some(0),
            "not in the allowed tables",
        ),
        (
            json!({"TransactItems": [ok.clone(), upd(a, "y"), {"ConditionCheck": {"TableName": a, "Key": {"pk": sv("x")}, "ConditionExpression": "attribute_exists(pk)"}}]}),
            Some(2),
            "twice",
        ),
        (
            json!({"TransactItems": [{"Put": {"TableName": a, "Item": {"pk": sv("p"), "_sagaLock": sv("me")}}}]}),
            Some(0),
            "reserved for dynamo-saga",
        ),
        (
            json!({"TransactItems": [{"Update": {"TableName": a, "Key": {"pk": sv("p")}, "UpdateExpression": "REMOVE #l", "ExpressionAttributeNames": {"#l": "_sagaLock"}}}]}),
            Some(0),
            "reserved for dynamo-saga",
        ),
        (
            json!({"TransactItems": [{"Update": {"TableName": a, "Key": {"pk": sv("p")}, "UpdateExpression": "REMOVE _sagaApplied"}}]}),
            Some(0),
            "reserved for dynamo-saga",
        ),
        (
            json!({"TransactItems": [{"Update": {"TableName": a, "Key": {"pk": sv("p")}, "UpdateExpression": "SET v = :v", "ExpressionAttributeValues": {":v": nv(1), ":_sagaTx": nv(1)}}}]}),
            Some(0),
            "reserved",
        ),
        (
            json!({"TransactItems": [{"Update": {"TableName": a, "Key": {"pk": sv("p")}, "UpdateExpression": "SET v = = :v", "ExpressionAttributeValues": {":v": nv(1)}}}]}),
            Some(0),
            "UpdateExpression",
        ),
        (
            json!({"TransactItems": [{"ConditionCheck": {"TableName": a, "Key": {"pk": sv("p")}, "ConditionExpression": "attribute_exists(pk) AND"}}]}),
            Some(0),
            "ConditionExpression",
        ),
        (
            json!({"TransactItems": [{"ConditionCheck": {"TableName": a, "Key": {"pk": sv("p")}, "ConditionExpression": "#s = :v", "ExpressionAttributeValues": {":v": nv(1)}}}]}),
            Some(0),
            "does not define it",
        ),
        (
            json!({"TransactItems": [{"ConditionCheck": {"TableName": a, "Key": {"pk": sv("p")}, "ConditionExpression": "v = :v"}}]}),
            Some(0),
            "does not define it",
        ),
        (
            json!({"TransactItems": [{"ConditionCheck": {"TableName": a, "Key": {"pk": sv("p")}, "ConditionExpression": "v = :v", "ExpressionAttributeValues": {":v": nv(1), ":w": nv(2)}}}]}),
            Some(0),
            "no expression uses it",
        ),
        (
            json!({"TransactItems": [{"ConditionCheck": {"TableName": a, "Key": {"pk": sv("p")}, "ConditionExpression": "v = :v", "ExpressionAttributeNames": {"#n": "v"}, "ExpressionAttributeValues": {":v": nv(1)}}}]}),
            Some(0),
            "no expression uses it",
        ),
        (
            json!({"TransactItems": [{"ConditionCheck": {"TableName": a, "Key": {"pk": sv("p")}, "ConditionExpression": "status = :v", "ExpressionAttributeValues": {":v": nv(1)}}}]}),
            Some(0),
            "reserved",
        ),
        (
            json!({"TransactItems": [{"Put": {"TableName": a, "Item": {"pk": sv("p"), "n": {"N": "twelve"}}}}]}),
            Some(0),
            "not a valid DynamoDB number",
        ),
        (
            json!({"TransactItems": [{"Put": {"TableName": a, "Item": {"pk": sv("p"), "n": {"Q": "1"}}}}]}),
            Some(0),
            "unknown DynamoDB type",
        ),
        (
            json!({"TransactItems": [{"Put": {"TableName": a, "Item": {"pk": sv("p"), "n": "plain"}}}]}),
            Some(0),
            "DynamoDB JSON",
        ),
        (
            json!({"TransactItems": [{"Put": {"TableName": a, "Item": {"pk": sv("p"), "blob": sv(&"x".repeat(401 * 1024))}}}]}),
            Some(0),
            "400",
        ),
        (json!({"TransactItems": [ok.clone()], "ClientRequestToken": ""}), None, "ClientRequestToken"),
        (json!({"TransactItems": [ok.clone()], "ClientRequestToken": "x".repeat(37)}), None, "ClientRequestToken"),
        (json!({"TransactItems": [ok.clone()], "ClientRequestToken": "has space"}), None, "ClientRequestToken"),
        (json!({"TransactItems": [ok.clone()], "ClientRequestToken": 7}), None, "ClientRequestToken"),
        (json!({"TransactItems": [ok.clone()], "Unknown": 1}), None, "unknown field"),
        (
            json!({"TransactItems": [ok.clone()], "ReturnConsumedCapacity": "ALL"}),
            None,
            "ReturnConsumedCapacity must be",
        ),
        (
            json!({"TransactItems": [ok.clone()], "ReturnItemCollectionMetrics": true}),
            None,
            "ReturnItemCollectionMetrics",
        ),
        (
            json!({"TransactItems": [{"Update": {"TableName": a, "Key": {"pk": sv("p")}}}]}),
            Some(0),
            "UpdateExpression is required",
        ),
        (
            json!({"TransactItems": [{"Update": {"TableName": a, "Key": {"pk": sv("p")}, "UpdateExpression": "SET v = :v", "ExpressionAttributeValues": {":v": nv(1)}, "ReturnValuesOnConditionCheckFailure": "SOME"}}]}),
            Some(0),
            "ALL_OLD or NONE",
        ),
        (json!({"TransactItems": [ok.clone()], "Options": {"DeadlineSeconds": 0}}), None, "DeadlineSeconds"),
        (json!({"TransactItems": [ok.clone()], "Parent": {"TableName": a}}), None, "Parent: Key is required"),
        (json!({"TransactItems": "all of them"}), None, "must be an array"),
        (
            json!({"TransactItems": [{"Put": {"TableName": a, "Item": {"pk": sv("p"), "v": nv(1)}, "Ratchet": {"AttributeName": "ts"}}}]}),
            Some(0),
            "no \"ts\" attribute",
        ),
        (
            json!({"TransactItems": [{"Put": {"TableName": a, "Item": {"pk": sv("p"), "ts": {"BOOL": true}}, "Ratchet": {"AttributeName": "ts"}}}]}),
            Some(0),
            "number or a string",
        ),
        (
            json!({"TransactItems": [{"Put": {"TableName": a, "Item": {"pk": sv("p"), "ts": nv(1)}, "Ratchet": "ts"}}]}),
            Some(0),
            "Ratchet: must be an object",
        ),
        (
            json!({"TransactItems": [{"Update": {"TableName": a, "Key": {"pk": sv("p")}, "UpdateExpression": "SET ts = :t", "ExpressionAttributeValues": {":t": nv(1)}, "Ratchet": {"AttributeName": "ts"}}}]}),
            Some(0),
            "unknown field \"Ratchet\"",
        ),
        (
            json!({"TransactItems": [{"Put": {"TableName": a, "Item": {"pk": sv("p")}, "Tombstone": {"TimeToLiveAttribute": "exp", "TimeToLiveSeconds": 60}}}]}),
            Some(0),
            "unknown field \"Tombstone\"",
        ),
        (
            json!({"TransactItems": [ok.clone(), {"Delete": {"TableName": a, "Key": {"pk": sv("p")}, "Tombstone": {"TimeToLiveSeconds": 60}}}]}),
            Some(1),
            "TimeToLiveAttribute is required",
        ),
        (
            json!({"TransactItems": [{"Delete": {"TableName": a, "Key": {"pk": sv("p")}, "Tombstone": {"TimeToLiveAttribute": "exp", "TimeToLiveSeconds": 0}}}]}),
            Some(0),
            "TimeToLiveSeconds must be",
        ),
        (
            json!({"TransactItems": [{"Delete": {"TableName": a, "Key": {"pk": sv("p")}, "Tombstone": {"Attributes": {"_sagaLock": sv("x")}, "TimeToLiveAttribute": "exp", "TimeToLiveSeconds": 60}}}]}),
            Some(0),
            "reserved for dynamo-saga",
        ),
        (
            json!({"TransactItems": [{"Delete": {"TableName": a, "Key": {"pk": sv("p")}, "Tombstone": {"Attributes": {"pk": sv("q")}, "TimeToLiveAttribute": "exp", "TimeToLiveSeconds": 60}}}]}),
            Some(0),
            "is a key attribute",
        ),
        (
            json!({"TransactItems": [{"Delete": {"TableName": a, "Key": {"pk": sv("p")}, "Ratchet": {"AttributeName": "ts"}}}]}),
            Some(0),
            "Ratchet needs a Tombstone",
        ),
        (
            json!({"TransactItems": [{"Delete": {"TableName": a, "Key": {"pk": sv("p")}, "Ratchet": {"AttributeName": "ts"}, "Tombstone": {"TimeToLiveAttribute": "exp", "TimeToLiveSeconds": 60}}}]}),
            Some(0),
            "no \"ts\" attribute",
        ),
    ];
    let mut out: Vec<(Value, Option<usize>, String)> =
        cases.into_iter().map(|(v, i, n)| (v, i, n.to_string())).collect();
    out.push((
        json!({"TransactItems": (0..=max_actions).map(|i| upd(a, &format!("k{i}"))).collect::<Vec<_>>()}),
        None,
        format!("configured maximum is {max_actions}"),
    ));
    out
}
