//! The transaction engine against DynamoDB Local: commits of every size, rollbacks from every batch, rejected applies.

use dynamo_saga::phase::begin;
use dynamo_saga::store::Meter;
use dynamo_saga::{Coordinator, TxError};
use harness::workload::{assert_mixed_committed, counters, kind, mixed, seed_mixed};
use harness::{nv, sv, Env};
use serde_json::json;

/// A commit of `n` actions; fewer than 100 go in one call (0 batches), and by the protocol when that is turned off.
async fn commit_of(n: usize) {
    commit_by(n, true).await;
    if n < 100 {
        commit_by(n, false).await;
    }
}

async fn commit_by(n: usize, direct: bool) {
    let env = Env::with(&format!("commit{n}{direct}"), |c| dynamo_saga::Config { direct, ..c }).await;
    seed_mixed(&env, "t", n).await;
    let body = mixed(&env, "t", n);
    let done = Coordinator::new(env.store.clone()).run(&body).await.expect("commits");
    assert_eq!(done.actions, n);
    assert_eq!(done.batches, if direct && n < 100 { 0 } else { n.div_ceil(99) });
    assert!(done.usage.calls > 0 && done.usage.write_units > 0.0, "usage is recorded: {:?}", done.usage);
    assert_mixed_committed(&env, "t", n).await;
    env.assert_clean().await;
    // The header is finished, out of the open index, and every record expires.
    let header = dynamo_saga::records::read_header(&env.store, &Meter::default(), &done.transaction_id).await.unwrap();
    assert!(header.finished());
    assert_eq!(header.completed, header.batches);
    for rec in env.tx_records().await {
        assert!(rec.contains_key("expiresAt"), "every record has a TTL: {rec:?}");
        assert!(!rec.contains_key("openShard"), "finished transactions leave the open index");
    }
}

#[tokio::test]
async fn commits_1_action() {
    commit_of(1).await;
}

#[tokio::test]
async fn commits_100_actions() {
    commit_of(100).await;
}

#[tokio::test]
async fn commits_101_actions() {
    commit_of(101).await;
}

#[tokio::test]
async fn commits_250_actions() {
    commit_of(250).await;
}

#[tokio::test]
async fn commits_1000_actions() {
    commit_of(1000).await;
}

/// Breaks the condition of the action at lock-order position `pos`, runs, and checks nothing changed.
async fn rollback_at(name: &str, n: usize, pos: usize) {
    let env = Env::new(name).await;
    seed_mixed(&env, "t", n).await;
    let body = mixed(&env, "t", n);
    let sorted = begin::validate(&env.store, &Meter::default(), &body).await.unwrap().actions;
    let victim = sorted[pos].index;
    match kind(victim) {
        "Put" => env.put(&env.a, json!({"pk": sv(&format!("t-new-{victim}")), "v": nv(-1)})).await,
        "Update" => {
            env.put(&env.b, json!({"pk": sv("t-acct"), "sk": nv(victim as i64), "v": nv(1), "cnt": nv(0)})).await
        }
        "Delete" => {
            env.client.delete_item().table_name(&env.a).set_key(Some(sorted[pos].key.clone())).send().await.unwrap();
        }
        _ => env.put(&env.a, json!({"pk": sv(&format!("t-chk-{victim}")), "state": sv("BROKEN")})).await,
    }
    let before = env.snapshot().await;
    let c = harness::canceled(Coordinator::new(env.store.clone()).run(&body).await);
    assert_eq!(c.cancellation_reasons.len(), n);
    let failed: Vec<usize> = c.failed().map(|(i, _)| i).collect();
    assert_eq!(failed, vec![victim], "only the broken action fails: {}", c.message);
    assert_eq!(c.cancellation_reasons[victim].code, "ConditionalCheckFailed");
    if kind(victim) == "Update" {
        // ReturnValuesOnConditionCheckFailure: ALL_OLD returns the item, without dynamo-saga's attributes.
        assert_eq!(c.cancellation_reasons[victim].item.as_ref().unwrap()["v"], nv(1));
    }
    assert_eq!(env.snapshot().await, before, "every item byte-for-byte as before");
    env.assert_clean().await;
}

#[tokio::test]
async fn rolls_back_when_the_first_batch_fails() {
    rollback_at("rbfirst", 250, 0).await;
}

#[tokio::test]
async fn rolls_back_when_a_middle_batch_fails() {
    rollback_at("rbmiddle", 250, 140).await;
}

#[tokio::test]
async fn rolls_back_when_the_last_batch_fails() {
    rollback_at("rblast", 250, 249).await;
}

#[tokio::test]
async fn rolls_back_when_dynamodb_rejects_an_apply() {
    let env = Env::new("rbapply").await;
    let n = 150;
    seed_mixed(&env, "t", n).await;
    let mut body = mixed(&env, "t", n);
    // ADD a number to a string attribute: DynamoDB refuses it only when it sees the item.
    env.put(&env.a, json!({"pk": sv("text"), "s": sv("not a number")})).await;
    body["TransactItems"]
        .as_array_mut()
        .unwrap()
        .push(json!({"Update": {"TableName": env.a, "Key": {"pk": sv("text")},
        "UpdateExpression": "ADD s :one", "ExpressionAttributeValues": {":one": nv(1)}}}));
    let before = env.snapshot().await;
    let c = harness::canceled(Coordinator::new(env.store.clone()).run(&body).await);
    let failed: Vec<(usize, &str)> = c.failed().map(|(i, r)| (i, r.code.as_str())).collect();
    assert_eq!(failed, vec![(n, "ValidationError")], "{}", c.message);
    let reason = c.cancellation_reasons[n].message.as_deref().unwrap_or_default();
    assert!(
        reason.contains("incorrect data type") && reason.contains("pk=text"),
        "the reason names the action and the rule: {reason}"
    );
    // Lock evaluates every update on the item its lock write returns, so the refusal comes in the lock run that
    // takes every batch, before any batch is recorded locked and before anything is checked, committed or applied.
    let h = dynamo_saga::records::read_header(&env.store, &Default::default(), &c.transaction_id).await.unwrap();
    assert_eq!((h.lock_started, h.locked, h.saved, h.applied), (h.batches, 0, 0, 0), "cancelled at lock: {h:?}");
    assert_eq!(env.snapshot().await, before, "nothing changed");
    env.assert_clean().await;
}

/// A `Put` whose item an index refuses (its index key of the wrong type) is cancelled with `ValidationError` on that
/// action, as `TransactWriteItems` cancels it: below 100 actions by DynamoDB in the one call, from 100 on by begin,
/// which has the request in hand, before anything is locked. Either way nothing is written but the header that
/// records the cancellation.
#[tokio::test]
async fn a_put_an_index_refuses_is_cancelled_before_anything_is_locked() {
    let env = Env::with("putidx", |c| c.with_allowed_tables(["t-*"])).await;
    for (n, batches) in [(3usize, 0usize), (150, 0)] {
        let tag = format!("p{n}");
        seed_mixed(&env, &tag, n).await;
        let mut body = mixed(&env, &tag, n);
        // Makes the table whose index keys `g` as a number.
        let table =
            harness::workload::refused_at_lock(&env, &tag).await["Update"]["TableName"].as_str().unwrap().to_owned();
        body["TransactItems"].as_array_mut().unwrap().insert(
            1,
            json!({"Put": {"TableName": table, "Item": {"pk": sv(&format!("{tag}-new")), "g": sv("text")}}}),
        );
        let (before, before_ix) = (env.snapshot().await, env.scan(&table).await);
        let c = harness::canceled(Coordinator::new(env.store.clone()).run(&body).await);
        let failed: Vec<(usize, &str)> = c.failed().map(|(i, r)| (i, r.code.as_str())).collect();
        assert_eq!(failed, vec![(1, "ValidationError")], "{n} actions: {}", c.message);
        if n >= 100 {
            let reason = c.cancellation_reasons[1].message.as_deref().unwrap_or_default();
            assert!(
                reason.contains("Type mismatch for Index Key g") && reason.contains(&format!("pk={tag}-new")),
                "the reason names the action and the rule: {reason}"
            );
        }
        let h = dynamo_saga::records::read_header(&env.store, &Default::default(), &c.transaction_id).await.unwrap();
        assert_eq!(
            (h.batches, h.lock_started, h.finished()),
            (batches, 0, true),
            "{n} actions: ended before any lock: {h:?}"
        );
        assert_eq!((env.snapshot().await, env.scan(&table).await), (before, before_ix), "{n} actions: nothing changed");
    }
    env.assert_clean().await;
}

/// A protocol-2 transaction begun by the version before begin checked `Put` items (its header has no
/// `itemsChecked`) has save check them, as save did then: a `Put` whose item the table's index keys refuse (an index
/// added after the begin here) is cancelled with `ValidationError` before the commit, and nothing is changed.
#[tokio::test]
async fn save_checks_the_puts_of_a_transaction_begun_before_begin_did() {
    use aws_sdk_dynamodb::types::{
        AttributeDefinition, CreateGlobalSecondaryIndexAction, GlobalSecondaryIndexUpdate, KeySchemaElement, KeyType,
        Projection, ProjectionType, ScalarAttributeType,
    };
    use dynamo_saga::constants::H_ITEMS_CHECKED;
    use dynamo_saga::records;
    let env = Env::with("oldput", |c| dynamo_saga::Config { direct: false, ..c.with_allowed_tables(["t-*"]) }).await;
    let table = format!("{}-late", env.a);
    harness::create_table(&env.client, &table, &[("pk", "S")]).await;
    env.put(&env.a, json!({"pk": sv("u"), "n": nv(0)})).await;
    let body = json!({"TransactItems": [
        {"Update": {"TableName": env.a, "Key": {"pk": sv("u")}, "UpdateExpression": "ADD n :one", "ExpressionAttributeValues": {":one": nv(1)}}},
        {"Put": {"TableName": table, "Item": {"pk": sv("new"), "g": sv("text")}}}]});
    let id = begin::begin(&env.store, &body).await.unwrap().transaction_id;
    let h = records::read_header(&env.store, &Meter::default(), &id).await.unwrap();
    assert!(h.items_checked && h.commits_first(), "begin checked the Put: {h:?}");

    // The header as the earlier begin wrote it, and an index on `g` as a number that the Put's item breaks.
    env.client
        .update_item()
        .table_name(&env.store.cfg.tx_table)
        .set_key(Some(records::header_key(&id)))
        .update_expression("REMOVE #c")
        .expression_attribute_names("#c", H_ITEMS_CHECKED)
        .send()
        .await
        .unwrap();
    let index = CreateGlobalSecondaryIndexAction::builder()
        .index_name("by-g")
        .key_schema(KeySchemaElement::builder().attribute_name("g").key_type(KeyType::Hash).build().unwrap())
        .projection(Projection::builder().projection_type(ProjectionType::All).build())
        .build()
        .unwrap();
    env.client
        .update_table()
        .table_name(&table)
        .attribute_definitions(
            AttributeDefinition::builder().attribute_name("g").attribute_type(ScalarAttributeType::N).build().unwrap(),
        )
        .global_secondary_index_updates(GlobalSecondaryIndexUpdate::builder().create(index).build())
        .send()
        .await
        .unwrap();

    let (before, before_late) = (env.snapshot().await, env.scan(&table).await);
    // A store that has not cached the table's key types from before the index.
    let store = dynamo_saga::Store::new(env.client.clone(), (*env.store.cfg).clone());
    let c = harness::canceled(Coordinator::new(store.clone()).drive(&id).await);
    let failed: Vec<(usize, &str)> = c.failed().map(|(i, r)| (i, r.code.as_str())).collect();
    assert_eq!(failed, vec![(1, "ValidationError")], "{}", c.message);
    let reason = c.cancellation_reasons[1].message.as_deref().unwrap_or_default();
    assert!(reason.contains("Index Key g"), "the reason names the rule: {reason}");
    let h = records::read_header(&store, &Meter::default(), &id).await.unwrap();
    assert_eq!((h.locked, h.saved, h.finished()), (h.batches, 0, true), "every batch locked, refused at save: {h:?}");
    assert_eq!((env.snapshot().await, env.scan(&table).await), (before, before_late), "nothing changed");
    env.assert_clean().await;
}

#[tokio::test]
async fn same_client_request_token_runs_once() {
    let env = Env::new("token").await;
    env.put(&env.a, json!({"pk": sv("c"), "n": nv(0)})).await;
    let body = json!({"ClientRequestToken": "order-17", "TransactItems": [
        {"Update": {"TableName": env.a, "Key": {"pk": sv("c")}, "UpdateExpression": "ADD n :one", "ExpressionAttributeValues": {":one": nv(1)}}}]});
    let co = Coordinator::new(env.store.clone());
    let first = co.run(&body).await.unwrap();
    let second = co.run(&body).await.unwrap();
    assert_eq!(first.transaction_id, second.transaction_id);
    assert_eq!(env.get(&env.a, json!({"pk": sv("c")})).await.unwrap()["n"], nv(1));
    // The same request built with the SDK's values is typed at its own edge, and hashes as its JSON does: a retry.
    use aws_sdk_dynamodb::types::{AttributeValue, TransactWriteItem, Update};
    let update = Update::builder()
        .table_name(&env.a)
        .key("pk", AttributeValue::S("c".into()))
        .update_expression("ADD n :one")
        .expression_attribute_values(":one", AttributeValue::N("1".into()))
        .build()
        .unwrap();
    let built = co.transact_write_items().transact_items(TransactWriteItem::builder().update(update).build());
    let third = built.client_request_token("order-17").send().await.unwrap();
    assert_eq!(third.transaction_id, first.transaction_id, "the SDK edge's retry of the JSON edge's request");
    // A token claimed before requests were hashed typed holds the hash of the request's JSON: still a retry.
    let parsed = dynamo_saga::request::parse(&body, &env.store.cfg).unwrap();
    let legacy = parsed.legacy_hash.clone().unwrap();
    assert_ne!(legacy, parsed.body_hash);
    env.client
        .update_item()
        .table_name(&env.store.cfg.tx_table)
        .set_key(Some(dynamo_saga::records::token_key("order-17")))
        .update_expression("SET bodyHash = :h")
        .expression_attribute_values(":h", AttributeValue::S(legacy))
        .send()
        .await
        .unwrap();
    assert_eq!(co.run(&body).await.unwrap().transaction_id, first.transaction_id, "a token claimed by the old hash");
    assert_eq!(env.get(&env.a, json!({"pk": sv("c")})).await.unwrap()["n"], nv(1), "run once");
    let mut other = body.clone();
    other["TransactItems"][0]["Update"]["ExpressionAttributeValues"][":one"] = nv(2);
    let err = co.run(&other).await.expect_err("same token, different body");
    assert_eq!(err.name(), "ValidationError");
    assert!(err.to_string().contains("IdempotentParameterMismatch"), "{err}");
}

#[tokio::test]
async fn parent_lock_is_held_and_released() {
    let env = Env::new("parent").await;
    env.put(&env.a, json!({"pk": sv("PRODUCT_1"), "stock": nv(300)})).await;
    for i in 0..150 {
        env.put(&env.b, json!({"pk": sv("PRODUCT_1"), "sk": nv(i), "status": sv("AVAILABLE")})).await;
    }
    let mut items: Vec<serde_json::Value> = (0..150)
        .map(|i| json!({"Update": {"TableName": env.b, "Key": {"pk": sv("PRODUCT_1"), "sk": nv(i)},
            "UpdateExpression": "SET #s = :sold", "ConditionExpression": "#s = :avail",
            "ExpressionAttributeNames": {"#s": "status"}, "ExpressionAttributeValues": {":sold": sv("SOLD"), ":avail": sv("AVAILABLE")}}}))
        .collect();
    // The parent itself is written in the same transaction: the fence folds into its own condition.
    items.push(json!({"Update": {"TableName": env.a, "Key": {"pk": sv("PRODUCT_1")}, "UpdateExpression": "SET stock = stock - :n",
        "ExpressionAttributeValues": {":n": nv(150)}}}));
    let body = json!({"TransactItems": items, "Parent": {"TableName": env.a, "Key": {"pk": sv("PRODUCT_1")}}});
    Coordinator::new(env.store.clone()).run(&body).await.unwrap();
    let parent = env.get(&env.a, json!({"pk": sv("PRODUCT_1")})).await.unwrap();
    assert_eq!(parent["stock"], nv(150));
    assert!(
        ["lockToken", "lockTokenAt", "leaseDuration", "recordVersionNumber"].iter().all(|k| parent.get(k).is_none()),
        "parent released: {parent}"
    );
    let sold = env.scan(&env.b).await.values().filter(|v| v["status"] == sv("SOLD")).count();
    assert_eq!(sold, 150);
    env.assert_clean().await;
}

/// A condition written in parentheses is accepted as native `TransactWriteItems` accepts it, though the lock adds
/// its own conditions around it.
#[tokio::test]
async fn a_parenthesised_condition_works_as_natively() {
    let env = Env::new("parens").await;
    env.put(&env.a, json!({"pk": sv("q"), "v": nv(1)})).await;
    let action = json!({"Update": {"TableName": env.a, "Key": {"pk": sv("q")}, "UpdateExpression": "SET v = :two",
        "ConditionExpression": "(v = :one)", "ExpressionAttributeValues": {":one": nv(1), ":two": nv(2)}}});
    let native = env.client.transact_write_items().transact_items(harness::native_item(&action)).send().await;
    assert!(native.is_ok(), "DynamoDB accepts it: {native:?}");
    env.put(&env.a, json!({"pk": sv("q"), "v": nv(1)})).await;
    Coordinator::new(env.store.clone()).run(&json!({"TransactItems": [action]})).await.expect("dynamo-saga accepts it");
    assert_eq!(env.get(&env.a, json!({"pk": sv("q")})).await.unwrap()["v"], nv(2));
    env.assert_clean().await;
}

/// The parent lock can be looked at without taking it: who holds it, since when, its lease and the record version
/// number waiters watch, which every phase moves, and the holder's header; nobody once the transaction has ended.
#[tokio::test]
async fn the_parent_lock_can_be_read_without_taking_it() {
    use dynamo_saga::phase::resume::{resume, Step};
    use dynamo_saga::read;
    use dynamo_saga::value::item_from_json;
    let env = Env::new("getlock").await;
    env.put(&env.a, json!({"pk": sv("P"), "stock": nv(3)})).await;
    env.put(&env.a, json!({"pk": sv("i1"), "v": nv(0)})).await;
    let parent = item_from_json(&json!({"pk": sv("P")})).unwrap();
    assert_eq!(read::parent_lock(&env.store, &env.a, parent.clone()).await.unwrap(), None);
    let missing = read::parent_lock(&env.store, &env.a, item_from_json(&json!({"pk": sv("nope")})).unwrap()).await;
    assert!(matches!(missing, Err(TxError::NotFound(_))), "{missing:?}");

    let body = json!({"TransactItems": [{"Update": {"TableName": env.a, "Key": {"pk": sv("i1")}, "UpdateExpression": "SET v = :one",
        "ExpressionAttributeValues": {":one": nv(1)}}}], "Parent": {"TableName": env.a, "Key": {"pk": sv("P")}}});
    let id = begin::begin(&env.store, &body).await.unwrap().transaction_id;
    let mut versions = vec![];
    loop {
        let (_, step) = resume(&env.store, &id).await.unwrap();
        if step == Step::Commit {
            break;
        }
        dynamo_saga::driver::run_step(&env.store, &id, step).await.unwrap();
        let lock =
            read::parent_lock(&env.store, &env.a, parent.clone()).await.unwrap().expect("held from the first lock on");
        assert_eq!(lock.holder, id);
        assert!(lock.locked_at > 0);
        let h = lock.holder_header.expect("the holder's header");
        assert_eq!(h.state, dynamo_saga::TxState::Pending);
        assert_eq!(lock.lease_seconds, env.store.cfg.lease.as_secs());
        versions.push(lock.record_version_number);
    }
    // Lock and save, the phases before the commit.
    assert!(
        versions.len() >= 2 && versions.windows(2).all(|w| w[0] != w[1]),
        "every phase moves the version waiters watch: {versions:?}"
    );
    Coordinator::new(env.store.clone()).drive(&id).await.unwrap();
    assert_eq!(read::parent_lock(&env.store, &env.a, parent).await.unwrap(), None);
    env.assert_clean().await;
}

/// 120 updates `ADD n :one` of items `<tag>000`.. (each `n` 0), begun and carried to its commit, nothing applied.
async fn committed_unapplied(env: &Env, tag: &str) -> (String, Vec<String>) {
    use dynamo_saga::phase::resume::Step;
    let keys: Vec<String> = (0..120).map(|i| format!("{tag}{i:03}")).collect();
    harness::put_all(&env.client, &env.a, keys.iter().map(|k| json!({"pk": sv(k), "n": nv(0)}))).await;
    let items: Vec<_> = keys
        .iter()
        .map(|k| json!({"Update": {"TableName": env.a, "Key": {"pk": sv(k)}, "UpdateExpression": "ADD n :one", "ExpressionAttributeValues": {":one": nv(1)}}}))
        .collect();
    let id = begin::begin(&env.store, &json!({ "TransactItems": items })).await.unwrap().transaction_id;
    let (h, step) = harness::run_steps_until(&env.store, &id, |h, _| h.state == dynamo_saga::TxState::Committed).await;
    assert_eq!(
        (h.state, step),
        (dynamo_saga::TxState::Committed, Step::Apply(0)),
        "committed with nothing applied: {h:?}"
    );
    (id, keys)
}

/// A committed write DynamoDB refuses at apply (injected: a writer outside the protocol, ignoring the lock, turns the
/// counter into a string after the commit). The transaction stays all-or-nothing: the rest of its apply run is
/// applied, the refused item keeps its lock (and the batches of later runs theirs), the apply fails with
/// `ApplyRejected` naming it, the transaction stays committed and open, and a committed read of the item reports the
/// refusal rather than a value. Once the item is mended, the sweeper applies it, exactly once.
#[tokio::test]
async fn a_write_refused_after_the_commit_keeps_its_lock_until_dynamodb_accepts_it() {
    use dynamo_saga::read::{get_item, Isolation};
    use dynamo_saga::value::item_from_json;
    // Batches of 4 updates, so that the 120 make 30 batches; apply steps take the environment's step of batches, the
    // refused item's step among them, and the steps after it wait.
    let env = Env::with("rejected", |c| dynamo_saga::Config { batch_size: 5, ..c }).await;
    let (id, keys) = committed_unapplied(&env, "j").await;
    let victim = keys[60].clone();
    let set_n = |v: serde_json::Value| {
        let (client, table, key) = (env.client.clone(), env.a.clone(), victim.clone());
        async move {
            client
                .update_item()
                .table_name(table)
                .key("pk", dynamo_saga::value::s(key))
                .update_expression("SET n = :v")
                .expression_attribute_values(
                    ":v",
                    dynamo_saga::value::item_from_json(&json!({ "v": v })).unwrap()["v"].clone(),
                )
                .send()
                .await
                .unwrap();
        }
    };
    set_n(sv("text")).await;
    let refused = Coordinator::new(env.store.clone()).drive(&id).await;
    let Err(TxError::ApplyRejected { tx_id, action, message }) = &refused else {
        panic!("expected ApplyRejected, got {refused:?}")
    };
    assert_eq!(refused.as_ref().unwrap_err().name(), "ApplyRejected");
    assert!(tx_id == &id && action.contains(&victim) && message.contains("ValidationException"), "{refused:?}");
    let h = dynamo_saga::records::read_header(&env.store, &Meter::default(), &id).await.unwrap();
    assert!(h.state == dynamo_saga::TxState::Committed && !h.finished() && h.applied < h.batches, "{h:?}");
    // The refused item's run is applied but for it; later runs wait, locked, and read committed as they will be.
    let mut applied = 0;
    for k in &keys {
        let item = env.get(&env.a, json!({"pk": sv(k)})).await.unwrap();
        if k == &victim {
            assert!(
                item.get("_sagaLock").is_some() && item["n"] == sv("text"),
                "the refused item keeps its lock: {item}"
            );
        } else if item.get("_sagaLock").is_none() {
            assert_eq!(item["n"], nv(1), "applied: {item}");
            applied += 1;
        } else {
            assert!(k > &victim && item["n"] == nv(0), "only runs after the refused one wait: {item}");
            let read =
                get_item(&env.store, &env.a, item_from_json(&json!({"pk": sv(k)})).unwrap(), Isolation::Committed)
                    .await
                    .unwrap()
                    .unwrap();
            assert_eq!(read["n"].as_n().unwrap(), "1", "a committed read of {k}");
        }
    }
    // Every step before the refused item's, and its own but for it.
    let per_batch = env.store.cfg.batch_size - 1;
    let step = env.store.cfg.step_batches();
    let run_end = ((60 / per_batch) / step + 1) * step * per_batch;
    assert!(run_end < keys.len(), "some batches are left for a later step");
    assert_eq!(applied, run_end - 1, "the rest of the refused item's step is applied");
    let key = item_from_json(&json!({"pk": sv(&victim)})).unwrap();
    let read = get_item(&env.store, &env.a, key.clone(), Isolation::Committed).await;
    assert!(matches!(read, Err(TxError::ApplyRejected { .. })), "a committed read cannot give a value: {read:?}");

    // Mended: a committed read gives the value the transaction leaves, and the next run applies it once.
    set_n(nv(0)).await;
    let read = get_item(&env.store, &env.a, key.clone(), Isolation::Committed).await.unwrap().unwrap();
    assert_eq!(read["n"].as_n().unwrap(), "1");
    let uncommitted = get_item(&env.store, &env.a, key, Isolation::Uncommitted).await.unwrap().unwrap();
    assert_eq!(uncommitted["n"].as_n().unwrap(), "0", "not applied yet");
    // The sweeper finds it open and still, and finishes it.
    let mut sweeper = dynamo_saga::sweeper::Sweeper::new(env.store.clone());
    sweeper.stale_after = std::time::Duration::from_millis(1);
    let swept = sweeper.sweep().await.unwrap();
    assert!(swept.failed.is_empty(), "{swept:?}");
    let h = dynamo_saga::records::read_header(&env.store, &Meter::default(), &id).await.unwrap();
    assert!(
        h.state == dynamo_saga::TxState::Committed && h.finished(),
        "the sweeper applied it once DynamoDB accepted the write: {h:?}"
    );
    Coordinator::new(env.store.clone()).drive(&id).await.expect("a later drive finds it finished");
    for k in &keys {
        assert_eq!(
            env.get(&env.a, json!({"pk": sv(k)})).await.unwrap()["n"],
            nv(1),
            "every ADD applied exactly once: {k}"
        );
    }
    env.assert_clean().await;
}

/// A transaction begun before protocol 2 (its header has no protocol) finishes the first protocol's way, whoever
/// picks it up: every batch applied before the commit, from saved images, each `ADD` once.
#[tokio::test]
async fn a_transaction_of_the_first_protocol_finishes_the_first_way() {
    use dynamo_saga::phase::resume::{resume, Step};
    let env = Env::new("protocol1").await;
    let n = 150;
    seed_mixed(&env, "t", n).await;
    let id = begin::begin(&env.store, &mixed(&env, "t", n)).await.unwrap().transaction_id;
    env.client
        .update_item()
        .table_name(&env.tx_table)
        .set_key(Some(dynamo_saga::records::header_key(&id)))
        .update_expression("REMOVE #p")
        .expression_attribute_names("#p", dynamo_saga::constants::H_PROTOCOL)
        .send()
        .await
        .unwrap();
    let mut steps = Vec::new();
    loop {
        let (h, step) = resume(&env.store, &id).await.unwrap();
        assert_eq!(h.protocol, 1);
        if step == Step::Finished {
            break;
        }
        let kind = format!("{step:?}");
        steps.push(kind[..kind.find('(').unwrap_or(kind.len())].to_string());
        let r = dynamo_saga::driver::run_step(&env.store, &id, step).await.unwrap();
        assert_eq!(r.outcome, dynamo_saga::phase::Outcome::Done, "{step:?}");
        if step == Step::Commit {
            let images = env
                .tx_records()
                .await
                .into_iter()
                .filter(|r| r["sk"].as_s().is_ok_and(|s| s.starts_with(dynamo_saga::constants::SK_IMAGE_PREFIX)))
                .count();
            assert!(images > 0, "the first protocol saves images before it applies");
        }
    }
    steps.dedup();
    assert_eq!(steps, ["Lock", "Save", "Apply", "Commit", "Complete", "Release"]);
    assert_mixed_committed(&env, "t", n).await;
    env.assert_clean().await;
}

/// A phase call of a Lambda function may run in a new process, whose store has described no table yet: the first
/// writes of its lock run, sent side by side, wait for one `DescribeTable` of their table instead of each sending
/// its own. So a lock of 250 updates on a new store sends its writes and a handful of reads, and so does the apply.
#[tokio::test]
async fn a_new_process_describes_each_table_once() {
    use dynamo_saga::phase::{apply, commit, lock, save};
    use dynamo_saga::Store;
    let env = Env::new("describe").await;
    let (_, items) = counters(&env, "d", 250, None).await;
    // Begun as the state machine's Begin begins it: the execution, not this process, drives the transaction.
    let execution = Some("arn:aws:states:us-east-1:000000000000:execution:dynamo-saga:describe");
    let body = json!({ "TransactItems": items });
    let id = begin::begin_with_execution(&env.store, &body, execution).await.unwrap().transaction_id;
    let process = || Store::new(env.client.clone(), (*env.store.cfg).clone());
    let locked = lock::lock(&process(), &id, 0).await.unwrap();
    assert!(locked.usage.writes >= 99, "{locked:?}");
    assert!(locked.usage.calls <= locked.usage.writes + 8, "a DescribeTable of each table and a few reads: {locked:?}");
    let store = process();
    for b in 0..3 {
        lock::lock(&store, &id, b).await.unwrap();
        save::save(&store, &id, b).await.unwrap();
    }
    commit::commit(&store, &id).await.unwrap();
    let applied = apply::apply(&process(), &id, 0).await.unwrap();
    assert!(applied.usage.writes >= 99, "{applied:?}");
    assert!(
        applied.usage.calls <= applied.usage.writes + 8,
        "a DescribeTable of each table and a few reads: {applied:?}"
    );

    // However many ask at once, a store describes a table once; a table that is not there is an error to each.
    let cold = process();
    let m = Meter::default();
    let asks = (0..64).map(|i| cold.schema(&m, if i % 2 == 0 { &env.a } else { &env.b }));
    let schemas = futures::future::try_join_all(asks).await.unwrap();
    assert_eq!((schemas[0].key_names.len(), schemas[1].key_names.len()), (1, 2));
    assert_eq!(m.usage().calls, 2, "{:?}", m.usage());
    let missing = format!("{}-missing", env.a);
    for _ in 0..2 {
        let e = cold.schema(&m, &missing).await.unwrap_err();
        assert!(e.to_string().contains("does not exist"), "{e}");
    }
}

/// Rolls back `n` updates of one action a batch, the first refused, and returns the header.
async fn refused_first(
    name: &str,
    n: usize,
    settings: impl FnOnce(dynamo_saga::Config) -> dynamo_saga::Config,
) -> dynamo_saga::records::Header {
    let env = Env::with(name, |c| settings(dynamo_saga::Config { batch_size: 2, direct: false, ..c })).await;
    let (keys, items) = counters(&env, "s", n, Some("n < :one")).await;
    env.put(&env.a, json!({"pk": sv(&keys[0]), "n": nv(5)})).await;
    let before = env.snapshot().await;
    let c = harness::canceled(Coordinator::new(env.store.clone()).run(&json!({ "TransactItems": items })).await);
    assert_eq!(c.failed().map(|(i, _)| i).collect::<Vec<_>>(), [0]);
    assert_eq!(env.snapshot().await, before, "every item as before, no lock left");
    env.assert_clean().await;
    dynamo_saga::records::read_header(&env.store, &Meter::default(), &c.transaction_id).await.unwrap()
}

/// Up to 100 actions, lock goes on past a failed condition to report every one, as `TransactWriteItems` does: with
/// one action a batch, 60 batches where a lock run takes 20, the later batches' locks are recorded started before
/// they are taken, and the rollback lets go of every one of them.
#[tokio::test]
async fn a_rollback_lets_go_of_the_locks_taken_to_report_every_failure() {
    let h = refused_first("rbeval", 60, |c| c).await;
    assert_eq!((h.batches, h.lock_started, h.restored), (60, 60, 60), "{h:?}");
}

/// A rollback visits the batches whose locking started and passes all the others in one more step: 150 batches of
/// one action each, the first refused, lock only the first step's batches (of a step of 20 batches, and of the fanned
/// step of three shares of one batch).
#[tokio::test]
async fn a_rollback_passes_the_batches_never_locked_in_one_step() {
    for (fan_out, share_batches) in [(1, 20), (3, 1)] {
        let name = format!("rbskip{fan_out}");
        let h = refused_first(&name, 150, |c| dynamo_saga::Config { fan_out, share_batches, ..c }).await;
        let step = fan_out * share_batches;
        assert_eq!((h.batches, h.lock_started, h.restored), (150, step, 150), "{h:?}");
        // Begin, a lock step of `step` writes, the rollback of those, one step past the rest, release: two calls a
        // batch locked and a few more, where a step a batch would take two calls for each of the 150.
        assert!(h.usage.calls < 2 * step as u64 + 40, "{:?}", h.usage);
    }
}

/// Workers of a fanned-out step that all answer the same: a share's answer as JSON, or, with none, `Throttled` (no
/// invocation could be started for the share, as Lambda answers when the function's concurrency is used up).
#[derive(Debug)]
struct Workers(Option<serde_json::Value>);

impl dynamo_saga::store::Workers for Workers {
    fn run(
        &self,
        _share: serde_json::Value,
    ) -> futures::future::BoxFuture<'static, Result<serde_json::Value, TxError>> {
        let answer = self.0.clone().ok_or_else(|| TxError::Throttled("invoking the function: Rate Exceeded.".into()));
        Box::pin(async move { answer })
    }
}

fn throttled() -> std::sync::Arc<Workers> {
    std::sync::Arc::new(Workers(None))
}

/// The transactions table's record of `id`'s header, as stored.
async fn stored_header(
    env: &Env,
    id: &str,
) -> Option<std::collections::HashMap<String, aws_sdk_dynamodb::types::AttributeValue>> {
    let got = env.client.get_item().table_name(&env.tx_table).set_key(Some(dynamo_saga::records::header_key(id)));
    got.consistent_read(true).send().await.unwrap().item
}

/// 40 updates of one action a batch, steps of four shares of four batches: begun, and driven until `stop`.
async fn forty_in_shares(name: &str, condition: Option<&str>) -> (Env, Vec<String>, String) {
    let env =
        Env::with(name, |c| dynamo_saga::Config { batch_size: 2, direct: false, fan_out: 4, share_batches: 4, ..c })
            .await;
    let (keys, items) = counters(&env, "k", 40, condition).await;
    let begun = begin::submit_here(&env.store, &json!({ "TransactItems": items })).await.unwrap();
    (env, keys, begun.transaction_id)
}

/// A share no worker could be started for runs in the step's own call, a piece at a time, and stops when the call's
/// deadline has passed: the step records the batches before the first it left (lock, apply and rollback alike), and
/// the next call goes on from there. Every item is written once.
#[tokio::test]
async fn a_share_run_here_for_want_of_a_worker_stops_at_the_calls_deadline() {
    use dynamo_saga::phase::{apply, lock, resume::Step, rollback};
    use std::time::{Duration, Instant};
    let late = |env: &Env| env.store.with_workers(throttled()).with_deadline(Instant::now());
    let early =
        |env: &Env| env.store.with_workers(throttled()).with_deadline(Instant::now() + Duration::from_secs(120));
    let header = |env: &Env, id: &str| {
        let (store, id) = (env.store.clone(), id.to_string());
        async move { dynamo_saga::records::read_header(&store, &Meter::default(), &id).await.unwrap() }
    };

    // Commit path: the first share (batches 0..4) runs here whole; the three throttled ones stop before their first
    // piece, so lock and apply each record 4 batches, then a call with time left does the rest of the step here.
    let (env, keys, id) = forty_in_shares("sharelate", None).await;
    lock::lock(&late(&env), &id, 0).await.unwrap();
    assert_eq!(header(&env, &id).await.locked, 4, "locked up to the first batch a throttled share left");
    lock::lock(&early(&env), &id, 4).await.unwrap();
    assert_eq!(header(&env, &id).await.locked, 20, "the next call locks the rest of its step, every share here");
    harness::run_steps_until(&env.store, &id, |_, s| matches!(s, Step::Apply(_))).await;
    apply::apply(&late(&env), &id, 0).await.unwrap();
    assert_eq!(header(&env, &id).await.applied, 4, "applied up to the first batch a throttled share left");
    for (i, k) in keys.iter().enumerate() {
        let item = env.get(&env.a, json!({"pk": sv(k)})).await.unwrap();
        let applied = item["n"] == nv(1) && item.get("_sagaLock").is_none();
        assert_eq!(applied, i < 4, "{k}: {item}");
    }
    apply::apply(&early(&env), &id, 4).await.unwrap();
    assert_eq!(header(&env, &id).await.applied, 20);
    let (h, _) = harness::run_steps_until(&env.store, &id, |_, _| false).await;
    assert_eq!(h.state, dynamo_saga::TxState::Committed);
    for k in &keys {
        assert_eq!(env.get(&env.a, json!({"pk": sv(k)})).await.unwrap(), json!({"pk": sv(k), "n": nv(1)}), "{k}");
    }
    env.assert_clean().await;

    // Rollback path: the last action's condition fails, after the first step has locked 16 batches.
    let (env, keys, id) = forty_in_shares("sharelaterb", Some("n < :one")).await;
    env.put(&env.a, json!({"pk": sv(&keys[39]), "n": nv(5)})).await;
    let (h, _) = harness::run_steps_until(&env.store, &id, |_, s| matches!(s, Step::Rollback(_))).await;
    assert_eq!(h.state, dynamo_saga::TxState::RolledBack, "{h:?}");
    assert!(h.lock_started >= 16, "{h:?}");
    rollback::rollback(&late(&env), &id, 0, None).await.unwrap();
    assert_eq!(header(&env, &id).await.restored, 4, "restored up to the first batch a throttled share left");
    harness::run_steps_until(&env.store, &id, |_, _| false).await;
    for (i, k) in keys.iter().enumerate() {
        let n = if i == 39 { 5 } else { 0 };
        assert_eq!(env.get(&env.a, json!({"pk": sv(k)})).await.unwrap(), json!({"pk": sv(k), "n": nv(n)}), "{k}");
    }
    env.assert_clean().await;
}

/// A worker that finds the transaction gone from the step's attempt (finished, or moved to another attempt) answers
/// `Ended`; the apply or rollback step then writes nothing to the header, whoever moved the transaction on having it.
#[tokio::test]
async fn a_workers_ended_answer_leaves_the_header_untouched() {
    use dynamo_saga::phase::{apply, resume::Step, rollback, Outcome};
    let ended = |state: &str| std::sync::Arc::new(Workers(Some(json!({ "Ended": state }))));

    let (env, keys, id) = forty_in_shares("shareended", None).await;
    harness::run_steps_until(&env.store, &id, |_, s| matches!(s, Step::Apply(_))).await;
    let before = stored_header(&env, &id).await;
    let report = apply::apply(&env.store.with_workers(ended("COMMITTED")), &id, 0).await.unwrap();
    assert_eq!(report.outcome, Outcome::Ended { state: dynamo_saga::TxState::Committed });
    assert_eq!(stored_header(&env, &id).await, before, "apply's header untouched");
    harness::run_steps_until(&env.store, &id, |_, _| false).await;
    for k in &keys {
        assert_eq!(env.get(&env.a, json!({"pk": sv(k)})).await.unwrap(), json!({"pk": sv(k), "n": nv(1)}), "{k}");
    }
    env.assert_clean().await;

    let (env, keys, id) = forty_in_shares("shareendedrb", Some("n < :one")).await;
    env.put(&env.a, json!({"pk": sv(&keys[39]), "n": nv(5)})).await;
    harness::run_steps_until(&env.store, &id, |_, s| matches!(s, Step::Rollback(_))).await;
    let before = stored_header(&env, &id).await;
    let report = rollback::rollback(&env.store.with_workers(ended("ROLLED_BACK")), &id, 0, None).await.unwrap();
    assert_eq!(report.outcome, Outcome::Ended { state: dynamo_saga::TxState::RolledBack });
    assert_eq!(stored_header(&env, &id).await, before, "rollback's header untouched");
    harness::run_steps_until(&env.store, &id, |_, _| false).await;
    env.assert_clean().await;
}
