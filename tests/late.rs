//! A lock write that lands late (issue 26, item 6): a proxy in front of DynamoDB Local (`tools/ddb-proxy.mjs`) answers
//! one item's lock write with `InternalServerError`, which says nothing of whether DynamoDB carried it out, keeps it,
//! and delivers it only after the item was applied. The lock sends that item's next write under a new lock id, so
//! the late copy carries an id apply does not expect: whether it lands while the apply that wrote the item is still
//! unrecorded (a crash) or after the transaction ended, every `ADD` moves exactly once, reads see the value the
//! transaction left, and the late lock is cleared.

use dynamo_saga::config::CommittedReads;
use dynamo_saga::drive::Driver;
use dynamo_saga::items::LockId;
use dynamo_saga::phase::resume::Step;
use dynamo_saga::phase::{apply, begin};
use dynamo_saga::read::{self, Isolation};
use dynamo_saga::records::read_header;
use dynamo_saga::store::Meter;
use dynamo_saga::value::item_from_json;
use dynamo_saga::{Coordinator, Store, TxError, TxState};
use harness::proxy::Proxy;
use harness::{nv, sv, Env};
use serde_json::{json, Value};

/// Actions of the transactions: `ADD n :one` to each of `n` items `{tag}-{i}`, seeded with `n = 0`.
const ACTIONS: usize = 150;
/// The item whose lock write is delivered late.
const LATE: usize = 77;

fn key(tag: &str, i: usize) -> Value {
    json!({"pk": sv(&format!("{tag}-{i:03}"))})
}

async fn seed(env: &Env, tag: &str) -> Value {
    harness::put_all(
        &env.client,
        &env.a,
        (0..ACTIONS).map(|i| json!({"pk": sv(&format!("{tag}-{i:03}")), "n": nv(0)})),
    )
    .await;
    let items: Vec<Value> = (0..ACTIONS)
        .map(|i| {
            json!({"Update": {"TableName": env.a, "Key": key(tag, i), "UpdateExpression": "ADD n :one",
                "ExpressionAttributeValues": {":one": nv(1)}}})
        })
        .collect();
    json!({ "TransactItems": items })
}

/// A store that reaches DynamoDB Local through `proxy`, whose next lock write to the late item is held.
async fn through(env: &Env, proxy: &Proxy, tag: &str) -> Store {
    let late = format!("\"{tag}-{LATE:03}\"");
    proxy.hold(&[&late, ":_sagaNow"], 1).await;
    Store::from_conf(harness::conf_for(&proxy.url), (*env.store.cfg).clone())
}

/// `n` of every item, in order.
async fn counts(env: &Env, tag: &str) -> Vec<i64> {
    let mut out = Vec::new();
    for i in 0..ACTIONS {
        let item = env.get(&env.a, key(tag, i)).await.expect("the item exists");
        out.push(item["n"]["N"].as_str().unwrap().parse().unwrap());
    }
    out
}

/// The late item as it is, and the id of the lock it carries, if any.
async fn late_item(env: &Env, tag: &str) -> (Value, Option<LockId>) {
    let item = env.get(&env.a, key(tag, LATE)).await.expect("the late item exists");
    let id = item_from_json(&item).ok().and_then(|i| LockId::of(&i));
    (item, id)
}

/// Delivers the held lock write, and checks DynamoDB took it: the item it names holds a lock again.
async fn deliver(env: &Env, proxy: &Proxy, tag: &str) -> LockId {
    let released = proxy.release().await;
    assert_eq!(released["statuses"], json!([200]), "the late lock write lands: {released}");
    let (item, id) = late_item(env, tag).await;
    assert!(item.get("_sagaLock").is_some(), "the late write locked the item again: {item}");
    id.expect("the late lock carries an id")
}

#[tokio::test]
async fn a_lock_write_landing_after_an_unrecorded_apply_is_never_applied_again() {
    let env = Env::new("late-apply").await;
    let tag = "la";
    let body = seed(&env, tag).await;
    let proxy = Proxy::start(0, 0.0).await;
    let store = through(&env, &proxy, tag).await;
    let id = begin::begin(&store, &body).await.unwrap().transaction_id;

    // Locked, saved and committed: the late item's first lock write was answered InternalServerError and held, and
    // the item was locked by its next write, under another id.
    let h = Driver::new(store.clone()).drive_until(&id, true, |_, step| matches!(step, Step::Apply(_))).await.unwrap();
    assert_eq!(h.state, TxState::Committed);
    assert_eq!(proxy.stats().await["held"], 1);
    let recorded = h.lock_id(0, LATE).expect("the late item's batch was recorded locked");
    assert_eq!(recorded.retry, 1, "the item's next lock write carried a new id: {:?}", h.lock_ids);
    assert_eq!(late_item(&env, tag).await.1, Some(recorded));

    // Apply writes every item, and its driver dies before it records them applied.
    let first = apply::apply(&store.crash_after(ACTIONS as u64), &id, 0).await;
    assert!(matches!(first, Err(TxError::InjectedFault(_))), "{first:?}");
    assert_eq!(counts(&env, tag).await, vec![1; ACTIONS]);

    // The held lock write lands now, on the applied item, with the id of the first write.
    let late = deliver(&env, &proxy, tag).await;
    assert_eq!(late, LockId { retry: 0, ..recorded });
    let committed = read::get_item(&store, &env.a, item_from_json(&key(tag, LATE)).unwrap(), Isolation::Committed)
        .await
        .unwrap()
        .expect("the item exists");
    assert_eq!(committed["n"], aws_sdk_dynamodb::types::AttributeValue::N("1".into()), "read as applied, once");

    // The next driver runs the apply again: the late lock is not the one apply writes, so nothing moves twice.
    Coordinator::new(store.clone()).drive(&id).await.expect("the transaction finishes");
    assert_eq!(counts(&env, tag).await, vec![1; ACTIONS], "every ADD applied exactly once");
    assert!(read_header(&env.store, &Meter::default(), &id).await.unwrap().finished());
    env.assert_clean().await;
    harness::report(format!(
        "late lock write: delivered after its item was applied, before apply was recorded: {ACTIONS} ADDs applied once, \
         the late lock cleared"
    ));
}

#[tokio::test]
async fn a_lock_write_landing_after_its_transaction_ended_is_read_through_and_cleared() {
    let env = Env::new("late-end").await;
    let tag = "le";
    let body = seed(&env, tag).await;
    let proxy = Proxy::start(0, 0.0).await;
    let store = through(&env, &proxy, tag).await;
    let done = Coordinator::new(store.clone()).run(&body).await.expect("commits");
    assert_eq!(proxy.stats().await["held"], 1);
    assert_eq!(counts(&env, tag).await, vec![1; ACTIONS]);

    // The held lock write lands after the transaction ended: the item holds a lock nobody will apply.
    deliver(&env, &proxy, tag).await;
    let late = item_from_json(&key(tag, LATE)).unwrap();
    let one = aws_sdk_dynamodb::types::AttributeValue::N("1".into());
    for isolation in [Isolation::Uncommitted, Isolation::Committed] {
        let item = read::get_item(&store, &env.a, late.clone(), isolation).await.unwrap().expect("exists");
        assert_eq!(item.get("n"), Some(&one), "{isolation:?}: the value the transaction left");
        assert!(!item.keys().any(|k| k.starts_with("_saga")), "{isolation:?}: {item:?}");
    }
    // A committed read that applies what it finds unapplied applies nothing here.
    let applying = Store::new(
        env.client.clone(),
        dynamo_saga::Config { committed_reads: CommittedReads::Apply, ..(*env.store.cfg).clone() },
    );
    let item = read::get_item(&applying, &env.a, late.clone(), Isolation::Committed).await.unwrap().expect("exists");
    assert_eq!(item.get("n"), Some(&one));
    assert_eq!(counts(&env, tag).await, vec![1; ACTIONS]);

    // The next transaction on the items clears the late lock of the ended one and applies its own, once.
    let again = Coordinator::new(env.store.clone()).run(&body).await.expect("the next transaction commits");
    assert_ne!(again.transaction_id, done.transaction_id);
    assert_eq!(counts(&env, tag).await, vec![2; ACTIONS]);
    env.assert_clean().await;
}
