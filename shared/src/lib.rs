//! # dynamo-saga
//!
//! DynamoDB's `TransactWriteItems` without the 100-action limit: the same actions, any number of `Put`, `Update`,
//! `Delete` and `ConditionCheck`, all-or-nothing, and on failure the reasons in the shape of DynamoDB's own
//! `TransactionCanceledException`.
//!
//! ```no_run
//! use aws_sdk_dynamodb::types::{AttributeValue, Put, TransactWriteItem};
//! use dynamo_saga::{Config, Coordinator, Store, TxError};
//!
//! # async fn example() -> Result<(), TxError> {
//! // The transactions table (template.yaml's TransactionsTable), and the tables transactions may write.
//! let config = Config::new("saga-transactions").with_allowed_tables(["Orders"]);
//! let saga = Coordinator::new(Store::connect(config).await);
//!
//! // 500 puts: five times what one TransactWriteItems call takes, built with the SDK's own types.
//! let mut tx = saga.transact_write_items().client_request_token("import-2026-11-25");
//! for i in 0..500 {
//!     let put = Put::builder()
//!         .table_name("Orders")
//!         .item("pk", AttributeValue::S(format!("order-{i}")))
//!         .item("status", AttributeValue::S("NEW".into()))
//!         .condition_expression("attribute_not_exists(pk)")
//!         .build()
//!         .expect("table and item are set");
//!     tx = tx.transact_items(TransactWriteItem::builder().put(put).build());
//! }
//! match tx.send().await {
//!     Ok(committed) => println!("{} committed", committed.transaction_id),
//!     // The reasons as DynamoDB gives them: one per action, in request order.
//!     Err(TxError::Canceled(c)) => {
//!         for (i, reason) in c.to_sdk().cancellation_reasons().iter().enumerate() {
//!             if reason.code() == Some("ConditionalCheckFailed") {
//!                 println!("order-{i} exists already");
//!             }
//!         }
//!     }
//!     Err(e) => return Err(e),
//! }
//! # Ok(())
//! # }
//! ```
//!
//! ## The API
//!
//! - [`Coordinator`] runs a transaction in-process, from its request to its end: [`Coordinator::transact_write_items`]
//!   takes the SDK's `TransactWriteItem`s ([`TransactWriteItems`]), [`Coordinator::run`] the same request in DynamoDB JSON (what the
//!   CLI, the API and the state machine take).
//! - [`Config`] and [`Store`]: the transactions table, the tables transactions may write, limits ([`config`]).
//! - [`TxError`] ([`error`]): stable error names; a cancellation ([`Cancellation`]) names each action's reason and
//!   turns into the SDK's `TransactionCanceledException` ([`Cancellation::to_sdk`]).
//! - [`read`]: reads at the uncommitted and committed isolation levels, read locks, and a condition for writers
//!   outside the protocol.
//! - [`status`]: what a transaction is doing; [`start`]: validating, beginning and starting a transaction's execution
//!   of a deployed state machine in one call.
//!
//! Everything else (the phases, the records, the evaluator, the Lambdas' contract) is the protocol's own: public only
//! with the `internals` feature, which dynamo-saga's Lambda functions, CLI and tests use, and without a stability
//! promise.
//!
//! ## The protocol in one page
//!
//! A transaction's state lives in DynamoDB, in a transactions table: a header (`records`) (the state, `PENDING` ->
//! `COMMITTED` | `ROLLED_BACK`, a version bumped by every write, one progress watermark per phase, the protocol), a
//! plan (batch boundaries) and the request itself in pages (each batch deflated, `stored`): the redo log. Any number of
//! coordinators may work on one transaction at once; every phase (`phase`) is idempotent and safe to run late:
//!
//! 1. **begin** (`phase::begin`) validates everything (`request`), sorts the actions into one global lock order
//!    and cuts them into batches (`plan`), and writes the records. Nothing else is written for a bad request.
//! 2. **lock** (`phase::lock`) takes the parent lock (when a `Parent` is given) and then each item's lock, a run of up
//!    to 20 batches at once, in the same conditional write that evaluates the caller's condition on the item as it
//!    was. The write returns that item, and each update is evaluated on it (`eval`): one DynamoDB would refuse
//!    decides `ROLLED_BACK` with `ValidationError` on its action. A missing item is created to hold its lock and
//!    marked transient; so is a tombstone, which the lock item keeps and a condition sees as absent. Each lock carries
//!    the id of the write that took it (`items::LockId`), recorded with its batch, and lock writes are sent once, so a
//!    lock write that lands late never carries an id apply trusts.
//! 3. **save** (`phase::save`) is the barrier before the commit: every batch locked by this attempt. The items that
//!    replace others (each `Put`, each tombstone) were checked by begin, from the request, against the size limit and
//!    the table's index key types; nothing has been written but locks, so nothing is copied.
//! 4. **commit** (`phase::commit`) is one conditional header write, `PENDING` -> `COMMITTED`: the commit point.
//! 5. **apply** (`phase::apply`) writes each item once, a run of batches at once: the caller's write and the unlock
//!    together, conditioned on the lock its batch was recorded with, so a missing lock means "applied" and nothing
//!    happens twice.
//! 6. **complete** (`phase::complete`) records the items done.
//! 7. **rollback** (`phase::rollback`) decides `ROLLED_BACK` if still pending and lets go of every lock, deleting
//!    every transient item (putting back a tombstone it kept).
//! 8. **release** (`phase::release`) lets go of the parent and marks the header finished (TTL then removes it).
//! 9. **revisit** (`phase::revisit`): a transaction that ended while a write of it may have been in flight (a driver
//!    killed or timed out, a lock pass overtaken, an answer lost) is read again once no such write can land
//!    ([`Config::revisit_after`](config::Config::revisit_after)), and any lock of it is removed; every request has an
//!    attempt and an operation timeout, which bound how late one can land.
//!
//! Reads at the committed level ([`read`]) see a locked item as it was until its transaction commits, and after that
//! as its action leaves it (evaluated, or applied by the reader first: [`config::CommittedReads`]). A transaction begun before this protocol (protocol 1, no `protocol` on its
//! header) finishes its own way: save copies each item, apply writes each batch in a fenced `TransactWriteItems`
//! call before the commit, complete unlocks, and rollback restores the copies.
//!
//! A request one `TransactWriteItems` call can carry (fewer than 100 actions, nothing beyond native) skips all of
//! this: `direct` sends it in that call, each action conditioned on its item being neither locked nor a
//! tombstone, with the header written already finished; an item another transaction holds sends it down the
//! protocol instead. Drivers call `phase::begin::submit` (or `submit_here` when they then run the steps themselves),
//! which chooses.
//!
//! `phase::resume` reads a header and names the next step, which is how any coordinator picks a transaction up.
//! [`coordinator::Coordinator`] drives a whole transaction in-process; the Step Functions state machine drives the
//! same phases through one Lambda each. Contention between transactions is resolved by age (wound-wait): see
//! `drive`.
//!
//! ## Where things live
//!
//! - [`coordinator`]: the in-process driver and its builder; [`sdk`]: the SDK's types as DynamoDB JSON, and a
//!   cancellation as the SDK's exception.
//! - `direct`: a request that fits one `TransactWriteItems` call, carried out in that call.
//! - `parent`: the `Parent` lock: its queue of waiting transactions, its lease and its release.
//! - `share`: a lock, apply or rollback step dealt into shares that several invocations write side by side.
//! - `drive`: running a transaction's steps and resolving the contention they meet (wound-wait), for the coordinator,
//!   read locks, the sweeper and the Lambdas' contract (`step`).
//! - `step`, `stage`, `sweeper`, `entitle`: the phase Lambdas' contract with the state machine, the staging API, the
//!   sweeper, and which callers of a shared stack may name which tables.
//! - `constants`: every attribute name, record key, limit and environment variable.
//! - [`error`]: [`error::TxError`] with stable names (`ValidationError`, `TransactionCanceled`, `Contended`, ...).
//! - `records`: the transaction's header, its model and its writes.
//! - `stored`: the stored request (plan, request pages, item images), written once and then only read.
//! - `items`: dynamo-saga's attributes on the callers' items (locks, flags, a parent lock).
//! - `value`: DynamoDB JSON, item sizes and attribute-value helpers (of the `dynamo-saga-expressions` crate), the
//!   lock-order key and the clock.
//! - `expr`, `eval`: the `dynamo-saga-expressions` crate's parser of condition and update expressions (bad ones are
//!   rejected before any write) and evaluator of updates (whether DynamoDB accepts one, and the item it stores).
//! - `judge`: DynamoDB's own verdict on writes, asked without writing.
//! - `lanes`: many writes with a bound on how many are in flight, in fixed lanes.
//! - `pace`: how many DynamoDB writes a process keeps in flight, halved when DynamoDB throttles.
//! - `store`: every DynamoDB call; its caches, its meter, and (with the `test-hooks` feature) injected crashes and a
//!   bill by DynamoDB's rules, each a type of its own.
//! - [`read`]: reads at the uncommitted and committed isolation levels, and a condition for writers outside the
//!   protocol.
//! - [`start`]: validating, beginning and starting a transaction's execution in one call (the API's `POST
//!   /transactions`).
//! - [`status`]: what a transaction is doing, for the status API and the CLI.
//! - `metrics`: each finished transaction as one CloudWatch Embedded Metric Format line (the Release function's, or
//!   for a request carried out in one call, its driver's).
//! - `calls`: the AWS calls a process makes, as IAM sees them, for the permission simulation.
//! - `billing`: the capacity DynamoDB bills for a call, by its documented rules (for the benchmark).
//! - [`audit`]: a whole-table scan for what transactions that have ended left on a table, and its removal.

pub mod audit;
pub mod config;
pub mod coordinator;
pub mod error;
pub mod read;
pub mod sdk;
pub mod start;
pub mod status;

// The protocol's own modules: public with the `internals` feature, for dynamo-saga's own Lambda functions, CLI, tests
// and benchmarks, and private to the crate otherwise. They carry no stability promise. Each is declared with a plain
// `mod` line (twice, once per feature setting) so that rustfmt, which does not look inside macros, formats it.
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod billing;
#[cfg(not(feature = "internals"))]
mod billing;
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod calls;
#[cfg(not(feature = "internals"))]
mod calls;
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod constants;
#[cfg(not(feature = "internals"))]
mod constants;
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod direct;
#[cfg(not(feature = "internals"))]
mod direct;
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod drive;
#[cfg(not(feature = "internals"))]
mod drive;
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod items;
#[cfg(not(feature = "internals"))]
mod items;
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod judge;
#[cfg(not(feature = "internals"))]
mod judge;
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod lanes;
#[cfg(not(feature = "internals"))]
mod lanes;
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod metrics;
#[cfg(not(feature = "internals"))]
mod metrics;
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod pace;
#[cfg(not(feature = "internals"))]
mod pace;
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod parent;
#[cfg(not(feature = "internals"))]
mod parent;
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod phase;
#[cfg(not(feature = "internals"))]
mod phase;
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod plan;
#[cfg(not(feature = "internals"))]
mod plan;
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod records;
#[cfg(not(feature = "internals"))]
mod records;
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod request;
#[cfg(not(feature = "internals"))]
mod request;
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod schema;
#[cfg(not(feature = "internals"))]
mod schema;
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod share;
#[cfg(not(feature = "internals"))]
mod share;
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod store;
#[cfg(not(feature = "internals"))]
mod store;
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod stored;
#[cfg(not(feature = "internals"))]
mod stored;
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod unlock;
#[cfg(not(feature = "internals"))]
mod unlock;
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod value;
#[cfg(not(feature = "internals"))]
mod value;

// The expression engine, its own crate (`dynamo-saga-expressions`), under the names dynamo-saga's own tests use.
#[cfg(feature = "internals")]
#[doc(hidden)]
pub use dynamo_saga_expressions::{eval, expr};

/// The Lambda functions' and the CLI's drivers (the state machine's Task contract, the staging API, the sweeper, the
/// callers' entitlements): only with the `internals` feature, since nothing else in the library uses them.
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod entitle;
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod stage;
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod step;
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod sweeper;

pub use config::Config;
pub use coordinator::{Committed, Coordinator, TransactWriteItems};
pub use error::{Cancellation, CancellationReason, TxError};
pub use phase::revisit::Revisit;
pub use phase::{Outcome, Report};
pub use records::{Attempt, Header, Refusal, TxState};

pub use store::{Meter, Store, Usage};
