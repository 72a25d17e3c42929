//! Snapshot reads (`dynamo_saga::snapshot`): any number of items, each as committed at one instant.
//!
//! - A bank of 150 accounts summed by snapshot reads while transfers of 2 to 130 accounts run (those over 99 through
//!   the protocol, the others in one call) and a plain writer outside the protocol bumps a counter: every snapshot
//!   that answers has the bank's total.
//! - A transaction of an update, a delete, an insert and a check, and one of 1,000 updates, each stopped between every
//!   two of its writes: a snapshot read of all its items sees it all before or all after.
//! - Answers as native `TransactGetItems` gives them (projections, absent items), at its price: two read units an
//!   item up to 4 KB, two passes; an item that keeps changing cancels the read with `TransactionConflict` on it alone.
//! - A bad request is refused naming the item, as native refuses it.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use aws_sdk_dynamodb::types::{AttributeValue, Get, TransactGetItem};
use dynamo_saga::records::TxState;
use dynamo_saga::snapshot::{self, Snapshot};
use dynamo_saga::store::{Meter, Pause};
use dynamo_saga::value::{item_from_json, item_to_json, Item};
use dynamo_saga::{Coordinator, TxError};
use harness::bank::{self, Driver, Params};
use harness::small::{items, request, state_of};
use harness::{nv, sv, Env};
use serde_json::{json, Value};

fn get(table: &str, pk: &str) -> Value {
    json!({"Get": {"TableName": table, "Key": {"pk": sv(pk)}}})
}

async fn read(env: &Env, gets: Vec<Value>) -> Result<Snapshot, TxError> {
    snapshot::transact_get_items(&env.store, &json!({ "TransactItems": gets })).await
}

/// How a read at a stop went: its passes, and whether it met locks (a call more than its passes' `BatchGetItem`s,
/// `calls_a_pass` each: a holder's header read).
fn how(s: &Snapshot, calls_a_pass: u64) -> String {
    let locks = if s.usage.calls > u64::from(s.passes) * calls_a_pass { " (locks met)" } else { "" };
    format!("{} passes{locks}", s.passes)
}

/// Each response's `v` (None: absent).
fn values(s: &Snapshot) -> Vec<Option<i64>> {
    let v = |i: &Item| match i.get("v") {
        Some(AttributeValue::N(n)) => n.parse().expect("a number v"),
        other => panic!("a number v, not {other:?}"),
    };
    s.responses.iter().map(|r| r.as_ref().map(v)).collect()
}

/// Snapshot reads of every account of a bank while transfers of up to 130 accounts run through the protocol: each one
/// answered has the bank's total. Rounds of transfers, each on a bank of its own, until the readers have answered four
/// snapshots while transfers ran (a read the transfers keep changing is cancelled with TransactionConflict).
#[tokio::test]
async fn a_bank_summed_by_snapshot_reads_while_transfers_run_always_has_its_total() {
    let (answered, conflicts, most_passes) = (AtomicUsize::new(0), AtomicUsize::new(0), AtomicUsize::new(0));
    let (mut rounds, mut committed) = (0, 0);
    while answered.load(Ordering::Relaxed) < 4 {
        assert!(rounds < 8, "{answered:?} snapshots answered in {rounds} rounds, {conflicts:?} cancelled");
        rounds += 1;
        let env = Env::new(&format!("snapbank{rounds}")).await;
        let p = Params {
            driver: Driver::Library,
            accounts: 150,
            workers: 4,
            transfers_per_worker: 6,
            min_k: 2,
            max_k: 130,
            plain_writers: 0,
            deadline_seconds: 120,
            seed: 55 + rounds,
        };
        bank::seed(&env, &p).await;
        let gets: Vec<Value> = (0..p.accounts).map(|i| get(&env.a, &bank::acct(i))).collect();
        let done = AtomicBool::new(false);
        let reader = || async {
            while !done.load(Ordering::Relaxed) {
                match read(&env, gets.clone()).await {
                    Ok(s) => {
                        let total: i64 = s
                            .responses
                            .iter()
                            .map(|r| {
                                let item = item_to_json(r.as_ref().expect("every account exists"));
                                item["bal"]["N"].as_str().unwrap().parse::<i64>().unwrap()
                            })
                            .sum();
                        assert_eq!(total, bank::START_BALANCE * p.accounts as i64, "a snapshot saw part of a transfer");
                        assert!(s.responses.iter().flatten().all(|i| i.keys().all(|k| !k.starts_with("_saga"))));
                        answered.fetch_add(1, Ordering::Relaxed);
                        most_passes.fetch_max(s.passes as usize, Ordering::Relaxed);
                    }
                    Err(TxError::Canceled(c)) => {
                        assert!(c.cancellation_reasons.iter().any(|r| r.code == "TransactionConflict"), "{c:?}");
                        conflicts.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => panic!("a snapshot read failed: {e}"),
                }
            }
        };
        let transfers = async {
            let o = bank::run(&env, &p).await;
            done.store(true, Ordering::Relaxed);
            o
        };
        let (o, _, _) = tokio::join!(transfers, reader(), reader());
        bank::check(&env, &p, &o).await;
        env.assert_clean().await;
        assert!(o.committed > 0);
        committed += o.committed;
    }
    harness::report(format!(
        "snapshot reads: {} snapshots of a 150-account bank while {committed} transfers of 2-130 accounts committed ({rounds} rounds), each with the bank's total ({} cancelled by TransactionConflict, at most {} passes)",
        answered.into_inner(),
        conflicts.into_inner(),
        most_passes.into_inner()
    ));
}

/// The protocol for every request, the one call turned off.
fn protocol(c: dynamo_saga::Config) -> dynamo_saga::Config {
    dynamo_saga::Config { direct: false, ..c }
}

#[tokio::test]
async fn a_snapshot_read_between_any_two_writes_of_a_transaction_sees_it_all_before_or_all_after() {
    let env = Env::with("snapstop", protocol).await;
    let seed = |tag: String| {
        let env = &env;
        async move {
            for (k, before, _) in items(&tag) {
                if let Some(v) = before {
                    env.put(&env.a, json!({"pk": sv(&k), "v": nv(v)})).await;
                }
            }
        }
    };
    seed("count".into()).await;
    let counter = harness::write_counter(&env.store);
    Coordinator::new(counter.clone()).run(&request(&env, "count")).await.unwrap();
    let total = counter.writes_sent().unwrap();
    let mut seen = std::collections::BTreeMap::new();
    for k in 0..=total {
        let tag = format!("s{k}");
        seed(tag.clone()).await;
        let body = request(&env, &tag);
        let first = Coordinator::new(env.store.crash_after(k)).run(&body).await;
        assert!(k == total || matches!(first, Err(TxError::InjectedFault(_))), "stop point {k}: {first:?}");
        let state = state_of(&env, &tag).await;
        let gets = items(&tag).iter().map(|(key, _, _)| get(&env.a, key)).collect();
        let s = read(&env, gets).await.unwrap_or_else(|e| panic!("stop point {k}: {e}"));
        let (before, after): (Vec<_>, Vec<_>) = items(&tag).iter().map(|i| (i.1, i.2)).unzip();
        let expected = if state == Some(TxState::Committed) { &after } else { &before };
        assert_eq!(&values(&s), expected, "stop point {k} ({state:?}): a snapshot saw part of the transaction");
        *seen.entry(format!("{state:?}, {}", how(&s, 1))).or_insert(0) += 1;
        Coordinator::new(env.store.clone()).run(&body).await.unwrap();
        let gets = items(&tag).iter().map(|(key, _, _)| get(&env.a, key)).collect();
        assert_eq!(values(&read(&env, gets).await.unwrap()), after, "stop point {k}: after the end");
    }
    // The stops met a pending transaction holding locks, and a committed one with items not applied yet, whose header
    // read between the passes settles them at the second: with nothing written during a read, every read took two.
    assert!(seen.contains_key("Some(Pending), 2 passes (locks met)"), "{seen:?}");
    assert!(seen.contains_key("Some(Committed), 2 passes (locks met)"), "{seen:?}");
    assert!(seen.keys().all(|k| k.ends_with(", 2 passes") || k.ends_with(", 2 passes (locks met)")), "{seen:?}");
    env.assert_clean().await;
    harness::report(format!(
        "snapshot reads: a 4-action transaction (update, delete, insert, check) stopped between every two of its {total} writes, read all before or all after at each: {}",
        seen.iter().map(|(k, n)| format!("{n} x {k}")).collect::<Vec<_>>().join(", ")
    ));
}

/// A snapshot of every item of a 1,000-update transaction at each stop (the transaction's state there, each item's
/// `v`, how the read went: its passes, whether it met locks).
type Stop = (u64, Option<TxState>, Result<(Vec<Option<i64>>, String), String>);

/// A transaction of 1,000 updates whose writer sends one write at a time and is stopped before each (so between every
/// two of its writes), while a snapshot read of all 1,000 items runs: each read sees it all before or all after.
#[tokio::test]
async fn a_snapshot_read_between_any_two_writes_of_a_1000_update_transaction_sees_it_all_before_or_all_after() {
    const N: usize = 1000;
    // A pass reads 100 keys a call.
    const CALLS_A_PASS: u64 = 10;
    let env = Env::with("snapbig", protocol).await;
    harness::put_all(&env.client, &env.a, (0..N).map(|i| json!({"pk": sv(&format!("big-{i:04}")), "v": nv(0)}))).await;
    let gets: Vec<Value> = (0..N).map(|i| get(&env.a, &format!("big-{i:04}"))).collect();
    // The request checked once (its table's schema read then), each stop's read from there: its calls are the read's.
    let gets = snapshot::validate(&env.store, &Meter::default(), &json!({ "TransactItems": gets })).await.unwrap();
    let read = || async { snapshot::read(&env.store, &Meter::default(), &gets).await };
    let items: Vec<Value> = (0..N)
        .map(|i| json!({"Update": {"TableName": env.a, "Key": {"pk": sv(&format!("big-{i:04}"))}, "UpdateExpression": "SET v = :next",
            "ConditionExpression": "v = :now", "ExpressionAttributeValues": {":now": nv(0), ":next": nv(1)}}}))
        .collect();
    let body = json!({"ClientRequestToken": "big", "TransactItems": items});
    // The writer, in a task of its own, asks before each write for the read at that stop and waits for its end.
    let (ask, mut asked) = tokio::sync::mpsc::unbounded_channel::<(u64, tokio::sync::oneshot::Sender<()>)>();
    let waiting = Arc::new(AtomicUsize::new(0));
    let stop_at = {
        let waiting = waiting.clone();
        move |k: u64| {
            let (ask, waiting) = (ask.clone(), waiting.clone());
            let stopped: futures::future::BoxFuture<'static, ()> = Box::pin(async move {
                let (done, read) = tokio::sync::oneshot::channel();
                waiting.fetch_add(1, Ordering::SeqCst);
                if ask.send((k, done)).is_ok() {
                    let _ = read.await;
                }
                waiting.fetch_sub(1, Ordering::SeqCst);
            });
            stopped
        }
    };
    let writer = env.store.pausing(Pause(Arc::new(stop_at)));
    assert_eq!((writer.pace().limit(), writer.cfg.concurrency, writer.cfg.fan_out), (1, 1, 1), "one write at a time");
    let mut run = tokio::spawn({
        let (writer, body) = (writer.clone(), body.clone());
        async move { Coordinator::new(writer).run(&body).await }
    });
    let mut stops: Vec<Stop> = Vec::new();
    let ended = loop {
        tokio::select! {
            Some((k, done)) = asked.recv() => {
                let state = state_of(&env, "big").await;
                let s = match read().await {
                    _ if waiting.load(Ordering::SeqCst) != 1 => Err("another write stopped at once: two in flight".into()),
                    Ok(s) => Ok((values(&s), how(&s, CALLS_A_PASS))),
                    Err(e) => Err(e.to_string()),
                };
                stops.push((k, state, s));
                let _ = done.send(());
            }
            ended = &mut run => break ended.expect("the writer's task"),
        }
    };
    ended.unwrap();
    let total = writer.writes_sent().unwrap();
    let end = read().await.map(|s| (values(&s), how(&s, CALLS_A_PASS))).map_err(|e| e.to_string());
    stops.push((total, state_of(&env, "big").await, end));
    assert_eq!(stops.iter().map(|s| s.0).collect::<Vec<_>>(), (0..=total).collect::<Vec<_>>(), "a read at every stop");
    let mut seen = std::collections::BTreeMap::new();
    for (k, state, read) in &stops {
        let (values, how) = read.as_ref().unwrap_or_else(|e| panic!("stop point {k} ({state:?}): {e}"));
        let expected = i64::from(*state == Some(TxState::Committed));
        let wrong = values.iter().filter(|v| **v != Some(expected)).count();
        assert_eq!(wrong, 0, "stop point {k} of {total} ({state:?}): {wrong} of {N} items not at {expected}");
        *seen.entry(format!("{state:?}, {how}")).or_insert(0) += 1;
    }
    // The stops met the transaction before it began, pending with locks taken, and committed with items not applied
    // yet, whose header read between the passes settles them at the second: every read took two.
    assert!(seen.keys().any(|k| k.starts_with("None")), "{seen:?}");
    assert!(seen.contains_key("Some(Pending), 2 passes (locks met)"), "{seen:?}");
    assert!(seen.contains_key("Some(Committed), 2 passes (locks met)"), "{seen:?}");
    assert!(seen.keys().all(|k| k.ends_with(", 2 passes") || k.ends_with(", 2 passes (locks met)")), "{seen:?}");
    env.assert_clean().await;
    harness::report(format!(
        "snapshot reads: a 1,000-update transaction stopped between every two of its {total} writes, all 1,000 items read all before or all after at each: {}",
        seen.iter().map(|(k, n)| format!("{n} x {k}")).collect::<Vec<_>>().join(", ")
    ));
}

/// Native `TransactGetItems` of the same `Get`s, as the SDK returns it.
async fn native(env: &Env, gets: &[Value]) -> Vec<Option<Value>> {
    let items: Vec<TransactGetItem> = gets
        .iter()
        .map(|g| {
            let g = &g["Get"];
            let names = g["ExpressionAttributeNames"].as_object().map(|m| {
                m.iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
                    .collect::<std::collections::HashMap<_, _>>()
            });
            let get = Get::builder()
                .table_name(g["TableName"].as_str().unwrap())
                .set_key(Some(item_from_json(&g["Key"]).unwrap()))
                .set_projection_expression(g["ProjectionExpression"].as_str().map(String::from))
                .set_expression_attribute_names(names)
                .build()
                .unwrap();
            TransactGetItem::builder().get(get).build()
        })
        .collect();
    let out = env.client.transact_get_items().set_transact_items(Some(items)).send().await.unwrap();
    // Without dynamo-saga's attributes, which a snapshot read leaves out as every read of the library does: the id of
    // the transaction that last wrote an item is on it for anyone who reads it natively.
    out.responses()
        .iter()
        .map(|r| r.item().map(|i| item_to_json(&dynamo_saga::item_attrs::strip_reserved(i.clone()))))
        .collect()
}

#[tokio::test]
async fn a_snapshot_read_answers_as_transact_get_items_does() {
    let env = Env::new("snapnative").await;
    let item = |i: usize| {
        json!({"pk": sv(&format!("n-{i}")), "v": nv(i as i64), "year": nv(2026), "tags": {"L": [sv("a"), sv("b"), sv("c")]},
               "m": {"M": {"x": sv("1"), "y": {"M": {"z": {"BOOL": true}}}}}})
    };
    for i in 0..40 {
        env.put(&env.a, item(i)).await;
    }
    // Written by a transaction too: its id on the items, which neither answer shows.
    let updates: Vec<Value> = (0..20)
        .map(|i| json!({"Update": {"TableName": env.a, "Key": {"pk": sv(&format!("n-{i}"))}, "UpdateExpression": "SET w = :w",
            "ExpressionAttributeValues": {":w": nv(1)}}}))
        .collect();
    Coordinator::new(env.store.clone()).run(&json!({"TransactItems": updates})).await.unwrap();
    let projections = [
        None,
        Some(("v, tags[2], tags[0], m.y.z, #y", json!({"#y": "year"}))),
        Some(("m.x, nothing, tags[7]", json!({}))),
        Some(("w", json!({}))),
    ];
    let mut gets = Vec::new();
    for i in 0..50 {
        let mut g = get(&env.a, &format!("n-{i}"));
        if let Some((p, names)) = &projections[i % projections.len()] {
            g["Get"]["ProjectionExpression"] = json!(p);
            if !names.as_object().unwrap().is_empty() {
                g["Get"]["ExpressionAttributeNames"] = names.clone();
            }
        }
        gets.push(g);
    }
    let ours = read(&env, gets.clone()).await.unwrap();
    let theirs = native(&env, &gets).await;
    let ours: Vec<Option<Value>> = ours.responses.iter().map(|r| r.as_ref().map(item_to_json)).collect();
    assert_eq!(ours.len(), 50);
    assert_eq!(ours.iter().filter(|r| r.is_none()).count(), 10, "the absent items");
    for (i, (a, b)) in ours.iter().zip(&theirs).enumerate() {
        assert_eq!(a, b, "TransactItems[{i}]: {}", gets[i]);
    }
}

#[tokio::test]
async fn a_snapshot_read_costs_two_read_units_an_item_in_two_passes() {
    let env = Env::new("snapcost").await;
    let filler = "x".repeat(900);
    harness::put_all(
        &env.client,
        &env.a,
        (0..1000).map(|i| json!({"pk": sv(&format!("c-{i:04}")), "v": nv(1), "f": sv(&filler)})),
    )
    .await;
    let gets: Vec<Value> = (0..1000).map(|i| get(&env.a, &format!("c-{i:04}"))).collect();
    let first = read(&env, gets.clone()).await.unwrap();
    assert_eq!(first.usage.calls, 21, "DescribeTable once, the first time a store reads the table");
    let s = read(&env, gets).await.unwrap();
    assert_eq!(s.passes, 2);
    assert_eq!(s.usage.calls, 20, "ten BatchGetItem calls of 100 keys a pass");
    assert_eq!(s.usage.writes, 0);
    assert!((s.usage.read_units - 2000.0).abs() < 1e-6, "{} read units", s.usage.read_units);
    harness::report(format!(
        "snapshot reads: 1,000 items of about 1 KB read in {} passes, {} calls, {} read units (native TransactGetItems: 2 an item)",
        s.passes, s.usage.calls, s.usage.read_units
    ));
}

/// Writers outside the protocol change one item of ten without pause: a read that finds it changed at every pass is
/// cancelled with TransactionConflict on that item alone. Two passes can still fall between two of its writes, and
/// then the read answers (with one instant's values): up to five reads, until one is cancelled.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_item_that_keeps_changing_cancels_the_read_with_transaction_conflict_on_it_alone() {
    let env = Env::new("snapconflict").await;
    for i in 0..10 {
        env.put(&env.a, json!({"pk": sv(&format!("h-{i}")), "v": nv(0)})).await;
    }
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..4)
        .map(|_| {
            let (client, table, stop) = (env.client.clone(), env.a.clone(), stop.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    client
                        .update_item()
                        .table_name(&table)
                        .key("pk", AttributeValue::S("h-3".into()))
                        .update_expression("ADD v :one")
                        .expression_attribute_values(":one", AttributeValue::N("1".into()))
                        .send()
                        .await
                        .unwrap();
                }
            })
        })
        .collect();
    let gets: Vec<Value> = (0..10).map(|i| get(&env.a, &format!("h-{i}"))).collect();
    let mut results = Vec::new();
    for _ in 0..5 {
        let result = read(&env, gets.clone()).await;
        let cancelled = result.is_err();
        results.push(result);
        if cancelled {
            break;
        }
    }
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.await.unwrap();
    }
    let Some(Err(TxError::Canceled(c))) = results.pop() else { panic!("every read answered: {results:?}") };
    for answered in results {
        let values = values(&answered.unwrap());
        assert!(values.iter().enumerate().all(|(i, v)| i == 3 || *v == Some(0)), "{values:?}");
    }
    let codes: Vec<&str> = c.cancellation_reasons.iter().map(|r| r.code.as_str()).collect();
    let mut expected = vec!["None"; 10];
    expected[3] = "TransactionConflict";
    assert_eq!(codes, expected);
    assert!(c.message.contains("[None, None, None, TransactionConflict"), "{}", c.message);
}

#[tokio::test]
async fn a_bad_snapshot_request_is_refused_naming_the_item() {
    let env = Env::new("snapbad").await;
    let ok = get(&env.a, "k");
    let b_key = |k: Value| json!({"Get": {"TableName": env.b, "Key": k}});
    let cases: Vec<(Value, &str)> = vec![
        (json!({"TransactItems": []}), "at least one item"),
        (json!({"TransactItems": [ok]}), ""),
        (
            json!({"TransactItems": [ok, {"Put": {"TableName": env.a, "Item": {"pk": sv("k")}}}]}),
            "TransactItems[1].Get: each of TransactItems must have exactly one member, Get",
        ),
        (
            json!({"TransactItems": [ok, get("t-not-allowed", "k")]}),
            "TransactItems[1].Get: table \"t-not-allowed\" is not in the allowed tables",
        ),
        (
            json!({"TransactItems": [ok, {"Get": {"TableName": env.a, "Key": {"pk": nv(1)}}}]}),
            "TransactItems[1].Get: Key: the provided key element does not match the schema",
        ),
        (
            json!({"TransactItems": [ok, {"Get": {"TableName": env.a, "Key": {"id": sv("k")}}}]}),
            "TransactItems[1].Get: Key: the provided key element does not match the schema",
        ),
        (
            json!({"TransactItems": [b_key(json!({"pk": sv("k")}))]}),
            "TransactItems[0].Get: Key: the provided key element does not match the schema",
        ),
        (
            json!({"TransactItems": [ok, get(&env.a, "k")]}),
            "TransactItems[1].Get: Transaction request cannot include multiple operations on one item",
        ),
        (
            json!({"TransactItems": [ok, {"Get": {"TableName": env.a, "Key": {"pk": sv("j")}, "ProjectionExpression": "a, a.b"}}]}),
            "TransactItems[1].Get: ProjectionExpression",
        ),
        (
            json!({"TransactItems": [ok, {"Get": {"TableName": env.a, "Key": {"pk": sv("j")}, "ProjectionExpression": "a", "ExpressionAttributeNames": {"#b": "b"}}}]}),
            "unused in expressions: keys: {#b}",
        ),
        (
            json!({"TransactItems": [ok, {"Get": {"TableName": env.a, "Key": {"pk": sv("j")}, "ProjectionExpression": "#c"}}]}),
            "attribute name: #c",
        ),
        (
            json!({"TransactItems": [ok, {"Get": {"TableName": env.a, "Key": {"pk": sv("j")}, "ProjectionExpression": "_sagaTx"}}]}),
            "reserved for dynamo-saga",
        ),
        (json!({"TransactItems": [ok], "Options": {}}), "unknown field \"Options\""),
    ];
    for (request, says) in cases {
        let r = snapshot::transact_get_items(&env.store, &request).await;
        if says.is_empty() {
            assert!(r.is_ok(), "{request}: {r:?}");
            continue;
        }
        let e = r.expect_err(&request.to_string());
        assert_eq!(e.name(), "ValidationError", "{request}: {e}");
        assert!(e.to_string().contains(says), "{request}: {e}");
    }
    // A table that does not exist, allowed or not.
    let gone = Env::with("snapgone", |c| c.with_allowed_tables(["t-snap-gone"])).await;
    let e = snapshot::transact_get_items(&gone.store, &json!({"TransactItems": [get("t-snap-gone", "k")]}))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("TransactItems[0].Get: table \"t-snap-gone\" does not exist"), "{e}");
}

/// In one call and through the protocol: a transaction's `Put` and `Update` leave its id on the item, a rollback the
/// id before, and an item DynamoDB would refuse with the id (one of exactly 400 KB) is written as native writes it.
#[tokio::test]
async fn every_write_of_a_transaction_leaves_its_id_and_a_rollback_leaves_the_one_before() {
    for (env, how) in [(Env::new("snapid1").await, "one call"), (Env::with("snapid", protocol).await, "the protocol")] {
        env.put(&env.a, json!({"pk": sv("u"), "v": nv(1)})).await;
        env.put(&env.a, json!({"pk": sv("c"), "v": nv(1)})).await;
        let body = |v: i64, check: i64| {
            json!({"TransactItems": [
                {"Update": {"TableName": env.a, "Key": {"pk": sv("u")}, "UpdateExpression": "SET v = :v", "ExpressionAttributeValues": {":v": nv(v)}}},
                {"Put": {"TableName": env.a, "Item": {"pk": sv("p"), "v": nv(v)}}},
                {"ConditionCheck": {"TableName": env.a, "Key": {"pk": sv("c")}, "ConditionExpression": "v = :c", "ExpressionAttributeValues": {":c": nv(check)}}},
            ]})
        };
        let id = Coordinator::new(env.store.clone()).run(&body(2, 1)).await.unwrap().transaction_id;
        let by = |k: &'static str| {
            let env = &env;
            async move { env.get_raw(&env.a, json!({"pk": sv(k)})).await.unwrap()["_sagaTx"].clone() }
        };
        assert_eq!(by("u").await, sv(&id), "{how}: the update");
        assert_eq!(by("p").await, sv(&id), "{how}: the put");
        assert_eq!(by("c").await, Value::Null, "{how}: a check writes nothing");
        let e = Coordinator::new(env.store.clone()).run(&body(3, 9)).await.unwrap_err();
        assert_eq!(e.name(), "TransactionCanceled", "{how}");
        assert_eq!(
            (by("u").await, by("p").await),
            (sv(&id), sv(&id)),
            "{how}: a rollback leaves the items as they were"
        );
        assert_eq!(env.get(&env.a, json!({"pk": sv("u")})).await.unwrap(), json!({"pk": sv("u"), "v": nv(2)}));
        // An item of exactly 400 KB, which DynamoDB takes from native and refuses with the id: written without it.
        let filler = "x".repeat(400 * 1024 - "pk".len() - "full".len() - "d".len());
        let full = json!({"pk": sv("full"), "d": sv(&filler)});
        let put = json!({"TransactItems": [{"Put": {"TableName": env.a, "Item": full}}, {"Put": {"TableName": env.a, "Item": {"pk": sv("small")}}}]});
        let id = Coordinator::new(env.store.clone()).run(&put).await.unwrap().transaction_id;
        assert_eq!(env.get_raw(&env.a, json!({"pk": sv("full")})).await.unwrap(), full, "{how}: the full item as put");
        assert_eq!(by("small").await, sv(&id), "{how}: the other item has the id");
        env.assert_clean().await;
    }
}
