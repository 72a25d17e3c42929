//! The benchmark's floor for CPU: a bare program that sends what `dynamo-saga submit --in-process` sends for each update
//! of a large transaction, two conditional `UpdateItem`s (one shaped as a lock write, which returns the item as it was;
//! one as an apply write), through the SDK's own client with its defaults, and nothing else: no protocol, no records,
//! no evaluation. `bench` runs it beside the CLI on the same items and divides each process's CPU time by the requests
//! it sent.
//!
//!   bare TABLE N [--in-flight 256] [--bytes 900]
//!
//! The items `k000000` .. are expected to exist (`bench` creates them); the endpoint and credentials come from the
//! standard chain (`AWS_ENDPOINT_URL_DYNAMODB`).

use aws_sdk_dynamodb::types::{AttributeValue, ReturnConsumedCapacity, ReturnValue};
use futures::StreamExt;

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let usage = "usage: bare TABLE N [--in-flight 256] [--bytes 900]";
    let table = args.next().expect(usage);
    let n: usize = args.next().and_then(|s| s.parse().ok()).expect(usage);
    let (mut in_flight, mut bytes) = (256usize, 900usize);
    while let Some(flag) = args.next() {
        let value = args.next().and_then(|s| s.parse().ok()).expect(usage);
        match flag.as_str() {
            "--in-flight" => in_flight = value,
            "--bytes" => bytes = value,
            _ => panic!("{usage}"),
        }
    }
    let sdk = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
    let client = aws_sdk_dynamodb::Client::new(&sdk);
    let value = "x".repeat(bytes);
    let s = |v: &str| AttributeValue::S(v.to_string());
    let sent = futures::stream::iter(0..n)
        .map(|i| {
            let (client, value, table) = (&client, &value, &table);
            async move {
                let key = s(&format!("k{i:06}"));
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
                    .update_expression("SET payload = :v REMOVE #l, #a")
                    .condition_expression("#l = :l")
                    .expression_attribute_names("#l", "_bareLock")
                    .expression_attribute_names("#a", "_bareAt")
                    .expression_attribute_values(":l", s("tx"))
                    .expression_attribute_values(":v", s(value))
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
