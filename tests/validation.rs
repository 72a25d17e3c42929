//! Every bad input PROTOCOL.md lists gets a `ValidationError` naming the action and the problem, and writes nothing.

use dynamo_saga::Coordinator;
use harness::{nv, sv, Env};
use serde_json::{json, Value};

fn upd(table: &str, pk: &str) -> Value {
    json!({"Update": {"TableName": table, "Key": {"pk": sv(pk)}, "UpdateExpression": "SET v = :v", "ExpressionAttributeValues": {":v": nv(1)}}})
}

/// Runs `body` and checks it is rejected with a message containing `needle`, naming `action`, with nothing written.
async fn rejected(env: &Env, body: Value, action: Option<usize>, needle: &str) {
    let before = env.snapshot().await;
    let err = Coordinator::new(env.store.clone()).run(&body).await.expect_err("bad input must be rejected");
    assert_eq!(err.name(), "ValidationError", "{err}");
    let msg = err.to_string();
    assert!(msg.to_lowercase().contains(&needle.to_lowercase()), "message {msg:?} should mention {needle:?}");
    if let Some(i) = action {
        assert!(msg.starts_with(&format!("TransactItems[{i}]")), "message {msg:?} should name action {i}");
    }
    assert_eq!(env.snapshot().await, before, "nothing written to the data tables");
    let records: Vec<_> = env.tx_records().await.into_iter().filter(|r| !r["id"].as_s().unwrap().starts_with("token#")).collect();
    assert!(records.is_empty(), "nothing written to the transactions table: {records:?}");
}

#[tokio::test]
async fn every_listed_bad_input_is_rejected_and_writes_nothing() {
    let env = Env::with("bad", |mut c| {
        c.max_actions = 500;
        c
    })
    .await;
    env.put(&env.a, json!({"pk": sv("x"), "v": nv(0)})).await;
    let a = env.a.clone();
    let b = env.b.clone();
    let ok = upd(&a, "x");
    let cases: Vec<(Value, Option<usize>, &str)> = vec![
        (json!({"TransactItems": []}), None, "must not be empty"),
        (json!({}), None, "TransactItems is required"),
        (json!({"TransactItems": [ok, {}]}), Some(1), "exactly one of"),
        (json!({"TransactItems": [{"Put": {"TableName": a, "Item": {"pk": sv("p")}}, "Delete": {"TableName": a, "Key": {"pk": sv("q")}}}]}), Some(0), "exactly one of"),
        (json!({"TransactItems": [{"Remove": {"TableName": a}}]}), Some(0), "unknown action"),
        (json!({"TransactItems": [{"Delete": {"Key": {"pk": sv("q")}}}]}), Some(0), "TableName is required"),
        (json!({"TransactItems": [{"Delete": {"TableName": a}}]}), Some(0), "Key is required"),
        (json!({"TransactItems": [{"Delete": {"TableName": a, "Key": {"id": sv("q")}}}]}), Some(0), "missing key attribute \"pk\""),
        (json!({"TransactItems": [{"Delete": {"TableName": a, "Key": {"pk": nv(1)}}}]}), Some(0), "must be of type S"),
        (json!({"TransactItems": [{"Delete": {"TableName": a, "Key": {"pk": sv("q"), "extra": sv("e")}}}]}), Some(0), "not part of the table's key"),
        (json!({"TransactItems": [{"Delete": {"TableName": b, "Key": {"pk": sv("q")}}}]}), Some(0), "missing key attribute \"sk\""),
        (json!({"TransactItems": [ok.clone(), {"Delete": {"TableName": "not-allowed", "Key": {"pk": sv("q")}}}]}), Some(1), "not in the allowed tables"),
        (json!({"TransactItems": [{"Delete": {"TableName": env.tx_table, "Key": {"pk": sv("q")}}}]}), Some(0), "not in the allowed tables"),
        (json!({"TransactItems": [ok.clone(), upd(&a, "y"), {"ConditionCheck": {"TableName": a, "Key": {"pk": sv("x")}, "ConditionExpression": "attribute_exists(pk)"}}]}), Some(2), "twice"),
        (json!({"TransactItems": [{"Put": {"TableName": a, "Item": {"pk": sv("p"), "_sagaLock": sv("me")}}}]}), Some(0), "reserved for dynamo-saga"),
        (json!({"TransactItems": [{"Update": {"TableName": a, "Key": {"pk": sv("p")}, "UpdateExpression": "REMOVE #l", "ExpressionAttributeNames": {"#l": "_sagaLock"}}}]}), Some(0), "reserved for dynamo-saga"),
        (json!({"TransactItems": [{"Update": {"TableName": a, "Key": {"pk": sv("p")}, "UpdateExpression": "REMOVE _sagaApplied"}}]}), Some(0), "reserved for dynamo-saga"),
        (json!({"TransactItems": [{"Update": {"TableName": a, "Key": {"pk": sv("p")}, "UpdateExpression": "SET v = :v", "ExpressionAttributeValues": {":v": nv(1), ":_sagaTx": nv(1)}}}]}), Some(0), "reserved"),
        (json!({"TransactItems": [{"Update": {"TableName": a, "Key": {"pk": sv("p")}, "UpdateExpression": "SET v = = :v", "ExpressionAttributeValues": {":v": nv(1)}}}]}), Some(0), "UpdateExpression"),
        (json!({"TransactItems": [{"ConditionCheck": {"TableName": a, "Key": {"pk": sv("p")}, "ConditionExpression": "attribute_exists(pk) AND"}}]}), Some(0), "ConditionExpression"),
        (json!({"TransactItems": [{"ConditionCheck": {"TableName": a, "Key": {"pk": sv("p")}, "ConditionExpression": "#s = :v", "ExpressionAttributeValues": {":v": nv(1)}}}]}), Some(0), "does not define it"),
        (json!({"TransactItems": [{"ConditionCheck": {"TableName": a, "Key": {"pk": sv("p")}, "ConditionExpression": "v = :v"}}]}), Some(0), "does not define it"),
        (json!({"TransactItems": [{"ConditionCheck": {"TableName": a, "Key": {"pk": sv("p")}, "ConditionExpression": "v = :v", "ExpressionAttributeValues": {":v": nv(1), ":w": nv(2)}}}]}), Some(0), "no expression uses it"),
        (json!({"TransactItems": [{"ConditionCheck": {"TableName": a, "Key": {"pk": sv("p")}, "ConditionExpression": "v = :v", "ExpressionAttributeNames": {"#n": "v"}, "ExpressionAttributeValues": {":v": nv(1)}}}]}), Some(0), "no expression uses it"),
        (json!({"TransactItems": [{"ConditionCheck": {"TableName": a, "Key": {"pk": sv("p")}, "ConditionExpression": "status = :v", "ExpressionAttributeValues": {":v": nv(1)}}}]}), Some(0), "reserved"),
        (json!({"TransactItems": [{"Put": {"TableName": a, "Item": {"pk": sv("p"), "n": {"N": "twelve"}}}}]}), Some(0), "not a valid DynamoDB number"),
        (json!({"TransactItems": [{"Put": {"TableName": a, "Item": {"pk": sv("p"), "n": {"Q": "1"}}}}]}), Some(0), "unknown DynamoDB type"),
        (json!({"TransactItems": [{"Put": {"TableName": a, "Item": {"pk": sv("p"), "n": "plain"}}}]}), Some(0), "DynamoDB JSON"),
        (json!({"TransactItems": [{"Put": {"TableName": a, "Item": {"pk": sv("p"), "blob": sv(&"x".repeat(401 * 1024))}}}]}), Some(0), "400"),
        (json!({"TransactItems": (0..501).map(|i| upd(&a, &format!("k{i}"))).collect::<Vec<_>>()}), None, "configured maximum is 500"),
        (json!({"TransactItems": [ok.clone()], "ClientRequestToken": ""}), None, "ClientRequestToken"),
        (json!({"TransactItems": [ok.clone()], "ClientRequestToken": "x".repeat(37)}), None, "ClientRequestToken"),
        (json!({"TransactItems": [ok.clone()], "ClientRequestToken": "has space"}), None, "ClientRequestToken"),
        (json!({"TransactItems": [ok.clone()], "ClientRequestToken": 7}), None, "ClientRequestToken"),
        (json!({"TransactItems": [ok.clone()], "Unknown": 1}), None, "unknown field"),
        (json!({"TransactItems": [{"Update": {"TableName": a, "Key": {"pk": sv("p")}}}]}), Some(0), "UpdateExpression is required"),
        (json!({"TransactItems": [{"Update": {"TableName": a, "Key": {"pk": sv("p")}, "UpdateExpression": "SET v = :v", "ExpressionAttributeValues": {":v": nv(1)}, "ReturnValuesOnConditionCheckFailure": "SOME"}}]}), Some(0), "ALL_OLD or NONE"),
        (json!({"TransactItems": [ok.clone()], "Options": {"DeadlineSeconds": 0}}), None, "DeadlineSeconds"),
        (json!({"TransactItems": [ok.clone()], "Parent": {"TableName": a}}), None, "Parent: Key is required"),
        (json!({"TransactItems": "all of them"}), None, "must be an array"),
    ];
    let n = cases.len();
    for (body, action, needle) in cases {
        rejected(&env, body, action, needle).await;
    }
    assert!(n >= 30);
}

#[tokio::test]
async fn reused_token_with_another_body_is_rejected_without_writes() {
    let env = Env::new("badtoken").await;
    let co = Coordinator::new(env.store.clone());
    co.run(&json!({"ClientRequestToken": "t-1", "TransactItems": [upd(&env.a, "x")]})).await.unwrap();
    let before = env.snapshot().await;
    let records = env.tx_records().await.len();
    let err = co.run(&json!({"ClientRequestToken": "t-1", "TransactItems": [upd(&env.a, "y")]})).await.unwrap_err();
    assert_eq!(err.name(), "ValidationError");
    assert_eq!(env.snapshot().await, before);
    assert_eq!(env.tx_records().await.len(), records);
}
