//! The protocol as the Java dynamodb-transactions library runs it, for the benchmark's baseline: one item at a
//! time, the requests kept in the TX record itself (here as their JSON text), 7N+4 writes for N updates of existing
//! items.
//!
//! For each action, in request order: add the request to the TX record; lock the item (creating it, marked
//! transient, when absent); save its old image (updates and deletes); verify the TX record is still pending (a
//! write, as the seed counts it); apply the change (puts and updates; deletes wait, condition checks are read locks).
//! Then commit the TX record; for each item, unlock it (or delete it) and delete its image; mark the TX record
//! finalized; delete it. Only the happy path is run: the baseline measures what a committed transaction costs.

use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue};
use dynamo_saga::store::{Meter, Written};
use dynamo_saga::value::{item_from_json, Item};
use dynamo_saga::value::{n, s};
use dynamo_saga::{Store, TxError};
use serde_json::Value;

const LOCK: &str = "txLock";
const DATE: &str = "txDate";
const TRANSIENT: &str = "txTransient";

/// The TX-record and image tables of one run, each keyed by `id` (S).
pub struct Tables {
    pub tx: String,
    pub images: String,
}

/// How far a run got: the actions done, or the error that stopped it (for example the TX record outgrowing 400 KB).
#[derive(Debug)]
pub struct Run {
    pub actions_done: usize,
    pub error: Option<String>,
}

fn key_attr(id: &str) -> Item {
    Item::from([("id".to_string(), s(id))])
}

/// Runs `body` (a `TransactItems` request on one table keyed by `pk`) as the Java library would.
pub async fn run(store: &Store, t: &Tables, tx_id: &str, body: &Value) -> Run {
    let actions = body["TransactItems"].as_array().expect("TransactItems");
    let mut done = 0;
    let r = run_all(store, t, tx_id, actions, &mut done).await;
    Run { actions_done: done, error: r.err().map(|e| e.to_string()) }
}

fn field(a: &Value) -> (&str, &Value) {
    let (op, b) = a.as_object().expect("an action").iter().next().expect("one operation");
    (op.as_str(), b)
}

fn must(w: Result<Written, TxError>, what: &str) -> Result<Option<Item>, TxError> {
    match w? {
        Written::Done(attrs) => Ok(attrs),
        Written::ConditionFailed(_) => Err(TxError::Internal(format!("{what}: condition failed"))),
    }
}

async fn run_all(store: &Store, t: &Tables, tx_id: &str, actions: &[Value], done: &mut usize) -> Result<(), TxError> {
    let m = Meter::default();
    let c = &store.client;
    let tx_key = key_attr(tx_id);
    let mut record = key_attr(tx_id);
    record.insert("state".into(), s("PENDING"));
    record.insert("version".into(), n(0));
    record.insert("requests".into(), AttributeValue::L(vec![]));
    must(
        store
            .put(
                &m,
                c.put_item().table_name(&t.tx).set_item(Some(record)).condition_expression("attribute_not_exists(id)"),
            )
            .await,
        "create",
    )?;
    let pending = || {
        c.update_item()
            .table_name(&t.tx)
            .set_key(Some(tx_key.clone()))
            .condition_expression("#s = :pending")
            .expression_attribute_names("#s", "state")
            .expression_attribute_values(":pending", s("PENDING"))
    };
    for (i, a) in actions.iter().enumerate() {
        let (op, b) = field(a);
        let table = b["TableName"].as_str().expect("TableName");
        let key = match op {
            "Put" => {
                let item = item_from_json(&b["Item"]).expect("Item");
                Item::from([("pk".to_string(), item["pk"].clone())])
            }
            _ => item_from_json(&b["Key"]).expect("Key"),
        };
        // add: the request goes into the TX record, which grows with every action.
        must(
            store
                .update(
                    &m,
                    pending()
                        .update_expression("SET requests = list_append(requests, :r), version = version + :one")
                        .expression_attribute_values(":r", AttributeValue::L(vec![s(a.to_string())]))
                        .expression_attribute_values(":one", n(1)),
                )
                .await,
            "add",
        )?;
        // lock, reading the item as it was.
        let lock = c
            .update_item()
            .table_name(table)
            .set_key(Some(key.clone()))
            .condition_expression("attribute_not_exists(#l)")
            .expression_attribute_names("#l", LOCK)
            .expression_attribute_names("#d", DATE)
            .expression_attribute_values(":tx", s(tx_id))
            .expression_attribute_values(":now", n(dynamo_saga::value::now_ms()))
            .return_values(ReturnValue::AllOld);
        let lock = if op == "Put" {
            lock.update_expression("SET #l = :tx, #d = :now, #t = :true")
                .expression_attribute_names("#t", TRANSIENT)
                .expression_attribute_values(":true", AttributeValue::Bool(true))
        } else {
            lock.update_expression("SET #l = :tx, #d = :now")
        };
        let old = must(store.update(&m, lock).await, "lock")?;
        // save the old image of an item that changes and existed.
        if matches!(op, "Update" | "Delete") {
            let mut image = key_attr(&format!("{tx_id}#{i}"));
            image.insert("item".into(), AttributeValue::M(old.unwrap_or_default()));
            must(store.put(&m, c.put_item().table_name(&t.images).set_item(Some(image))).await, "image")?;
        }
        // verify the TX record is still pending before the change.
        must(
            store
                .update(
                    &m,
                    pending()
                        .update_expression("SET version = version + :one")
                        .expression_attribute_values(":one", n(1)),
                )
                .await,
            "verify",
        )?;
        // apply, conditional on the lock.
        match op {
            "Update" => {
                let mut req = c
                    .update_item()
                    .table_name(table)
                    .set_key(Some(key.clone()))
                    .update_expression(b["UpdateExpression"].as_str().expect("UpdateExpression"))
                    .condition_expression("#l = :tx")
                    .expression_attribute_names("#l", LOCK)
                    .expression_attribute_values(":tx", s(tx_id));
                if let Some(v) = b.get("ExpressionAttributeValues") {
                    for (k, v) in item_from_json(v).expect("values") {
                        req = req.expression_attribute_values(k, v);
                    }
                }
                must(store.update(&m, req).await, "apply")?;
            }
            "Put" => {
                let mut item = item_from_json(&b["Item"]).expect("Item");
                item.insert(LOCK.into(), s(tx_id));
                item.insert(TRANSIENT.into(), AttributeValue::Bool(true));
                must(
                    store
                        .put(
                            &m,
                            c.put_item()
                                .table_name(table)
                                .set_item(Some(item))
                                .condition_expression("#l = :tx")
                                .expression_attribute_names("#l", LOCK)
                                .expression_attribute_values(":tx", s(tx_id)),
                        )
                        .await,
                    "apply",
                )?;
            }
            _ => {}
        }
        *done = i + 1;
    }
    must(
        store
            .update(
                &m,
                pending()
                    .update_expression("SET #s = :committed")
                    .expression_attribute_values(":committed", s("COMMITTED")),
            )
            .await,
        "commit",
    )?;
    for (i, a) in actions.iter().enumerate() {
        let (op, b) = field(a);
        let table = b["TableName"].as_str().expect("TableName");
        let key = match op {
            "Put" => Item::from([("pk".to_string(), item_from_json(&b["Item"]).expect("Item")["pk"].clone())]),
            _ => item_from_json(&b["Key"]).expect("Key"),
        };
        if op == "Delete" {
            must(
                store
                    .delete(
                        &m,
                        c.delete_item()
                            .table_name(table)
                            .set_key(Some(key))
                            .condition_expression("#l = :tx")
                            .expression_attribute_names("#l", LOCK)
                            .expression_attribute_values(":tx", s(tx_id)),
                    )
                    .await,
                "delete",
            )?;
        } else {
            must(
                store
                    .update(
                        &m,
                        c.update_item()
                            .table_name(table)
                            .set_key(Some(key))
                            .update_expression("REMOVE #l, #d, #t")
                            .condition_expression("#l = :tx")
                            .expression_attribute_names("#l", LOCK)
                            .expression_attribute_names("#d", DATE)
                            .expression_attribute_names("#t", TRANSIENT)
                            .expression_attribute_values(":tx", s(tx_id)),
                    )
                    .await,
                "unlock",
            )?;
        }
        if matches!(op, "Update" | "Delete") {
            must(
                store
                    .delete(&m, c.delete_item().table_name(&t.images).set_key(Some(key_attr(&format!("{tx_id}#{i}")))))
                    .await,
                "image",
            )?;
        }
    }
    must(
        store
            .update(
                &m,
                c.update_item()
                    .table_name(&t.tx)
                    .set_key(Some(tx_key.clone()))
                    .update_expression("SET finalized = :t")
                    .expression_attribute_values(":t", AttributeValue::Bool(true)),
            )
            .await,
        "finalize",
    )?;
    must(store.delete(&m, c.delete_item().table_name(&t.tx).set_key(Some(tx_key))).await, "clean")?;
    Ok(())
}
