//! The library in the SDK's own terms: a transaction built from `aws_sdk_dynamodb`'s `TransactWriteItem` values runs
//! as the same request in DynamoDB JSON does, and its cancellation reads as the SDK's `TransactionCanceledException`,
//! reason for reason what native `TransactWriteItems` gives.

use std::collections::HashMap;

use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{
    AttributeValue, CancellationReason, ConditionCheck, Delete, Put, ReturnValuesOnConditionCheckFailure,
    TransactWriteItem, Update,
};
use dynamo_saga::{Coordinator, TxError, TxState};
use harness::{nv, sv, Env};
use serde_json::json;

fn key(pk: &str) -> HashMap<String, AttributeValue> {
    HashMap::from([("pk".to_string(), AttributeValue::S(pk.into()))])
}

fn update(env: &Env, pk: &str, by: i64) -> TransactWriteItem {
    let u = Update::builder()
        .table_name(&env.a)
        .set_key(Some(key(pk)))
        .update_expression("ADD n :by")
        .condition_expression("attribute_exists(pk) AND n < :ten")
        .expression_attribute_values(":by", AttributeValue::N(by.to_string()))
        .expression_attribute_values(":ten", AttributeValue::N("10".into()))
        .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
        .build()
        .unwrap();
    TransactWriteItem::builder().update(u).build()
}

fn put(env: &Env, pk: &str) -> TransactWriteItem {
    let p = Put::builder()
        .table_name(&env.a)
        .item("pk", AttributeValue::S(pk.into()))
        .item("tags", AttributeValue::Ss(vec!["new".into(), "sdk".into()]))
        .item(
            "doc",
            AttributeValue::M(HashMap::from([("l".to_string(), AttributeValue::L(vec![AttributeValue::Bool(true)]))])),
        )
        .condition_expression("attribute_not_exists(pk)")
        .build()
        .unwrap();
    TransactWriteItem::builder().put(p).build()
}

fn delete(env: &Env, pk: &str) -> TransactWriteItem {
    let d = Delete::builder().table_name(&env.a).set_key(Some(key(pk))).build().unwrap();
    TransactWriteItem::builder().delete(d).build()
}

fn check(env: &Env, pk: &str) -> TransactWriteItem {
    let c = ConditionCheck::builder()
        .table_name(&env.a)
        .set_key(Some(key(pk)))
        .condition_expression("attribute_exists(pk)")
        .build()
        .unwrap();
    TransactWriteItem::builder().condition_check(c).build()
}

async fn seed(env: &Env, prefix: &str, n: usize, value: i64) {
    for i in 0..n {
        env.put(&env.a, json!({"pk": sv(&format!("{prefix}{i:03}")), "n": nv(value)})).await;
    }
}

/// A reason's code and old item.
type Reason = (Option<String>, Option<HashMap<String, AttributeValue>>);

/// The SDK's reasons, as codes and old items, for comparing two cancellations.
fn codes(reasons: &[CancellationReason]) -> Vec<Reason> {
    reasons.iter().map(|r| (r.code().map(str::to_owned), r.item().cloned())).collect()
}

#[tokio::test]
async fn a_transaction_of_150_actions_built_with_the_sdks_types_commits() {
    let env = Env::new("sdk-commit").await;
    seed(&env, "u", 120, 0).await;
    seed(&env, "d", 10, 0).await;
    seed(&env, "c", 10, 0).await;
    let saga = Coordinator::new(env.store.clone());
    let mut tx = saga.transact_write_items().client_request_token("sdk-150").lock_wait_seconds(Some(30));
    for i in 0..120 {
        tx = tx.transact_items(update(&env, &format!("u{i:03}"), 3));
    }
    for i in 0..10 {
        tx = tx.transact_items(put(&env, &format!("p{i:03}"))).transact_items(delete(&env, &format!("d{i:03}")));
        tx = tx.transact_items(check(&env, &format!("c{i:03}")));
    }
    let request = tx.to_request().unwrap();
    assert_eq!(request["TransactItems"].as_array().unwrap().len(), 150);
    assert_eq!(request["Options"], json!({"LockWaitSeconds": 30}));
    let committed = tx.send().await.expect("commits");
    assert_eq!((committed.state, committed.actions), (TxState::Committed, 150));
    for i in 0..120 {
        assert_eq!(env.get(&env.a, json!({"pk": sv(&format!("u{i:03}"))})).await.unwrap()["n"], nv(3));
    }
    for i in 0..10 {
        let p = env.get(&env.a, json!({"pk": sv(&format!("p{i:03}"))})).await.expect("put");
        assert_eq!(p["tags"], json!({"SS": ["new", "sdk"]}));
        assert_eq!(p["doc"], json!({"M": {"l": {"L": [{"BOOL": true}]}}}));
        assert!(env.get(&env.a, json!({"pk": sv(&format!("d{i:03}"))})).await.is_none(), "deleted");
    }
    env.assert_clean().await;
}

#[tokio::test]
async fn a_cancellation_reads_as_the_sdks_exception_reason_for_reason_as_native_gives_it() {
    let env = Env::new("sdk-cancel").await;
    seed(&env, "k", 5, 0).await;
    env.put(&env.a, json!({"pk": sv("k003"), "n": nv(12), "note": sv("full")})).await;
    let items: Vec<TransactWriteItem> = (0..5).map(|i| update(&env, &format!("k{i:03}"), 1)).collect();
    let before = env.snapshot().await;

    let native = env.client.transact_write_items().set_transact_items(Some(items.clone())).send().await;
    let Err(e) = native else { panic!("native committed") };
    let Some(TransactWriteItemsError::TransactionCanceledException(native)) = e.as_service_error() else {
        panic!("native: {e:?}")
    };
    let saga = Coordinator::new(env.store.clone());
    let ours = saga.transact_write_items().set_transact_items(Some(items)).send().await;
    let Err(TxError::Canceled(c)) = ours else { panic!("not cancelled: {ours:?}") };
    let sdk = c.to_sdk();
    assert_eq!(codes(sdk.cancellation_reasons()), codes(native.cancellation_reasons()));
    assert_eq!(sdk.cancellation_reasons()[3].code(), Some("ConditionalCheckFailed"));
    assert_eq!(sdk.cancellation_reasons()[3].item().unwrap()["note"], AttributeValue::S("full".into()));
    assert_eq!(sdk.message(), Some(c.message.as_str()));
    assert_eq!(env.snapshot().await, before, "nothing written");

    // Beyond native's 100 actions, the same reasons at the same places.
    seed(&env, "m", 150, 0).await;
    env.put(&env.a, json!({"pk": sv("m120"), "n": nv(11)})).await;
    let items: Vec<TransactWriteItem> = (0..150).map(|i| update(&env, &format!("m{i:03}"), 1)).collect();
    let before = env.snapshot().await;
    let ours = saga.transact_write_items().set_transact_items(Some(items)).send().await;
    let Err(TxError::Canceled(c)) = ours else { panic!("not cancelled: {ours:?}") };
    let sdk = c.to_sdk();
    let failed: Vec<(usize, Option<&str>)> = sdk
        .cancellation_reasons()
        .iter()
        .enumerate()
        .filter(|(_, r)| r.code() != Some("None"))
        .map(|(i, r)| (i, r.code()))
        .collect();
    assert_eq!((sdk.cancellation_reasons().len(), failed), (150, vec![(120, Some("ConditionalCheckFailed"))]));
    assert_eq!(env.snapshot().await, before, "nothing written");
    env.assert_clean().await;
}

#[tokio::test]
async fn an_item_that_sets_no_action_or_two_is_refused_naming_it_and_nothing_is_written() {
    let env = Env::new("sdk-bad").await;
    seed(&env, "b", 3, 0).await;
    let before = env.snapshot().await;
    let saga = Coordinator::new(env.store.clone());
    let empty = TransactWriteItem::builder().build();
    let r = saga
        .transact_write_items()
        .transact_items(update(&env, "b000", 1))
        .transact_items(update(&env, "b001", 1))
        .transact_items(empty)
        .send()
        .await;
    let Err(TxError::Validation(v)) = r else { panic!("not refused: {r:?}") };
    assert_eq!(v.action, Some(2), "{v:?}");
    let two = TransactWriteItem::builder()
        .delete(Delete::builder().table_name(&env.a).set_key(Some(key("b000"))).build().unwrap())
        .put(Put::builder().table_name(&env.a).item("pk", AttributeValue::S("b000".into())).build().unwrap())
        .build();
    let r = saga.transact_write_items().transact_items(two).send().await;
    let Err(TxError::Validation(v)) = r else { panic!("not refused: {r:?}") };
    assert_eq!(v.action, Some(0), "{v:?}");
    assert!(v.message.contains("Put and Delete"), "{v:?}");
    assert_eq!(env.snapshot().await, before, "nothing written");
}
