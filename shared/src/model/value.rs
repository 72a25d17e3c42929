//! DynamoDB values as the protocol uses them: everything of `dynamo_saga_expressions::value` (DynamoDB JSON, its
//! validation rules, item sizes), plus the order in which coordinators lock keys, a key's form in messages, and the
//! clock.

use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

use aws_sdk_dynamodb::types::AttributeValue;
pub use dynamo_saga_expressions::value::*;

/// Milliseconds since the Unix epoch on this machine's clock.
pub fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

/// A byte string that orders keys the same way on every coordinator, used for the global lock order and for finding
/// the same item twice. Type tags keep `{"S":"1"}` and `{"N":"1"}` apart.
pub fn key_order(table: &str, key: &Item, key_names: &[String]) -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    out.extend_from_slice(table.as_bytes());
    for name in key_names {
        out.push(0);
        match key.get(name) {
            Some(AttributeValue::S(s)) => {
                out.push(b'S');
                out.extend_from_slice(s.as_bytes());
            }
            Some(AttributeValue::N(n)) => {
                // 2 and 2.00 are one key: one item.
                out.push(b'N');
                out.extend_from_slice(canonical_number(n).as_bytes());
            }
            Some(AttributeValue::B(b)) => {
                out.push(b'B');
                out.extend_from_slice(b.as_ref());
            }
            _ => out.push(b'?'),
        }
    }
    out
}

/// Short human-readable form of a key for messages and logs: `table{pk=S:a, sk=N:1}`.
pub fn key_display(table: &str, key: &Item) -> String {
    let sorted: BTreeMap<&String, &AttributeValue> = key.iter().collect();
    let parts: Vec<String> = sorted
        .into_iter()
        .map(|(k, v)| match v {
            AttributeValue::S(s) => format!("{k}={s}"),
            AttributeValue::N(n) => format!("{k}={n}"),
            other => format!("{k}={}", to_json(other)),
        })
        .collect();
    format!("{table}{{{}}}", parts.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn one_number_written_two_ways_is_one_key() {
        let names = vec!["pk".to_string()];
        let a = item_from_json(&json!({"pk": {"N": "2"}})).unwrap();
        let b = item_from_json(&json!({"pk": {"N": "2.00"}})).unwrap();
        assert_eq!(key_order("t", &a, &names), key_order("t", &b, &names));
        let c = item_from_json(&json!({"pk": {"N": "20"}})).unwrap();
        assert_ne!(key_order("t", &a, &names), key_order("t", &c, &names));
    }

    #[test]
    fn key_order_separates_types() {
        let names = vec!["pk".to_string()];
        let a = item_from_json(&json!({"pk": {"S": "1"}})).unwrap();
        let b = item_from_json(&json!({"pk": {"N": "1"}})).unwrap();
        assert_ne!(key_order("t", &a, &names), key_order("t", &b, &names));
    }
}
