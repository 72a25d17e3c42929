//! A lock write that lands late (issue 26, item 6): a proxy in front of DynamoDB Local (`tools/ddb-proxy.mjs`) answers
//! one item's lock write with `InternalServerError`, which says nothing of whether DynamoDB carried it out, keeps it,
//! and delivers it only after the item was applied. The lock sends that item's next write under a new lock id, so
//! the late copy carries an id apply does not expect: whether it lands while the apply that wrote the item is still
//! unrecorded (a crash) or after the transaction ended, every `ADD` moves exactly once, reads see the value the
//! transaction left, and the late lock is cleared.

use dynamo_saga::config::CommittedReads;
use dynamo_saga::driver::Driver;
use dynamo_saga::item_attrs::LockId;
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

/// How long after its end the transactions of the tests below are visited again (`Config::revisit_after`).
const BOUND: std::time::Duration = std::time::Duration::from_secs(2);

/// How the transaction whose driver dies with a lock write in flight ends.
#[derive(Debug, Clone, Copy, PartialEq)]
enum End {
    /// An operator's `sweep --older-than 0` (a sweeper that finds it stale at once) rolls it back.
    RolledBackBySweeper,
    /// Another coordinator takes it over and commits it.
    CommittedByTakeover,
}

/// `n` items `{tag}-{i}` of table a: with `present`, each seeded with `n = 0` and updated (`ADD n :one`); without,
/// each absent and put. Returns the request.
async fn items(env: &Env, tag: &str, n: usize, present: bool) -> Value {
    let keys: Vec<Value> = (0..n).map(|i| json!({"pk": sv(&format!("{tag}-{i:03}"))})).collect();
    if present {
        harness::put_all(&env.client, &env.a, keys.iter().map(|k| json!({"pk": k["pk"], "n": nv(0)}))).await;
    }
    let actions: Vec<Value> = keys
        .iter()
        .map(|k| match present {
            true => json!({"Update": {"TableName": env.a, "Key": k, "UpdateExpression": "ADD n :one",
                "ExpressionAttributeValues": {":one": nv(1)}}}),
            false => json!({"Put": {"TableName": env.a, "Item": {"pk": k["pk"], "n": nv(1)}}}),
        })
        .collect();
    json!({ "TransactItems": actions })
}

/// Every item of table a that holds a lock.
async fn locked(env: &Env) -> Vec<Value> {
    env.scan(&env.a).await.into_values().filter(|v| v.get("_sagaLock").is_some()).collect()
}

/// The driver of a 150-action transaction dies with its first lock write in flight (`Store::crash_after_late`: the
/// write is held and sent once the transaction has finished), someone else ends the transaction, and the held write
/// lands after that end: on an item that did not exist it creates one holding only a lock, on one that did it leaves a
/// lock. Once the bound has passed, a sweep visits the transaction again and removes it: every item is as it was (or
/// as the transaction left it, when it committed), byte for byte, with no `_saga*` attribute and no item that did not
/// exist.
async fn held_lock_write_after(end: End, present: bool) {
    let env = Env::with(&format!("late-{}", if present { "p" } else { "a" }), |c| dynamo_saga::Config {
        revisit_after: BOUND,
        ..c
    })
    .await;
    let tag = "held";
    let body = items(&env, tag, ACTIONS, present).await;
    let before = env.snapshot().await;
    let id = begin::begin(&env.store, &body).await.unwrap().transaction_id;

    // Its driver claims the lock phase, sends one lock write that is held, and dies.
    let dying = env.store.crash_after_late(1, &id);
    let died = Coordinator::new(dying).drive(&id).await;
    assert!(matches!(died, Err(TxError::InjectedFault(_))), "{died:?}");

    match end {
        End::RolledBackBySweeper => {
            let mut sweeper = dynamo_saga::sweeper::Sweeper::new(env.store.clone());
            sweeper.stale_after = std::time::Duration::ZERO;
            loop {
                let r = sweeper.sweep().await.unwrap();
                assert!(r.failed.is_empty(), "{r:?}");
                if r.examined == 0 && !r.more {
                    break;
                }
            }
        }
        End::CommittedByTakeover => {
            Coordinator::new(env.store.clone()).drive(&id).await.expect("the takeover commits");
        }
    }
    let h = read_header(&env.store, &Meter::default(), &id).await.unwrap();
    let state = if end == End::CommittedByTakeover { TxState::Committed } else { TxState::RolledBack };
    assert_eq!((h.state, h.finished()), (state, true));
    assert!(h.needs_revisit() && h.revisit_at.is_some(), "a pass was left open: {h:?}");

    // The held write lands after the end: a trace nobody wrote.
    let mut landed = Vec::new();
    for _ in 0..50 {
        landed = locked(&env).await;
        if !landed.is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(landed.len(), 1, "the held lock write landed after the end ({end:?}, present {present})");
    assert_eq!(landed[0].get("_sagaTransient").is_some(), !present, "{landed:?}");
    assert_eq!(dynamo_saga::status::status(&env.store, &id).await.unwrap().revisit.unwrap().revisited_at_ms, None);

    // Before the bound, a sweep leaves it; after, it visits the transaction and clears it.
    let mut sweeper = dynamo_saga::sweeper::Sweeper::new(env.store.clone());
    sweeper.stale_after = std::time::Duration::ZERO;
    assert!(sweeper.sweep().await.unwrap().revisited.is_empty(), "not before the bound");
    tokio::time::sleep(BOUND).await;
    let r = sweeper.sweep().await.unwrap();
    assert_eq!(r.revisited.len(), 1, "{r:?}");
    assert_eq!(r.revisited[0].outcome, format!("1 of {ACTIONS} items cleared"));
    let status = dynamo_saga::status::status(&env.store, &id).await.unwrap();
    let revisit = status.revisit.expect("the visit shows in the status");
    assert!(revisit.due_at_ms.is_none() && revisit.revisited_at_ms.is_some() && revisit.cleared == 1, "{revisit:?}");

    let after = env.snapshot().await;
    if end == End::CommittedByTakeover {
        let applied = env.scan(&env.a).await;
        assert_eq!(applied.len(), ACTIONS);
        assert!(applied.values().all(|v| v["n"] == nv(1) && v.as_object().unwrap().len() == 2), "{applied:?}");
    } else {
        assert_eq!(after, before, "every item as it was, byte for byte, and no item that did not exist");
    }
    env.assert_clean().await;
    // Visited once: a second sweep finds nothing more to do.
    assert!(sweeper.sweep().await.unwrap().revisited.is_empty());
    harness::report(format!(
        "late lock write after the end ({}, items {}): landed after the end, cleared {} s after it, {ACTIONS} items \
         read",
        format!("{end:?}").to_lowercase(),
        if present { "present" } else { "absent" },
        BOUND.as_secs()
    ));
}

#[tokio::test]
async fn a_lock_write_landing_after_the_sweeper_rolled_back_its_transaction_leaves_no_item_once_the_bound_passed() {
    held_lock_write_after(End::RolledBackBySweeper, false).await;
}

#[tokio::test]
async fn a_lock_write_landing_after_the_sweeper_rolled_back_its_transaction_leaves_no_lock_once_the_bound_passed() {
    held_lock_write_after(End::RolledBackBySweeper, true).await;
}

#[tokio::test]
async fn a_lock_write_landing_after_a_takeover_committed_its_transaction_leaves_no_lock_once_the_bound_passed() {
    held_lock_write_after(End::CommittedByTakeover, true).await;
}

/// Only transactions that may have had writes in flight when they ended pay for a visit: one its own driver commits,
/// or cancels on a failed condition, with every answer in hand, is finished for good.
#[tokio::test]
async fn a_transaction_its_own_driver_ended_with_every_answer_is_not_visited_again() {
    let env = Env::new("late-none").await;
    let body = items(&env, "own", ACTIONS, true).await;
    let done = Coordinator::new(env.store.clone()).run(&body).await.expect("commits");
    let h = read_header(&env.store, &Meter::default(), &done.transaction_id).await.unwrap();
    assert!(h.finished() && !h.needs_revisit() && h.revisit_at.is_none(), "{h:?}");
    let mut refused = body.clone();
    refused["TransactItems"][ACTIONS - 1]["Update"]["ConditionExpression"] = json!("n = :none");
    refused["TransactItems"][ACTIONS - 1]["Update"]["ExpressionAttributeValues"][":none"] = nv(7);
    let id = match Coordinator::new(env.store.clone()).run(&refused).await {
        Err(TxError::Canceled(c)) => c.transaction_id.clone(),
        other => panic!("expected a cancellation: {other:?}"),
    };
    let h = read_header(&env.store, &Meter::default(), &id).await.unwrap();
    assert!(h.finished() && !h.needs_revisit() && h.revisit_at.is_none(), "{h:?}");
    env.assert_clean().await;
}

/// A write sent once (a lock write) that never left the client (no connection could be made: the endpoint listened
/// only a moment later) is sent again, and its answer is known: nothing of unknown outcome, so nothing to flag. A lock
/// write whose answer was lost after it was sent (the connection closed under it, the write delivered all the same: a
/// tenth of them here) is of unknown outcome: the transaction is flagged for the visit.
#[tokio::test]
async fn a_write_that_never_left_the_client_is_sent_again_and_flags_nothing() {
    use dynamo_saga::phase::lock;
    use dynamo_saga::store::{Once, Written};
    let env = Env::with("notsent", |c| dynamo_saga::Config { direct: false, ..c }).await;
    seed(&env, "ns").await;
    // A port nothing listens on until a moment later: every connection is refused until then.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let store = Store::from_conf(harness::conf_for(&format!("http://127.0.0.1:{port}")), (*env.store.cfg).clone());
    let later = tokio::spawn(async move {
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        tokio::task::spawn_blocking(move || {
            tokio::runtime::Handle::current().block_on(Proxy::start_args(&["--port", &port.to_string()]))
        })
        .await
        .unwrap()
    });
    let write = store
        .client
        .update_item()
        .table_name(&env.a)
        .set_key(Some(item_from_json(&key("ns", 0)).unwrap()))
        .update_expression("ADD n :one")
        .expression_attribute_values(":one", aws_sdk_dynamodb::types::AttributeValue::N("1".into()));
    let answer = store.update_once(&Meter::default(), write).await.expect("sent once the endpoint listens");
    assert!(matches!(answer, Once::Known(Written::Done(_))), "{answer:?}");
    let proxy = later.await.unwrap();
    assert_eq!(proxy.stats().await["writes"], json!(1), "the write went out once, when it could");
    assert_eq!(env.get(&env.a, key("ns", 0)).await.unwrap()["n"], nv(1));

    // A lock step through a proxy that loses a tenth of the lock writes' answers, delivering each write at once.
    let body = seed(&env, "lost").await;
    let id = begin::submit(&env.store, &body, None, None).await.unwrap().transaction_id;
    let lossy = Proxy::start_args(&["--lose", "0.1", "--lose-match", "_sagaLock"]).await;
    let store = Store::from_conf(harness::conf_for(&lossy.url), (*env.store.cfg).clone());
    lock::lock(&store, &id, 0).await.expect("locks");
    let h = read_header(&env.store, &Meter::default(), &id).await.unwrap();
    assert!(lossy.stats().await["lost"].as_u64().unwrap() > 0, "lock writes' answers lost");
    assert!(h.late_writes, "a lock write of unknown outcome flags the transaction: {h:?}");
    Coordinator::new(env.store.clone()).drive(&id).await.unwrap();
    for i in 0..ACTIONS {
        assert_eq!(env.get(&env.a, key("lost", i)).await.unwrap()["n"], nv(1), "lost-{i}");
    }
}
