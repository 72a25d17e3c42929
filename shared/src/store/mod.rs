//! Every DynamoDB call the protocol makes, and what each came to. What the store keeps between calls is in `caches`,
//! what a phase run used in `meter`; the test hooks (`test-hooks` feature) are `faults` (injected crashes) and
//! `billed` (a bill by DynamoDB's rules).
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
    AttributeValue, ConsumedCapacity, KeyType, KeysAndAttributes, ProjectionType, ReturnConsumedCapacity, ReturnValue,
    ReturnValuesOnConditionCheckFailure, WriteRequest,
};
use aws_sdk_dynamodb::Client;

use crate::billing::{self, Bill};
use crate::config::Config;
use crate::error::TxError;
use crate::pace::{Pace, Watch};
use crate::request::TableSchema;
use crate::value::{item_size, Item};
use dynamo_saga_expressions::eval::IndexKey;

mod billed;
mod caches;
mod faults;
mod meter;

use billed::reported;
pub(crate) use caches::Caches;
use faults::Faults;
pub use meter::{Meter, Usage};

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

/// What a write sent once ([`Store::update_once`], [`Store::put_once`]) came to.
#[derive(Debug)]
pub enum Once {
    /// DynamoDB's answer.
    Known(Written),
    /// No answer that says whether DynamoDB carried the write out (a timeout, a broken connection, a server error):
    /// the request may still land, later, so nothing it carries can be trusted to be sent only once any more.
    Unknown(String),
}

/// What a single-item write came to, before it is metered and billed.
enum Sent {
    Done(Option<Item>, Vec<ConsumedCapacity>),
    ConditionFailed(Option<Item>),
    /// Refused before DynamoDB carried it out (throttled, or in the way of a DynamoDB transaction): safe to send again.
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

/// Attempts of a write sent once that DynamoDB keeps refusing before carrying it out (throttling), as the client's
/// own retries make ([`Store::retry_config`]).
const ONCE_ATTEMPTS: u32 = 12;

/// Sends the write `send` builds until DynamoDB answers it or its outcome is unknown: a write DynamoDB refused before
/// carrying it out (throttling, a conflict with a DynamoDB transaction) is sent again after a jittered wait, up to
/// [`ONCE_ATTEMPTS`] attempts.
async fn until_answered<F, Fut>(mut send: F) -> Result<Once, TxError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Answer, TxError>>,
{
    let mut tries = 0u32;
    loop {
        match send().await? {
            Answer::Known(w) => return Ok(Once::Known(w)),
            Answer::Unknown(message) => return Ok(Once::Unknown(message)),
            Answer::Refused(e) if tries + 1 >= ONCE_ATTEMPTS => return Err(e),
            Answer::Refused(_) => {
                tries += 1;
                backoff(tries).await;
            }
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
        let send = async {
            let req = $req
                .return_consumed_capacity(ReturnConsumedCapacity::Total)
                .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld);
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
        $store.single_write($m, $key, send).await
    }};
}

/// What the error of a write sent once says of it: refused before it was carried out (a client error: throttling,
/// a conflict with a DynamoDB transaction, a request DynamoDB rejects), or of unknown outcome (a server error, a
/// timeout, a connection that broke).
fn sent_once<E: ProvideErrorMetadata + std::fmt::Debug>(
    op: &'static str,
    e: SdkError<E, aws_sdk_dynamodb::config::http::HttpResponse>,
) -> Sent {
    match &e {
        SdkError::ServiceError(se) if se.raw().status().is_client_error() => match se.err().code() {
            Some(
                "ProvisionedThroughputExceededException"
                | "ThrottlingException"
                | "RequestLimitExceeded"
                | "TransactionConflictException",
            ) => Sent::Refused(map_err(op, e)),
            _ => Sent::Failed(map_err(op, e)),
        },
        SdkError::ConstructionFailure(_) => Sent::Failed(map_err(op, e)),
        _ => Sent::Unknown(format!("{op}: {}", map_err(op, e))),
    }
}

/// Every DynamoDB call the protocol makes, through one client, with what it keeps between calls ([`Caches`]), its
/// in-flight limit ([`Pace`]), and, for dynamo-saga's own tests and benchmark, an injected crash ([`Faults`]) and a
/// bill by DynamoDB's rules ([`Bill`]). Clones share all of them.
#[derive(Clone)]
pub struct Store {
    pub client: Client,
    /// Where shares of a fanned-out step run besides this process (see [`Workers`]).
    workers: Option<Arc<dyn Workers>>,
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
    /// A store on a client built elsewhere, as it is but for time bounds: its in-flight limit stays `SAGA_IN_FLIGHT`,
    /// since the client does not tell it of throttling ([`Store::from_conf`] does), and a client with no attempt or
    /// operation timeout of its own gets [`Store::timeouts`]' (so no request of a store is left without a bound).
    pub fn new(client: Client, cfg: Config) -> Self {
        let pace = Pace::new(cfg.concurrency);
        let bounded = client
            .config()
            .timeout_config()
            .is_some_and(|t| t.operation_attempt_timeout().is_some() && t.operation_timeout().is_some());
        let client = if bounded {
            client
        } else {
            let mut timeouts = Self::timeouts(&cfg);
            if let Some(own) = client.config().timeout_config() {
                timeouts = own.clone().take_defaults_from(&timeouts).clone();
            }
            Client::from_conf(client.config().to_builder().timeout_config(timeouts).build())
        };
        Self::paced(client, cfg, pace)
    }

    fn paced(client: Client, cfg: Config, pace: Arc<Pace>) -> Self {
        // Writes sent once ([`Store::update_once`]): the same client (endpoint, credentials, timeouts, interceptors)
        // but for retries, which it never makes.
        let once = Client::from_conf(
            client.config().to_builder().retry_config(aws_sdk_dynamodb::config::retry::RetryConfig::disabled()).build(),
        );
        Self {
            client,
            workers: None,
            once,
            cfg: Arc::new(cfg),
            caches: Arc::default(),
            faults: None,
            billing: None,
            pace,
        }
    }

    /// A client from the standard AWS configuration chain (profile, region, `AWS_ENDPOINT_URL_DYNAMODB`), set up as
    /// [`Store::from_conf`] sets it up.
    pub async fn connect(cfg: Config) -> Self {
        let sdk = aws_config::defaults(aws_config::BehaviorVersion::latest()).load().await;
        Self::from_conf(aws_sdk_dynamodb::config::Builder::from(&sdk), cfg)
    }

    /// A store whose client is built from `conf` the way throttling needs it: the SDK's standard retry mode (12
    /// attempts) with a short, jittered first wait of up to 25 ms, doubling up to 5 s, so that a throttled write
    /// costs tens of milliseconds rather than the default's second; and an in-flight limit that halves when DynamoDB
    /// throttles and grows back to `SAGA_IN_FLIGHT` while calls succeed ([`Pace`]). With `SAGA_CALL_LOG` set, the
    /// client also logs its calls ([`crate::calls`]).
    pub fn from_conf(conf: aws_sdk_dynamodb::config::Builder, cfg: Config) -> Self {
        let pace = Pace::new(cfg.concurrency);
        let mut conf = Self::with_retries(conf).timeout_config(Self::timeouts(&cfg)).interceptor(Watch(pace.clone()));
        if let Some(log) = crate::calls::CallLog::from_env() {
            conf = conf.interceptor(log);
        }
        Self::paced(Client::from_conf(conf.build()), cfg, pace)
    }

    /// `conf` with the retries [`Store::from_conf`] gives its client: [`Store::retry_config`], without the SDK's retry
    /// quota. The in-flight limit bounds retries as it bounds first attempts, so the quota (a token bucket that a
    /// burst of a hundred retries empties, after which nothing is retried) would only turn a busy moment into failed
    /// phases.
    pub fn with_retries(conf: aws_sdk_dynamodb::config::Builder) -> aws_sdk_dynamodb::config::Builder {
        let partition = aws_sdk_dynamodb::config::retry::RetryPartition::custom("dynamo-saga")
            .token_bucket(aws_sdk_dynamodb::config::retry::TokenBucket::unlimited())
            .build();
        conf.retry_config(Self::retry_config()).retry_partition(partition)
    }

    /// The retries [`Store::from_conf`] gives its client: the SDK's standard mode, 12 attempts, a jittered first wait
    /// of up to 25 ms, doubling up to 5 s. They cover throttling and DynamoDB's transient errors (an
    /// `InternalServerError` included): every write the protocol sends is safe to send again, but for lock writes,
    /// which are sent once ([`Store::update_once`]).
    pub fn retry_config() -> aws_sdk_dynamodb::config::retry::RetryConfig {
        aws_sdk_dynamodb::config::retry::RetryConfig::standard()
            .with_max_attempts(12)
            .with_initial_backoff(std::time::Duration::from_millis(25))
            .with_max_backoff(std::time::Duration::from_secs(5))
    }

    /// The time bounds [`Store::from_conf`] gives every request: an attempt timeout and an operation timeout, so that no
    /// request of this store stays outstanding longer than [`Config::operation_timeout`] (a write sent once, longer
    /// than [`Config::attempt_timeout`]). The SDK sets neither by default. What the client gives up on may still be
    /// carried out by DynamoDB; on AWS, not after the five minutes a SigV4 signature is accepted for.
    pub fn timeouts(cfg: &Config) -> aws_sdk_dynamodb::config::timeout::TimeoutConfig {
        aws_sdk_dynamodb::config::timeout::TimeoutConfig::builder()
            .operation_attempt_timeout(cfg.attempt_timeout)
            .operation_timeout(cfg.operation_timeout)
            .build()
    }

    /// A copy of this store whose fanned-out steps run their shares by `workers`, all but the first, which this
    /// process runs itself ([`Config::fan_out`]).
    pub fn with_workers(&self, workers: Arc<dyn Workers>) -> Store {
        Store { workers: Some(workers), ..self.clone() }
    }

    /// Where shares run besides this process, when anywhere.
    pub(crate) fn workers(&self) -> Option<&Arc<dyn Workers>> {
        self.workers.as_ref()
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

    /// A copy of this store that stops working (every call fails with [`TxError::InjectedFault`]) once it has sent
    /// `writes` write requests: the crash tests' stand-in for a Lambda that times out or dies between two writes.
    #[cfg(feature = "test-hooks")]
    pub fn crash_after(&self, writes: u64) -> Store {
        Store { faults: Some(Arc::new(Faults::new(writes, None))), ..self.clone() }
    }

    /// [`Store::crash_after`], and the first lock write past the budget is not lost but held: sent once the header
    /// of transaction `tx_id` shows it finished (polled for up to two minutes), by a task that outlives the call. The
    /// stand-in for a Lambda frozen or timed out with a write in flight, which lands after someone else ended its
    /// transaction.
    #[cfg(feature = "test-hooks")]
    pub fn crash_after_late(&self, writes: u64, tx_id: &str) -> Store {
        Store { faults: Some(Arc::new(Faults::new(writes, Some(tx_id)))), ..self.clone() }
    }

    /// When this write sent once is the one [`Store::crash_after_late`] holds: the crash it ends with, while a task of
    /// its own sends the write (`send` builds it) once the header of its transaction shows it finished.
    fn hold_late<F, Fut>(&self, send: F) -> Option<TxError>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future + Send + 'static,
    {
        let f = self.faults.as_ref()?;
        let tx_id = f.held_late()?;
        faults::send_after_end(self.client.clone(), self.cfg.tx_table.clone(), tx_id, send());
        Some(TxError::InjectedFault(f.writes_sent()))
    }

    /// Write requests this store has sent (or refused, once crashed); `None` without [`Store::crash_after`].
    #[cfg(feature = "test-hooks")]
    pub fn writes_sent(&self) -> Option<u64> {
        self.faults.as_ref().map(|f| f.writes_sent())
    }

    /// Whether this store has sent every write its injected crash allows: the next write, or the end of the call,
    /// is where it dies.
    #[cfg(feature = "test-hooks")]
    pub fn fault_spent(&self) -> bool {
        self.faults.as_ref().is_some_and(|f| f.spent())
    }

    /// Whether this store's injected crash has happened.
    #[cfg(feature = "test-hooks")]
    pub fn crashed(&self) -> bool {
        self.faults.as_ref().is_some_and(|f| f.crashed())
    }

    fn check_alive(&self) -> Result<(), TxError> {
        self.faults.as_ref().map_or(Ok(()), |f| f.check_alive())
    }

    fn before_write(&self) -> Result<(), TxError> {
        self.faults.as_ref().map_or(Ok(()), |f| f.before_write())
    }

    /// A copy of this store that bills every call by DynamoDB's rules (`billing`): the benchmark's capacity
    /// pass. Each write reads the items it touches before and after it (outside the meter), so calls take longer.
    #[cfg(feature = "test-hooks")]
    pub fn with_billing(&self) -> Store {
        Store { billing: Some(Arc::default()), ..self.clone() }
    }

    /// What this store has been billed so far; `None` without [`Store::with_billing`].
    #[cfg(feature = "test-hooks")]
    pub fn bill(&self) -> Option<Bill> {
        self.billing.as_ref().map(|b| *b.lock().expect("bill lock"))
    }

    /// The key schema of a table (DescribeTable, once per table per process).
    pub async fn schema(&self, m: &Meter, table: &str) -> Result<Arc<TableSchema>, TxError> {
        let cell = self.caches.schema_cell(table);
        cell.get_or_try_init(|| async { self.describe(m, table).await.map(Arc::new) }).await.cloned()
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
        let mut names = vec![String::new(); 2];
        for k in desc.key_schema() {
            let i = if *k.key_type() == KeyType::Hash { 0 } else { 1 };
            names[i] = k.attribute_name().to_string();
        }
        names.retain(|n| !n.is_empty());
        let types = names
            .iter()
            .map(|n| {
                desc.attribute_definitions()
                    .iter()
                    .find(|d| d.attribute_name() == n)
                    .map(|d| d.attribute_type().as_str().to_string())
                    .ok_or_else(|| TxError::Internal(format!("table {table}: no type for key {n}")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let indexes = desc
            .global_secondary_indexes()
            .iter()
            .map(|g| billing::Index {
                keys: g.key_schema().iter().map(|k| k.attribute_name().to_string()).collect(),
                projection: match g.projection().and_then(|p| p.projection_type()) {
                    Some(ProjectionType::All) => billing::Projection::All,
                    Some(ProjectionType::Include) => billing::Projection::Include(
                        g.projection().map(|p| p.non_key_attributes().to_vec()).unwrap_or_default(),
                    ),
                    _ => billing::Projection::KeysOnly,
                },
            })
            .collect();
        self.caches.keep_indexes(table, indexes);
        let type_of = |n: &str| {
            desc.attribute_definitions()
                .iter()
                .find(|d| d.attribute_name() == n)
                .map(|d| d.attribute_type().as_str().to_string())
        };
        let global = desc.global_secondary_indexes().iter().map(|g| (g.index_name(), g.key_schema(), false));
        let local = desc.local_secondary_indexes().iter().map(|l| (l.index_name(), l.key_schema(), true));
        let index_keys = global
            .chain(local)
            .flat_map(|(index, keys, local)| keys.iter().map(move |k| (index.unwrap_or_default(), k, local)))
            .filter_map(|(index, k, local)| {
                let kind = type_of(k.attribute_name())?.chars().next()?;
                let key = IndexKey::new(index, k.attribute_name(), kind, *k.key_type() == KeyType::Range);
                Some(if local { key.of_local_index() } else { key })
            })
            .collect();
        Ok(TableSchema { key_names: names, key_types: types, index_keys })
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

    /// Strongly consistent reads of many keys of one table, in any order; missing items are absent from the result.
    pub async fn batch_get(&self, m: &Meter, table: &str, keys: Vec<Item>) -> Result<Vec<Item>, TxError> {
        self.batch_get_with(m, table, keys, true).await
    }

    /// [`Store::batch_get`] of records that never change once written (request pages), as [`Store::get_written`]
    /// reads one: eventually consistent, then strongly consistent for the keys that found nothing.
    pub async fn batch_get_written(
        &self,
        m: &Meter,
        table: &str,
        keys: Vec<Item>,
        key_names: &[&str],
    ) -> Result<Vec<Item>, TxError> {
        let mut found = self.batch_get_with(m, table, keys.clone(), false).await?;
        if found.len() < keys.len() {
            let key_of = |i: &Item| key_names.iter().map(|k| i.get(*k).cloned()).collect::<Vec<_>>();
            let have: Vec<_> = found.iter().map(key_of).collect();
            let missing: Vec<Item> = keys.into_iter().filter(|k| !have.contains(&key_of(k))).collect();
            found.extend(self.batch_get_with(m, table, missing, true).await?);
        }
        Ok(found)
    }

    /// Eventually consistent reads of many keys of one table (half the read units of [`Store::batch_get`]): an item
    /// may come back as it was a moment ago, or not at all if it was written a moment ago.
    pub async fn batch_get_eventually(&self, m: &Meter, table: &str, keys: Vec<Item>) -> Result<Vec<Item>, TxError> {
        self.batch_get_with(m, table, keys, false).await
    }

    async fn batch_get_with(
        &self,
        m: &Meter,
        table: &str,
        keys: Vec<Item>,
        consistent: bool,
    ) -> Result<Vec<Item>, TxError> {
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

    /// An `UpdateItem` sent once: the SDK does not send it again after an error, so when its outcome is unknown
    /// ([`Once::Unknown`]) no copy of it is left to land but the one sent. Throttling and conflicts with a DynamoDB
    /// transaction, which DynamoDB refuses before carrying anything out, are sent again here after a jittered wait, up
    /// to the client's 12 attempts ([`Store::retry_config`]). Lock writes are sent this way, so that a lock landing
    /// late never carries the value apply trusts (`phase::lock`).
    pub async fn update_once(&self, m: &Meter, req: UpdateItemFluentBuilder) -> Result<Once, TxError> {
        if let Some(crash) = self.hold_late(|| {
            let held = req.clone();
            async move { held.send().await }
        }) {
            return Err(crash);
        }
        let key = self.billed_key(req.get_table_name(), req.get_key());
        until_answered(|| {
            let (req, key) = (req.as_input().clone(), key.clone());
            async move {
                single_write!(
                    self,
                    m,
                    req,
                    key,
                    "UpdateItem",
                    aws_sdk_dynamodb::operation::update_item::UpdateItemError::ConditionalCheckFailedException,
                    true
                )
            }
        })
        .await
    }

    /// A `PutItem` sent once, as [`Store::update_once`] sends an update.
    pub async fn put_once(&self, m: &Meter, req: PutItemFluentBuilder) -> Result<Once, TxError> {
        if let Some(crash) = self.hold_late(|| {
            let held = req.clone();
            async move { held.send().await }
        }) {
            return Err(crash);
        }
        let key = self.billed_item_key(req.get_table_name(), req.get_item()).await?;
        until_answered(|| {
            let (req, key) = (req.as_input().clone(), key.clone());
            async move {
                single_write!(
                    self,
                    m,
                    req,
                    key,
                    "PutItem",
                    aws_sdk_dynamodb::operation::put_item::PutItemError::ConditionalCheckFailedException,
                    true
                )
            }
        })
        .await
    }

    /// Sends one single-item write (built by [`single_write!`]), meters it and bills it.
    async fn single_write(
        &self,
        m: &Meter,
        key: (String, Item),
        send: impl std::future::Future<Output = Sent>,
    ) -> Result<Answer, TxError> {
        self.before_write()?;
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
    pub async fn transact(&self, m: &Meter, req: TransactWriteItemsFluentBuilder) -> Result<Transacted, TxError> {
        let mut tries = 0u32;
        let keys = self.transact_keys(&req).await?;
        loop {
            self.before_write()?;
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

    /// Unconditional puts and deletes of many records of one table, 25 per call, retrying unprocessed ones.
    pub async fn batch_write(&self, m: &Meter, table: &str, requests: Vec<WriteRequest>) -> Result<(), TxError> {
        for chunk in requests.chunks(25) {
            let mut pending = chunk.to_vec();
            let mut tries = 0u32;
            while !pending.is_empty() {
                self.before_write()?;
                let mut keys = Vec::new();
                if self.billing.is_some() {
                    for w in &pending {
                        if let Some(p) = w.put_request() {
                            keys.push(self.key_of(table, p.item()).await?);
                        } else if let Some(d) = w.delete_request() {
                            keys.push((table.to_string(), d.key().clone()));
                        }
                    }
                }
                let before = self.probe(&keys).await?;
                let out = self
                    .client
                    .batch_write_item()
                    .request_items(table, std::mem::take(&mut pending))
                    .return_consumed_capacity(ReturnConsumedCapacity::Total)
                    .send()
                    .await;
                let out = match out {
                    Ok(o) => o,
                    Err(e) => {
                        m.record(true, &[]);
                        return Err(map_err("BatchWriteItem", e));
                    }
                };
                m.record(true, out.consumed_capacity());
                self.charge_write(&keys, before, true, false, Some(reported(out.consumed_capacity()))).await?;
                if let Some(mut u) = out.unprocessed_items {
                    pending = u.remove(table).unwrap_or_default();
                    if !pending.is_empty() {
                        tries += 1;
                        backoff(tries).await;
                    }
                }
            }
        }
        Ok(())
    }

    /// Every record of one transaction whose sort key starts with `prefix` (Query, paginated).
    pub async fn query_prefix(&self, m: &Meter, tx_id: &str, prefix: &str) -> Result<Vec<Item>, TxError> {
        let mut out = Vec::new();
        let mut start: Option<Item> = None;
        loop {
            self.check_alive()?;
            let r = self
                .client
                .query()
                .table_name(&self.cfg.tx_table)
                .key_condition_expression("#p = :p AND begins_with(#s, :s)")
                .expression_attribute_names("#p", crate::constants::TX_PK)
                .expression_attribute_names("#s", crate::constants::TX_SK)
                .expression_attribute_values(":p", AttributeValue::S(tx_id.into()))
                .expression_attribute_values(":s", AttributeValue::S(prefix.into()))
                .consistent_read(true)
                .set_exclusive_start_key(start.take())
                .return_consumed_capacity(ReturnConsumedCapacity::Total)
                .send()
                .await
                .map_err(|e| map_err("Query", e))?;
            let cc: Vec<ConsumedCapacity> = r.consumed_capacity().into_iter().cloned().collect();
            m.record(false, &cc);
            let page = r.items.unwrap_or_default();
            self.charge_read(billing::read_units(page.iter().map(item_size).sum()), &cc);
            out.extend(page);
            match r.last_evaluated_key {
                Some(k) if !k.is_empty() => start = Some(k),
                _ => break,
            }
        }
        Ok(out)
    }
}

/// How many keys a BatchGetItem request asks of `table`.
fn ka_len(req: &BatchGetItemFluentBuilder, table: &str) -> usize {
    req.get_request_items().as_ref().and_then(|r| r.get(table)).map_or(0, |k| k.keys().len())
}

/// Exponential backoff with full jitter, 25 ms doubling up to about 1.6 s.
pub async fn backoff(attempt: u32) {
    let cap = 25u64 << attempt.min(6);
    let jitter = (ulid::Ulid::new().random() % (cap as u128 + 1)) as u64;
    tokio::time::sleep(std::time::Duration::from_millis(jitter.max(5))).await;
}

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
