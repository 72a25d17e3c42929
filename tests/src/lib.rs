//! Test harness: Amazon DynamoDB Local, started once per test run, and fresh tables for every test.
//!
//! `tools/test.sh` starts one DynamoDB Local for the whole run and sets `DYNAMODB_ENDPOINT`. When a test binary runs
//! without it (`cargo test` alone), the harness starts its own server on a free port through
//! `tools/dynamodb-local.sh`, watched by a shell that stops it when the test process exits.

pub mod api;
pub mod bad;
pub mod bank;
pub mod cpu;
pub mod diagram;
pub mod java_library;
pub mod proxy;
pub mod sfn_api;
pub mod small;
pub mod stack;
pub mod trips;
pub mod workload;

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

use aws_sdk_dynamodb::config::{BehaviorVersion, Credentials, Region};
use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType,
};
use aws_sdk_dynamodb::Client;
use dynamo_saga::constants::{
    ATTR_TOMBSTONE, ATTR_WRITTEN_BY, H_ACTIONS, H_FINISHED_AT, H_REASONS, H_RETRY, H_STATE, QUEUE_PREFIX,
    RESERVED_PREFIX, SK_HEADER, TX_PK, TX_SK,
};
use dynamo_saga::records::Decision;
use dynamo_saga::value::{item_from_json, item_to_json, Item};
use dynamo_saga::{Cancellation, Config, Store, TxError};
use serde_json::Value;
use tokio::sync::OnceCell;

static ENDPOINT: OnceCell<String> = OnceCell::const_new();
static COUNTER: AtomicU32 = AtomicU32::new(0);

pub fn root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("workspace root").to_path_buf()
}

/// The library page's examples (docs/library.md), compiled as this crate's doc tests: the page cannot drift from the
/// library's API.
#[doc = include_str!("../../docs/library.md")]
pub mod library_page {}

/// The DynamoDB Local endpoint for this run.
pub async fn endpoint() -> String {
    ENDPOINT
        .get_or_init(|| async {
            if let Ok(e) = std::env::var("DYNAMODB_ENDPOINT") {
                return e;
            }
            let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
            let script = root().join("tools/dynamodb-local.sh");
            let status = Command::new(&script)
                .args(["start", &port.to_string()])
                .stdout(Stdio::null())
                .status()
                .expect("run tools/dynamodb-local.sh");
            assert!(status.success(), "could not start DynamoDB Local");
            // Stop the server when this process ends, however it ends.
            let watch = format!(
                "while kill -0 {} 2>/dev/null; do sleep 1; done; {} stop {port}",
                std::process::id(),
                script.display()
            );
            // It outlives this process to clean up after it; a thread reaps it should it end first.
            let mut watchdog = Command::new("sh")
                .args(["-c", &watch])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .spawn()
                .expect("watchdog");
            std::thread::spawn(move || watchdog.wait());
            format!("http://127.0.0.1:{port}")
        })
        .await
        .clone()
}

/// Prints one figure of the guarantees a test proves, and appends it to the file `SAGA_REPORT` names (set by
/// `tools/test.sh`, which prints the collected figures at the end of the run: they are what the README's
/// Guarantees section quotes).
pub fn report(line: impl AsRef<str>) {
    let line = match strong_multi_region() {
        Some(_) => format!("MRSC mode, through the stand-in: {}", line.as_ref()),
        None => line.as_ref().to_string(),
    };
    let line = line.as_str();
    println!("{line}");
    if let Some(path) = std::env::var_os("SAGA_REPORT") {
        use std::io::Write;
        // One write of the whole line: test binaries run at once, and an appended write lands whole.
        let mut f = std::fs::OpenOptions::new().create(true).append(true).open(path).expect("open SAGA_REPORT");
        f.write_all(format!("{line}\n").as_bytes()).expect("write SAGA_REPORT");
    }
}

/// A client for DynamoDB Local.
pub async fn client() -> Client {
    client_for(&endpoint().await)
}

/// A client for the DynamoDB Local at `endpoint`.
pub fn client_for(endpoint: &str) -> Client {
    Client::from_conf(conf_for(endpoint).build())
}

/// The client settings of [`client_for`], for [`Store::from_conf`] to finish: the retries a deployed store's client
/// has ([`Store::with_retries`]), which DynamoDB Local needs too when many writes are in flight at once (it answers
/// some with `InternalServerError` while they wait for its own locks).
pub fn conf_for(endpoint: &str) -> aws_sdk_dynamodb::config::Builder {
    Store::with_retries(
        aws_sdk_dynamodb::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .endpoint_url(endpoint)
            .region(Region::new("us-east-1"))
            .credentials_provider(Credentials::new("local", "local", None, None, "tests")),
    )
}

/// The share of single-item writes the stand-in answers with `ReplicatedWriteConflictException` when the suites run
/// in MRSC mode (`SAGA_TEST_MULTI_REGION=strong`, `SAGA_TEST_CONFLICT` to change the share).
const DEFAULT_CONFLICT: f64 = 0.03;

/// `Some(conflict share)` when this run's suites drive their transactions as on multi-Region strongly consistent
/// tables (`SAGA_TEST_MULTI_REGION=strong`): every [`Env`] with a transactions table of its own then has a store
/// configured for MRSC ([`Config::with_strong_multi_region`]) whose client goes through an MRSC stand-in
/// (`tools/ddb-proxy.mjs --mrsc`) in front of this run's DynamoDB Local; the env's own `client`, which sets the tables
/// up, reads them and runs native `TransactWriteItems` as the baseline, goes straight to DynamoDB Local.
pub fn strong_multi_region() -> Option<f64> {
    (std::env::var("SAGA_TEST_MULTI_REGION").ok()?.eq_ignore_ascii_case("strong"))
        .then(|| std::env::var("SAGA_TEST_CONFLICT").ok().and_then(|v| v.parse().ok()).unwrap_or(DEFAULT_CONFLICT))
}

/// Whether a request one `TransactWriteItems` call can carry is carried out in one call, as by default: not in MRSC
/// mode ([`strong_multi_region`]), which has no such call.
pub fn one_call() -> bool {
    strong_multi_region().is_none()
}

/// `store`, counting the writes of a clean run ([`Store::crash_after`] with no limit), for a suite that then stops a
/// run before each of them. A write the MRSC stand-in answers with `ReplicatedWriteConflictException` is sent again,
/// one more write, so the count would not hold from one run to the next: in MRSC mode such a suite needs
/// `SAGA_TEST_CONFLICT=0`, and says so.
pub fn write_counter(store: &Store) -> Store {
    if let Some(conflict) = strong_multi_region().filter(|c| *c > 0.0) {
        panic!(
            "this suite counts a clean run's writes and stops before each, which a share of {conflict} conflicts \
             would move from run to run: run it in MRSC mode with SAGA_TEST_CONFLICT=0"
        );
    }
    store.crash_after(u64::MAX)
}

static STAND_IN: OnceCell<proxy::Proxy> = OnceCell::const_new();

/// The MRSC stand-in every store of this process goes through in MRSC mode.
async fn stand_in(conflict: f64) -> &'static proxy::Proxy {
    STAND_IN
        .get_or_init(|| async move { proxy::Proxy::start_args(&["--mrsc", "--conflict", &conflict.to_string()]).await })
        .await
}

/// One test's world: its own transactions table and two data tables, `a` (pk) and `b` (pk + sk).
pub struct Env {
    pub client: Client,
    pub store: Store,
    pub tx_table: String,
    pub a: String,
    pub b: String,
}

impl Env {
    pub async fn new(name: &str) -> Env {
        Self::with(name, |c| c).await
    }

    pub async fn with(name: &str, tune: impl FnOnce(Config) -> Config) -> Env {
        Self::build(client().await, None, name, tune).await
    }

    /// An environment on the local stack's DynamoDB, sharing the transactions table its Lambda functions use.
    pub async fn on_stack(name: &str) -> Env {
        let st = stack::stack().await;
        Self::build(st.client(), Some(st.tx_table.clone()), name, |c| c).await
    }

    /// An environment on the DynamoDB of `st`, a stack the test started itself, sharing the transactions table its
    /// functions use.
    pub async fn on_stack_of(st: &stack::Stack, name: &str) -> Env {
        Self::build(st.client(), Some(st.tx_table.clone()), name, |c| c).await
    }

    /// An environment on the local stack's DynamoDB with a transactions table of its own, for a command that reaches
    /// the stack's DynamoDB and must see no one else's transactions (a sweep).
    pub async fn on_stack_alone(name: &str) -> Env {
        Self::build(stack::stack().await.client(), None, name, |c| c).await
    }

    async fn build(client: Client, tx_table: Option<String>, name: &str, tune: impl FnOnce(Config) -> Config) -> Env {
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        // Every test table starts with "t-", which the local stack's allow-list admits.
        let prefix = format!("t-{name}-{}-{n}", std::process::id());
        let a = format!("{prefix}-a");
        let b = format!("{prefix}-b");
        let own_tx_table = tx_table.is_none();
        let tx_table = match tx_table {
            Some(t) => t,
            None => {
                let t = format!("{prefix}-tx");
                create_tx_table(&client, &t).await;
                t
            }
        };
        create_table(&client, &a, &[("pk", "S")]).await;
        create_table(&client, &b, &[("pk", "S"), ("sk", "N")]).await;
        let cfg = tune(fanned(Config::new(&tx_table)).with_allowed_tables([a.clone(), b.clone()]));
        let store = match strong_multi_region() {
            Some(conflict) if own_tx_table => {
                Store::new(client_for(&stand_in(conflict).await.url), cfg.with_strong_multi_region())
            }
            _ => Store::new(client.clone(), cfg),
        };
        Env { client, store, tx_table, a, b }
    }

    pub async fn put(&self, table: &str, item: Value) {
        self.client.put_item().table_name(table).set_item(Some(item_from_json(&item).unwrap())).send().await.unwrap();
    }

    /// Writes each `(table, item)` as [`Env::put`] would, with BatchWriteItem ([`put_all_in`]): a scenario's items
    /// in a twenty-fifth of the calls.
    pub async fn put_many(&self, items: impl IntoIterator<Item = (String, Value)>) {
        put_all_in(&self.client, items).await;
    }

    /// The item at each `(table, key)`, as [`Env::get`] gives it, in the order of `keys`: read strongly consistent with
    /// BatchGetItem, 100 keys a call, sending unprocessed keys again (the keys must differ).
    pub async fn get_many(&self, keys: &[(String, Value)]) -> Vec<Option<Value>> {
        use aws_sdk_dynamodb::types::KeysAndAttributes;
        // An item's identity: its table and its key's attributes as canonical JSON (sorted names).
        let id = |table: &str, key: &Value| format!("{table}\n{key}");
        let mut found: std::collections::HashMap<String, Value> = std::collections::HashMap::new();
        for chunk in keys.chunks(100) {
            let mut by_table: BTreeMap<String, Vec<Item>> = BTreeMap::new();
            for (table, key) in chunk {
                by_table.entry(table.clone()).or_default().push(item_from_json(key).unwrap());
            }
            let names: BTreeMap<String, Vec<String>> =
                chunk.iter().map(|(t, k)| (t.clone(), k.as_object().unwrap().keys().cloned().collect())).collect();
            let mut ask: std::collections::HashMap<String, KeysAndAttributes> = by_table
                .into_iter()
                .map(|(t, keys)| {
                    (t, KeysAndAttributes::builder().set_keys(Some(keys)).consistent_read(true).build().unwrap())
                })
                .collect();
            while !ask.is_empty() {
                let out = self.client.batch_get_item().set_request_items(Some(ask)).send().await.unwrap();
                for (table, items) in out.responses.unwrap_or_default() {
                    for item in items {
                        let mut item = item_to_json(&item);
                        let key: serde_json::Map<String, Value> =
                            names[&table].iter().map(|n| (n.clone(), item[n.as_str()].clone())).collect();
                        item.as_object_mut().expect("an item").remove(ATTR_WRITTEN_BY);
                        found.insert(id(&table, &Value::Object(key)), item);
                    }
                }
                ask = out.unprocessed_keys.unwrap_or_default();
            }
        }
        keys.iter().map(|(table, key)| found.remove(&id(table, key))).collect()
    }

    /// The item at `key` (DynamoDB JSON), without `_sagaTx`, as [`Env::scan`] gives items: what the caller wrote,
    /// with any lock still on it.
    pub async fn get(&self, table: &str, key: Value) -> Option<Value> {
        let mut item = self.get_raw(table, key).await?;
        item.as_object_mut().expect("an item").remove(ATTR_WRITTEN_BY);
        Some(item)
    }

    /// The item at `key` as it is.
    pub async fn get_raw(&self, table: &str, key: Value) -> Option<Value> {
        let out = self
            .client
            .get_item()
            .table_name(table)
            .set_key(Some(item_from_json(&key).unwrap()))
            .consistent_read(true)
            .send()
            .await
            .unwrap();
        out.item.map(|i| item_to_json(&i))
    }

    /// Every item of a table, keyed by its canonical JSON key, as DynamoDB JSON, without the id of the transaction
    /// that last wrote it (`_sagaTx`, which native writes do not leave): what the caller wrote.
    pub async fn scan(&self, table: &str) -> BTreeMap<String, Value> {
        scan(&self.client, table).await
    }

    /// Every data table's items, as [`Env::scan`] gives them.
    pub async fn snapshot(&self) -> BTreeMap<String, BTreeMap<String, Value>> {
        let mut out = BTreeMap::new();
        for t in [&self.a, &self.b] {
            out.insert(t.clone(), self.scan(t).await);
        }
        out
    }

    /// Every data table's items as they are, dynamo-saga's attributes included.
    pub async fn snapshot_raw(&self) -> BTreeMap<String, BTreeMap<String, Value>> {
        let mut out = BTreeMap::new();
        for t in [&self.a, &self.b] {
            out.insert(t.clone(), scan_raw(&self.client, t).await);
        }
        out
    }

    /// Asserts no item of the data tables carries a reserved attribute (a lock, a flag) but the id of the transaction
    /// that last wrote it, which names a committed transaction when its header is still there; and that every
    /// transaction of the transactions table that ended rolled back says why (see [`assert_rollbacks_named`]).
    pub async fn assert_clean(&self) {
        let records = self.tx_records().await;
        let states: std::collections::HashMap<String, String> = records
            .iter()
            .filter(|r| r.get(TX_SK).and_then(|v| v.as_s().ok()).map(String::as_str) == Some(SK_HEADER))
            .filter_map(|r| Some((r.get(TX_PK)?.as_s().ok()?.clone(), r.get(H_STATE)?.as_s().ok()?.clone())))
            .collect();
        for (t, items) in self.snapshot_raw().await {
            for (k, v) in items {
                let names: Vec<&String> = v
                    .as_object()
                    .unwrap()
                    .keys()
                    .filter(|n| n.starts_with(RESERVED_PREFIX) && *n != ATTR_TOMBSTONE && *n != ATTR_WRITTEN_BY)
                    .collect();
                assert!(names.is_empty(), "{t} {k} still carries {names:?}: {v}");
                if let Some(by) = v.get(ATTR_WRITTEN_BY) {
                    let id =
                        by["S"].as_str().unwrap_or_else(|| panic!("{t} {k}: {ATTR_WRITTEN_BY} is not a string: {v}"));
                    assert_eq!(id.len(), 26, "{t} {k}: {ATTR_WRITTEN_BY} is no transaction id: {v}");
                    if let Some(state) = states.get(id) {
                        assert_eq!(state, "COMMITTED", "{t} {k} was last written by {id}, which is {state}: {v}");
                    }
                }
            }
        }
        assert_rollbacks_named(&records);
    }

    /// The rows of every parent's FIFO queue, without the ticket counters.
    pub async fn queue_rows(&self) -> Vec<Item> {
        let text = |r: &Item, k: &str| r.get(k).and_then(|v| v.as_s().ok()).cloned().unwrap_or_default();
        self.tx_records()
            .await
            .into_iter()
            .filter(|r| text(r, "id").starts_with(QUEUE_PREFIX) && text(r, "sk").starts_with('t'))
            .collect()
    }

    /// The transactions table's records, by sort key kind.
    pub async fn tx_records(&self) -> Vec<Item> {
        let mut out = Vec::new();
        let mut start = None;
        loop {
            let r = self
                .client
                .scan()
                .table_name(&self.tx_table)
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .unwrap();
            out.extend(r.items.unwrap_or_default());
            match r.last_evaluated_key {
                Some(k) if !k.is_empty() => start = Some(k),
                _ => return out,
            }
        }
    }
}

/// Fails the test when a cancellation does not say what to act on: DynamoDB names the failing actions of a
/// cancelled transaction, and so must dynamo-saga (an action's reason with its message, or the `Parent` item's).
/// Every suite that sees a cancellation passes it through here.
pub fn assert_named(c: &Cancellation) -> &Cancellation {
    assert!(c.is_named(), "a cancellation without a named action or parent: {c:?}");
    for (i, r) in c.failed() {
        assert!(
            r.message.as_deref().is_some_and(|m| !m.is_empty()),
            "TransactItems[{i}] is cancelled without a message: {c:?}"
        );
    }
    if let Some(p) = &c.parent_cancellation_reason {
        assert!(
            p.code != "None" && p.message.as_deref().is_some_and(|m| !m.is_empty()),
            "a parent reason without a message: {c:?}"
        );
    }
    c
}

/// [`assert_named`] for the JSON of a cancellation (an execution's failure cause).
pub fn assert_named_json(v: &Value) {
    let c: Cancellation = serde_json::from_value(v.clone()).unwrap_or_else(|e| panic!("not a cancellation ({e}): {v}"));
    assert_named(&c);
}

/// The cancellation of a transaction that rolled back, checked by [`assert_named`]; panics on any other result.
/// Runs `tx_id`'s steps one after another, as a coordinator that meets no other transaction would, until `stop` holds
/// for the header and the step to come, or the transaction has finished; returns that header and step.
pub async fn run_steps_until(
    store: &Store,
    tx_id: &str,
    stop: impl Fn(&dynamo_saga::Header, &dynamo_saga::phase::resume::Step) -> bool,
) -> (dynamo_saga::Header, dynamo_saga::phase::resume::Step) {
    use dynamo_saga::phase::resume::{resume, Step};
    loop {
        let (h, step) = resume(store, tx_id).await.expect("resumes");
        if step == Step::Finished || stop(&h, &step) {
            return (h, step);
        }
        dynamo_saga::driver::run_step(store, tx_id, step).await.expect("runs the step");
    }
}

pub fn canceled<T: std::fmt::Debug>(r: Result<T, TxError>) -> Box<Cancellation> {
    match r {
        Err(TxError::Canceled(c)) => {
            assert_named(&c);
            c
        }
        other => panic!("expected TransactionCanceled, got {other:?}"),
    }
}

/// Every finished, rolled-back transaction among the transactions table's `records` says why: a cancellation that
/// names an action or the parent, or an abort with its message (`TransactionAborted`: its driver gave up or
/// stopped). None is left with a retry it will never make.
pub fn assert_rollbacks_named(records: &[Item]) {
    for rec in records {
        let text = |k: &str| rec.get(k).and_then(|v| v.as_s().ok()).cloned();
        if text(TX_SK).as_deref() != Some(SK_HEADER)
            || text(H_STATE).as_deref() != Some("ROLLED_BACK")
            || !rec.contains_key(H_FINISHED_AT)
        {
            continue;
        }
        let id = text(TX_PK).unwrap_or_default();
        assert!(!rec.contains_key(H_RETRY), "{id} finished with a retry pending: {rec:?}");
        let d: Decision = serde_json::from_str(
            &text(H_REASONS).unwrap_or_else(|| panic!("{id} rolled back without reasons: {rec:?}")),
        )
        .unwrap();
        let actions = rec
            .get(H_ACTIONS)
            .and_then(|v| v.as_n().ok())
            .and_then(|v| v.parse::<usize>().ok())
            .unwrap_or_else(|| panic!("{id}: {H_ACTIONS}"));
        match d.error(&id, actions) {
            TxError::Canceled(c) => {
                assert_named(&c);
            }
            TxError::Aborted(a) => {
                assert!(d.message.as_deref().is_some_and(|m| !m.is_empty()), "{id} aborted without a message: {a:?}")
            }
            other => panic!("{id}: {other:?}"),
        }
    }
}

/// Every item of `table`, keyed by its canonical JSON key, as DynamoDB JSON, without `_sagaTx`.
pub async fn scan(client: &Client, table: &str) -> BTreeMap<String, Value> {
    let mut out = scan_raw(client, table).await;
    for v in out.values_mut() {
        v.as_object_mut().expect("an item").remove(ATTR_WRITTEN_BY);
    }
    out
}

/// Every item of `table` as it is.
pub async fn scan_raw(client: &Client, table: &str) -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    let mut start = None;
    loop {
        let r = client
            .scan()
            .table_name(table)
            .consistent_read(true)
            .set_exclusive_start_key(start.take())
            .send()
            .await
            .unwrap();
        for item in r.items.unwrap_or_default() {
            let key: BTreeMap<&String, &AttributeValue> =
                item.iter().filter(|(k, _)| *k == "pk" || *k == "sk").collect();
            let key = format!("{key:?}");
            out.insert(key, item_to_json(&item));
        }
        match r.last_evaluated_key {
            Some(k) if !k.is_empty() => start = Some(k),
            _ => return out,
        }
    }
}

/// Writes `items` (DynamoDB JSON) to `table` with BatchWriteItem, 25 at a time, sending unprocessed items again.
pub async fn put_all(client: &Client, table: &str, items: impl IntoIterator<Item = Value>) {
    put_all_in(client, items.into_iter().map(|it| (table.to_owned(), it))).await;
}

/// Writes each `(table, item)` (DynamoDB JSON) with BatchWriteItem, 25 a call in order (tables mixed), sending
/// unprocessed items again.
pub async fn put_all_in(client: &Client, items: impl IntoIterator<Item = (String, Value)>) {
    use aws_sdk_dynamodb::types::{PutRequest, WriteRequest};
    let items: Vec<(String, Value)> = items.into_iter().collect();
    for chunk in items.chunks(25) {
        let mut reqs: std::collections::HashMap<String, Vec<WriteRequest>> = std::collections::HashMap::new();
        for (table, it) in chunk {
            let put = PutRequest::builder().set_item(Some(item_from_json(it).unwrap())).build().unwrap();
            reqs.entry(table.clone()).or_default().push(WriteRequest::builder().put_request(put).build());
        }
        while !reqs.is_empty() {
            let out = client.batch_write_item().set_request_items(Some(reqs)).send().await.unwrap();
            reqs = out.unprocessed_items.unwrap_or_default();
        }
    }
}

pub async fn create_table(client: &Client, name: &str, keys: &[(&str, &str)]) {
    let mut req = client.create_table().table_name(name).billing_mode(BillingMode::PayPerRequest);
    for (i, (k, t)) in keys.iter().enumerate() {
        req = req
            .key_schema(
                KeySchemaElement::builder()
                    .attribute_name(*k)
                    .key_type(if i == 0 { KeyType::Hash } else { KeyType::Range })
                    .build()
                    .unwrap(),
            )
            .attribute_definitions(
                AttributeDefinition::builder()
                    .attribute_name(*k)
                    .attribute_type(ScalarAttributeType::from(*t))
                    .build()
                    .unwrap(),
            );
    }
    req.send().await.unwrap();
}

/// Adds to `table` a global secondary index `index` keyed by the string attribute `attr`: a change of the table after
/// lock checked a transaction's writes, which DynamoDB then judges at apply.
pub async fn add_string_index(client: &Client, table: &str, index: &str, attr: &str) {
    use aws_sdk_dynamodb::types::{
        CreateGlobalSecondaryIndexAction, GlobalSecondaryIndexUpdate, Projection, ProjectionType,
    };
    let create = CreateGlobalSecondaryIndexAction::builder()
        .index_name(index)
        .key_schema(KeySchemaElement::builder().attribute_name(attr).key_type(KeyType::Hash).build().unwrap())
        .projection(Projection::builder().projection_type(ProjectionType::KeysOnly).build())
        .build()
        .unwrap();
    client
        .update_table()
        .table_name(table)
        .attribute_definitions(
            AttributeDefinition::builder().attribute_name(attr).attribute_type(ScalarAttributeType::S).build().unwrap(),
        )
        .global_secondary_index_updates(GlobalSecondaryIndexUpdate::builder().create(create).build())
        .send()
        .await
        .unwrap();
    wait_for_index(client, table, index, true).await;
}

/// Waits until index `index` of `table` is active (`present`) or gone.
async fn wait_for_index(client: &Client, table: &str, index: &str, present: bool) {
    for _ in 0..600 {
        let t = client.describe_table().table_name(table).send().await.unwrap();
        let gsi = t.table().map(|t| t.global_secondary_indexes()).unwrap_or_default();
        let status = gsi.iter().find(|g| g.index_name() == Some(index)).and_then(|g| g.index_status().cloned());
        match (present, status) {
            (true, Some(aws_sdk_dynamodb::types::IndexStatus::Active)) | (false, None) => return,
            _ => tokio::time::sleep(std::time::Duration::from_millis(100)).await,
        }
    }
    panic!("index {index} of {table} is not {} after a minute", if present { "active" } else { "gone" });
}

/// Removes global secondary index `index` from `table`.
pub async fn drop_index(client: &Client, table: &str, index: &str) {
    use aws_sdk_dynamodb::types::{DeleteGlobalSecondaryIndexAction, GlobalSecondaryIndexUpdate};
    let delete = DeleteGlobalSecondaryIndexAction::builder().index_name(index).build().unwrap();
    client
        .update_table()
        .table_name(table)
        .global_secondary_index_updates(GlobalSecondaryIndexUpdate::builder().delete(delete).build())
        .send()
        .await
        .unwrap();
    wait_for_index(client, table, index, false).await;
}

/// The transactions table as `template.yaml` defines it: `id` + `sk`, and the sparse open-transactions index.
pub async fn create_tx_table(client: &Client, name: &str) {
    // No time to live: DynamoDB Local would delete a record the moment its retention passed.
    let created = dynamo_saga::tables::create_transactions_table(client, name, false).await.expect("creates the table");
    assert_eq!(created, dynamo_saga::tables::Created::Created, "{name} existed already");
}

/// One action of a request (DynamoDB JSON, as `TransactWriteItems` takes it) as the SDK's `TransactWriteItem`, for
/// sending the same request to DynamoDB itself.
pub fn native_item(a: &Value) -> aws_sdk_dynamodb::types::TransactWriteItem {
    let (op, b) = a.as_object().unwrap().iter().next().unwrap();
    let s = |k: &str| b.get(k).and_then(Value::as_str).map(str::to_owned);
    let item = |k: &str| b.get(k).map(raw_item);
    let names = b
        .get("ExpressionAttributeNames")
        .map(|n| n.as_object().unwrap().iter().map(|(k, v)| (k.clone(), v.as_str().unwrap().to_owned())).collect());
    let rv = s("ReturnValuesOnConditionCheckFailure")
        .map(|v| aws_sdk_dynamodb::types::ReturnValuesOnConditionCheckFailure::from(v.as_str()));
    let t = s("TableName").unwrap();
    match op.as_str() {
        "Put" => aws_sdk_dynamodb::types::TransactWriteItem::builder()
            .put(
                aws_sdk_dynamodb::types::Put::builder()
                    .table_name(t)
                    .set_item(item("Item"))
                    .set_condition_expression(s("ConditionExpression"))
                    .set_expression_attribute_names(names)
                    .set_expression_attribute_values(item("ExpressionAttributeValues"))
                    .set_return_values_on_condition_check_failure(rv)
                    .build()
                    .unwrap(),
            )
            .build(),
        "Update" => aws_sdk_dynamodb::types::TransactWriteItem::builder()
            .update(
                aws_sdk_dynamodb::types::Update::builder()
                    .table_name(t)
                    .set_key(item("Key"))
                    .set_update_expression(s("UpdateExpression"))
                    .set_condition_expression(s("ConditionExpression"))
                    .set_expression_attribute_names(names)
                    .set_expression_attribute_values(item("ExpressionAttributeValues"))
                    .set_return_values_on_condition_check_failure(rv)
                    .build()
                    .unwrap(),
            )
            .build(),
        "Delete" => aws_sdk_dynamodb::types::TransactWriteItem::builder()
            .delete(
                aws_sdk_dynamodb::types::Delete::builder()
                    .table_name(t)
                    .set_key(item("Key"))
                    .set_condition_expression(s("ConditionExpression"))
                    .set_expression_attribute_names(names)
                    .set_expression_attribute_values(item("ExpressionAttributeValues"))
                    .set_return_values_on_condition_check_failure(rv)
                    .build()
                    .unwrap(),
            )
            .build(),
        _ => aws_sdk_dynamodb::types::TransactWriteItem::builder()
            .condition_check(
                aws_sdk_dynamodb::types::ConditionCheck::builder()
                    .table_name(t)
                    .set_key(item("Key"))
                    .set_condition_expression(s("ConditionExpression"))
                    .set_expression_attribute_names(names)
                    .set_expression_attribute_values(item("ExpressionAttributeValues"))
                    .set_return_values_on_condition_check_failure(rv)
                    .build()
                    .unwrap(),
            )
            .build(),
    }
}

/// DynamoDB JSON as the SDK's attribute values, checking nothing DynamoDB checks: what a caller sends, for DynamoDB
/// itself to judge.
pub fn raw_item(v: &Value) -> Item {
    v.as_object().unwrap().iter().map(|(k, v)| (k.clone(), raw_value(v))).collect()
}

fn raw_value(v: &Value) -> aws_sdk_dynamodb::types::AttributeValue {
    use aws_sdk_dynamodb::types::AttributeValue as A;
    let (t, x) = v.as_object().unwrap().iter().next().unwrap();
    let strs = || x.as_array().unwrap().iter().map(|s| s.as_str().unwrap().to_owned()).collect::<Vec<_>>();
    let blob = |s: &str| {
        use base64::Engine as _;
        aws_sdk_dynamodb::primitives::Blob::new(base64::engine::general_purpose::STANDARD.decode(s).unwrap())
    };
    match t.as_str() {
        "S" => A::S(x.as_str().unwrap().to_owned()),
        "N" => A::N(x.as_str().unwrap().to_owned()),
        "B" => A::B(blob(x.as_str().unwrap())),
        "BOOL" => A::Bool(x.as_bool().unwrap()),
        "NULL" => A::Null(x.as_bool().unwrap()),
        "M" => A::M(raw_item(x)),
        "L" => A::L(x.as_array().unwrap().iter().map(raw_value).collect()),
        "SS" => A::Ss(strs()),
        "NS" => A::Ns(strs()),
        _ => A::Bs(strs().iter().map(|s| blob(s)).collect()),
    }
}

/// The settings every environment's store starts from: steps fanned out as a deployed stack runs them
/// ([`Config::fan_out`]), here three shares of one batch each, so that the suites' transactions of a few batches run
/// their lock, apply and rollback steps in shares side by side.
pub fn fanned(c: Config) -> Config {
    Config { fan_out: 3, share_batches: 1, ..c }
}

/// `{"S": s}`.
pub fn sv(s: &str) -> Value {
    serde_json::json!({ "S": s })
}
/// `{"N": n}`.
pub fn nv(n: i64) -> Value {
    serde_json::json!({ "N": n.to_string() })
}
