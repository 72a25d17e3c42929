//! The benchmark's floor for CPU: a bare program that sends what `dynamo-saga submit --in-process` sends for each update
//! of a large transaction, two conditional `UpdateItem`s (one shaped as a lock write, which returns the item as it was;
//! one as an apply write, the caller's update and the unlock), through the SDK's own client with its defaults, and
//! nothing else: no protocol, no records, no evaluation. `bench` runs it beside the CLI on the same items and divides
//! each process's CPU time by the requests it sent.
//!
//!   bare TABLE PREFIX N [--in-flight 256]
//!
//! The items `PREFIX-000000` .. `PREFIX-<N-1>`, each with a number `v`, are expected to exist (`bench` creates them);
//! the endpoint and credentials come from the standard chain (`AWS_ENDPOINT_URL_DYNAMODB`). Prints the requests sent.

use aws_sdk_dynamodb::types::{AttributeValue, ReturnConsumedCapacity, ReturnValue};
use futures::StreamExt;

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let usage = "usage: bare TABLE PREFIX N [--in-flight 256]";
    let table = args.next().expect(usage);
    let prefix = args.next().expect(usage);
    let n: usize = args.next().and_then(|s| s.parse().ok()).expect(usage);
    let mut in_flight = 256usize;
    while let Some(flag) = args.next() {
        let value = args.next().and_then(|s| s.parse().ok()).expect(usage);
        match flag.as_str() {
            "--in-flight" => in_flight = value,
            _ => panic!("{usage}"),
        }
    }
    let sdk = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
    let client = aws_sdk_dynamodb::Client::new(&sdk);
    let s = |v: &str| AttributeValue::S(v.to_string());
    let sent = futures::stream::iter(0..n)
        .map(|i| {
            let (client, table, prefix) = (&client, &table, &prefix);
            async move {
                let key = s(&format!("{prefix}-{i:06}"));
                // Shaped as a lock write: two attributes set on an item that exists unlocked, the old item returned.
                client
                    .update_item()
                    .table_name(table)
                    .key("pk", key.clone())
                    .update_expression("SET #l = :l, #a = :a")
                    .condition_expression("attribute_exists(pk) AND attribute_not_exists(#l)")
                    .expression_attribute_names("#l", "_bareLock")
                    .expression_attribute_names("#a", "_bareAt")
                    .expression_attribute_values(":l", s("tx"))
                    .expression_attribute_values(":a", AttributeValue::N("1".into()))
                    .return_values(ReturnValue::AllOld)
                    .return_consumed_capacity(ReturnConsumedCapacity::Total)
                    .send()
                    .await
                    .expect("the lock-shaped write");
                // Shaped as an apply write: the caller's update and the unlock, conditioned on the lock.
                client
                    .update_item()
                    .table_name(table)
                    .key("pk", key)
                    .update_expression("SET v = v + :one REMOVE #l, #a")
                    .condition_expression("#l = :l")
                    .expression_attribute_names("#l", "_bareLock")
                    .expression_attribute_names("#a", "_bareAt")
                    .expression_attribute_values(":l", s("tx"))
                    .expression_attribute_values(":one", AttributeValue::N("1".into()))
                    .return_consumed_capacity(ReturnConsumedCapacity::Total)
                    .send()
                    .await
                    .expect("the apply-shaped write");
            }
        })
        .buffer_unordered(in_flight)
        .count()
        .await;
    println!("{}", 2 * sent);
}
