//! Every file in `events/` used as `events/README.md` says, on the local stack: function events through the local
//! Lambda Invoke API (what `sam local invoke -e` sends), state machine inputs, API Gateway events through the API
//! function (which starts executions on the stack's Step Functions endpoint) and EventBridge events through the events
//! function, which EventBridge invokes with the event as it is. The tables are the ones the README names (`Orders`,
//! `Inventory`).

use harness::stack::{stack, Stack};
use harness::{create_table, scan, sv};
use serde_json::{json, Value};

fn event(name: &str) -> Value {
    let path = harness::root().join("events").join(name);
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The event with its sample `TransactionId` replaced by `id`, as the README tells users to do.
fn for_tx(name: &str, id: &str) -> Value {
    let mut e = event(name);
    e["TransactionId"] = json!(id);
    e
}

async fn seed(st: &Stack) {
    let c = st.client();
    for t in ["Orders", "Inventory"] {
        create_table(&c, t, &[("pk", "S")]).await;
    }
    let put = |t: &'static str, item: Value| {
        let c = c.clone();
        async move {
            c.put_item()
                .table_name(t)
                .set_item(Some(dynamo_saga::value::item_from_json(&item).unwrap()))
                .send()
                .await
                .unwrap();
        }
    };
    put("Orders", json!({"pk": sv("order-0001"), "status": sv("PLACED")})).await;
    let mut keys: Vec<String> = (1..=7).map(|i| format!("widget-{i}")).collect();
    keys.extend((0..250).map(|i| format!("unit-{i:03}")));
    // Not in the README's list: an item of this test's own.
    keys.push("gadget-1".into());
    futures::future::join_all(keys.iter().map(|k| put("Inventory", json!({"pk": sv(k), "status": sv("AVAILABLE")}))))
        .await;
}

async fn status_of(st: &Stack, pk: &str) -> Option<String> {
    let items = scan(&st.client(), "Inventory").await;
    items.values().find(|v| v["pk"]["S"] == pk).map(|v| v["status"]["S"].as_str().unwrap().to_string())
}

async fn step(st: &Stack, function: &str, input: &Value) -> Value {
    st.invoke(function, input).await.unwrap_or_else(|e| panic!("{function} failed: {e:?}"))
}

#[tokio::test]
async fn every_sample_event_works_as_documented() {
    let st = stack().await;
    seed(st).await;

    // begin.json, then each phase's event with the id Begin returned: a committed transaction, one call a phase.
    let begun = step(st, "saga-begin", &event("begin.json")).await;
    let id = begun["TransactionId"].as_str().unwrap().to_string();
    assert_eq!((begun["Step"].as_str(), begun["Actions"].as_u64()), (Some("Lock"), Some(3)));
    let lock = step(st, "saga-lock", &for_tx("lock.json", &id)).await;
    assert_eq!(lock["Step"], "Save");
    // lock-contended.json: Lock again with a Contention; the locks are already ours, so it simply moves on.
    assert_eq!(step(st, "saga-lock", &for_tx("lock-contended.json", &id)).await["Step"], "Save");
    for (function, file, next) in [
        ("saga-save", "save.json", "Commit"),
        ("saga-commit", "commit.json", "Apply"),
        ("saga-apply", "apply.json", "Complete"),
        ("saga-complete", "complete.json", "Release"),
        ("saga-release", "release.json", "Finished"),
    ] {
        let out = step(st, function, &for_tx(file, &id)).await;
        assert_eq!(out["Step"], next, "{function}: {out}");
    }
    assert_eq!(status_of(st, "widget-1").await.as_deref(), Some("SOLD"));

    // sm-rollback.json to Begin alone: 2 actions, carried out in one call, which DynamoDB cancels; the transaction
    // has ended, and release.json fails with TransactionCanceled and the reasons. In MRSC mode, which has no such
    // call, the phases cancel it: Lock meets the failed condition, and Rollback undoes what it locked.
    let begun = step(st, "saga-begin", &event("sm-rollback.json")).await;
    let id = begun["TransactionId"].as_str().unwrap().to_string();
    if harness::one_call() {
        assert_eq!(
            (begun["Step"].as_str(), begun["State"].as_str(), begun["Batches"].as_u64()),
            (Some("Finished"), Some("ROLLED_BACK"), Some(0)),
            "{begun}"
        );
    } else {
        assert_eq!((begun["Step"].as_str(), begun["Batches"].as_u64()), (Some("Lock"), Some(1)), "{begun}");
        let locked = step(st, "saga-lock", &for_tx("lock.json", &id)).await;
        assert_eq!((locked["Step"].as_str(), locked["State"].as_str()), (Some("Rollback"), Some("ROLLED_BACK")));
        assert_eq!(step(st, "saga-rollback", &for_tx("rollback.json", &id)).await["Step"], "Release");
    }
    let err = st.invoke("saga-release", &for_tx("release.json", &id)).await.expect_err("cancelled");
    assert_eq!(err.error_type, "TransactionCanceled");

    // rollback.json: the next rollback step of a transaction already decided ROLLED_BACK (sm-rollback.json's
    // request under a Parent, which runs the protocol, fails its condition at Lock); release.json then fails with
    // TransactionCanceled and the reasons.
    let mut body = event("sm-rollback.json");
    body["Parent"] = json!({"TableName": "Inventory", "Key": {"pk": sv("widget-4")}});
    let begun = step(st, "saga-begin", &body).await;
    let id = begun["TransactionId"].as_str().unwrap().to_string();
    let locked = step(st, "saga-lock", &for_tx("lock.json", &id)).await;
    assert_eq!((locked["Step"].as_str(), locked["State"].as_str()), (Some("Rollback"), Some("ROLLED_BACK")));
    assert_eq!(step(st, "saga-rollback", &for_tx("rollback.json", &id)).await["Step"], "Release");
    let err = st.invoke("saga-release", &for_tx("release.json", &id)).await.expect_err("a rolled-back transaction");
    assert_eq!(err.error_type, "TransactionCanceled");
    let c: Value = serde_json::from_str(&err.message).expect("the message is the cancellation's JSON");
    harness::assert_named_json(&c);
    assert_eq!(c["CancellationReasons"][1]["Code"], "ConditionalCheckFailed");
    assert_eq!(c["CancellationReasons"][1]["Item"]["pk"], sv("order-0001"));
    assert_eq!(status_of(st, "widget-5").await.as_deref(), Some("AVAILABLE"));

    // rollback-abort.json: the state machine's compensation after a phase failed for good.
    let mut body = event("begin.json");
    body["TransactItems"][0]["Put"]["Item"]["pk"] = sv("order-1002");
    body["TransactItems"][1]["Update"]["Key"]["pk"] = sv("gadget-1");
    let id = step(st, "saga-begin", &body).await["TransactionId"].as_str().unwrap().to_string();
    step(st, "saga-lock", &for_tx("lock.json", &id)).await;
    let aborted = step(st, "saga-rollback", &for_tx("rollback-abort.json", &id)).await;
    assert_eq!((aborted["Step"].as_str(), aborted["State"].as_str()), (Some("Release"), Some("ROLLED_BACK")));
    let err = st.invoke("saga-release", &for_tx("release.json", &id)).await.expect_err("aborted");
    assert_eq!(err.error_type, "TransactionAborted", "{err:?}");
    assert!(err.message.contains("DynamoDbError"), "the reason names the error: {}", err.message);
    assert_eq!(status_of(st, "gadget-1").await.as_deref(), Some("AVAILABLE"));

    // sweeper.json: the scheduled event; the report says what it looked at.
    let report = step(st, "saga-sweeper", &event("sweeper.json")).await;
    assert!(report["Examined"].is_u64() && report["Failed"].as_array().is_some_and(|f| f.is_empty()), "{report}");

    // The staging API's events: create, append chunk 0, seal (the sample id replaced by the one create returned),
    // then the execution input the seal returns runs the transaction.
    let created = step(st, "saga-stage", &event("api-stage-create.json")).await;
    assert_eq!(created["statusCode"], 201, "{created}");
    let id = serde_json::from_str::<Value>(created["body"].as_str().unwrap()).unwrap()["TransactionId"]
        .as_str()
        .unwrap()
        .to_string();
    let with_id = |name: &str| {
        let mut e = event(name);
        let sample = e["pathParameters"]["id"].as_str().unwrap().to_string();
        e["pathParameters"]["id"] = json!(id);
        e["path"] = json!(e["path"].as_str().unwrap().replace(&sample, &id));
        e
    };
    let appended = step(st, "saga-stage", &with_id("api-stage-append.json")).await;
    assert_eq!(appended["statusCode"], 200, "{appended}");
    let sealed = step(st, "saga-stage", &with_id("api-stage-seal.json")).await;
    assert_eq!(sealed["statusCode"], 200, "{sealed}");
    let sealed: Value = serde_json::from_str(sealed["body"].as_str().unwrap()).unwrap();
    assert_eq!(sealed["Actions"], 2);
    let ex = st.execute(&sealed["ExecutionInput"]).await;
    assert_eq!((ex.status.as_str(), ex.output["TransactionId"].as_str()), ("SUCCEEDED", Some(id.as_str())), "{ex:?}");
    let unknown = step(st, "saga-stage", &event("api-stage-seal.json")).await;
    assert_eq!(unknown["statusCode"], 404, "the sample id was never created: {unknown}");
    // api-get-status.json: the status of that transaction, and of the sample id, which does not exist.
    let status = step(st, "saga-status", &with_id("api-get-status.json")).await;
    assert_eq!(status["statusCode"], 200, "{status}");
    let status: Value = serde_json::from_str(status["body"].as_str().unwrap()).unwrap();
    assert_eq!(
        (status["State"].as_str(), status["Finished"].as_bool(), status["Actions"].as_u64()),
        (Some("COMMITTED"), Some(true), Some(2)),
        "{status}"
    );
    let unknown = step(st, "saga-status", &event("api-get-status.json")).await;
    assert_eq!(unknown["statusCode"], 404, "{unknown}");

    // State machine inputs. A request of under 100 actions is carried out in one call, but in MRSC mode.
    let one_call = harness::one_call();
    let ex = st.execute(&event("sm-small.json")).await;
    assert_eq!(
        (ex.status.as_str(), ex.output["Actions"].as_u64(), ex.output["Batches"].as_u64()),
        ("SUCCEEDED", Some(3), Some(u64::from(!one_call))),
        "one call: {ex:?}"
    );
    let ex = st.execute(&event("sm-rollback.json")).await;
    assert_eq!(ex.error.as_deref(), Some("TransactionCanceled"), "{ex:?}");
    let codes: Vec<Value> = ex.cancellation().unwrap()["CancellationReasons"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["Code"].clone())
        .collect();
    assert_eq!(codes, [json!("None"), json!("ConditionalCheckFailed")]);
    let ex = st.execute(&event("sm-250.json")).await;
    assert_eq!((ex.status.as_str(), ex.output["Batches"].as_u64()), ("SUCCEEDED", Some(3)), "{ex:?}");
    assert_eq!(status_of(st, "unit-249").await.as_deref(), Some("SOLD"));
    let again = st.execute(&event("sm-250.json")).await;
    assert_eq!(again.error.as_deref(), Some("TransactionCanceled"), "a second run finds every unit sold: {again:?}");

    // The API Gateway event: 2 actions, which the API function carries out in one call, with no execution.
    let started = step(st, "saga-stage", &event("api-post-transactions.json")).await;
    assert_eq!(started["statusCode"], 200, "{started}");
    let started: Value = serde_json::from_str(started["body"].as_str().unwrap()).unwrap();
    assert_eq!(started.get("ExecutionArn").is_none(), one_call, "{started}");
    let started = st.settled(&started).await;
    assert_eq!(
        (started["State"].as_str(), started["Finished"].as_bool()),
        (Some("COMMITTED"), Some(true)),
        "{started}"
    );
    assert_eq!(status_of(st, "widget-6").await.as_deref(), Some("SOLD"));
    // The EventBridge event's detail is the request: 2 actions, carried out by the events function in one call.
    let eb = event("eventbridge-transaction.json");
    let first = st.settled(&step(st, "saga-events", &eb).await).await;
    assert_eq!((first["State"].as_str(), first["Finished"].as_bool()), (Some("COMMITTED"), Some(true)), "{first}");
    // EventBridge may deliver twice: the same ClientRequestToken gives the same transaction, applied once.
    let twice = st.settled(&step(st, "saga-events", &eb).await).await;
    assert_eq!(
        (&twice["TransactionId"], twice["State"].as_str()),
        (&first["TransactionId"], Some("COMMITTED")),
        "{twice}"
    );
    assert_eq!(status_of(st, "widget-7").await.as_deref(), Some("SOLD"));

    // An event whose request has no ClientRequestToken: the event's id stands in for one, so a redelivery of the same
    // event applies nothing twice, and another event is another transaction.
    let pk = format!("eb-counter-{}", event_id());
    let add = |id: &str| {
        json!({"version": "0", "id": id, "detail-type": "TransactWriteItems", "source": "dynamo-saga",
            "account": "000000000000", "time": "2026-11-29T10:00:00Z", "region": "us-east-1", "resources": [],
            "detail": {"TransactItems": [
        {"Update": {"TableName": "Orders", "Key": {"pk": sv(&pk)}, "UpdateExpression": "ADD n :one",
            "ExpressionAttributeValues": {":one": {"N": "1"}}}}]}})
    };
    let counter = || async {
        let c = st.client();
        let key = dynamo_saga::value::item_from_json(&json!({"pk": sv(&pk)})).unwrap();
        c.get_item()
            .table_name("Orders")
            .set_key(Some(key))
            .consistent_read(true)
            .send()
            .await
            .unwrap()
            .item
            .and_then(|i| i.get("n").cloned())
    };
    let one = add(&event_id());
    let runs = [step(st, "saga-events", &one).await, step(st, "saga-events", &one).await];
    for r in &runs {
        assert_eq!(st.settled(r).await["State"], "COMMITTED", "{r}");
    }
    assert_eq!(runs[0]["TransactionId"], runs[1]["TransactionId"], "a redelivered event is the same transaction");
    assert_eq!(counter().await, Some(aws_sdk_dynamodb::types::AttributeValue::N("1".into())), "applied once");
    let other = st.settled(&step(st, "saga-events", &add(&event_id())).await).await;
    assert_ne!(other["TransactionId"], runs[0]["TransactionId"], "{other}");
    assert_eq!(counter().await, Some(aws_sdk_dynamodb::types::AttributeValue::N("2".into())));
}

/// A stack shared by teams (`CallerEntitlements`): through the events function, as EventBridge invokes it, each
/// sender may name only the tables its entitlements list. Events of source `dynamo-saga.orders` from the stack's
/// account write the orders tables, in one call and through the state machine; the same request from source
/// `dynamo-saga.payments`, which no entry names, or from another account, and an orders event naming another table,
/// write nothing and go to the dead-letter queue as received, with `ErrorType` `AccessDenied` and a message naming
/// the action and the table; so does an event whose request is not valid (`ValidationError`), at once, not retried.
#[tokio::test]
async fn event_senders_write_only_the_tables_they_are_entitled_to() {
    let st = stack().await;
    let mine = harness::Env::on_stack("ent-orders").await;
    let other = harness::Env::on_stack("ent-other").await;
    let put = |t: &str, pk: &str| json!({"Put": {"TableName": t, "Item": {"pk": sv(pk)}}});
    let sent = |source: &str, account: &str, items: Vec<Value>| {
        json!({"version": "0", "id": event_id(), "detail-type": "TransactWriteItems", "source": source,
            "account": account, "time": "2026-11-29T10:00:00Z", "region": "us-east-1", "resources": [],
            "detail": {"TransactItems": items}})
    };

    let small = sent("dynamo-saga.orders", "000000000000", vec![put(&mine.a, "e-1"), put(&mine.a, "e-2")]);
    let out = st.settled(&step(st, "saga-events", &small).await).await;
    assert_eq!((out["State"].as_str(), out["Finished"].as_bool()), (Some("COMMITTED"), Some(true)), "{out}");
    let many =
        sent("dynamo-saga.orders", "000000000000", (0..150).map(|i| put(&mine.a, &format!("e-many-{i:03}"))).collect());
    let out = step(st, "saga-events", &many).await;
    let (status, _, error, cause) = st.ended(out["ExecutionArn"].as_str().expect("an execution")).await;
    assert_eq!(status, "SUCCEEDED", "{error} {cause}");
    assert_eq!(mine.scan(&mine.a).await.len(), 152);
    assert!(st.dead_letter(small["id"].as_str().unwrap()).await.is_none(), "nothing of it in the dead-letter queue");

    let before = (mine.snapshot().await, other.snapshot().await);
    for (event, error_type, names) in [
        (
            sent("dynamo-saga.payments", "000000000000", vec![put(&mine.a, "p-1")]),
            "AccessDenied",
            "TransactItems[0]: events of source \"dynamo-saga.payments\"".to_string(),
        ),
        (
            sent("dynamo-saga.orders", "444455556666", vec![put(&mine.a, "p-2")]),
            "AccessDenied",
            "from account 444455556666".to_string(),
        ),
        (
            sent("dynamo-saga.orders", "000000000000", vec![put(&mine.a, "o-3"), put(&other.a, "o-4")]),
            "AccessDenied",
            "TransactItems[1]: ".to_string(),
        ),
        (
            sent("dynamo-saga.orders", "000000000000", vec![json!({"Put": {"TableName": mine.a, "Item": {}}})]),
            "ValidationError",
            "TransactItems[0]".to_string(),
        ),
    ] {
        let out = step(st, "saga-events", &event).await;
        assert_eq!(out["Refused"]["ErrorType"], error_type, "{out}");
        let (body, attributes) = st.dead_letter(event["id"].as_str().unwrap()).await.expect("a dead letter");
        assert_eq!(body, event, "the event as received");
        assert_eq!(attributes.get("ErrorType").map(String::as_str), Some(error_type), "{attributes:?}");
        let message = &attributes["ErrorMessage"];
        assert!(message.contains(&names), "{message} should name {names}");
        if error_type == "AccessDenied" {
            let table = event["detail"]["TransactItems"].as_array().unwrap().last().unwrap()["Put"]["TableName"]
                .as_str()
                .unwrap();
            assert!(message.contains(&format!("table {table}")), "{message}");
        }
        assert!(!attributes["RequestID"].is_empty(), "{attributes:?}");
    }
    assert_eq!((mine.snapshot().await, other.snapshot().await), before, "nothing refused was written");
    mine.assert_clean().await;
}

/// A new event id, shaped as EventBridge's (a UUID).
fn event_id() -> String {
    let h = format!("{:032x}", rand::random::<u128>());
    format!("{}-{}-{}-{}-{}", &h[..8], &h[8..12], &h[12..16], &h[16..20], &h[20..])
}
