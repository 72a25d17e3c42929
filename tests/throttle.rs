//! Throttling is survived, and cheaply: through a proxy (`tools/ddb-proxy.mjs`) that answers a tenth of the write
//! requests with `ProvisionedThroughputExceededException`, as a busy table does, a transaction of 10,000 updates
//! commits, every item is updated exactly once, and the store heard of every throttled write (which halves its
//! in-flight limit: `pace.rs`).
//! The wall time is reported beside the same transaction's through the same proxy without throttling.

use std::time::Instant;

use dynamo_saga::{Coordinator, Store, TxState};
use harness::proxy::Proxy;
use harness::{nv, Env};
use serde_json::{json, Value};

async fn run(env: &Env, proxy: &Proxy, tag: &str, n: usize) -> (u64, u64) {
    let (keys, items) = harness::workload::counters(env, tag, n, None).await;
    let store = Store::from_conf(harness::conf_for(&proxy.url), (*env.store.cfg).clone());
    let started = Instant::now();
    let done = Coordinator::new(store.clone()).run(&json!({"TransactItems": items})).await.expect("commits");
    let ms = started.elapsed().as_millis() as u64;
    assert_eq!((done.state, done.actions), (TxState::Committed, n));
    let seen: std::collections::HashMap<String, Value> = env
        .scan(&env.a)
        .await
        .into_values()
        .filter_map(|i| Some((i["pk"]["S"].as_str()?.to_string(), i["n"].clone())))
        .collect();
    for k in &keys {
        assert_eq!(seen.get(k), Some(&nv(1)), "{k}: updated exactly once");
    }
    (ms, store.pace().throttled())
}

#[tokio::test]
async fn ten_thousand_updates_commit_with_a_tenth_of_the_writes_throttled() {
    let env = Env::new("throttle").await;
    let n = 10_000;
    let plain = Proxy::start(0, 0.0).await;
    let (plain_ms, plain_throttled) = run(&env, &plain, "p", n).await;
    assert_eq!(plain_throttled, 0);
    let busy = Proxy::start(0, 0.1).await;
    let (busy_ms, throttled) = run(&env, &busy, "t", n).await;
    let stats = busy.stats().await;
    let writes = stats["writes"].as_u64().unwrap();
    assert_eq!(stats["throttled"].as_u64(), Some(throttled), "the store heard of every throttled write: {stats}");
    assert!(throttled * 20 > writes, "about a tenth of {writes} writes throttled, {throttled} seen");
    env.assert_clean().await;
    harness::report(format!(
        "throttling: {n} updates in-process with a tenth of {writes} writes throttled ({throttled}): committed, each \
         item once; {busy_ms} ms against {plain_ms} ms unthrottled through the same proxy ({:.2}x)",
        busy_ms as f64 / plain_ms.max(1) as f64
    ));
}
