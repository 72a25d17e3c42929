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
            "Update" => items.push((
                env.b.clone(),
                json!({"pk": sv(&format!("{tag}-acct")), "sk": nv(i as i64), "v": nv(10), "cnt": nv(0)}),
            )),
            "Delete" => items.push((env.a.clone(), json!({"pk": sv(&format!("{tag}-del-{i}")), "v": nv(1)}))),
            "ConditionCheck" => {
                items.push((env.a.clone(), json!({"pk": sv(&format!("{tag}-chk-{i}")), "state": sv("OK")})))
            }
            _ => {}
        }
    }
    env.put_many(items).await;
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
    let keys: Vec<(String, Value)> = (0..n)
        .map(|i| match kind(i) {
            "Put" => (env.a.clone(), json!({"pk": sv(&format!("{tag}-new-{i}"))})),
            "Update" => (env.b.clone(), json!({"pk": sv(&format!("{tag}-acct")), "sk": nv(i as i64)})),
            "Delete" => (env.a.clone(), json!({"pk": sv(&format!("{tag}-del-{i}"))})),
            _ => (env.a.clone(), json!({"pk": sv(&format!("{tag}-chk-{i}"))})),
        })
        .collect();
    for (i, it) in env.get_many(&keys).await.into_iter().enumerate() {
        match kind(i) {
            "Put" => assert_eq!(it.expect("inserted item")["note"], sv("inserted")),
            "Update" => {
                let it = it.unwrap();
                assert_eq!(it["v"], nv(7), "update {i} applied once");
                assert_eq!(it["cnt"], nv(1), "ADD applied exactly once at {i}");
            }
            "Delete" => assert!(it.is_none(), "delete {i}"),
            _ => assert!(it.is_some(), "check {i} kept"),
        }
    }
}

/// A tombstone as a committed `Delete` with `Tombstone` leaves it, written by transaction `by` at timestamp `ts`.
pub fn tombstone(pk: &str, ts: i64, by: &str) -> Value {
    json!({"pk": sv(pk), "ts": nv(ts), "expiresAt": nv(4_000_000_000), "_sagaTombstone": sv(by)})
}

/// The item [`tombstones`] finds at position `i` (a tombstone at timestamp 100, or for the tombstone delete a live
/// item at timestamp 100).
pub async fn seed_tombstones(env: &Env, tag: &str, n: usize) {
    let items = (0..n).map(|i| {
        let pk = format!("{tag}-t{i}");
        if i % 5 == 2 {
            json!({"pk": sv(&pk), "ts": nv(100), "v": sv("live")})
        } else {
            tombstone(&pk, 100, "seed")
        }
    });
    crate::put_all(&env.client, &env.a, items).await;
}

/// `n` actions over tombstones (hedged writes), by position modulo 5: a ratcheted insert guarded by
/// `attribute_not_exists`, an update that reads the tombstone's timestamp (and must not see it), a tombstone delete
/// of a live item, a condition check that the item is absent, and a plain delete of a tombstone (which leaves it).
pub fn tombstones(env: &Env, tag: &str, n: usize) -> Value {
    let items: Vec<Value> = (0..n)
        .map(|i| {
            let key = json!({"pk": sv(&format!("{tag}-t{i}"))});
            match i % 5 {
                0 => json!({"Put": {"TableName": env.a, "Item": {"pk": key["pk"], "ts": nv(200), "v": sv("back")},
                    "ConditionExpression": "attribute_not_exists(pk)", "Ratchet": {"AttributeName": "ts"}}}),
                1 => json!({"Update": {"TableName": env.a, "Key": key, "UpdateExpression": "SET v = if_not_exists(ts, :none)",
                    "ConditionExpression": "attribute_not_exists(#k)", "ExpressionAttributeNames": {"#k": "pk"},
                    "ExpressionAttributeValues": {":none": sv("none")}}}),
                2 => json!({"Delete": {"TableName": env.a, "Key": key, "ConditionExpression": "attribute_exists(pk)",
                    "Tombstone": {"Attributes": {"ts": nv(200)}, "TimeToLiveAttribute": "expiresAt", "TimeToLiveSeconds": 3600},
                    "Ratchet": {"AttributeName": "ts"}}}),
                3 => json!({"ConditionCheck": {"TableName": env.a, "Key": key, "ConditionExpression": "attribute_not_exists(pk)"}}),
                _ => json!({"Delete": {"TableName": env.a, "Key": key}}),
            }
        })
        .collect();
    json!({ "TransactItems": items })
}

/// Checks the state [`tombstones`] leaves when transaction `tx` committed.
pub async fn assert_tombstones_committed(env: &Env, tag: &str, n: usize, tx: &str) {
    let keys: Vec<(String, Value)> =
        (0..n).map(|i| (env.a.clone(), json!({"pk": sv(&format!("{tag}-t{i}"))}))).collect();
    for (i, it) in env.get_many(&keys).await.into_iter().enumerate() {
        let pk = format!("{tag}-t{i}");
        let it = it.expect("every position keeps an item");
        match i % 5 {
            0 => {
                assert_eq!(it, json!({"pk": sv(&pk), "ts": nv(200), "v": sv("back")}), "insert over a tombstone at {i}")
            }
            1 => assert_eq!(it, json!({"pk": sv(&pk), "v": sv("none")}), "update over a tombstone at {i}"),
            2 => {
                assert_eq!(it["_sagaTombstone"], sv(tx), "tombstone delete at {i}: {it}");
                assert_eq!((&it["ts"], it.get("v")), (&nv(200), None), "tombstone delete at {i}: {it}");
            }
            _ => assert_eq!(it, tombstone(&pk, 100, "seed"), "a check or a plain delete leaves the tombstone at {i}"),
        }
    }
}

/// A request that appends `me` to the `order` list of item `QUEUED` in table `a`, under that item's parent lock.
pub fn append_to_parent(env: &Env, me: &str) -> Value {
    json!({"TransactItems": [{"Update": {"TableName": env.a, "Key": {"pk": sv("QUEUED")},
        "UpdateExpression": "SET #o = list_append(#o, :me)", "ExpressionAttributeNames": {"#o": "order"},
        "ExpressionAttributeValues": {":me": {"L": [sv(me)]}}}}],
        "Parent": {"TableName": env.a, "Key": {"pk": sv("QUEUED")}}})
}

/// The `order` list [`append_to_parent`] builds, in the order the transactions wrote it.
pub async fn parent_order(env: &Env) -> Vec<String> {
    let p = env.get(&env.a, json!({"pk": sv("QUEUED")})).await.unwrap();
    p["order"]["L"].as_array().unwrap().iter().map(|v| v["S"].as_str().unwrap().to_owned()).collect()
}

/// An action lock refuses after every other item is locked: an update of item `<tag>-ix` that sets its attribute `g`
/// to a string, in a table whose global secondary index keys `g` as a number (lock evaluates each update on the item
/// its lock write returns, index key types included). The table's name is table `b`'s plus `-ix`, so it sorts after
/// the environment's tables and its item is locked last; it is made on first use, and the item seeded.
pub async fn refused_at_lock(env: &Env, tag: &str) -> Value {
    use aws_sdk_dynamodb::types::{
        AttributeDefinition, BillingMode, GlobalSecondaryIndex, KeySchemaElement, KeyType, Projection, ProjectionType,
        ScalarAttributeType,
    };
    let table = format!("{}-ix", env.b);
    if env.client.describe_table().table_name(&table).send().await.is_err() {
        let key = |n: &str| KeySchemaElement::builder().attribute_name(n).key_type(KeyType::Hash).build().unwrap();
        let def = |n: &str, t: ScalarAttributeType| {
            AttributeDefinition::builder().attribute_name(n).attribute_type(t).build().unwrap()
        };
        let gsi = GlobalSecondaryIndex::builder()
            .index_name("by-g")
            .key_schema(key("g"))
            .projection(Projection::builder().projection_type(ProjectionType::All).build())
            .build()
            .unwrap();
        let made = env
            .client
            .create_table()
            .table_name(&table)
            .billing_mode(BillingMode::PayPerRequest)
            .key_schema(key("pk"))
            .attribute_definitions(def("pk", ScalarAttributeType::S))
            .attribute_definitions(def("g", ScalarAttributeType::N))
            .global_secondary_indexes(gsi)
            .send()
            .await;
        // Scenarios of one environment run concurrently: another may have made it first.
        if let Err(e) = made {
            assert!(format!("{e:?}").contains("ResourceInUse"), "{table}: {e:?}");
        }
    }
    let key = json!({"pk": sv(&format!("{tag}-ix"))});
    env.put(&table, json!({"pk": key["pk"], "v": nv(1)})).await;
    json!({"Update": {"TableName": table, "Key": key, "UpdateExpression": "SET g = :g", "ExpressionAttributeValues": {":g": sv("text")}}})
}

/// `n` counters `{tag}{i:05}` at 0 in table `a`, and an `ADD n :one` of each (under `condition`, when given): their
/// keys and the actions.
pub async fn counters(env: &Env, tag: &str, n: usize, condition: Option<&str>) -> (Vec<String>, Vec<Value>) {
    let keys: Vec<String> = (0..n).map(|i| format!("{tag}{i:05}")).collect();
    crate::put_all(&env.client, &env.a, keys.iter().map(|k| json!({"pk": sv(k), "n": nv(0)}))).await;
    let items = keys
        .iter()
        .map(|k| {
            let mut update = json!({"TableName": env.a, "Key": {"pk": sv(k)}, "UpdateExpression": "ADD n :one",
                                    "ExpressionAttributeValues": {":one": nv(1)}});
            if let Some(c) = condition {
                update["ConditionExpression"] = json!(c);
            }
            json!({ "Update": update })
        })
        .collect();
    (keys, items)
}
