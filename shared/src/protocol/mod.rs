//! The protocol: a transaction's records and the writes that move it, one phase a module (lock, save, commit, apply,
//! complete, rollback, release, revisit), the parent lock, letting go of an item's lock, the stored request (the redo
//! log), shares of a fanned-out step, DynamoDB as the judge of writes, and the one-call path for a request one
//! `TransactWriteItems` call can carry. Each function here runs one step once and is safe to run late or twice; what
//! runs the steps in order is a driver's.
//!
//! May use: the crate root, model, dynamo.

pub mod judge;
pub mod metrics;
pub mod one_call;
pub mod parent;
pub mod phase;
pub mod records;
pub mod shares;
pub mod stored_request;
pub mod unlock;
