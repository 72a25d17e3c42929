//! Retried and hedged writes (seed 002): a `Put` with a `Ratchet` takes effect only when its timestamp is not older
//! than the stored one, so a hedged copy or a late retry of an old write never overwrites a newer value, whatever
//! the order the copies arrive in, through the library and through the state machine.

use dynamo_saga::{Coordinator, TxError};
use harness::stack::stack;
use harness::{nv, sv, Env};
use serde_json::{json, Value};

/// Ratcheted puts of `n` items `{tag}{i}` with timestamp `ts` and value `v`.
fn puts(env: &Env, tag: &str, n: usize, ts: i64, v: &str) -> Value {
    let items: Vec<Value> = (0..n)
        .map(|i| json!({"Put": {"TableName": env.a, "Item": {"pk": sv(&format!("{tag}{i:03}")), "ts": nv(ts), "v": sv(v)}, "Ratchet": {"AttributeName": "ts"}}}))
        .collect();
    json!({ "TransactItems": items })
}

/// (ts, v) of every item of `tag`.
async fn state(env: &Env, tag: &str, n: usize) -> Vec<(i64, String)> {
    let mut out = Vec::new();
    for i in 0..n {
        let it = env.get(&env.a, json!({"pk": sv(&format!("{tag}{i:03}"))})).await.expect("item exists");
        out.push((it["ts"]["N"].as_str().unwrap().parse().unwrap(), it["v"]["S"].as_str().unwrap().to_owned()));
    }
    out
}

fn refused(r: &Result<dynamo_saga::Committed, TxError>) -> bool {
    matches!(r, Err(TxError::Canceled(c)) if c.failed().any(|(_, r)| r.code == "ConditionalCheckFailed"))
}

#[tokio::test]
async fn ratcheted_puts_never_overwrite_newer_values_in_any_order() {
    let env = Env::new("ratchet").await;
    let n = 150;
    let coord = Coordinator::new(env.store.clone());
    let (old, new) = (puts(&env, "s", n, 100, "old"), puts(&env, "s", n, 200, "new"));

    // In order: the old write, the new one, then a hedged copy of the old one arriving last.
    coord.run(&old).await.expect("the first write commits");
    coord.run(&new).await.expect("a newer write commits");
    assert!(refused(&coord.run(&old).await), "the late copy of the old write is refused");
    assert_eq!(state(&env, "s", n).await, vec![(200, "new".to_owned()); n]);
    // A retry of the newest write (the same timestamp) is not older: it commits and changes nothing.
    coord.run(&new).await.expect("an equal timestamp is not older");
    assert_eq!(state(&env, "s", n).await, vec![(200, "new".to_owned()); n]);

    // A ratcheted put in a transaction that rolls back leaves the stored timestamps as they were: the old write is
    // still refused afterwards, and one newer item does not let the rest of a stale transaction through.
    let mut failing = puts(&env, "s", n, 300, "rolled back");
    failing["TransactItems"].as_array_mut().unwrap().push(json!({"ConditionCheck": {"TableName": env.a, "Key": {"pk": sv("missing")}, "ConditionExpression": "attribute_exists(pk)"}}));
    assert!(refused(&coord.run(&failing).await));
    assert_eq!(state(&env, "s", n).await, vec![(200, "new".to_owned()); n]);
    let mut mixed = puts(&env, "s", n, 250, "partial");
    mixed["TransactItems"][n - 1]["Put"]["Item"]["ts"] = nv(150);
    assert!(refused(&coord.run(&mixed).await), "one stale put cancels the whole transaction");
    assert_eq!(state(&env, "s", n).await, vec![(200, "new".to_owned()); n]);

    // At once, five rounds on fresh items: the old write and its hedged copy race the new one. Conflicts are retried
    // (as a client retries TransactionConflict); whatever commits first, the newest value stays.
    for round in 0..5 {
        let tag = format!("r{round}-");
        let (old, new) = (puts(&env, &tag, n, 100, "old"), puts(&env, &tag, n, 200, "new"));
        let run = |body: Value| {
            let coord = coord.clone();
            async move { coord.run_retrying(&body, 10).await }
        };
        let (a, b, c) = tokio::join!(run(old.clone()), run(new.clone()), run(old.clone()));
        assert!(b.is_ok(), "the newest write commits: {b:?}");
        for r in [&a, &c] {
            assert!(r.is_ok() || refused(r), "a copy of the old write commits or is refused: {r:?}");
        }
        assert_eq!(state(&env, &tag, n).await, vec![(200, "new".to_owned()); n], "round {round}");
    }
    env.assert_clean().await;
}

#[tokio::test]
async fn a_late_copy_of_an_old_write_through_the_state_machine_is_refused() {
    let env = Env::on_stack("smratchet").await;
    let n = 120;
    let (old, new) = (puts(&env, "m", n, 100, "old"), puts(&env, "m", n, 200, "new"));
    let sm = stack().await;
    let ex = sm.execute(&new).await;
    assert_eq!(ex.status, "SUCCEEDED", "{ex:?}");
    let ex = sm.execute(&old).await;
    assert_eq!((ex.status.as_str(), ex.error.as_deref()), ("FAILED", Some("TransactionCanceled")), "{ex:?}");
    let c = ex.cancellation().expect("the cause carries the cancellation");
    assert!(c["CancellationReasons"].as_array().unwrap().iter().any(|r| r["Code"] == "ConditionalCheckFailed"), "{c}");
    assert_eq!(state(&env, "m", n).await, vec![(200, "new".to_owned()); n]);
    env.assert_clean().await;
}
