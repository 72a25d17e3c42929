//! Same outcome as native TransactWriteItems: for generated transactions of at most 100 actions on generated table
//! states (fixed seed), the final table state and the failing actions equal what DynamoDB's own call gives on a copy
//! of the same state, both as the library runs them (fewer than 100 actions in one call) and through the protocol.

use aws_sdk_dynamodb::types::TransactWriteItem;
use dynamo_saga::value::item_to_json;
use dynamo_saga::{Coordinator, TxError};
use harness::{native_item, nv, sv, Env};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

const CASES: usize = 300;

fn pick<'a>(rng: &mut StdRng, xs: &'a [&'a str]) -> &'a str {
    xs[rng.gen_range(0..xs.len())]
}

/// A table state: the items of one case, in table `a`.
fn gen_state(rng: &mut StdRng, case: usize, keys: usize) -> Vec<Value> {
    let mut items = Vec::new();
    for k in 0..keys {
        if rng.gen_bool(0.6) {
            items.push(json!({"pk": sv(&format!("c{case}-k{k}")), "v": nv(rng.gen_range(0..6)), "s": sv(pick(rng, &["a", "b"]))}));
        }
    }
    items
}

/// A transaction of 1 to 100 actions over distinct keys of the case (table name filled in later).
fn gen_tx(rng: &mut StdRng, case: usize, keys: usize) -> Vec<Value> {
    let m = if rng.gen_bool(0.15) { rng.gen_range(60..=100) } else { rng.gen_range(1..=12) };
    let mut ks: Vec<usize> = (0..keys).collect();
    for i in (1..ks.len()).rev() {
        ks.swap(i, rng.gen_range(0..=i));
    }
    // Conditions fail rarely enough that about half the transactions commit.
    let strict = 1.0 / (m as f64).sqrt();
    ks.into_iter()
        .take(m)
        .map(|k| {
            let key = json!({"pk": sv(&format!("c{case}-k{k}"))});
            let x = nv(rng.gen_range(0..6));
            let old = rng.gen_bool(0.5);
            let mut a = match rng.gen_range(0..4) {
                0 => {
                    let item = json!({"pk": key["pk"], "v": nv(rng.gen_range(0..9)), "s": sv("p")});
                    match rng.gen_range(0..3) {
                        0 => json!({"Put": {"Item": item}}),
                        1 if rng.gen_bool(strict) => json!({"Put": {"Item": item, "ConditionExpression": "attribute_not_exists(pk)"}}),
                        _ => json!({"Put": {"Item": item, "ConditionExpression": "attribute_not_exists(pk) OR v < :x", "ExpressionAttributeValues": {":x": nv(9)}}}),
                    }
                }
                1 => match rng.gen_range(0..3) {
                    0 => json!({"Update": {"Key": key, "UpdateExpression": "ADD v :one SET s = :s", "ExpressionAttributeValues": {":one": nv(1), ":s": sv("u")}}}),
                    1 => json!({"Update": {"Key": key, "UpdateExpression": "SET v = :x REMOVE s", "ConditionExpression": if rng.gen_bool(strict) { "attribute_exists(pk)" } else { "attribute_not_exists(zz)" }, "ExpressionAttributeValues": {":x": x}}}),
                    _ => json!({"Update": {"Key": key, "UpdateExpression": "SET #s = :s", "ConditionExpression": if rng.gen_bool(strict) { "v <> :x" } else { "attribute_not_exists(v) OR v <> :nine" },
                        "ExpressionAttributeNames": {"#s": "s"}, "ExpressionAttributeValues": {":s": sv("w"), ":x": x, ":nine": nv(9)}}}),
                },
                2 => match rng.gen_range(0..2) {
                    0 => json!({"Delete": {"Key": key}}),
                    _ => json!({"Delete": {"Key": key, "ConditionExpression": if rng.gen_bool(strict) { "v >= :x" } else { "attribute_not_exists(v) OR v >= :zero" }, "ExpressionAttributeValues": {":x": x, ":zero": nv(0)}}}),
                },
                _ => json!({"ConditionCheck": {"Key": key, "ConditionExpression": if rng.gen_bool(strict) { "attribute_exists(pk)" } else { "attribute_not_exists(pk) OR s <> :q" }, "ExpressionAttributeValues": {":q": sv("q")}}}),
            };
            let (_, body) = a.as_object_mut().unwrap().iter_mut().next().unwrap();
            if old && body.get("ConditionExpression").is_some() {
                body["ReturnValuesOnConditionCheckFailure"] = json!("ALL_OLD");
            }
            if body.get("ExpressionAttributeValues").is_some() {
                // Only keep the values the expressions use (DynamoDB rejects unused ones).
                let text = format!("{} {}", body["UpdateExpression"].as_str().unwrap_or(""), body["ConditionExpression"].as_str().unwrap_or(""));
                body["ExpressionAttributeValues"].as_object_mut().unwrap().retain(|k, _| text.contains(k.as_str()));
                if body["ExpressionAttributeValues"].as_object().unwrap().is_empty() {
                    body.as_object_mut().unwrap().remove("ExpressionAttributeValues");
                }
            }
            a
        })
        .collect()
}

fn with_table(items: &[Value], table: &str) -> Value {
    let items: Vec<Value> = items
        .iter()
        .map(|a| {
            let mut a = a.clone();
            for (_, body) in a.as_object_mut().unwrap().iter_mut() {
                body["TableName"] = json!(table);
            }
            a
        })
        .collect();
    json!({ "TransactItems": items })
}

/// Failing actions as (index, code, item) — `None` when the transaction went through.
type Failures = Option<Vec<(usize, String, Option<Value>)>>;

async fn run_native(env: &Env, body: &Value) -> Failures {
    let items: Vec<TransactWriteItem> = body["TransactItems"].as_array().unwrap().iter().map(native_item).collect();
    match env.client.transact_write_items().set_transact_items(Some(items)).send().await {
        Ok(_) => None,
        Err(e) => {
            let e = e.into_service_error();
            let aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError::TransactionCanceledException(c) = e else { panic!("native call failed: {e:?}") };
            Some(
                c.cancellation_reasons()
                    .iter()
                    .enumerate()
                    .filter(|(_, r)| r.code() != Some("None"))
                    .map(|(i, r)| (i, r.code().unwrap().to_string(), r.item.as_ref().map(item_to_json)))
                    .collect(),
            )
        }
    }
}

async fn run_saga(env: &Env, body: &Value) -> Failures {
    match Coordinator::new(env.store.clone()).run(body).await {
        Ok(_) => None,
        Err(TxError::Canceled(c)) => {
            Some(harness::assert_named(&c).failed().map(|(i, r)| (i, r.code.clone(), r.item.clone())).collect())
        }
        Err(e) => panic!("dynamo-saga failed: {e}"),
    }
}

#[tokio::test]
async fn same_outcome_as_native_transact_write_items() {
    let native = Env::new("native").await;
    // Requests of fewer than 100 actions go in one TransactWriteItems call; the protocol must agree on them too.
    let saga = Env::new("saga").await;
    let protocol = Env::with("saga-p", |c| dynamo_saga::Config { direct: false, ..c }).await;
    let mut rng = StdRng::seed_from_u64(0x5A6A);
    let (mut committed, mut cancelled, mut actions) = (0, 0, 0);
    for case in 0..CASES {
        let keys = 110;
        let state = gen_state(&mut rng, case, keys);
        let tx = gen_tx(&mut rng, case, keys);
        actions += tx.len();
        futures::future::join_all(state.iter().flat_map(|it| {
            [native.put(&native.a, it.clone()), saga.put(&saga.a, it.clone()), protocol.put(&protocol.a, it.clone())]
        }))
        .await;
        let n = run_native(&native, &with_table(&tx, &native.a)).await;
        let (direct_body, protocol_body) = (with_table(&tx, &saga.a), with_table(&tx, &protocol.a));
        let (s, p) = futures::join!(run_saga(&saga, &direct_body), run_saga(&protocol, &protocol_body));
        assert_eq!(s, n, "case {case}: failing actions differ ({} actions)", tx.len());
        assert_eq!(p, n, "case {case}: failing actions differ through the protocol ({} actions)", tx.len());
        if n.is_some() {
            cancelled += 1
        } else {
            committed += 1
        }
    }
    let (a, b, c) = (native.scan(&native.a).await, saga.scan(&saga.a).await, protocol.scan(&protocol.a).await);
    assert_eq!(a.len(), b.len());
    assert_eq!(a, b, "final table states differ");
    assert_eq!(a, c, "final table states differ through the protocol");
    saga.assert_clean().await;
    protocol.assert_clean().await;
    // A header of no batches is a transaction carried out in one call.
    let direct = saga
        .tx_records()
        .await
        .iter()
        .filter(|r| r.get("batchCount").and_then(|v| v.as_n().ok()).is_some_and(|n| n == "0"))
        .count();
    if harness::strong_multi_region().is_some() {
        // No TransactWriteItems on MRSC tables: every case goes through the protocol.
        assert_eq!(direct, 0, "a case went in one TransactWriteItems call in MRSC mode");
    } else {
        assert!(direct > CASES / 2, "most cases have fewer than 100 actions and go in one call: {direct}");
    }
    harness::report(format!(
        "parity with native TransactWriteItems: {CASES} cases, {actions} actions: {committed} committed, {cancelled} cancelled, all equal to native, \
         {direct} of them in one call and all {CASES} through the protocol too"
    ));
    assert!(
        committed > CASES / 5 && cancelled > CASES / 5,
        "the generator must exercise both outcomes: {committed}/{cancelled}"
    );
}
