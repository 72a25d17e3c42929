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
//!   takes the SDK's `TransactWriteItem`s ([`TransactWriteItems`]), [`Coordinator::run`] the same request in DynamoDB
//!   JSON (what the CLI, the API and the state machine take).
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
//! A transaction's state lives in DynamoDB, in a transactions table: a header (`protocol::records`) (the state,
//! `PENDING` -> `COMMITTED` | `ROLLED_BACK`, a version bumped by every write, one progress watermark per phase, the
//! protocol), a plan (batch boundaries) and the request itself in pages (each batch deflated,
//! `protocol::stored_request`): the redo log. Any number of coordinators may work on one transaction at once; every
//! phase (`protocol::phase`) is idempotent and safe to run late:
//!
//! 1. **begin** (`protocol::phase::begin`) validates everything (`model::request`), sorts the actions into one global
//!    lock order and cuts them into batches (`model::plan`), and writes the records. Nothing else is written for a bad
//!    request.
//! 2. **lock** (`protocol::phase::lock`) takes the parent lock (when a `Parent` is given) and then each item's lock, a
//!    run of up to 20 batches at once, in the same conditional write that evaluates the caller's condition on the item
//!    as it was. The write returns that item, and each update is evaluated on it (`eval`): one DynamoDB would refuse
//!    decides `ROLLED_BACK` with `ValidationError` on its action. A missing item is created to hold its lock and marked
//!    transient; so is a tombstone, which the lock item keeps and a condition sees as absent. Each lock carries the id
//!    of the write that took it (`model::item_attrs::LockId`), recorded with its batch, and lock writes are sent once,
//!    so a lock write that lands late never carries an id apply trusts.
//! 3. **save** (`protocol::phase::save`) is the barrier before the commit: every batch locked by this attempt. The
//!    items that replace others (each `Put`, each tombstone) were checked by begin, from the request, against the size
//!    limit and the table's index key types; nothing has been written but locks, so nothing is copied.
//! 4. **commit** (`protocol::phase::commit`) is one conditional header write, `PENDING` -> `COMMITTED`: the commit
//!    point.
//! 5. **apply** (`protocol::phase::apply`) writes each item once, a run of batches at once: the caller's write and the
//!    unlock together, conditioned on the lock its batch was recorded with, so a missing lock means "applied" and
//!    nothing happens twice.
//! 6. **complete** (`protocol::phase::complete`) records the items done.
//! 7. **rollback** (`protocol::phase::rollback`) decides `ROLLED_BACK` if still pending and lets go of every lock,
//!    deleting every transient item (putting back a tombstone it kept).
//! 8. **release** (`protocol::phase::release`) lets go of the parent and marks the header finished (TTL then removes
//!    it).
//! 9. **revisit** (`protocol::phase::revisit`): a transaction that ended while a write of it may have been in flight (a
//!    driver killed or timed out, a lock pass overtaken, an answer lost) is read again once no such write can land
//!    ([`Config::revisit_after`](config::Config::revisit_after)), and any lock of it is removed; every request has an
//!    attempt and an operation timeout, which bound how late one can land.
//!
//! Reads at the committed level ([`read`]) see a locked item as it was until its transaction commits, and after that
//! as its action leaves it (evaluated, or applied by the reader first: [`config::CommittedReads`]). A transaction
//! begun before this protocol (protocol 1, no `protocol` on its header) finishes its own way: save copies each item,
//! apply writes each batch in a fenced `TransactWriteItems` call before the commit, complete unlocks, and rollback
//! restores the copies.
//!
//! A request one `TransactWriteItems` call can carry (fewer than 100 actions, nothing beyond native) skips all of
//! this: `protocol::one_call` sends it in that call, each action conditioned on its item being neither locked nor a
//! tombstone, with the header written already finished; an item another transaction holds sends it down the
//! protocol instead. Drivers call `protocol::phase::begin::submit` (or `submit_here` when they then run the steps
//! themselves), which chooses.
//!
//! `protocol::phase::resume` reads a header and names the next step, which is how any coordinator picks a transaction
//! up. [`coordinator::Coordinator`] drives a whole transaction in-process; the Step Functions state machine drives the
//! same phases through one Lambda each. Contention between transactions is resolved by age (wound-wait): see
//! `drivers::driver`.
//!
//! ## Where things live
//!
//! The crate root holds the configuration ([`config`]), the errors ([`error`]) and `constants` (every attribute name,
//! record key, limit and environment variable). The rest is four layers, each a folder that uses only the root and
//! the layers listed before it (its `mod.rs` says which; a test of the crate fails on an import that goes the other
//! way):
//!
//! - `model`: what the protocol's data are, with no call to AWS: DynamoDB values (`value`), dynamo-saga's attributes
//!   on items (`item_attrs`), the request and its validation (`request`), a table's schema (`schema`), lock order and
//!   batches (`plan`), and the capacity DynamoDB bills (`billing`).
//! - `dynamo`: talking to AWS: every DynamoDB call (`store`), writes in flight (`pace`, `lanes`), the SDK's types as
//!   the request ([`sdk`]), the log of AWS calls for the permission simulation (`call_log`), and the transactions
//!   table created from code ([`tables`]).
//! - `protocol`: the transaction's records (`records`), the phases (`phase`), the `Parent` lock (`parent`), letting go
//!   of a lock (`unlock`), the stored request (`stored_request`), shares of a fanned-out step (`shares`), DynamoDB's
//!   verdict on writes asked without writing (`judge`), the one-call path (`one_call`) and each finished
//!   transaction's metrics line (`metrics`).
//! - `drivers`: what runs the steps: in process ([`coordinator`], on the step dispatcher and wound-wait of `driver`),
//!   the Lambdas' contract with the state machine (`lambda`), the staging API (`staging`) and its callers'
//!   entitlements (`entitlements`), starting an execution ([`start`]), the sweeper (`sweeper`), the [`audit`], reads
//!   while transactions run ([`read`]) and a transaction's [`status`].
//!
//! The expression engine is a crate of its own, `dynamo-saga-expressions` (`expr` parses condition and update
//! expressions, `eval` evaluates updates as DynamoDB would).

pub mod config;
pub mod error;

// Every attribute name, record key, limit and environment variable: public with the `internals` feature, private
// otherwise. Declared with two plain `mod` lines (not a macro, which rustfmt would not look inside).
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod constants;
#[cfg(not(feature = "internals"))]
mod constants;

// The layers, from the bottom up. Each is private; what the library promises is re-exported below. With the
// `internals` feature (dynamo-saga's own Lambda functions, CLI, tests and benchmarks) every module of every layer is
// public at the crate root too, without a stability promise.
mod drivers;
mod dynamo;
mod model;
mod protocol;

#[cfg(feature = "internals")]
#[doc(hidden)]
pub use {drivers::*, dynamo::*, model::*, protocol::*};

// The expression engine, its own crate (`dynamo-saga-expressions`), under the names dynamo-saga's own tests use.
#[cfg(feature = "internals")]
#[doc(hidden)]
pub use dynamo_saga_expressions::{eval, expr};

pub use drivers::{audit, coordinator, read, snapshot, start, status};
pub use dynamo::{sdk, tables};

pub use config::Config;
pub use coordinator::{Committed, Coordinator, TransactGetItems, TransactWriteItems};
pub use dynamo::store::{Meter, Store, Usage};
pub use error::{Cancellation, CancellationReason, TxError};
pub use protocol::phase::revisit::Revisit;
pub use protocol::phase::{Outcome, Report};
pub use protocol::records::{Attempt, Header, Refusal, TxState};
