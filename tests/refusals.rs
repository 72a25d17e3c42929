//! The refusal catalogue (`docs/refusals.md`): every write DynamoDB refuses, and the accepted edge beside it, in a
//! transaction of 10 actions and one of 150, the refused action anywhere in it. At 10 actions the outcome equals
//! native `TransactWriteItems` holding the same action on the same table state (a whole-call `ValidationException`
//! and a `ValidationError` reason count alike); at 150 the same action fails, nothing is written and no lock is left.
//! A seeded generator of writes near every limit runs beside the fixed cases.
//!
//! Below 100 actions the request goes to DynamoDB in one call, so DynamoDB itself judges it, whichever DynamoDB it
//! is. Through the protocol the library's rules judge it, and where they answer otherwise than DynamoDB Local the
//! case says so and expects the rules' answer: DynamoDB Local does not check a local secondary index's sort key on
//! `UpdateItem`, where DynamoDB does; and a value nested too deep is refused even where the update would not write it,
//! as DynamoDB does in some regions. Each such case also checks that Local still differs, so the day it stops
//! differing the case says so.

use std::collections::BTreeMap;

use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, GlobalSecondaryIndex, KeySchemaElement, KeyType, LocalSecondaryIndex, Projection,
    ProjectionType, ScalarAttributeType, TransactWriteItem,
};
use aws_sdk_dynamodb::Client;
use dynamo_saga::config::PrecommitCheck;
use dynamo_saga::{Coordinator, TxError};
use futures::StreamExt;
use harness::{native_item, Env};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

/// What DynamoDB (or dynamo-saga) did with the action under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Accepted,
    Refused,
}

/// One write of the catalogue: its rule, the item as it is before (besides its key), and the action.
#[derive(Debug, Clone)]
struct Case {
    rule: &'static str,
    name: String,
    seed: Option<Value>,
    /// The action, without `TableName` and `Key` (`Item` for a `Put`, without its key).
    action: Value,
    /// The protocol's answer where it differs from DynamoDB Local's.
    protocol: Option<Verdict>,
    /// The one-call path's answer where it differs from DynamoDB Local's: only where the guard it adds leaves a
    /// condition no room.
    one_call: Option<Verdict>,
    /// The target's key, where the case is about the key: the partition key's length in bytes (the prefix padded),
    /// and the sort key.
    key: Option<(usize, Value)>,
}

fn s(v: &str) -> Value {
    json!({ "S": v })
}

fn deep(levels: usize) -> Value {
    (0..levels).fold(s("x"), |v, _| json!({"M": {"a": v}}))
}

fn update(expr: &str, values: Value) -> Value {
    let mut u = json!({"Update": {"UpdateExpression": expr}});
    if values.as_object().is_some_and(|m| !m.is_empty()) {
        u["Update"]["ExpressionAttributeValues"] = values;
    }
    u
}

fn put(attrs: Value) -> Value {
    json!({"Put": {"Item": attrs}})
}

fn case(rule: &'static str, name: impl Into<String>, seed: Option<Value>, action: Value) -> Case {
    Case { rule, name: name.into(), seed, action, protocol: None, one_call: None, key: None }
}

/// The fixed cases: each rule of `docs/refusals.md` that a committed write can break, at its limit and past it.
fn catalogue() -> Vec<Case> {
    let mut c = Vec::new();
    for (len, name) in [(2048, "at"), (2049, "over")] {
        let g = "g".repeat(len);
        c.push(case("gsi-pk-size", format!("put-{name}"), None, put(json!({"gpk": s(&g), "gsk": s("s")}))));
        c.push(case("gsi-pk-size", format!("set-{name}"), None, update("SET gpk = :v", json!({":v": s(&g)}))));
        c.push(case(
            "gsi-pk-size",
            format!("if_not_exists-{name}"),
            None,
            update("SET gpk = if_not_exists(gpk, :v)", json!({":v": s(&g)})),
        ));
        c.push(case(
            "gsi-pk-size",
            format!("copy-{name}"),
            Some(json!({"src": s(&g)})),
            update("SET gpk = src", json!({})),
        ));
    }
    c.push(case(
        "gsi-pk-size",
        "if_not_exists-present",
        Some(json!({"gpk": s("short")})),
        update("SET gpk = if_not_exists(gpk, :v)", json!({":v": s(&"g".repeat(2049))})),
    ));
    for (len, name) in [(1024, "at"), (1025, "over")] {
        let g = "g".repeat(len);
        c.push(case("gsi-sk-size", format!("put-{name}"), None, put(json!({"gpk": s("p"), "gsk": s(&g)}))));
        c.push(case("gsi-sk-size", format!("put-alone-{name}"), None, put(json!({"gsk": s(&g)}))));
        c.push(case("gsi-sk-size", format!("set-{name}"), None, update("SET gsk = :v", json!({":v": s(&g)}))));
        c.push(case("lsi-sk-size", format!("put-{name}"), None, put(json!({"lsk": s(&g)}))));
        let mut lsi = case("lsi-sk-size", format!("set-{name}"), None, update("SET lsk = :v", json!({":v": s(&g)})));
        if len > 1024 {
            lsi.protocol = Some(Verdict::Refused);
        }
        c.push(lsi);
    }
    c.push(case("index-key-empty", "put", None, put(json!({"gpk": s("")}))));
    c.push(case("index-key-empty", "set", None, update("SET gsk = :v", json!({":v": s("")}))));
    c.push(case("index-key-type", "put", None, put(json!({"gpk": {"N": "1"}}))));
    c.push(case("index-key-type", "set", None, update("SET gpk = :v", json!({":v": {"N": "1"}}))));

    for (levels, name) in [(31, "at"), (32, "over")] {
        c.push(case("nesting-depth", format!("put-{name}"), None, put(json!({"d": deep(levels)}))));
        c.push(case(
            "nesting-depth",
            format!("set-value-{name}"),
            None,
            update("SET d = :v", json!({":v": deep(levels)})),
        ));
        c.push(case(
            "nesting-depth",
            format!("list_append-{name}"),
            None,
            update("SET l = list_append(:a, :b)", json!({":a": {"L": []}, ":b": {"L": [deep(levels - 1)]}})),
        ));
        let path = format!("d{}", ".a".repeat(20));
        c.push(case(
            "nesting-depth",
            format!("long-path-{name}"),
            Some(json!({"d": deep(25)})),
            update(&format!("SET {path} = :v"), json!({":v": deep(levels - 20)})),
        ));
        c.push(case(
            "nesting-depth",
            format!("copy-{name}"),
            Some(json!({"d": {"M": {}}, "src": deep(levels - 1)})),
            update("SET d.a = src", json!({})),
        ));
    }
    let mut unused_deep_value = case(
        "nesting-depth",
        "if_not_exists-present",
        Some(json!({"x": s("1")})),
        update("SET x = if_not_exists(x, :v)", json!({":v": deep(32)})),
    );
    unused_deep_value.protocol = Some(Verdict::Refused);
    c.push(unused_deep_value);

    c.push(case("attr-name-empty", "put", None, put(json!({"": s("x")}))));
    c.push(case("attr-name-empty", "put-nested", None, put(json!({"m": {"M": {"": s("x")}}}))));
    // DynamoDB Local fails on reading an item with a name over 50,000 bytes: the accepted edge is 50,000 here.
    for (len, name) in [(50_000, "under"), (65_536, "over")] {
        let mut u = update("SET #a = :v", json!({":v": s("x")}));
        u["Update"]["ExpressionAttributeNames"] = json!({"#a": "n".repeat(len)});
        c.push(case("attr-name-size", format!("set-{name}"), None, u));
    }
    for (len, name) in [(255, "at"), (256, "over")] {
        let p = format!("#{}", "p".repeat(len - 1));
        let mut u = update(&format!("SET {p} = :v"), json!({":v": s("x")}));
        u["Update"]["ExpressionAttributeNames"] = json!({ p: "a" });
        c.push(case("placeholder-size", format!("name-{name}"), None, u));
    }
    c.push(case(
        "document-path-depth",
        "33-elements",
        None,
        update(&format!("SET d{} = :v", ".a".repeat(32)), json!({":v": s("x")})),
    ));

    let base = KEYED_BYTES + "d".len();
    let max = 400 * 1024;
    for (extra, name) in [(0, "at"), (1, "over")] {
        c.push(case("item-size", format!("put-{name}"), None, put(json!({"d": s(&"x".repeat(max - base + extra))}))));
    }
    // With a local index projecting every attribute, the item and its index entry share the 400 KB: a rule the
    // library does not model, which DynamoDB itself judges before the commit.
    let lsi_base = KEYED_BYTES + "lsk".len() + 1 + "d".len();
    for (extra, name) in [(0, "at"), (1, "over")] {
        let d = "x".repeat(max / 2 - lsi_base + extra);
        c.push(case("lsi-item-size", format!("put-{name}"), None, put(json!({"lsk": s("l"), "d": s(&d)}))));
    }
    c.push(case(
        "item-size",
        "update-over",
        Some(json!({"d": s(&"x".repeat(200 * 1024))})),
        update("SET d2 = :v", json!({":v": s(&"x".repeat(200 * 1024))})),
    ));
    for (digits, name) in [(38, "at"), (39, "over")] {
        c.push(case("number-precision", format!("put-{name}"), None, put(json!({"n": {"N": "1".repeat(digits)}}))));
    }
    c.push(case(
        "number-range",
        "add-overflow",
        Some(json!({"n": {"N": "9E+125"}})),
        update("ADD n :v", json!({":v": {"N": "9E+125"}})),
    ));
    c.push(case("set-duplicates", "put", None, put(json!({"s": {"NS": ["1", "1.0"]}}))));
    c.push(case(
        "update-operand-type",
        "add-to-string",
        Some(json!({"n": s("x")})),
        update("ADD n :v", json!({":v": {"N": "1"}})),
    ));
    c.push(case("update-document-path", "parent-absent", None, update("SET a.b = :v", json!({":v": s("x")}))));
    c.extend(request_rules());
    c
}

fn keyed(mut c: Case, pk_bytes: usize, sk: Value) -> Case {
    c.key = Some((pk_bytes, sk));
    c
}

/// The rules DynamoDB judges from the request alone: keys, values, names and expressions.
fn request_rules() -> Vec<Case> {
    let v1 = json!({":v": s("x")});
    let mut c = Vec::new();
    for (len, name) in [(2048, "at"), (2049, "over")] {
        c.push(keyed(case("table-pk-size", format!("put-{name}"), None, put(json!({}))), len, s("s")));
        c.push(keyed(
            case("table-pk-size", format!("update-{name}"), None, update("SET x = :v", v1.clone())),
            len,
            s("s"),
        ));
        let check = json!({"ConditionCheck": {"ConditionExpression": "attribute_not_exists(x)"}});
        c.push(keyed(case("table-pk-size", format!("conditioncheck-{name}"), None, check), len, s("s")));
    }
    for (len, name) in [(1024, "at"), (1025, "over")] {
        c.push(keyed(case("table-sk-size", format!("put-{name}"), None, put(json!({}))), 9, s(&"s".repeat(len))));
        c.push(keyed(
            case("table-sk-size", format!("delete-{name}"), None, json!({"Delete": {}})),
            9,
            s(&"s".repeat(len)),
        ));
    }
    c.push(keyed(case("table-key-empty", "update-sk", None, update("SET x = :v", v1.clone())), 9, s("")));
    c.push(keyed(case("table-key-type", "delete-sk-number", None, json!({"Delete": {}})), 9, json!({"N": "1"})));
    c.push(case("table-key-update", "set-sk", None, update("SET sk = :v", v1.clone())));
    c.push(case("index-key-scalar", "set-into-gsi-pk", None, update("SET gpk.x = :v", v1.clone())));
    for v in ["1E+126", "1E-131", "-1E+126"] {
        c.push(case("number-range", format!("put-{v}"), None, put(json!({"n": {"N": v}}))));
    }
    c.push(case(
        "number-range",
        "put-at-top",
        None,
        put(json!({"n": {"N": "9.9999999999999999999999999999999999999E+125"}})),
    ));
    c.push(case("number-range", "update-value", None, update("SET n = :v", json!({":v": {"N": "1E+126"}}))));
    for v in [" 1", "0x10", ""] {
        c.push(case("number-format", format!("put-{v:?}"), None, put(json!({"n": {"N": v}}))));
    }
    c.push(case("number-format", "put-plus", None, put(json!({"n": {"N": "+1"}}))));
    c.push(case("set-empty", "put-SS", None, put(json!({"s": {"SS": []}}))));
    c.push(case("set-empty", "update-NS", None, update("SET s = :v", json!({":v": {"NS": []}}))));
    c.push(case("set-duplicates", "put-SS", None, put(json!({"s": {"SS": ["a", "a"]}}))));
    c.push(case("set-duplicates", "put-NS-01", None, put(json!({"s": {"NS": ["1", "01"]}}))));
    c.push(case("set-duplicates", "update-NS", None, update("SET s = :v", json!({":v": {"NS": ["1", "1.0"]}}))));
    c.push(case("null-false", "put", None, put(json!({"z": {"NULL": false}}))));
    c.push(case("empty-non-key", "put-empty-S", None, put(json!({"e": s("")}))));
    c.push(case("empty-non-key", "put-SS-with-empty", None, put(json!({"e": {"SS": ["", "a"]}}))));
    let mut padded = update("SET a = :v", v1.clone());
    padded["Update"]["UpdateExpression"] = json!(format!("SET a = :v{}", " ".repeat(4096 - 10)));
    c.push(case("expression-size", "update-4096", None, padded));
    // Apply removes the lock attributes in the same expression, so an update of 4 KB of actions leaves it no room.
    let mut set = String::from("SET a0000=:v");
    for i in 1.. {
        let more = format!(",a{i:04}=:v");
        if set.len() + more.len() > 4090 {
            break;
        }
        set.push_str(&more);
    }
    let mut room = case("expression-size", "update-4090-of-actions", None, update(&set, v1.clone()));
    room.protocol = Some(Verdict::Refused);
    c.push(room);
    let mut padded = update("SET a = :v", v1.clone());
    padded["Update"]["UpdateExpression"] = json!(format!("SET a = :v{}", " ".repeat(4097 - 10)));
    c.push(case("expression-size", "update-4097", None, padded));
    for (k, name) in [(300, "at"), (301, "over")] {
        let set = (0..k).map(|i| format!("a{i}=:n+:n")).collect::<Vec<_>>().join(",");
        c.push(case(
            "expression-operators",
            format!("update-{name}"),
            None,
            update(&format!("SET {set}"), json!({":n": {"N": "1"}})),
        ));
    }
    for (k, name) in [(100, "at"), (101, "over")] {
        let mut u = update("SET b = :v", v1.clone());
        u["Update"]["ConditionExpression"] =
            json!(format!("attribute_not_exists(a) OR a IN ({})", vec![":v"; k].join(",")));
        c.push(case("in-operands", format!("condition-{name}"), None, u));
    }
    let mut big = update("SET d = :x", json!({":x": s("1")}));
    for i in 0..6 {
        big["Update"]["ExpressionAttributeValues"][format!(":v{i}")] = s(&"x".repeat(390 * 1024));
    }
    big["Update"]["ConditionExpression"] =
        json!((0..6).map(|i| format!("q <> :v{i}")).collect::<Vec<_>>().join(" AND "));
    c.push(case("substitution-size", "condition-values-over-2MB", None, big));
    let mut unused = update("SET a = :v", v1.clone());
    unused["Update"]["ExpressionAttributeNames"] = json!({"#u": "u"});
    c.push(case("placeholder-unused", "name", None, unused));
    c.push(case("placeholder-unused", "value", None, update("SET a = :v", json!({":v": s("x"), ":u": s("u")}))));
    c.push(case("placeholder-undefined", "value", None, update("SET a = :v", json!({}))));
    c.push(case("reserved-word", "update-status", None, update("SET status = :v", v1.clone())));
    c.push(case("update-paths", "overlap", None, update("SET a = :v, a.b = :v", v1.clone())));
    c.push(case("update-clause-once", "two-SET", None, update("SET a = :v SET b = :v", v1.clone())));
    c.push(case("update-missing-attribute", "plus-absent", None, update("SET a = b + :n", json!({":n": {"N": "1"}}))));
    c
}

/// Bytes of an item's key: `pk` of `n012-k034` and `sk` of `s`.
const KEYED_BYTES: usize = "pk".len() + "n012-k034".len() + "sk".len() + 1;

/// A transaction: `filler` ordinary updates and the case's action at `at`, on items `{prefix}-k000`...
fn transaction(table: &str, prefix: &str, c: &Case, filler: usize, at: usize) -> Value {
    let key = |i: usize| match (&c.key, i == at) {
        (Some((pk_bytes, sk)), true) => {
            let pk = format!("{prefix}-k{i:03}");
            json!({"pk": s(&format!("{pk}{}", "p".repeat(pk_bytes.saturating_sub(pk.len())))), "sk": sk})
        }
        _ => json!({"pk": s(&format!("{prefix}-k{i:03}")), "sk": s("s")}),
    };
    let mut items = Vec::with_capacity(filler + 1);
    for i in 0..=filler {
        let mut a = if i == at {
            c.action.clone()
        } else {
            json!({"Update": {"UpdateExpression": "ADD v :one", "ExpressionAttributeValues": {":one": {"N": "1"}}}})
        };
        let (op, body) = a.as_object_mut().unwrap().iter_mut().next().unwrap();
        body["TableName"] = json!(table);
        if op == "Put" {
            for (k, v) in key(i).as_object().unwrap() {
                body["Item"][k] = v.clone();
            }
        } else {
            body["Key"] = key(i);
        }
        items.push(a);
    }
    json!({ "TransactItems": items })
}

/// The items of a transaction made by [`transaction`] as they are before it: each filler item with `v`, the
/// target with the case's seed (or absent).
async fn seed(client: &Client, table: &str, prefix: &str, c: &Case, filler: usize, at: usize) {
    let items = (0..=filler).filter_map(|i| {
        let mut item = if i == at { c.seed.clone()? } else { json!({"v": {"N": "0"}}) };
        item["pk"] = s(&format!("{prefix}-k{i:03}"));
        item["sk"] = s("s");
        Some(item)
    });
    harness::put_all(client, table, items).await;
}

async fn native(client: &Client, body: &Value, at: usize) -> Verdict {
    let items: Vec<TransactWriteItem> = body["TransactItems"].as_array().unwrap().iter().map(native_item).collect();
    match client.transact_write_items().set_transact_items(Some(items)).send().await {
        Ok(_) => Verdict::Accepted,
        Err(e) => match e.into_service_error() {
            aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError::TransactionCanceledException(c) => {
                // DynamoDB Local lists the refused action's reason alone for some refusals.
                let reasons = c.cancellation_reasons();
                let reason = if reasons.len() == 1 { &reasons[0] } else { &reasons[at] };
                assert_eq!(reason.code(), Some("ValidationError"), "native cancelled for another reason: {c:?}");
                Verdict::Refused
            }
            e if e.meta().code() == Some("ValidationException") => Verdict::Refused,
            e => panic!("native call failed: {e:?}"),
        },
    }
}

/// Who carries the request out: the library in process, or the state machine on the local stack (its Lambda
/// functions and the real definition).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Driver {
    Library,
    StateMachine,
}

/// dynamo-saga's verdict; a refusal must name the action `at` with `ValidationError`.
async fn saga(env: &Env, driver: Driver, body: &Value, at: usize) -> Result<Verdict, String> {
    if driver == Driver::Library {
        return saga_verdict(Coordinator::new(env.store.clone()).run(body).await, at);
    }
    let ex = harness::stack::stack().await.execute(body).await;
    if ex.status == "SUCCEEDED" {
        return Ok(Verdict::Accepted);
    }
    if let Some(c) = ex.cancellation() {
        let failed: Vec<(usize, &str)> = c["CancellationReasons"]
            .as_array()
            .unwrap()
            .iter()
            .enumerate()
            .filter(|(_, r)| r["Code"] != "None")
            .map(|(i, r)| (i, r["Code"].as_str().unwrap_or("")))
            .collect();
        return match failed.as_slice() {
            [(i, "ValidationError")] if *i == at => Ok(Verdict::Refused),
            _ => Err(format!("cancelled naming {failed:?}, not action {at}")),
        };
    }
    let cause = ex.cause.clone().unwrap_or_default();
    match ex.error.as_deref() {
        Some("ValidationError") if cause.contains(&format!("TransactItems[{at}]")) => Ok(Verdict::Refused),
        _ => Err(format!("{} {:?}: {cause}", ex.status, ex.error)),
    }
}

fn saga_verdict<T>(result: Result<T, TxError>, at: usize) -> Result<Verdict, String> {
    match result {
        Ok(_) => Ok(Verdict::Accepted),
        Err(TxError::Canceled(c)) => {
            let failed: Vec<(usize, String)> = c.failed().map(|(i, r)| (i, r.code.clone())).collect();
            if failed == [(at, "ValidationError".to_string())] {
                Ok(Verdict::Refused)
            } else {
                Err(format!("cancelled naming {failed:?}, not action {at}: {c:?}"))
            }
        }
        Err(TxError::Validation(v)) if v.action == Some(at) => Ok(Verdict::Refused),
        Err(e) => Err(format!("{}: {e}", e.name())),
    }
}

/// The target item and the filler items after the transaction, by key; and whether any carries a lock.
async fn items(client: &Client, table: &str, prefix: &str) -> (BTreeMap<String, Value>, bool) {
    let all = harness::scan(client, table).await;
    let mine: BTreeMap<String, Value> = all.into_iter().filter(|(k, _)| k.contains(&format!("{prefix}-"))).collect();
    let locked = mine.values().any(|i| i.as_object().unwrap().keys().any(|k| k.starts_with("_saga")));
    (mine, locked)
}

/// The table every case writes: `pk` and `sk`, a global index on `gpk` and `gsk`, a local one on `lsk` (all
/// strings).
async fn create_table(client: &Client, name: &str) {
    let key = |n: &str, t: KeyType| KeySchemaElement::builder().attribute_name(n).key_type(t).build().unwrap();
    let def = |n: &str| {
        AttributeDefinition::builder().attribute_name(n).attribute_type(ScalarAttributeType::S).build().unwrap()
    };
    let all = || Projection::builder().projection_type(ProjectionType::All).build();
    client
        .create_table()
        .table_name(name)
        .billing_mode(BillingMode::PayPerRequest)
        .key_schema(key("pk", KeyType::Hash))
        .key_schema(key("sk", KeyType::Range))
        .set_attribute_definitions(Some(["pk", "sk", "gpk", "gsk", "lsk"].iter().map(|n| def(n)).collect()))
        .global_secondary_indexes(
            GlobalSecondaryIndex::builder()
                .index_name("by-gpk")
                .key_schema(key("gpk", KeyType::Hash))
                .key_schema(key("gsk", KeyType::Range))
                .projection(all())
                .build()
                .unwrap(),
        )
        .local_secondary_indexes(
            LocalSecondaryIndex::builder()
                .index_name("by-lsk")
                .key_schema(key("pk", KeyType::Hash))
                .key_schema(key("lsk", KeyType::Range))
                .projection(all())
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
}

/// Runs one case at 10 actions natively and through dynamo-saga, and at 150 through dynamo-saga, on a table of its
/// own (so that reading back every item of the table stays as cheap as the case is small); the failures.
async fn run_case(env: &Env, driver: Driver, n: usize, c: &Case, at10: usize, at150: usize) -> Vec<String> {
    let table = &format!("{}-r{n:03}", env.a);
    create_table(&env.client, table).await;
    let mut problems = Vec::new();
    let what = format!("{} {} ({driver:?})", c.rule, c.name);
    let (native_prefix, saga_prefix, big_prefix) = (format!("n{n:03}"), format!("s{n:03}"), format!("b{n:03}"));
    seed(&env.client, table, &native_prefix, c, 9, at10).await;
    seed(&env.client, table, &saga_prefix, c, 9, at10).await;
    seed(&env.client, table, &big_prefix, c, 149, at150).await;
    let local = native(&env.client, &transaction(table, &native_prefix, c, 9, at10), at10).await;
    if c.protocol == Some(local) || c.one_call == Some(local) {
        problems.push(format!("{what}: DynamoDB Local now answers {local:?}, as dynamo-saga does"));
    }
    for (prefix, filler, at) in [(&saga_prefix, 9, at10), (&big_prefix, 149, at150)] {
        let expected = if filler < 99 { c.one_call.unwrap_or(local) } else { c.protocol.unwrap_or(local) };
        let (before, _) = items(&env.client, table, prefix).await;
        let got = saga(env, driver, &transaction(table, prefix, c, filler, at), at).await;
        let (after, locked) = items(&env.client, table, prefix).await;
        if got != Ok(expected) {
            problems.push(format!("{what} at {} actions: expected {expected:?}, got {got:?}", filler + 1));
        }
        if locked {
            problems.push(format!("{what} at {} actions: a lock was left", filler + 1));
        }
        if expected == Verdict::Refused && after != before {
            problems.push(format!("{what} at {} actions: refused, yet items were written", filler + 1));
        }
        if expected == Verdict::Accepted && filler == 9 {
            let native_after = items(&env.client, table, &native_prefix).await.0;
            let rename = |m: &BTreeMap<String, Value>, p: &str| -> Vec<Value> {
                m.values()
                    .map(|v| serde_json::from_str(&v.to_string().replace(&format!("{p}-"), "x-")).unwrap())
                    .collect()
            };
            if rename(&after, prefix) != rename(&native_after, &native_prefix) {
                problems.push(format!("{what}: the items differ from native's"));
            }
        }
    }
    problems
}

async fn run_all(label: &str, driver: Driver, cases: Vec<Case>, seed: u64) -> (usize, usize) {
    let env = match driver {
        // Four cases at once, each of up to 150 items near DynamoDB's size limits: at the default 256 writes in flight
        // DynamoDB Local times out its own item locks ("InternalServerError ... too long waiting for a lock", which it
        // says DynamoDB would not), retries included. What this test judges is which writes are refused, not speed.
        Driver::Library => Env::with(label, |c| dynamo_saga::Config { max_actions: 1000, concurrency: 16, ..c }).await,
        Driver::StateMachine => Env::on_stack(label).await,
    };
    let env = Env {
        store: dynamo_saga::Store::new(
            env.client.clone(),
            dynamo_saga::Config { allowed_tables: None, ..env.store.cfg.as_ref().clone() },
        ),
        ..env
    };
    let mut rng = StdRng::seed_from_u64(seed);
    let placed: Vec<(usize, Case, usize, usize)> =
        cases.into_iter().enumerate().map(|(n, c)| (n, c, rng.gen_range(0..10), rng.gen_range(0..150))).collect();
    let refused = placed.iter().filter(|p| p.1.protocol.is_some()).count();
    let problems: Vec<String> = futures::stream::iter(placed.iter())
        .map(|(n, c, at10, at150)| run_case(&env, driver, *n, c, *at10, *at150))
        .buffer_unordered(if driver == Driver::Library { 4 } else { 8 })
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .flatten()
        .collect();
    assert!(problems.is_empty(), "{} problems:\n{}", problems.len(), problems.join("\n"));
    (placed.len(), refused)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_refusal_of_the_catalogue_is_native_and_nothing_is_partly_applied() {
    let cases = catalogue();
    let rules: std::collections::BTreeSet<&str> = cases.iter().map(|c| c.rule).collect();
    let (n, _) = run_all("refuse", Driver::Library, cases, 0x2E_F05E).await;
    harness::report(format!(
        "refusal catalogue through the library: {n} cases of {} rules at 10 and 150 actions, each equal to native, 0 partly applied, 0 locks left",
        rules.len()
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_refusal_of_the_catalogue_through_the_state_machine() {
    let cases = catalogue();
    let rules: std::collections::BTreeSet<&str> = cases.iter().map(|c| c.rule).collect();
    let (n, _) = run_all("refuse-sm", Driver::StateMachine, cases, 0x5F_7E11).await;
    harness::report(format!(
        "refusal catalogue through the state machine: {n} cases of {} rules at 10 and 150 actions, each equal to native, 0 partly applied, 0 locks left",
        rules.len()
    ));
}

/// Writes near every limit the catalogue names, with sizes drawn around each limit.
fn near_limits(rng: &mut StdRng, count: usize) -> Vec<Case> {
    (0..count)
        .map(|i| {
            let around = |rng: &mut StdRng, limit: usize| limit + rng.gen_range(0..4) - 2;
            let pick = rng.gen_range(0..7);
            let c = match pick {
                0 => {
                    let g = "g".repeat(around(rng, 2048));
                    if rng.gen_bool(0.5) {
                        put(json!({"gpk": s(&g), "gsk": s("s")}))
                    } else {
                        update("SET gpk = :v", json!({":v": s(&g)}))
                    }
                }
                1 => {
                    let g = "g".repeat(around(rng, 1024));
                    match rng.gen_range(0..3) {
                        0 => put(json!({"gsk": s(&g)})),
                        1 => put(json!({"lsk": s(&g)})),
                        _ => update("SET gsk = :v", json!({":v": s(&g)})),
                    }
                }
                2 => {
                    let levels = around(rng, 32) - 1;
                    match rng.gen_range(0..3) {
                        0 => put(json!({"d": deep(levels)})),
                        1 => update("SET d = :v", json!({":v": deep(levels)})),
                        _ => update(
                            "SET l = list_append(:a, :b)",
                            json!({":a": {"L": []}, ":b": {"L": [deep(levels - 1)]}}),
                        ),
                    }
                }
                3 => {
                    let mut u = update("SET #a = :v", json!({":v": s("x")}));
                    let len = *[50_000, 65_536, 65_537].get(rng.gen_range(0..3)).unwrap();
                    u["Update"]["ExpressionAttributeNames"] = json!({"#a": "n".repeat(len)});
                    u
                }
                4 => {
                    let base = KEYED_BYTES + "d".len();
                    put(json!({"d": s(&"x".repeat(around(rng, 400 * 1024) - base))}))
                }
                5 => put(json!({"n": {"N": "7".repeat(around(rng, 38))}})),
                _ => {
                    let p = format!("#{}", "p".repeat(around(rng, 255) - 1));
                    let mut u = update(&format!("SET {p} = :v"), json!({":v": s("x")}));
                    u["Update"]["ExpressionAttributeNames"] = json!({ p: "a" });
                    u
                }
            };
            case("near-limits", format!("generated-{i}-{pick}"), None, c)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn generated_writes_near_every_limit_are_never_partly_applied() {
    let seed: u64 = std::env::var("REFUSAL_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0x11_A175);
    let mut rng = StdRng::seed_from_u64(seed);
    let cases = near_limits(&mut rng, 60);
    let (n, _) = run_all("near", Driver::Library, cases, seed).await;
    harness::report(format!("writes near DynamoDB's limits (seed {seed}): {n} generated at 10 and 150 actions, each equal to native, 0 partly applied"));
}

/// The pre-commit check is what stops a rule the library does not model: a `Put` whose item and local index entry
/// together pass 400 KB. With it off, the transaction commits and the item is refused at apply (`ApplyRejected`,
/// partly applied); with the default, DynamoDB refuses it before the commit and nothing is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_precommit_check_stops_a_write_no_rule_of_the_library_refuses() {
    let base = Env::new("net").await;
    let table = format!("{}-r", base.a);
    create_table(&base.client, &table).await;
    let lsi_base = KEYED_BYTES + "lsk".len() + 1 + "d".len();
    let c = case(
        "lsi-item-size",
        "put-over",
        None,
        put(json!({"lsk": s("l"), "d": s(&"x".repeat(200 * 1024 - lsi_base + 1))})),
    );
    for (check, prefix) in [(PrecommitCheck::Off, "off"), (PrecommitCheck::NearLimits, "nea")] {
        let cfg =
            dynamo_saga::Config { precommit_check: check, allowed_tables: None, ..base.store.cfg.as_ref().clone() };
        let env = Env {
            store: dynamo_saga::Store::new(base.client.clone(), cfg),
            ..Env::new(&format!("net-{prefix}")).await
        };
        let prefix = format!("{prefix}0");
        seed(&env.client, &table, &prefix, &c, 149, 70).await;
        let got = Coordinator::new(env.store.clone()).run(&transaction(&table, &prefix, &c, 149, 70)).await;
        let (after, _) = items(&env.client, &table, &prefix).await;
        let applied = after.values().filter(|i| i.get("v").is_some_and(|v| v["N"] == "1")).count();
        match check {
            PrecommitCheck::Off => {
                assert!(matches!(got, Err(TxError::ApplyRejected { .. })), "{got:?}");
                assert!(applied > 0, "without the check the transaction is partly applied ({applied} of 149)");
            }
            _ => {
                assert_eq!(saga_verdict(got, 70), Ok(Verdict::Refused));
                assert_eq!(applied, 0, "nothing is written");
            }
        }
    }
}

/// When a refusal still happens: an index added after lock checked the writes (its key a string, which one update
/// then sets to a number) makes DynamoDB refuse that committed write at apply. The rest is applied, the refused item
/// keeps its lock, a committed read of it shows the committed write, and the status names the write and DynamoDB's
/// message. Once the index is gone, resuming the transaction (what `dynamo-saga resume` does in-process) applies the
/// write exactly once and finishes it.
#[tokio::test]
async fn an_index_added_after_lock_is_refused_at_apply_shown_by_status_and_resumed_once_mended() {
    use dynamo_saga::phase::begin;
    use dynamo_saga::read::{self, Isolation};
    use dynamo_saga::status::status;
    use dynamo_saga::{Config, TxState};
    use harness::{nv, sv};

    let env = Env::with("late-index", |c| Config { direct: false, ..c }).await;
    for k in ["k0", "k1", "k2"] {
        env.put(&env.a, json!({"pk": sv(k), "n": nv(0)})).await;
    }
    let add = |k: &str, set: &str| {
        json!({"Update": {"TableName": env.a, "Key": {"pk": sv(k)}, "UpdateExpression": format!("ADD n :one{set}"),
            "ExpressionAttributeValues": {":one": nv(1)}}})
    };
    let mut refused = add("k1", " SET g = :one");
    refused["Update"]["UpdateExpression"] = json!("SET g = :one ADD n :one");
    let request = json!({"TransactItems": [add("k0", ""), refused, add("k2", "")]});
    let id = begin::begin(&env.store, &request).await.unwrap().transaction_id;
    let saga = Coordinator::new(env.store.clone());
    saga.drive_locks(&id).await.expect("lock checks every write against the table as it is");

    harness::add_string_index(&env.client, &env.a, "by-g", "g").await;
    let e = saga.drive(&id).await.unwrap_err();
    let TxError::ApplyRejected { action, message, .. } = &e else { panic!("{e:?}") };
    assert!(action.contains("k1"), "{e}");
    let s = status(&env.store, &id).await.unwrap();
    assert_eq!((s.state, s.finished), (TxState::Committed, false));
    let r = s.refused.expect("the status names the refused write");
    assert_eq!((r.action.as_str(), r.message.as_str()), (action.as_str(), message.as_str()));
    let n_of = |item: Option<dynamo_saga::value::Item>| item.and_then(|i| i.get("n").cloned());
    for (k, n) in [("k0", "1"), ("k1", "0"), ("k2", "1")] {
        let raw = env.get(&env.a, json!({"pk": sv(k)})).await.unwrap();
        assert_eq!(raw["n"], json!({"N": n}), "{k}: the rest is applied, the refused write is not: {raw}");
    }
    let key = dynamo_saga::value::item_from_json(&json!({"pk": sv("k1")})).unwrap();
    // A committed read shows the committed write, evaluated as lock checked it.
    let read = read::get_item(&env.store, &env.a, key.clone(), Isolation::Committed).await.unwrap().unwrap();
    assert_eq!((read["n"].as_n().unwrap().as_str(), read["g"].as_n().unwrap().as_str()), ("1", "1"), "{read:?}");
    // A second try meets the same refusal and applies nothing twice.
    assert!(matches!(saga.drive(&id).await, Err(TxError::ApplyRejected { .. })));

    harness::drop_index(&env.client, &env.a, "by-g").await;
    let done = saga.drive(&id).await.expect("resumed once mended, it commits");
    assert_eq!(done.state, TxState::Committed);
    let s = status(&env.store, &id).await.unwrap();
    assert!(s.finished && s.refused.is_none(), "{s:?}");
    for k in ["k0", "k1", "k2"] {
        let key = dynamo_saga::value::item_from_json(&json!({"pk": sv(k)})).unwrap();
        let item = read::get_item(&env.store, &env.a, key, Isolation::Committed).await.unwrap();
        assert_eq!(n_of(item), Some(aws_sdk_dynamodb::types::AttributeValue::N("1".into())), "{k}: applied once");
    }
    env.assert_clean().await;
}
