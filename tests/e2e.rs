//! End to end on the local stack: the real state machine definition (aws-local-stepfunctions) calling the real
//! Lambda functions (debug builds behind `cargo lambda watch`) on DynamoDB Local.

use dynamo_saga::phase::begin;
use dynamo_saga::store::Meter;
use harness::stack::stack;
use harness::workload::{append_to_parent, assert_mixed_committed, kind, mixed, parent_order, seed_mixed};
use harness::{nv, sv, Env};
use serde_json::{json, Value};

fn assert_committed(ex: &harness::stack::Execution, actions: usize, batches: usize) {
    assert_eq!(ex.status, "SUCCEEDED", "{ex:?}");
    assert_eq!(ex.output["Step"], "Finished");
    assert_eq!(ex.output["State"], "COMMITTED");
    assert_eq!(ex.output["Actions"], actions);
    assert_eq!(ex.output["Batches"], batches);
}

#[tokio::test]
async fn commits_250_actions_through_the_state_machine() {
    let env = Env::on_stack("sm250").await;
    seed_mixed(&env, "t", 250).await;
    let ex = stack().await.execute(&mixed(&env, "t", 250)).await;
    assert_committed(&ex, 250, 3);
    assert_mixed_committed(&env, "t", 250).await;
    env.assert_clean().await;
    // Each phase call does every batch it can: Begin, Lock, Save, Commit, Apply, Complete, Release; a lock write's
    // answer lost (the connection closed under it) is recorded on the header and leaves the visit to the sweeper,
    // never to the execution, which ends with the transaction.
    let id = ex.output["TransactionId"].as_str().unwrap();
    let h = dynamo_saga::records::read_header(&env.store, &Meter::default(), id).await.unwrap();
    assert_eq!(h.needs_revisit(), h.revisit_pending() || h.revisited_at.is_some(), "flagged exactly then: {h:?}");
    assert_eq!(ex.task_calls, 7, "{ex:?}");
    // docs/clients.md shows the status answer of such a transaction: the same fields, of the same JSON types, and the
    // same state, attempt, size and progress.
    let event = harness::api::event("GET", "/transactions/{id}", json!({ "id": id }), None);
    let out = stack().await.invoke("saga-status", &event).await.expect("the status function answers");
    assert_eq!(out["statusCode"], 200, "{out}");
    let answer: Value = serde_json::from_str(out["body"].as_str().unwrap()).unwrap();
    let sample = documented_status_answer();
    // Fields an answer has only at times: the token when the request gave one, and a visit after a lost answer.
    let without = |v: &Value| {
        let mut v = v.clone();
        for optional in ["ClientRequestToken", "Revisit"] {
            v.as_object_mut().unwrap().remove(optional);
        }
        shape(&v)
    };
    assert_eq!(without(&answer), without(&sample), "docs/clients.md's sample against {answer}");
    for field in ["State", "Finished", "Next", "Attempt", "WaitedMs", "Actions", "Batches", "Protocol", "Progress"] {
        assert_eq!(answer[field], sample[field], "{field}: {answer}");
    }
}

/// The JSON block under "## The status answer" of docs/clients.md.
fn documented_status_answer() -> Value {
    let page = std::fs::read_to_string(harness::root().join("docs/clients.md")).unwrap();
    let section = page.split("## The status answer").nth(1).expect("docs/clients.md has the status answer");
    let block = section.split("```json").nth(1).and_then(|b| b.split("```").next()).expect("a json block");
    serde_json::from_str(block).unwrap_or_else(|e| panic!("docs/clients.md's status answer: {e}"))
}

/// Each field's path and JSON type, objects followed into.
fn shape(v: &Value) -> Vec<String> {
    fn walk(v: &Value, path: String, out: &mut Vec<String>) {
        let kind = match v {
            Value::Null => "null",
            Value::Bool(_) => "bool",
            Value::Number(_) => "number",
            Value::String(_) => "string",
            Value::Array(_) => "array",
            Value::Object(m) => {
                for (k, x) in m {
                    walk(x, format!("{path}.{k}"), out);
                }
                "object"
            }
        };
        out.push(format!("{path}: {kind}"));
    }
    let mut out = Vec::new();
    walk(v, String::new(), &mut out);
    out.sort();
    out
}

#[tokio::test]
async fn rolls_back_through_the_state_machine_when_a_condition_fails() {
    let env = Env::on_stack("smrb").await;
    let n = 250;
    seed_mixed(&env, "t", n).await;
    let body = mixed(&env, "t", n);
    // Break an update's condition in the middle batch.
    let sorted = begin::validate(&env.store, &Meter::default(), &body).await.unwrap().actions;
    let victim = sorted[100..].iter().find(|a| kind(a.index) == "Update").unwrap().index;
    env.put(&env.b, json!({"pk": sv("t-acct"), "sk": nv(victim as i64), "v": nv(1), "cnt": nv(0)})).await;
    let before = env.snapshot().await;

    let ex = stack().await.execute(&body).await;
    assert_eq!(ex.status, "FAILED", "{ex:?}");
    assert_eq!(ex.error.as_deref(), Some("TransactionCanceled"));
    let c = ex.cancellation().expect("the cause carries the cancellation");
    let reasons = c["CancellationReasons"].as_array().unwrap();
    assert_eq!(reasons.len(), n);
    for (i, r) in reasons.iter().enumerate() {
        let want = if i == victim { "ConditionalCheckFailed" } else { "None" };
        assert_eq!(r["Code"], want, "reason {i}: {r}");
    }
    assert_eq!(reasons[victim]["Item"]["v"], nv(1), "ALL_OLD returns the item as it was");
    assert_eq!(env.snapshot().await, before, "every item as before");
    env.assert_clean().await;
}

#[tokio::test]
async fn contending_executions_both_finish_correctly() {
    let env = Env::on_stack("smcontend").await;
    let pks: Vec<String> = (0..200).map(|i| format!("c{i:03}")).collect();
    for pk in &pks {
        env.put(&env.a, json!({"pk": sv(pk), "n": nv(0)})).await;
    }
    let body = |range: std::ops::Range<usize>, d: i64| {
        let items: Vec<Value> = pks[range]
            .iter()
            .map(|pk| {
                json!({"Update": {"TableName": env.a, "Key": {"pk": sv(pk)}, "UpdateExpression": "ADD n :d",
                "ExpressionAttributeValues": {":d": nv(d)}}})
            })
            .collect();
        json!({ "TransactItems": items })
    };
    let st = stack().await;
    let (b1, b2) = (body(0..150, 1), body(50..200, 10));
    let (one, two) = tokio::join!(st.execute(&b1), st.execute(&b2));
    let mut want = vec![0i64; 200];
    // Neither is cancelled by the other: the one rolled back by the older one tries again in the same execution.
    for (ex, range, d) in [(&one, 0..150, 1), (&two, 50..200, 10)] {
        assert_eq!(ex.status, "SUCCEEDED", "{ex:?}");
        range.for_each(|i| want[i] += d);
    }
    for (pk, w) in pks.iter().zip(&want) {
        let it = env.get(&env.a, json!({"pk": sv(pk)})).await.unwrap();
        assert_eq!(it["n"], nv(*w), "{pk}");
    }
    env.assert_clean().await;
}

#[tokio::test]
async fn a_phase_that_dies_mid_batch_is_retried_and_commits_once() {
    let env = Env::on_stack("smfault").await;
    seed_mixed(&env, "t", 250).await;
    let st = stack().await;
    let begun = st.invoke("saga-begin", &mixed(&env, "t", 250)).await.expect("begins");
    let id = begun["TransactionId"].as_str().unwrap().to_string();
    // The Apply call, after the commit, dies after its 3rd write (three items applied and unlocked), before it
    // records the batch; the retried call must not apply those items again.
    let fault = st.inject_fault_for(&id, "Apply", 3);
    let ex = st.execute(&json!({ "TransactionId": id })).await;
    assert!(!fault.exists(), "the fault was taken");
    assert_committed(&ex, 250, 3);
    assert!(ex.task_calls > 7, "the failed call was retried: {ex:?}");
    // ADD counters applied exactly once, every item as committed.
    assert_mixed_committed(&env, "t", 250).await;
    env.assert_clean().await;
}

#[tokio::test]
async fn a_bad_request_fails_the_execution_with_validation_error_and_writes_nothing() {
    let env = Env::on_stack("smbad").await;
    env.put(&env.a, json!({"pk": sv("k"), "n": nv(1)})).await;
    let before = env.snapshot().await;
    let body = json!({"TransactItems": [
        {"Update": {"TableName": env.a, "Key": {"pk": sv("k")}, "UpdateExpression": "SET n = :v"}}
    ]});
    let ex = stack().await.execute(&body).await;
    assert_eq!(ex.status, "FAILED");
    assert_eq!(ex.error.as_deref(), Some("ValidationError"), "{ex:?}");
    assert!(ex.cause.as_deref().unwrap_or("").contains(":v"), "the message names the problem: {ex:?}");
    assert_eq!(env.snapshot().await, before);
}

/// 10,000 actions through the state machine: 102 batches, one or two Lambda calls a phase, far inside the 25,000
/// history events a Standard execution allows.
#[tokio::test]
async fn commits_10000_actions_through_the_state_machine() {
    let env = Env::on_stack("sm10k").await;
    let n = 10_000;
    let keys: Vec<String> = (0..n).map(|i| format!("k{i:05}")).collect();
    harness::put_all(&env.client, &env.a, keys.iter().map(|k| json!({"pk": sv(k), "n": nv(0)}))).await;
    let items: Vec<Value> = keys
        .iter()
        .map(|k| {
            json!({"Update": {"TableName": env.a, "Key": {"pk": sv(k)}, "UpdateExpression": "ADD n :one",
            "ConditionExpression": "attribute_exists(pk)", "ExpressionAttributeValues": {":one": nv(1)}}})
        })
        .collect();
    let ex = stack().await.execute(&json!({ "TransactItems": items })).await;
    assert_committed(&ex, n, n.div_ceil(99));
    // Begin, Save, Commit, Complete (every batch in one step) and Release once; Lock and Apply once each (a call
    // takes up to 50 runs of 20 batches), or more when a call's time budget ends first.
    assert!(ex.task_calls >= 7 && ex.task_calls <= 40, "{ex:?}");
    assert!(ex.history_events < 1_000, "{ex:?}");
    let all = env.scan(&env.a).await;
    assert_eq!(all.len(), n);
    assert!(all.values().all(|v| v["n"] == nv(1)), "every ADD applied exactly once");
    env.assert_clean().await;
    harness::report(format!(
        "10,000 actions through the state machine: {} Lambda calls, {} transitions, about {} history events, {} ms",
        ex.task_calls, ex.transitions, ex.history_events, ex.duration_ms
    ));
}

/// The bad-input catalogue through the state machine (what `POST /transactions` and the EventBridge rule start) and
/// through the staging API: every one fails with `ValidationError` and a message naming the problem, and nothing is
/// written. The over-the-maximum request (the stack's `SAGA_MAX_ACTIONS` plus one) is sent whole to the state machine,
/// as an EventBridge event or a Lambda invoke could carry it, and in chunks through the staging API.
#[tokio::test]
async fn bad_inputs_fail_through_the_state_machine_and_the_staging_api() {
    let env = Env::on_stack("smbadall").await;
    env.put(&env.a, json!({"pk": sv("x"), "v": nv(0)})).await;
    let st = stack().await;
    let before = env.snapshot().await;
    let cases = harness::bad::catalogue(&env.a, &env.b, &st.tx_table, st.max_actions);
    assert!(cases.len() >= 30);
    use futures::StreamExt;
    let runs: Vec<_> =
        futures::stream::iter(cases.iter().map(|(body, _, _)| st.execute(body))).buffered(4).collect().await;
    for ((body, action, needle), ex) in cases.iter().zip(&runs) {
        assert_eq!((ex.status.as_str(), ex.error.as_deref()), ("FAILED", Some("ValidationError")), "{body}: {ex:?}");
        let cause: Value = serde_json::from_str(ex.cause.as_deref().unwrap()).unwrap();
        let msg = cause["errorMessage"].as_str().unwrap();
        assert!(msg.to_lowercase().contains(&needle.to_lowercase()), "{msg:?} should mention {needle:?}");
        if let Some(i) = action {
            assert!(msg.starts_with(&format!("TransactItems[{i}]")), "{msg:?} should name action {i}");
        }
    }

    // The staging API: create with the request's other fields, append its actions in chunks, seal.
    let api = |method: &str, resource: &str, params: Value, body: String| {
        harness::api::event(method, resource, params, Some(body))
    };
    let call = |event: Value| async move {
        let out = st.invoke("saga-stage", &event).await.expect("the staging function answers every request");
        let body: Value = serde_json::from_str(out["body"].as_str().unwrap()).unwrap();
        (out["statusCode"].as_u64().unwrap(), body)
    };
    let mut checked = 0;
    for (body, _, needle) in &cases {
        let Some(obj) = body.as_object() else { continue };
        let mut envelope = obj.clone();
        let items = envelope.remove("TransactItems").unwrap_or(json!([]));
        // Chunks of at most 2,000 actions (well under the staging API's 350 KB a chunk); a non-array is one chunk.
        let chunks: Vec<Value> = match items.as_array() {
            Some(list) if list.len() > 2000 => list.chunks(2000).map(|c| json!(c)).collect(),
            _ => vec![items.clone()],
        };
        let (code, out) =
            call(api("POST", "/transactions/staged", Value::Null, Value::Object(envelope).to_string())).await;
        let (code, out) = if code != 201 {
            (code, out)
        } else {
            let id = out["TransactionId"].as_str().unwrap().to_string();
            let mut appended = (200, Value::Null);
            for (i, chunk) in chunks.iter().enumerate() {
                let event = api(
                    "PUT",
                    "/transactions/staged/{id}/chunks/{chunk}",
                    json!({"id": id, "chunk": i.to_string()}),
                    json!({"TransactItems": chunk}).to_string(),
                );
                appended = call(event).await;
                if appended.0 != 200 {
                    break;
                }
            }
            let (code, out) = appended;
            if code != 200 {
                (code, out)
            } else {
                let (code, out) =
                    call(api("POST", "/transactions/staged/{id}/seal", json!({"id": id}), String::new())).await;
                assert!(
                    out["message"].as_str().unwrap_or("").to_lowercase().contains(&needle.to_lowercase()),
                    "seal: {out} should mention {needle:?}"
                );
                (code, out)
            }
        };
        assert_eq!((code, out["__type"].as_str()), (400, Some("ValidationError")), "{body}: {out}");
        checked += 1;
    }
    assert!(checked >= 30, "{checked}");
    // Bad requests only an HTTP API meets.
    let big = json!({"TransactItems": (0..3000).map(|i| harness::bad::upd(&env.a, &format!("k{i:04}-{}", "x".repeat(100)))).collect::<Vec<_>>()});
    let (_, created) = call(api("POST", "/transactions/staged", Value::Null, "{}".into())).await;
    let id = created["TransactionId"].as_str().unwrap().to_string();
    for (event, needle) in [
        (api("POST", "/transactions/staged", Value::Null, "{\"Options\": {".into()), "not valid JSON"),
        (
            api("PUT", "/transactions/staged/{id}/chunks/{chunk}", json!({"id": id, "chunk": "first"}), "{}".into()),
            "whole number",
        ),
        (
            api("PUT", "/transactions/staged/{id}/chunks/{chunk}", json!({"id": id, "chunk": "0"}), "[]".into()),
            "TransactItems",
        ),
        (
            api("PUT", "/transactions/staged/{id}/chunks/{chunk}", json!({"id": id, "chunk": "0"}), big.to_string()),
            "split it",
        ),
        (api("POST", "/transactions/staged/{id}/seal", json!({"id": id}), "{\"Chunks\": \"all\"}".into()), "Chunks"),
        (api("DELETE", "/transactions/staged", Value::Null, String::new()), "no route"),
    ] {
        let (code, out) = call(event).await;
        assert_eq!((code, out["__type"].as_str()), (400, Some("ValidationError")), "{out}");
        assert!(out["message"].as_str().unwrap().contains(needle), "{out} should mention {needle:?}");
    }
    let (code, out) =
        call(api("POST", "/transactions/staged/{id}/seal", json!({"id": "01JDQ5A7K2M9P4R6T8V1W3X5Z7"}), String::new()))
            .await;
    assert_eq!((code, out["__type"].as_str()), (404, Some("TransactionNotFound")), "{out}");
    assert_eq!(env.snapshot().await, before, "nothing was written");
    harness::report(format!(
        "bad input through the state machine: {} requests failed with ValidationError; through the staging API: {checked}, plus 7 bad calls only an HTTP API meets; 0 writes",
        cases.len()
    ));
}

/// A phase Lambda dies after its 1st, 2nd or 3rd DynamoDB write, in every phase, on the commit path and on the
/// rollback path of transactions of 1, 2, 101 and 250 actions (for 101 and 250 an update of a string into a number
/// an index keys, which lock refuses last of all; for 1 and 2 an `ADD` to a string): the state machine's retry
/// finishes it, all-or-nothing, each `ADD` applied exactly once, no lock left. The rollback path has no Save and no
/// Apply: lock cancels it, and nothing is applied before the commit. At 250 actions (three batches, so three shares
/// of a step on the local stack's fan-out) one share of a lock, apply or rollback step dies the same way in the
/// invocation running it while the step's own call and the other share succeed: the step fails, and its retry
/// finishes it.
#[tokio::test]
async fn a_crash_in_any_phase_is_recovered_by_the_state_machine_retry() {
    use futures::StreamExt;
    let env = Env::on_stack("smcrash").await;
    let st = stack().await;
    let mut cases = Vec::new();
    // 1 and 2 actions are carried out by Begin in one TransactWriteItems call: its writes are that call, and on the
    // rollback path the header that records the cancellation. Larger requests run the protocol's phases, as every
    // request does in MRSC mode, where there is no such call.
    let small = usize::from(!harness::one_call());
    for (n, batches) in [(1usize, small), (2, small), (101, 2), (250, 3)] {
        for commit_path in [true, false] {
            let points: Vec<(&str, u64)> = match (batches, commit_path) {
                (0, true) => vec![("Begin", 0), ("Begin", 1)],
                (0, false) => vec![("Begin", 0), ("Begin", 1), ("Begin", 2)],
                (_, true) => ["Lock", "Save", "Apply", "Commit", "Complete", "Release"]
                    .iter()
                    .chain(if batches > 2 { &["LockShare", "ApplyShare"][..] } else { &[] })
                    .flat_map(|p| (1..=3).map(move |k| (*p, k)))
                    .collect(),
                (_, false) => ["Lock", "Rollback", "Release"]
                    .iter()
                    .chain(if batches > 2 { &["LockShare", "RollbackShare"][..] } else { &[] })
                    .flat_map(|p| (1..=3).map(move |k| (*p, k)))
                    .collect(),
            };
            for (phase, k) in points {
                cases.push((n, batches, commit_path, phase, k));
            }
        }
    }
    // Only this scenario's items: every key of a scenario starts with its tag.
    let mine = |snap: std::collections::BTreeMap<String, std::collections::BTreeMap<String, Value>>, tag: &str| {
        let needle = format!("\"{tag}-");
        snap.into_iter()
            .map(|(t, items)| {
                (
                    t,
                    items
                        .into_iter()
                        .filter(|(k, _)| k.contains(&needle))
                        .collect::<std::collections::BTreeMap<_, _>>(),
                )
            })
            .collect::<Vec<_>>()
    };
    let env = &env;
    let runs = futures::stream::iter(cases.into_iter().map(|(n, batches, commit_path, phase, k)| async move {
        let tag = format!("{}{n}{phase}{k}", if commit_path { "c" } else { "r" });
        let good = if commit_path { n } else { n - 1 };
        seed_mixed(env, &tag, good).await;
        let mut body = mixed(env, &tag, good);
        if !commit_path && batches > 0 {
            body["TransactItems"].as_array_mut().unwrap().push(harness::workload::refused_at_lock(env, &tag).await);
        } else if !commit_path {
            env.put(&env.b, json!({"pk": sv(&format!("{tag}-zz")), "sk": nv(0), "s": sv("text")})).await;
            body["TransactItems"].as_array_mut().unwrap().push(json!({"Update": {"TableName": env.b,
                "Key": {"pk": sv(&format!("{tag}-zz")), "sk": nv(0)}, "UpdateExpression": "ADD s :one",
                "ExpressionAttributeValues": {":one": nv(1)}}}));
        }
        let before = mine(env.snapshot().await, &tag);
        let (ex, fault) = if batches == 0 {
            let name = format!("{}-{tag}", env.a);
            let fault = st.inject_fault_for(&name, phase, k);
            (st.execute_named(&body, &name).await, fault)
        } else {
            let begun = st.invoke("saga-begin", &body).await.expect("begins");
            let id = begun["TransactionId"].as_str().unwrap().to_string();
            let fault = st.inject_fault_for(&id, phase, k);
            (st.execute(&json!({ "TransactionId": id })).await, fault)
        };
        assert!(!fault.exists(), "{tag}: no {phase} call reached write {k}");
        let _ = std::fs::remove_file(format!("{}.taken", fault.display()));
        if commit_path {
            assert_committed(&ex, n, batches);
            assert_mixed_committed(env, &tag, n).await;
        } else {
            assert_eq!(ex.error.as_deref(), Some("TransactionCanceled"), "{tag}: {ex:?}");
            assert_eq!(mine(env.snapshot().await, &tag), before, "{tag}: every item as before");
        }
    }))
    .buffer_unordered(4)
    .collect::<Vec<()>>()
    .await;
    env.assert_clean().await;
    let small = if small == 0 {
        "Begin before its first write and after its first and second"
    } else {
        "each phase, first 3 writes"
    };
    harness::report(format!(
        "crash recovered by the state machine's retry: {} scenarios (1 and 2 actions, {small}; 101 and 250 actions, each phase, first 3 writes; 250 actions, a share of a fanned-out lock, apply and rollback step failing in its worker while the others succeed, first 3 writes), 0 violations",
        runs.len()
    ));
}

/// `GET /transactions/{id}` through the status function while a 1,000-action transaction runs through the state
/// machine: it reports the transaction pending with batches locked, applied and completed growing, then committed
/// with every batch completed, its capacity and its execution; after a rollback, the failing action and its reason.
#[tokio::test]
async fn the_status_api_reports_progress_and_the_reason_of_a_rollback() {
    let env = Env::on_stack("smstatus").await;
    let st = stack().await;
    let n = 1000;
    let keys: Vec<String> = (0..n).map(|i| format!("s{i:04}")).collect();
    harness::put_all(&env.client, &env.a, keys.iter().map(|k| json!({"pk": sv(k), "v": nv(0)}))).await;
    let update = |k: &str| {
        json!({"Update": {"TableName": env.a, "Key": {"pk": sv(k)}, "UpdateExpression": "SET v = v + :one",
        "ConditionExpression": "v = :zero", "ExpressionAttributeValues": {":one": nv(1), ":zero": nv(0)}}})
    };
    let body = json!({"TransactItems": keys.iter().map(|k| update(k)).collect::<Vec<_>>()});
    let begun = st.invoke("saga-begin", &body).await.expect("begins");
    let id = begun["TransactionId"].as_str().unwrap().to_string();
    let get = |id: String| async move {
        let event = harness::api::event("GET", "/transactions/{id}", json!({ "id": id }), None);
        let out = st.invoke("saga-status", &event).await.expect("the status function answers");
        (out["statusCode"].as_u64().unwrap(), serde_json::from_str::<Value>(out["body"].as_str().unwrap()).unwrap())
    };
    let run = tokio::spawn({
        let input = json!({"TransactionId": id});
        async move { stack().await.execute(&input).await }
    });
    let mut seen: Vec<Value> = Vec::new();
    loop {
        let (code, s) = get(id.clone()).await;
        assert_eq!(code, 200, "{s}");
        let done = s["Finished"] == true;
        seen.push(s);
        if done {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_committed(&run.await.unwrap(), n, 11);
    let progress = |s: &Value, k: &str| s["Progress"][k].as_u64().unwrap();
    for pair in seen.windows(2) {
        for k in ["Locked", "Saved", "Applied", "Completed"] {
            assert!(progress(&pair[1], k) >= progress(&pair[0], k), "{k} went back: {} then {}", pair[0], pair[1]);
        }
    }
    let running: Vec<&Value> = seen.iter().filter(|s| s["Finished"] == false).collect();
    assert!(!running.is_empty(), "the status was read while the transaction ran");
    assert!(running.iter().all(|s| s["Batches"] == 11 && s["Actions"] == n), "{running:?}");
    let last = seen.last().unwrap();
    assert_eq!(
        (last["State"].as_str(), progress(last, "Completed"), last["Next"]["Step"].as_str()),
        (Some("COMMITTED"), 11, Some("Finished")),
        "{last}"
    );
    assert!(last["Usage"]["Calls"].as_u64().unwrap() > 2 * n as u64, "{last}");
    assert!(last["ExecutionArn"].as_str().is_some_and(|a| !a.is_empty()), "{last}");
    assert!(last["ElapsedMs"].as_u64().is_some() && last.get("Cancellation").is_none(), "{last}");
    let distinct: std::collections::BTreeSet<String> = running.iter().map(|s| s["Progress"].to_string()).collect();
    harness::report(format!(
        "status API during a {n}-action transaction: {} reads while it ran, {} distinct progress states",
        running.len(),
        distinct.len()
    ));

    // A rollback: the second update's condition fails; the status names it.
    env.put(&env.a, json!({"pk": sv("r0"), "v": nv(0)})).await;
    env.put(&env.a, json!({"pk": sv("r1"), "v": nv(5)})).await;
    let ex = st.execute(&json!({"TransactItems": [update("r0"), update("r1")]})).await;
    assert_eq!(ex.error.as_deref(), Some("TransactionCanceled"), "{ex:?}");
    let failed_id = ex.cancellation().unwrap()["TransactionId"].as_str().unwrap().to_string();
    let (code, s) = get(failed_id).await;
    assert_eq!(code, 200, "{s}");
    assert_eq!(s["State"], "ROLLED_BACK", "{s}");
    let reasons: Vec<&str> = s["Cancellation"]["CancellationReasons"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["Code"].as_str().unwrap())
        .collect();
    assert_eq!(reasons, ["None", "ConditionalCheckFailed"], "{s}");
    // Bad and unknown ids.
    let (code, s) = get("not-an-id".into()).await;
    assert_eq!((code, s["__type"].as_str()), (400, Some("ValidationError")), "{s}");
    let (code, s) = get("01JDQ5A7K2M9P4R6T8V1W3X5Z7".into()).await;
    assert_eq!((code, s["__type"].as_str()), (404, Some("TransactionNotFound")), "{s}");
}

/// The FIFO parent queue through the state machine: executions waiting for one parent are served in the order they first asked
/// for it, each waiting in the state machine's Wait state meanwhile.
#[tokio::test]
async fn executions_waiting_for_one_parent_are_served_in_ticket_order() {
    use dynamo_saga::phase::{lock, Outcome};
    use dynamo_saga::{Config, Coordinator, Store};
    use std::time::{Duration, Instant};
    let env = Env::on_stack("smfifo").await;
    env.put(&env.a, json!({"pk": sv("QUEUED"), "order": {"L": []}})).await;
    let body = |me: &str| append_to_parent(&env, me);
    // The library holds the parent while the executions queue up. Its heart does not beat, so the lease it writes on
    // the parent is long: the executions go by that lease, and however long they take to queue, none of them may take
    // the parent over.
    let holder_store =
        Store::new(env.client.clone(), Config { lease: Duration::from_secs(900), ..(*env.store.cfg).clone() });
    let holder = begin::begin(&holder_store, &body("holder")).await.unwrap().transaction_id;
    assert_eq!(lock::lock(&holder_store, &holder, 0).await.unwrap().outcome, Outcome::Done);
    assert_eq!(env.get(&env.a, json!({"pk": sv("QUEUED")})).await.unwrap()["leaseDuration"], nv(900));
    // The stack's transactions table is shared: count this test's parent's rows only.
    let queued = || async {
        let prefix = format!("queue#{}", env.a);
        env.queue_rows().await.iter().filter(|r| r["id"].as_s().is_ok_and(|id| id.starts_with(&prefix))).count()
    };
    let names: Vec<String> = (0..5).map(|i| format!("e{i}")).collect();
    let mut runs = Vec::new();
    for (i, n) in names.iter().enumerate() {
        let input = body(n);
        runs.push(tokio::spawn(async move { stack().await.execute(&input).await }));
        // Start the next one only once this one has its ticket.
        let t = Instant::now();
        while queued().await < i + 1 {
            let ended = runs.iter().position(|r| r.is_finished());
            assert_eq!(ended, None, "an execution ended while the parent was held");
            assert!(t.elapsed() < Duration::from_secs(60), "execution {i} never queued: {} rows", queued().await);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    Coordinator::new(env.store.clone()).drive(&holder).await.expect("the holder commits");
    for r in runs {
        let ex = r.await.unwrap();
        assert_eq!(ex.status, "SUCCEEDED", "{ex:?}");
    }
    let mut want = vec!["holder".to_owned()];
    want.extend(names.iter().cloned());
    assert_eq!(parent_order(&env).await, want, "served in ticket order");
    assert_eq!(queued().await, 0, "no queue row left");
    env.assert_clean().await;
}

/// The lock client's lease on the parent lock, through the state machine: a parent holder whose coordinator stopped keeps the parent while its
/// heart beats (a new record version number on the parent item), and an execution waiting for it takes over only
/// after the lease written on the parent item has passed without a beat. The old holder then writes nothing.
#[tokio::test]
async fn an_execution_takes_a_parent_over_only_after_a_lease_without_a_heartbeat() {
    use dynamo_saga::parent::heartbeat;
    use dynamo_saga::phase::{lock, Outcome};
    use dynamo_saga::records::read_header;
    use dynamo_saga::{Config, Coordinator, Store, TxState};
    use std::time::{Duration, Instant};
    let env = Env::on_stack("smtakeover").await;
    env.put(&env.a, json!({"pk": sv("P"), "n": nv(0)})).await;
    for k in ["i0", "i1", "i2"] {
        env.put(&env.a, json!({"pk": sv(k), "n": nv(0)})).await;
    }
    let body = |delta: i64| {
        let items: Vec<Value> = ["i0", "i1", "i2"]
            .iter()
            .map(|k| {
                json!({"Update": {"TableName": env.a, "Key": {"pk": sv(k)},
            "UpdateExpression": "ADD n :d", "ExpressionAttributeValues": {":d": nv(delta)}}})
            })
            .collect();
        json!({"TransactItems": items, "Parent": {"TableName": env.a, "Key": {"pk": sv("P")}}, "Options": {"LockWaitSeconds": null}})
    };
    // The holder runs in this process with a 4-second lease, takes the parent and its items, and its coordinator stops.
    let lease = Duration::from_secs(4);
    let holder_store = Store::new(env.client.clone(), Config { lease, ..(*env.store.cfg).clone() });
    let holder = begin::begin(&holder_store, &body(1)).await.unwrap().transaction_id;
    assert_eq!(lock::lock(&holder_store, &holder, 0).await.unwrap().outcome, Outcome::Done);
    let parent = env.get(&env.a, json!({"pk": sv("P")})).await.unwrap();
    assert_eq!((&parent["lockToken"], &parent["leaseDuration"]), (&sv(&holder), &nv(4)), "{parent}");

    let input = body(10);
    let waiter = tokio::spawn(async move { stack().await.execute(&input).await });
    // The holder's heart beats until the execution is queued for the parent, then for three more leases: the
    // execution waits.
    let h = read_header(&holder_store, &Meter::default(), &holder).await.unwrap();
    let prefix = format!("queue#{}", env.a);
    let queued =
        || async { env.queue_rows().await.iter().any(|r| r["id"].as_s().is_ok_and(|id| id.starts_with(&prefix))) };
    let mut t = Instant::now();
    let mut waiting = false;
    let mut last_beat = t;
    while !waiting || t.elapsed() < lease * 3 {
        assert!(heartbeat(&holder_store, &Meter::default(), &h).await.unwrap(), "the holder is still pending");
        last_beat = Instant::now();
        if !waiting && queued().await {
            (waiting, t) = (true, Instant::now());
        }
        assert!(waiting || t.elapsed() < Duration::from_secs(120), "the execution never queued for the parent");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    assert!(!waiter.is_finished(), "the execution did not take over while the holder's heart beat");
    assert_eq!(env.get(&env.a, json!({"pk": sv("P")})).await.unwrap()["lockToken"], sv(&holder));
    // No more beats: the execution takes over after a whole lease, no sooner, and commits.
    let taken = loop {
        let token = env.get(&env.a, json!({"pk": sv("P")})).await.unwrap().get("lockToken").cloned();
        if token != Some(sv(&holder)) {
            break last_beat.elapsed();
        }
        assert!(last_beat.elapsed() < Duration::from_secs(120), "never taken over");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let ex = waiter.await.unwrap();
    assert_eq!(ex.status, "SUCCEEDED", "{ex:?}");
    assert!(taken >= lease, "taken over {taken:?} after the last beat");
    // The stack's own lease is 30 s: taking over well before that shows the waiter went by the parent item's lease.
    assert!(taken < Duration::from_secs(25), "taken over {taken:?} after the last beat");
    assert_eq!(read_header(&env.store, &Meter::default(), &holder).await.unwrap().state, TxState::RolledBack);

    // The old holder's workers wake up: its attempt was rolled back, so they write nothing.
    let after = env.snapshot().await;
    for r in [
        lock::lock(&holder_store, &holder, 0).await.unwrap(),
        dynamo_saga::phase::apply::apply(&holder_store, &holder, 0).await.unwrap(),
    ] {
        assert_eq!(r.usage.writes, 0, "{r:?}");
    }
    assert_eq!(env.snapshot().await, after);
    for k in ["i0", "i1", "i2"] {
        assert_eq!(
            env.get(&env.a, json!({"pk": sv(k)})).await.unwrap()["n"],
            nv(10),
            "{k}: only the execution's write"
        );
    }
    assert!(env.get(&env.a, json!({"pk": sv("P")})).await.unwrap().get("lockToken").is_none());
    // Its driver wakes up: losing the parent was not its request's doing, so a second attempt runs and commits.
    Coordinator::new(holder_store.clone()).drive(&holder).await.expect("the old holder's second attempt commits");
    for k in ["i0", "i1", "i2"] {
        assert_eq!(env.get(&env.a, json!({"pk": sv(k)})).await.unwrap()["n"], nv(11), "{k}");
    }
    assert_eq!(read_header(&env.store, &Meter::default(), &holder).await.unwrap().attempt, 1);
    env.assert_clean().await;
}

/// `LockWaitSeconds: 0` on a parent through the state machine: an execution that finds its parent held fails at once
/// with `TransactionCanceled` naming the holder, and writes nothing; the holder then commits as if it were never asked.
#[tokio::test]
async fn lock_wait_zero_on_a_held_parent_fails_the_execution_at_once() {
    use dynamo_saga::phase::{lock, Outcome};
    let env = Env::on_stack("smnowait").await;
    env.put(&env.a, json!({"pk": sv("QUEUED"), "order": {"L": []}})).await;
    let holder = begin::begin(&env.store, &append_to_parent(&env, "holder")).await.unwrap().transaction_id;
    assert_eq!(lock::lock(&env.store, &holder, 0).await.unwrap().outcome, Outcome::Done);
    let mut body = append_to_parent(&env, "impatient");
    body["Options"] = json!({"LockWaitSeconds": 0});
    let ex = stack().await.execute(&body).await;
    assert_eq!((ex.status.as_str(), ex.error.as_deref()), ("FAILED", Some("TransactionCanceled")), "{ex:?}");
    let c = ex.cancellation().unwrap();
    assert_eq!(c["ParentCancellationReason"]["Code"], "TransactionConflict", "{c}");
    assert!(
        c["ParentCancellationReason"]["Message"].as_str().unwrap().contains(&holder),
        "the parent's reason names the holder: {c}"
    );
    assert_eq!(parent_order(&env).await, Vec::<String>::new(), "nothing written");
    dynamo_saga::Coordinator::new(env.store.clone()).drive(&holder).await.expect("the holder commits");
    assert_eq!(parent_order(&env).await, ["holder"]);
    env.assert_clean().await;
}

/// Issue 14 through the state machine: an execution whose attempt is rolled back by an older transaction (wound-wait)
/// is not cancelled. Its Rollback names the Step `Retry`, the definition's `Retry` state starts the next attempt of
/// the same transaction (same id, same stored request), which waits for the older one, and the same execution
/// commits. The status API shows both attempts and who rolled back the first.
#[tokio::test]
async fn a_wounded_execution_loops_through_retry_and_commits_in_the_same_execution() {
    use dynamo_saga::parent::heartbeat;
    use dynamo_saga::phase::{lock, Outcome};
    use dynamo_saga::records::read_header;
    use dynamo_saga::Coordinator;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::{Duration, Instant};
    let env = Env::on_stack("smretry").await;
    for k in ["a", "b"] {
        env.put(&env.a, json!({"pk": sv(k), "n": nv(0)})).await;
    }
    let adds = |keys: &[&str], d: i64| {
        let items: Vec<Value> = keys
            .iter()
            .map(|k| {
                json!({"Update": {"TableName": env.a, "Key": {"pk": sv(k)},
            "UpdateExpression": "ADD n :d", "ExpressionAttributeValues": {":d": nv(d)}}})
            })
            .collect();
        json!({"TransactItems": items})
    };
    // Three transactions, oldest first: the oldest holds b; the execution (youngest) takes a and waits for b; the
    // older one then needs a, and wounds the execution's attempt.
    let oldest = begin::begin(&env.store, &adds(&["b"], 100)).await.unwrap().transaction_id;
    let older = begin::begin(&env.store, &adds(&["a"], 10)).await.unwrap().transaction_id;
    let youngest = begin::begin(&env.store, &adds(&["a", "b"], 1)).await.unwrap().transaction_id;
    assert!(oldest < older && older < youngest);
    assert_eq!(lock::lock(&env.store, &oldest, 0).await.unwrap().outcome, Outcome::Done);
    // The oldest's heart beats while it holds b: however long the execution takes, it waits for b instead of judging
    // the oldest stale after a lease.
    let beating = Arc::new(AtomicBool::new(true));
    let beater = tokio::spawn({
        let (store, beating) = (env.store.clone(), beating.clone());
        let h = read_header(&env.store, &Meter::default(), &oldest).await.unwrap();
        async move {
            while beating.load(Ordering::SeqCst) {
                assert!(heartbeat(&store, &Meter::default(), &h).await.unwrap(), "the oldest is still pending");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    });
    let run = tokio::spawn({
        let input = json!({"TransactionId": youngest});
        async move { stack().await.execute(&input).await }
    });
    let lock_of = |k: &'static str| {
        let env = &env;
        async move { env.get(&env.a, json!({"pk": sv(k)})).await.unwrap().get("_sagaLock").cloned() }
    };
    let t = Instant::now();
    while lock_of("a").await != Some(sv(&youngest)) {
        assert!(t.elapsed() < Duration::from_secs(60), "the execution never locked a");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let coord = Coordinator::new(env.store.clone());
    coord.drive(&older).await.expect("the older transaction wounds the execution's attempt and commits");
    // The oldest keeps b a little longer, so the execution's second attempt has to wait for it.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(!run.is_finished(), "the execution waits for b");
    beating.store(false, Ordering::SeqCst);
    beater.await.unwrap();
    coord.drive(&oldest).await.expect("the oldest commits");

    let ex = run.await.unwrap();
    assert_eq!(ex.status, "SUCCEEDED", "{ex:?}");
    assert_eq!(
        (ex.output["TransactionId"].as_str(), ex.output["Attempts"].as_u64()),
        (Some(youngest.as_str()), Some(2)),
        "{ex:?}"
    );
    assert_eq!(ex.state_entries.get("Retry"), Some(&1), "one loop through the Retry state: {ex:?}");
    assert_eq!(ex.state_entries.get("Begin"), Some(&1), "{ex:?}");
    for (k, want) in [("a", 11), ("b", 101)] {
        assert_eq!(env.get(&env.a, json!({"pk": sv(k)})).await.unwrap()["n"], nv(want), "{k}");
    }

    // The status API shows the attempts.
    let event = harness::api::event("GET", "/transactions/{id}", json!({ "id": youngest }), None);
    let out = stack().await.invoke("saga-status", &event).await.expect("the status function answers");
    let s: Value = serde_json::from_str(out["body"].as_str().unwrap()).unwrap();
    assert_eq!((s["State"].as_str(), s["Attempt"].as_u64()), (Some("COMMITTED"), Some(2)), "{s}");
    let first = &s["Attempts"][0];
    assert_eq!(first["Attempt"], 1, "{s}");
    assert_eq!(first["RolledBackBy"].as_str(), Some(older.as_str()), "{s}");
    assert!(
        first["Item"].as_str().is_some_and(|i| i.contains("a"))
            && first["Reason"].as_str().is_some_and(|r| r.contains(&older)),
        "{s}"
    );
    assert!(s["WaitedMs"].as_u64().unwrap() >= 1000, "the second attempt waited for b: {s}");
    env.assert_clean().await;
}

/// The executions of the stack's state machine whose input names any of `needles` (a test's tables, or a transaction
/// id it knows): the stack is shared with the other tests of this file, which start executions of their own meanwhile.
async fn executions_naming(sfn: &aws_sdk_sfn::Client, needles: &[&str]) -> usize {
    let out = sfn.list_executions().state_machine_arn(harness::sfn_api::STATE_MACHINE_ARN).send().await.unwrap();
    let mut n = 0;
    for e in out.executions() {
        let described = sfn.describe_execution().execution_arn(e.execution_arn()).send().await.unwrap();
        let input = described.input().unwrap_or_default();
        n += usize::from(needles.iter().any(|needle| input.contains(needle)));
    }
    n
}

/// `POST /transactions` as API Gateway delivers it (a REST proxy event to the API function): bodies with quotes,
/// apostrophes, backslashes, control characters, unicode and 200 KB reach the tables exactly as sent, carried out in
/// one call with no execution (committed, or cancelled with the reasons in the answer); the same
/// `ClientRequestToken` again is the same transaction; a staged transaction runs by its id in one execution; and every
/// invalid body is answered 4xx, naming the action where there is one, and starts nothing and writes nothing.
#[tokio::test]
async fn the_api_runs_what_it_is_sent_intact_and_refuses_bad_bodies() {
    let env = Env::on_stack("api").await;
    let st = stack().await;
    let sfn = st.sfn_client();
    let call = |method: &str, resource: &str, params: Value, body: String| {
        let event = harness::api::event(method, resource, params, Some(body));
        async move {
            let out = st.invoke("saga-stage", &event).await.expect("the API function answers every request");
            let body: Value = serde_json::from_str(out["body"].as_str().unwrap()).unwrap();
            (out["statusCode"].as_u64().unwrap(), body)
        }
    };
    // This test's: those naming its tables, or (run by its id: a staged transaction, or a request the API stored
    // first, as in MRSC mode) one of its transactions.
    let ids = std::sync::Mutex::new(Vec::<String>::new());
    let executions = || async {
        let mut needles = vec![env.a.clone(), env.b.clone()];
        needles.extend(ids.lock().unwrap().iter().cloned());
        executions_naming(&sfn, &needles.iter().map(String::as_str).collect::<Vec<_>>()).await
    };
    let finished = |arn: String| async move {
        let (status, output, error, _) = st.ended(&arn).await;
        (status, output, error)
    };

    let awkward =
        "She said \"it's fine\" \\ C:\\temp\\new \\\" \\' \\u0041 \n\t\r / </script> é 日本語 🎉 \u{7f} \u{2028}";
    let big = "x".repeat(200 * 1024);
    let item = |pk: &str, text: &str| json!({"pk": sv(pk), "text": sv(text), "list": {"L": [sv(awkward), {"M": {"k\"'\\": sv(awkward)}}]}});
    let request = json!({"ClientRequestToken": "api-awkward-1", "TransactItems": [
        {"Put": {"TableName": env.a, "Item": item("awkward", awkward)}},
        {"Update": {"TableName": env.a, "Key": {"pk": sv("big")}, "UpdateExpression": "SET #t = :t",
            "ExpressionAttributeNames": {"#t": "text"}, "ExpressionAttributeValues": {":t": sv(&big)}}},
    ]});
    let body = request.to_string();
    assert!(body.len() > 200 * 1024, "{}", body.len());
    let before = executions().await;
    let (code, out) = call("POST", "/transactions", Value::Null, body.clone()).await;
    assert_eq!(code, 200, "{out}");
    // Two actions fit one TransactWriteItems call: carried out by the API function itself, with no execution. In
    // MRSC mode, which has no such call, the API starts an execution and answers the transaction pending.
    let one_call = harness::one_call();
    let id = out["TransactionId"].as_str().unwrap().to_string();
    ids.lock().unwrap().push(id.clone());
    assert_eq!(
        (out["State"].as_str(), out["Finished"].as_bool(), out.get("ExecutionArn").is_some()),
        if one_call { (Some("COMMITTED"), Some(true), false) } else { (Some("PENDING"), Some(false), true) },
        "{out}"
    );
    let out = st.settled(&out).await;
    assert_eq!((out["State"].as_str(), out["Finished"].as_bool()), (Some("COMMITTED"), Some(true)), "{out}");
    let before = before + usize::from(!one_call);
    assert_eq!(executions().await, before, "an execution only for a request one call does not carry out");
    assert_eq!(
        env.get(&env.a, json!({"pk": sv("awkward")})).await,
        Some(item("awkward", awkward)),
        "stored exactly as sent"
    );
    assert_eq!(env.get(&env.a, json!({"pk": sv("big")})).await, Some(json!({"pk": sv("big"), "text": sv(&big)})));
    // The API function wrote the transaction's metrics once, in CloudWatch Embedded Metric Format (the Release
    // function writes those of the protocol's transactions, in MRSC mode this one's).
    let (line, lines) = st.metrics_of(&id);
    let line = line.expect("a metrics line for the transaction");
    assert_eq!(lines, 1, "one line per transaction");
    assert_eq!(line["_aws"]["CloudWatchMetrics"][0]["Namespace"], "DynamoSaga/local", "{line}");
    let got: Vec<&Value> =
        ["Committed", "RolledBack", "Attempts", "Actions", "Conflicts"].iter().map(|k| &line[*k]).collect();
    assert_eq!(got, [&json!(1), &json!(0), &json!(1), &json!(2), &json!(0)], "{line}");
    assert!(line["WriteUnits"].as_f64().unwrap() > 0.0 && line["Duration"].as_u64().unwrap() > 0, "{line}");
    // The same request again (a client retrying): the same transaction, ended, nothing twice, still no execution.
    let (code, again) = call("POST", "/transactions", Value::Null, body.clone()).await;
    assert_eq!((code, &again["TransactionId"], again["Finished"].as_bool()), (200, &json!(id), Some(true)), "{again}");
    assert_eq!(executions().await, before, "no second execution");
    assert_eq!(st.metrics_of(&id).1, 1, "no second metrics line");
    // The status API reports it as the API answered it.
    let status = st
        .invoke("saga-status", &harness::api::event("GET", "/transactions/{id}", json!({ "id": id }), None))
        .await
        .expect("the status function answers");
    let status: Value = serde_json::from_str(status["body"].as_str().unwrap()).unwrap();
    assert_eq!((status["State"].as_str(), status["Finished"].as_bool()), (Some("COMMITTED"), Some(true)), "{status}");
    // A condition that fails: the answer is the cancellation, as TransactWriteItems would give it, and nothing is
    // written.
    let refused = json!({"TransactItems": [
        {"Put": {"TableName": env.a, "Item": {"pk": sv("refused")}}},
        {"ConditionCheck": {"TableName": env.a, "Key": {"pk": sv("awkward")}, "ConditionExpression": "attribute_not_exists(pk)"}},
    ]});
    let (code, out) = call("POST", "/transactions", Value::Null, refused.to_string()).await;
    assert_eq!(code, 200, "{out}");
    ids.lock().unwrap().extend(out["TransactionId"].as_str().map(String::from));
    let out = st.settled(&out).await;
    assert_eq!((out["State"].as_str(), out["Finished"].as_bool()), (Some("ROLLED_BACK"), Some(true)), "{out}");
    let codes: Vec<&str> = out["Cancellation"]["CancellationReasons"]
        .as_array()
        .map(|r| r.iter().filter_map(|r| r["Code"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(codes, ["None", "ConditionalCheckFailed"], "{out}");
    assert_eq!(env.get(&env.a, json!({"pk": sv("refused")})).await, None);
    let before = before + usize::from(!one_call);
    assert_eq!(executions().await, before, "still no execution but its own in MRSC mode");

    // A staged transaction with the same awkward values, run by POST /transactions {"TransactionId"}.
    let chunk = json!({"TransactItems": [{"Put": {"TableName": env.a, "Item": item("staged", awkward)}},
        {"Put": {"TableName": env.a, "Item": item("staged-big", &big)}}]});
    // Creates a staged transaction under the token, appends the chunk and seals it: its id and the seal's answer.
    let stage = || async {
        let token = json!({"ClientRequestToken": "api-staged-'\"\\-1"}).to_string();
        let (code, created) = call("POST", "/transactions/staged", Value::Null, token).await;
        assert_eq!(code, 201, "{created}");
        let id = created["TransactionId"].as_str().unwrap().to_string();
        let path = json!({"id": id, "chunk": "0"});
        let (code, appended) = call("PUT", "/transactions/staged/{id}/chunks/{chunk}", path, chunk.to_string()).await;
        assert_eq!((code, appended["Actions"].as_u64()), (200, Some(2)), "{appended}");
        let (code, sealed) = call("POST", "/transactions/staged/{id}/seal", json!({"id": id}), String::new()).await;
        assert_eq!(code, 200, "{sealed}");
        (id, sealed)
    };
    let (staged, sealed) = stage().await;
    ids.lock().unwrap().push(staged.clone());
    let (code, run) = call("POST", "/transactions", Value::Null, sealed["ExecutionInput"].to_string()).await;
    assert_eq!((code, run["TransactionId"].as_str()), (200, Some(staged.as_str())), "{run}");
    let (status, _, error) = finished(run["ExecutionArn"].as_str().unwrap().to_string()).await;
    assert_eq!(status, "SUCCEEDED", "{error}");
    assert_eq!(env.get(&env.a, json!({"pk": sv("staged")})).await, Some(item("staged", awkward)));
    assert_eq!(env.get(&env.a, json!({"pk": sv("staged-big")})).await, Some(item("staged-big", &big)));
    // Staged again under the same token (a client starting over): the seal answers the first transaction, and its
    // execution input names that one, which has finished: it is answered as it ended, and nothing starts.
    let (again, resealed) = stage().await;
    assert_ne!(again, staged, "a new staged id");
    assert_eq!(resealed["TransactionId"], json!(staged), "{resealed}");
    assert_eq!(resealed["ExecutionInput"], json!({"TransactionId": staged}), "{resealed}");
    let started = executions().await;
    let (code, rerun) = call("POST", "/transactions", Value::Null, resealed["ExecutionInput"].to_string()).await;
    assert_eq!(
        (code, rerun["TransactionId"].as_str(), rerun["State"].as_str(), rerun["Finished"].as_bool()),
        (200, Some(staged.as_str()), Some("COMMITTED"), Some(true)),
        "{rerun}"
    );
    assert_eq!(executions().await, started, "no second execution");
    env.assert_clean().await;

    // Invalid bodies: 400 (404 for an unknown transaction), the reason named, no execution, no write.
    let before = (executions().await, env.snapshot().await);
    let mut cases: Vec<(String, u64, String, Option<usize>)> = vec![
        ("{\"TransactItems\": [".into(), 400, "not valid JSON".into(), None),
        ("".into(), 400, "TransactItems".into(), None),
        ("[]".into(), 400, "JSON object".into(), None),
        ("\"TransactItems\"".into(), 400, "JSON object".into(), None),
        ("{\"TransactionId\": 7}".into(), 400, "TransactionId".into(), None),
        ("{\"TransactionId\": \"01JDQ5A7K2M9P4R6T8V1W3X5Z7\"}".into(), 404, "not found".into(), None),
        (json!({"ClientRequestToken": "api-awkward-1", "TransactItems": [{"Put": {"TableName": env.a, "Item": item("other", "other")}}]}).to_string(),
            400, "IdempotentParameterMismatch".into(), None),
    ];
    for (body, action, needle) in harness::bad::catalogue(&env.a, &env.b, &st.tx_table, st.max_actions) {
        let text = body.to_string();
        // Over a Lambda payload (6 MB) the event never reaches the function: API Gateway's own limit is 10 MB.
        if text.len() < 6 * 1024 * 1024 - 4096 {
            cases.push((text, 400, needle, action));
        }
    }
    assert!(cases.len() >= 35, "{}", cases.len());
    for (body, status, needle, action) in &cases {
        let (code, out) = call("POST", "/transactions", Value::Null, body.clone()).await;
        let message = out["message"].as_str().unwrap_or_default();
        assert_eq!(code, *status, "{}: {out}", &body[..body.len().min(300)]);
        assert!(message.to_lowercase().contains(&needle.to_lowercase()), "{message:?} should mention {needle:?}");
        if let Some(i) = action {
            assert!(message.starts_with(&format!("TransactItems[{i}]")), "{message:?} should name action {i}");
        }
    }
    assert_eq!((executions().await, env.snapshot().await), before, "no execution started, nothing written");
    harness::report(format!(
        "the API (POST /transactions, Lambda proxy): a 200 KB body with quotes, apostrophes, backslashes and unicode stored exactly as sent \
         {}, the same token again the same transaction; {} invalid bodies answered 4xx, 0 executions started, 0 writes",
        if one_call { "in one call with no execution" } else { "through an execution" },
        cases.len()
    ));
}

/// When a refusal still happens, through the API: an index added after lock checked the writes makes DynamoDB refuse
/// one committed write at apply; the execution `POST /transactions/{id}/resume` starts fails `RecoveryNeeded`, and
/// `GET /transactions/{id}` names the refused write and DynamoDB's message. Once the index is gone, resuming again
/// applies it, exactly once, and finishes the transaction.
#[tokio::test]
async fn a_refused_write_is_shown_by_the_status_api_and_resumed_through_the_api_once_mended() {
    use dynamo_saga::Coordinator;
    let env = Env::on_stack("resume").await;
    let st = stack().await;
    let keys: Vec<String> = (0..101).map(|i| format!("r{i:03}")).collect();
    harness::put_all(&env.client, &env.a, keys.iter().map(|k| json!({"pk": sv(k), "n": nv(0)}))).await;
    let items: Vec<Value> = keys
        .iter()
        .map(|k| {
            let set = if k == "r050" { "SET g = :one ADD n :one" } else { "ADD n :one" };
            json!({"Update": {"TableName": env.a, "Key": {"pk": sv(k)}, "UpdateExpression": set,
                "ExpressionAttributeValues": {":one": nv(1)}}})
        })
        .collect();
    let begun = st.invoke("saga-begin", &json!({"TransactItems": items})).await.expect("begins");
    let id = begun["TransactionId"].as_str().unwrap().to_string();
    Coordinator::new(env.store.clone()).drive_locks(&id).await.expect("lock checks every write as the table is");
    harness::add_string_index(&env.client, &env.a, "by-g", "g").await;

    let api = |method: &str, resource: &str| {
        let event = harness::api::event(method, resource, json!({ "id": id }), None);
        let function = if method == "GET" { "saga-status" } else { "saga-stage" };
        async move {
            let out = st.invoke(function, &event).await.expect("the API answers");
            (out["statusCode"].as_u64().unwrap(), serde_json::from_str::<Value>(out["body"].as_str().unwrap()).unwrap())
        }
    };
    let ended = |arn: String| async move {
        let (status, _, error, cause) = st.ended(&arn).await;
        (status, error, cause)
    };

    let (code, out) = api("POST", "/transactions/{id}/resume").await;
    assert_eq!(code, 200, "{out}");
    let arn = out["ExecutionArn"].as_str().expect("an execution started").to_string();
    assert!(arn.contains(&format!(":resume-{id}-")), "{arn}");
    let (status, error, cause) = ended(arn).await;
    assert_eq!((status.as_str(), error.as_str()), ("FAILED", "RecoveryNeeded"), "{cause}");
    assert!(cause.contains("ApplyRejected"), "{cause}");
    let (code, s) = api("GET", "/transactions/{id}").await;
    assert_eq!((code, s["State"].as_str(), s["Finished"].as_bool()), (200, Some("COMMITTED"), Some(false)), "{s}");
    assert!(s["Refused"]["Action"].as_str().unwrap().contains("r050"), "{s}");
    assert!(!s["Refused"]["Message"].as_str().unwrap().is_empty(), "{s}");
    let raw = env.get(&env.a, json!({"pk": sv("r050")})).await.unwrap();
    assert_eq!(raw["n"], nv(0), "the refused write is not applied: {raw}");
    assert_eq!(env.get(&env.a, json!({"pk": sv("r000")})).await.unwrap()["n"], nv(1), "the rest is");

    harness::drop_index(&env.client, &env.a, "by-g").await;
    let (code, out) = api("POST", "/transactions/{id}/resume").await;
    assert_eq!(code, 200, "{out}");
    let (status, error, cause) = ended(out["ExecutionArn"].as_str().unwrap().to_string()).await;
    assert_eq!(status, "SUCCEEDED", "{error} {cause}");
    let (_, s) = api("GET", "/transactions/{id}").await;
    assert_eq!(
        (s["State"].as_str(), s["Finished"].as_bool(), s.get("Refused")),
        (Some("COMMITTED"), Some(true), None),
        "{s}"
    );
    for k in &keys {
        assert_eq!(env.get(&env.a, json!({"pk": sv(k)})).await.unwrap()["n"], nv(1), "{k} applied once");
    }
    // A finished transaction has nothing to resume: no execution starts.
    let (code, out) = api("POST", "/transactions/{id}/resume").await;
    assert_eq!((code, out.get("ExecutionArn")), (200, None), "{out}");
    env.assert_clean().await;
}

/// A Lock call dies with a lock write in flight (its Lambda timed out: the write is held and lands once the
/// transaction has finished), the state machine retries Lock, and the transaction commits, or rolls back on a failed
/// condition. The late write lands after that end, on an item the transaction no longer holds; the execution ends
/// with the transaction all the same, and once the stack's bound (`SAGA_REVISIT_AFTER_SECONDS`) has passed the stack's
/// sweeper visits the transaction and removes the late write: every item as committed, or as it was byte for byte,
/// with no `_saga*` attribute.
#[tokio::test]
async fn a_lock_write_of_a_timed_out_lock_call_that_lands_after_the_end_is_cleared_by_the_sweeper() {
    let env = Env::on_stack("smlate").await;
    let st = stack().await;
    let n = 150;
    // Updates of items that exist (committed, and rolled back by the last one's condition), and puts of items that do
    // not (rolled back by a failed condition check): there the late write creates an item that holds only a lock.
    for (commit_path, present) in [(true, true), (false, true), (false, false)] {
        let tag = match (commit_path, present) {
            (true, _) => "lc",
            (false, true) => "lr",
            (false, false) => "la",
        };
        let keys: Vec<String> = (0..n).map(|i| format!("{tag}-{i:03}")).collect();
        let mut actions: Vec<Value> = if present {
            harness::put_all(&env.client, &env.a, keys.iter().map(|k| json!({"pk": sv(k), "n": nv(0)}))).await;
            keys.iter()
                .map(|k| {
                    json!({"Update": {"TableName": env.a, "Key": {"pk": sv(k)}, "UpdateExpression": "ADD n :one",
                        "ExpressionAttributeValues": {":one": nv(1)}}})
                })
                .collect()
        } else {
            keys.iter()
                .map(|k| {
                    json!({"Put": {"TableName": env.a, "Item": {"pk": sv(k), "n": nv(1)},
                        "ConditionExpression": "attribute_not_exists(pk)"}})
                })
                .collect()
        };
        if !commit_path && present {
            actions[n - 1]["Update"]["ConditionExpression"] = json!("n = :seven");
            actions[n - 1]["Update"]["ExpressionAttributeValues"][":seven"] = nv(7);
        } else if !commit_path {
            let refused = format!("{tag}-zz");
            env.put(&env.a, json!({"pk": sv(&refused), "n": nv(0)})).await;
            actions[n - 1] = json!({"ConditionCheck": {"TableName": env.a, "Key": {"pk": sv(&refused)},
                "ConditionExpression": "n = :seven", "ExpressionAttributeValues": {":seven": nv(7)}}});
        }
        let before = env.scan(&env.a).await;
        let begun = st.invoke("saga-begin", &json!({"TransactItems": actions})).await.expect("begins");
        let id = begun["TransactionId"].as_str().unwrap().to_string();
        // The first Lock call claims the lock phase (its first write) and dies with its first lock write in flight.
        let fault = st.inject_late_fault_for(&id, "Lock", 1);
        let ex = st.execute(&json!({ "TransactionId": id })).await;
        assert!(!fault.exists(), "the fault was taken");
        let _ = std::fs::remove_file(format!("{}.taken", fault.display()));
        if commit_path {
            assert_committed(&ex, n, 2);
        } else {
            assert_eq!(ex.error.as_deref(), Some("TransactionCanceled"), "{ex:?}");
        }
        let h = dynamo_saga::records::read_header(&env.store, &Meter::default(), &id).await.unwrap();
        assert!(h.finished() && h.needs_revisit(), "ended, and flagged for the visit: {h:?}");
        // The stack's scheduled sweeper, once the bound has passed (it finishes nothing still for less than an hour).
        let h = 'visited: {
            for _ in 0..60 {
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                let report =
                    st.invoke("saga-sweeper", &json!({"OlderThanSeconds": 3600})).await.expect("the sweeper runs");
                assert_eq!(report["Failed"], json!([]), "{report}");
                let h = dynamo_saga::records::read_header(&env.store, &Meter::default(), &id).await.unwrap();
                if h.revisited_at.is_some() {
                    break 'visited h;
                }
            }
            panic!("the sweeper did not visit {id} within a minute of its end");
        };
        assert!(h.revisit_at.is_none(), "{h:?}");
        assert_eq!(h.revisit_cleared, 1, "the late lock write landed after the end, and was cleared");
        let after = env.scan(&env.a).await;
        let mine = |m: &std::collections::BTreeMap<String, Value>| {
            m.iter().filter(|(k, _)| k.contains(tag)).map(|(k, v)| (k.clone(), v.clone())).collect::<Vec<_>>()
        };
        if commit_path {
            assert!(mine(&after).iter().all(|(_, v)| v["n"] == nv(1) && v.as_object().unwrap().len() == 2));
            assert_eq!(mine(&after).len(), n);
        } else {
            assert_eq!(mine(&after), mine(&before), "every item as it was, byte for byte");
        }
    }
    env.assert_clean().await;
    harness::report(
        "late lock write of a Lock call that timed out, through the state machine: landed after the end, the execution \
         ended with its transaction, cleared by the stack's sweeper once due (commit, rollback, and rollback of puts: an \
         item that held only a lock)",
    );
}

/// A transaction whose records a newer version wrote (a later record format, or a later protocol) is refused by every
/// phase function with the named error `UnknownRecordFormat` (which no Retry of the state machine matches, so its
/// execution stops in RecoveryNeeded), and nothing is written: the newer version finishes it.
#[tokio::test]
async fn a_phase_meeting_records_of_a_format_it_does_not_know_stops_with_a_named_error_and_writes_nothing() {
    let env = Env::on_stack("smformat").await;
    let st = stack().await;
    env.put(&env.a, json!({"pk": sv("f"), "n": nv(0)})).await;
    let body = json!({"TransactItems": (0..150).map(|i| json!({"Put": {"TableName": env.a,
        "Item": {"pk": sv(&format!("f{i:03}")), "n": nv(1)}}})).collect::<Vec<_>>()});
    let begun = st.invoke("saga-begin", &body).await.expect("begins");
    let id = begun["TransactionId"].as_str().unwrap().to_string();
    let set = |attr: &'static str, value: u32| {
        env.client
            .update_item()
            .table_name(&st.tx_table)
            .key("id", aws_sdk_dynamodb::types::AttributeValue::S(id.clone()))
            .key("sk", aws_sdk_dynamodb::types::AttributeValue::S("tx".into()))
            .update_expression("SET #a = :v")
            .expression_attribute_names("#a", attr)
            .expression_attribute_values(":v", aws_sdk_dynamodb::types::AttributeValue::N(value.to_string()))
            .send()
    };
    let header = || env.get(&st.tx_table, json!({"id": sv(&id), "sk": sv("tx")}));
    let written = header().await.expect("the header");
    for (attr, newer) in [("format", 2), ("protocol", 3)] {
        let own: u32 = written[attr]["N"].as_str().expect("begin wrote it").parse().unwrap();
        set(attr, newer).await.unwrap();
        let before = (env.snapshot().await, header().await);
        for function in ["saga-lock", "saga-save", "saga-rollback", "saga-release"] {
            let e = st.invoke(function, &json!({"TransactionId": id})).await.expect_err("refused");
            assert_eq!(e.error_type, "UnknownRecordFormat", "{function} ({attr} {newer}): {}", e.message);
        }
        assert_eq!((env.snapshot().await, header().await), before, "nothing written");
        set(attr, own).await.unwrap();
    }
    // Back to what this version wrote, the transaction runs to its end.
    let ex = st.execute(&json!({ "TransactionId": id })).await;
    assert_committed(&ex, 150, 2);
    env.assert_clean().await;
}

/// A body that is not UTF-8 text, as a client may send one, reaches the API function as API Gateway hands it over
/// (base64-encoded, the bytes as sent) and is refused 400 with a message: no execution, nothing written.
#[tokio::test]
async fn a_body_that_is_not_text_is_refused_through_the_api() {
    use harness::api::{call, call_bytes, LOCAL};
    let env = Env::on_stack("apibytes").await;
    let st = stack().await;
    let sfn = st.sfn_client();
    let (code, created) = call(st, LOCAL, "POST", "/transactions/staged", Some(&json!({}))).await;
    assert_eq!(code, 201, "{created}");
    let id = created["TransactionId"].as_str().unwrap().to_string();
    let needles = [env.a.as_str(), env.b.as_str(), id.as_str()];
    let executions = || executions_naming(&sfn, &needles);
    let chunk = format!("/transactions/staged/{}/chunks/0", created["TransactionId"].as_str().unwrap());
    let before = (executions().await, env.snapshot().await);
    // A request whose item value carries a byte no UTF-8 text has (a Latin-1 "é"), and bytes that are no text at all.
    let latin1 = format!(r#"{{"TransactItems": [{{"Put": {{"TableName": "{}", "Item": {{"pk": {{"S": "caf"#, env.a);
    let latin1 = [latin1.as_bytes(), &[0xE9], br#""}}}}]}"#].concat();
    for (method, path) in [("POST", "/transactions"), ("POST", "/transactions/staged"), ("PUT", chunk.as_str())] {
        for body in [latin1.clone(), vec![0xFF, 0xFE, 0x00, 0x7B]] {
            let (code, out) = call_bytes(st, LOCAL, method, path, body).await;
            assert_eq!((code, out["__type"].as_str()), (400, Some("ValidationError")), "{method} {path}: {out}");
            assert!(out["message"].as_str().unwrap().contains("not UTF-8"), "{out}");
        }
    }
    assert_eq!((executions().await, env.snapshot().await), before, "no execution started, nothing written");
    env.assert_clean().await;
}

/// A stack shared by teams (`CallerEntitlements`): through the API, signed as each caller, a caller may name only the
/// tables its entitlements list. The orders service (its role's entry names `t-ent-orders-*`) writes its tables; the
/// payments service, which no entry names, is refused 403 `AccessDenied`
/// naming the table; a request of the orders service naming a table outside its own, as an action or as its
/// `Parent`, is refused naming that action; the staging API refuses a `Parent` or a chunk the same way. Nothing
/// refused writes anything or starts an execution; an IAM user the stack entitles to every table writes the other.
#[tokio::test]
async fn api_callers_write_only_the_tables_they_are_entitled_to() {
    use harness::api::{call, LOCAL, ORDERS, PAYMENTS};
    let mine = Env::on_stack("ent-orders").await;
    let other = Env::on_stack("ent-other").await;
    let st = stack().await;
    let sfn = st.sfn_client();
    let needles = [mine.a.as_str(), mine.b.as_str(), other.a.as_str(), other.b.as_str()];
    let executions = || executions_naming(&sfn, &needles);
    let put = |t: &str, pk: &str| json!({"Put": {"TableName": t, "Item": {"pk": sv(pk)}}});

    // Entitled: two actions, carried out in one call (through an execution in MRSC mode). (Executions the API starts
    // are counted by the test beside this one; the CLI's test runs larger requests of an entitled caller through the
    // API and the state machine.)
    let two = json!({"TransactItems": [put(&mine.a, "o-1"), put(&mine.a, "o-2")]});
    let (code, out) = call(st, ORDERS, "POST", "/transactions", Some(&two)).await;
    assert_eq!(code, 200, "{out}");
    let out = st.settled(&out).await;
    assert_eq!((out["State"].as_str(), out["Finished"].as_bool()), (Some("COMMITTED"), Some(true)), "{out}");
    assert_eq!(mine.scan(&mine.a).await.len(), 2);

    // Refused: nothing written, no execution, the table (and the action) named.
    let before = (executions().await, mine.snapshot().await, other.snapshot().await);
    let denied = |out: &Value, action: &str, table: &str| {
        let message = out["message"].as_str().unwrap_or_default();
        assert_eq!(out["__type"], "AccessDenied", "{out}");
        assert!(message.starts_with(action) && message.contains(&format!("table {table}")), "{message}");
    };
    let (code, out) =
        call(st, PAYMENTS, "POST", "/transactions", Some(&json!({"TransactItems": [put(&mine.a, "p-1")]}))).await;
    assert_eq!(code, 403, "{out}");
    denied(&out, "TransactItems[0]", &mine.a);
    assert!(out["message"].as_str().unwrap().contains("payments-service"), "names the caller: {out}");
    let (code, out) = call(
        st,
        ORDERS,
        "POST",
        "/transactions",
        Some(&json!({"TransactItems": [
        put(&mine.a, "o-3"), put(&other.a, "o-4")]})),
    )
    .await;
    assert_eq!(code, 403, "{out}");
    denied(&out, "TransactItems[1]", &other.a);
    let parent = json!({"TableName": other.a, "Key": {"pk": sv("parent")}});
    let (code, out) = call(
        st,
        ORDERS,
        "POST",
        "/transactions",
        Some(&json!({"TransactItems": [put(&mine.a, "o-5")],
        "Parent": parent})),
    )
    .await;
    assert_eq!(code, 403, "{out}");
    denied(&out, "Parent", &other.a);
    let (code, out) = call(st, ORDERS, "POST", "/transactions/staged", Some(&json!({ "Parent": parent }))).await;
    assert_eq!(code, 403, "{out}");
    denied(&out, "Parent", &other.a);
    let (code, created) = call(st, ORDERS, "POST", "/transactions/staged", Some(&json!({}))).await;
    assert_eq!(code, 201, "{created}");
    let staged = created["TransactionId"].as_str().unwrap().to_string();
    let chunk = |items: Vec<Value>| json!({ "TransactItems": items });
    let path = format!("/transactions/staged/{staged}/chunks/0");
    let (code, out) = call(st, ORDERS, "PUT", &path, Some(&chunk(vec![put(&other.a, "o-6")]))).await;
    assert_eq!(code, 403, "{out}");
    denied(&out, "TransactItems[0]", &other.a);
    let (code, out) = call(st, PAYMENTS, "PUT", &path, Some(&chunk(vec![put(&mine.a, "p-2")]))).await;
    assert_eq!(code, 403, "another caller cannot add to it either: {out}");
    let after = (executions().await, mine.snapshot().await, other.snapshot().await);
    assert_eq!(after, before, "no execution started, nothing written");

    // The local IAM user's entry names every table.
    let (code, out) =
        call(st, LOCAL, "POST", "/transactions", Some(&json!({"TransactItems": [put(&other.a, "l-1")]}))).await;
    assert_eq!(code, 200, "{out}");
    assert_eq!(st.settled(&out).await["State"].as_str(), Some("COMMITTED"), "{out}");
    // API Gateway's own refusals: a signature made with the wrong secret, and an access key IAM does not know.
    let forged = harness::api::Caller { secret: "not-the-secret", ..ORDERS };
    let (code, out) = call(st, forged, "GET", "/transactions/x", None).await;
    assert_eq!(code, 403, "{out}");
    assert!(out["message"].as_str().unwrap().contains("signature"), "{out}");
    mine.assert_clean().await;
    other.assert_clean().await;
}

/// The clients docs/clients.md shows, in Python (`clients/python`, botocore's signer) and Node
/// (`clients/node`, the SDK's SigV4 signer), run against the local stack's API as a service would call it: a request
/// of 10 puts (one call), one of 250 (staged, then an execution), each followed to its end by polling; the first sent
/// again ends `ROLLED_BACK` with a reason for each action; a bad id is refused 400; and the event entry each builds is
/// run by the events function as EventBridge delivers it.
#[tokio::test]
async fn the_python_and_node_clients_run_against_the_stack() {
    let env = Env::on_stack("clients").await;
    let st = stack().await;
    let root = harness::root();
    let python = root.join(".local/venv/bin/python");
    for (lang, program, prefix) in [
        ("python", vec![python.display().to_string(), "clients/python/example.py".to_string()], "py"),
        ("node", vec!["node".to_string(), "clients/node/example.mjs".to_string()], "js"),
    ] {
        let out = tokio::process::Command::new(&program[0])
            .args(&program[1..])
            .current_dir(&root)
            .env("API_URL", format!("{}/transactions", st.api))
            .env("TABLE", &env.a)
            .envs([("AWS_REGION", "us-east-1"), ("AWS_ACCESS_KEY_ID", "local"), ("AWS_SECRET_ACCESS_KEY", "local")])
            .env_remove("AWS_PROFILE")
            .output()
            .await
            .unwrap_or_else(|e| panic!("{lang}: {e}"));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{lang} example failed: {stderr}");
        let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{lang}: {e}: {stderr}"));
        for (name, actions) in [("small", 10), ("large", 250)] {
            let f = &v[name]["final"];
            assert_eq!((f["State"].as_str(), f["Finished"].as_bool()), (Some("COMMITTED"), Some(true)), "{lang}: {v}");
            assert_eq!(f["Actions"], json!(actions), "{lang}: {f}");
        }
        assert!(v["large"]["started"]["ExecutionArn"].is_string(), "{lang}: staged and run by an execution: {v}");
        let again = &v["again"];
        assert_eq!(again["State"], "ROLLED_BACK", "{lang}: {again}");
        let reasons = again["Cancellation"]["CancellationReasons"].as_array().expect("a reason for each action");
        assert_eq!(reasons.len(), 10);
        assert!(reasons.iter().all(|r| r["Code"] == "ConditionalCheckFailed"), "{lang}: {again}");
        assert_eq!(v["refused"], json!({"status": 400, "type": "ValidationError"}), "{lang}");
        // The entry, as the rule delivers it to the events function: `detail` is the entry's Detail, parsed.
        let entry = &v["event"];
        assert_eq!(
            (entry["Source"].as_str(), entry["DetailType"].as_str()),
            (Some("dynamo-saga"), Some("TransactWriteItems"))
        );
        let detail: Value = serde_json::from_str(entry["Detail"].as_str().unwrap()).unwrap();
        let delivered = json!({"version": "0", "id": format!("clients-{lang}-{}", std::process::id()),
            "detail-type": entry["DetailType"], "source": entry["Source"], "account": "000000000000",
            "time": "2026-01-01T00:00:00Z", "region": "us-east-1", "resources": [], "detail": detail});
        let answer = st.invoke("saga-events", &delivered).await.expect("the events function runs the entry");
        assert_eq!(st.settled(&answer).await["State"], "COMMITTED", "{lang}: {answer}");
        let items = env.scan(&env.a).await;
        for (tag, n) in [("small", 10), ("large", 250), ("event", 3)] {
            let mine = items.keys().filter(|k| k.contains(&format!("{prefix}-{tag}-"))).count();
            assert_eq!(mine, n, "{lang}: {tag}");
        }
    }
    env.assert_clean().await;
}

/// docs/cli.md's `curl` command, run by `sh` as the page writes it: the API, signed by curl's own SigV4, carries out a
/// small request (at once, or in MRSC mode through an execution), and the same request again ends rolled back with
/// the action's reason.
#[tokio::test]
async fn the_api_answers_the_curl_command_of_docs_cli_md() {
    let env = Env::on_stack("curl").await;
    let st = stack().await;
    let page = std::fs::read_to_string(harness::root().join("docs/cli.md")).expect("docs/cli.md");
    let url = "\"$API_URL/transactions\"";
    let start = page.find("\ncurl ").expect("a curl command in docs/cli.md") + 1;
    let command = &page[start..start + page[start..].find(url).expect("its URL") + url.len()];
    let mut answers = Vec::new();
    for _ in 0..2 {
        let out = tokio::process::Command::new("sh")
            .args(["-c", command])
            .env("API_URL", &st.api)
            .env("TABLE", &env.a)
            .output()
            .await
            .expect("curl runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{command}: {stderr}");
        let answer = serde_json::from_slice::<Value>(&out.stdout).unwrap_or_else(|e| panic!("{e}: {stderr}"));
        // In MRSC mode, which has no one call, the API answers pending and an execution carries the request out.
        answers.push(st.settled(&answer).await);
    }
    let (first, again) = (&answers[0], &answers[1]);
    assert_eq!((first["State"].as_str(), first["Finished"].as_bool()), (Some("COMMITTED"), Some(true)), "{first}");
    assert!(first["TransactionId"].is_string(), "{first}");
    assert_eq!((again["State"].as_str(), again["Finished"].as_bool()), (Some("ROLLED_BACK"), Some(true)), "{again}");
    assert_eq!(again["Cancellation"]["CancellationReasons"][0]["Code"], "ConditionalCheckFailed", "{again}");
    assert_eq!(env.scan(&env.a).await.keys().filter(|k| k.contains("curl-1")).count(), 1);
    env.assert_clean().await;
}

/// Each transaction the stack ends is announced by one EventBridge event on the default bus (source `dynamo-saga`,
/// detail-type `Transaction Ended`), sent by the function that ended it: Release for one the state machine ran
/// (committed, or rolled back with the failed action named), the API and events functions for a request they carried
/// out in one call. A rule on moto's bus delivers them to a queue, read here.
#[tokio::test]
async fn each_transaction_the_stack_ends_is_announced_by_one_event() {
    let env = Env::on_stack("endevents").await;
    let st = stack().await;
    let (_, committed) = harness::workload::counters(&env, "ec-", 250, None).await;
    let ex = st.execute(&json!({ "TransactItems": committed })).await;
    assert_committed(&ex, 250, 3);
    let committed_id = ex.output["TransactionId"].as_str().unwrap().to_string();
    let (keys, mut refused) = harness::workload::counters(&env, "er-", 150, Some("n = :zero")).await;
    env.put(&env.a, json!({"pk": sv(&keys[149]), "n": nv(3)})).await;
    for a in &mut refused {
        a["Update"]["ExpressionAttributeValues"][":zero"] = nv(0);
    }
    let ex = st.execute(&json!({ "TransactItems": refused })).await;
    assert_eq!(ex.error.as_deref(), Some("TransactionCanceled"), "{ex:?}");
    let refused_id = ex.cancellation().unwrap()["TransactionId"].as_str().unwrap().to_string();
    let put = |pk: &str| json!({"Put": {"TableName": env.a, "Item": {"pk": sv(pk)}}});
    let body = json!({"TransactItems": [put("e-api-1"), put("e-api-2")]}).to_string();
    let answer = st.invoke("saga-stage", &harness::api::event("POST", "/transactions", json!({}), Some(body))).await;
    let answer: Value = serde_json::from_str(answer.unwrap()["body"].as_str().unwrap()).unwrap();
    let api_id = st.settled(&answer).await["TransactionId"].as_str().unwrap().to_string();
    let delivered = json!({"version": "0", "id": format!("end-events-{}", std::process::id()),
        "detail-type": "TransactWriteItems", "source": "dynamo-saga", "account": "000000000000",
        "time": "2026-01-01T00:00:00Z", "region": "us-east-1", "resources": [],
        "detail": {"TransactItems": [put("e-ev-1")]}});
    let answer = st.invoke("saga-events", &delivered).await.expect("the events function runs it");
    let events_id = st.settled(&answer).await["TransactionId"].as_str().unwrap().to_string();

    let ids = [committed_id.clone(), refused_id.clone(), api_id.clone(), events_id.clone()];
    let events = st.end_events(&ids).await;
    for id in &ids {
        let got = events.get(id).unwrap_or_else(|| panic!("no end event for {id}: {events:?}"));
        assert_eq!(got.len(), 1, "one event for {id}: {got:?}");
        let e = &got[0];
        assert_eq!((e["source"].as_str(), e["detail-type"].as_str()), (Some("dynamo-saga"), Some("Transaction Ended")));
    }
    let detail = |id: &str| events[id][0]["detail"].clone();
    let c = detail(&committed_id);
    assert_eq!(
        (c["State"].as_str(), c["Actions"].as_u64(), c["Batches"].as_u64()),
        (Some("COMMITTED"), Some(250), Some(3))
    );
    assert!(c["ExecutionArn"].is_string() && c["Usage"]["WriteUnits"].as_f64().unwrap() > 0.0, "{c}");
    assert_eq!(events[&committed_id][0]["resources"], json!([c["ExecutionArn"]]), "the execution is the resource");
    let r = detail(&refused_id);
    assert_eq!(r["State"], "ROLLED_BACK", "{r}");
    let cancellation = &r["Cancellation"];
    assert_eq!(cancellation["FailedActions"], json!(1), "{r}");
    assert_eq!(cancellation["Reasons"][0]["Index"], json!(149), "{r}");
    assert_eq!(cancellation["Reasons"][0]["Code"], "ConditionalCheckFailed", "{r}");
    for (id, actions) in [(&api_id, 2), (&events_id, 1)] {
        let d = detail(id);
        assert_eq!((d["State"].as_str(), d["Actions"].as_u64()), (Some("COMMITTED"), Some(actions)), "{d}");
        if harness::one_call() {
            assert_eq!(d["Batches"], json!(0), "carried out in one call: {d}");
            assert!(d.get("ExecutionArn").is_none(), "carried out in one call, with no execution: {d}");
        } else {
            assert!(d["ExecutionArn"].is_string(), "in MRSC mode, through an execution: {d}");
        }
    }
    env.assert_clean().await;
}

/// Snapshot reads through the API (`POST /transactions/reads`, IAM-authorized): a bank of 120 accounts summed while
/// transfers run has its total in every answer; a caller entitled to read a table only (`read:` in
/// `CallerEntitlements`) reads it, and is refused a write to it and a read of a table it is not entitled to; a bad
/// request is a 400 naming the item; an answer over what a Lambda function may answer API Gateway with is refused,
/// naming the limit.
#[tokio::test]
async fn snapshot_reads_through_the_api_have_the_bank_total_and_follow_read_entitlements() {
    use harness::api::{call, LOCAL, ORDERS};
    use harness::bank::{self, Driver, Params};
    let st = stack().await;
    let gets = |table: &str, keys: Vec<String>| {
        let items: Vec<Value> =
            keys.iter().map(|k| json!({"Get": {"TableName": table, "Key": {"pk": sv(k)}}})).collect();
        json!({ "TransactItems": items })
    };
    // Rounds of transfers, each on a bank of its own, until two reads have answered while transfers ran (a read the
    // transfers keep changing is cancelled with TransactionConflict).
    let (mut answered, mut conflicts, mut committed, mut rounds) = (0, 0, 0, 0);
    let mut env = None;
    while answered < 2 {
        assert!(rounds < 8, "{answered} answers, {conflicts} conflicts in {rounds} rounds");
        rounds += 1;
        let bank_env = Env::on_stack(&format!("snapapi{rounds}")).await;
        let p = Params {
            driver: Driver::Library,
            accounts: 120,
            workers: 3,
            transfers_per_worker: 4,
            min_k: 2,
            max_k: 110,
            plain_writers: 0,
            deadline_seconds: 120,
            seed: 5 + rounds,
        };
        bank::seed(&bank_env, &p).await;
        let body = gets(&bank_env.a, (0..p.accounts).map(bank::acct).collect());
        let done = std::sync::atomic::AtomicBool::new(false);
        let reader = async {
            let (mut answered, mut conflicts) = (0, 0);
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                let (code, out) = call(st, LOCAL, "POST", "/transactions/reads", Some(&body)).await;
                match code {
                    200 => {
                        let total: i64 = out["Responses"]
                            .as_array()
                            .expect("Responses")
                            .iter()
                            .map(|r| r["Item"]["bal"]["N"].as_str().expect("a balance").parse::<i64>().unwrap())
                            .sum();
                        assert_eq!(total, bank::START_BALANCE * p.accounts as i64, "an answer saw part of a transfer");
                        answered += 1;
                    }
                    400 if out["__type"] == "TransactionCanceled" => {
                        assert!(out["CancellationReasons"].as_array().is_some_and(|r| r.len() == p.accounts), "{out}");
                        conflicts += 1;
                    }
                    _ => panic!("POST /transactions/reads answered {code}: {out}"),
                }
            }
            (answered, conflicts)
        };
        let transfers = async {
            let o = bank::run(&bank_env, &p).await;
            done.store(true, std::sync::atomic::Ordering::Relaxed);
            o
        };
        let (o, (a, c)) = tokio::join!(transfers, reader);
        bank::check(&bank_env, &p, &o).await;
        (answered, conflicts, committed) = (answered + a, conflicts + c, committed + o.committed);
        env = Some(bank_env);
    }
    let env = env.expect("a round ran");

    // Read entitlements: the orders service may read the ledger tables (`read:t-ent-ledger-*`), not write them.
    let ledger = Env::on_stack("ent-ledger").await;
    ledger.put(&ledger.a, json!({"pk": sv("l-1"), "v": nv(3)})).await;
    let (code, out) =
        call(st, ORDERS, "POST", "/transactions/reads", Some(&gets(&ledger.a, vec!["l-1".into(), "l-2".into()]))).await;
    assert_eq!(code, 200, "{out}");
    assert_eq!(out["Responses"], json!([{"Item": {"pk": sv("l-1"), "v": nv(3)}}, {}]));
    let write = json!({"TransactItems": [{"Put": {"TableName": ledger.a, "Item": {"pk": sv("l-2")}}}]});
    let (code, out) = call(st, ORDERS, "POST", "/transactions", Some(&write)).await;
    assert_eq!((code, out["__type"].as_str()), (403, Some("AccessDenied")), "{out}");
    let (code, out) = call(st, ORDERS, "POST", "/transactions/reads", Some(&gets(&env.a, vec![bank::acct(0)]))).await;
    assert_eq!((code, out["__type"].as_str()), (403, Some("AccessDenied")), "{out}");
    assert!(out["message"].as_str().unwrap().contains("may not read table"), "{out}");

    // A bad request names the item; nothing is read.
    let bad = json!({"TransactItems": [{"Get": {"TableName": env.a, "Key": {"pk": sv("a")}}}, {"Get": {"TableName": env.a, "Key": {"pk": nv(1)}}}]});
    let (code, out) = call(st, LOCAL, "POST", "/transactions/reads", Some(&bad)).await;
    assert_eq!((code, out["__type"].as_str()), (400, Some("ValidationError")), "{out}");
    assert!(out["message"].as_str().unwrap().contains("TransactItems[1].Get: Key"), "{out}");

    // 20 items of 350 KB: 7 MB, over the 6 MB a function may answer API Gateway with.
    let big = "x".repeat(350 * 1024);
    harness::put_all(
        &env.client,
        &env.b,
        (0..20).map(|i| json!({"pk": sv(&format!("big-{i}")), "sk": nv(0), "f": sv(&big)})),
    )
    .await;
    let items: Vec<Value> = (0..20)
        .map(|i| json!({"Get": {"TableName": env.b, "Key": {"pk": sv(&format!("big-{i}")), "sk": nv(0)}}}))
        .collect();
    let (code, out) = call(st, LOCAL, "POST", "/transactions/reads", Some(&json!({ "TransactItems": items }))).await;
    assert_eq!((code, out["__type"].as_str()), (400, Some("ValidationError")), "{out}");
    assert!(out["message"].as_str().unwrap().contains("over the 6291456"), "{out}");
    env.assert_clean().await;
    harness::report(format!(
        "snapshot reads through the API: {answered} answers of a 120-account bank while {committed} transfers committed ({rounds} rounds), each with the bank's total ({conflicts} cancelled by TransactionConflict); read-only entitlements, bad requests and answers over 6 MB refused"
    ));
}
