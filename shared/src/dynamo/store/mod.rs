//! Every DynamoDB call the protocol makes, and what each came to. How its clients are built is in `client`; the
//! writes sent once in `once`; the calls of many items in `batch`; what the store keeps between calls in `caches`;
//! what a phase run used in `meter`; the test hooks (`test-hooks` feature) in `hooks`, over `faults` (injected
//! crashes) and `billed` (a bill by DynamoDB's rules).
//!
//! Throttling is retried by the SDK (standard retry mode, see [`Store::connect`]); what is left after its retries
//! becomes [`TxError::Throttled`] so the caller (the state machine, the coordinator) retries the whole phase.

use std::sync::{Arc, Mutex};

use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::operation::batch_get_item::builders::BatchGetItemFluentBuilder;
use aws_sdk_dynamodb::operation::delete_item::builders::DeleteItemFluentBuilder;
use aws_sdk_dynamodb::operation::put_item::builders::PutItemFluentBuilder;
use aws_sdk_dynamodb::operation::transact_write_items::builders::TransactWriteItemsFluentBuilder;
use aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder;
use aws_sdk_dynamodb::types::{
    ConsumedCapacity, KeysAndAttributes, ReturnConsumedCapacity, ReturnValue, ReturnValuesOnConditionCheckFailure,
};
use aws_sdk_dynamodb::Client;

use crate::config::Config;
use crate::dynamo::pace::Pace;
use crate::error::TxError;
use crate::model::billing::{self, Bill};
use crate::model::schema::TableSchema;
use crate::model::value::{item_size, Item};

mod billed;
mod caches;
mod faults;

mod meter;

use billed::reported;
pub(crate) use caches::Caches;
use faults::Faults;
#[cfg(feature = "test-hooks")]
pub use faults::Pause;
pub use meter::{Meter, Usage};
use once::sent_once;
pub use once::Once;

/// What a conditional single-item write came to.
#[derive(Debug)]
pub enum Written {
    Done(Option<Item>),
    /// The condition failed; the item as it was (when `ALL_OLD` was asked for and the item exists).
    ConditionFailed(Option<Item>),
}

/// What a TransactWriteItems call came to.
#[derive(Debug)]
pub enum Transacted {
    Done,
    /// Cancelled: one reason per action sent (code, message, item).
    Canceled(Vec<(String, Option<String>, Option<Item>)>),
    /// The whole request was rejected (for example an operand of the wrong type).
    Rejected(String),
}

/// What a single-item write came to, before it is metered and billed.
enum Sent {
    Done(Option<Item>, Vec<ConsumedCapacity>),
    ConditionFailed(Option<Item>),
    /// Refused before DynamoDB carried it out (throttled, in the way of a DynamoDB transaction, or never sent: the
    /// connection could not be made or was found closed): safe to send again.
    Refused(TxError),
    /// No answer that says whether it was carried out ([`Once::Unknown`]).
    Unknown(String),
    Failed(TxError),
}

/// What [`Store::single_write`] came to.
enum Answer {
    Known(Written),
    Refused(TxError),
    Unknown(String),
}

impl Answer {
    /// The answer of a write the SDK retries itself, which is never refused or unknown but as an error.
    fn written(self, op: &'static str) -> Result<Written, TxError> {
        match self {
            Answer::Known(w) => Ok(w),
            Answer::Refused(e) => Err(e),
            Answer::Unknown(message) => Err(TxError::DynamoDb { op, message }),
        }
    }
}

/// One conditional single-item write (`UpdateItem`, `PutItem` or `DeleteItem`), asking for the consumed capacity and
/// for the item when the condition fails, which becomes [`Written::ConditionFailed`]. With `once`, the SDK sends it
/// once, without retrying, and the answer says whether DynamoDB may have carried it out ([`Sent::Unknown`]).
macro_rules! single_write {
    // A write sent once is an input builder (one copy of the caller's request per attempt), sent with the client
    // that never retries; any other is the caller's fluent builder itself.
    (@send $store:expr, $req:expr, true) => {
        Box::pin($req.send_with(&$store.once)).await
    };
    (@send $store:expr, $req:expr, false) => {
        Box::pin($req.send()).await
    };
    ($store:expr, $m:expr, $req:expr, $key:expr, $op:literal, $condition_failed:path, $once:tt) => {{
        let table = $req.get_table_name().clone().unwrap_or_default();
        let send = async {
            let req = $req
                .return_consumed_capacity(aws_sdk_dynamodb::types::ReturnConsumedCapacity::Total)
                .return_values_on_condition_check_failure(aws_sdk_dynamodb::types::ReturnValuesOnConditionCheckFailure::AllOld);
            // A write sent once goes through the store's client that never retries, built once: a per-request
            // `config_override` would rebuild the client's runtime plugins for every request.
            // Boxed: the SDK's future is large, and every future that awaits it inline grows by its size and is
            // copied whole each time it moves; on the heap it is allocated once.
            let r = single_write!(@send $store, req, $once);
            match r {
                Ok(o) => Sent::Done(o.attributes, o.consumed_capacity.into_iter().collect()),
                Err(SdkError::ServiceError(se)) if se.err().is_conditional_check_failed_exception() => {
                    match se.into_err() {
                        $condition_failed(c) => Sent::ConditionFailed(c.item),
                        _ => unreachable!("a conditional check failure"),
                    }
                }
                Err(e) if $once => sent_once($op, e),
                Err(e) => Sent::Failed(map_err($op, e)),
            }
        };
        $store.single_write($m, &table, $key, send).await
    }};
}

/// Every DynamoDB call the protocol makes, through one client, with what it keeps between calls ([`Caches`]), its
/// in-flight limit ([`Pace`]), and, for dynamo-saga's own tests and benchmark, an injected crash ([`Faults`]) and a
/// bill by DynamoDB's rules ([`Bill`]). Clones share all of them.
#[derive(Clone)]
pub struct Store {
    pub client: Client,
    /// Where shares of a fanned-out step run besides this process (see [`Workers`]).
    workers: Option<Arc<dyn Workers>>,
    /// Where the end of each transaction a call of this process ends is announced ([`Announce`]), when anywhere.
    announcer: Option<Arc<dyn Announce>>,
    /// When the call this store works for must have its answer ready (a Lambda invocation's deadline less a margin):
    /// a share run in this process stops there ([`crate::protocol::shares`]).
    deadline: Option<std::time::Instant>,
    /// [`Store::client`] with no retries, for the writes sent once.
    once: Client,
    pub cfg: Arc<Config>,
    pub(crate) caches: Arc<Caches>,
    faults: Option<Arc<Faults>>,
    billing: Option<Arc<Mutex<Bill>>>,
    /// How many single-item writes may be in flight at once, adapted to throttling ([`Pace`]).
    pace: Arc<Pace>,
}

/// Where the shares of a step that fans out run when not in this process ([`Config::fan_out`]): in a Lambda function,
/// another invocation of the function itself each (`functions/common`). A share and its result cross as JSON; the
/// protocol decides what they hold (`share`).
pub trait Workers: std::fmt::Debug + Send + Sync {
    /// Runs `share` and gives its result, or the error it ended with.
    fn run(&self, share: serde_json::Value) -> futures::future::BoxFuture<'static, Result<serde_json::Value, TxError>>;
}

/// Where a process announces each transaction it ended (a Lambda function of the stack: one EventBridge event each,
/// `functions/common`). The detail is the drivers' ([`crate::protocol::metrics::end_event`]).
pub trait Announce: std::fmt::Debug + Send + Sync {
    /// Announces one transaction's end; an error is the caller's to log, the transaction's outcome stands.
    fn announce(&self, detail: serde_json::Value) -> futures::future::BoxFuture<'static, Result<(), TxError>>;
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("tx_table", &self.cfg.tx_table).finish()
    }
}

fn map_err<E: ProvideErrorMetadata + std::fmt::Debug, R: std::fmt::Debug>(
    op: &'static str,
    e: SdkError<E, R>,
) -> TxError {
    let code = e.code().unwrap_or("").to_string();
    let message = e.message().map(str::to_owned).unwrap_or_else(|| format!("{e:?}"));
    match code.as_str() {
        "ProvisionedThroughputExceededException" | "ThrottlingException" | "RequestLimitExceeded" => {
            TxError::Throttled(format!("{op}: {message}"))
        }
        "ResourceNotFoundException" => TxError::DynamoDb { op, message: format!("{code}: {message}") },
        "" => TxError::DynamoDb { op, message },
        _ => TxError::DynamoDb { op, message: format!("{code}: {message}") },
    }
}

impl Store {
    /// A copy of this store whose fanned-out steps run their shares by `workers`, all but the first, which this
    /// process runs itself ([`Config::fan_out`]).
    pub fn with_workers(&self, workers: Arc<dyn Workers>) -> Store {
        Store { workers: Some(workers), ..self.clone() }
    }

    /// Where shares run besides this process, when anywhere.
    pub(crate) fn workers(&self) -> Option<&Arc<dyn Workers>> {
        self.workers.as_ref()
    }

    /// A copy of this store that announces the end of each transaction it ends by `announcer`.
    pub fn with_announcer(&self, announcer: Arc<dyn Announce>) -> Store {
        Store { announcer: Some(announcer), ..self.clone() }
    }

    /// Announces that this process ended the transaction whose end event is `detail`, when the store has an
    /// announcer: at most once for each, from the call that ended it. A failure is logged and left: the transaction's
    /// outcome is in its header, which the status reads whatever became of the event.
    pub async fn announce(&self, detail: serde_json::Value) {
        let Some(announcer) = &self.announcer else { return };
        let tx_id = detail["TransactionId"].as_str().unwrap_or_default().to_string();
        if let Err(e) = announcer.announce(detail).await {
            tracing::error!(tx_id, error = %e, "the transaction's end event was not sent");
        }
    }

    /// A copy of this store for one call that must answer by `deadline`: the shares of a step it runs in this process
    /// for want of a worker stop there, and the step records what was done ([`crate::protocol::shares`]).
    pub fn with_deadline(&self, deadline: std::time::Instant) -> Store {
        Store { deadline: Some(deadline), ..self.clone() }
    }

    /// The deadline of the call this store works for ([`Store::with_deadline`]), when it has one.
    pub fn deadline(&self) -> Option<std::time::Instant> {
        self.deadline
    }

    #[cfg(feature = "internals")]
    /// A copy of this store that runs every share in this process: what a worker runs its own share with.
    pub(crate) fn without_workers(&self) -> Store {
        Store { workers: None, ..self.clone() }
    }

    /// The in-flight limit of this store's single-item writes, shared by its clones.
    pub fn pace(&self) -> &Arc<Pace> {
        &self.pace
    }

    fn check_alive(&self) -> Result<(), TxError> {
        self.faults.as_ref().map_or(Ok(()), |f| f.check_alive())
    }

    async fn before_write(&self) -> Result<(), TxError> {
        let Some(f) = &self.faults else { return Ok(()) };
        if let Some(paused) = f.pause() {
            paused.await;
        }
        f.before_write()
    }

    /// The Region of this store's client, when it names one.
    pub fn region(&self) -> Option<&str> {
        self.client.config().region().map(|r| r.as_ref())
    }

    /// The key schema of a table (DescribeTable, once per table per process), when transactions may be driven on it
    /// from here ([`crate::model::schema::Replication::admits`]).
    pub async fn schema(&self, m: &Meter, table: &str) -> Result<Arc<TableSchema>, TxError> {
        let cell = self.caches.schema_cell(table);
        cell.get_or_try_init(|| async { self.describe(m, table).await.map(Arc::new) }).await.cloned()
    }

    /// Checks, once per store, that transactions may be driven on the transactions table from here, as
    /// [`Store::schema`] checks each table a request names ([`crate::model::schema::Replication::admits`]): before any
    /// request reads or writes it. On a global table with multi-Region eventual consistency two Regions could both take
    /// one header's condition, so it is refused unless this Region is the one `SAGA_EVENTUAL_CONSISTENCY_REGION`
    /// names; one with strong consistency needs `SAGA_MULTI_REGION_CONSISTENCY=strong`. One `DescribeTable` a process.
    pub(crate) async fn admitted(&self, m: &Meter, table: &str) -> Result<(), TxError> {
        if table != self.cfg.tx_table {
            return Ok(());
        }
        match self.schema(m, table).await {
            Ok(_) => Ok(()),
            // Not a bad request but a store set up wrong: the error its first read or write would have met.
            Err(TxError::Validation(v)) if v.message.ends_with("does not exist") => Err(TxError::DynamoDb {
                op: "DescribeTable",
                message: format!("ResourceNotFoundException: the transactions table {table:?} does not exist"),
            }),
            Err(e) => Err(e),
        }
    }

    /// Describes a table for [`Store::schema`], keeping its indexes for billing.
    async fn describe(&self, m: &Meter, table: &str) -> Result<TableSchema, TxError> {
        self.check_alive()?;
        let out = self.client.describe_table().table_name(table).send().await;
        m.record(false, &[]);
        let out = match out {
            Ok(o) => o,
            Err(e) if e.code() == Some("ResourceNotFoundException") => {
                return Err(TxError::invalid(None, format!("table {table:?} does not exist")))
            }
            Err(e) => return Err(map_err("DescribeTable", e)),
        };
        let desc = out.table.ok_or_else(|| TxError::Internal(format!("DescribeTable {table} returned no table")))?;
        crate::model::schema::Replication::of(&desc).admits(table, &self.cfg, self.region())?;
        self.caches.keep_indexes(table, crate::model::schema::billed_indexes(&desc));
        TableSchema::of(table, &desc)
    }

    /// A strongly consistent `GetItem`.
    pub async fn get(&self, m: &Meter, table: &str, key: Item) -> Result<Option<Item>, TxError> {
        self.get_with(m, table, key, true).await
    }

    /// `GetItem` of a record that never changes once written (a plan): eventually consistent, at half the price of a
    /// strongly consistent read, and strongly consistent only when that finds nothing (a record written a moment
    /// ago).
    pub async fn get_written(&self, m: &Meter, table: &str, key: Item) -> Result<Option<Item>, TxError> {
        match self.get_with(m, table, key.clone(), false).await? {
            Some(item) => Ok(Some(item)),
            None => self.get_with(m, table, key, true).await,
        }
    }

    async fn get_with(&self, m: &Meter, table: &str, key: Item, consistent: bool) -> Result<Option<Item>, TxError> {
        self.admitted(m, table).await?;
        self.check_alive()?;
        let out = self
            .client
            .get_item()
            .table_name(table)
            .set_key(Some(key))
            .consistent_read(consistent)
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await
            .map_err(|e| map_err("GetItem", e))?;
        let cc: Vec<ConsumedCapacity> = out.consumed_capacity().into_iter().cloned().collect();
        m.record(false, &cc);
        self.charge_read(billing::read_units_as(out.item.as_ref().map_or(0, item_size), consistent), &cc);
        Ok(out.item)
    }

    async fn batch_get_with(
        &self,
        m: &Meter,
        table: &str,
        keys: Vec<Item>,
        consistent: bool,
    ) -> Result<Vec<Item>, TxError> {
        self.admitted(m, table).await?;
        let mut found = Vec::with_capacity(keys.len());
        for chunk in keys.chunks(100) {
            let mut pending = Some(
                KeysAndAttributes::builder()
                    .set_keys(Some(chunk.to_vec()))
                    .consistent_read(consistent)
                    .build()
                    .map_err(|e| TxError::Internal(e.to_string()))?,
            );
            let mut tries = 0u32;
            while let Some(ka) = pending.take() {
                self.check_alive()?;
                let req: BatchGetItemFluentBuilder = self
                    .client
                    .batch_get_item()
                    .request_items(table, ka)
                    .return_consumed_capacity(ReturnConsumedCapacity::Total);
                let asked = ka_len(&req, table);
                let out = req.send().await.map_err(|e| map_err("BatchGetItem", e))?;
                m.record(false, out.consumed_capacity());
                let got = out.responses.clone().and_then(|mut r| r.remove(table)).unwrap_or_default();
                let unprocessed =
                    out.unprocessed_keys.as_ref().and_then(|u| u.get(table)).map_or(0, |k| k.keys().len());
                let missing = asked.saturating_sub(got.len() + unprocessed);
                let units: f64 = got
                    .iter()
                    .chain(std::iter::repeat_n(&Item::new(), missing))
                    .map(|i| billing::read_units_as(item_size(i), consistent))
                    .sum();
                self.charge_read(units, out.consumed_capacity());
                found.extend(got);
                if let Some(mut u) = out.unprocessed_keys {
                    if let Some(ka) = u.remove(table).filter(|k| !k.keys().is_empty()) {
                        tries += 1;
                        backoff(tries).await;
                        pending = Some(ka);
                    }
                }
            }
        }
        Ok(found)
    }

    /// A conditional UpdateItem; a failed condition is an outcome, not an error.
    pub async fn update(&self, m: &Meter, req: UpdateItemFluentBuilder) -> Result<Written, TxError> {
        let key = self.billed_key(req.get_table_name(), req.get_key());
        single_write!(
            self,
            m,
            req,
            key,
            "UpdateItem",
            aws_sdk_dynamodb::operation::update_item::UpdateItemError::ConditionalCheckFailedException,
            false
        )?
        .written("UpdateItem")
    }

    pub async fn put(&self, m: &Meter, req: PutItemFluentBuilder) -> Result<Written, TxError> {
        let key = self.billed_item_key(req.get_table_name(), req.get_item()).await?;
        single_write!(
            self,
            m,
            req,
            key,
            "PutItem",
            aws_sdk_dynamodb::operation::put_item::PutItemError::ConditionalCheckFailedException,
            false
        )?
        .written("PutItem")
    }

    /// Puts `record` into the transactions table unless a record with its key is there already: the "put if absent"
    /// of begin's token claim, a transaction's first header and a staged chunk. With `same`, a record already there
    /// whose `same` attribute equals `record`'s is replaced too (a chunk appended again), and the answer carries the
    /// record as it was, whether replaced (`Written::Done`) or in the way (`Written::ConditionFailed`).
    pub async fn put_record_if_absent(&self, m: &Meter, record: Item, same: Option<&str>) -> Result<Written, TxError> {
        let put = self
            .client
            .put_item()
            .table_name(&self.cfg.tx_table)
            .expression_attribute_names("#id", crate::constants::TX_PK);
        let put = match same {
            None => put.condition_expression("attribute_not_exists(#id)"),
            Some(name) => {
                let value = record
                    .get(name)
                    .cloned()
                    .ok_or_else(|| TxError::Internal(format!("a record put unless another differs has no {name}")))?;
                put.condition_expression("attribute_not_exists(#id) OR #same = :same")
                    .expression_attribute_names("#same", name)
                    .expression_attribute_values(":same", value)
                    .return_values(ReturnValue::AllOld)
                    .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            }
        };
        self.put(m, put.set_item(Some(record))).await
    }

    pub async fn delete(&self, m: &Meter, req: DeleteItemFluentBuilder) -> Result<Written, TxError> {
        let key = self.billed_key(req.get_table_name(), req.get_key());
        single_write!(
            self,
            m,
            req,
            key,
            "DeleteItem",
            aws_sdk_dynamodb::operation::delete_item::DeleteItemError::ConditionalCheckFailedException,
            false
        )?
        .written("DeleteItem")
    }

    /// Sends one single-item write (built by [`single_write!`]), meters it and bills it.
    async fn single_write(
        &self,
        m: &Meter,
        table: &str,
        key: (String, Item),
        send: impl std::future::Future<Output = Sent>,
    ) -> Result<Answer, TxError> {
        self.admitted(m, table).await?;
        self.before_write().await?;
        let keys = [key];
        let before = self.probe(&keys).await?;
        let slot = self.pace.slot().await;
        let sent = send.await;
        drop(slot);
        match sent {
            Sent::Done(attributes, cc) => {
                m.record(true, &cc);
                self.charge_write(&keys, before, true, false, Some(reported(&cc))).await?;
                Ok(Answer::Known(Written::Done(attributes)))
            }
            Sent::ConditionFailed(item) => {
                m.record(true, &[]);
                self.charge_write(&keys, before, false, false, None).await?;
                Ok(Answer::Known(Written::ConditionFailed(item)))
            }
            Sent::Refused(e) => {
                m.record(true, &[]);
                Ok(Answer::Refused(e))
            }
            Sent::Unknown(message) => {
                m.record(true, &[]);
                Ok(Answer::Unknown(message))
            }
            Sent::Failed(e) => {
                m.record(true, &[]);
                Err(e)
            }
        }
    }

    /// TransactWriteItems. Conflicts with another DynamoDB transaction on the same items (`TransactionConflict`) are
    /// retried here a few times; they are DynamoDB's own short-lived isolation, not this protocol's locks.
    /// Never sent where the tables take no such call ([`Config::transactions_allowed`]): every path that would send
    /// one is off there, and this refuses what is left (a transaction begun by protocol 1, whose apply needs it).
    pub async fn transact(&self, m: &Meter, req: TransactWriteItemsFluentBuilder) -> Result<Transacted, TxError> {
        if !self.cfg.transactions_allowed() {
            return Err(TxError::Internal(
                "this needs a TransactWriteItems call, which multi-Region strongly consistent tables do not take \
                 (SAGA_MULTI_REGION_CONSISTENCY=strong); nothing was sent"
                    .into(),
            ));
        }
        self.admitted(m, &self.cfg.tx_table).await?;
        let mut tries = 0u32;
        let keys = self.transact_keys(&req).await?;
        loop {
            self.before_write().await?;
            let before = self.probe(&keys).await?;
            let r = req.clone().return_consumed_capacity(ReturnConsumedCapacity::Total).send().await;
            match r {
                Ok(o) => {
                    m.record(true, o.consumed_capacity());
                    self.charge_write(&keys, before, true, true, None).await?;
                    return Ok(Transacted::Done);
                }
                Err(SdkError::ServiceError(se)) => {
                    m.record(true, &[]);
                    self.charge_write(&keys, before, false, true, None).await?;
                    let code = se.err().code().unwrap_or("").to_string();
                    let msg = se.err().message().unwrap_or("").to_string();
                    match se.into_err() {
                        aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError::TransactionCanceledException(c) => {
                            let reasons: Vec<_> = c
                                .cancellation_reasons
                                .unwrap_or_default()
                                .into_iter()
                                .map(|r| (r.code.unwrap_or_else(|| "None".into()), r.message, r.item))
                                .collect();
                            let conflict = reasons.iter().any(|r| r.0 == "TransactionConflict" || r.0 == "ThrottlingError" || r.0 == "ProvisionedThroughputExceeded");
                            let decided = reasons.iter().any(|r| r.0 == "ConditionalCheckFailed" || r.0 == "ValidationError");
                            if conflict && !decided && tries < 6 {
                                tries += 1;
                                backoff(tries).await;
                                continue;
                            }
                            return Ok(Transacted::Canceled(reasons));
                        }
                        _ if code == "ValidationException" => return Ok(Transacted::Rejected(msg)),
                        _ if code == "TransactionInProgressException" && tries < 6 => {
                            tries += 1;
                            backoff(tries).await;
                            continue;
                        }
                        _ => {
                            return Err(match code.as_str() {
                                "ProvisionedThroughputExceededException" | "ThrottlingException" | "RequestLimitExceeded" => {
                                    TxError::Throttled(format!("TransactWriteItems: {msg}"))
                                }
                                _ => TxError::DynamoDb { op: "TransactWriteItems", message: format!("{code}: {msg}") },
                            })
                        }
                    }
                }
                Err(e) => {
                    m.record(true, &[]);
                    return Err(map_err("TransactWriteItems", e));
                }
            }
        }
    }
}

/// Exponential backoff with full jitter, 25 ms doubling up to about 1.6 s.
pub async fn backoff(attempt: u32) {
    let cap = 25u64 << attempt.min(6);
    let jitter = (ulid::Ulid::new().random() % (cap as u128 + 1)) as u64;
    tokio::time::sleep(std::time::Duration::from_millis(jitter.max(5))).await;
}

// After `single_write!`, which they use.
mod batch;
mod client;
mod hooks;
mod once;

use batch::ka_len;

#[cfg(test)]
mod tests {
    use super::*;

    fn client(timeouts: Option<aws_sdk_dynamodb::config::timeout::TimeoutConfig>) -> Client {
        let conf = aws_sdk_dynamodb::Config::builder()
            .behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest())
            .region(aws_sdk_dynamodb::config::Region::new("us-east-1"));
        Client::from_conf(match timeouts {
            Some(t) => conf.timeout_config(t).build(),
            None => conf.build(),
        })
    }

    #[test]
    fn every_store_bounds_its_requests_in_time_keeping_a_callers_own_bounds() {
        let cfg = Config::new("tx");
        let bounds = |s: &Store| {
            let t = s.client.config().timeout_config().cloned();
            let t = t.unwrap_or_else(aws_sdk_dynamodb::config::timeout::TimeoutConfig::disabled);
            (t.operation_attempt_timeout(), t.operation_timeout())
        };
        let ours = (Some(cfg.attempt_timeout), Some(cfg.operation_timeout));
        assert_eq!(bounds(&Store::new(client(None), cfg.clone())), ours, "a client with none gets the store's");
        assert_eq!(bounds(&Store::from_conf(client(None).config().to_builder(), cfg.clone())), ours);
        let own = aws_sdk_dynamodb::config::timeout::TimeoutConfig::builder()
            .operation_attempt_timeout(std::time::Duration::from_secs(3))
            .build();
        assert_eq!(
            bounds(&Store::new(client(Some(own)), cfg.clone())),
            (Some(std::time::Duration::from_secs(3)), Some(cfg.operation_timeout)),
            "a caller's own attempt timeout is kept, the missing operation timeout added"
        );
    }
}
