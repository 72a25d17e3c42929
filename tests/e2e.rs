//! End to end on the local stack: the real state machine definition (aws-local-stepfunctions) calling the real
//! Lambda functions (debug builds behind `cargo lambda watch`) on DynamoDB Local.

use dynamo_saga::phase::begin;
use dynamo_saga::store::Meter;
use harness::stack::stack;
use harness::workload::{assert_mixed_committed, kind, mixed, seed_mixed};
use harness::{nv, sv, Env};
use serde_json::{json, Value};

fn assert_committed(ex: &harness::stack::Execution, actions: usize, batches: usize) {
    assert_eq!(ex.status, "SUCCEEDED", "{ex:?}");
    assert_eq!(ex.output["Step"], "Finished");
    assert_eq!(ex.output["State"], "COMMITTED");
    assert_eq!(ex.output["Actions"], actions);
    assert_eq!(ex.output["Batches"], batches);
}

#[tokio::test]
async fn commits_250_actions_through_the_state_machine() {
    let env = Env::on_stack("sm250").await;
    seed_mixed(&env, "t", 250).await;
    let ex = stack().await.execute(&mixed(&env, "t", 250)).await;
    assert_committed(&ex, 250, 3);
    assert_mixed_committed(&env, "t", 250).await;
    env.assert_clean().await;
    // Each phase call does every batch it can: Begin, Lock, Save, Apply, Commit, Complete, Release.
    assert_eq!(ex.task_calls, 7, "{ex:?}");
}

#[tokio::test]
async fn rolls_back_through_the_state_machine_when_a_condition_fails() {
    let env = Env::on_stack("smrb").await;
    let n = 250;
    seed_mixed(&env, "t", n).await;
    let body = mixed(&env, "t", n);
    // Break an update's condition in the middle batch.
    let sorted = begin::validate(&env.store, &Meter::default(), &body).await.unwrap().actions;
    let victim = sorted[100..].iter().find(|a| kind(a.index) == "Update").unwrap().index;
    env.put(&env.b, json!({"pk": sv("t-acct"), "sk": nv(victim as i64), "v": nv(1), "cnt": nv(0)})).await;
    let before = env.snapshot().await;

    let ex = stack().await.execute(&body).await;
    assert_eq!(ex.status, "FAILED", "{ex:?}");
    assert_eq!(ex.error.as_deref(), Some("TransactionCanceled"));
    let c = ex.cancellation().expect("the cause carries the cancellation");
    let reasons = c["CancellationReasons"].as_array().unwrap();
    assert_eq!(reasons.len(), n);
    for (i, r) in reasons.iter().enumerate() {
        let want = if i == victim { "ConditionalCheckFailed" } else { "None" };
        assert_eq!(r["Code"], want, "reason {i}: {r}");
    }
    assert_eq!(reasons[victim]["Item"]["v"], nv(1), "ALL_OLD returns the item as it was");
    assert_eq!(env.snapshot().await, before, "every item as before");
    env.assert_clean().await;
}

#[tokio::test]
async fn contending_executions_both_finish_correctly() {
    let env = Env::on_stack("smcontend").await;
    let pks: Vec<String> = (0..200).map(|i| format!("c{i:03}")).collect();
    for pk in &pks {
        env.put(&env.a, json!({"pk": sv(pk), "n": nv(0)})).await;
    }
    let body = |range: std::ops::Range<usize>, d: i64| {
        let items: Vec<Value> = pks[range]
            .iter()
            .map(|pk| json!({"Update": {"TableName": env.a, "Key": {"pk": sv(pk)}, "UpdateExpression": "ADD n :d",
                "ExpressionAttributeValues": {":d": nv(d)}}}))
            .collect();
        json!({ "TransactItems": items })
    };
    let st = stack().await;
    let (b1, b2) = (body(0..150, 1), body(50..200, 10));
    let (one, two) = tokio::join!(st.execute(&b1), st.execute(&b2));
    let mut want = vec![0i64; 200];
    let mut committed = 0;
    for (ex, range, d) in [(&one, 0..150, 1), (&two, 50..200, 10)] {
        match ex.status.as_str() {
            "SUCCEEDED" => {
                committed += 1;
                range.for_each(|i| want[i] += d);
            }
            _ => assert_eq!(ex.error.as_deref(), Some("TransactionCanceled"), "{ex:?}"),
        }
    }
    assert!(committed >= 1, "at least one commits: {one:?} {two:?}");
    for (pk, w) in pks.iter().zip(&want) {
        let it = env.get(&env.a, json!({"pk": sv(pk)})).await.unwrap();
        assert_eq!(it["n"], nv(*w), "{pk}");
    }
    env.assert_clean().await;
}

#[tokio::test]
async fn a_phase_that_dies_mid_batch_is_retried_and_commits_once() {
    let env = Env::on_stack("smfault").await;
    seed_mixed(&env, "t", 250).await;
    let st = stack().await;
    // The Apply call dies right after the second batch's TransactWriteItems (its 3rd write, after the first batch's
    // and the header's), before recording it; the retried call must not apply that batch again.
    st.inject_fault("Apply", 3);
    let ex = st.execute(&mixed(&env, "t", 250)).await;
    assert!(st.fault_taken(), "the fault was injected");
    assert_committed(&ex, 250, 3);
    assert!(ex.task_calls > 7, "the failed call was retried: {ex:?}");
    // ADD counters applied exactly once, every item as committed.
    assert_mixed_committed(&env, "t", 250).await;
    env.assert_clean().await;
}

#[tokio::test]
async fn a_bad_request_fails_the_execution_with_validation_error_and_writes_nothing() {
    let env = Env::on_stack("smbad").await;
    env.put(&env.a, json!({"pk": sv("k"), "n": nv(1)})).await;
    let before = env.snapshot().await;
    let body = json!({"TransactItems": [
        {"Update": {"TableName": env.a, "Key": {"pk": sv("k")}, "UpdateExpression": "SET n = :v"}}
    ]});
    let ex = stack().await.execute(&body).await;
    assert_eq!(ex.status, "FAILED");
    assert_eq!(ex.error.as_deref(), Some("ValidationError"), "{ex:?}");
    assert!(ex.cause.as_deref().unwrap_or("").contains(":v"), "the message names the problem: {ex:?}");
    assert_eq!(env.snapshot().await, before);
}

/// 10,000 actions through the state machine: 102 batches, a few Lambda calls a phase, far inside the 25,000
/// history events a Standard execution allows.
#[tokio::test]
async fn commits_10000_actions_through_the_state_machine() {
    let env = Env::on_stack("sm10k").await;
    let n = 10_000;
    let keys: Vec<String> = (0..n).map(|i| format!("k{i:05}")).collect();
    for chunk in keys.chunks(25) {
        let reqs = chunk
            .iter()
            .map(|k| {
                let item = dynamo_saga::value::item_from_json(&json!({"pk": sv(k), "n": nv(0)})).unwrap();
                aws_sdk_dynamodb::types::WriteRequest::builder()
                    .put_request(aws_sdk_dynamodb::types::PutRequest::builder().set_item(Some(item)).build().unwrap())
                    .build()
            })
            .collect();
        env.client.batch_write_item().request_items(&env.a, reqs).send().await.unwrap();
    }
    let items: Vec<Value> = keys
        .iter()
        .map(|k| json!({"Update": {"TableName": env.a, "Key": {"pk": sv(k)}, "UpdateExpression": "ADD n :one",
            "ConditionExpression": "attribute_exists(pk)", "ExpressionAttributeValues": {":one": nv(1)}}}))
        .collect();
    let ex = stack().await.execute(&json!({ "TransactItems": items })).await;
    assert_committed(&ex, n, n.div_ceil(99));
    // Begin, Commit and Release once; Lock, Save, Apply and Complete each ceil(102 / 50) = 3 times, or more when a
    // call's time budget ends first.
    assert!(ex.task_calls >= 15 && ex.task_calls <= 40, "{ex:?}");
    assert!(ex.history_events < 1_000, "{ex:?}");
    let all = env.scan(&env.a).await;
    assert_eq!(all.len(), n);
    assert!(all.values().all(|v| v["n"] == nv(1)), "every ADD applied exactly once");
    env.assert_clean().await;
    println!("10,000 actions: {} Lambda calls, {} transitions, about {} history events, {} ms", ex.task_calls, ex.transitions, ex.history_events, ex.duration_ms);
}
