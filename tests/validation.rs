//! Every bad input of the catalogue (`harness::bad`) gets a `ValidationError` naming the action and the problem, and writes nothing.

use dynamo_saga::Coordinator;
use harness::bad::{catalogue, upd};
use harness::{nv, sv, Env};
use serde_json::{json, Value};

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
    let records: Vec<_> =
        env.tx_records().await.into_iter().filter(|r| !r["id"].as_s().unwrap().starts_with("token#")).collect();
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
    let cases = catalogue(&env.a, &env.b, &env.tx_table, 500);
    let n = cases.len();
    for (body, action, needle) in cases {
        rejected(&env, body, action, &needle).await;
    }
    assert!(n >= 30);
    harness::report(format!("bad input through the library: {n} requests rejected with ValidationError, 0 writes"));
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

/// `TransactWriteItems`' reporting options, as `aws dynamodb transact-write-items --generate-cli-skeleton` writes
/// them, are taken with any of their values, in one call and through the protocol; the transaction commits.
#[tokio::test]
async fn transact_write_items_reporting_options_are_accepted() {
    let env = Env::new("options").await;
    let co = Coordinator::new(env.store.clone());
    for (n, rcc, icm) in [(2, "TOTAL", "SIZE"), (150, "INDEXES", "NONE"), (3, "NONE", "NONE")] {
        let items: Vec<Value> = (0..n).map(|i| upd(&env.a, &format!("o{n}-{i}"))).collect();
        let body = json!({"TransactItems": items, "ReturnConsumedCapacity": rcc, "ReturnItemCollectionMetrics": icm});
        let done = co.run(&body).await.unwrap();
        assert_eq!(done.actions, n, "{done:?}");
        let got = env.get(&env.a, json!({"pk": sv(&format!("o{n}-{}", n - 1))})).await;
        assert!(got.is_some(), "{n} actions committed");
    }
}

/// A tombstone must leave room for a later transaction to lock it (the tombstone kept whole beside its key), so one
/// that would fit in an item by itself but not in that lock item is refused up front.
#[tokio::test]
async fn a_tombstone_too_big_to_lock_later_is_rejected() {
    let env = Env::new("badtomb").await;
    let tomb = |len: usize| {
        json!({"TransactItems": [{"Delete": {"TableName": env.a, "Key": {"pk": sv("big")},
        "Tombstone": {"Attributes": {"blob": sv(&"x".repeat(len))}, "TimeToLiveAttribute": "exp", "TimeToLiveSeconds": 60}}}]})
    };
    rejected(&env, tomb(409_446), Some(0), "a transaction that later locks it needs").await;
    Coordinator::new(env.store.clone()).run(&tomb(300_000)).await.expect("a smaller tombstone is written");
    let overwrite = json!({"TransactItems": [{"Put": {"TableName": env.a, "Item": {"pk": sv("big"), "v": nv(1)}, "ConditionExpression": "attribute_not_exists(pk)"}}]});
    Coordinator::new(env.store.clone()).run(&overwrite).await.expect("and a later transaction can lock and replace it");
    assert_eq!(env.get(&env.a, json!({"pk": sv("big")})).await.unwrap(), json!({"pk": sv("big"), "v": nv(1)}));
}
