//! Requests one `TransactWriteItems` call can carry (fewer than 100 actions, nothing beyond native): carried out in
//! that call with the header, at native price; cancelled as native cancels them, and recorded; an item another
//! transaction holds (a lock, a tombstone) is contention, not the caller's failure; a driver that runs twice carries
//! the request out once.

use dynamo_saga::lambda::{handle, Budget, Phase};
use dynamo_saga::phase::begin;
use dynamo_saga::records::read_header;
use dynamo_saga::status::status;
use dynamo_saga::store::Meter;
use dynamo_saga::{Coordinator, TxError, TxState};
use harness::workload::{assert_mixed_committed, mixed, seed_mixed, tombstone};
use harness::{nv, sv, Env};
use serde_json::{json, Value};

/// Records of transaction `id` in the transactions table.
async fn records_of(env: &Env, id: &str) -> usize {
    env.tx_records().await.iter().filter(|r| r.get("id").and_then(|v| v.as_s().ok()).is_some_and(|v| v == id)).count()
}

/// Ten updates of 940-byte items, as the benchmark's 10-action transaction.
fn ten_updates(env: &Env, tag: &str) -> Value {
    let pad = "x".repeat(900);
    let items: Vec<Value> = (0..10)
        .map(|i| {
            json!({"Update": {"TableName": env.a, "Key": {"pk": sv(&format!("{tag}-{i}"))},
                "UpdateExpression": "SET body = :pad ADD n :one", "ConditionExpression": "attribute_exists(pk)",
                "ExpressionAttributeValues": {":pad": sv(&pad), ":one": nv(1)}}})
        })
        .collect();
    json!({ "TransactItems": items })
}

async fn seed_ten(env: &Env, tag: &str) {
    let pad = "y".repeat(900);
    for i in 0..10 {
        env.put(&env.a, json!({"pk": sv(&format!("{tag}-{i}")), "body": sv(&pad), "n": nv(0)})).await;
    }
}

#[tokio::test]
async fn a_small_request_is_one_call_with_its_header_at_native_price() {
    let env = Env::new("direct-one").await;
    seed_ten(&env, "u").await;
    let store = env.store.with_billing();
    let c = Coordinator::new(store.clone()).run(&ten_updates(&env, "u")).await.expect("commits");
    assert_eq!((c.state, c.actions, c.batches), (TxState::Committed, 10, 0));
    assert_eq!(c.usage.writes, 1, "one write request: {:?}", c.usage);
    // Billed by DynamoDB's rules: 10 items of under 1 KB and the header, 2 units each in a transaction, which is what
    // native costs plus the header's 2; no read.
    let bill = store.bill().unwrap();
    assert_eq!(
        (bill.write_calls, bill.transact_calls, bill.write_units, bill.read_units),
        (1, 1, 22.0, 0.0),
        "{bill:?}"
    );
    assert!(bill.write_units / 10.0 <= 2.3);
    for i in 0..10 {
        assert_eq!(env.get(&env.a, json!({"pk": sv(&format!("u-{i}"))})).await.unwrap()["n"], nv(1));
    }
    assert_eq!(records_of(&env, &c.transaction_id).await, 1, "the header only: no plan, no pages, no images");
    let s = status(&env.store, &c.transaction_id).await.unwrap();
    assert!(s.direct && s.finished && s.state == TxState::Committed, "{s:?}");
    assert_eq!((s.batches, s.actions), (0, 10));
    assert_eq!(serde_json::to_value(&s).unwrap()["Next"]["Step"], "Finished");
    env.assert_clean().await;
}

#[tokio::test]
async fn a_failing_condition_cancels_as_native_does_and_the_token_finds_it() {
    let env = Env::new("direct-cancel").await;
    seed_mixed(&env, "m", 4).await;
    env.put(&env.b, json!({"pk": sv("m-acct"), "sk": nv(1), "v": nv(1), "cnt": nv(0)})).await;
    let before = env.snapshot().await;
    let mut body = mixed(&env, "m", 4);
    body["ClientRequestToken"] = json!("direct-cancel-1");
    let c = harness::canceled(Coordinator::new(env.store.clone()).run(&body).await);
    let codes: Vec<&str> = c.cancellation_reasons.iter().map(|r| r.code.as_str()).collect();
    assert_eq!(codes, ["None", "ConditionalCheckFailed", "None", "None"]);
    assert_eq!(c.cancellation_reasons[1].item.as_ref().unwrap()["v"], nv(1), "ALL_OLD gives the item as it was");
    assert_eq!(env.snapshot().await, before, "nothing changed");
    let h = read_header(&env.store, &Meter::default(), &c.transaction_id).await.unwrap();
    assert!(h.direct() && h.finished() && h.state == TxState::RolledBack, "{h:?}");
    assert_eq!(
        status(&env.store, &c.transaction_id).await.unwrap().cancellation.unwrap().cancellation_reasons[1].code,
        "ConditionalCheckFailed"
    );

    // The same token and body: the same transaction, the same answer, nothing run again.
    let again = harness::canceled(Coordinator::new(env.store.clone()).run(&body).await);
    assert_eq!(again.transaction_id, c.transaction_id);
    assert_eq!(again.cancellation_reasons, c.cancellation_reasons);
    // The same token with another body is refused, as DynamoDB refuses it.
    let mut other = mixed(&env, "m", 3);
    other["ClientRequestToken"] = json!("direct-cancel-1");
    let e = Coordinator::new(env.store.clone()).run(&other).await.unwrap_err();
    assert!(e.name() == "ValidationError" && e.to_string().contains("IdempotentParameterMismatch"), "{e}");
    env.assert_clean().await;
}

#[tokio::test]
async fn a_rejected_write_is_named_on_its_action() {
    let env = Env::new("direct-reject").await;
    env.put(&env.a, json!({"pk": sv("r-1"), "s": sv("text")})).await;
    let before = env.snapshot().await;
    let body = json!({"TransactItems": [
        {"Put": {"TableName": env.a, "Item": {"pk": sv("r-0"), "v": nv(1)}}},
        {"Update": {"TableName": env.a, "Key": {"pk": sv("r-1")}, "UpdateExpression": "ADD s :one", "ExpressionAttributeValues": {":one": nv(1)}}},
    ]});
    let c = harness::canceled(Coordinator::new(env.store.clone()).run(&body).await);
    let codes: Vec<&str> = c.cancellation_reasons.iter().map(|r| r.code.as_str()).collect();
    assert_eq!(codes, ["None", "ValidationError"]);
    assert_eq!(env.snapshot().await, before);
    env.assert_clean().await;
}

#[tokio::test]
async fn an_item_another_transaction_holds_is_waited_for_not_failed() {
    let env = Env::new("direct-held").await;
    env.put(&env.a, json!({"pk": sv("h-1"), "n": nv(0)})).await;
    // A transaction of the protocol holds h-1.
    let holder = begin::begin(&env.store, &json!({"TransactItems": [
        {"Update": {"TableName": env.a, "Key": {"pk": sv("h-1")}, "UpdateExpression": "ADD n :ten", "ExpressionAttributeValues": {":ten": nv(10)}}},
    ]}))
    .await
    .unwrap()
    .transaction_id;
    Coordinator::new(env.store.clone()).drive_locks(&holder).await.unwrap();
    // A small request over h-1 whose condition would fail on the locked item if the lock counted as the caller's
    // failure; it waits for the holder instead, then sees its write.
    let small = json!({"TransactItems": [
        {"Update": {"TableName": env.a, "Key": {"pk": sv("h-1")}, "UpdateExpression": "ADD n :one", "ConditionExpression": "n >= :ten",
            "ExpressionAttributeValues": {":one": nv(1), ":ten": nv(10)}}},
        {"Put": {"TableName": env.a, "Item": {"pk": sv("h-2"), "v": nv(2)}}},
    ]});
    let waiter = tokio::spawn({
        let store = env.store.clone();
        async move { Coordinator::new(store).run(&small).await }
    });
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert!(!waiter.is_finished(), "the small request waits for the holder");
    Coordinator::new(env.store.clone()).drive(&holder).await.expect("the holder commits");
    let c = waiter.await.unwrap().expect("the small request commits after the holder");
    assert!(c.batches >= 1, "met a lock: run by the protocol: {c:?}");
    assert!(!read_header(&env.store, &Meter::default(), &c.transaction_id).await.unwrap().direct());
    assert_eq!(env.get(&env.a, json!({"pk": sv("h-1")})).await.unwrap()["n"], nv(11));

    // A tombstone is an absent item to the protocol, not an item: an insert guarded by attribute_not_exists goes
    // through, where one native call over the tombstone would fail.
    env.put(&env.a, tombstone("h-3", 5, "01J0000000000000000000000A")).await;
    let insert = json!({"TransactItems": [
        {"Put": {"TableName": env.a, "Item": {"pk": sv("h-3"), "v": nv(3)}, "ConditionExpression": "attribute_not_exists(pk)"}},
    ]});
    let c = Coordinator::new(env.store.clone()).run(&insert).await.expect("the insert commits over the tombstone");
    assert!(c.batches >= 1, "met a tombstone: run by the protocol");
    assert_eq!(env.get(&env.a, json!({"pk": sv("h-3")})).await.unwrap(), json!({"pk": sv("h-3"), "v": nv(3)}));
    env.assert_clean().await;
}

/// Begin as the state machine calls it, for an execution.
fn begin_input(body: &Value, execution: &str) -> Value {
    json!({"Request": body, "ExecutionArn": format!("arn:aws:states:us-east-1:000000000000:execution:saga:{execution}"),
        "ExecutionStartTime": "2026-11-24T10:18:13.123Z"})
}

fn budget() -> Budget {
    Budget { until: std::time::Instant::now() + std::time::Duration::from_secs(30), max_steps: Budget::MAX_STEPS }
}

#[tokio::test]
async fn begin_crashed_at_any_write_and_retried_by_the_state_machine_carries_the_request_out_once() {
    let env = Env::new("direct-begin").await;
    let mut points = 0;
    for commit_path in [true, false] {
        // How many writes Begin makes, from a clean run.
        let tag = format!("count{commit_path}");
        let body = request(&env, &tag, commit_path).await;
        let counter = harness::write_counter(&env.store);
        let _ = handle(&counter, Phase::Begin, &begin_input(&body, &tag), budget()).await;
        let total = counter.writes_sent().unwrap();
        assert_eq!(total, if commit_path { 1 } else { 2 }, "the call, and on a cancellation its header");
        // A crash before each write and after the last: the state machine retries Begin with the same input.
        for k in 0..=total {
            points += 1;
            let tag = format!("k{k}{commit_path}");
            let body = request(&env, &tag, commit_path).await;
            let before = env.snapshot().await;
            let input = begin_input(&body, &tag);
            let crashing = env.store.crash_after(k);
            let first = handle(&crashing, Phase::Begin, &input, budget()).await;
            assert!(first.is_err() || k == total, "crash point {k}: {first:?}");
            let out = handle(&env.store, Phase::Begin, &input, budget()).await.expect("the retry answers");
            assert_eq!(out.step, "Finished", "{out:?}");
            if let Ok(first) = first {
                assert_eq!(first.transaction_id, out.transaction_id, "one transaction for one execution");
            }
            let again = handle(&env.store, Phase::Begin, &input, budget()).await.expect("a third run answers");
            assert_eq!(again.transaction_id, out.transaction_id);
            if commit_path {
                assert_eq!(out.state, TxState::Committed);
                assert_mixed_committed(&env, &tag, 2).await;
            } else {
                assert_eq!(out.state, TxState::RolledBack);
                assert_eq!(env.snapshot().await, before, "crash point {k}: nothing changed");
                let e = handle(&env.store, Phase::Release, &json!({"TransactionId": out.transaction_id}), budget())
                    .await
                    .unwrap_err();
                assert_eq!(e.name(), "TransactionCanceled", "Release fails the execution with the reasons: {e}");
            }
        }
    }
    env.assert_clean().await;
    harness::report(format!("Begin carrying a request out in one call, crashed before each write and after the last, retried: {points} crash points, 0 violations"));
}

/// Two mixed actions (an insert and an update with an `ADD` counter); on the rollback path the update's condition
/// fails.
async fn request(env: &Env, tag: &str, commit_path: bool) -> Value {
    seed_mixed(env, tag, 2).await;
    if !commit_path {
        env.put(&env.b, json!({"pk": sv(&format!("{tag}-acct")), "sk": nv(1), "v": nv(1), "cnt": nv(0)})).await;
    }
    mixed(env, tag, 2)
}

#[test]
fn an_execution_has_one_transaction_id_of_its_start_time() {
    let arn = "arn:aws:states:eu-west-1:123456789012:execution:saga-transaction:6f1c2b7e";
    let id = begin::execution_id(arn, "2026-11-24T10:18:13.123Z").unwrap();
    assert_eq!(id, begin::execution_id(arn, "2026-11-24T10:18:13.123Z").unwrap(), "the same execution, the same id");
    assert_ne!(
        id,
        begin::execution_id(&format!("{arn}0"), "2026-11-24T10:18:13.123Z").unwrap(),
        "another execution, another id"
    );
    let ulid_ms = |id: &str| {
        let alphabet = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";
        id[..10].chars().fold(0u64, |t, c| t * 32 + alphabet.find(c).unwrap() as u64)
    };
    assert_eq!(ulid_ms(&id), 1_795_515_493_123, "the ULID's time is the execution's start");
    assert_eq!(
        ulid_ms(&begin::execution_id(arn, "2026-11-24T11:18:13.123+01:00").unwrap()),
        1_795_515_493_123,
        "an offset"
    );
    assert_eq!(ulid_ms(&begin::execution_id(arn, "1970-01-01T00:00:01Z").unwrap()), 1000, "no fraction");
    assert_eq!(
        ulid_ms(&begin::execution_id(arn, "2000-02-29T00:00:00.5Z").unwrap()),
        951_782_400_500,
        "a leap day, one digit"
    );
    for bad in ["", "2026-11-24", "2026-13-01T00:00:00Z", "2026-11-24T10:18:13", "2026-11-24T10:18:13.Z", "yesterday"] {
        assert_eq!(begin::execution_id(arn, bad).unwrap_err().name(), "ValidationError", "{bad:?}");
    }
}

#[tokio::test]
async fn through_the_state_machine_a_small_request_takes_at_most_four_transitions() {
    use harness::stack::stack;
    let env = Env::on_stack("smdirect").await;
    let st = stack().await;
    seed_mixed(&env, "ok", 4).await;
    let ex = st.execute(&mixed(&env, "ok", 4)).await;
    assert_eq!(ex.status, "SUCCEEDED", "{ex:?}");
    assert_eq!(
        (ex.output["State"].as_str(), ex.output["Batches"].as_u64(), ex.output["Actions"].as_u64()),
        (Some("COMMITTED"), Some(0), Some(4))
    );
    assert_eq!(ex.transitions, 3, "Begin, Route, Committed: {ex:?}");
    assert_mixed_committed(&env, "ok", 4).await;

    let body = request(&env, "no", false).await;
    let before = env.snapshot().await;
    let ex = st.execute(&body).await;
    assert_eq!(ex.error.as_deref(), Some("TransactionCanceled"), "{ex:?}");
    assert_eq!(ex.transitions, 4, "Begin, Route, Release, Canceled: {ex:?}");
    let c = ex.cancellation().unwrap();
    assert_eq!(c["CancellationReasons"][1]["Code"], "ConditionalCheckFailed");
    assert_eq!(env.snapshot().await, before);
    env.assert_clean().await;
}

#[tokio::test]
async fn a_request_not_for_one_call_is_begun_as_before() {
    let env = Env::new("direct-not").await;
    // 100 actions leave no place for the header.
    seed_mixed(&env, "big", 100).await;
    let c = Coordinator::new(env.store.clone()).run(&mixed(&env, "big", 100)).await.unwrap();
    assert_eq!(c.batches, 2);
    // A Parent is beyond native.
    env.put(&env.a, json!({"pk": sv("parent")})).await;
    seed_mixed(&env, "par", 2).await;
    let mut body = mixed(&env, "par", 2);
    body["Parent"] = json!({"TableName": env.a, "Key": {"pk": sv("parent")}});
    let c = Coordinator::new(env.store.clone()).run(&body).await.unwrap();
    assert_eq!(c.batches, 1);
    // Turned off, nothing goes in one call.
    let off = Env::with("direct-off", |c| dynamo_saga::Config { direct: false, ..c }).await;
    seed_mixed(&off, "s", 2).await;
    let c = Coordinator::new(off.store.clone()).run(&mixed(&off, "s", 2)).await.unwrap();
    assert_eq!(c.batches, 1);
    assert!(matches!(
        Coordinator::new(off.store.clone()).run(&json!({"TransactItems": []})).await,
        Err(TxError::Validation(_))
    ));
    env.assert_clean().await;
}

/// A request one call can carry, through `start` (what the API and events functions do): carried out in that call and
/// answered as it ended, without asking Step Functions for anything, which here would refuse every start; the same
/// token again answers the same transaction.
#[tokio::test]
async fn start_carries_out_a_request_one_call_can_carry_with_no_execution() {
    use dynamo_saga::sweeper::StateMachine;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let env = Env::new("direct-api").await;
    static ASKED: AtomicUsize = AtomicUsize::new(0);
    let throttled = harness::sfn_api::serve(|_op, _body| async {
        ASKED.fetch_add(1, Ordering::SeqCst);
        json!({"__type": "ThrottlingException", "message": "Rate exceeded"})
    })
    .await;
    let sm = StateMachine {
        client: harness::sfn_api::client_for(&throttled),
        arn: "arn:aws:states:us-east-1:000000000000:stateMachine:dynamo-saga-local".into(),
    };
    seed_mixed(&env, "api", 4).await;
    let mut body = mixed(&env, "api", 4);
    body["ClientRequestToken"] = json!("direct-api-1");
    let started = dynamo_saga::start::start(&env.store, &sm, &body).await.expect("answered");
    assert_eq!((started.state, started.finished, started.execution_arn.as_deref()), (TxState::Committed, true, None));
    assert_mixed_committed(&env, "api", 4).await;
    let again = dynamo_saga::start::start(&env.store, &sm, &body).await.expect("answered again");
    assert_eq!(again.transaction_id, started.transaction_id);
    assert_mixed_committed(&env, "api", 4).await;
    let json = serde_json::to_value(&again).unwrap();
    assert_eq!(json, json!({"TransactionId": started.transaction_id, "State": "COMMITTED", "Finished": true}));
    assert_eq!(ASKED.load(Ordering::SeqCst), 0, "Step Functions was not asked");
    env.assert_clean().await;
}
