//! Talking to AWS: the store (every DynamoDB call, its caches, its meter and its clients), how many writes a process
//! keeps in flight (pacing and lanes), the SDK's request types as the model's, the log of calls for the permission
//! simulation, and the transactions table created from code. Nothing here knows a transaction's records or steps.
//!
//! May use: the crate root, model.

pub mod call_log;
pub mod lanes;
pub mod pace;
pub mod sdk;
pub mod store;
pub mod tables;
