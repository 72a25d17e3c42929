//! The sweeper on DynamoDB Local: it finds stale open transactions through the index, leaves ones whose execution
//! still runs, rolls back abandoned pending ones, completes committed ones, and a second sweep finds nothing to do.
//! Step Functions is played by a small local server answering `DescribeExecution` and `StartExecution` (the
//! sweeper's only two calls to it); DynamoDB is the real DynamoDB Local.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use dynamo_saga::phase::{apply, commit, lock, save};
use dynamo_saga::records::read_header;
use dynamo_saga::store::Meter;
use dynamo_saga::sweeper::{StateMachine, Sweeper};
use dynamo_saga::{Coordinator, TxState};
use harness::workload::{assert_mixed_committed, mixed, seed_mixed};
use harness::Env;
use serde_json::{json, Value};

/// Begins a 150-action transaction and runs it up to `upto` ("lock", "apply" or "commit"), then leaves it, as a
/// crashed coordinator would.
async fn abandoned(env: &Env, tag: &str, upto: &str, execution: Option<&str>) -> (String, Value) {
    seed_mixed(env, tag, 150).await;
    let body = mixed(env, tag, 150);
    let before = serde_json::to_value(env.snapshot().await).unwrap();
    let id =
        dynamo_saga::phase::begin::begin_with_execution(&env.store, &body, execution).await.unwrap().transaction_id;
    let s = &env.store;
    for b in 0..2 {
        lock::lock(s, &id, b).await.unwrap();
    }
    if upto != "lock" {
        for b in 0..2 {
            save::save(s, &id, b).await.unwrap();
        }
        for b in 0..2 {
            apply::apply(s, &id, b).await.unwrap();
        }
    }
    if upto == "commit" {
        commit::commit(s, &id).await.unwrap();
    }
    (id, before)
}

fn sweeper(env: &Env, stale_after: Duration) -> Sweeper {
    let mut s = Sweeper::new(env.store.clone());
    s.stale_after = stale_after;
    s
}

#[tokio::test]
async fn finishes_abandoned_transactions_in_process_and_is_idempotent() {
    let env = Env::new("sweep").await;
    let (pending, before) = abandoned(&env, "p", "apply", None).await;
    let (committed, _) = abandoned(&env, "c", "commit", None).await;
    tokio::time::sleep(Duration::from_millis(20)).await;

    // Not stale yet for a sweeper that waits a minute: nothing is touched.
    let report = sweeper(&env, Duration::from_secs(60)).sweep().await.unwrap();
    assert_eq!(report.examined, 0, "{report:?}");
    assert_eq!(read_header(&env.store, &Meter::default(), &pending).await.unwrap().state, TxState::Pending);

    let report = sweeper(&env, Duration::from_millis(10)).sweep().await.unwrap();
    assert_eq!(report.examined, 2, "{report:?}");
    assert_eq!(report.rolled_back, vec![pending.clone()]);
    let mut finished: Vec<(String, String)> =
        report.finished.iter().map(|s| (s.transaction_id.clone(), s.outcome.clone())).collect();
    finished.sort();
    let mut want = vec![(pending.clone(), "RolledBack".to_string()), (committed.clone(), "Committed".to_string())];
    want.sort();
    assert_eq!(finished, want);
    assert!(report.failed.is_empty() && !report.more);

    // The pending one is rolled back (its items as before), the committed one completed.
    let now = serde_json::to_value(env.snapshot().await).unwrap();
    for (table, items) in before.as_object().unwrap() {
        for (k, v) in items.as_object().unwrap() {
            if k.contains("\"p-") {
                assert_eq!(&now[table][k], v, "{k} restored");
            }
        }
    }
    assert_mixed_committed(&env, "c", 150).await;
    env.assert_clean().await;

    // A second sweep finds nothing open, and the late coordinators of both learn how they ended.
    let again = sweeper(&env, Duration::from_millis(10)).sweep().await.unwrap();
    assert_eq!(again.examined, 0, "{again:?}");
    assert!(Coordinator::new(env.store.clone()).drive(&pending).await.is_err());
    assert!(Coordinator::new(env.store.clone()).drive(&committed).await.is_ok());
}

/// A stand-in for the Step Functions API: `DescribeExecution` answers RUNNING for execution ARNs containing
/// "running" and SUCCEEDED otherwise; `StartExecution` records its name and input.
async fn fake_step_functions() -> (String, Arc<Mutex<Vec<Value>>>) {
    let started = Arc::new(Mutex::new(Vec::new()));
    let log = started.clone();
    let url = harness::sfn_api::serve(move |op, body| {
        let log = log.clone();
        async move {
            if op == "describeexecution" {
                let arn = body["executionArn"].as_str().unwrap_or("");
                let status = if arn.contains("running") { "RUNNING" } else { "SUCCEEDED" };
                json!({"executionArn": arn, "stateMachineArn": "arn:aws:states:us-east-1:000000000000:stateMachine:sm",
                    "status": status, "startDate": 1.7e9})
            } else {
                log.lock().unwrap().push(body.clone());
                json!({"executionArn": format!("arn:aws:states:us-east-1:000000000000:execution:sm:{}", body["name"].as_str().unwrap_or("")),
                    "startDate": 1.7e9})
            }
        }
    })
    .await;
    (url, started)
}

const SM_ARN: &str = "arn:aws:states:us-east-1:000000000000:stateMachine:sm";

/// A sweeper of transactions stale after 10 ms that recovers through [`fake_step_functions`]; and what that started.
async fn sweeper_with_step_functions(env: &Env) -> (Sweeper, Arc<Mutex<Vec<Value>>>) {
    let (url, started) = fake_step_functions().await;
    let mut sw = sweeper(env, Duration::from_millis(10));
    sw.state_machine = Some(StateMachine { client: harness::sfn_api::client_for(&url), arn: SM_ARN.to_string() });
    (sw, started)
}

#[tokio::test]
async fn leaves_running_executions_alone_and_starts_recovery_executions_for_the_rest() {
    let env = Env::new("sweepsfn").await;
    let running_arn = "arn:aws:states:us-east-1:000000000000:execution:sm:running-1";
    let dead_arn = "arn:aws:states:us-east-1:000000000000:execution:sm:crashed-1";
    let (running, _) = abandoned(&env, "r", "lock", Some(running_arn)).await;
    let (dead, _) = abandoned(&env, "d", "lock", Some(dead_arn)).await;
    tokio::time::sleep(Duration::from_millis(20)).await;

    let (sw, started) = sweeper_with_step_functions(&env).await;
    let sm_arn = SM_ARN.to_string();
    let report = sw.sweep().await.unwrap();

    assert_eq!(report.running, vec![running.clone()], "{report:?}");
    assert_eq!(report.rolled_back, vec![dead.clone()], "{report:?}");
    assert_eq!(report.recovery_executions.len(), 1, "{report:?}");
    let m = Meter::default();
    assert_eq!(
        read_header(&env.store, &m, &running).await.unwrap().state,
        TxState::Pending,
        "the running one is untouched"
    );
    let dead_header = read_header(&env.store, &m, &dead).await.unwrap();
    assert_eq!(dead_header.state, TxState::RolledBack);
    let calls = started.lock().unwrap().clone();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0]["stateMachineArn"], sm_arn);
    assert_eq!(calls[0]["name"], format!("recover-{dead}-v{}", dead_header.version));
    let input: Value = serde_json::from_str(calls[0]["input"].as_str().unwrap()).unwrap();
    assert_eq!(input, json!({"TransactionId": dead}), "the recovery execution gets only the id");

    // What the recovery execution does: Begin picks the transaction up by id, and the phases roll it back.
    Coordinator::new(env.store.clone()).drive(&dead).await.expect_err("rolled back");
    Coordinator::new(env.store.clone()).drive(&running).await.expect("the running one still finishes");
    env.assert_clean().await;
}

/// Express workflows (the template's `WorkflowType: EXPRESS`) have no `DescribeExecution`: the sweeper does not ask,
/// and recovers a transaction whose Express execution left it unmoved for `stale_after` as one whose execution ended
/// (an Express execution lasts 5 minutes at most). The stand-in would answer RUNNING for this ARN had it been asked.
#[tokio::test]
async fn recovers_a_transaction_of_an_express_execution_without_asking_for_it() {
    let env = Env::new("sweepexpress").await;
    let express_arn =
        "arn:aws:states:us-east-1:000000000000:express:sm:running-express-1:5f0c6a52-6f4c-4a55-9d1b-2b3c4d5e6f70";
    assert!(dynamo_saga::sweeper::is_express(express_arn));
    assert!(!dynamo_saga::sweeper::is_express("arn:aws:states:us-east-1:000000000000:execution:sm:express"));
    let (tx, before) = abandoned(&env, "x", "apply", Some(express_arn)).await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    let (sw, started) = sweeper_with_step_functions(&env).await;
    let report = sw.sweep().await.unwrap();
    assert!(report.running.is_empty(), "{report:?}");
    assert_eq!(report.rolled_back, vec![tx.clone()], "{report:?}");
    assert_eq!(started.lock().unwrap().len(), 1, "one recovery execution");
    Coordinator::new(env.store.clone()).drive(&tx).await.expect_err("rolled back");
    let now = serde_json::to_value(env.snapshot().await).unwrap();
    for (table, items) in before.as_object().unwrap() {
        for (k, v) in items.as_object().unwrap() {
            assert_eq!(&now[table][k], v, "{k} restored");
        }
    }
    env.assert_clean().await;
}

/// `POST /transactions` begins the transaction before it starts the execution. When Step Functions refuses the start
/// (throttled), the caller is told so and the transaction stands begun, with no execution: the same call again starts
/// it, and if nobody calls again, the sweeper ends it once it is stale, by a recovery execution that rolls it back,
/// so nothing of it is ever applied.
#[tokio::test]
async fn a_transaction_begun_by_the_api_whose_execution_never_started_is_ended_by_the_sweeper() {
    let env = Env::new("sweepapi").await;
    let throttled = harness::sfn_api::serve(|_op, _body| async {
        json!({"__type": "ThrottlingException", "message": "Rate exceeded"})
    })
    .await;
    let refusing = StateMachine { client: harness::sfn_api::client_for(&throttled), arn: SM_ARN.to_string() };
    let mut ids = Vec::new();
    let mut befores = Vec::new();
    for tag in ["again", "left"] {
        seed_mixed(&env, tag, 150).await;
        befores.push(serde_json::to_value(env.snapshot().await).unwrap());
        let mut body = mixed(&env, tag, 150);
        body["ClientRequestToken"] = json!(format!("api-{tag}"));
        let e = dynamo_saga::start::start(&env.store, &refusing, &body)
            .await
            .expect_err("Step Functions refused the start");
        assert_eq!(e.name(), "Throttled", "{e}");
        let id = read_header_by_token(&env, &format!("api-{tag}")).await;
        assert!(e.to_string().contains(&id) && e.to_string().contains("call again"), "{e}");
        let h = read_header(&env.store, &Meter::default(), &id).await.unwrap();
        assert_eq!((h.state, h.execution_arn.as_deref()), (TxState::Pending, None), "begun, with no execution");
        ids.push((id, body));
    }
    assert_eq!(serde_json::to_value(env.snapshot().await).unwrap(), befores[1], "beginning writes no item");

    // The first caller calls again: the same transaction, now with its execution, which commits it.
    let (url, started) = fake_step_functions().await;
    let sm = StateMachine { client: harness::sfn_api::client_for(&url), arn: SM_ARN.to_string() };
    let (again, body) = &ids[0];
    let out = dynamo_saga::start::start(&env.store, &sm, body).await.expect("started");
    assert_eq!(&out.transaction_id, again);
    assert_eq!(
        started.lock().unwrap().last().unwrap()["name"],
        json!(again),
        "the execution is named after the transaction"
    );
    Coordinator::new(env.store.clone()).drive(again).await.expect("what the execution does: it commits");
    assert_mixed_committed(&env, "again", 150).await;

    // The second never calls again: once stale, the sweeper starts one recovery execution, which rolls it back.
    let (left, _) = &ids[1];
    tokio::time::sleep(Duration::from_millis(20)).await;
    let mut sw = sweeper(&env, Duration::from_millis(10));
    sw.state_machine = Some(sm);
    let report = sw.sweep().await.unwrap();
    assert_eq!(report.rolled_back, vec![left.clone()], "{report:?}");
    assert_eq!(report.recovery_executions.len(), 1, "{report:?}");
    let h = read_header(&env.store, &Meter::default(), left).await.unwrap();
    assert_eq!(h.state, TxState::RolledBack);
    assert_eq!(started.lock().unwrap().last().unwrap()["name"], json!(format!("recover-{left}-v{}", h.version)));
    let e = Coordinator::new(env.store.clone())
        .drive(left)
        .await
        .expect_err("what the recovery execution does: it rolls back");
    assert_eq!(e.name(), "TransactionAborted", "{e}");
    let now = serde_json::to_value(env.snapshot().await).unwrap();
    for (table, items) in befores[1].as_object().unwrap() {
        for (k, v) in items.as_object().unwrap() {
            if k.contains("left") {
                assert_eq!(&now[table][k], v, "{k} untouched");
            }
        }
    }
    env.assert_clean().await;
    assert!(sw.sweep().await.unwrap().recovery_executions.is_empty(), "a second sweep has nothing to do");
}

/// The id of the transaction begun with `token`.
async fn read_header_by_token(env: &Env, token: &str) -> String {
    let records = env.tx_records().await;
    let ids: Vec<String> = records
        .iter()
        .filter(|r| {
            r.get(dynamo_saga::constants::H_TOKEN).and_then(|v| v.as_s().ok()).map(String::as_str) == Some(token)
        })
        .filter_map(|r| r.get(dynamo_saga::constants::TX_PK).and_then(|v| v.as_s().ok()).cloned())
        .collect();
    assert_eq!(ids.len(), 1, "one transaction with token {token}: {ids:?}");
    ids[0].clone()
}
