//! DynamoDB's expressions and value rules, offline: what DynamoDB would answer to a write, known before it is sent.
//!
//! - [`expr`]: a parser for condition, update and projection expressions, with the grammar and the limits DynamoDB
//!   documents (reserved words, placeholders, overlapping paths, 4 KB), reporting what each expression refers to.
//! - [`eval`]: an evaluator of update expressions: whether DynamoDB accepts an `UpdateItem` on an item as it is, and
//!   exactly the item it stores, or the `ValidationException` it raises.
//! - [`value`]: DynamoDB JSON to and from the SDK's `AttributeValue`, DynamoDB's rules for values, and item sizes.
//!
//! ```
//! use dynamo_saga_expressions::{eval, expr, value};
//! use serde_json::json;
//!
//! let item = value::item_from_json(&json!({"pk": {"S": "a"}, "n": {"N": "1"}})).unwrap();
//! let key = value::item_from_json(&json!({"pk": {"S": "a"}})).unwrap();
//! let update = expr::parse_update("SET n = n + :one").unwrap();
//! assert!(update.refs.value_placeholders.contains(":one"));
//! let values = value::item_from_json(&json!({":one": {"N": "2"}})).unwrap();
//! let keys = eval::KeyTypes { key: vec![("pk".into(), 'S')], index_keys: vec![] };
//! let names = Default::default();
//! let after = eval::apply_update(Some(&item), &key, "SET n = n + :one", &names, &values, &keys).unwrap();
//! assert_eq!(value::item_to_json(&after)["n"], json!({"N": "3"}));
//!
//! // What DynamoDB would refuse, refused here with its message.
//! let text = json!({":one": {"S": "x"}});
//! let values = value::item_from_json(&text).unwrap();
//! let e = eval::apply_update(Some(&item), &key, "SET n = n + :one", &names, &values, &keys).unwrap_err();
//! assert!(e.to_string().contains("Incorrect operand type"), "{e}");
//! ```
//!
//! Where DynamoDB's documentation and DynamoDB Local differ, the evaluator follows DynamoDB Local and says so in
//! [`eval`]'s documentation.

pub mod eval;
pub mod expr;
pub mod value;

/// The README's example, compiled and run as a test.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeExample;
