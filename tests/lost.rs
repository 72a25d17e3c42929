//! Lost answers, on a stack of the test's own whose functions send every DynamoDB request through
//! `tools/ddb-proxy.mjs`: a share of the write answers lost, each write delivered up to 15 s later all the same (as a
//! request that reached DynamoDB whose answer the network lost), and connections dropped once they sat idle longer than
//! the proxy's idle close (as DynamoDB closes an idle connection under a warm Lambda function between invocations).
//!
//! An execution ends when its transaction does, whatever answers were lost: the visit a transaction that may have
//! writes still in flight needs is the sweeper's, once no such write can land (`SAGA_REVISIT_AFTER_SECONDS`, here 20 s,
//! above the proxy's 15 s). And a warm function's first request after a pause longer than the proxy's idle close goes
//! on a fresh connection (`SAGA_IDLE_CONNECTION_SECONDS`, here 1 s): nothing is lost.

use std::process::Command;
use std::time::Duration;

use dynamo_saga::store::Meter;
use harness::proxy::{lose_answers, stats_of};
use harness::stack::{Execution, Region, Stack};
use harness::{nv, root, sv, Env};
use serde_json::{json, Value};
use tokio::sync::{Mutex, OnceCell};

/// How late a write whose answer was lost lands, at most.
const LATE_MS: u64 = 15_000;
/// The stack's bound on how late a write may land: above [`LATE_MS`].
const REVISIT_AFTER_SECONDS: u64 = 20;
/// The proxy closes a connection that sat idle this long.
const IDLE_CLOSE_MS: u64 = 3_000;

/// The stack of this binary's tests, and a lock that runs them one at a time (each sets the proxy's losses).
async fn lossy() -> (&'static Region, tokio::sync::MutexGuard<'static, ()>) {
    static STACK: OnceCell<Region> = OnceCell::const_new();
    static ONE_AT_A_TIME: Mutex<()> = Mutex::const_new(());
    let guard = ONE_AT_A_TIME.lock().await;
    let region = STACK
        .get_or_init(|| async {
            let vars = [
                ("SAGA_TABLE", format!("t-lost-tx-{}", std::process::id())),
                ("SAGA_STACK_PROXY", format!("--late-ms {LATE_MS} --idle-close-ms {IDLE_CLOSE_MS} --seed 11")),
                ("SAGA_REVISIT_AFTER_SECONDS", REVISIT_AFTER_SECONDS.to_string()),
                ("SAGA_IDLE_CONNECTION_SECONDS", "1".to_string()),
            ];
            Region::start_with("lost", &vars).await
        })
        .await;
    (region, guard)
}

fn proxy(st: &Stack) -> &str {
    st.stand_in.as_deref().expect("the stack's functions send through a proxy")
}

/// `n` updates (`ADD n :one`) of items that exist, through the stack's state machine.
async fn counters(env: &Env, tag: &str, n: usize) -> (Vec<String>, Value) {
    let (keys, items) = harness::workload::counters(env, tag, n, None).await;
    (keys, json!({ "TransactItems": items }))
}

/// Every item of `keys` added to once: each transaction committed whole. A lock write of the transaction whose answer
/// was lost may still land on an item after its end, leaving a lock the sweeper's visit removes once the bound has
/// passed: the values are checked here, dynamo-saga's attributes too with `clean` (after that visit).
async fn assert_added_once(env: &Env, keys: &[String], clean: bool) {
    for k in keys {
        let mut item = env.get(&env.a, json!({"pk": sv(k)})).await.unwrap();
        if !clean {
            item.as_object_mut().unwrap().retain(|name, _| !name.starts_with("_saga"));
        }
        assert_eq!(item, json!({"pk": sv(k), "n": nv(1)}), "{k}");
    }
}

fn median(mut ms: Vec<u64>) -> u64 {
    ms.sort_unstable();
    ms[ms.len() / 2]
}

/// Transactions of 10, 250 and 1,000 updates, three of each, run through the state machine as the network loses 2% of
/// the write answers (each write landing up to 15 s late): every one commits, each item added to once, and its
/// execution ends within twice the median time of the same transactions without losses (half a second for those that
/// take less than a quarter), with no wait for the bound.
/// Once the bound has passed, the stack's sweeper visits every transaction flagged for writes that may have landed late
/// and removes what did; `dynamo-saga audit` then finds nothing on the table.
#[tokio::test]
async fn an_execution_ends_with_its_transaction_whatever_answers_are_lost() {
    let (region, _one) = lossy().await;
    let st = &region.stack;
    let env = Env::on_stack_of(st, "lost").await;
    let mut lines = Vec::new();
    let mut all_keys = Vec::new();
    for n in [10, 250, 1000] {
        let mut runs: Vec<(f64, Vec<Execution>)> = Vec::new();
        for lose in [0.0, 0.02] {
            lose_answers(proxy(st), lose, LATE_MS).await;
            let mut executions = Vec::new();
            for i in 0..3 {
                let (keys, body) = counters(&env, &format!("l{lose}-{n}-{i}-"), n).await;
                let ex = st.execute(&body).await;
                assert_eq!(
                    (ex.status.as_str(), ex.output["State"].as_str()),
                    ("SUCCEEDED", Some("COMMITTED")),
                    "{ex:?}"
                );
                assert_eq!(ex.state_entries.get("WaitToRevisit"), None, "{ex:?}");
                assert_added_once(&env, &keys, false).await;
                all_keys.extend(keys);
                executions.push(ex);
            }
            runs.push((lose, executions));
        }
        let time = |e: &[Execution]| median(e.iter().map(|e| e.duration_ms).collect());
        let (clean, lossy) = (time(&runs[0].1), time(&runs[1].1));
        assert!(lossy <= 2 * clean.max(250), "{n} actions: {lossy} ms with lost answers, {clean} ms without");
        lines.push(format!("{n} actions {clean} ms -> {lossy} ms"));
    }
    lose_answers(proxy(st), 0.0, LATE_MS).await;
    let stats = stats_of(proxy(st)).await;
    assert!(stats["lost"].as_u64().unwrap() >= 10, "answers were lost: {stats}");

    // After the bound, every write that was to land has: the sweeper visits what was flagged, and nothing is left.
    tokio::time::sleep(Duration::from_millis(LATE_MS) + Duration::from_secs(REVISIT_AFTER_SECONDS)).await;
    let stats = stats_of(proxy(st)).await;
    assert_eq!(stats["landedLate"], stats["lost"], "every lost write landed: {stats}");
    let mut visited = 0;
    loop {
        let report = st.invoke("saga-sweeper", &json!({"OlderThanSeconds": 1})).await.expect("the sweeper runs");
        visited += report["Revisited"].as_array().map_or(0, Vec::len);
        assert_eq!(report["Failed"], json!([]), "{report}");
        if report["More"] != json!(true) {
            break;
        }
    }
    let audit = Command::new(root().join("target/debug/dynamo-saga"))
        .args(["--table", &st.tx_table, "--json", "audit", &env.a])
        .env("AWS_ENDPOINT_URL_DYNAMODB", &st.dynamodb)
        .envs([("AWS_REGION", "us-east-1"), ("AWS_ACCESS_KEY_ID", "local"), ("AWS_SECRET_ACCESS_KEY", "local")])
        .output()
        .expect("dynamo-saga audit runs");
    let found: Value = serde_json::from_slice(&audit.stdout).expect("audit --json");
    assert!(audit.status.success(), "audit found traces: {found}");
    assert_eq!(found[0]["Traces"], json!([]), "{found}");
    assert_added_once(&env, &all_keys, true).await;
    env.assert_clean().await;
    harness::report(format!(
        "lost answers through the state machine: {} write answers lost of {} writes, each landing up to {} s late; \
         executions ended with their transactions (median {}), every one all-or-nothing; {} visited by the sweeper after \
         the bound, audit clean",
        stats["lost"],
        stats["writes"],
        LATE_MS / 1000,
        lines.join(", "),
        visited
    ));
}

/// A warm function invoked again after a pause longer than the proxy's idle close: its pooled connections are older
/// than `SAGA_IDLE_CONNECTION_SECONDS`, so its first requests open fresh ones, and no request is lost with a
/// connection the proxy dropped. The transaction after the pause is not flagged for a visit.
#[tokio::test]
async fn a_warm_function_after_a_pause_loses_no_answer() {
    let (region, _one) = lossy().await;
    let st = &region.stack;
    lose_answers(proxy(st), 0.0, LATE_MS).await;
    let env = Env::on_stack_of(st, "idle").await;
    let dropped = |s: &Value| s["idleDropped"].as_u64().unwrap();
    for round in 0..2 {
        // 120 updates: every phase function runs, the lock writes sent once.
        let (keys, body) = counters(&env, &format!("w{round}-"), 120).await;
        let before = stats_of(proxy(st)).await;
        let ex = st.execute(&body).await;
        assert_eq!((ex.status.as_str(), ex.output["State"].as_str()), ("SUCCEEDED", Some("COMMITTED")), "{ex:?}");
        assert_added_once(&env, &keys, true).await;
        let after = stats_of(proxy(st)).await;
        assert_eq!(dropped(&after), dropped(&before), "no request went on a connection the proxy had closed");
        let id = ex.output["TransactionId"].as_str().unwrap();
        let h = dynamo_saga::records::read_header(&env.store, &Meter::default(), id).await.unwrap();
        assert!(!h.needs_revisit(), "no answer lost, no visit: {h:?}");
        // Longer than the proxy's idle close: every connection the functions pooled has been idle too long.
        tokio::time::sleep(Duration::from_millis(IDLE_CLOSE_MS + 1_000)).await;
    }
    env.assert_clean().await;
}
