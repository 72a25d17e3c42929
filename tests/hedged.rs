//! Retried and hedged writes: a `Put` with a `Ratchet` takes effect only when its timestamp is not older
//! than the stored one, so a hedged copy or a late retry of an old write never overwrites a newer value, whatever
//! the order the copies arrive in, through the library and through the state machine.

use dynamo_saga::{Coordinator, TxError};
use harness::stack::stack;
use harness::{nv, sv, Env};
use serde_json::{json, Value};

/// Ratcheted puts of `n` items `{tag}{i}` with timestamp `ts` and value `v`.
fn puts(env: &Env, tag: &str, n: usize, ts: i64, v: &str) -> Value {
    let items: Vec<Value> = (0..n)
        .map(|i| json!({"Put": {"TableName": env.a, "Item": {"pk": sv(&format!("{tag}{i:03}")), "ts": nv(ts), "v": sv(v)}, "Ratchet": {"AttributeName": "ts"}}}))
        .collect();
    json!({ "TransactItems": items })
}

/// (ts, v) of every item of `tag`.
async fn state(env: &Env, tag: &str, n: usize) -> Vec<(i64, String)> {
    let mut out = Vec::new();
    for i in 0..n {
        let it = env.get(&env.a, json!({"pk": sv(&format!("{tag}{i:03}"))})).await.expect("item exists");
        out.push((it["ts"]["N"].as_str().unwrap().parse().unwrap(), it["v"]["S"].as_str().unwrap().to_owned()));
    }
    out
}

fn refused(r: &Result<dynamo_saga::Committed, TxError>) -> bool {
    matches!(r, Err(TxError::Canceled(c)) if harness::assert_named(c).failed().any(|(_, r)| r.code == "ConditionalCheckFailed"))
}

#[tokio::test]
async fn ratcheted_puts_never_overwrite_newer_values_in_any_order() {
    let env = Env::new("ratchet").await;
    let n = 150;
    let coord = Coordinator::new(env.store.clone());
    let (old, new) = (puts(&env, "s", n, 100, "old"), puts(&env, "s", n, 200, "new"));

    // In order: the old write, the new one, then a hedged copy of the old one arriving last.
    coord.run(&old).await.expect("the first write commits");
    coord.run(&new).await.expect("a newer write commits");
    assert!(refused(&coord.run(&old).await), "the late copy of the old write is refused");
    assert_eq!(state(&env, "s", n).await, vec![(200, "new".to_owned()); n]);
    // A retry of the newest write (the same timestamp) is not older: it commits and changes nothing.
    coord.run(&new).await.expect("an equal timestamp is not older");
    assert_eq!(state(&env, "s", n).await, vec![(200, "new".to_owned()); n]);

    // A ratcheted put in a transaction that rolls back leaves the stored timestamps as they were: the old write is
    // still refused afterwards, and one newer item does not let the rest of a stale transaction through.
    let mut failing = puts(&env, "s", n, 300, "rolled back");
    failing["TransactItems"].as_array_mut().unwrap().push(json!({"ConditionCheck": {"TableName": env.a, "Key": {"pk": sv("missing")}, "ConditionExpression": "attribute_exists(pk)"}}));
    assert!(refused(&coord.run(&failing).await));
    assert_eq!(state(&env, "s", n).await, vec![(200, "new".to_owned()); n]);
    let mut mixed = puts(&env, "s", n, 250, "partial");
    mixed["TransactItems"][n - 1]["Put"]["Item"]["ts"] = nv(150);
    assert!(refused(&coord.run(&mixed).await), "one stale put cancels the whole transaction");
    assert_eq!(state(&env, "s", n).await, vec![(200, "new".to_owned()); n]);

    // At once, five rounds on fresh items: the old write and its hedged copy race the new one. Conflicts are retried
    // (as a client retries TransactionConflict); whatever commits first, the newest value stays.
    for round in 0..5 {
        let tag = format!("r{round}-");
        let (old, new) = (puts(&env, &tag, n, 100, "old"), puts(&env, &tag, n, 200, "new"));
        let run = |body: Value| {
            let coord = coord.clone();
            async move { coord.run(&body).await }
        };
        let (a, b, c) = tokio::join!(run(old.clone()), run(new.clone()), run(old.clone()));
        assert!(b.is_ok(), "the newest write commits: {b:?}");
        for r in [&a, &c] {
            assert!(r.is_ok() || refused(r), "a copy of the old write commits or is refused: {r:?}");
        }
        assert_eq!(state(&env, &tag, n).await, vec![(200, "new".to_owned()); n], "round {round}");
    }
    env.assert_clean().await;
}

#[tokio::test]
async fn a_late_copy_of_an_old_write_through_the_state_machine_is_refused() {
    let env = Env::on_stack("smratchet").await;
    let n = 120;
    let (old, new) = (puts(&env, "m", n, 100, "old"), puts(&env, "m", n, 200, "new"));
    let sm = stack().await;
    let ex = sm.execute(&new).await;
    assert_eq!(ex.status, "SUCCEEDED", "{ex:?}");
    let ex = sm.execute(&old).await;
    assert_eq!((ex.status.as_str(), ex.error.as_deref()), ("FAILED", Some("TransactionCanceled")), "{ex:?}");
    let c = ex.cancellation().expect("the cause carries the cancellation");
    assert!(c["CancellationReasons"].as_array().unwrap().iter().any(|r| r["Code"] == "ConditionalCheckFailed"), "{c}");
    assert_eq!(state(&env, "m", n).await, vec![(200, "new".to_owned()); n]);
    env.assert_clean().await;
}

/// Tombstone deletes of `n` items `{tag}{i}` at timestamp `ts`, with a ratchet.
fn tombstone_deletes(env: &Env, tag: &str, n: usize, ts: i64) -> Value {
    let items: Vec<Value> = (0..n)
        .map(|i| json!({"Delete": {"TableName": env.a, "Key": {"pk": sv(&format!("{tag}{i:03}"))}, "Ratchet": {"AttributeName": "ts"},
            "Tombstone": {"Attributes": {"ts": nv(ts)}, "TimeToLiveAttribute": "expiresAt", "TimeToLiveSeconds": 86400}}}))
        .collect();
    json!({ "TransactItems": items })
}

fn key(tag: &str, i: usize) -> dynamo_saga::value::Item {
    dynamo_saga::value::item_from_json(&json!({"pk": sv(&format!("{tag}{i:03}"))})).unwrap()
}

/// Every isolation level reads items `0..n` of `tag` as absent, one by one, in a batch and as a query's results.
async fn hidden(env: &Env, tag: &str, n: usize) {
    use dynamo_saga::read::{self, Isolation};
    let keys: Vec<_> = (0..n).map(|i| key(tag, i)).collect();
    for iso in [Isolation::Uncommitted, Isolation::Committed, Isolation::ReadLock] {
        for k in keys.iter().step_by(37) {
            assert_eq!(read::get_item(&env.store, &env.a, k.clone(), iso).await.unwrap(), None, "{iso:?}");
        }
        assert_eq!(read::batch_get_item(&env.store, &env.a, keys.clone(), iso).await.unwrap(), vec![], "{iso:?}");
    }
    let raw = keys.iter().map(|k| async {
        env.store.get(&dynamo_saga::store::Meter::default(), &env.a, k.clone()).await.unwrap().unwrap()
    });
    let raw = futures::future::join_all(raw).await;
    for iso in [Isolation::Uncommitted, Isolation::Committed, Isolation::ReadLock] {
        assert_eq!(read::resolve_all(&env.store, &env.a, raw.clone(), iso).await.unwrap(), vec![], "{iso:?}");
    }
}

#[tokio::test]
async fn tombstones_hide_deleted_items_stop_stale_writes_and_carry_a_ttl() {
    let env = Env::new("tombstone").await;
    let n = 120;
    let coord = Coordinator::new(env.store.clone());
    coord.run(&puts(&env, "t", n, 100, "first")).await.unwrap();

    // The delete leaves a tombstone: the key, the timestamp, when it expires, and who wrote it.
    let before = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    let del = coord.run(&tombstone_deletes(&env, "t", n, 200)).await.unwrap();
    let after = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    for i in 0..n {
        let it = env.get(&env.a, json!({"pk": sv(&format!("t{i:03}"))})).await.expect("a tombstone stays");
        let expires: u64 = it["expiresAt"]["N"].as_str().unwrap().parse().unwrap();
        assert!((before + 86400..=after + 86400).contains(&expires), "expiresAt {expires} is a day after the delete");
        assert_eq!(
            it,
            json!({"pk": sv(&format!("t{i:03}")), "ts": nv(200), "expiresAt": {"N": expires.to_string()},
            "_sagaTombstone": sv(&del.transaction_id)})
        );
    }
    hidden(&env, "t", n).await;
    env.put(&env.a, json!({"pk": sv("text"), "s": sv("not a number")})).await;
    let stones = env.scan(&env.a).await;

    // A hedged copy of the first put arrives after the delete: the tombstone keeps it out.
    assert!(refused(&coord.run(&puts(&env, "t", n, 150, "stale")).await));
    // So does a stale tombstone, and a condition that the item exists (a tombstone is absent).
    assert!(refused(&coord.run(&tombstone_deletes(&env, "t", n, 150)).await));
    let exists = json!({"TransactItems": [{"ConditionCheck": {"TableName": env.a, "Key": {"pk": sv("t000")}, "ConditionExpression": "attribute_exists(pk)"}}]});
    assert!(refused(&coord.run(&exists).await));
    // Nor is a tombstone a Parent: naming one cancels the transaction as a missing parent does.
    let under = json!({"TransactItems": [{"ConditionCheck": {"TableName": env.a, "Key": {"pk": sv("text")}, "ConditionExpression": "attribute_exists(pk)"}}],
        "Parent": {"TableName": env.a, "Key": {"pk": sv("t001")}}});
    let c = harness::canceled(coord.run(&under).await);
    let p = c.parent_cancellation_reason.as_ref().expect("the parent is the reason");
    assert!(
        p.code == "ConditionalCheckFailed" && p.message.as_deref().unwrap_or("").contains("does not exist"),
        "{c:?}"
    );
    // A transaction that updates the tombstones and then fails at apply puts them back exactly.
    let mut failing: Vec<Value> = (0..n)
        .map(|i| json!({"Update": {"TableName": env.a, "Key": {"pk": sv(&format!("t{i:03}"))}, "UpdateExpression": "SET v = :v",
            "ConditionExpression": "attribute_not_exists(pk)", "ExpressionAttributeValues": {":v": sv("rolled back")}}}))
        .collect();
    failing.push(json!({"Update": {"TableName": env.a, "Key": {"pk": sv("text")}, "UpdateExpression": "ADD s :one", "ExpressionAttributeValues": {":one": nv(1)}}}));
    harness::canceled(coord.run(&json!({"TransactItems": failing})).await);
    assert_eq!(env.scan(&env.a).await, stones, "the rollback restored every tombstone");

    // While a transaction holds a tombstone, the tombstone (and its time to live) is kept aside, so it cannot
    // expire under the lock; it comes back when the lock is let go.
    let keys = (0..n).map(|i| (env.a.clone(), key("t", i))).collect();
    let lock = dynamo_saga::read::lock_for_read(coord.store(), keys, None).await.unwrap();
    assert_eq!(lock.items, vec![None; n]);
    let locked = env.get(&env.a, json!({"pk": sv("t007")})).await.unwrap();
    assert!(locked.get("expiresAt").is_none() && locked.get("_sagaStone").is_some(), "{locked}");
    for iso in [dynamo_saga::read::Isolation::Uncommitted, dynamo_saga::read::Isolation::Committed] {
        assert_eq!(dynamo_saga::read::get_item(&env.store, &env.a, key("t", 7), iso).await.unwrap(), None);
    }
    lock.release().await.unwrap();
    assert_eq!(env.scan(&env.a).await, stones);

    // A newer put replaces the tombstone with a live item that has no time to live.
    coord.run(&puts(&env, "t", n, 300, "back")).await.unwrap();
    assert_eq!(state(&env, "t", n).await, vec![(300, "back".to_owned()); n]);
    assert!(env.get(&env.a, json!({"pk": sv("t000")})).await.unwrap().get("expiresAt").is_none());
    env.assert_clean().await;
}

#[tokio::test]
async fn a_tombstone_through_the_state_machine_keeps_a_late_put_out() {
    let env = Env::on_stack("smtomb").await;
    let n = 120;
    let sm = stack().await;
    let ex = sm.execute(&puts(&env, "d", n, 100, "first")).await;
    assert_eq!(ex.status, "SUCCEEDED", "{ex:?}");
    let ex = sm.execute(&tombstone_deletes(&env, "d", n, 200)).await;
    assert_eq!(ex.status, "SUCCEEDED", "{ex:?}");
    let ex = sm.execute(&puts(&env, "d", n, 150, "stale")).await;
    assert_eq!((ex.status.as_str(), ex.error.as_deref()), ("FAILED", Some("TransactionCanceled")), "{ex:?}");
    for i in 0..n {
        let it = env.get(&env.a, json!({"pk": sv(&format!("d{i:03}"))})).await.expect("a tombstone stays");
        assert_eq!((&it["ts"], it.get("v"), it.get("_sagaTombstone").is_some()), (&nv(200), None, true), "{it}");
    }
    hidden(&env, "d", n).await;
    env.assert_clean().await;
}

/// DynamoDB judges a tombstone before anything is locked: one that breaks an index's key type cancels its
/// transaction at begin with `ValidationError` on its action, as `TransactWriteItems` refuses such a `Put`, and a
/// time to live that an index refuses leaves the tombstone without one rather than a committed transaction that
/// cannot finish.
#[tokio::test]
async fn tombstones_an_index_refuses() {
    use aws_sdk_dynamodb::types::{
        AttributeDefinition, BillingMode, GlobalSecondaryIndex, KeySchemaElement, KeyType, Projection, ProjectionType,
        ScalarAttributeType,
    };
    let env = Env::with("tombidx", |c| c.with_allowed_tables(["t-*"])).await;
    let table = format!("{}-gsi", env.a);
    let key = |n: &str| KeySchemaElement::builder().attribute_name(n).key_type(KeyType::Hash).build().unwrap();
    let def = |n: &str, t: ScalarAttributeType| {
        AttributeDefinition::builder().attribute_name(n).attribute_type(t).build().unwrap()
    };
    let gsi = |name: &str, attr: &str| {
        GlobalSecondaryIndex::builder()
            .index_name(name)
            .key_schema(key(attr))
            .projection(Projection::builder().projection_type(ProjectionType::All).build())
            .build()
            .unwrap()
    };
    env.client
        .create_table()
        .table_name(&table)
        .billing_mode(BillingMode::PayPerRequest)
        .key_schema(key("pk"))
        .attribute_definitions(def("pk", ScalarAttributeType::S))
        .attribute_definitions(def("g", ScalarAttributeType::N))
        .attribute_definitions(def("exp", ScalarAttributeType::S))
        .global_secondary_indexes(gsi("by-g", "g"))
        .global_secondary_indexes(gsi("by-exp", "exp"))
        .send()
        .await
        .unwrap();
    for (pk, v) in [("x1", 1), ("x2", 2)] {
        env.put(&table, json!({"pk": sv(pk), "v": nv(v)})).await;
    }
    let before = env.scan(&table).await;
    let coord = Coordinator::new(env.store.clone());
    let delete = |attrs: Value, ttl: &str| {
        json!({"Delete": {"TableName": table, "Key": {"pk": sv("x1")},
        "Tombstone": {"Attributes": attrs, "TimeToLiveAttribute": ttl, "TimeToLiveSeconds": 60}}})
    };

    // The index keys g as a number: a tombstone carrying a string there is refused by begin, from the request.
    let bad = json!({"TransactItems": [delete(json!({"g": sv("text")}), "ttl"), {"Update": {"TableName": table, "Key": {"pk": sv("x2")},
        "UpdateExpression": "SET v = :v", "ExpressionAttributeValues": {":v": nv(20)}}}]});
    match coord.run(&bad).await {
        Err(TxError::Canceled(c)) => {
            harness::assert_named(&c);
            let failed: Vec<_> = c.failed().map(|(i, r)| (i, r.code.clone())).collect();
            assert_eq!(failed, vec![(0, "ValidationError".to_owned())], "{c:?}");
            let h =
                dynamo_saga::records::read_header(&env.store, &Default::default(), &c.transaction_id).await.unwrap();
            assert_eq!(
                (h.state, h.batches, h.lock_started, h.finished()),
                (dynamo_saga::records::TxState::RolledBack, 0, 0, true),
                "ended by begin, nothing locked: {h:?}"
            );
        }
        other => panic!("the tombstone should have been refused: {other:?}"),
    }
    assert_eq!(env.scan(&table).await, before, "nothing changed");

    // The index keys exp as a string: the time to live (a number) is refused at complete, and the tombstone stays
    // without one.
    let done =
        coord.run(&json!({"TransactItems": [delete(json!({"g": nv(5)}), "exp")]})).await.expect("the delete commits");
    let stone = env.get(&table, json!({"pk": sv("x1")})).await.unwrap();
    assert_eq!(stone, json!({"pk": sv("x1"), "g": nv(5), "_sagaTombstone": sv(&done.transaction_id)}));
    let k = dynamo_saga::value::item_from_json(&json!({"pk": sv("x1")})).unwrap();
    assert_eq!(
        dynamo_saga::read::get_item(&env.store, &table, k, dynamo_saga::read::Isolation::Committed).await.unwrap(),
        None
    );
    assert_eq!(env.get(&table, json!({"pk": sv("x2")})).await.unwrap(), json!({"pk": sv("x2"), "v": nv(2)}));
    for (k, v) in env.scan(&table).await {
        let locks: Vec<&String> =
            v.as_object().unwrap().keys().filter(|n| n.starts_with("_saga") && *n != "_sagaTombstone").collect();
        assert!(locks.is_empty(), "{k} still carries {locks:?}: {v}");
    }
}
