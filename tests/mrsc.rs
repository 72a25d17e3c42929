//! Multi-Region tables: transactions on multi-Region strongly consistent (MRSC) global tables, which take no
//! `TransactWriteItems`, through an MRSC stand-in (`tools/ddb-proxy.mjs --mrsc`: transactional calls refused, a share
//! of the single-item writes answered with `ReplicatedWriteConflictException` and not carried out); and global tables
//! of either kind refused where they cannot be driven safely. The stand-in sits in front of this run's DynamoDB
//! Local, and the env's own client, which sets up and reads the tables, goes around it.

use dynamo_saga::constants::{PARENT_LEASE, PARENT_LOCK_TOKEN, PARENT_RVN, SK_HEADER, TX_PK as TX_PK_NAME, TX_SK};
use dynamo_saga::driver::run_step;
use dynamo_saga::phase::begin;
use dynamo_saga::phase::resume::{resume, Step};
use dynamo_saga::records::{read_header, TxState};
use dynamo_saga::store::Meter;
use dynamo_saga::{Config, Coordinator, Store, TxError};
use harness::proxy::Proxy;
use harness::{nv, sv, Env};
use serde_json::{json, Value};

/// A store configured as `tune` makes `env`'s configuration, its client going through `proxy`.
fn through(env: &Env, proxy: &Proxy, tune: impl FnOnce(Config) -> Config) -> Store {
    Store::from_conf(harness::conf_for(&proxy.url), tune(env.store.cfg.as_ref().clone()))
}

fn strong(c: Config) -> Config {
    c.with_strong_multi_region()
}

/// `n` updates `ADD n :one` on items `<tag>0000`.. of `env.a` (even) and `env.b` (odd), each `n` 0 before.
async fn counters(env: &Env, tag: &str, n: usize) -> Value {
    let key = |i: usize| match i % 2 {
        0 => (env.a.clone(), json!({"pk": sv(&format!("{tag}{i:04}"))})),
        _ => (env.b.clone(), json!({"pk": sv(&format!("{tag}{i:04}")), "sk": nv(1)})),
    };
    for i in 0..n {
        let (table, k) = key(i);
        let mut item = k.as_object().unwrap().clone();
        item.insert("n".into(), nv(0));
        env.put(&table, Value::Object(item)).await;
    }
    let items: Vec<Value> = (0..n)
        .map(|i| {
            let (table, k) = key(i);
            json!({"Update": {"TableName": table, "Key": k, "UpdateExpression": "ADD n :one",
                "ConditionExpression": "attribute_exists(pk)", "ExpressionAttributeValues": {":one": nv(1)}}})
        })
        .collect();
    json!({ "TransactItems": items })
}

/// Every item `body` names has `n` = `want`.
async fn assert_counted(env: &Env, body: &Value, want: i64) {
    for a in body["TransactItems"].as_array().unwrap() {
        let u = &a["Update"];
        let item = env.get(u["TableName"].as_str().unwrap(), u["Key"].clone()).await.expect("the item exists");
        assert_eq!(item["n"], nv(want), "{}", u["Key"]);
    }
}

async fn stats(proxy: &Proxy) -> (u64, u64) {
    let s = proxy.stats().await;
    (s["refusedTransactions"].as_u64().unwrap(), s["conflicts"].as_u64().unwrap())
}

/// Transactions of 2 and 250 actions commit on MRSC tables, each counter added to once though a tenth of the writes
/// met a "concurrent change in another Region" and were sent again; nothing asked for a transactional call, and
/// every conflict the stand-in answered was counted.
#[tokio::test]
async fn transactions_of_any_size_commit_without_a_transactional_call() {
    let env = Env::new("mrsc").await;
    let proxy = Proxy::start_args(&["--mrsc", "--conflict", "0.1"]).await;
    let store = through(&env, &proxy, strong);
    for (tag, n) in [("s", 2), ("l", 250)] {
        let body = counters(&env, tag, n).await;
        let done = Coordinator::new(store.clone()).run(&body).await.expect("committed");
        assert!(done.batches > 0, "{n} actions: carried out by the protocol, not in one call");
        assert_counted(&env, &body, 1).await;
    }
    let (refused, conflicts) = stats(&proxy).await;
    assert_eq!(refused, 0, "a TransactWriteItems or TransactGetItems call was sent");
    assert!(conflicts > 10, "the stand-in answered {conflicts} conflicts");
    assert_eq!(store.pace().conflicts(), conflicts, "every conflict is counted");
    env.assert_clean().await;
    harness::report(format!(
        "MRSC stand-in: 252 updates in transactions of 2 and 250 actions committed, each applied once; 0 \
         transactional calls, {conflicts} writes answered ReplicatedWriteConflictException and sent again"
    ));
}

/// A cancellation on MRSC tables names the same actions and reasons as native `TransactWriteItems` on the same
/// state, and writes nothing.
#[tokio::test]
async fn a_cancellation_names_what_native_would() {
    let env = Env::new("mrsc-cancel").await;
    let proxy = Proxy::start_args(&["--mrsc", "--conflict", "0.1"]).await;
    let store = through(&env, &proxy, strong);
    let mut body = counters(&env, "c", 3).await;
    body["TransactItems"][1]["Update"]["ConditionExpression"] = json!("n > :one");
    body["TransactItems"][1]["Update"]["ReturnValuesOnConditionCheckFailure"] = json!("ALL_OLD");
    let native: Vec<_> = body["TransactItems"].as_array().unwrap().iter().map(harness::native_item).collect();
    let native = env.client.transact_write_items().set_transact_items(Some(native)).send().await;
    let native = native.expect_err("native cancels it").into_service_error();
    let aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError::TransactionCanceledException(
        native,
    ) = native
    else {
        panic!("{native:?}")
    };
    let before = env.snapshot().await;
    let c = harness::canceled(Coordinator::new(store).run(&body).await);
    harness::assert_named(&c);
    let ours: Vec<(String, Option<Value>)> =
        c.cancellation_reasons.iter().map(|r| (r.code.clone(), r.item.clone())).collect();
    let theirs: Vec<(String, Option<Value>)> = native
        .cancellation_reasons()
        .iter()
        .map(|r| (r.code().unwrap().to_string(), r.item.as_ref().map(dynamo_saga::value::item_to_json)))
        .collect();
    assert_eq!(ours, theirs);
    assert_eq!(env.snapshot().await, before, "nothing written");
    assert_eq!(stats(&proxy).await.0, 0);
    env.assert_clean().await;
}

/// Another lock client on the parent item `key` of `env.a`: with `Some(token)` it takes the lock over (its token and
/// a record version number of its own), with `None` it lets go of it.
async fn another_client(env: &Env, key: &Value, token: Option<&str>) {
    use aws_sdk_dynamodb::types::AttributeValue;
    let req = env
        .client
        .update_item()
        .table_name(&env.a)
        .set_key(Some(dynamo_saga::value::item_from_json(key).unwrap()))
        .expression_attribute_names("#t", PARENT_LOCK_TOKEN)
        .expression_attribute_names("#r", PARENT_RVN);
    let req = match token {
        Some(t) => req
            .update_expression("SET #t = :t, #r = :r")
            .expression_attribute_values(":t", AttributeValue::S(t.into()))
            .expression_attribute_values(":r", AttributeValue::N("1".into())),
        None => req.update_expression("REMOVE #t, #r"),
    };
    req.send().await.unwrap();
}

/// With a `Parent` on MRSC tables, the parent's lock is sealed by its own conditional write before the commit (a
/// lease no waiter outlasts before the commit lands), and released at the end. A parent taken over before the commit
/// (as a DynamoDB Lock Client takes over a lock it found stale) stops the commit: that attempt rolls back, nothing
/// applied, and the next attempt commits once the parent is free.
#[tokio::test]
async fn a_parent_is_sealed_before_the_commit_and_one_taken_over_stops_it() {
    let env = Env::new("mrsc-parent").await;
    let proxy = Proxy::start_args(&["--mrsc", "--conflict", "0.1"]).await;
    let store = through(&env, &proxy, strong);
    let m = Meter::default();
    env.put(&env.a, json!({"pk": sv("P"), "stock": nv(3)})).await;
    let parent_key = json!({"pk": sv("P")});
    for (tag, take_over) in [("kept", false), ("taken", true)] {
        let mut body = counters(&env, tag, 3).await;
        body["Parent"] = json!({"TableName": env.a, "Key": parent_key});
        let id = begin::begin(&store, &body).await.unwrap().transaction_id;
        loop {
            let (_, step) = resume(&store, &id).await.unwrap();
            if step == Step::Commit {
                break;
            }
            run_step(&store, &id, step).await.unwrap();
        }
        if take_over {
            another_client(&env, &parent_key, Some("another-client")).await;
        }
        run_step(&store, &id, Step::Commit).await.unwrap();
        let h = read_header(&store, &m, &id).await.unwrap();
        let parent = env.get(&env.a, parent_key.clone()).await.unwrap();
        if take_over {
            assert_eq!(h.state, TxState::RolledBack, "the commit did not go through: {h:?}");
            assert!(h.retry_pending, "an attempt that lost its parent is tried again: {h:?}");
            assert_eq!(parent[PARENT_LOCK_TOKEN], sv("another-client"), "the other client's lock is untouched");
            // The other client lets go; the transaction's next attempt takes the parent and commits.
            another_client(&env, &parent_key, None).await;
            assert_counted(&env, &body, 0).await;
        } else {
            assert_eq!(h.state, TxState::Committed);
            let sealed = store.cfg.lease + store.cfg.operation_timeout + store.cfg.revisit_after;
            assert_eq!(parent[PARENT_LEASE], nv(sealed.as_secs() as i64), "sealed: {parent}");
        }
        Coordinator::new(store.clone()).drive(&id).await.expect("committed");
        assert_counted(&env, &body, 1).await;
        let parent = env.get(&env.a, parent_key.clone()).await.unwrap();
        assert!(parent.get(PARENT_LOCK_TOKEN).is_none() && parent.get(PARENT_LEASE).is_none(), "released: {parent}");
    }
    assert_eq!(stats(&proxy).await.0, 0);
    env.assert_clean().await;
}

/// Whether anything of a transaction was written: a header in the transactions table.
async fn headers(env: &Env) -> usize {
    let is_header =
        |r: &dynamo_saga::value::Item| r.get(TX_SK).and_then(|v| v.as_s().ok()).is_some_and(|s| s == SK_HEADER);
    env.tx_records().await.iter().filter(|r| is_header(r)).count()
}

/// Runs `body` on `store`, which must refuse it with a `ValidationError`: its message.
async fn refused(store: Store, body: &Value) -> String {
    let e = Coordinator::new(store).run(body).await.expect_err("refused");
    assert_eq!(e.name(), "ValidationError", "{e}");
    e.to_string()
}

/// A global table with multi-Region eventual consistency is refused, saying why, unless the one Region allowed to
/// drive transactions on it is named; then every other Region refuses, naming that Region. An MRSC table is refused
/// without the strong mode. Nothing is written for a refused request.
#[tokio::test]
async fn global_tables_are_refused_where_they_cannot_be_driven_safely() {
    let env = Env::new("mrec").await;
    let eventual = Proxy::start_args(&["--replicas", "us-east-1,eu-west-1", "--consistency", "EVENTUAL"]).await;
    let body = counters(&env, "e", 2).await;
    let before = env.snapshot().await;
    for tune in [|c: Config| c, strong] {
        let e = refused(through(&env, &eventual, tune), &body).await;
        assert!(e.contains("multi-Region eventual consistency") && e.contains("last writer wins"), "{e}");
        assert!(e.contains("SAGA_EVENTUAL_CONSISTENCY_REGION"), "{e}");
    }
    // The clients of these tests are in us-east-1.
    let elsewhere = |c: Config| Config { eventual_region: Some("eu-west-1".into()), ..c };
    let e = refused(through(&env, &eventual, elsewhere), &body).await;
    assert!(e.contains("only eu-west-1") && e.contains("this is us-east-1"), "{e}");
    let strong_table = Proxy::start_args(&["--mrsc"]).await;
    let e = refused(through(&env, &strong_table, |c| c), &body).await;
    assert!(e.contains("multi-Region strong consistency") && e.contains("SAGA_MULTI_REGION_CONSISTENCY=strong"), "{e}");
    assert_eq!((env.snapshot().await, headers(&env).await), (before, 0), "nothing written for a refused request");

    let here = |c: Config| Config { eventual_region: Some("us-east-1".into()), ..c };
    Coordinator::new(through(&env, &eventual, here)).run(&body).await.expect("driven from its one Region");
    assert_counted(&env, &body, 1).await;
    env.assert_clean().await;
}

/// The transactions table is held to the same rules as the tables a request names, once a process: a global table
/// with multi-Region eventual consistency, on which two Regions could both take one header's condition, is refused
/// unless this Region is the one named to drive transactions; one with strong consistency without the strong mode.
/// The data tables here are of one Region; nothing is written for a refused request, and the check is one
/// `DescribeTable` for the store, not one a request.
#[tokio::test]
async fn the_transactions_table_is_refused_where_it_cannot_be_driven_safely() {
    let env = Env::new("mrec-tx").await;
    let only_tx = ["--global-tables", env.tx_table.as_str()];
    let eventual = Proxy::start_args(
        &[&only_tx[..], &["--replicas", "us-east-1,eu-west-1", "--consistency", "EVENTUAL"]].concat(),
    )
    .await;
    let strong_tx = Proxy::start_args(
        &[&only_tx[..], &["--replicas", "us-east-1,us-east-2,us-west-2"], &["--consistency", "STRONG"]].concat(),
    )
    .await;
    let body = counters(&env, "x", 2).await;
    let before = env.snapshot().await;
    let e = refused(through(&env, &eventual, |c| c), &body).await;
    assert!(e.contains(&format!("table {:?}", env.tx_table)) && e.contains("multi-Region eventual"), "{e}");
    let elsewhere = |c: Config| Config { eventual_region: Some("eu-west-1".into()), ..c };
    let e = refused(through(&env, &eventual, elsewhere), &body).await;
    assert!(e.contains(&format!("table {:?}", env.tx_table)) && e.contains("only eu-west-1"), "{e}");
    let e = refused(through(&env, &strong_tx, |c| c), &body).await;
    assert!(e.contains(&format!("table {:?}", env.tx_table)) && e.contains("strong consistency"), "{e}");
    assert_eq!((env.snapshot().await, headers(&env).await), (before, 0), "nothing written for a refused request");

    // Pinned to this Region, it is driven; the table is described once for the store, whatever the requests.
    let here = through(&env, &eventual, |c| Config { eventual_region: Some("us-east-1".into()), ..c });
    let described = || async { eventual.stats().await["describes"].as_u64().unwrap() };
    let first = described().await;
    Coordinator::new(here.clone()).run(&body).await.expect("driven from its one Region");
    let once = described().await;
    Coordinator::new(here).run(&counters(&env, "y", 2).await).await.expect("again");
    assert_eq!(described().await, once, "no second DescribeTable of any table for the same store");
    assert_eq!(once, first + 3, "each table described once: the transactions table and the two the request names");
    assert_counted(&env, &body, 1).await;
    env.assert_clean().await;
}

/// A transaction begun by the first protocol, which applies in fenced `TransactWriteItems` calls, is not driven in
/// MRSC mode: the store refuses to send the call, saying why, and sends nothing.
#[tokio::test]
async fn the_strong_mode_sends_no_transactional_call_whatever_asks_for_one() {
    let env = Env::new("mrsc-none").await;
    let proxy = Proxy::start_args(&["--mrsc"]).await;
    let store = through(&env, &proxy, strong);
    let req = store.client.transact_write_items();
    let e = store.transact(&Meter::default(), req).await.expect_err("refused");
    assert!(e.to_string().contains("multi-Region strongly consistent"), "{e}");
    let s = proxy.stats().await;
    assert_eq!((s["requests"].as_u64(), s["refusedTransactions"].as_u64()), (Some(0), Some(0)), "nothing sent: {s}");
    assert!(matches!(e, TxError::Internal(_)));
}

/// Where the transactions table has no time to live (MRSC tables do not support it), the sweeper deletes what TTL
/// would: every record of a finished transaction once its retention has passed, and nothing of a running one.
#[tokio::test]
async fn the_sweeper_deletes_expired_records_where_there_is_no_time_to_live() {
    let env = Env::new("mrsc-expiry").await;
    let proxy = Proxy::start_args(&["--mrsc"]).await;
    let store = through(&env, &proxy, |c| Config { retention: std::time::Duration::ZERO, ..strong(c) });
    // Its plan and pages are kept for the retention after its deadline, the header after its end.
    let mut body = counters(&env, "x", 150).await;
    body["Options"] = json!({"DeadlineSeconds": 4});
    let begun = std::time::Instant::now();
    let done = Coordinator::new(store.clone()).run(&body).await.expect("committed").transaction_id;
    let running = begin::begin(&store, &counters(&env, "y", 2).await).await.unwrap().transaction_id;
    let of = |records: &[dynamo_saga::value::Item], id: &str| {
        records.iter().filter(|r| r.get(TX_PK_NAME).and_then(|v| v.as_s().ok()).is_some_and(|v| v == id)).count()
    };
    let records = env.tx_records().await;
    assert!(of(&records, &done) >= 3, "a header, a plan and pages");
    // expiresAt is in whole seconds, and a record expires once it has passed.
    tokio::time::sleep(std::time::Duration::from_millis(6_100).saturating_sub(begun.elapsed())).await;
    let mut sweeper = dynamo_saga::sweeper::Sweeper::new(store.clone());
    sweeper.stale_after = std::time::Duration::from_secs(3600);
    let report = sweeper.sweep().await.unwrap();
    let left = env.tx_records().await;
    assert_eq!(of(&left, &done), 0, "every record of the finished transaction is deleted");
    assert_eq!(of(&left, &running), of(&records, &running), "the running transaction's records stay");
    assert!(report.expired >= of(&records, &done), "{report:?}");
    assert_eq!(sweeper.sweep().await.unwrap().expired, 0, "nothing is deleted twice");
    Coordinator::new(store).drive(&running).await.expect("the running one still commits");
}

/// Two Regions of one MRSC group, each with its own endpoint (a stand-in each) onto the one transactions table: a
/// driver in the first Region dies after each sampled write of a 120-action transaction, and the second Region's
/// sweeper finishes every one of them exactly once: each counter added to once if it committed, never if it rolled
/// back; and either Region reads the same end.
#[tokio::test]
async fn another_regions_sweeper_finishes_what_a_stopped_region_left() {
    use dynamo_saga::sweeper::Sweeper;
    let env = Env::new("mrsc-regions").await;
    let (east, west) = (Proxy::start_args(&["--mrsc"]).await, Proxy::start_args(&["--mrsc"]).await);
    let in_region = |proxy: &Proxy, region: &'static str| {
        let conf = harness::conf_for(&proxy.url).region(aws_sdk_dynamodb::config::Region::new(region));
        Store::from_conf(conf, strong(env.store.cfg.as_ref().clone()))
    };
    let (east, west) = (in_region(&east, "us-east-1"), in_region(&west, "us-east-2"));
    let counter = east.crash_after(u64::MAX);
    let clean = counters(&env, "clean", 120).await;
    Coordinator::new(counter.clone()).run(&clean).await.expect("committed");
    let total = counter.writes_sent().unwrap();
    let points: Vec<u64> = (0..total).filter(|k| k % 13 == 0 || k + 3 >= total).collect();
    let (mut committed, mut rolled_back) = (0, 0);
    for &k in &points {
        let tag = format!("k{k}-");
        let body = counters(&env, &tag, 120).await;
        let before = env.snapshot().await;
        let first = Coordinator::new(east.crash_after(k)).run(&body).await;
        assert!(matches!(first, Err(TxError::InjectedFault(_))), "write {k} of {total}: {first:?}");
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        let mut sweeper = Sweeper::new(west.clone());
        sweeper.stale_after = std::time::Duration::from_millis(1);
        let report = sweeper.sweep().await.unwrap();
        assert!(report.failed.is_empty(), "write {k}: {report:?}");
        let Some(id) = report.finished.first().map(|f| f.transaction_id.clone()) else {
            assert_eq!(env.snapshot().await, before, "write {k}: no header, and something was written");
            continue;
        };
        let m = Meter::default();
        let (seen_west, seen_east) =
            (read_header(&west, &m, &id).await.unwrap(), read_header(&east, &m, &id).await.unwrap());
        assert!(seen_west.finished(), "write {k}: {seen_west:?}");
        assert_eq!(seen_west.state, seen_east.state, "both Regions read the same end");
        match seen_west.state {
            TxState::Committed => {
                committed += 1;
                assert_counted(&env, &body, 1).await;
            }
            TxState::RolledBack => {
                rolled_back += 1;
                assert_eq!(env.snapshot().await, before, "write {k}: the rollback left changes");
            }
            TxState::Pending => panic!("write {k}: still pending"),
        }
    }
    assert!(committed > 0 && rolled_back > 0, "{committed} committed, {rolled_back} rolled back");
    env.assert_clean().await;
    harness::report(format!(
        "MRSC stand-in, two Regions: a 120-action transaction's driver in one Region stopped at {} of its {total} \
         writes; the other Region's sweeper finished each exactly once ({committed} committed, {rolled_back} rolled back)",
        points.len()
    ));
}

/// A transaction with a `Parent` on MRSC tables, its driver dead after each of its writes (the parent's seal among
/// them), is finished by a second driver exactly once: each counter added to once, the parent released.
#[tokio::test]
async fn a_parent_transaction_survives_a_crash_at_every_write() {
    let env = Env::new("mrsc-pcrash").await;
    let proxy = Proxy::start_args(&["--mrsc"]).await;
    let store = through(&env, &proxy, strong);
    env.put(&env.a, json!({"pk": sv("P")})).await;
    let with_parent = |mut body: Value| {
        body["Parent"] = json!({"TableName": env.a, "Key": {"pk": sv("P")}});
        body["ClientRequestToken"] = json!(format!("crash-{}", body["TransactItems"][0]["Update"]["Key"]["pk"]["S"]));
        body
    };
    let counter = store.crash_after(u64::MAX);
    Coordinator::new(counter.clone()).run(&with_parent(counters(&env, "clean", 4).await)).await.expect("committed");
    let total = counter.writes_sent().unwrap();
    for k in 0..total {
        let body = with_parent(counters(&env, &format!("k{k}-"), 4).await);
        let first = Coordinator::new(store.crash_after(k)).run(&body).await;
        assert!(matches!(first, Err(TxError::InjectedFault(_))), "write {k} of {total}: {first:?}");
        Coordinator::new(store.clone()).run(&body).await.unwrap_or_else(|e| panic!("write {k}: {e}"));
        assert_counted(&env, &body, 1).await;
        let parent = env.get(&env.a, json!({"pk": sv("P")})).await.unwrap();
        assert!(parent.get(PARENT_LOCK_TOKEN).is_none(), "write {k}: the parent is released: {parent}");
    }
    assert_eq!(stats(&proxy).await.0, 0);
    env.assert_clean().await;
    harness::report(format!(
        "MRSC stand-in: a 4-action transaction with a Parent, its driver dead after each of its {total} writes, finished by a second driver, 0 violations"
    ));
}

/// Two local stacks as two Regions of one MRSC group, each with its own functions, state machine and MRSC stand-in,
/// on the one transactions table. The first Region begins five 120-action transactions and its functions die in a
/// different phase of each (after the first write of Lock, Save, Commit and Apply, before that of Release); then that
/// Region stops. The second Region's
/// sweeper starts a recovery execution of its own state machine for each, which finishes it exactly once, and its
/// status API reads the end.
#[tokio::test]
async fn a_stopped_regions_transactions_are_finished_by_another_regions_state_machine() {
    use harness::stack::Region;
    let env = Env::new("mrsc-stacks").await;
    let (east, west) = futures::join!(
        Region::start("mrsc-east", "us-east-1", &env.tx_table),
        Region::start("mrsc-west", "us-east-2", &env.tx_table)
    );
    // Each phase's function dies after its first write; Release's before it (after it, the transaction has ended).
    let phases = [("Lock", 1), ("Save", 1), ("Commit", 1), ("Apply", 1), ("Release", 0)];
    let mut left = Vec::new();
    for (phase, writes) in phases {
        let body = counters(&env, &format!("{phase}-"), 120).await;
        let begun = east.stack.invoke("saga-begin", &body).await.expect("begun in the first Region");
        let id = begun["TransactionId"].as_str().unwrap().to_string();
        let mut step = begun["Step"].as_str().unwrap().to_string();
        while step != phase {
            assert_ne!(step, "Finished", "{phase}: the transaction ended before it");
            let function = format!("saga-{}", step.to_lowercase());
            let out = east.stack.invoke(&function, &json!({"TransactionId": id})).await;
            step = out.unwrap_or_else(|e| panic!("{phase}: {function}: {e:?}"))["Step"].as_str().unwrap().to_string();
        }
        let fault = east.stack.inject_fault_for(&id, phase, writes);
        let died = east.stack.invoke(&format!("saga-{}", phase.to_lowercase()), &json!({"TransactionId": id})).await;
        assert!(died.as_ref().is_err_and(|e| e.error_type == "InjectedFault"), "{phase}: {died:?}");
        assert!(!fault.exists(), "{phase}: the fault was taken");
        left.push((phase, id, body));
    }
    east.stop();
    let report = west.stack.invoke("saga-sweeper", &json!({"OlderThanSeconds": 0})).await.expect("the sweeper runs");
    let started: Vec<String> = report["RecoveryExecutions"]
        .as_array()
        .unwrap_or_else(|| panic!("{report}"))
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect();
    assert_eq!(started.len(), phases.len(), "one recovery execution each: {report}");
    for arn in &started {
        west.stack.ended(arn).await;
    }
    let m = Meter::default();
    let mut ends = Vec::new();
    for (phase, id, body) in &left {
        let h = read_header(&env.store, &m, id).await.unwrap();
        assert!(h.finished(), "{phase}: {h:?}");
        let want = match h.state {
            TxState::Committed => 1,
            TxState::RolledBack => 0,
            TxState::Pending => panic!("{phase}: still pending"),
        };
        assert_counted(&env, body, want).await;
        let event = harness::api::event("GET", "/transactions/{id}", json!({ "id": id }), None);
        let status = west.stack.invoke("saga-status", &event).await.expect("the status function answers");
        let status: Value = serde_json::from_str(status["body"].as_str().unwrap()).unwrap();
        assert_eq!(status["State"].as_str(), Some(h.state.as_str()), "{phase}: read from the other Region: {status}");
        ends.push(format!("{phase}: {}", h.state.as_str()));
    }
    // Killed before its commit, a transaction rolls back; after it, it commits.
    assert_eq!(
        ends,
        ["Lock: ROLLED_BACK", "Save: ROLLED_BACK", "Commit: COMMITTED", "Apply: COMMITTED", "Release: COMMITTED"],
    );
    env.assert_clean().await;
    harness::report(format!(
        "MRSC stand-ins, two local stacks as two Regions: 5 transactions of 120 actions whose first Region's functions died in Lock, Save, Commit, Apply and Release, then stopped, finished exactly once by the second Region's sweeper and state machine ({})",
        ends.join(", ")
    ));
}
