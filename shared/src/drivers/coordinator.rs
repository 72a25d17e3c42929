//! The in-process driver: runs a whole transaction through the same phase functions the Lambdas run, for Rust
//! services that do not use Step Functions (the role the Java dynamodb-transactions library's TransactionManager
//! plays). It is also how the sweeper and tests finish a transaction somebody else started. Running every step itself,
//! it saves round trips the Lambdas cannot: each step starts from the header the last one wrote, begin claims the
//! first lock pass for it, and steps that only write the header go in one write (`driver::run_joined`).
//!
//! Contention between transactions is resolved by age (wound-wait: `drive`): the older transaction wins, a
//! younger holder is rolled back and tries again as the same transaction, and a wait longer than `LockWaitSeconds`
//! or past the deadline cancels with `TransactionConflict` naming the holder.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::{AttributeValue, TransactGetItem, TransactWriteItem};
use serde_json::{json, Map, Value};

pub use crate::drivers::driver::Committed;
use crate::drivers::driver::Driver;
use crate::dynamo::store::Store;
use crate::error::TxError;
use crate::model::request::Request;
use crate::model::value;
use crate::protocol::records::Header;

/// Runs transactions in-process, each from its request (or its id) to its end.
#[derive(Debug, Clone)]
pub struct Coordinator {
    driver: Driver,
}

impl Coordinator {
    pub fn new(store: Store) -> Self {
        Self { driver: Driver::new(store) }
    }

    pub fn store(&self) -> &Store {
        self.driver.store()
    }

    /// Runs a whole transaction: submit it (a request one `TransactWriteItems` call can carry is carried out in that
    /// call), or begin it and drive it to its end, starting another attempt whenever one is rolled back by another
    /// transaction's need. Errors with `TransactionCanceled` (and the reasons) when it rolled back: by its own
    /// conditions, a wait past `LockWaitSeconds`, or the deadline.
    pub async fn run(&self, body: &Value) -> Result<Committed, TxError> {
        self.driver.run(body).await
    }

    /// Drives an existing transaction from wherever it stopped to its end, as its driver: an attempt rolled back by
    /// another transaction's need is followed by another.
    pub async fn drive(&self, tx_id: &str) -> Result<Committed, TxError> {
        self.driver.drive(tx_id).await
    }

    /// Rolls a transaction back unless it has committed (no other attempt follows), and drives it to its end.
    pub async fn cancel(&self, tx_id: &str, why: &str) -> Result<(), TxError> {
        self.driver.cancel(tx_id, why).await
    }

    /// Visits a finished transaction again for writes of it that may have landed after its end, once that is due
    /// ([`crate::Config::revisit_after`] after it finished), and removes what of it remains: the sweeper does this on
    /// its schedule for every such transaction; this is the same visit for one, on demand.
    pub async fn revisit(&self, tx_id: &str) -> Result<crate::protocol::phase::revisit::Revisit, TxError> {
        crate::protocol::phase::revisit::revisit(self.driver.store(), tx_id).await
    }

    /// Drives a pending transaction until every item is locked, meeting other transactions' locks as
    /// [`Coordinator::drive`] does; it then holds every lock and has changed nothing. Errors with
    /// `TransactionCanceled` when it was rolled back instead, after finishing that rollback.
    pub async fn drive_locks(&self, tx_id: &str) -> Result<Header, TxError> {
        self.driver.drive_locks(tx_id).await
    }

    /// A snapshot read of any number of the SDK's `TransactGetItem`s, built as `client.transact_get_items()` builds
    /// one: every item as committed at one instant ([`crate::snapshot`]).
    ///
    /// ```no_run
    /// # async fn example(saga: dynamo_saga::Coordinator) -> Result<(), dynamo_saga::TxError> {
    /// use aws_sdk_dynamodb::types::{AttributeValue, Get, TransactGetItem};
    ///
    /// let mut read = saga.transact_get_items();
    /// for i in 0..1000 {
    ///     let get = Get::builder()
    ///         .table_name("Accounts")
    ///         .key("pk", AttributeValue::S(format!("account-{i}")))
    ///         .build()
    ///         .expect("table and key are set");
    ///     read = read.transact_items(TransactGetItem::builder().get(get).build());
    /// }
    /// let snapshot = read.send().await?;
    /// let total: i64 = snapshot
    ///     .responses
    ///     .iter()
    ///     .flatten()
    ///     .filter_map(|item| item.get("balance")?.as_n().ok()?.parse::<i64>().ok())
    ///     .sum();
    /// println!("{total} in {} accounts, read in {} passes", snapshot.responses.len(), snapshot.passes);
    /// # Ok(())
    /// # }
    /// ```
    pub fn transact_get_items(&self) -> TransactGetItems<'_> {
        TransactGetItems { coordinator: self, items: Vec::new() }
    }

    /// A transaction of any number of the SDK's `TransactWriteItem`s, built as `client.transact_write_items()` builds
    /// one:
    ///
    /// ```no_run
    /// # async fn example(saga: dynamo_saga::Coordinator) -> Result<(), dynamo_saga::TxError> {
    /// use aws_sdk_dynamodb::types::{AttributeValue, TransactWriteItem, Update};
    ///
    /// let mut tx = saga.transact_write_items().client_request_token("order-1001");
    /// for i in 0..250 {
    ///     let update = Update::builder()
    ///         .table_name("Inventory")
    ///         .key("pk", AttributeValue::S(format!("widget-{i}")))
    ///         .update_expression("SET #s = :sold")
    ///         .condition_expression("#s = :available")
    ///         .expression_attribute_names("#s", "status")
    ///         .expression_attribute_values(":sold", AttributeValue::S("SOLD".into()))
    ///         .expression_attribute_values(":available", AttributeValue::S("AVAILABLE".into()))
    ///         .build()
    ///         .expect("table, key and update expression are set");
    ///     tx = tx.transact_items(TransactWriteItem::builder().update(update).build());
    /// }
    /// let committed = tx.send().await?;
    /// println!("{} committed {} actions", committed.transaction_id, committed.actions);
    /// # Ok(())
    /// # }
    /// ```
    pub fn transact_write_items(&self) -> TransactWriteItems<'_> {
        TransactWriteItems {
            coordinator: self,
            items: Vec::new(),
            token: None,
            parent: None,
            lock_wait_seconds: None,
            deadline_seconds: None,
        }
    }
}

/// A snapshot read being built, as `client.transact_get_items()` builds one; [`TransactGetItems::send`] reads it.
/// Made by [`Coordinator::transact_get_items`].
#[derive(Debug, Clone)]
pub struct TransactGetItems<'a> {
    coordinator: &'a Coordinator,
    items: Vec<TransactGetItem>,
}

impl TransactGetItems<'_> {
    /// Appends one `Get`, as the SDK's `transact_items` does.
    pub fn transact_items(mut self, item: TransactGetItem) -> Self {
        self.items.push(item);
        self
    }

    /// Replaces the `Get`s, as the SDK's `set_transact_items` does.
    pub fn set_transact_items(mut self, items: Option<Vec<TransactGetItem>>) -> Self {
        self.items = items.unwrap_or_default();
        self
    }

    /// Reads every item as one snapshot. A bad request is refused with `ValidationError` before anything is read;
    /// items that kept changing cancel it with `TransactionConflict` ([`crate::snapshot`]).
    pub async fn send(self) -> Result<crate::drivers::snapshot::Snapshot, TxError> {
        crate::drivers::snapshot::transact_get_items_sdk(self.coordinator.store(), &self.items).await
    }
}

/// A transaction being built, as `client.transact_write_items()` builds one; [`TransactWriteItems::send`] runs it
/// through [`Coordinator::run`]. Made by [`Coordinator::transact_write_items`].
#[derive(Debug, Clone)]
pub struct TransactWriteItems<'a> {
    coordinator: &'a Coordinator,
    items: Vec<TransactWriteItem>,
    token: Option<String>,
    parent: Option<(String, HashMap<String, AttributeValue>)>,
    lock_wait_seconds: Option<Option<u64>>,
    deadline_seconds: Option<u64>,
}

impl<'a> TransactWriteItems<'a> {
    /// Appends one action, as the SDK's `transact_items` does.
    pub fn transact_items(mut self, item: TransactWriteItem) -> Self {
        self.items.push(item);
        self
    }

    /// Replaces the actions, as the SDK's `set_transact_items` does.
    pub fn set_transact_items(mut self, items: Option<Vec<TransactWriteItem>>) -> Self {
        self.items = items.unwrap_or_default();
        self
    }

    /// The idempotency token: the same token and request run once, as with DynamoDB's `ClientRequestToken` (which
    /// DynamoDB keeps 10 minutes; dynamo-saga keeps it as long as the transaction's records).
    pub fn client_request_token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }

    /// The `Parent` item: transactions naming the same parent run one at a time, in the order they arrive.
    pub fn parent(mut self, table_name: impl Into<String>, key: HashMap<String, AttributeValue>) -> Self {
        self.parent = Some((table_name.into(), key));
        self
    }

    /// `Options.LockWaitSeconds`: how long to wait for another transaction's lock before cancelling with
    /// `TransactionConflict`; `None` waits until the deadline.
    pub fn lock_wait_seconds(mut self, seconds: Option<u64>) -> Self {
        self.lock_wait_seconds = Some(seconds);
        self
    }

    /// `Options.DeadlineSeconds`: a transaction still pending this long after it began is rolled back.
    pub fn deadline_seconds(mut self, seconds: u64) -> Self {
        self.deadline_seconds = Some(seconds);
        self
    }

    /// The request in DynamoDB JSON, as the CLI, the API and the state machine take it. Errors with
    /// `ValidationError` naming the action when an item sets no action, or more than one.
    pub fn to_request(&self) -> Result<Value, TxError> {
        let items = self
            .items
            .iter()
            .enumerate()
            .map(|(i, item)| crate::dynamo::sdk::action_json(item).map_err(|m| TxError::invalid(Some(i), m)));
        let mut request = Map::new();
        request.insert("TransactItems".into(), Value::Array(items.collect::<Result<_, _>>()?));
        if let Some(token) = &self.token {
            request.insert("ClientRequestToken".into(), Value::String(token.clone()));
        }
        if let Some((table, key)) = &self.parent {
            request.insert("Parent".into(), json!({"TableName": table, "Key": value::item_to_json(key)}));
        }
        let mut options = Map::new();
        if let Some(wait) = self.lock_wait_seconds {
            options.insert("LockWaitSeconds".into(), wait.map_or(Value::Null, Value::from));
        }
        if let Some(deadline) = self.deadline_seconds {
            options.insert("DeadlineSeconds".into(), Value::from(deadline));
        }
        if !options.is_empty() {
            request.insert("Options".into(), Value::Object(options));
        }
        Ok(Value::Object(request))
    }

    /// Runs the transaction to its end ([`Coordinator::run`]), typed as it was built: its values are checked as the
    /// JSON edge checks them, with no JSON in between. A cancellation is `TxError::Canceled`, whose
    /// [`crate::Cancellation::to_sdk`] is the SDK's `TransactionCanceledException`.
    pub async fn send(self) -> Result<Committed, TxError> {
        let cfg = &self.coordinator.store().cfg;
        let request = crate::dynamo::sdk::parse(
            &self.items,
            self.token.as_deref(),
            self.parent.as_ref(),
            self.lock_wait_seconds,
            self.deadline_seconds,
            cfg,
        )?;
        self.coordinator.driver.run(Request::Parsed(Box::new(request))).await
    }
}
