//! Transactions that mix every kind of action across both test tables, with the items they need.

use serde_json::{json, Value};

use crate::{nv, sv, Env};

/// The kind of action at request position `i` of [`mixed`].
pub fn kind(i: usize) -> &'static str {
    ["Put", "Update", "Delete", "ConditionCheck"][i % 4]
}

/// Items [`mixed`] expects to exist.
pub async fn seed_mixed(env: &Env, tag: &str, n: usize) {
    let mut items = Vec::new();
    for i in 0..n {
        match kind(i) {
            "Update" => items.push((env.b.clone(), json!({"pk": sv(&format!("{tag}-acct")), "sk": nv(i as i64), "v": nv(10), "cnt": nv(0)}))),
            "Delete" => items.push((env.a.clone(), json!({"pk": sv(&format!("{tag}-del-{i}")), "v": nv(1)}))),
            "ConditionCheck" => items.push((env.a.clone(), json!({"pk": sv(&format!("{tag}-chk-{i}")), "state": sv("OK")}))),
            _ => {}
        }
    }
    futures::future::join_all(items.into_iter().map(|(t, it)| async move { env.put(&t, it).await })).await;
}

/// `n` actions: inserts guarded by `attribute_not_exists`, conditional updates with an `ADD` counter, conditional
/// deletes and condition checks, across table `a` (pk) and table `b` (pk + sk).
pub fn mixed(env: &Env, tag: &str, n: usize) -> Value {
    let items: Vec<Value> = (0..n)
        .map(|i| match kind(i) {
            "Put" => json!({"Put": {"TableName": env.a, "Item": {"pk": sv(&format!("{tag}-new-{i}")), "v": nv(i as i64), "note": sv("inserted")},
                "ConditionExpression": "attribute_not_exists(pk)"}}),
            "Update" => json!({"Update": {"TableName": env.b, "Key": {"pk": sv(&format!("{tag}-acct")), "sk": nv(i as i64)},
                "UpdateExpression": "SET v = v - :amt, #t = :t ADD cnt :one",
                "ConditionExpression": "v >= :amt",
                "ExpressionAttributeNames": {"#t": "tag"},
                "ExpressionAttributeValues": {":amt": nv(3), ":t": sv(tag), ":one": nv(1)},
                "ReturnValuesOnConditionCheckFailure": "ALL_OLD"}}),
            "Delete" => json!({"Delete": {"TableName": env.a, "Key": {"pk": sv(&format!("{tag}-del-{i}"))},
                "ConditionExpression": "attribute_exists(pk)"}}),
            _ => json!({"ConditionCheck": {"TableName": env.a, "Key": {"pk": sv(&format!("{tag}-chk-{i}"))},
                "ConditionExpression": "#s = :ok", "ExpressionAttributeNames": {"#s": "state"},
                "ExpressionAttributeValues": {":ok": sv("OK")}}}),
        })
        .collect();
    json!({ "TransactItems": items })
}

/// Checks the state [`mixed`] leaves when it committed.
pub async fn assert_mixed_committed(env: &Env, tag: &str, n: usize) {
    for i in 0..n {
        match kind(i) {
            "Put" => {
                let it = env.get(&env.a, json!({"pk": sv(&format!("{tag}-new-{i}"))})).await.expect("inserted item");
                assert_eq!(it["note"], sv("inserted"));
            }
            "Update" => {
                let it = env.get(&env.b, json!({"pk": sv(&format!("{tag}-acct")), "sk": nv(i as i64)})).await.unwrap();
                assert_eq!(it["v"], nv(7), "update {i} applied once");
                assert_eq!(it["cnt"], nv(1), "ADD applied exactly once at {i}");
            }
            "Delete" => assert!(env.get(&env.a, json!({"pk": sv(&format!("{tag}-del-{i}"))})).await.is_none(), "delete {i}"),
            _ => assert!(env.get(&env.a, json!({"pk": sv(&format!("{tag}-chk-{i}"))})).await.is_some(), "check {i} kept"),
        }
    }
}
