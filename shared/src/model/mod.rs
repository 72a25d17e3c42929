//! The model: what the protocol's data are, with no call to AWS. DynamoDB values and items, dynamo-saga's attributes
//! on them, a request and its validation, a table's schema, the lock order and batches of a plan, and the capacity
//! DynamoDB bills for an item.
//!
//! May use: the crate root.

pub mod billing;
pub mod item_attrs;
pub mod plan;
pub mod request;
pub mod schema;
pub mod value;
