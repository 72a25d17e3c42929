//! The crash suite's killed driver: `dynamo-saga submit --in-process` of up to 1,000 actions over two tables (two in
//! five of their items absent before, so locks create items to hold them), killed outright (SIGKILL) at several points
//! of its run with lock writes in flight, then `dynamo-saga sweep --older-than 0` at once, again until it reports
//! nothing open, as an operator does after a crash. Writes the killed process sent may land after the sweep has
//! finished the transaction; once the bound has passed (`SAGA_REVISIT_AFTER_SECONDS`, 2 s here) one more sweep visits
//! it again. After that every item is as it was before, or as the transaction leaves it when it had committed, byte
//! for byte: no `_saga*` attribute and no item that did not exist.

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::Duration;

use harness::stack::stack;
use harness::{nv, sv, Env};
use serde_json::{json, Value};

/// The bound the runs set: the visit comes this long after a transaction ends.
const BOUND_SECONDS: u64 = 2;

fn command(env: &Env, endpoint: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_dynamo-saga"));
    cmd.args(args)
        .env("AWS_REGION", "us-east-1")
        .env("AWS_ACCESS_KEY_ID", "local")
        .env("AWS_SECRET_ACCESS_KEY", "local")
        .env("AWS_ENDPOINT_URL_DYNAMODB", endpoint)
        .env("SAGA_TABLE", &env.tx_table)
        .env("SAGA_ALLOWED_TABLES", "t-*")
        .env("SAGA_REVISIT_AFTER_SECONDS", BOUND_SECONDS.to_string())
        .env_remove("SAGA_STATE_MACHINE_ARN")
        .stdin(Stdio::null());
    cmd
}

/// The request: `n` actions over tables a and b, three in five updates of present items (`ADD n :one`), two in five
/// puts of absent ones (seeded here).
async fn request(env: &Env, tag: &str, n: usize) -> Value {
    let mut actions = Vec::new();
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for i in 0..n {
        let (table, key) = if i % 2 == 0 {
            (&env.a, json!({"pk": sv(&format!("{tag}-{i:04}"))}))
        } else {
            (&env.b, json!({"pk": sv(&format!("{tag}-{i:04}")), "sk": nv(i as i64)}))
        };
        let present = i % 5 >= 2;
        let mut item = key.clone();
        item["n"] = nv(0);
        if present {
            if table == &env.a {
                a.push(item)
            } else {
                b.push(item)
            }
            actions.push(json!({"Update": {"TableName": table, "Key": key, "UpdateExpression": "ADD n :one",
                "ExpressionAttributeValues": {":one": nv(1)}}}));
        } else {
            let mut put = key.clone();
            put["n"] = nv(1);
            actions.push(json!({"Put": {"TableName": table, "Item": put,
                "ConditionExpression": "attribute_not_exists(pk)"}}));
        }
    }
    harness::put_all(&env.client, &env.a, a).await;
    harness::put_all(&env.client, &env.b, b).await;
    json!({"TransactItems": actions})
}

/// Whether the tables hold what the transaction leaves when it commits: every one of its `n` items, each with `n` = 1
/// and nothing but its key besides.
fn committed(tables: &BTreeMap<String, BTreeMap<String, Value>>, n: usize) -> bool {
    let items: Vec<&Value> = tables.values().flat_map(BTreeMap::values).collect();
    items.len() == n
        && items.iter().all(|v| {
            let o = v.as_object().unwrap();
            v["n"] == nv(1) && o.keys().all(|k| k == "pk" || k == "sk" || k == "n")
        })
}

/// Sweeps at once until nothing open is left; returns the transactions visited again.
fn sweep_until_done(env: &Env, endpoint: &str) -> Vec<Value> {
    let mut revisited = Vec::new();
    for _ in 0..20 {
        let out = command(env, endpoint, &["--json", "sweep", "--older-than", "0", "--in-process"])
            .output()
            .expect("sweep runs");
        assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
        let r: Value = serde_json::from_slice(&out.stdout).expect("a sweep report");
        revisited.extend(r["Revisited"].as_array().cloned().unwrap_or_default());
        if r["Examined"] == json!(0) && r["More"] == json!(false) {
            return revisited;
        }
    }
    panic!("sweeping did not finish");
}

/// Runs one kill; returns how the transaction ended and what the visit after the bound cleared.
async fn killed_then_swept(n: usize, kill_after_ms: u64) -> (&'static str, String) {
    let env = Env::on_stack_alone(&format!("kill{n}-{kill_after_ms}")).await;
    let endpoint = stack().await.dynamodb.clone();
    let tag = "k";
    let body = request(&env, tag, n).await;
    let before = env.snapshot().await;
    let file = std::env::temp_dir().join(format!("dynamo-saga-kill-{}-{n}-{kill_after_ms}.json", std::process::id()));
    std::fs::write(&file, body.to_string()).unwrap();

    let mut driver = command(&env, &endpoint, &["--json", "submit", file.to_str().unwrap(), "--in-process"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("submit starts");
    tokio::time::sleep(Duration::from_millis(kill_after_ms)).await;
    let _ = driver.kill();
    let _ = driver.wait();
    let _ = std::fs::remove_file(&file);

    let env_ref = &env;
    let endpoint_ref = endpoint.as_str();
    let early = tokio::task::block_in_place(|| sweep_until_done(env_ref, endpoint_ref));
    assert_eq!(early, Vec::<Value>::new(), "no visit before the bound");
    tokio::time::sleep(Duration::from_secs(BOUND_SECONDS) + Duration::from_millis(500)).await;
    let visits = tokio::task::block_in_place(|| sweep_until_done(env_ref, endpoint_ref));

    let after = env.snapshot().await;
    // As before: rolled back, or killed before it wrote its header.
    let ended = if after == before {
        "as before"
    } else {
        assert!(
            committed(&after, n),
            "{n} actions killed at {kill_after_ms} ms: neither as before nor as committed: {after:#?}"
        );
        "committed"
    };
    env.assert_clean().await;
    let cleared = visits.iter().map(|v| v["Outcome"].as_str().unwrap_or_default()).collect::<Vec<_>>().join(", ");
    (ended, if cleared.is_empty() { "not visited".into() } else { cleared })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_driver_killed_with_writes_in_flight_then_swept_at_once_leaves_no_trace_once_the_bound_passed() {
    let mut outcomes = Vec::new();
    for (n, kill_after_ms) in [(200, 150), (200, 400), (1_000, 250), (1_000, 600), (1_000, 1_200)] {
        let (ended, visit) = killed_then_swept(n, kill_after_ms).await;
        outcomes.push(format!("{n} actions killed at {kill_after_ms} ms: {ended}, visit: {visit}"));
    }
    harness::report(format!(
        "killed driver then sweep --older-than 0: {} runs (200 and 1,000 actions, two in five items absent), no stray \
         item or attribute once the bound passed ({})",
        outcomes.len(),
        outcomes.join("; ")
    ));
    eprintln!("{outcomes:#?}");
}
