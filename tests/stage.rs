//! Staging on DynamoDB Local: a transaction created, appended in chunks and sealed behaves as one request.

use dynamo_saga::records::read_header;
use dynamo_saga::staging;
use dynamo_saga::store::Meter;
use dynamo_saga::{Coordinator, TxError};
use harness::workload::{assert_mixed_committed, mixed, seed_mixed};
use harness::{nv, sv, Env};
use serde_json::{json, Value};

fn chunks(body: &Value, size: usize) -> Vec<Value> {
    body["TransactItems"].as_array().unwrap().chunks(size).map(|c| Value::Array(c.to_vec())).collect()
}

#[tokio::test]
async fn a_transaction_staged_in_chunks_commits_as_one() {
    let env = Env::new("stage").await;
    let n = 1000;
    seed_mixed(&env, "t", n).await;
    let body = mixed(&env, "t", n);
    let parts = chunks(&body, 400);
    let id =
        staging::create(&env.store, &json!({"ClientRequestToken": "staged-1", "Options": {"LockWaitSeconds": 30}}))
            .await
            .unwrap();
    for (i, c) in parts.iter().enumerate().rev() {
        let done = staging::append(&env.store, &id, i, c).await.unwrap();
        assert_eq!((done.actions, done.created), (c.as_array().unwrap().len(), true));
    }
    // A retried append is harmless; the same chunk number with other actions is not.
    assert!(!staging::append(&env.store, &id, 1, &parts[1]).await.unwrap().created);
    let other = staging::append(&env.store, &id, 1, &parts[2]).await.unwrap_err();
    assert!(other.to_string().contains("already appended"), "{other}");

    let before = env.snapshot().await;
    let begun = staging::seal(&env.store, &id, Some(3)).await.unwrap();
    assert_eq!(
        (begun.transaction_id.as_str(), begun.actions, begun.batches, begun.created),
        (id.as_str(), n, 11, true)
    );
    assert_eq!(env.snapshot().await, before, "sealing writes nothing to the tables");
    let again = staging::seal(&env.store, &id, Some(3)).await.unwrap();
    assert_eq!((again.transaction_id.as_str(), again.created), (id.as_str(), false));
    let late = staging::append(&env.store, &id, 3, &parts[0]).await;
    assert!(late.is_ok(), "appending after the seal only stores a chunk the transaction never reads: {late:?}");

    Coordinator::new(env.store.clone()).drive(&id).await.expect("commits");
    assert_mixed_committed(&env, "t", n).await;
    env.assert_clean().await;
    let h = read_header(&env.store, &Meter::default(), &id).await.unwrap();
    assert_eq!(h.lock_wait_seconds, Some(30), "the envelope's Options apply");
    assert_eq!(h.client_request_token.as_deref(), Some("staged-1"));
}

#[tokio::test]
async fn bad_staging_is_rejected_and_writes_nothing() {
    let env = Env::new("stagebad").await;
    env.put(&env.a, json!({"pk": sv("k"), "n": nv(1)})).await;
    let before = env.snapshot().await;
    let err = |r: Result<String, TxError>| r.unwrap_err().to_string();
    assert!(err(staging::create(&env.store, &json!({"TransactItems": []})).await).contains("appended in chunks"));
    assert!(err(staging::create(&env.store, &json!({"Extra": 1})).await).contains("unknown field"));
    assert!(err(staging::create(&env.store, &json!({"Options": {"LockWaitSeconds": "soon"}})).await)
        .contains("LockWaitSeconds"));
    let missing = staging::append(&env.store, "01JDQ5A7K2M9P4R6T8V1W3X5Z7", 0, &json!([{}])).await.unwrap_err();
    assert_eq!(missing.name(), "TransactionNotFound");

    let id = staging::create(&env.store, &json!({})).await.unwrap();
    let update = |pk: &str| json!({"Update": {"TableName": env.a, "Key": {"pk": sv(pk)}, "UpdateExpression": "ADD n :one", "ExpressionAttributeValues": {":one": nv(1)}}});
    assert!(staging::append(&env.store, &id, 0, &json!([])).await.is_err(), "an empty chunk");
    assert!(staging::append(&env.store, &id, 0, &json!({"Put": {}})).await.is_err(), "a chunk that is not an array");
    let nothing = staging::seal(&env.store, &id, None).await.unwrap_err();
    assert!(nothing.to_string().contains("no actions"), "{nothing}");
    staging::append(&env.store, &id, 0, &json!([update("k")])).await.unwrap();
    staging::append(&env.store, &id, 2, &json!([update("x")])).await.unwrap();
    let gap = staging::seal(&env.store, &id, None).await.unwrap_err();
    assert!(gap.to_string().contains("chunk 1") && gap.to_string().contains("missing"), "{gap}");
    // A bad action in a later chunk is named by its place in the whole request.
    staging::append(&env.store, &id, 1, &json!([update("y"), {"Update": {"TableName": env.a, "Key": {"pk": sv("z")}, "UpdateExpression": "SET n = :v"}}])).await.unwrap();
    let bad = staging::seal(&env.store, &id, Some(3)).await.unwrap_err();
    assert_eq!(bad.name(), "ValidationError");
    assert!(bad.to_string().starts_with("TransactItems[2]"), "{bad}");
    assert!(
        matches!(read_header(&env.store, &Meter::default(), &id).await, Err(TxError::NotFound(_))),
        "nothing begun"
    );
    assert_eq!(env.snapshot().await, before);
}

/// A staged request larger than the sealing function's memory can hold (`Config::max_request_bytes`, in Lambda a
/// fortieth of its memory) is refused with `ValidationError` before it is read, and nothing is begun; one within the
/// limit commits.
#[tokio::test]
async fn a_staged_request_over_what_the_function_can_hold_is_refused() {
    let env = Env::with("stagemax", |c| dynamo_saga::Config { max_request_bytes: Some(20_000), ..c }).await;
    seed_mixed(&env, "t", 200).await;
    let body = mixed(&env, "t", 200);
    let bytes = body["TransactItems"].to_string().len();
    assert!(bytes > 20_000, "{bytes}");
    let before = env.snapshot().await;
    let id = staging::create(&env.store, &json!({})).await.unwrap();
    for (i, c) in chunks(&body, 80).iter().enumerate() {
        staging::append(&env.store, &id, i, c).await.unwrap();
    }
    let e = staging::seal(&env.store, &id, Some(3)).await.unwrap_err();
    assert_eq!(e.name(), "ValidationError");
    let msg = e.to_string();
    assert!(msg.contains("at most 20000") && msg.contains("StageMemorySize") && msg.contains(&id), "{msg}");
    assert!(
        matches!(read_header(&env.store, &Meter::default(), &id).await, Err(TxError::NotFound(_))),
        "nothing begun"
    );
    assert_eq!(env.snapshot().await, before);

    let small = json!({"TransactItems": body["TransactItems"].as_array().unwrap()[..40].to_vec()});
    let id = staging::create(&env.store, &json!({})).await.unwrap();
    staging::append(&env.store, &id, 0, &small["TransactItems"]).await.unwrap();
    staging::seal(&env.store, &id, Some(1)).await.expect("a request within the limit is sealed");
    Coordinator::new(env.store.clone()).drive(&id).await.expect("and commits");
    env.assert_clean().await;
}
