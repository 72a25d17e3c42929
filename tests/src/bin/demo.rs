//! The README's main job, on the local stack (`tools/demo.sh` starts it): a shop. A product with 300
//! inventory units; an order for 200 units (201 actions, 3 batches, under the product's lockToken) commits through the
//! state machine; a second order for 150 units, 50 of them already sold, is rolled back with the reasons.

use std::time::Instant;

use dynamo_saga::records::read_header;
use dynamo_saga::store::Meter;
use dynamo_saga::{Config, Store};
use harness::stack::{stack, Execution};
use harness::{create_table, put_all, sv};
use serde_json::{json, Value};

const TABLE: &str = "shop";
const PRODUCT: &str = "PRODUCT#1";

fn unit(i: usize) -> String {
    format!("UNIT#{i:03}")
}

fn order(id: &str, user: &str, units: std::ops::Range<usize>) -> Value {
    let mut items: Vec<Value> = units
        .map(|i| {
            json!({"Update": {"TableName": TABLE, "Key": {"pk": sv(PRODUCT), "sk": sv(&unit(i))},
                "UpdateExpression": "SET #s = :sold, soldToUserId = :user, orderId = :order",
                "ConditionExpression": "#s = :available AND attribute_not_exists(soldToUserId)",
                "ExpressionAttributeNames": {"#s": "status"},
                "ExpressionAttributeValues": {":sold": sv("SOLD"), ":available": sv("AVAILABLE"), ":user": sv(user), ":order": sv(id)},
                "ReturnValuesOnConditionCheckFailure": "ALL_OLD"}})
        })
        .collect();
    items.push(json!({"Put": {"TableName": TABLE, "Item": {"pk": sv(&format!("ORDER#{id}")), "sk": sv("ORDER"), "userId": sv(user)},
        "ConditionExpression": "attribute_not_exists(pk)"}}));
    json!({"TransactItems": items, "Parent": {"TableName": TABLE, "Key": {"pk": sv(PRODUCT), "sk": sv("PRODUCT")}},
        "ClientRequestToken": format!("order-{id}")})
}

async fn count_sold(client: &aws_sdk_dynamodb::Client) -> (usize, usize) {
    let items = harness::scan(client, TABLE).await;
    let units = items.values().filter(|v| v["sk"]["S"].as_str().is_some_and(|s| s.starts_with("UNIT#")));
    let (mut sold, mut available) = (0, 0);
    for u in units {
        match u["status"]["S"].as_str() {
            Some("SOLD") => sold += 1,
            _ => available += 1,
        }
    }
    (sold, available)
}

async fn report(store: &Store, title: &str, ex: &Execution, started: Instant) {
    let tx_id = ex.output["TransactionId"]
        .as_str()
        .map(String::from)
        .or_else(|| ex.cancellation().and_then(|c| c["TransactionId"].as_str().map(String::from)));
    println!("\n== {title}: {}", if ex.status == "SUCCEEDED" { "COMMITTED" } else { "ROLLED_BACK" });
    if let Some(c) = ex.cancellation() {
        println!("   error: {} - {}", ex.error.as_deref().unwrap_or(""), c["Message"].as_str().unwrap_or(""));
        let reasons = c["CancellationReasons"].as_array().cloned().unwrap_or_default();
        let failed: Vec<(usize, &Value)> = reasons.iter().enumerate().filter(|(_, r)| r["Code"] != "None").collect();
        for (i, r) in failed.iter().take(3) {
            println!(
                "   TransactItems[{i}]: {} (item was {})",
                r["Code"].as_str().unwrap_or(""),
                r["Item"]["sk"]["S"].as_str().unwrap_or("-")
            );
        }
        if failed.len() > 3 {
            println!("   ... {} failing actions in all, of {}", failed.len(), reasons.len());
        }
    } else if ex.status != "SUCCEEDED" {
        println!("   error: {} {}", ex.error.as_deref().unwrap_or(""), ex.cause.as_deref().unwrap_or(""));
    }
    if let Some(id) = tx_id {
        let h = read_header(store, &Meter::default(), &id).await.expect("header");
        println!("   transaction {id}: {} actions in {} batches", h.actions, h.batches);
        println!(
            "   DynamoDB: {} calls ({} writes), {:.1} write units and {:.1} read units as DynamoDB Local reported them",
            h.usage.calls, h.usage.writes, h.usage.write_units, h.usage.read_units
        );
    }
    println!(
        "   state machine: {} state transitions, {} Lambda calls, {:.1} s",
        ex.transitions,
        ex.task_calls,
        started.elapsed().as_secs_f64()
    );
}

#[tokio::main]
async fn main() {
    let st = stack().await;
    let client = st.client();
    let store = Store::new(client.clone(), Config::new(&st.tx_table));
    create_table(&client, TABLE, &[("pk", "S"), ("sk", "S")]).await;
    client
        .put_item()
        .table_name(TABLE)
        .set_item(Some(
            dynamo_saga::value::item_from_json(&json!({"pk": sv(PRODUCT), "sk": sv("PRODUCT"), "name": sv("Widget")}))
                .unwrap(),
        ))
        .send()
        .await
        .unwrap();
    put_all(
        &client,
        TABLE,
        (0..300).map(|i| json!({"pk": sv(PRODUCT), "sk": sv(&unit(i)), "status": sv("AVAILABLE")})),
    )
    .await;
    let (sold, available) = count_sold(&client).await;
    println!(
        "Table {TABLE}: product {PRODUCT} with {} inventory units ({available} AVAILABLE, {sold} SOLD)",
        sold + available
    );

    println!("\nOrder 1001: user-1 buys units 000-199 (200 updates + the order item, under the product's lockToken)");
    let t = Instant::now();
    let first = st.run(&order("1001", "user-1", 0..200), false, true).await;
    report(&store, "order 1001", &first, t).await;
    let (sold, available) = count_sold(&client).await;
    println!("   units now: {sold} SOLD, {available} AVAILABLE");

    println!("\nOrder 1002: user-2 buys units 150-299; 150-199 are already sold, so the whole order must roll back");
    let t = Instant::now();
    let second = st.run(&order("1002", "user-2", 150..300), false, true).await;
    report(&store, "order 1002", &second, t).await;
    let (sold2, available2) = count_sold(&client).await;
    println!("   units now: {sold2} SOLD, {available2} AVAILABLE (unchanged)");

    let ok = first.status == "SUCCEEDED"
        && second.error.as_deref() == Some("TransactionCanceled")
        && (sold, available) == (200, 100)
        && (sold2, available2) == (200, 100);
    println!("\n{}", if ok { "Both orders ended as expected." } else { "UNEXPECTED OUTCOME" });
    std::process::exit(if ok { 0 } else { 1 });
}
