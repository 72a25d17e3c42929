//! The benchmark behind `tools/bench.sh`: what an atomic write of N items costs with dynamo-saga, against the ways to
//! do without it, all measured in one run on DynamoDB Local. It writes `docs/benchmarks.md`, `docs/benchmarks.json`
//! and `docs/benchmarks.svg`.
//!
//! For each kind of action (updates of existing items, inserts, deletes, condition checks) and each size, four ways
//! of writing the same request:
//! - `dynamo-saga`: the in-process coordinator, over the same phases the Lambdas run;
//! - `native`: one `TransactWriteItems` call (100 actions at most);
//! - `chunked`: `TransactWriteItems` calls of 100 actions one after another: not atomic as a whole;
//! - `Java library`: the Java dynamodb-transactions library's protocol, one item at a time ([`harness::java_library`]).
//!
//! Each runs twice on fresh items: on a billing store, for the capacity DynamoDB's rules charge
//! ([`dynamo_saga::billing`]: DynamoDB Local under-reports transactional capacity), and on a plain store, for the wall
//! time. With the local stack's settings in the environment (`LAMBDA_ENDPOINT`, ...), it also runs updates through the
//! state machine and counts state transitions; and it measures the functions' init time and, when built, zip sizes.
//!
//! Contention: bank transfers sent by 8 clients at a time over 50 shared accounts. 32 transfers of 2 to 99 accounts
//! (so native can run them) by native `TransactWriteItems` with client retries, by dynamo-saga in-process and through
//! the state machine; and 16 transfers of 2 to 150 accounts, beyond native, by dynamo-saga both ways: transfers
//! committed per second and the time each took to end.

mod lost;
mod model;
mod mrsc;
mod per_request;
mod small;
mod snapshot;

use harness::cpu::{CpuMeter, CpuPerAction, WriteCpu};
use harness::trips::{modelled_ms, traced_store, Model, Tracer};
use std::path::{Path, PathBuf};
use std::time::Instant;

use dynamo_saga::billing::Bill;
use dynamo_saga::store::Transacted;
use dynamo_saga::value::{item_from_json, item_size};
use dynamo_saga::{Coordinator, Store};
use harness::java_library;
use harness::{create_table, native_item, nv, put_all, sv, Env};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

/// DynamoDB on-demand in US East (N. Virginia): $0.625 per million write request units and $0.125 per million read
/// request units.
const USD_PER_WRITE_UNIT: f64 = 0.625 / 1_000_000.0;
const USD_PER_READ_UNIT: f64 = 0.125 / 1_000_000.0;

/// What a bill's capacity costs on demand, in USD.
fn dynamodb_usd(b: &Bill) -> f64 {
    b.write_units * USD_PER_WRITE_UNIT + b.read_units * USD_PER_READ_UNIT
}

/// Step Functions Standard Workflows: USD per state transition ($0.025 per 1,000).
const USD_PER_TRANSITION: f64 = 0.025 / 1000.0;
/// Express Workflows in US East (N. Virginia): $1.00 per million executions, and $0.00001667 per GB-second for the
/// first 1,000 GB-hours a month, billed in 100 ms steps and 64 MB steps of memory (64 MB at least).
const USD_PER_EXPRESS_EXECUTION: f64 = 1.0 / 1_000_000.0;
const USD_PER_EXPRESS_GB_SECOND: f64 = 0.000_016_67;

/// Lambda on arm64 in US East (N. Virginia): $0.0000133334 per GB-second (billed per ms) and $0.20 per million
/// requests.
const USD_PER_LAMBDA_GB_SECOND: f64 = 0.000_013_333_4;
const USD_PER_LAMBDA_REQUEST: f64 = 0.20 / 1_000_000.0;

/// What `calls` Lambda invocations lasting `total_ms` in all cost at `memory_mb`.
fn lambda_calls_usd(calls: usize, total_ms: u64, memory_mb: u64) -> f64 {
    total_ms as f64 / 1000.0 * memory_mb as f64 / 1024.0 * USD_PER_LAMBDA_GB_SECOND
        + calls as f64 * USD_PER_LAMBDA_REQUEST
}

/// What an Express execution of `duration_ms` costs at the smallest memory step, 64 MB.
fn express_usd(duration_ms: u64) -> f64 {
    let billed_s = duration_ms.div_ceil(100).max(1) as f64 / 10.0;
    USD_PER_EXPRESS_EXECUTION + billed_s * (64.0 / 1024.0) * USD_PER_EXPRESS_GB_SECOND
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Kind {
    Update,
    Upsert,
    Insert,
    Delete,
    Check,
}

impl Kind {
    fn all() -> [Kind; 5] {
        [Kind::Update, Kind::Upsert, Kind::Insert, Kind::Delete, Kind::Check]
    }
    fn name(self) -> &'static str {
        match self {
            Kind::Update => "update",
            Kind::Upsert => "upsert",
            Kind::Insert => "insert",
            Kind::Delete => "delete",
            Kind::Check => "check",
        }
    }
    fn title(self) -> &'static str {
        match self {
            Kind::Update => "Updates of existing items",
            Kind::Upsert => "Updates of items that do not exist yet (upserts)",
            Kind::Insert => "Inserts",
            Kind::Delete => "Deletes",
            Kind::Check => "Condition checks",
        }
    }
    /// Whether the items must exist before the transaction.
    fn seeded(self) -> bool {
        !matches!(self, Kind::Insert | Kind::Upsert)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
enum Method {
    #[serde(rename = "dynamo-saga")]
    Saga,
    #[serde(rename = "native")]
    Native,
    #[serde(rename = "chunked")]
    Chunked,
    #[serde(rename = "java-library", alias = "seed 000")]
    JavaLibrary,
}

impl Method {
    fn all() -> [Method; 4] {
        [Method::Saga, Method::Native, Method::Chunked, Method::JavaLibrary]
    }
    fn name(self) -> &'static str {
        match self {
            Method::Saga => "dynamo-saga",
            Method::Native => "native",
            Method::Chunked => "chunked",
            Method::JavaLibrary => "Java library",
        }
    }
    fn tag(self) -> &'static str {
        match self {
            Method::Saga => "saga",
            Method::Native => "native",
            Method::Chunked => "chunk",
            Method::JavaLibrary => "jlib",
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Row {
    kind: Kind,
    actions: usize,
    method: Method,
    /// From the billing pass.
    bill: Option<Bill>,
    /// From the plain pass.
    wall_ms: Option<f64>,
    /// The plain pass's wall time under the reference latency model ([`Model::REFERENCE`]).
    #[serde(default)]
    modelled_wall_ms: Option<f64>,
    /// Why a figure is missing.
    note: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct MachineRow {
    actions: usize,
    transitions: u64,
    history_events: u64,
    lambda_calls: u64,
    duration_ms: u64,
    usd: f64,
    /// The Lambda calls' cost at each function's deployed `MemorySize`, on the local stack's call times.
    #[serde(default)]
    lambda_usd: f64,
    /// Under the reference latency model: the same transaction run as the state machine runs it, each phase call as
    /// its Lambda runs it (`lambda::handle`, in this process on a tracing client), its traced requests weighed by the
    /// model plus [`Model::LAMBDA_CALL_MS`] for each call; and the same until the call that committed it.
    #[serde(default)]
    modelled_wall_ms: Option<f64>,
    #[serde(default)]
    modelled_commit_ms: Option<f64>,
}

/// The largest transaction the template allows, staged through the API function and run through the state machine
/// on a stack of optimised function builds.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct LargestRun {
    /// When it ran.
    written: String,
    actions: usize,
    item_bytes: usize,
    /// The request's JSON, in bytes, and the chunks it was appended in.
    request_bytes: usize,
    chunks: usize,
    /// The slowest `PUT .../chunks/{chunk}` call, all of them, and the seal call, wall time (ms).
    append_max_ms: u64,
    append_total_ms: u64,
    seal_ms: u64,
    transitions: u64,
    history_events: u64,
    lambda_calls: u64,
    duration_ms: u64,
    /// What DynamoDB Local reported for the transaction's calls (low for its transactional calls).
    write_units_reported: f64,
    read_units_reported: f64,
    functions: Vec<FunctionUse>,
}

/// One function's calls in the largest run, with its deployed settings from `template.yaml`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct FunctionUse {
    function: String,
    calls: usize,
    max_ms: u64,
    total_ms: u64,
    /// CPU time of the function's processes over the run (user and system), from the first append on.
    cpu_ms: u64,
    /// Peak resident memory of the function's process (what Lambda reports as Max Memory Used).
    peak_mib: f64,
    memory_mb: u64,
    timeout_s: u64,
}

/// One way of running the contention workload.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ContentionRow {
    #[serde(default)]
    workload: String,
    way: String,
    transfers: usize,
    committed: usize,
    /// Refused by their own condition (`bal >= :need`).
    refused: usize,
    /// Ended otherwise (a wait past `LockWaitSeconds` or the deadline).
    gave_up: usize,
    /// Attempts in all (native: calls sent).
    attempts: u64,
    elapsed_ms: f64,
    committed_per_s: f64,
    p50_ms: f64,
    p99_ms: f64,
}

/// DynamoDB round trips on the critical path of one run: the longest chain of requests each sent after the one
/// before it was answered.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct TripRow {
    /// What the actions do (updates of existing items unless said).
    #[serde(default = "update")]
    kind: Kind,
    actions: usize,
    method: Method,
    /// The in-flight limit (`SAGA_IN_FLIGHT`); the other ways send one call at a time.
    in_flight: usize,
    calls: usize,
    round_trips: usize,
    wall_ms: f64,
    /// The traced run under the reference latency model ([`Model::REFERENCE`]).
    #[serde(default)]
    modelled_wall_ms: f64,
    /// The same run under each model of [`Model::SENSITIVITY`].
    #[serde(default)]
    sensitivity: Vec<Modelled>,
    /// The in-flight limit is the default (`SAGA_IN_FLIGHT` unset): the row a deployment gets.
    #[serde(default)]
    default: bool,
    /// Three more runs on fresh items, on DynamoDB Local and through the delay proxy (`tools/ddb-proxy.mjs`,
    /// [`PROXY_DELAY_MS`] added to each request): median wall times, for the baselines and the default limit.
    #[serde(default)]
    plain_median_ms: Option<f64>,
    #[serde(default)]
    proxy_median_ms: Option<f64>,
    /// The CPU time per action of the three runs on DynamoDB Local: DynamoDB Local's and the client's.
    #[serde(default)]
    plain_cpu: Option<CpuPerAction>,
    /// When the transaction committed (the answer of its commit write), from its start: from then on committed reads
    /// see its values. Wall time, and under the reference model.
    #[serde(default)]
    commit_wall_ms: Option<f64>,
    #[serde(default)]
    commit_modelled_ms: Option<f64>,
}

fn update() -> Kind {
    Kind::Update
}

/// One run's wall time under one latency model.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Modelled {
    #[serde(flatten)]
    model: Model,
    modelled_wall_ms: f64,
}

/// The network delay the delay proxy adds to each request.
const PROXY_DELAY_MS: u64 = 5;

/// Committed reads of items a committed transaction of updates has not applied yet, one way
/// (`SAGA_COMMITTED_READS`): the reads, the same items read again, and the apply that then finishes the transaction.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ReadRow {
    actions: usize,
    way: String,
    reads: usize,
    first: Bill,
    first_ms: f64,
    again: Bill,
    again_ms: f64,
    /// The transaction's own apply, complete and release after the reads.
    finish: Bill,
}

/// The visit of a finished transaction that may have had writes in flight when it ended ([`dynamo_saga::Revisit`]), and
/// what it cost, billed by DynamoDB's rules: the transaction's driver died after claiming the lock phase, another
/// coordinator committed it, and the visit found nothing of it left (the common case) or one late lock.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RevisitRow {
    actions: usize,
    /// Items the visit read, and those it cleared.
    items: usize,
    cleared: usize,
    visit: Bill,
    visit_ms: f64,
    /// The transaction itself (its takeover driver's calls), for scale.
    transaction: Bill,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct FunctionRow {
    function: String,
    zip_bytes: Option<u64>,
    init_ms: Option<f64>,
}

struct Args {
    sizes: Vec<usize>,
    kinds: Vec<Kind>,
    item_bytes: usize,
    out: PathBuf,
    java_library_max: usize,
    /// Measure the functions again and rewrite the report with the other figures of the last run (its JSON).
    functions_only: bool,
    /// Measure contention again and rewrite the report with the other figures of the last run (its JSON).
    contention_only: bool,
    /// Run only the largest transaction through the state machine and rewrite the report with the other figures of
    /// the last run (its JSON).
    largest_only: bool,
    largest_actions: usize,
    /// Measure committed reads again and rewrite the report with the other figures of the last run (its JSON).
    reads_only: bool,
    revisit_only: bool,
    /// Stage and seal only the largest request the API function takes (inserts of `item_bytes`-byte items), and
    /// rewrite the report with the other figures of the last run (its JSON).
    seal_only: bool,
    seal_actions: usize,
    /// In-flight limits the round-trip pass runs dynamo-saga with.
    in_flight: Vec<usize>,
    /// A full run keeps the last run's largest transaction instead of leaving it out (`tools/bench.sh` runs it after).
    keep_largest: bool,
    /// Measure CPU per request and the model with CPU again, and rewrite the report with the other figures of the
    /// last run (its JSON).
    cpu_only: bool,
    /// Runs of each way for CPU per request.
    cpu_runs: usize,
    /// Measure small requests' orchestration again (needs the local stack), likewise.
    small_only: bool,
    /// Run only MRSC mode beside the single-Region protocol ([`mrsc`]).
    mrsc_only: bool,
    /// Run only lost answers through the state machine ([`lost`]), on a stack of its own.
    lost_only: bool,
    snapshot_only: bool,
    /// Measure nothing: write the report again from the last run's JSON (after a change to how it is written).
    render_only: bool,
}

fn args() -> Args {
    let mut a = Args {
        sizes: vec![10, 100, 1000, 10_000],
        kinds: Kind::all().to_vec(),
        item_bytes: 940,
        out: harness::root().join("docs"),
        java_library_max: 10_000,
        functions_only: false,
        contention_only: false,
        largest_only: false,
        largest_actions: 100_000,
        reads_only: false,
        revisit_only: false,
        seal_only: false,
        seal_actions: 100_000,
        in_flight: vec![16, 64, 256],
        keep_largest: false,
        cpu_only: false,
        cpu_runs: 9,
        small_only: false,
        mrsc_only: false,
        lost_only: false,
        snapshot_only: false,
        render_only: false,
    };
    let mut it = std::env::args().skip(1);
    let usage = "usage: bench [--sizes 10,100,1000,10000] [--kinds update,upsert,insert,delete,check] [--item-bytes 940] [--java-library-max N] [--in-flight 16,64,256] [--out DIR] [--functions-only | --contention-only | --largest-only [--largest-actions 100000] | --seal-only [--seal-actions 100000] | --reads-only | --revisit-only | --cpu-only [--cpu-runs 9] | --small-only | --mrsc-only | --lost-only | --render-only | --keep-largest]";
    while let Some(flag) = it.next() {
        let mut value = || it.next().unwrap_or_else(|| panic!("{flag} needs a value\n{usage}"));
        match flag.as_str() {
            "--sizes" => a.sizes = value().split(',').map(|s| s.trim().parse().expect("a size")).collect(),
            "--kinds" => {
                a.kinds = value()
                    .split(',')
                    .map(|k| {
                        *Kind::all()
                            .iter()
                            .find(|x| x.name() == k.trim())
                            .unwrap_or_else(|| panic!("unknown kind {k}\n{usage}"))
                    })
                    .collect()
            }
            "--item-bytes" => a.item_bytes = value().parse().expect("a number of bytes"),
            "--java-library-max" => a.java_library_max = value().parse().expect("a number of actions"),
            "--in-flight" => {
                a.in_flight = value().split(',').map(|s| s.trim().parse().expect("an in-flight limit")).collect()
            }
            "--out" => a.out = PathBuf::from(value()),
            "--functions-only" => a.functions_only = true,
            "--contention-only" => a.contention_only = true,
            "--largest-only" => a.largest_only = true,
            "--keep-largest" => a.keep_largest = true,
            "--largest-actions" => a.largest_actions = value().parse().expect("a number of actions"),
            "--seal-only" => a.seal_only = true,
            "--reads-only" => a.reads_only = true,
            "--revisit-only" => a.revisit_only = true,
            "--cpu-only" => a.cpu_only = true,
            "--cpu-runs" => a.cpu_runs = value().parse().expect("a number of runs"),
            "--small-only" => a.small_only = true,
            "--lost-only" => a.lost_only = true,
            "--snapshot-only" => a.snapshot_only = true,
            "--mrsc-only" => a.mrsc_only = true,
            "--render-only" => a.render_only = true,
            "--seal-actions" => a.seal_actions = value().parse().expect("a number of actions"),
            "-h" | "--help" => {
                println!("{usage}");
                std::process::exit(0)
            }
            other => panic!("unknown argument {other}\n{usage}"),
        }
    }
    a
}

/// An item of exactly `bytes` bytes by DynamoDB's size rules: `pk`, a counter `v` and a filler of letters and
/// digits that differ from item to item, so that stored copies of it (request pages) deflate no better than real data.
fn item(key: &str, bytes: usize) -> Value {
    let bare = json!({"pk": sv(key), "v": nv(0), "payload": sv("")});
    let size = item_size(&item_from_json(&bare).unwrap());
    assert!(bytes > size, "--item-bytes must be more than {size}");
    json!({"pk": sv(key), "v": nv(0), "payload": sv(&filler(key, bytes - size))})
}

/// `n` letters and digits drawn from a generator seeded by `key`.
fn filler(key: &str, n: usize) -> String {
    let mut x = key.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"[(x % 62) as usize] as char
        })
        .collect()
}

fn action(kind: Kind, table: &str, key: &str, bytes: usize) -> Value {
    let k = json!({"pk": sv(key)});
    match kind {
        Kind::Update => json!({"Update": {"TableName": table, "Key": k, "UpdateExpression": "SET v = v + :one",
            "ConditionExpression": "attribute_exists(pk)", "ExpressionAttributeValues": {":one": nv(1)}}}),
        // A counter that starts at the first update, as `ADD` starts one.
        Kind::Upsert => json!({"Update": {"TableName": table, "Key": k, "UpdateExpression": "ADD v :one",
            "ExpressionAttributeValues": {":one": nv(1)}}}),
        Kind::Insert => {
            json!({"Put": {"TableName": table, "Item": item(key, bytes), "ConditionExpression": "attribute_not_exists(pk)"}})
        }
        Kind::Delete => {
            json!({"Delete": {"TableName": table, "Key": k, "ConditionExpression": "attribute_exists(pk)"}})
        }
        Kind::Check => {
            json!({"ConditionCheck": {"TableName": table, "Key": k, "ConditionExpression": "attribute_exists(pk)"}})
        }
    }
}

/// Seeds the items a run needs and returns its request.
async fn prepare(env: &Env, kind: Kind, n: usize, prefix: &str, bytes: usize) -> Value {
    let keys: Vec<String> = (0..n).map(|i| format!("{prefix}-{i:06}")).collect();
    if kind.seeded() {
        put_all(&env.client, &env.a, keys.iter().map(|k| item(k, bytes))).await;
    }
    json!({"TransactItems": keys.iter().map(|k| action(kind, &env.a, k, bytes)).collect::<Vec<_>>()})
}

async fn transact_all(store: &Store, body: &Value) -> Result<(), String> {
    let m = dynamo_saga::store::Meter::default();
    let items = body["TransactItems"].as_array().unwrap();
    for chunk in items.chunks(100) {
        let req = store.client.transact_write_items().set_transact_items(Some(chunk.iter().map(native_item).collect()));
        match store.transact(&m, req).await.map_err(|e| e.to_string())? {
            Transacted::Done => {}
            other => return Err(format!("{other:?}")),
        }
    }
    Ok(())
}

/// Runs `body` one way on `store`; `Err` says why it could not.
async fn run(env: &Env, store: &Store, method: Method, body: &Value, tx_name: &str) -> Result<(), String> {
    match method {
        Method::Saga => Coordinator::new(store.clone()).run(body).await.map(|_| ()).map_err(|e| e.to_string()),
        Method::Native | Method::Chunked => transact_all(store, body).await,
        Method::JavaLibrary => {
            let t = java_library::Tables { tx: format!("{}-s000tx", env.a), images: format!("{}-s000img", env.a) };
            let r = java_library::run(store, &t, tx_name, body).await;
            match r.error {
                None => Ok(()),
                Some(e) if e.contains("Item size") || e.contains("maximum allowed size") => {
                    Err(format!("the TX record outgrew DynamoDB's 400 KB item limit after {} actions", r.actions_done))
                }
                Some(e) => Err(format!("failed after {} actions: {e}", r.actions_done)),
            }
        }
    }
}

async fn measure(env: &Env, a: &Args, kind: Kind, n: usize, method: Method) -> Row {
    let mut row = Row { kind, actions: n, method, bill: None, wall_ms: None, modelled_wall_ms: None, note: None };
    if method == Method::Native && n > 100 {
        row.note = Some("TransactWriteItems takes at most 100 actions".into());
        return row;
    }
    if method == Method::JavaLibrary && n > a.java_library_max {
        row.note = Some(format!("not run (--java-library-max {})", a.java_library_max));
        return row;
    }
    // The capacity pass, on a billing store.
    let body = prepare(env, kind, n, &format!("{}-bill", method.tag()), a.item_bytes).await;
    let billing = env.store.with_billing();
    match run(env, &billing, method, &body, &format!("{}-{}-{n}-bill", kind.name(), method.tag())).await {
        Ok(()) => row.bill = billing.bill(),
        Err(e) => {
            row.note = Some(e);
            return row;
        }
    }
    // The timing pass, on fresh items and a plain store whose client notes every request for the latency model.
    let body = prepare(env, kind, n, &format!("{}-time", method.tag()), a.item_bytes).await;
    let tracer = Tracer::default();
    let store = traced_store(env, &tracer, env.store.cfg.concurrency);
    let started = Instant::now();
    match run(env, &store, method, &body, &format!("{}-{}-{n}-time", kind.name(), method.tag())).await {
        Ok(()) => {
            row.wall_ms = Some(started.elapsed().as_secs_f64() * 1000.0);
            row.modelled_wall_ms = Some(modelled_ms(&tracer.traced(), Model::REFERENCE));
        }
        Err(e) => row.note = Some(e),
    }
    row
}

/// A store like `env`'s whose client notes every request in `tracer`, with `in_flight` requests at most in flight.
/// Updates of `n` items through the state machine on the local stack.
async fn machine(n: usize, bytes: usize) -> MachineRow {
    let env = Env::on_stack(&format!("bsm{n}")).await;
    let body = prepare(&env, Kind::Update, n, "sm", bytes).await;
    let st = harness::stack::stack().await;
    let ex = st.execute(&body).await;
    assert_eq!(ex.status, "SUCCEEDED", "{n} updates through the state machine: {ex:?}");
    let settings = deployed_settings();
    let lambda_usd = ex
        .task_ms
        .iter()
        .map(|(f, calls)| {
            let memory_mb = settings.get(f).unwrap_or_else(|| panic!("{f} is not in template.yaml")).0;
            lambda_calls_usd(calls.len(), calls.iter().sum(), memory_mb)
        })
        .sum();
    MachineRow {
        actions: n,
        transitions: ex.transitions,
        history_events: ex.history_events,
        lambda_calls: ex.task_calls,
        duration_ms: ex.duration_ms,
        usd: ex.transitions as f64 * USD_PER_TRANSITION,
        lambda_usd,
        modelled_wall_ms: None,
        modelled_commit_ms: None,
    }
}

/// `n` updates run as the state machine runs them, each phase call as its Lambda runs it (`lambda::handle`) on a store
/// whose client traces its requests: (modelled wall time, modelled time to the end of the call that committed), each
/// with [`Model::LAMBDA_CALL_MS`] for every call up to then.
async fn machine_modelled(env: &Env, n: usize, bytes: usize) -> (f64, f64) {
    use dynamo_saga::lambda::{handle, Budget, Phase};
    let body = prepare(env, Kind::Update, n, "smm", bytes).await;
    let tracer = Tracer::default();
    let store = traced_store(env, &tracer, default_in_flight());
    let budget = || Budget { until: Instant::now() + std::time::Duration::from_secs(50), max_steps: Budget::MAX_STEPS };
    let mut out = handle(&store, Phase::Begin, &body, budget()).await.expect("Begin");
    let (mut calls, mut committed_at) = (1usize, None);
    let mut commit_traced = 0;
    loop {
        if out.state == dynamo_saga::TxState::Committed && committed_at.is_none() {
            committed_at = Some(calls);
            commit_traced = tracer.traced().len();
        }
        let phase = match out.step.as_str() {
            "Finished" => break,
            "Lock" => Phase::Lock,
            "Save" => Phase::Save,
            "Commit" => Phase::Commit,
            "Apply" => Phase::Apply,
            "Complete" => Phase::Complete,
            "Release" => Phase::Release,
            other => panic!("{n} updates as the state machine runs them: step {other}"),
        };
        out = handle(&store, phase, &json!({"TransactionId": out.transaction_id, "Waits": out.waits}), budget())
            .await
            .expect("a phase call");
        calls += 1;
    }
    let traced = tracer.traced();
    let lambda = |c: usize| c as f64 * Model::LAMBDA_CALL_MS;
    let committed_at = committed_at.expect("committed");
    (
        modelled_ms(&traced, Model::REFERENCE) + lambda(calls),
        modelled_ms(&traced[..commit_traced], Model::REFERENCE) + lambda(committed_at),
    )
}

/// The round-trip pass: `n` actions of `kind` run by `method` on a store whose client notes when each DynamoDB
/// request went out and when its answer came back, with `in_flight` requests at most in flight per phase call.
async fn round_trips(env: &Env, kind: Kind, n: usize, method: Method, in_flight: usize, bytes: usize) -> TripRow {
    let tracer = Tracer::default();
    let store = traced_store(env, &tracer, in_flight);
    let body = prepare(env, kind, n, &format!("{}-{}-trip{in_flight}", kind.name(), method.tag()), bytes).await;
    let started = Instant::now();
    run(env, &store, method, &body, &format!("{}-{}-{n}-trip{in_flight}", kind.name(), method.tag()))
        .await
        .unwrap_or_else(|e| panic!("{n} {}s, {}: {e}", kind.name(), method.name()));
    let wall_ms = started.elapsed().as_secs_f64() * 1000.0;
    let commit_wall_ms = tracer
        .traced()
        .iter()
        .filter(|t| t.commits)
        .map(|t| t.answered.duration_since(started).as_secs_f64() * 1000.0)
        .reduce(f64::min);
    let traced = tracer.traced();
    let calls = tracer.calls();
    let sensitivity = Model::SENSITIVITY
        .iter()
        .map(|&model| Modelled { model, modelled_wall_ms: modelled_ms(&traced, model) })
        .collect();
    TripRow {
        kind,
        actions: n,
        method,
        in_flight,
        calls: calls.len(),
        round_trips: harness::trips::critical_path(&calls),
        wall_ms,
        modelled_wall_ms: modelled_ms(&traced, Model::REFERENCE),
        sensitivity,
        default: method == Method::Saga && in_flight == default_in_flight(),
        plain_median_ms: None,
        proxy_median_ms: None,
        plain_cpu: None,
        commit_wall_ms: (method == Method::Saga).then_some(commit_wall_ms).flatten(),
        commit_modelled_ms: (method == Method::Saga)
            .then(|| harness::trips::modelled_commit_ms(&traced, Model::REFERENCE))
            .flatten(),
    }
}

/// `SAGA_IN_FLIGHT`'s default.
fn default_in_flight() -> usize {
    dynamo_saga::Config::new("t").concurrency
}

/// The median wall time of three runs of `n` updates by `method` on `store`, each on fresh items, and the CPU time
/// per action of the three runs: DynamoDB Local's (when this machine runs it) and this process's.
async fn median_of_3(
    env: &Env,
    store: &Store,
    n: usize,
    method: Method,
    tag: &str,
    bytes: usize,
) -> (f64, CpuPerAction) {
    let pid = harness::cpu::dynamodb_local_pid(&harness::endpoint().await);
    let mut ms = Vec::new();
    let mut cpu = CpuPerAction::default();
    for i in 0..3 {
        let body = prepare(env, Kind::Update, n, &format!("{}-{tag}{i}", method.tag()), bytes).await;
        let meter = CpuMeter::start(pid);
        let started = Instant::now();
        run(env, store, method, &body, &format!("update-{}-{n}-{tag}{i}", method.tag()))
            .await
            .unwrap_or_else(|e| panic!("{n} updates, {}: {e}", method.name()));
        ms.push(started.elapsed().as_secs_f64() * 1000.0);
        let (dynamodb, client) = meter.elapsed_ms();
        cpu.dynamodb_ms += dynamodb.unwrap_or(f64::NAN) / (3 * n) as f64;
        cpu.client_ms += client / (3 * n) as f64;
    }
    ms.sort_by(f64::total_cmp);
    (ms[1], cpu)
}

/// The committed-read pass: `n` updates driven to their commit and stopped before apply, then 100 of their items
/// (spread over every batch) read at the committed level one after another, twice, then the transaction finished;
/// each item must then hold its update once.
async fn committed_reads(env: &Env, n: usize, way: dynamo_saga::config::CommittedReads, bytes: usize) -> ReadRow {
    use dynamo_saga::phase::resume::Step;
    let name = format!("{way:?}").to_lowercase();
    let cfg = dynamo_saga::Config { committed_reads: way, direct: false, ..(*env.store.cfg).clone() };
    let store = Store::new(env.client.clone(), cfg);
    let prefix = format!("read-{name}-{n}");
    let body = prepare(env, Kind::Update, n, &prefix, bytes).await;
    let id = dynamo_saga::phase::begin::begin(&store, &body).await.expect("begins").transaction_id;
    let (_, step) =
        harness::run_steps_until(&store, &id, |_, step| !matches!(step, Step::Lock(_) | Step::Save(_) | Step::Commit))
            .await;
    assert!(matches!(step, Step::Apply(_)), "{n} updates: {step:?} after the commit, not the apply");
    let reads = n.min(100);
    let keys: Vec<_> = (0..reads)
        .map(|i| item_from_json(&json!({"pk": sv(&format!("{prefix}-{:06}", i * n / reads))})).unwrap())
        .collect();
    // The reader is another process than the one that ran the transaction: a store of its own, which has kept no plan
    // or page of it.
    let reader = Store::new(env.client.clone(), store.cfg.as_ref().clone());
    let pass = || async {
        let billing = reader.with_billing();
        let started = Instant::now();
        for k in &keys {
            let item =
                dynamo_saga::read::get_item(&billing, &env.a, k.clone(), dynamo_saga::read::Isolation::Committed)
                    .await
                    .expect("reads");
            assert_eq!(
                item.and_then(|i| i.get("v").cloned()),
                Some(aws_sdk_dynamodb::types::AttributeValue::N("1".into())),
                "{name}: the committed value"
            );
        }
        (billing.bill().unwrap_or_default(), started.elapsed().as_secs_f64() * 1000.0 / reads as f64)
    };
    let (first, first_ms) = pass().await;
    let (again, again_ms) = pass().await;
    let billing = store.with_billing();
    Coordinator::new(billing.clone()).drive(&id).await.expect("finishes");
    for i in 0..n {
        let item = env.get(&env.a, json!({"pk": sv(&format!("{prefix}-{i:06}"))})).await.expect("the item");
        assert_eq!(
            (&item["v"], item.get("_sagaLock")),
            (&nv(1), None),
            "{name}: each update applied once and unlocked"
        );
    }
    ReadRow {
        actions: n,
        way: name,
        reads,
        first,
        first_ms,
        again,
        again_ms,
        finish: billing.bill().unwrap_or_default(),
    }
}

/// Each function's `MemorySize` (MB) and `Timeout` (s) in `template.yaml`, by its Handler (the name of the binary the
/// local stack runs for it): its own, else the Globals';
/// a `!Ref` to a parameter is that parameter's default.
fn deployed_settings() -> std::collections::BTreeMap<String, (u64, u64)> {
    let text = std::fs::read_to_string(harness::root().join("template.yaml")).expect("template.yaml");
    let defaults = template_defaults();
    let value = |line: &str, key: &str| {
        let v = line.trim().strip_prefix(key)?.trim();
        let v = v.strip_prefix("!Ref ").map_or(Some(v), |p| defaults.get(p.trim()).map(String::as_str))?;
        v.parse::<u64>().ok()
    };
    let (mut memory, mut timeout) = (0, 0);
    let mut in_globals = false;
    let mut out = std::collections::BTreeMap::new();
    let mut current: Option<(String, Option<u64>, Option<u64>)> = None;
    let mut finish = |c: Option<(String, Option<u64>, Option<u64>)>, memory: u64, timeout: u64| {
        if let Some((bin, m, t)) = c {
            out.insert(bin, (m.unwrap_or(memory), t.unwrap_or(timeout)));
        }
    };
    for line in text.lines() {
        if !line.starts_with(' ') && !line.is_empty() {
            in_globals = line.starts_with("Globals:");
        }
        if line.starts_with("  ") && !line.starts_with("   ") && line.trim_end().ends_with(':') {
            finish(current.take(), memory, timeout);
        }
        if in_globals {
            memory = value(line, "MemorySize:").unwrap_or(memory);
            timeout = value(line, "Timeout:").unwrap_or(timeout);
        } else if let Some(bin) = line.trim().strip_prefix("Handler:") {
            current = Some((bin.trim().to_string(), None, None));
        } else if let Some(c) = current.as_mut() {
            c.1 = value(line, "MemorySize:").or(c.1);
            c.2 = value(line, "Timeout:").or(c.2);
        }
    }
    finish(current.take(), memory, timeout);
    out
}

/// Each parameter's `Default` in `template.yaml`, by name.
fn template_defaults() -> std::collections::BTreeMap<String, String> {
    let text = std::fs::read_to_string(harness::root().join("template.yaml")).expect("template.yaml");
    let mut defaults = std::collections::BTreeMap::new();
    let mut param = None;
    for line in text
        .lines()
        .skip_while(|l| !l.starts_with("Parameters:"))
        .skip(1)
        .take_while(|l| l.is_empty() || l.starts_with(' '))
    {
        if line.starts_with("  ") && !line.starts_with("   ") {
            param = Some(line.trim().trim_end_matches(':').to_string());
        } else if let (Some(p), Some(d)) = (&param, line.trim().strip_prefix("Default:")) {
            defaults.insert(p.clone(), d.trim().trim_matches('"').to_string());
        }
    }
    defaults
}

/// The template's default for `PhaseFanOut`.
fn default_fan_out() -> usize {
    template_defaults().get("PhaseFanOut").and_then(|v| v.parse().ok()).expect("PhaseFanOut's default in template.yaml")
}

/// The largest transaction through the API function and the state machine: `n` updates staged in chunks (the request
/// is far over a Lambda payload), sealed, then run by its id. Each function's calls are timed, and its process's peak
/// memory and CPU time read from `/proc`.
async fn largest(n: usize, bytes: usize, when: &str) -> LargestRun {
    let st = harness::stack::stack().await;
    assert!(n <= st.max_actions, "the stack allows {} actions (SAGA_MAX_ACTIONS), not {n}", st.max_actions);
    let env = Env::on_stack("largest").await;
    let t = Instant::now();
    let body = prepare(&env, Kind::Update, n, "big", bytes).await;
    eprintln!("largest: {n} items of {bytes} bytes seeded in {:.0} s", t.elapsed().as_secs_f64());
    let request_bytes = body.to_string().len();
    let staged = stage(st, body["TransactItems"].as_array().unwrap()).await;
    let (id, chunks, append_max_ms, append_total_ms, before) =
        (staged.id, staged.chunks, staged.append_max_ms, staged.append_total_ms, staged.before);
    let seal = json!({"Chunks": chunks}).to_string();
    let (sealed, seal_ms) = stage_call(st, "POST", "/transactions/staged/{id}/seal", json!({"id": id}), seal).await;
    assert_eq!(sealed["Actions"].as_u64(), Some(n as u64), "{sealed}");
    eprintln!("largest: staged in {chunks} chunks (slowest append {append_max_ms} ms), sealed in {seal_ms} ms");

    let ex = st.run(&json!({ "TransactionId": id }), false, false).await;
    assert_eq!(ex.status, "SUCCEEDED", "{n} updates through the state machine: {ex:?}");
    let used = st.function_use();
    eprintln!(
        "largest: {} ({} transitions, {} Lambda calls); each function's processes: {used:?}; its calls (ms): {:?}",
        ex.status, ex.transitions, ex.task_calls, ex.task_ms
    );
    // One scan of the items (the transactions table is left alone: DynamoDB Local takes minutes a page to scan an
    // item collection of this size).
    let t = Instant::now();
    let all = env.scan(&env.a).await;
    assert_eq!(all.len(), n);
    for (k, v) in &all {
        assert_eq!(v["v"], nv(1), "{k}: every update applied exactly once");
        let left: Vec<&String> = v
            .as_object()
            .unwrap()
            .keys()
            .filter(|a| {
                a.starts_with(dynamo_saga::constants::RESERVED_PREFIX) && *a != dynamo_saga::constants::ATTR_WRITTEN_BY
            })
            .collect();
        assert!(left.is_empty(), "{k} still carries {left:?}");
    }
    eprintln!(
        "largest: {} s through the state machine; every item checked in {:.0} s",
        ex.duration_ms / 1000,
        t.elapsed().as_secs_f64()
    );
    let (metrics, lines) = st.metrics_of(&id);
    assert_eq!(lines, 1, "one metrics line for the transaction");
    let metrics = metrics.unwrap_or_default();

    let settings = deployed_settings();
    let mut functions = Vec::new();
    let mut task_ms = ex.task_ms.clone();
    task_ms.insert("saga-stage".into(), vec![seal_ms]);
    let stage_calls = 2 + chunks;
    for (function, u) in &used {
        let calls = task_ms.get(function).cloned().unwrap_or_default();
        let (memory_mb, timeout_s) = settings.get(function).copied().unwrap_or_default();
        // The API function's calls: create, every append, and the seal (the slowest).
        let (count, total) = if function == "saga-stage" {
            (stage_calls, seal_ms + append_total_ms)
        } else {
            (calls.len(), calls.iter().sum())
        };
        functions.push(FunctionUse {
            function: function.clone(),
            calls: count,
            max_ms: calls.iter().copied().max().unwrap_or(0),
            total_ms: total,
            cpu_ms: u.cpu_ms.saturating_sub(before.get(function).map_or(0, |b| b.cpu_ms)),
            peak_mib: u.peak_rss_kib as f64 / 1024.0,
            memory_mb,
            timeout_s,
        });
    }
    LargestRun {
        written: when.to_string(),
        actions: n,
        item_bytes: bytes,
        request_bytes,
        chunks,
        append_max_ms,
        append_total_ms,
        seal_ms,
        transitions: ex.transitions,
        history_events: ex.history_events,
        lambda_calls: ex.task_calls,
        duration_ms: ex.duration_ms,
        write_units_reported: metrics["WriteUnits"].as_f64().unwrap_or(0.0),
        read_units_reported: metrics["ReadUnits"].as_f64().unwrap_or(0.0),
        functions,
    }
}

/// The largest request the API function takes, staged and sealed: inserts of `item_bytes`-byte items, the request's
/// JSON near a fortieth of the template's highest `StageMemorySize` (`MEMORY_BYTES_PER_REQUEST_BYTE`), on an optimised
/// build of the function with a whole core. What `tools/check_api_timeout.py` scales to Lambda's CPU share.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct SealRun {
    written: String,
    actions: usize,
    item_bytes: usize,
    request_bytes: usize,
    chunks: usize,
    seal_ms: u64,
    /// The API function's process: peak resident memory, and CPU time over the appends and the seal.
    stage_peak_mib: f64,
    stage_cpu_ms: u64,
}

/// Stages `n` inserts of `bytes`-byte items through the API function and seals them (nothing is run after: the
/// transaction is left begun).
async fn largest_seal(n: usize, bytes: usize, when: &str) -> SealRun {
    let st = harness::stack::stack().await;
    assert!(n <= st.max_actions, "the stack allows {} actions (SAGA_MAX_ACTIONS), not {n}", st.max_actions);
    let env = Env::on_stack("seal").await;
    let body = prepare(&env, Kind::Insert, n, "seal", bytes).await;
    let request_bytes = body.to_string().len();
    let staged = stage(st, body["TransactItems"].as_array().unwrap()).await;
    let (id, chunks, before) = (staged.id, staged.chunks, staged.before);
    let seal = json!({"Chunks": chunks}).to_string();
    let (sealed, seal_ms) = stage_call(st, "POST", "/transactions/staged/{id}/seal", json!({"id": id}), seal).await;
    assert_eq!(sealed["Actions"].as_u64(), Some(n as u64), "{sealed}");
    let used = st.function_use();
    let stage = used.get("saga-stage").expect("the API function ran");
    let r = SealRun {
        written: when.to_string(),
        actions: n,
        item_bytes: bytes,
        request_bytes,
        chunks,
        seal_ms,
        stage_peak_mib: stage.peak_rss_kib as f64 / 1024.0,
        stage_cpu_ms: stage.cpu_ms.saturating_sub(before.get("saga-stage").map_or(0, |b| b.cpu_ms)),
    };
    eprintln!(
        "largest seal: {n} inserts, {:.1} MB of JSON in {chunks} chunks, sealed in {seal_ms} ms, peak {:.0} MiB",
        request_bytes as f64 / 1e6,
        r.stage_peak_mib
    );
    r
}

/// Calls the API function (`POST /transactions/staged...` routes) with an API Gateway event: its reply and how long
/// it took (ms).
async fn stage_call(
    st: &harness::stack::Stack,
    method: &'static str,
    resource: &'static str,
    params: Value,
    body: String,
) -> (Value, u64) {
    let event = harness::api::event(method, resource, params, Some(body));
    let started = Instant::now();
    let out = st.invoke("saga-stage", &event).await.unwrap_or_else(|e| panic!("{method} {resource}: {e:?}"));
    let ms = started.elapsed().as_millis() as u64;
    let code = out["statusCode"].as_u64().unwrap_or(0);
    let reply: Value = serde_json::from_str(out["body"].as_str().unwrap_or("null")).unwrap_or_default();
    assert!(code / 100 == 2, "{method} {resource}: {code} {reply}");
    (reply, ms)
}

/// A request staged through the API function.
struct Staged {
    id: String,
    chunks: usize,
    append_max_ms: u64,
    append_total_ms: u64,
    /// Each function's processes' use right after the staged transaction was created: every process is running then
    /// (the stack started them, and the create call the API function's), so what they use from here on is this
    /// transaction's.
    before: std::collections::BTreeMap<String, harness::stack::ProcessUse>,
}

/// Stages `items` through the API function in chunks of whole actions under its limit on a chunk's JSON.
async fn stage(st: &harness::stack::Stack, items: &[Value]) -> Staged {
    let mut chunks: Vec<Vec<Value>> = vec![Vec::new()];
    let mut size = 2;
    for a in items {
        let len = a.to_string().len() + 1;
        if size + len > dynamo_saga::staging::MAX_CHUNK_BYTES {
            chunks.push(Vec::new());
            size = 2;
        }
        size += len;
        chunks.last_mut().unwrap().push(a.clone());
    }
    let token = format!("bench-stage-{}-{}", std::process::id(), items.len());
    let (created, _) =
        stage_call(st, "POST", "/transactions/staged", Value::Null, json!({"ClientRequestToken": token}).to_string())
            .await;
    let id = created["TransactionId"].as_str().expect("a TransactionId").to_string();
    let before = st.function_use();
    let (mut append_max_ms, mut append_total_ms) = (0, 0);
    for (i, c) in chunks.iter().enumerate() {
        let params = json!({"id": id, "chunk": i.to_string()});
        let (_, ms) = stage_call(
            st,
            "PUT",
            "/transactions/staged/{id}/chunks/{chunk}",
            params,
            json!({ "TransactItems": c }).to_string(),
        )
        .await;
        append_max_ms = append_max_ms.max(ms);
        append_total_ms += ms;
    }
    Staged { id, chunks: chunks.len(), append_max_ms, append_total_ms, before }
}

/// The functions' Init duration as Lambda defines it: from starting the process to its first request for an event,
/// against a minimal stand-in for the Lambda Runtime API. The binary is the one `bin_dir` holds (the local stack runs
/// debug builds).
async fn init_ms(binary: &Path) -> Option<f64> {
    use tokio::io::AsyncReadExt;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.ok()?;
    let addr = listener.local_addr().ok()?;
    let mut best: Option<f64> = None;
    for _ in 0..5 {
        let started = Instant::now();
        let mut child = tokio::process::Command::new(binary)
            .env("AWS_LAMBDA_RUNTIME_API", addr.to_string())
            .env("AWS_LAMBDA_FUNCTION_NAME", binary.file_name()?.to_string_lossy().to_string())
            .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "512")
            .env("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
            .env("AWS_REGION", "us-east-1")
            .env("AWS_ACCESS_KEY_ID", "local")
            .env("AWS_SECRET_ACCESS_KEY", "local")
            .env("SAGA_TABLE", "saga-transactions")
            .env("SAGA_STATE_MACHINE_ARN", "arn:aws:states:us-east-1:000000000000:stateMachine:bench")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .ok()?;
        let accepted = tokio::time::timeout(std::time::Duration::from_secs(10), listener.accept()).await;
        let Ok(Ok((mut sock, _))) = accepted else {
            let _ = child.kill().await;
            return None;
        };
        let mut buf = [0u8; 512];
        let got = sock.read(&mut buf).await.ok()?;
        let ms = started.elapsed().as_secs_f64() * 1000.0;
        let _ = child.kill().await;
        if !String::from_utf8_lossy(&buf[..got]).contains("/runtime/invocation/next") {
            return None;
        }
        best = Some(best.map_or(ms, |b: f64| b.min(ms)));
    }
    best
}

async fn functions() -> Vec<FunctionRow> {
    let root = harness::root();
    // Package sizes `tools/check-artifacts.sh` measured on its last run (the sam build packages), by binary name.
    let checked: Value = std::fs::read_to_string(root.join(".local/artifacts.json"))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default();
    let checked_zip = |bin: &str| {
        checked["functions"].as_array()?.iter().find(|f| f["binary"] == bin).and_then(|f| f["zip_bytes"].as_u64())
    };
    let names =
        ["begin", "lock", "save", "apply", "commit", "complete", "rollback", "release", "sweeper", "stage", "status"];
    let mut rows = Vec::new();
    for f in names {
        let bin = format!("saga-{f}");
        // Every function deploys the one binary saga-functions, which runs the function its Handler names.
        let zip = root.join("target/lambda/saga-functions/bootstrap.zip");
        let debug = root.join("target/debug").join(&bin);
        rows.push(FunctionRow {
            function: bin.clone(),
            zip_bytes: std::fs::metadata(&zip).ok().map(|m| m.len()).or_else(|| checked_zip(&bin)),
            init_ms: if debug.exists() { init_ms(&debug).await } else { None },
        });
    }
    rows
}

/// The contention workloads, each run the same way (same seed, so the same transfers) by each driver on fresh accounts.
async fn contention() -> Vec<ContentionRow> {
    use harness::bank::{check, run, seed, Driver, Params};
    let mut rows = Vec::new();
    let within = Params {
        driver: Driver::Native,
        accounts: 50,
        workers: 8,
        transfers_per_worker: 4,
        min_k: 2,
        max_k: 99,
        plain_writers: 0,
        deadline_seconds: 600,
        seed: 3,
    };
    let beyond = Params { transfers_per_worker: 2, max_k: 150, ..within.clone() };
    let runs = [
        ("32 transfers of 2-99 accounts", &within, Driver::Native),
        ("32 transfers of 2-99 accounts", &within, Driver::Library),
        ("32 transfers of 2-99 accounts", &within, Driver::StateMachine),
        ("16 transfers of 2-150 accounts", &beyond, Driver::Library),
        ("16 transfers of 2-150 accounts", &beyond, Driver::StateMachine),
    ];
    for (workload, params, driver) in runs {
        if driver == Driver::StateMachine && std::env::var("LAMBDA_ENDPOINT").is_err() {
            eprintln!("contention through the state machine: skipped (no local stack; tools/bench.sh starts one)");
            continue;
        }
        let name = format!("bench-contention-{}", rows.len());
        let env = if driver == Driver::StateMachine { Env::on_stack(&name).await } else { Env::new(&name).await };
        let p = Params { driver, ..params.clone() };
        seed(&env, &p).await;
        let o = run(&env, &p).await;
        let (summary, attempts) = check(&env, &p, &o).await;
        eprintln!("contention, {}: {summary}", driver.name());
        let mut times: Vec<f64> = o.times.iter().map(|t| t.as_secs_f64() * 1000.0).collect();
        times.sort_by(f64::total_cmp);
        let pct = |q: f64| times[((times.len() as f64 * q).ceil() as usize).clamp(1, times.len()) - 1];
        let secs = o.elapsed.as_secs_f64();
        rows.push(ContentionRow {
            workload: workload.to_owned(),
            way: driver.name().to_owned(),
            transfers: p.workers * p.transfers_per_worker,
            committed: o.committed,
            refused: o.condition_failed,
            gave_up: o.gave_up,
            attempts,
            elapsed_ms: secs * 1000.0,
            committed_per_s: o.committed as f64 / secs,
            p50_ms: pct(0.5),
            p99_ms: pct(0.99),
        });
    }
    rows
}

fn f1(x: f64) -> String {
    format!("{x:.1}")
}

fn by(rows: &[Row], kind: Kind, n: usize, method: Method) -> Option<&Row> {
    rows.iter().find(|r| r.kind == kind && r.actions == n && r.method == method)
}

fn contention_markdown(rows: &[ContentionRow]) -> String {
    let mut md = String::from(
        "## Contention\n\nBank transfers (`ADD bal :d, txns :one`, debits guarded by `bal >= :need`) over 50 accounts, 8 clients at \
         a time: 32 transfers of 2 to 99 accounts, which native can run, and 16 of 2 to 150, which it cannot; the same transfers \
         (one seed) for each way, on fresh accounts. Native \
         `TransactWriteItems` is sent again by its client after a `TransactionConflict`, with backoff from 25 ms to 1.6 s, \
         until it commits or fails its condition; dynamo-saga needs no client retries: a transaction rolled back by an older \
         one tries again by itself. The in-process coordinator is this optimised build; the state machine runs on the local \
         stack (aws-local-stepfunctions, the functions as debug builds behind `cargo lambda watch`). Time to end is from \
         sending a transfer to its outcome.\n\n\
         | workload | way | transfers | committed | refused by their own condition | ended otherwise | attempts (native: calls) | committed per second | p50 time to end (ms) | p99 time to end (ms) | wall time (ms) |\n\
         | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
    );
    for r in rows {
        md.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {:.2} | {:.0} | {:.0} | {:.0} |\n",
            r.workload,
            r.way,
            r.transfers,
            r.committed,
            r.refused,
            r.gave_up,
            r.attempts,
            r.committed_per_s,
            r.p50_ms,
            r.p99_ms,
            r.elapsed_ms
        ));
    }
    md.push('\n');
    md
}

fn revisit_markdown(rows: &[RevisitRow]) -> String {
    let mut md = String::from(
        "## The visit for late writes\n\nA transaction of updates whose first driver died after claiming the lock phase (so a write of it \
         may have been in flight) is committed by another coordinator and visited again once due: every item it named is read \
         (strongly consistent, 100 a call) and whatever of it is left removed. Billed by DynamoDB's rules; per item of the \
         transaction. Only a transaction that ended with a write possibly in flight pays it.\n\n\
         | actions | items cleared | read units per item | write units per item | calls | ms | the transaction's write units per item |\n\
         | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
    );
    for r in rows {
        let per = |x: f64| x / r.actions as f64;
        md.push_str(&format!(
            "| {} | {} | {:.3} | {:.4} | {} | {:.0} | {:.3} |\n",
            r.actions,
            r.cleared,
            per(r.visit.read_units),
            per(r.visit.write_units),
            r.visit.calls,
            r.visit_ms,
            per(r.transaction.write_units)
        ));
    }
    md.push('\n');
    md
}

fn reads_markdown(rows: &[ReadRow]) -> String {
    let mut md = String::from(
        "## Committed reads before apply\n\nA transaction of updates is driven to its commit and stopped before apply; 100 of its items, spread \
         over every batch, are then read at the committed level one after another, twice, and the transaction is finished. Each way of \
         `SAGA_COMMITTED_READS`: `evaluate` works out the value the update leaves and writes nothing; `apply` applies that item's update \
         (the conditional write apply sends) and reads the item again. Units and times are per read; the apply after the reads is per \
         action of the transaction (an item a read applied costs apply a failed conditional write).\n\n\
         | actions | way | read units, first read | write units, first read | ms, first read | read units, second read | write units, second read | ms, second read | write units per action of the apply after |\n\
         | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
    );
    for r in rows {
        let per = |b: &Bill, k: usize| (b.read_units / k as f64, b.write_units / k as f64);
        let (r1, w1) = per(&r.first, r.reads);
        let (r2, w2) = per(&r.again, r.reads);
        md.push_str(&format!(
            "| {} | {} | {:.2} | {:.2} | {:.1} | {:.2} | {:.2} | {:.1} | {:.3} |\n",
            r.actions,
            r.way,
            r1,
            w1,
            r.first_ms,
            r2,
            w2,
            r.again_ms,
            r.finish.write_units / r.actions as f64
        ));
    }
    md.push('\n');
    md
}

fn trips_markdown(rows: &[TripRow]) -> String {
    let mut md = format!(
        "## Round trips on the critical path, and a latency model\n\nUpdates of existing items, run once more on fresh items by a client that notes when \
         each DynamoDB request went out and when its answer came back (`tests/src/trips.rs`). The critical path is the longest \
         chain of requests each sent after the one before it was answered: what a transaction waits for whatever DynamoDB's \
         latency, since requests sent side by side count once. dynamo-saga runs in-process at each in-flight limit \
         (`SAGA_IN_FLIGHT`, the template's `InFlightLimit`, default {default}: the most requests one phase call has in flight); \
         chunked sends its calls one after another. Each run is on a new client, so dynamo-saga's count includes one \
         `DescribeTable` of the table, which a warm process has cached. Wall time is on DynamoDB Local, one Java process \
         sharing the machine's cores with the client: its CPU per request, which a Region does not have, is most of it.\n\n\
         Two views of a real network. **Modelled**: the same traced run, each request weighed by a latency model instead of \
         timed, on the heaviest chain of requests each sent after the one before it was answered (`modelled_ms`); the client's \
         own work and DynamoDB Local's CPU drop out. AWS publishes no latency per operation, so the model is stated: the \
         reference is {call} ms a request, plus {item} ms an item for a call that carries many (`TransactWriteItems`, \
         `BatchWriteItem`, `BatchGetItem`); the sensitivity table shows how the result moves with it. **Through the delay \
         proxy**: `tools/ddb-proxy.mjs` in front of DynamoDB Local adds {delay} ms to every request; median of 3 runs, beside \
         the median of 3 without it.\n\n\
         Within one run of a phase's writes, a request waits for the one before it in its lane (`SAGA_IN_FLIGHT` lanes, each \
         sending its share of the run's writes one after another), not for another lane's answer that came first: DynamoDB \
         Local answers out of order when its CPU is busy, which a chain by timing alone would count. Time to commit is until \
         the commit write was answered, from which committed reads see the transaction's values; the rest of the run applies \
         the items. Upserts (updates of items that do not exist yet) run beside the updates at 1,000 actions and more.\n\n\
         | actions | way | in-flight limit | DynamoDB calls | round trips on the critical path | wall time (ms) | modelled (ms) | modelled vs chunked | time to commit, wall (ms) | time to commit, modelled (ms) | median, DynamoDB Local (ms) | median, through the proxy (ms) | proxy vs chunked |\n\
         | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
        default = default_in_flight(),
        call = Model::REFERENCE.per_call_ms,
        item = Model::REFERENCE.per_item_ms,
        delay = PROXY_DELAY_MS,
    );
    let chunked =
        |n: usize, kind: Kind| rows.iter().find(|r| r.actions == n && r.kind == kind && r.method == Method::Chunked);
    let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}x", a / b),
        _ => "-".into(),
    };
    let ms = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.0}"));
    // The other in-flight limits at the largest size only, where the limit matters most.
    let largest = rows.iter().map(|r| r.actions).max().unwrap_or(0);
    for r in rows.iter().filter(|r| r.method != Method::Saga || r.default || r.actions == largest) {
        let limit = match (r.method, r.default) {
            (Method::Saga, true) => format!("{} (default)", r.in_flight),
            (Method::Saga, false) => r.in_flight.to_string(),
            _ => "-".into(),
        };
        let c = chunked(r.actions, r.kind);
        let actions = match r.kind {
            Kind::Update => r.actions.to_string(),
            k => format!("{} {}s", r.actions, k.name()),
        };
        md.push_str(&format!(
            "| {} | {} | {} | {} | {} | {:.0} | {:.0} | {} | {} | {} | {} | {} | {} |\n",
            actions,
            r.method.name(),
            limit,
            r.calls,
            r.round_trips,
            r.wall_ms,
            r.modelled_wall_ms,
            ratio(Some(r.modelled_wall_ms), c.map(|c| c.modelled_wall_ms)),
            ms(r.commit_wall_ms),
            ms(r.commit_modelled_ms),
            ms(r.plain_median_ms),
            ms(r.proxy_median_ms),
            ratio(r.proxy_median_ms, c.and_then(|c| c.proxy_median_ms)),
        ));
    }
    md.push_str("\nModelled wall time of dynamo-saga at the default limit against chunked's, under each model (ms a request + ms an item):\n\n| actions |");
    for m in Model::SENSITIVITY {
        md.push_str(&format!(" {} + {} |", m.per_call_ms, m.per_item_ms));
    }
    md.push_str("\n| ---: |");
    md.push_str(&" ---: |".repeat(Model::SENSITIVITY.len()));
    md.push('\n');
    for r in rows.iter().filter(|r| r.default && r.kind == Kind::Update) {
        let Some(c) = chunked(r.actions, Kind::Update) else { continue };
        md.push_str(&format!("| {} |", r.actions));
        for (mine, theirs) in r.sensitivity.iter().zip(&c.sensitivity) {
            md.push_str(&format!(
                " {:.0} / {:.0} ({}) |",
                mine.modelled_wall_ms,
                theirs.modelled_wall_ms,
                ratio(Some(mine.modelled_wall_ms), Some(theirs.modelled_wall_ms))
            ));
        }
        md.push('\n');
    }
    md.push('\n');
    md
}

fn engine_markdown(report: &Report) -> String {
    let cores = report.cores;
    let mut md = format!(
        "## Where the time goes on DynamoDB Local\n\nDynamoDB Local is one Java process on the benchmark's own {cores} cores, and \
         most of a run's wall time there is its CPU. Measured from outside, as Linux accounts it to the process \
         (`tests/src/cpu.rs`): what it spends per item written by each kind of call, on 2,000 existing items of {bytes} bytes \
         each call kind writes once (the single-item calls {limit} at a time, `TransactWriteItems` one after another as \
         chunked sends them).\n\n\
         | call | DynamoDB Local's CPU per item (ms) | against an item of `TransactWriteItems` |\n| --- | ---: | ---: |\n",
        bytes = report.item_bytes,
        limit = default_in_flight(),
    );
    let per =
        |call: harness::cpu::WriteCall| report.engine.iter().find(|e| e.call == call).map(|e| e.dynamodb_ms_per_item);
    let transact = per(harness::cpu::WriteCall::Transact100).unwrap_or(f64::NAN);
    for e in &report.engine {
        md.push_str(&format!(
            "| {} | {:.3} | {:.2}x |\n",
            e.call.describe(),
            e.dynamodb_ms_per_item,
            e.dynamodb_ms_per_item / transact
        ));
    }
    use harness::cpu::WriteCall::*;
    let pair = |a, b| per(a).zip(per(b)).map(|(a, b)| a + b).unwrap_or(f64::NAN);
    let (protocol, partiql) = (pair(LockUpdate, ApplyUpdate), pair(PartiqlLock25, PartiqlApply25));
    md.push_str(&format!(
        "\nThe protocol writes each item twice, a lock and an apply, each a single-item call: {protocol:.3} ms of DynamoDB \
         Local's CPU an item, {:.2}x what one item of chunked's calls costs it. Were both sent as PartiQL batches of 25, \
         {partiql:.3} ms ({:.2}x).\n\n\
         The same split for the runs of 1,000 actions and more on DynamoDB Local above (the three runs of the median, CPU time per action): the \
         client is this process, the SDK's work on each request included. Shared by {cores} cores, their CPU time allows \
         no wall time below their sum divided by {cores}; chunked's calls, one after another, keep about one core busy.\n\n\
         | actions | way | DynamoDB Local (ms per action) | client (ms per action) | together, over {cores} cores (ms) | median wall time (ms) | that least wall time against chunked's median |\n\
         | ---: | --- | ---: | ---: | ---: | ---: | ---: |\n",
        protocol / transact,
        partiql / transact,
    ));
    let rows =
        report.round_trips.iter().filter(|r| r.plain_cpu.is_some() && r.kind == Kind::Update && r.actions >= 1000);
    for r in rows {
        let cpu = r.plain_cpu.unwrap_or_default();
        let chunked = report
            .round_trips
            .iter()
            .find(|c| c.actions == r.actions && c.kind == r.kind && c.method == Method::Chunked);
        let floor = (cpu.dynamodb_ms + cpu.client_ms) * r.actions as f64 / cores.max(1) as f64;
        let against = chunked.and_then(|c| c.plain_median_ms).map_or("-".into(), |c| format!("{:.2}x", floor / c));
        md.push_str(&format!(
            "| {} | {} | {:.3} | {:.3} | {:.0} | {:.0} | {} |\n",
            r.actions,
            r.method.name(),
            cpu.dynamodb_ms,
            cpu.client_ms,
            floor,
            r.plain_median_ms.unwrap_or(f64::NAN),
            against
        ));
    }
    md.push('\n');
    md
}

fn throttled_markdown(rows: &[ThrottledRow]) -> String {
    let mut md = String::from(
        "## Throttling\n\nUpdates of existing items in-process through `tools/ddb-proxy.mjs`, which answers a share of the write \
         requests with `ProvisionedThroughputExceededException` as a busy table does (a fixed share, whatever the rate), beside \
         the same through the proxy throttling none; median of 3 runs each. A throttled write is sent again after a short \
         jittered wait, and the process halves its in-flight limit meanwhile (`shared/src/dynamo/pace.rs`).\n\n\
         | actions | writes throttled | median, throttled (ms) | median, unthrottled (ms) | throttled vs unthrottled |\n\
         | ---: | ---: | ---: | ---: | ---: |\n",
    );
    for r in rows {
        md.push_str(&format!(
            "| {} | {:.0}% ({} of {}) | {:.0} | {:.0} | {:.2}x |\n",
            r.actions,
            r.share * 100.0,
            r.throttled,
            r.writes,
            r.throttled_median_ms,
            r.unthrottled_median_ms,
            r.throttled_median_ms / r.unthrottled_median_ms
        ));
    }
    md.push('\n');
    md
}

/// What the largest run's Lambda calls cost at each function's deployed `MemorySize`.
fn lambda_usd(r: &LargestRun) -> f64 {
    r.functions.iter().map(|f| lambda_calls_usd(f.calls, f.total_ms, f.memory_mb)).sum()
}

fn largest_markdown(r: &LargestRun) -> String {
    let mut md = format!(
        "## The largest transaction\n\n{} updates of {}-byte items (`MaxActions`, the most the template allows), measured on {}: a {:.1} MB \
         request, so staged through the API function (`POST /transactions/staged`, {} chunks, the slowest append {} ms; the \
         seal, which validates the request and begins the transaction in one call, {} ms), then run by its id through the \
         state machine on the local stack, the functions as optimised x86_64 builds (`SAGA_STACK_PROFILE=release`) behind \
         `cargo lambda watch`, on DynamoDB Local. Every item was updated exactly once and no lock was left.\n\n",
        r.actions,
        r.item_bytes,
        r.written,
        r.request_bytes as f64 / 1e6,
        r.chunks,
        r.append_max_ms,
        r.seal_ms
    );
    md.push_str(&format!(
        "- {} state transitions, {} history events (a Standard execution allows 25,000), {} Lambda calls, {:.0} s from start to end.\n\
         - Orchestration: ${:.6} as a `STANDARD` execution. An `EXPRESS` execution lasts 5 minutes at most: {}.\n\
         - Lambda: ${:.6} for every call above at each function's `MemorySize` (arm64, $0.0000133334 per GB-second, $0.20 per \
         million requests), on this run's call times.\n\
         - DynamoDB: {:.0} write units and {:.0} read units as DynamoDB Local reported them (it under-reports transactional \
         calls; the update tables above give the billed figure per action).\n\n",
        r.transitions,
        r.history_events,
        r.lambda_calls,
        r.duration_ms as f64 / 1000.0,
        r.transitions as f64 * USD_PER_TRANSITION,
        if r.duration_ms <= 300_000 { "this one would fit".to_string() } else { format!("this one took {:.0} s, so it needs `STANDARD`", r.duration_ms as f64 / 1000.0) },
        lambda_usd(r),
        r.write_units_reported,
        r.read_units_reported
    ));
    md.push_str(
        "Per function: its calls, the slowest and all of them together (wall time as the caller saw it), the CPU time of its \
         process, and its peak resident memory (`VmHWM`, what Lambda reports as Max Memory Used), beside the `MemorySize` and \
         `Timeout` that `template.yaml` deploys. Lambda gives a function CPU in proportion to its memory (one vCPU at \
         1,769 MB), so a call whose CPU time is near its wall time here takes longer on a small function.\n\n\
         | function | calls | slowest call (ms) | all calls (ms) | CPU (ms) | peak memory (MiB) | MemorySize (MB) | Timeout (s) |\n\
         | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
    );
    for f in &r.functions {
        md.push_str(&format!(
            "| {} | {} | {} | {} | {} | {:.1} | {} | {} |\n",
            f.function, f.calls, f.max_ms, f.total_ms, f.cpu_ms, f.peak_mib, f.memory_mb, f.timeout_s
        ));
    }
    md.push('\n');
    md
}

/// The section of each kind of action: dynamo-saga beside the other ways, one row a size.
fn kinds_markdown(a: &Args, rows: &[Row]) -> String {
    let mut md = String::from(
        "## Cost and time, by kind of action\n\nOne row a kind and size. Write units per action are billed by DynamoDB's rules \
         (read units are dynamo-saga's, the others read nothing); USD is DynamoDB on demand per 1,000 actions; wall time is \
         measured on DynamoDB Local, modelled time weighs the same run's requests by the reference latency model (see the \
         round trips below). \"-\": the way does not take that many actions.\n\n\
         | kind | actions | dynamo-saga calls | write units per action: dynamo-saga / native / chunked / Java library | \
         read units per action | USD per 1,000: dynamo-saga / chunked | wall ms: dynamo-saga / chunked | \
         modelled ms: dynamo-saga / chunked / Java library |\n| --- | ---: | ---: | --- | ---: | --- | --- | --- |\n",
    );
    let mut notes = Vec::new();
    let dash = || "-".to_string();
    for kind in &a.kinds {
        for &n in &a.sizes {
            let row = |m| by(rows, *kind, n, m);
            let bill = |m| row(m).and_then(|r| r.bill.as_ref());
            let per =
                |m, f: fn(&Bill) -> f64, d: usize| bill(m).map_or_else(dash, |b| format!("{:.d$}", f(b) / n as f64));
            let wall = |m| row(m).and_then(|r| r.wall_ms).map_or_else(dash, |w| format!("{w:.0}"));
            let modelled = |m| row(m).and_then(|r| r.modelled_wall_ms).map_or_else(dash, |w| format!("{w:.0}"));
            let usd = |m| bill(m).map_or_else(dash, |b| format!("{:.6}", dynamodb_usd(b) / n as f64 * 1000.0));
            let writes = |b: &Bill| b.write_units;
            let reads = |b: &Bill| b.read_units;
            // Native's note is the header's "-": it takes at most 100 actions.
            for m in [Method::Saga, Method::Chunked, Method::JavaLibrary] {
                if let Some(note) = row(m).and_then(|r| r.note.as_ref()) {
                    notes.push(format!("{}, {n} {}s: {note}", m.name(), kind.name()));
                }
            }
            md.push_str(&format!(
                "| {} | {n} | {} | {} / {} / {} / {} | {} | {} / {} | {} / {} | {} / {} / {} |\n",
                kind.name(),
                bill(Method::Saga).map_or_else(dash, |b| b.calls.to_string()),
                per(Method::Saga, writes, 2),
                per(Method::Native, writes, 2),
                per(Method::Chunked, writes, 2),
                per(Method::JavaLibrary, writes, 2),
                per(Method::Saga, reads, 3),
                usd(Method::Saga),
                usd(Method::Chunked),
                wall(Method::Saga),
                wall(Method::Chunked),
                modelled(Method::Saga),
                modelled(Method::Chunked),
                modelled(Method::JavaLibrary),
            ));
        }
    }
    if !notes.is_empty() {
        md.push_str(&format!("\nMissing figures: {}.\n", notes.join("; ")));
    }
    md.push('\n');
    md
}

fn markdown(a: &Args, report: &Report, when: &str) -> String {
    let (rows, machine, contention, funcs, total) = (
        &report.rows,
        &report.state_machine,
        &report.contention,
        &report.functions,
        &report.non_transactional_cross_check,
    );
    let mut md = String::new();
    md.push_str("# Benchmarks\n\n");
    md.push_str(&format!(
        "Written by `bash tools/bench.sh` on {when}, on DynamoDB Local 3.3.1 (one Java process) on the benchmark's machine; every figure below is \
         from that one run. Items are {} bytes by DynamoDB's size rules, so an item with dynamo-saga's lock attributes (about 70 \
         bytes) still fits in one 1 KB write unit; `--item-bytes` changes that. An item's filler is letters and digits that differ from item to \
         item, so the request pages that hold inserted items deflate about as well as real data would.\n\n",
        a.item_bytes
    ));
    md.push_str(
        "Capacity is billed by DynamoDB's documented rules from the sizes of the items each call touches (see `shared/src/model/billing.rs`): \
         a standard write costs 1 write unit per started KB of the larger of the item before and after, a transactional write 2 per \
         started KB for every item including `ConditionCheck`, a strongly consistent read 1 read unit per started 4 KB (a missing \
         item 1). DynamoDB Local's own `ReturnConsumedCapacity` is right for non-transactional calls and low for transactions; ",
    );
    md.push_str(&format!(
        "over this run, the non-transactional calls came to {} write units by the rules and {} as DynamoDB Local reported them, \
         and {} read units by the rules and {} as reported.\n\n",
        f1(total.plain_write_units),
        f1(total.plain_write_reported),
        f1(total.plain_read_units),
        f1(total.plain_read_reported)
    ));
    md.push_str(
        "The ways: **dynamo-saga** (the in-process coordinator over the same phases the Lambdas run, all-or-nothing); **native** \
         (one `TransactWriteItems` call, at most 100 actions); **chunked** (`TransactWriteItems` calls of 100 actions one after \
         another, not atomic as a whole); **Java library** (the protocol of AWS Labs' Java dynamodb-transactions library, one item at a time, \
         `tests/src/java_library.rs`). Wall time is one run each, after a separate billing run on fresh items.\n\n",
    );
    md.push_str(&kinds_markdown(a, rows));
    if !machine.is_empty() {
        md.push_str("## The state machine\n\nUpdates through `statemachine/transaction.asl.json` on the local stack (aws-local-stepfunctions, the Lambda functions \
            as debug builds behind `cargo lambda watch`). Orchestration cost per transaction, US East (N. Virginia) prices: \
            `STANDARD` is $0.025 per 1,000 state transitions; `EXPRESS` is $1.00 per million executions plus $0.00001667 per \
            GB-second, in 100 ms steps at the smallest memory step (64 MB), priced here on the wall time measured on the local \
            stack (debug functions on DynamoDB Local: real Lambda and DynamoDB would be faster, so cheaper). Neither includes \
            the Lambda invocations or DynamoDB.\n\n");
        md.push_str(&format!("Modelled: the same updates run in this process as the state machine runs them, each phase call as its \
            Lambda runs it (`lambda::handle`), the requests of every call traced and weighed by the reference model ({} ms a request, \
            {} ms an item), plus {} ms for each Lambda call through Step Functions (its round trip, beside its run time); and the \
            same until the end of the call that committed the transaction, from which committed reads see its values.\n\n",
            Model::REFERENCE.per_call_ms, Model::REFERENCE.per_item_ms, Model::LAMBDA_CALL_MS));
        md.push_str("| actions | state transitions | history events | Lambda calls | wall time (ms) | modelled wall time (ms) | modelled time to commit (ms) | STANDARD cost per transaction (USD) | EXPRESS cost per transaction (USD) | STANDARD / EXPRESS |\n| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
        for r in machine {
            let express = express_usd(r.duration_ms);
            md.push_str(&format!(
                "| {} | {} | {} | {} | {} | {} | {} | {:.6} | {:.7} | {:.0}x |\n",
                r.actions,
                r.transitions,
                r.history_events,
                r.lambda_calls,
                r.duration_ms,
                r.modelled_wall_ms.map_or("-".into(), |w| format!("{w:.0}")),
                r.modelled_commit_ms.map_or("-".into(), |w| format!("{w:.0}")),
                r.usd,
                express,
                r.usd / express
            ));
        }
        md.push('\n');
        md.push_str("The whole price of an update through the state machine, in USD per 1,000 actions: DynamoDB on demand \
            (US East, $0.625 per million write request units and $0.125 per million read request units) at the billed capacity \
            of the same number of updates in the table above, `STANDARD` state transitions, and Lambda (arm64, $0.0000133334 per \
            GB-second and $0.20 per million requests) for every call at each function's `MemorySize` in `template.yaml`, on the \
            local stack's call times (debug builds on DynamoDB Local, so above what Lambda would bill). Native \
            `TransactWriteItems` pays only the DynamoDB column.\n\n\
            | actions | DynamoDB | Step Functions (STANDARD) | Lambda | total | native `TransactWriteItems` (DynamoDB) |\n| ---: | ---: | ---: | ---: | ---: | ---: |\n");
        for r in machine {
            let per = |usd: f64| usd / r.actions as f64 * 1000.0;
            let saga = by(rows, Kind::Update, r.actions, Method::Saga).and_then(|x| x.bill.as_ref()).map(dynamodb_usd);
            let native =
                by(rows, Kind::Update, r.actions, Method::Native).and_then(|x| x.bill.as_ref()).map(dynamodb_usd);
            let cell = |v: Option<f64>| v.map_or("-".into(), |v| format!("{:.6}", per(v)));
            let total = saga.map(|d| d + r.usd + r.lambda_usd);
            md.push_str(&format!(
                "| {} | {} | {:.6} | {:.6} | {} | {} |\n",
                r.actions,
                cell(saga),
                per(r.usd),
                per(r.lambda_usd),
                cell(total),
                if r.actions <= 100 { cell(native) } else { "- (more than 100 actions)".into() }
            ));
        }
        md.push('\n');
    }
    if !report.round_trips.is_empty() {
        md.push_str(&trips_markdown(&report.round_trips));
    }
    if !report.cpu_per_request.is_empty() {
        md.push_str(&per_request::markdown(&report.cpu_per_request));
    }
    if !report.model.is_empty() {
        let chunked = |n: usize| {
            report
                .round_trips
                .iter()
                .find(|t| t.kind == Kind::Update && t.method == Method::Chunked && t.actions == n)
                .map(|t| t.modelled_wall_ms)
        };
        md.push_str(&model::markdown(&report.model, chunked));
    }
    if !report.small_requests.is_empty() {
        let per_1000 = |usd: f64, n: usize| usd / n as f64 * 1000.0;
        let dynamodb = by(rows, Kind::Update, 10, Method::Saga)
            .and_then(|r| r.bill.as_ref())
            .map(|b| per_1000(dynamodb_usd(b), 10));
        let standard =
            machine.iter().find(|r| r.actions == 10).map(|r| (per_1000(r.usd, 10), per_1000(r.lambda_usd, 10)));
        md.push_str(&small::markdown(&report.small_requests, dynamodb, standard));
    }
    md.push_str(&small::all_in_markdown(&report.all_in));
    if !report.mrsc.is_empty() {
        md.push_str(&mrsc::markdown(&report.mrsc));
    }
    if !report.lost.is_empty() {
        md.push_str(&lost::markdown(&report.lost));
        md.push_str(&snapshot::markdown(&report.snapshot, report.snapshot_load.as_ref()));
    }
    if !report.engine.is_empty() {
        md.push_str(&engine_markdown(report));
    }
    if !report.throttled.is_empty() {
        md.push_str(&throttled_markdown(&report.throttled));
    }
    if !report.committed_reads.is_empty() {
        md.push_str(&reads_markdown(&report.committed_reads));
    }
    if !report.revisit.is_empty() {
        md.push_str(&revisit_markdown(&report.revisit));
    }
    if !contention.is_empty() {
        md.push_str(&contention_markdown(contention));
    }
    if let Some(r) = &report.largest {
        md.push_str(&largest_markdown(r));
    }
    if let Some(r) = &report.largest_seal {
        md.push_str(&format!(
            "## The largest request the API function takes\n\n`bash tools/bench.sh --seal-only` on {}: {} inserts of {}-byte \
             items, {:.1} MB of JSON, staged through the API function in {} chunks and sealed in one call, on an optimised build \
             with a whole core: the seal took {} ms ({:.0} ms per MB), the function's process peaked at {:.0} MiB ({:.1} bytes \
             per byte of the request) and used {:.1} s of CPU over the appends and the seal. `tools/check_api_timeout.py` scales \
             this seal to the CPU share Lambda gives the template's `StageMemorySize` ([deploy.md](deploy.md#large-requests-and-api-gateways-timeout)).\n\n",
            r.written,
            r.actions,
            r.item_bytes,
            r.request_bytes as f64 / 1e6,
            r.chunks,
            r.seal_ms,
            r.seal_ms as f64 / (r.request_bytes as f64 / 1e6),
            r.stage_peak_mib,
            r.stage_peak_mib * 1048576.0 / r.request_bytes as f64,
            r.stage_cpu_ms as f64 / 1000.0
        ));
    }
    md.push_str("## The Lambda functions\n\nInit duration as Lambda defines it (process start to the first request for an event), against a stand-in for the \
        Lambda Runtime API, best of 5, for the debug builds the local stack runs (x86_64). Zip sizes are of the release arm64 packages: those \
        `tools/bench.sh --lambda` built in `target/lambda/`, else those `tools/check-artifacts.sh` last measured (`.local/artifacts.json`).\n\n| function | zip (bytes) | init (ms, debug build) |\n| --- | ---: | ---: |\n");
    for f in funcs {
        md.push_str(&format!(
            "| {} | {} | {} |\n",
            f.function,
            f.zip_bytes.map_or("not built".into(), |b| b.to_string()),
            f.init_ms.map_or("-".into(), f1)
        ));
    }
    md
}

/// A log-log plot of wall time against actions, one line per way, for the first kind; and write units per action.
fn svg(a: &Args, rows: &[Row]) -> String {
    let (w, h, pad) = (760.0, 360.0, 60.0);
    let kind = a.kinds[0];
    let colors = ["#1f77b4", "#2ca02c", "#ff7f0e", "#d62728"];
    let pts: Vec<(Method, Vec<(f64, f64)>)> = Method::all()
        .iter()
        .map(|m| {
            (
                *m,
                a.sizes
                    .iter()
                    .filter_map(|&n| by(rows, kind, n, *m).and_then(|r| r.wall_ms).map(|t| (n as f64, t.max(0.1))))
                    .collect(),
            )
        })
        .collect();
    let all: Vec<(f64, f64)> = pts.iter().flat_map(|(_, p)| p.clone()).collect();
    if all.is_empty() {
        return String::new();
    }
    let (x0, x1) = (
        all.iter().map(|p| p.0).fold(f64::MAX, f64::min).log10(),
        all.iter().map(|p| p.0).fold(0.0, f64::max).log10().max(1.0),
    );
    let (y0, y1) = (
        all.iter().map(|p| p.1).fold(f64::MAX, f64::min).log10().floor(),
        all.iter().map(|p| p.1).fold(0.0, f64::max).log10().ceil(),
    );
    let px = |x: f64| pad + (x.log10() - x0) / (x1 - x0).max(1e-9) * (w / 2.0 - pad - 20.0);
    let py = |y: f64| h - pad - (y.log10() - y0) / (y1 - y0).max(1e-9) * (h - 2.0 * pad);
    let mut s = format!("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n");
    s.push_str(&format!(
        "<text x=\"{pad}\" y=\"20\" font-size=\"14\">{}: wall time (ms, log) by actions (log)</text>\n",
        kind.title()
    ));
    s.push_str(&format!(
        "<line x1=\"{pad}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"black\"/>\n",
        h - pad,
        w / 2.0 - 20.0,
        h - pad
    ));
    s.push_str(&format!("<line x1=\"{pad}\" y1=\"{pad}\" x2=\"{pad}\" y2=\"{}\" stroke=\"black\"/>\n", h - pad));
    for &n in &a.sizes {
        s.push_str(&format!(
            "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\">{n}</text>\n",
            px(n as f64),
            h - pad + 16.0
        ));
    }
    let mut e = y0;
    while e <= y1 {
        s.push_str(&format!(
            "<text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>\n",
            pad - 6.0,
            py(10f64.powf(e)) + 4.0,
            10f64.powf(e)
        ));
        e += 1.0;
    }
    for (i, (m, p)) in pts.iter().enumerate() {
        if p.is_empty() {
            continue;
        }
        let path: Vec<String> = p.iter().map(|(x, y)| format!("{:.1},{:.1}", px(*x), py(*y))).collect();
        s.push_str(&format!(
            "<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"2\" points=\"{}\"/>\n",
            colors[i],
            path.join(" ")
        ));
        for (x, y) in p {
            s.push_str(&format!(
                "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"3\" fill=\"{}\"/>\n",
                px(*x),
                py(*y),
                colors[i]
            ));
        }
        s.push_str(&format!(
            "<text x=\"{}\" y=\"{}\" fill=\"{}\">{}</text>\n",
            pad + 10.0,
            pad + 14.0 * i as f64,
            colors[i],
            m.name()
        ));
    }
    // Write units per action, by kind, at the largest size every way but native ran (or the largest size).
    let n = a.sizes.iter().copied().filter(|n| *n <= 1000).max().unwrap_or(a.sizes[0]);
    let left = w / 2.0 + 30.0;
    s.push_str(&format!("<text x=\"{left}\" y=\"20\" font-size=\"14\">write units per action, {n} actions</text>\n"));
    let bars: Vec<(Kind, Method, f64)> = a
        .kinds
        .iter()
        .flat_map(|k| Method::all().into_iter().map(move |m| (*k, m)))
        .filter_map(|(k, m)| by(rows, k, n, m).and_then(|r| r.bill).map(|b| (k, m, b.write_units / n as f64)))
        .collect();
    let max = bars.iter().map(|b| b.2).fold(1.0, f64::max).min(40.0);
    let bw = 12.0;
    for (ki, k) in a.kinds.iter().enumerate() {
        let gx = left + ki as f64 * 80.0;
        s.push_str(&format!(
            "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"start\">{}</text>\n",
            gx,
            h - pad + 16.0,
            k.name()
        ));
        for (mi, m) in Method::all().iter().enumerate() {
            let Some(b) = bars.iter().find(|b| b.0 == *k && b.1 == *m) else { continue };
            let bh = (b.2.min(max) / max) * (h - 2.0 * pad);
            s.push_str(&format!(
                "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"{bw}\" height=\"{:.1}\" fill=\"{}\"><title>{} {}: {:.2}</title></rect>\n",
                gx + mi as f64 * (bw + 2.0),
                h - pad - bh,
                bh,
                colors[mi],
                k.name(),
                m.name(),
                b.2
            ));
            s.push_str(&format!(
                "<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"9\" text-anchor=\"middle\">{:.1}</text>\n",
                gx + mi as f64 * (bw + 2.0) + bw / 2.0,
                h - pad - bh - 3.0,
                b.2
            ));
        }
    }
    s.push_str(&format!(
        "<line x1=\"{left}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"black\"/>\n</svg>\n",
        h - pad,
        w - 10.0,
        h - pad
    ));
    s
}

/// The figures of a whole run, as `benchmarks.json` keeps them.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Report {
    item_bytes: usize,
    sizes: Vec<usize>,
    kinds: Vec<Kind>,
    written: String,
    /// When each part of the report was measured, as its first line says.
    #[serde(default)]
    when: String,
    rows: Vec<Row>,
    state_machine: Vec<MachineRow>,
    #[serde(default)]
    contention: Vec<ContentionRow>,
    #[serde(default)]
    largest: Option<LargestRun>,
    functions: Vec<FunctionRow>,
    non_transactional_cross_check: Bill,
    #[serde(default)]
    round_trips: Vec<TripRow>,
    #[serde(default)]
    committed_reads: Vec<ReadRow>,
    #[serde(default)]
    throttled: Vec<ThrottledRow>,
    #[serde(default)]
    largest_seal: Option<SealRun>,
    /// DynamoDB Local's CPU per item written, by kind of call.
    #[serde(default)]
    engine: Vec<WriteCpu>,
    /// What a visit for late writes costs ([`RevisitRow`]).
    #[serde(default)]
    revisit: Vec<RevisitRow>,
    /// The cores of the machine the run was on, which DynamoDB Local and the benchmark share.
    #[serde(default)]
    cores: usize,
    /// CPU per DynamoDB request, the CLI beside the bare SDK program ([`per_request`]).
    #[serde(default)]
    cpu_per_request: Vec<per_request::CpuRow>,
    /// The model with CPU ([`model`]).
    #[serde(default)]
    model: Vec<model::ModelRow>,
    /// Small requests' orchestration ([`small`]).
    #[serde(default)]
    small_requests: Vec<small::SmallRow>,
    /// What a transaction costs beyond DynamoDB, Step Functions and Lambda ([`small::all_in`]).
    #[serde(default)]
    all_in: Vec<small::AllInRow>,
    /// MRSC mode beside the single-Region protocol ([`mrsc`]).
    #[serde(default)]
    mrsc: Vec<mrsc::MrscRow>,
    /// Lost answers through the state machine ([`lost`]).
    #[serde(default)]
    lost: Vec<lost::LostRow>,
    /// Snapshot reads beside the other ways to read many items ([`snapshot`]), and under writes.
    #[serde(default)]
    snapshot: Vec<snapshot::SnapshotRow>,
    #[serde(default)]
    snapshot_load: Option<snapshot::SnapshotLoad>,
}

/// DynamoDB Local's CPU per item written by each kind of write call, on 2,000 items of `--item-bytes` (none when this
/// machine does not run the DynamoDB Local the benchmark uses).
async fn measure_engine(a: &Args) -> Vec<WriteCpu> {
    let Some(pid) = harness::cpu::dynamodb_local_pid(&harness::endpoint().await) else {
        eprintln!("DynamoDB Local's CPU per write: not measured (its process is not this machine's)");
        return Vec::new();
    };
    let env = Env::new("bench-engine").await;
    let items: Vec<Value> = (0..2000).map(|i| item(&format!("engine-{i:06}"), a.item_bytes)).collect();
    put_all(&env.client, &env.a, items.clone()).await;
    let items: Vec<_> = items.iter().map(|i| item_from_json(i).expect("an item")).collect();
    let rows = harness::cpu::write_cpu(&env.client, pid, &env.a, &items, default_in_flight()).await;
    for r in &rows {
        eprintln!("DynamoDB Local's CPU per item: {:.3} ms, {}", r.dynamodb_ms_per_item, r.call.describe());
    }
    rows
}

/// The visit for late writes, at each size of 1,000 actions or more ([`RevisitRow`]).
async fn measure_revisit(a: &Args) -> Vec<RevisitRow> {
    let mut out = Vec::new();
    for &n in a.sizes.iter().filter(|n| **n >= 1000) {
        let env = Env::with(&format!("bench-revisit-{n}"), |c| dynamo_saga::Config {
            revisit_after: std::time::Duration::ZERO,
            direct: false,
            ..c
        })
        .await;
        let prefix = format!("revisit-{n}");
        let body = prepare(&env, Kind::Update, n, &prefix, a.item_bytes).await;
        let id = dynamo_saga::phase::begin::begin(&env.store, &body).await.expect("begins").transaction_id;
        let died = Coordinator::new(env.store.crash_after(1)).drive(&id).await;
        assert!(died.is_err(), "the first driver dies after claiming the lock phase");
        let billing = env.store.with_billing();
        Coordinator::new(billing.clone()).drive(&id).await.expect("the takeover commits");
        let transaction = billing.bill().unwrap_or_default();
        let visitor = env.store.with_billing();
        let started = Instant::now();
        let visit = Coordinator::new(visitor.clone()).revisit(&id).await.expect("visits");
        let visit_ms = started.elapsed().as_secs_f64() * 1000.0;
        let dynamo_saga::Revisit::Done { items, cleared, .. } = visit else {
            panic!("{n} updates: the visit was not made: {visit:?}");
        };
        let r =
            RevisitRow { actions: n, items, cleared, visit: visitor.bill().unwrap_or_default(), visit_ms, transaction };
        eprintln!(
            "visit for late writes {:>6} updates: {:.3} read units and {:.4} write units an item, {} calls, {:.0} ms",
            n,
            r.visit.read_units / n as f64,
            r.visit.write_units / n as f64,
            r.visit.calls,
            r.visit_ms
        );
        out.push(r);
    }
    out
}

/// Committed reads before apply, each way, at each size of 1,000 actions or more.
async fn measure_reads(a: &Args) -> Vec<ReadRow> {
    use dynamo_saga::config::CommittedReads;
    let mut out = Vec::new();
    for &n in a.sizes.iter().filter(|n| **n >= 1000) {
        let env = Env::new(&format!("bench-reads-{n}")).await;
        for way in [CommittedReads::Evaluate, CommittedReads::Apply] {
            let r = committed_reads(&env, n, way, a.item_bytes).await;
            eprintln!(
                "committed reads {:>6} updates {:<8}: {:.2} / {:.2} read / write units a first read, {:.1} ms",
                n,
                r.way,
                r.first.read_units / r.reads as f64,
                r.first.write_units / r.reads as f64,
                r.first_ms
            );
            out.push(r);
        }
    }
    out
}

/// Updates at each size: native and chunked once, dynamo-saga at each in-flight limit, on a tracing client; then the
/// baselines and the default limit three times more on DynamoDB Local and three times through the delay proxy.
async fn measure_trips(a: &Args) -> Vec<TripRow> {
    let proxy = harness::proxy::Proxy::start(PROXY_DELAY_MS, 0.0).await;
    let mut out = Vec::new();
    for &n in &a.sizes {
        let env = Env::new(&format!("bench-trips-{n}")).await;
        let mut ways: Vec<(Method, usize)> = vec![(Method::Chunked, 1)];
        if n <= 100 {
            ways.insert(0, (Method::Native, 1));
        }
        let mut limits = a.in_flight.clone();
        if !limits.contains(&default_in_flight()) {
            limits.push(default_in_flight());
        }
        ways.extend(limits.iter().map(|l| (Method::Saga, *l)));
        for (m, limit) in ways {
            let mut r = round_trips(&env, Kind::Update, n, m, limit, a.item_bytes).await;
            if m != Method::Saga || r.default {
                let plain = Store::new(
                    env.client.clone(),
                    dynamo_saga::Config { concurrency: limit, ..(*env.store.cfg).clone() },
                );
                let (plain_ms, cpu) = median_of_3(&env, &plain, n, m, "plain", a.item_bytes).await;
                (r.plain_median_ms, r.plain_cpu) = (Some(plain_ms), Some(cpu));
                let through = Store::new(harness::client_for(&proxy.url), plain.cfg.as_ref().clone());
                r.proxy_median_ms = Some(median_of_3(&env, &through, n, m, "proxy", a.item_bytes).await.0);
            }
            eprintln!(
                "round trips {:>6} updates {:<12} in flight {:>3}: {} calls, {} on the critical path, {:.0} ms, modelled {:.0} ms, median {} ms plain, {} ms through the proxy",
                n,
                m.name(),
                limit,
                r.calls,
                r.round_trips,
                r.wall_ms,
                r.modelled_wall_ms,
                r.plain_median_ms.map_or("-".into(), |v| format!("{v:.0}")),
                r.proxy_median_ms.map_or("-".into(), |v| format!("{v:.0}")),
            );
            out.push(r);
        }
        if n >= 1000 && a.kinds.contains(&Kind::Upsert) {
            // Upserts: no more round trips than updates, the lock write guessing the item absent.
            for (m, limit) in [(Method::Chunked, 1), (Method::Saga, default_in_flight())] {
                let r = round_trips(&env, Kind::Upsert, n, m, limit, a.item_bytes).await;
                eprintln!(
                    "round trips {:>6} upserts {:<12} in flight {:>3}: {} calls, {} on the critical path, modelled {:.0} ms",
                    n,
                    m.name(),
                    limit,
                    r.calls,
                    r.round_trips,
                    r.modelled_wall_ms
                );
                out.push(r);
            }
        }
    }
    out
}

/// Updates through a proxy that answers a tenth of the writes with `ProvisionedThroughputExceededException`
/// (`tools/ddb-proxy.mjs`), beside the same through the proxy throttling none: the median of three runs each, at each
/// size from 1,000 on.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ThrottledRow {
    actions: usize,
    /// The share of writes throttled.
    share: f64,
    unthrottled_median_ms: f64,
    throttled_median_ms: f64,
    /// Writes the proxy saw, and throttled, over the three throttled runs.
    writes: u64,
    throttled: u64,
}

async fn measure_throttled(a: &Args) -> Vec<ThrottledRow> {
    const SHARE: f64 = 0.1;
    let mut out = Vec::new();
    for &n in a.sizes.iter().filter(|n| **n >= 1000) {
        let env = Env::new(&format!("bench-throttled-{n}")).await;
        let plain = harness::proxy::Proxy::start(0, 0.0).await;
        let busy = harness::proxy::Proxy::start(0, SHARE).await;
        let store_for =
            |p: &harness::proxy::Proxy| Store::from_conf(harness::conf_for(&p.url), (*env.store.cfg).clone());
        let unthrottled = median_of_3(&env, &store_for(&plain), n, Method::Saga, "unthrottled", a.item_bytes).await.0;
        let throttled = median_of_3(&env, &store_for(&busy), n, Method::Saga, "throttled", a.item_bytes).await.0;
        let stats = busy.stats().await;
        let r = ThrottledRow {
            actions: n,
            share: SHARE,
            unthrottled_median_ms: unthrottled,
            throttled_median_ms: throttled,
            writes: stats["writes"].as_u64().unwrap_or(0),
            throttled: stats["throttled"].as_u64().unwrap_or(0),
        };
        eprintln!(
            "throttled {n:>6} updates: {:.0} ms with {} of {} writes throttled, {:.0} ms without ({:.2}x)",
            r.throttled_median_ms,
            r.throttled,
            r.writes,
            r.unthrottled_median_ms,
            r.throttled_median_ms / r.unthrottled_median_ms
        );
        out.push(r);
    }
    out
}

async fn measure_all(a: &Args) -> (Vec<Row>, Vec<MachineRow>) {
    let mut rows = Vec::new();
    for &kind in &a.kinds {
        for &n in &a.sizes {
            let env = Env::new(&format!("bench-{}-{n}", kind.name())).await;
            for t in ["s000tx", "s000img"] {
                create_table(&env.client, &format!("{}-{t}", env.a), &[("id", "S")]).await;
            }
            for m in Method::all() {
                let t = Instant::now();
                let row = measure(&env, a, kind, n, m).await;
                eprintln!(
                    "{:>7} {:>6} {:<12} write units {:>10} wall {:>9} ms {}  ({:.0} s)",
                    kind.name(),
                    n,
                    m.name(),
                    row.bill.map_or("-".into(), |b| f1(b.write_units)),
                    row.wall_ms.map_or("-".into(), |w| format!("{w:.0}")),
                    row.note.clone().unwrap_or_default(),
                    t.elapsed().as_secs_f64()
                );
                rows.push(row);
            }
        }
    }
    let machine_rows = if std::env::var("LAMBDA_ENDPOINT").is_ok() {
        let mut out = Vec::new();
        for &n in &a.sizes {
            let mut r = machine(n, a.item_bytes).await;
            let env = Env::new(&format!("bench-smm-{n}")).await;
            let (modelled, commit) = machine_modelled(&env, n, a.item_bytes).await;
            (r.modelled_wall_ms, r.modelled_commit_ms) = (Some(modelled), Some(commit));
            eprintln!(
                "state machine {:>6} actions: {} transitions, {} Lambda calls, {} ms; modelled {:.0} ms, committed at {:.0} ms",
                n, r.transitions, r.lambda_calls, r.duration_ms, modelled, commit
            );
            out.push(r);
        }
        out
    } else {
        eprintln!("state machine: skipped (no local stack; tools/bench.sh starts one)");
        Vec::new()
    };
    (rows, machine_rows)
}

/// The sizes CPU per request is measured at: the run's sizes of 1,000 actions and more.
fn cpu_sizes(a: &Args) -> Vec<usize> {
    a.sizes.iter().copied().filter(|&n| n >= 1000).collect()
}

/// The model with CPU at each size of 1,000 actions and more and at the largest transaction's size, at the template's
/// default fan-out and the default share size.
async fn measure_model(a: &Args) -> Vec<model::ModelRow> {
    let mut sizes = cpu_sizes(a);
    sizes.push(a.largest_actions);
    sizes.dedup();
    let share = dynamo_saga::Config::new("t").share_batches;
    let mut out = Vec::new();
    for n in sizes {
        out.push(model::measure(n, a.item_bytes, default_fan_out(), share).await);
    }
    out
}

/// The largest transaction of the report at `path`, if it has one.
fn last_largest(path: &std::path::Path) -> Option<LargestRun> {
    last_report(path)?.largest
}

/// The report at `path`, if there is one of this version.
/// When the parts of the report at `path` were measured, as its first line says.
fn last_when(path: &std::path::Path) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    let rest = text.split("Written by `bash tools/bench.sh` on ").nth(1)?;
    Some(rest.split(", on DynamoDB Local").next()?.to_string())
}

fn last_report(path: &std::path::Path) -> Option<Report> {
    serde_json::from_str::<Report>(&std::fs::read_to_string(path).ok()?).ok()
}

#[tokio::main]
async fn main() {
    let mut a = args();
    let started = Instant::now();
    let now = std::process::Command::new("date")
        .arg("-u")
        .arg("+%Y-%m-%d %H:%M UTC")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let json_path = a.out.join("benchmarks.json");
    let only = a.functions_only
        || a.contention_only
        || a.largest_only
        || a.seal_only
        || a.reads_only
        || a.revisit_only
        || a.cpu_only
        || a.small_only
        || a.mrsc_only
        || a.lost_only
        || a.snapshot_only
        || a.render_only;
    let mut report = if only {
        let text = std::fs::read_to_string(&json_path).unwrap_or_else(|e| {
            panic!("--functions-only and --contention-only need the last run's {}: {e}", json_path.display())
        });
        let r: Report = serde_json::from_str(&text).expect("benchmarks.json of this version");
        a.sizes = r.sizes.clone();
        a.kinds = r.kinds.clone();
        a.item_bytes = r.item_bytes;
        r
    } else {
        let (rows, state_machine) = measure_all(&a).await;
        let round_trips = measure_trips(&a).await;
        let throttled = measure_throttled(&a).await;
        let committed_reads = measure_reads(&a).await;
        let engine = measure_engine(&a).await;
        let mut total = Bill::default();
        for b in rows.iter().filter_map(|r| r.bill.as_ref()) {
            total.add(b);
        }
        Report {
            item_bytes: a.item_bytes,
            sizes: a.sizes.clone(),
            kinds: a.kinds.clone(),
            written: now.clone(),
            when: String::new(),
            rows,
            state_machine,
            contention: Vec::new(),
            largest: if a.keep_largest { last_largest(&json_path) } else { None },
            largest_seal: last_report(&json_path).and_then(|r| r.largest_seal),
            functions: Vec::new(),
            non_transactional_cross_check: total,
            round_trips,
            committed_reads,
            throttled,
            engine,
            revisit: measure_revisit(&a).await,
            cores: std::thread::available_parallelism().map_or(0, usize::from),
            cpu_per_request: Vec::new(),
            model: Vec::new(),
            small_requests: Vec::new(),
            all_in: Vec::new(),
            mrsc: Vec::new(),
            lost: Vec::new(),
            snapshot: Vec::new(),
            snapshot_load: None,
        }
    };
    if a.cpu_only || !only {
        report.cpu_per_request = per_request::measure(&cpu_sizes(&a), a.item_bytes, a.cpu_runs).await;
        report.model = measure_model(&a).await;
    }
    if a.small_only || (!only && std::env::var("LAMBDA_ENDPOINT").is_ok()) {
        report.small_requests = small::measure(a.item_bytes, 5).await;
        report.all_in = small::all_in(a.item_bytes, 20, &[1000, 10_000]).await;
    }
    if a.mrsc_only || !only {
        let sizes: Vec<usize> = a.sizes.iter().copied().filter(|n| *n <= 10_000).collect();
        report.mrsc = mrsc::measure(&sizes, a.item_bytes).await;
    }
    if a.lost_only || !only {
        let sizes = [10, 250, 1000];
        report.lost = lost::measure(&sizes, a.item_bytes, 5).await;
    }
    if a.snapshot_only || !only {
        let sizes: Vec<usize> = [10, 100, 1000, 10_000]
            .into_iter()
            .filter(|n| *n <= a.sizes.iter().copied().max().unwrap_or(0).max(1000))
            .collect();
        report.snapshot = snapshot::measure(&sizes, a.item_bytes).await;
        report.snapshot_load = Some(snapshot::under_load(1000, 4, 20).await);
    }
    if a.reads_only {
        report.committed_reads = measure_reads(&a).await;
    }
    if a.revisit_only {
        report.revisit = measure_revisit(&a).await;
    }
    if a.contention_only || !only {
        report.contention = contention().await;
    }
    if a.largest_only {
        report.largest = Some(largest(a.largest_actions, a.item_bytes, &now).await);
    }
    if a.seal_only {
        report.largest_seal = Some(largest_seal(a.seal_actions, a.item_bytes, &now).await);
    }
    if a.functions_only || !only {
        report.functions = functions().await;
    }
    let when = match (a.functions_only, a.contention_only, a.largest_only, a.seal_only, a.reads_only) {
        _ if a.revisit_only => format!("{} (the visit for late writes on {now})", report.written),
        _ if a.cpu_only => format!("{} (CPU per request and the model with CPU on {now})", report.written),
        _ if a.small_only => format!("{} (small requests on {now})", report.written),
        _ if a.snapshot_only => match report.when.strip_suffix(')').filter(|w| w.contains(" (")) {
            Some(earlier) => format!("{earlier}; snapshot reads on {now})"),
            None => format!("{} (snapshot reads on {now})", report.written),
        },
        _ if a.lost_only => match report.when.strip_suffix(')').filter(|w| w.contains(" (")) {
            Some(earlier) => format!("{earlier}; lost answers on {now})"),
            None => format!("{} (lost answers on {now})", report.written),
        },
        // Beside the sections an earlier run of one section measured, which the report keeps.
        _ if a.mrsc_only => match report.when.strip_suffix(')').filter(|w| w.contains(" (")) {
            Some(earlier) => format!("{earlier}; MRSC mode on {now})"),
            None => format!("{} (MRSC mode on {now})", report.written),
        },
        (true, ..) => format!("{} (the functions on {now})", report.written),
        (_, true, ..) => format!("{} (contention on {now})", report.written),
        (_, _, true, ..) => format!("{} (the largest transaction on {now})", report.written),
        (_, _, _, true, _) => format!("{} (the largest seal on {now})", report.written),
        (.., true) => format!("{} (committed reads on {now})", report.written),
        _ if a.render_only => match report.when.as_str() {
            "" => last_when(&a.out.join("benchmarks.md")).unwrap_or_else(|| report.written.clone()),
            when => when.to_string(),
        },
        _ => now,
    };
    report.when = when.clone();
    std::fs::create_dir_all(&a.out).expect("create the output directory");
    let md = markdown(&a, &report, &when);
    std::fs::write(a.out.join("benchmarks.md"), &md).expect("write benchmarks.md");
    std::fs::write(&json_path, serde_json::to_string_pretty(&report).unwrap()).expect("write benchmarks.json");
    std::fs::write(a.out.join("benchmarks.svg"), svg(&a, &report.rows)).expect("write benchmarks.svg");
    println!("{md}");
    eprintln!("wrote {}/benchmarks.{{md,json,svg}} in {:.0} s", a.out.display(), started.elapsed().as_secs_f64());
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_deployed_settings_are_read_from_the_template_parameters_included() {
        let s = super::deployed_settings();
        assert_eq!(s.len(), 12, "{s:?}");
        assert_eq!(s["saga-lock"], (1769, 60), "PhaseMemorySize's default");
        assert_eq!(s["saga-commit"], (256, 60));
        assert_eq!(s["saga-stage"], (1024, 60), "StageMemorySize's default");
        assert_eq!(s["saga-events"], (256, 60));
    }

    #[test]
    fn an_express_execution_is_billed_per_start_and_per_started_100_ms_at_64_mb() {
        let per_100_ms = 0.1 * (64.0 / 1024.0) * 0.000_016_67;
        for (ms, steps) in [(0, 1), (1, 1), (100, 1), (101, 2), (275, 3), (59_655, 597)] {
            let want = 1e-6 + steps as f64 * per_100_ms;
            assert!((super::express_usd(ms) - want).abs() < 1e-15, "{ms} ms: {} != {want}", super::express_usd(ms));
        }
    }
}
