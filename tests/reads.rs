//! Reads at each isolation level while a transaction is stopped at every point between two of its writes: a
//! committed read sees every item as it was before the transaction or, once it committed, as it leaves them, never
//! in between; an uncommitted read may see an applied value that is not committed; neither sees an item that exists
//! only to hold a lock. Writers outside the protocol that use the unlocked condition never overwrite a locked item.

use dynamo_saga::config::CommittedReads;
use dynamo_saga::constants::ATTR_LOCK;
use dynamo_saga::read::{self, Isolation};
use dynamo_saga::records::{read_header, TxState};
use dynamo_saga::store::Meter;
use dynamo_saga::value::{item_from_json, item_to_json};
use dynamo_saga::{Coordinator, TxError};
use harness::small::{items, request, state_of};
use harness::{nv, sv, Env};
use serde_json::{json, Value};

async fn seed(env: &Env, tag: &str) {
    for (k, before, _) in items(tag) {
        if let Some(v) = before {
            env.put(&env.a, json!({"pk": sv(&k), "v": nv(v)})).await;
        }
    }
}

/// The `v` of every item of `tag` as `isolation` reads it, one at a time and in one batch.
async fn read_all(env: &Env, tag: &str, isolation: Isolation) -> Vec<Option<i64>> {
    let keys: Vec<_> =
        items(tag).into_iter().map(|(k, _, _)| item_from_json(&json!({"pk": sv(&k)})).unwrap()).collect();
    let mut one_by_one = Vec::new();
    for k in &keys {
        let item = read::get_item(&env.store, &env.a, k.clone(), isolation).await.unwrap();
        if let Some(i) = &item {
            assert!(
                i.keys().all(|n| !n.starts_with('_')),
                "a read returned a reserved attribute: {:?}",
                item_to_json(i)
            );
        }
        one_by_one.push(item.map(|i| item_to_json(&i)["v"]["N"].as_str().unwrap().parse().unwrap()));
    }
    let batch = read::batch_get_item(&env.store, &env.a, keys.clone(), isolation).await.unwrap();
    for (k, v) in keys.iter().zip(&one_by_one) {
        let found = batch
            .iter()
            .find(|i| i.get("pk") == k.get("pk"))
            .map(|i| item_to_json(i)["v"]["N"].as_str().unwrap().parse::<i64>().unwrap());
        assert_eq!(&found, v, "BatchGetItem and GetItem disagree on {k:?}");
    }
    one_by_one
}

/// The protocol: the request's 4 actions run through it, one call turned off.
fn protocol(c: dynamo_saga::Config) -> dynamo_saga::Config {
    dynamo_saga::Config { direct: false, ..c }
}

#[tokio::test]
async fn committed_reads_see_before_or_after_and_never_in_between() {
    committed_reads(Env::with("reads", protocol).await, "the protocol").await;
}

/// The same request as the library runs it, in one call: no stop point shows anything but before or after.
#[tokio::test]
async fn committed_reads_of_a_request_carried_out_in_one_call() {
    // Multi-Region strongly consistent tables have no one-call path: the library runs the request by the protocol.
    let how = if harness::strong_multi_region().is_some() { "as the library runs it" } else { "one call" };
    committed_reads(Env::new("reads1").await, how).await;
}

/// Committed reads that apply a committed transaction's write to the item before reading it
/// (`SAGA_COMMITTED_READS=apply`): the same stop points read before or after, never in between, and a read of an item
/// committed but not applied yet leaves it applied, which the coordinator that finishes the transaction finds done.
#[tokio::test]
async fn committed_reads_that_apply_first_see_before_or_after_and_never_in_between() {
    let env =
        Env::with("readsapply", |c| dynamo_saga::Config { committed_reads: CommittedReads::Apply, ..protocol(c) })
            .await;
    committed_reads(env, "the protocol, reads applying first").await;
}

/// Whether the updated item of `tag` carries a lock.
async fn locked(env: &Env, tag: &str) -> bool {
    let raw = env.get(&env.a, json!({"pk": sv(&format!("{tag}-upd"))})).await;
    raw.is_some_and(|i| i.get(ATTR_LOCK).is_some())
}

async fn committed_reads(env: Env, how: &str) {
    let helping = env.store.cfg.committed_reads == CommittedReads::Apply;
    let mut helped = 0;
    seed(&env, "count").await;
    let counter = harness::write_counter(&env.store);
    Coordinator::new(counter.clone()).run(&request(&env, "count")).await.unwrap();
    let total = counter.writes_sent().unwrap();
    let (mut in_between, mut decided_not_done) = (0, 0);
    // Stopped before each write, and after the last.
    for k in 0..=total {
        let tag = format!("k{k}");
        seed(&env, &tag).await;
        let body = request(&env, &tag);
        let first = Coordinator::new(env.store.crash_after(k)).run(&body).await;
        assert!(k == total || matches!(first, Err(TxError::InjectedFault(_))), "crash point {k}: {first:?}");
        let state = state_of(&env, &tag).await;
        let before: Vec<Option<i64>> = items(&tag).iter().map(|i| i.1).collect();
        let after: Vec<Option<i64>> = items(&tag).iter().map(|i| i.2).collect();
        let committed_unapplied = state == Some(TxState::Committed) && locked(&env, &tag).await;
        let committed = read_all(&env, &tag, Isolation::Committed).await;
        if helping && committed_unapplied {
            assert!(!locked(&env, &tag).await, "crash point {k}: a committed read leaves the item it read applied");
            helped += 1;
        }
        let expected = if state == Some(TxState::Committed) { &after } else { &before };
        assert_eq!(&committed, expected, "crash point {k} ({state:?}): a committed read saw a value in between");
        let uncommitted = read_all(&env, &tag, Isolation::Uncommitted).await;
        if uncommitted != committed {
            in_between += 1;
        }
        if state == Some(TxState::Committed)
            && env.get(&env.a, json!({"pk": sv(&format!("{tag}-del"))})).await.is_some()
        {
            decided_not_done += 1;
        }
        // A second coordinator finishes it; then both levels read the result.
        Coordinator::new(env.store.clone()).run(&body).await.unwrap();
        assert_eq!(read_all(&env, &tag, Isolation::Committed).await, after, "crash point {k}: after the end");
        assert_eq!(read_all(&env, &tag, Isolation::Uncommitted).await, after);
    }
    if env.store.cfg.direct {
        // One call with its header: nothing is ever applied before it commits, or committed before it is applied.
        assert_eq!((total, in_between, decided_not_done), (2, 0, 0), "the token, then the call");
    } else if helping {
        // Every committed item a read met unapplied, it applied: after it, both levels agree.
        assert!(helped > 0, "no stop point between the commit and the apply");
        assert_eq!((in_between, decided_not_done), (0, 0));
    } else {
        // The stops covered applied-but-uncommitted states (where the two levels differ) and a committed delete not
        // yet carried out (which a committed read already reports absent).
        assert!(in_between > 0 && decided_not_done > 0, "{in_between} {decided_not_done}");
    }
    env.assert_clean().await;
    harness::report(format!(
        "committed reads ({how}): {} stop points, 0 reads between before and after; uncommitted reads differed at {in_between}",
        total + 1
    ));
}

#[tokio::test]
async fn a_rolled_back_transaction_reads_as_before_and_queries_resolve_item_by_item() {
    let env = Env::new("readsrb").await;
    seed(&env, "r").await;
    // Fail the transaction at apply, after the update was applied: an ADD to a string item, which only DynamoDB
    // rejects (apply then writes the batch's actions one at a time to find it).
    env.put(&env.a, json!({"pk": sv("r-str"), "v": sv("text")})).await;
    let mut body = request(&env, "r");
    body["TransactItems"]
        .as_array_mut()
        .unwrap()
        .push(json!({"Update": {"TableName": env.a, "Key": {"pk": sv("r-str")},
        "UpdateExpression": "ADD v :one", "ExpressionAttributeValues": {":one": nv(1)}}}));
    let before = read_all(&env, "r", Isolation::Committed).await;
    harness::canceled(Coordinator::new(env.store.clone()).run(&body).await);
    assert_eq!(read_all(&env, "r", Isolation::Committed).await, before);
    assert_eq!(read_all(&env, "r", Isolation::Uncommitted).await, before);

    // Query: the items it returns, resolved one by one.
    let q = env
        .client
        .query()
        .table_name(&env.a)
        .key_condition_expression("pk = :k")
        .expression_attribute_values(":k", dynamo_saga::value::s("r-upd"))
        .send()
        .await
        .unwrap();
    let seen = read::resolve_all(&env.store, &env.a, q.items.unwrap_or_default(), Isolation::Committed).await.unwrap();
    assert_eq!(seen.len(), 1);
    assert_eq!(item_to_json(&seen[0])["v"], nv(1));
}

#[tokio::test]
async fn writers_outside_the_protocol_that_use_the_unlocked_condition_never_overwrite_a_locked_item() {
    let env = Env::with("readslock", protocol).await;
    seed(&env, "w").await;
    // Stop the transaction with its update locked and nothing applied yet.
    let mut k = 0;
    loop {
        let tag = format!("w{k}");
        seed(&env, &tag).await;
        let b = request(&env, &tag);
        let _ = Coordinator::new(env.store.crash_after(k)).run(&b).await;
        let upd = env.get(&env.a, json!({"pk": sv(&format!("{tag}-upd"))})).await.unwrap();
        if upd.get("_sagaLock").is_some() {
            let (cond, (name, attr)) = read::unlocked_condition();
            let plain = env
                .client
                .update_item()
                .table_name(&env.a)
                .set_key(Some(item_from_json(&json!({"pk": sv(&format!("{tag}-upd"))})).unwrap()))
                .update_expression("SET v = :x")
                .condition_expression(cond)
                .expression_attribute_names(name, attr)
                .expression_attribute_values(":x", dynamo_saga::value::n(100))
                .send()
                .await;
            assert!(
                plain.is_err_and(|e| e.into_service_error().is_conditional_check_failed_exception()),
                "a plain write went through a lock"
            );
            // Locked, not applied: a committed read returns the item as it is.
            assert_eq!(read_all(&env, &tag, Isolation::Committed).await, vec![Some(1), Some(1), None, Some(1)]);
            Coordinator::new(env.store.clone()).run(&b).await.unwrap();
            break;
        }
        // Not there yet: finish this one (same ClientRequestToken) and stop the next one a write later.
        Coordinator::new(env.store.clone()).run(&b).await.unwrap();
        k += 1;
        assert!(k < 50, "no stop point with the update locked");
    }
    env.assert_clean().await;
}

fn keys_of(env: &Env, tag: &str) -> Vec<(String, dynamo_saga::value::Item)> {
    items(tag).into_iter().map(|(k, _, _)| (env.a.clone(), item_from_json(&json!({"pk": sv(&k)})).unwrap())).collect()
}

fn values(items: &[Option<dynamo_saga::value::Item>]) -> Vec<Option<i64>> {
    items.iter().map(|i| i.as_ref().map(|i| item_to_json(i)["v"]["N"].as_str().unwrap().parse().unwrap())).collect()
}

async fn state(env: &Env, id: &str) -> (TxState, bool) {
    let h = read_header(&env.store, &Meter::default(), id).await.unwrap();
    (h.state, h.finished())
}

/// A read lock reads every item at one moment, holds writers off while it is held (a plain writer's unlocked
/// condition fails, a newer transaction waits), and ends by rolling back, which changes nothing.
#[tokio::test]
async fn a_read_lock_holds_writers_off_and_always_rolls_back() {
    let env = Env::new("readlock").await;
    seed(&env, "l").await;
    let coord = Coordinator::new(env.store.clone());
    let lock = read::lock_for_read(coord.store(), keys_of(&env, "l"), None).await.unwrap();
    assert_eq!(values(&lock.items), vec![Some(1), Some(1), None, Some(1)]);
    assert!(lock.held().await.unwrap());
    let id = lock.transaction_id.clone();

    let (cond, (name, attr)) = read::unlocked_condition();
    let plain = env
        .client
        .update_item()
        .table_name(&env.a)
        .set_key(Some(item_from_json(&json!({"pk": sv("l-chk")})).unwrap()))
        .update_expression("SET v = :x")
        .condition_expression(cond)
        .expression_attribute_names(name, attr)
        .expression_attribute_values(":x", dynamo_saga::value::n(100))
        .send()
        .await;
    assert!(
        plain.is_err_and(|e| e.into_service_error().is_conditional_check_failed_exception()),
        "a plain write went through a read lock"
    );

    let (writing, body) = (Coordinator::new(env.store.clone()), request(&env, "l"));
    let writer = writing.run(&body);
    let reader = async {
        tokio::time::sleep(std::time::Duration::from_millis(800)).await;
        // The newer writer is still waiting: nothing it asked for has happened.
        assert_eq!(read_all(&env, "l", Isolation::Uncommitted).await, vec![Some(1), Some(1), None, Some(1)]);
        assert!(lock.refresh().await.unwrap());
        lock.release().await.unwrap();
    };
    let (w, ()) = tokio::join!(writer, reader);
    w.expect("the writer commits once the read lock is released");
    assert_eq!(state(&env, &id).await, (TxState::RolledBack, true));
    assert_eq!(read_all(&env, "l", Isolation::Committed).await, vec![Some(9), None, Some(7), Some(1)]);
    env.assert_clean().await;
}

/// A read lock is a transaction like any other: an older transaction that needs its items rolls it back.
#[tokio::test]
async fn an_older_transaction_rolls_a_read_lock_back() {
    let env = Env::new("readlockold").await;
    seed(&env, "o").await;
    let older = dynamo_saga::phase::begin::begin(&env.store, &request(&env, "o")).await.unwrap().transaction_id;
    tokio::time::sleep(std::time::Duration::from_millis(3)).await;
    let coord = Coordinator::new(env.store.clone());
    let lock = read::lock_for_read(coord.store(), keys_of(&env, "o"), None).await.unwrap();
    assert!(lock.transaction_id > older);
    coord.drive(&older).await.expect("the older transaction commits");
    assert!(!lock.held().await.unwrap(), "the read lock was rolled back");
    assert!(!lock.refresh().await.unwrap());
    let id = lock.transaction_id.clone();
    lock.release().await.unwrap();
    assert_eq!(state(&env, &id).await, (TxState::RolledBack, true));
    assert_eq!(read_all(&env, "o", Isolation::Committed).await, vec![Some(9), None, Some(7), Some(1)]);
    env.assert_clean().await;
}

/// Reading at `read-lock` while an older transaction has locked and checked its items but not committed: both other
/// levels read the items as they were (nothing is applied before the commit), the read lock waits for the
/// transaction and returns what it committed.
#[tokio::test]
async fn a_read_lock_read_waits_for_a_pending_transaction_and_returns_what_it_committed() {
    use dynamo_saga::phase::resume::Step;
    let env = Env::new("readlockwait").await;
    seed(&env, "p").await;
    let id = dynamo_saga::phase::begin::begin(&env.store, &request(&env, "p")).await.unwrap().transaction_id;
    let (_, step) = harness::run_steps_until(&env.store, &id, |_, step| *step == Step::Commit).await;
    assert_eq!(step, Step::Commit);
    assert_eq!(read_all(&env, "p", Isolation::Committed).await, vec![Some(1), Some(1), None, Some(1)]);
    assert_eq!(read_all(&env, "p", Isolation::Uncommitted).await, vec![Some(1), Some(1), None, Some(1)]);
    let key = item_from_json(&json!({"pk": sv("p-upd")})).unwrap();
    let (read, done) = tokio::join!(read::get_item(&env.store, &env.a, key, Isolation::ReadLock), async {
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        Coordinator::new(env.store.clone()).drive(&id).await
    });
    done.expect("the transaction commits");
    assert_eq!(values(&[read.unwrap()]), vec![Some(9)]);
    assert_eq!(read_all(&env, "p", Isolation::ReadLock).await, vec![Some(9), None, Some(7), Some(1)]);
    let q = env
        .client
        .query()
        .table_name(&env.a)
        .key_condition_expression("pk = :k")
        .expression_attribute_values(":k", dynamo_saga::value::s("p-new"))
        .send()
        .await
        .unwrap();
    let seen = read::resolve_all(&env.store, &env.a, q.items.unwrap_or_default(), Isolation::ReadLock).await.unwrap();
    assert_eq!(values(&seen.into_iter().map(Some).collect::<Vec<_>>()), vec![Some(7)]);
    env.assert_clean().await;
}

/// A batch read resolves the items one transaction holds with one read of its header, so they are all seen at the
/// state that read found: 40 items locked by one pending transaction cost one `GetItem` of its header, not 40.
#[tokio::test]
async fn a_batch_read_reads_the_header_of_a_holder_once() {
    let env = Env::with("readsholder", protocol).await;
    let (keys, items) = harness::workload::counters(&env, "h", 40, None).await;
    let id =
        dynamo_saga::phase::begin::begin(&env.store, &json!({ "TransactItems": items })).await.unwrap().transaction_id;
    dynamo_saga::phase::lock::lock(&env.store, &id, 0).await.unwrap();
    for k in [&keys[0], &keys[39]] {
        let raw = env.get(&env.a, json!({"pk": sv(k)})).await.unwrap();
        assert!(raw.get(ATTR_LOCK).is_some(), "{k} locked: {raw}");
    }

    let tracer = harness::trips::Tracer::default();
    let store = harness::trips::traced_store(&env, &tracer, env.store.cfg.concurrency);
    let keys: Vec<_> = keys.iter().map(|k| item_from_json(&json!({"pk": sv(k)})).unwrap()).collect();
    let seen = read::batch_get_item(&store, &env.a, keys, Isolation::Committed).await.unwrap();
    let values: Vec<Value> = seen.iter().map(|i| item_to_json(i)["n"].clone()).collect();
    assert_eq!(values, vec![nv(0); 40], "every item as it was before the pending transaction");
    let gets = tracer.traced().iter().filter(|t| t.operation == "GetItem").count();
    assert_eq!(gets, 1, "one read of the holder's header");
}
