//! `dynamo-saga`: submit a transaction and follow it, read a transaction's status, read an item at an isolation
//! level, run the sweeper once. AWS settings come from the standard chain (profile, region, credentials, and
//! `AWS_ENDPOINT_URL_<SERVICE>` for local endpoints).
//!
//! dynamo-saga's settings come from a deployed stack (`--stack NAME` or `SAGA_STACK`: its outputs and parameters,
//! [`stack`]), through which the CLI is a client of the stack's API ([`api`]) and needs only what an API caller needs;
//! or from the `SAGA_*` variables the functions use (`SAGA_TABLE`, `SAGA_ALLOWED_TABLES`, ...) and
//! `SAGA_STATE_MACHINE_ARN`. `--in-process` runs a transaction's phases in this process, with the caller's own
//! access to the tables.
//!
//! Exit codes: 0 done (committed), 1 the transaction rolled back, 2 bad arguments or a rejected request,
//! 3 no such transaction, 4 any other failure.

mod api;
mod stack;

use std::io::{IsTerminal, Write};
use std::str::FromStr;
use std::time::{Duration, Instant};

use clap::{CommandFactory, Parser, Subcommand};
use clap_complete::Shell;
use indicatif::{ProgressBar, ProgressStyle};

use dynamo_saga::constants::ENV_TX_TABLE;
use dynamo_saga::read::{self, Isolation};
use dynamo_saga::start::Started;
use dynamo_saga::status::{self, Status};
use dynamo_saga::sweeper::{StateMachine, SweepReport, Sweeper};
use dynamo_saga::value::{item_from_json, item_to_json};
use dynamo_saga::{phase, staging, start, Config, Coordinator, Store, TxError, TxState};
use serde_json::{json, Value};

/// Submit a transaction and follow it, read its status, read an item at an isolation level, or sweep.
#[derive(Debug, Parser)]
#[command(name = "dynamo-saga", version, about, long_about = None, after_help = EXIT_CODES)]
struct Args {
    /// Print JSON on stdout instead of text (and no progress on stderr).
    #[arg(long, global = true)]
    json: bool,
    /// The deployed dynamo-saga stack whose outputs and parameters give every setting (default: SAGA_STACK). Through
    /// it, submit, status and resume go through the stack's API and sweep runs the stack's sweeper, unless
    /// --in-process.
    #[arg(long, global = true, value_name = "NAME", env = "SAGA_STACK", conflicts_with = "table")]
    stack: Option<String>,
    /// The transactions table, without a stack (default: SAGA_TABLE; the other SAGA_* settings still apply).
    #[arg(long, global = true, value_name = "NAME")]
    table: Option<String>,
    /// Log what the library does on stderr (-v: info, -vv: debug); RUST_LOG, when set, chooses instead.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,
    #[command(subcommand)]
    command: Command,
}

const EXIT_CODES: &str =
    "Exit codes: 0 done, 1 rolled back, 2 bad arguments or request, 3 no such transaction, 4 other failure.";

#[derive(Debug, Subcommand)]
enum Command {
    /// Validate and start a transaction and follow it to its end: through Step Functions (--state-machine or
    /// SAGA_STATE_MACHINE_ARN), or in this process with --in-process; one of them is required.
    Submit {
        /// TransactWriteItems JSON (`-` reads stdin).
        file: String,
        /// The state machine to run it (default: SAGA_STATE_MACHINE_ARN).
        #[arg(long, value_name = "ARN", conflicts_with = "in_process")]
        state_machine: Option<String>,
        /// Drive it in this process even when a state machine is set.
        #[arg(long)]
        in_process: bool,
        /// Start it and report its status without following it.
        #[arg(long)]
        no_follow: bool,
    },
    /// State, progress by phase, reasons of a rollback, capacity, timings.
    Status {
        /// The transaction id.
        id: String,
    },
    /// Read one item (committed by default).
    Get {
        /// The item's table (its own name: `--table` names the transactions table).
        #[arg(value_name = "TABLE")]
        item_table: String,
        /// The item's key as DynamoDB JSON, e.g. '{"pk": {"S": "a"}}'.
        key: String,
        /// committed, uncommitted or read-lock.
        #[arg(long, default_value = "committed", value_parser = Isolation::from_str)]
        isolation: Isolation,
    },
    /// Carry an open transaction on to its end: in this process, or in a new execution of the state machine when one
    /// is given (or SAGA_STATE_MACHINE_ARN is set). After ApplyRejected, mend what `status` shows as refused first.
    Resume {
        /// The transaction id.
        id: String,
        /// Start a new execution of this state machine (default: SAGA_STATE_MACHINE_ARN) and return.
        #[arg(long, value_name = "ARN", conflicts_with = "in_process")]
        state_machine: Option<String>,
        /// Drive it in this process even when a state machine is set.
        #[arg(long)]
        in_process: bool,
    },
    /// Finish abandoned transactions once, as the scheduled sweeper does.
    Sweep {
        /// Only transactions still for this long (default: SAGA_SWEEP_AFTER_SECONDS, else 120, as the sweeper
        /// function).
        #[arg(long, value_name = "SECONDS")]
        older_than: Option<u64>,
        /// At most this many transactions (default: SAGA_SWEEP_MAX, else 100).
        #[arg(long, value_name = "N")]
        max: Option<usize>,
        /// Start recovery executions of this state machine (default: SAGA_STATE_MACHINE_ARN), which is also asked
        /// whether an execution still drives a transaction.
        #[arg(long, value_name = "ARN", conflicts_with = "in_process")]
        state_machine: Option<String>,
        /// Finish them in this process, with no state machine to ask whether an execution still drives one: a
        /// transaction still for --older-than is taken as abandoned.
        #[arg(long)]
        in_process: bool,
    },
    /// Find what transactions that have ended left on tables (locks, items created only to hold one), by reading every
    /// item of each table; with --clear, remove each with a conditional write on that very lock.
    Audit {
        /// The tables to read, whole (each costs a scan of the table: half a read unit per 4 KB).
        #[arg(required = true, value_name = "TABLE")]
        tables: Vec<String>,
        /// Remove what was found (a lock of a transaction still running is never touched).
        #[arg(long)]
        clear: bool,
    },
    /// Print a completion script for a shell.
    Completions {
        /// bash, elvish, fish, powershell or zsh.
        shell: Shell,
    },
}

/// A failure and its exit code.
pub struct Failure(i32, String);

impl From<TxError> for Failure {
    fn from(e: TxError) -> Self {
        let code = match &e {
            TxError::Validation(_) | TxError::AccessDenied(_) => 2,
            TxError::NotFound(_) => 3,
            TxError::Canceled(_) | TxError::Aborted(_) => 1,
            _ => 4,
        };
        Failure(code, format!("{}: {e}", e.name()))
    }
}

/// What every command works with: its arguments, the stack they name, and the AWS configuration.
struct Ctx {
    args: Args,
    stack: Option<stack::Stack>,
    sdk: aws_config::SdkConfig,
}

impl Ctx {
    /// The `SAGA_*` setting `k`: the stack's, when a stack is named and sets it; `--table`; else the environment.
    fn var(&self, k: &str) -> Option<String> {
        if let Some(v) = self.stack.as_ref().and_then(|s| s.var(k)) {
            return Some(v);
        }
        match &self.args.table {
            Some(t) if k == ENV_TX_TABLE => Some(t.clone()),
            _ => std::env::var(k).ok(),
        }
    }

    /// A store on this process's own credentials, for the commands that read or write the tables themselves.
    async fn store(&self) -> Result<Store, Failure> {
        let lookup = |k: &str| self.var(k);
        let mut cfg =
            Config::from_vars(lookup).map_err(|e| match lookup(ENV_TX_TABLE).filter(|t| !t.trim().is_empty()) {
                None => Failure(2, format!("{e} (or pass --stack or --table)")),
                Some(_) => Failure(2, e.to_string()),
            })?;
        // Metrics lines go to a function's log, which CloudWatch reads; here they would only mix into the output.
        cfg.metrics_namespace = None;
        // The AWS configuration this process loaded once (loading it again costs as much CPU as dozens of requests).
        Ok(Store::from_conf(aws_sdk_dynamodb::config::Builder::from(&self.sdk), cfg))
    }

    /// The stack's API, when a stack is named and `in_process` is not asked for.
    fn api(&self, in_process: bool) -> Result<Option<api::Api>, Failure> {
        match &self.stack {
            Some(stack) if !in_process => {
                api::Api::new(stack.output(stack::API_URL)?, &self.sdk).map(Some).map_err(|e| Failure(4, e))
            }
            _ => Ok(None),
        }
    }

    /// The state machine `arn` names, else the stack's, else `SAGA_STATE_MACHINE_ARN`'s.
    async fn state_machine(&self, arn: Option<&str>) -> Result<Option<StateMachine>, Failure> {
        let arn = match (arn, &self.stack) {
            (Some(arn), _) => Some(arn.to_string()),
            (None, Some(stack)) => Some(stack.output(stack::STATE_MACHINE_ARN)?.to_string()),
            (None, None) => std::env::var("SAGA_STATE_MACHINE_ARN").ok().filter(|s| !s.is_empty()),
        };
        let Some(arn) = arn else { return Ok(None) };
        Ok(Some(StateMachine { client: dynamo_saga::call_log::state_machine_client().await, arn }))
    }

    /// The state machine a command that would otherwise run in this process needs: an error that says what to pass
    /// when none is set, rather than a silent fallback to this process.
    async fn required_state_machine(&self, arn: Option<&str>, command: &str) -> Result<StateMachine, Failure> {
        self.state_machine(arn).await?.ok_or_else(|| {
            Failure(
                2,
                format!(
                    "{command} needs a stack (--stack NAME, or SAGA_STACK), a state machine (--state-machine ARN, or \
                     SAGA_STATE_MACHINE_ARN) or --in-process to run the transaction in this process"
                ),
            )
        })
    }
}

/// Where a transaction's status is read: the stack's API, or the transactions table itself.
enum Reader<'a> {
    Api(&'a api::Api),
    Table(&'a Store),
}

impl Reader<'_> {
    async fn status(&self, id: &str) -> Result<Status, TxError> {
        match self {
            Reader::Api(api) => api.call("GET", &format!("/{id}"), None).await,
            Reader::Table(store) => status::status(store, id).await,
        }
    }

    /// How long to wait between two reads while following: the API counts each request against its throttling.
    fn pause(&self) -> Duration {
        match self {
            Reader::Api(_) => Duration::from_secs(1),
            Reader::Table(_) => Duration::from_millis(250),
        }
    }
}

fn print_json(v: &Value) {
    println!("{}", serde_json::to_string_pretty(v).expect("JSON"));
}

/// The phase a status is in, and its batches done.
fn phase_progress(s: &Status) -> (&'static str, usize) {
    match s.next {
        phase::resume::Step::Lock(_) => ("Lock", s.progress.locked),
        phase::resume::Step::Save(_) => ("Save", s.progress.saved),
        phase::resume::Step::Apply(_) => ("Apply", s.progress.applied),
        phase::resume::Step::Commit => ("Commit", s.batches),
        phase::resume::Step::Complete(_) => ("Complete", s.progress.completed),
        phase::resume::Step::Rollback(_) => ("Rollback", s.progress.restored),
        phase::resume::Step::Retry => ("Retry", s.batches),
        phase::resume::Step::Release => ("Release", s.batches),
        phase::resume::Step::Finished => ("Finished", s.batches),
    }
}

/// One line for a status: `Apply  ######....  6/11 batches  1000 actions  PENDING  4.2 s`.
fn progress_line(s: &Status) -> String {
    let (phase, done) = phase_progress(s);
    let width = 20;
    let filled = (done * width).checked_div(s.batches).unwrap_or(width);
    format!(
        "{phase:<9} [{}{}] {done}/{} batches  {} actions  {}  {:.1} s",
        "#".repeat(filled),
        ".".repeat(width - filled),
        s.batches,
        s.actions,
        s.state.as_str(),
        s.elapsed_ms as f64 / 1000.0
    )
}

/// The progress line of `s` when its phase, its count of batches or its state differs from the one shown last.
fn changed_line(last: &mut String, s: &Status) -> Option<String> {
    let (phase, done) = phase_progress(s);
    let shown = format!("{phase} {done}/{} {}", s.batches, s.state.as_str());
    (shown != std::mem::replace(last, shown.clone())).then(|| progress_line(s))
}

fn print_status(json: bool, s: &Status) {
    if json {
        print_json(&serde_json::to_value(s).expect("status"));
        return;
    }
    println!("transaction {}: {}{}", s.transaction_id, s.state.as_str(), if s.finished { ", finished" } else { "" });
    println!("  {}", progress_line(s));
    if s.direct {
        println!("  carried out in one TransactWriteItems call, with no locks (its capacity is not in the header)");
    } else {
        println!(
            "  locked {}, saved {}, applied {}, completed {}, restored {} of {} batches",
            s.progress.locked,
            s.progress.saved,
            s.progress.applied,
            s.progress.completed,
            s.progress.restored,
            s.batches
        );
    }
    println!(
        "  DynamoDB: {} calls, {:.1} write units, {:.1} read units (as reported)",
        s.usage.calls, s.usage.write_units, s.usage.read_units
    );
    println!("  attempt {}, waited {:.1} s for other transactions' locks", s.attempt, s.waited_ms as f64 / 1000.0);
    for a in &s.attempts {
        println!(
            "  attempt {}: rolled back after {:.1} s (waited {:.1} s){}: {}",
            a.attempt,
            a.ended_at_ms.saturating_sub(a.started_at_ms) as f64 / 1000.0,
            a.waited_ms as f64 / 1000.0,
            a.rolled_back_by.as_deref().map(|b| format!(" by {b}")).unwrap_or_default(),
            a.reason
        );
    }
    if let Some(arn) = &s.execution_arn {
        println!("  execution {arn}");
    }
    if let Some(r) = &s.refused {
        println!("  DynamoDB refused to apply {} (batch {}): {}", r.action, r.batch, r.message);
        println!("  the item stays locked: mend what DynamoDB refuses, then `dynamo-saga resume {}`", s.transaction_id);
    }
    if let Some(c) = &s.cancellation {
        println!("  {}", c.message);
        if let Some(p) = &c.parent_cancellation_reason {
            println!("  Parent: {}{}", p.code, p.message.as_deref().map(|m| format!(" ({m})")).unwrap_or_default());
        }
        let failed: Vec<_> = c.failed().collect();
        for (i, r) in failed.iter().take(10) {
            println!(
                "  TransactItems[{i}]: {}{}",
                r.code,
                r.message.as_deref().map(|m| format!(" ({m})")).unwrap_or_default()
            );
        }
        if failed.len() > 10 {
            println!("  ... {} failing actions in all (--json lists every one)", failed.len());
        }
    }
}

/// How progress is shown on stderr: a bar on a terminal, a line per phase change otherwise, nothing with `--json`.
enum Progress {
    Bar(ProgressBar),
    Lines(String),
    Quiet,
}

impl Progress {
    fn new(json: bool) -> Progress {
        if json {
            return Progress::Quiet;
        }
        if !std::io::stderr().is_terminal() {
            return Progress::Lines(String::new());
        }
        let style = ProgressStyle::with_template("{prefix:9} [{bar:20}] {pos}/{len} batches  {msg}")
            .expect("a fixed, valid template")
            .progress_chars("#>.");
        Progress::Bar(ProgressBar::new(0).with_style(style))
    }

    fn show(&mut self, s: &Status) {
        match self {
            Progress::Bar(bar) => {
                let (phase, done) = phase_progress(s);
                bar.set_length(s.batches as u64);
                bar.set_position(done as u64);
                bar.set_prefix(phase);
                bar.set_message(format!(
                    "{} actions  {}  {:.1} s",
                    s.actions,
                    s.state.as_str(),
                    s.elapsed_ms as f64 / 1000.0
                ));
            }
            Progress::Lines(last) => {
                if let Some(line) = changed_line(last, s) {
                    eprintln!("{line}");
                }
            }
            Progress::Quiet => {}
        }
    }

    fn done(&self) {
        if let Progress::Bar(bar) = self {
            bar.finish();
        }
    }
}

/// Follows a transaction until it finishes (or `stopped` says the driver stopped), showing its progress.
async fn follow(
    reader: &Reader<'_>,
    id: &str,
    json: bool,
    mut stopped: impl FnMut() -> Option<String>,
) -> Result<Status, Failure> {
    let mut progress = Progress::new(json);
    loop {
        let s = reader.status(id).await?;
        progress.show(&s);
        if s.finished {
            progress.done();
            return Ok(s);
        }
        if let Some(why) = stopped() {
            progress.done();
            return Err(Failure(
                4,
                format!("{why}; transaction {id} is {} and not finished (the sweeper finishes it)", s.state.as_str()),
            ));
        }
        tokio::time::sleep(reader.pause()).await;
    }
}

fn read_request(path: &str) -> Result<Value, Failure> {
    let text = if path == "-" {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut s).map_err(|e| Failure(2, format!("stdin: {e}")))?;
        s
    } else {
        std::fs::read_to_string(path).map_err(|e| Failure(2, format!("{path}: {e}")))?
    };
    let v: Value = serde_json::from_str(&text).map_err(|e| Failure(2, format!("{path} is not valid JSON: {e}")))?;
    if !v.is_object() {
        return Err(Failure(2, format!("{path} must hold a JSON object with TransactItems")));
    }
    Ok(v)
}

/// The actions of one staged chunk: a chunk holds at most 1,000, well inside what one request or item holds.
const CHUNK_ACTIONS: usize = 1000;

/// Stages `body` (create, append in chunks of [`CHUNK_ACTIONS`], seal) in the transactions table: validated and
/// written, ready to run.
async fn stage_request(store: &Store, body: &Value) -> Result<String, Failure> {
    let (envelope, items) = split_request(body)?;
    let id = staging::create(store, &envelope).await?;
    let chunks: Vec<&[Value]> = items.chunks(CHUNK_ACTIONS).collect();
    for (i, chunk) in chunks.iter().enumerate() {
        staging::append(store, &id, i, &json!(chunk)).await?;
    }
    staging::seal(store, &id, Some(chunks.len())).await?;
    Ok(id)
}

/// Stages `body` through the API's staging routes, as [`stage_request`] does in the table.
async fn stage_through(api: &api::Api, body: &Value) -> Result<String, Failure> {
    let (envelope, items) = split_request(body)?;
    let created: Value = api.call("POST", "/staged", Some(&envelope)).await?;
    let id = created["TransactionId"].as_str().unwrap_or_default().to_string();
    let chunks: Vec<&[Value]> = items.chunks(CHUNK_ACTIONS).collect();
    for (i, chunk) in chunks.iter().enumerate() {
        let _: Value =
            api.call("PUT", &format!("/staged/{id}/chunks/{i}"), Some(&json!({ "TransactItems": chunk }))).await?;
    }
    let _: Value = api.call("POST", &format!("/staged/{id}/seal"), Some(&json!({ "Chunks": chunks.len() }))).await?;
    Ok(id)
}

/// A request's `TransactItems`, and the rest of it.
fn split_request(body: &Value) -> Result<(Value, Vec<Value>), Failure> {
    let mut envelope = body.as_object().cloned().unwrap_or_default();
    match envelope.remove("TransactItems") {
        Some(Value::Array(items)) => Ok((Value::Object(envelope), items)),
        _ => Err(TxError::invalid(None, "TransactItems is required and must be an array").into()),
    }
}

/// Whether `body` goes to `start` whole, as `POST /transactions` takes it: under 100 actions, which it carries out
/// in one call when it can. A larger one is staged in chunks, so no single request holds all of it.
fn small(body: &Value) -> bool {
    body["TransactItems"].as_array().is_some_and(|a| a.len() < dynamo_saga::constants::MAX_TRANSACT_ACTIONS)
}

/// Says how a transaction started, unless the output is JSON.
fn report_start(json: bool, started: &Started) {
    if json {
        return;
    }
    let id = &started.transaction_id;
    match &started.execution_arn {
        Some(arn) if !started.finished => eprintln!("transaction {id}: execution {arn}"),
        _ => eprintln!("transaction {id}: {}, carried out in one TransactWriteItems call", started.state.as_str()),
    }
}

async fn submit(
    ctx: &Ctx,
    path: &str,
    state_machine_arn: Option<&str>,
    in_process: bool,
    no_follow: bool,
) -> Result<i32, Failure> {
    let body = read_request(path)?;
    let json = ctx.args.json;
    let started = Instant::now();
    let final_status = if let Some(api) = ctx.api(in_process || state_machine_arn.is_some())? {
        let begun: Started = if small(&body) {
            api.call("POST", "", Some(&body)).await?
        } else {
            let id = stage_through(&api, &body).await?;
            api.call("POST", "", Some(&json!({ "TransactionId": id }))).await?
        };
        report_start(json, &begun);
        let reader = Reader::Api(&api);
        if no_follow || begun.finished {
            reader.status(&begun.transaction_id).await?
        } else {
            follow(&reader, &begun.transaction_id, json, || None).await?
        }
    } else if !in_process {
        let store = ctx.store().await?;
        let sm = ctx.required_state_machine(state_machine_arn, "submit").await?;
        let begun = if small(&body) {
            start::start(&store, &sm, &body).await?
        } else {
            let id = stage_request(&store, &body).await?;
            start::start(&store, &sm, &json!({ "TransactionId": id })).await?
        };
        report_start(json, &begun);
        let reader = Reader::Table(&store);
        match begun.execution_arn.filter(|_| !(no_follow || begun.finished)) {
            None => reader.status(&begun.transaction_id).await?,
            Some(arn) => {
                let (tx, mut rx) = tokio::sync::watch::channel(None::<String>);
                let client = sm.client.clone();
                let watcher = tokio::spawn(async move {
                    loop {
                        tokio::time::sleep(Duration::from_secs(2)).await;
                        if let Ok(d) = client.describe_execution().execution_arn(&arn).send().await {
                            let st = d.status().as_str().to_string();
                            if st != "RUNNING" && st != "PENDING_REDRIVE" {
                                let _ = tx.send(Some(format!(
                                    "the execution ended {st} ({})",
                                    d.error().unwrap_or("no error")
                                )));
                                return;
                            }
                        }
                    }
                });
                let s = follow(&reader, &begun.transaction_id, json, || rx.borrow_and_update().clone()).await;
                watcher.abort();
                s?
            }
        }
    } else {
        let store = ctx.store().await?;
        let begun = phase::begin::submit_here(&store, &body).await?;
        let id = begun.transaction_id.clone();
        if !json && begun.batches == 0 {
            eprintln!("transaction {id}: {} actions in one TransactWriteItems call", begun.actions);
        } else if !json {
            eprintln!(
                "transaction {id}: {} actions in {} batches, driven in this process",
                begun.actions, begun.batches
            );
        }
        let driver = tokio::spawn({
            let store = store.clone();
            let id = id.clone();
            async move { Coordinator::new(store).drive(&id).await }
        });
        let stopped = || driver.is_finished().then(|| "the driver stopped".to_string());
        let s = follow(&Reader::Table(&store), &id, json, stopped).await;
        if let Ok(Err(e)) = driver.await {
            if !matches!(e, TxError::Canceled(_) | TxError::Aborted(_)) {
                return Err(e.into());
            }
        }
        s?
    };
    print_status(json, &final_status);
    if !json {
        println!("  {:.1} s in all", started.elapsed().as_secs_f64());
    }
    Ok(match (final_status.finished, final_status.state) {
        (_, TxState::RolledBack) => 1,
        (true, TxState::Committed) | (false, _) => 0,
        (true, TxState::Pending) => 4,
    })
}

async fn show_status(ctx: &Ctx, id: &str) -> Result<i32, Failure> {
    let s = match ctx.api(false)? {
        Some(api) => Reader::Api(&api).status(id).await?,
        None => status::status(&ctx.store().await?, id).await?,
    };
    print_status(ctx.args.json, &s);
    Ok(0)
}

async fn resume(ctx: &Ctx, id: &str, state_machine_arn: Option<&str>, in_process: bool) -> Result<i32, Failure> {
    status::check_id(id)?;
    let resumed: Option<Started> = if let Some(api) = ctx.api(in_process || state_machine_arn.is_some())? {
        Some(api.call("POST", &format!("/{id}/resume"), None).await?)
    } else if !in_process {
        let sm = ctx.required_state_machine(state_machine_arn, "resume").await?;
        Some(start::resume(&ctx.store().await?, Some(&sm), id).await?)
    } else {
        None
    };
    if let Some(resumed) = resumed {
        if ctx.args.json {
            print_json(&serde_json::to_value(&resumed).expect("resumed"));
        } else {
            match &resumed.execution_arn {
                Some(arn) => println!("transaction {id}: {}, resumed by execution {arn}", resumed.state.as_str()),
                None => println!("transaction {id}: {}, finished: nothing to resume", resumed.state.as_str()),
            }
        }
        return Ok(0);
    }
    let store = ctx.store().await?;
    let outcome = Coordinator::new(store.clone()).drive(id).await;
    let s = status::status(&store, id).await?;
    print_status(ctx.args.json, &s);
    match outcome {
        Ok(_) => Ok(0),
        Err(TxError::Canceled(_) | TxError::Aborted(_)) => Ok(1),
        Err(e) => Err(e.into()),
    }
}

async fn get(ctx: &Ctx, table: &str, key: &str, isolation: Isolation) -> Result<i32, Failure> {
    let bad_key = |m: String| Failure(2, m);
    let key: Value = serde_json::from_str(key).map_err(|e| bad_key(format!("KEY is not valid JSON: {e}")))?;
    let key = item_from_json(&key).map_err(|e| bad_key(format!("KEY is not DynamoDB JSON: {e}")))?;
    let item = read::get_item(&ctx.store().await?, table, key, isolation).await?;
    match (item, ctx.args.json) {
        (Some(i), _) => print_json(&item_to_json(&i)),
        (None, json) => {
            if json {
                println!("null");
            } else {
                eprintln!("no item");
            }
            return Ok(3);
        }
    }
    Ok(0)
}

/// Runs the stack's sweeper function once (`lambda:InvokeFunction`), as its schedule does, and returns its report.
async fn sweep_by_stack(
    ctx: &Ctx,
    stack: &stack::Stack,
    older_than: Option<u64>,
    max: Option<usize>,
) -> Result<SweepReport, Failure> {
    let arn = stack.output(stack::SWEEPER_FUNCTION_ARN)?;
    // Lambda takes the function's name as well as its ARN; the stack's function is in this Region and account.
    let function = arn.rsplit_once(":function:").map_or(arn, |(_, name)| name);
    let mut input = json!({});
    if let Some(s) = older_than {
        input["OlderThanSeconds"] = json!(s);
    }
    if let Some(n) = max {
        input["MaxTransactions"] = json!(n);
    }
    let mut conf = aws_sdk_lambda::config::Builder::from(&ctx.sdk);
    if let Some(log) = dynamo_saga::call_log::CallLog::from_env() {
        conf = conf.interceptor(log);
    }
    let out = aws_sdk_lambda::Client::from_conf(conf.build())
        .invoke()
        .function_name(function)
        .payload(aws_sdk_lambda::primitives::Blob::new(input.to_string()))
        .send()
        .await
        .map_err(|e| {
            Failure(4, format!("invoking the sweeper {arn}: {}", aws_sdk_lambda::error::DisplayErrorContext(&e)))
        })?;
    let payload = out.payload().map(|p| p.as_ref().to_vec()).unwrap_or_default();
    if let Some(kind) = out.function_error() {
        let v: Value = serde_json::from_slice(&payload).unwrap_or(Value::Null);
        return Err(Failure(
            4,
            format!(
                "the sweeper {arn} failed ({kind}): {} {}",
                v["errorType"].as_str().unwrap_or(""),
                v["errorMessage"].as_str().unwrap_or("")
            ),
        ));
    }
    serde_json::from_slice(&payload)
        .map_err(|e| Failure(4, format!("the sweeper {arn} answered what is not a sweep report ({e})")))
}

async fn sweep(
    ctx: &Ctx,
    older_than: Option<u64>,
    max: Option<usize>,
    state_machine_arn: Option<&str>,
    in_process: bool,
) -> Result<i32, Failure> {
    let report = match &ctx.stack {
        Some(stack) if !in_process && state_machine_arn.is_none() => {
            sweep_by_stack(ctx, stack, older_than, max).await?
        }
        _ => {
            let mut sweeper =
                Sweeper::from_vars(ctx.store().await?, |k| ctx.var(k)).map_err(|e| Failure(2, e.to_string()))?;
            if let Some(s) = older_than {
                sweeper.stale_after = Duration::from_secs(s);
            }
            if let Some(n) = max {
                sweeper.max_transactions = n;
            }
            sweeper.state_machine =
                if in_process { None } else { Some(ctx.required_state_machine(state_machine_arn, "sweep").await?) };
            sweeper.sweep().await?
        }
    };
    let v = serde_json::to_value(&report).expect("report");
    if ctx.args.json {
        print_json(&v);
    } else {
        println!(
            "examined {}, left running {}, finished {}, recovery executions {}, visited again {}, failed {}{}",
            report.examined,
            report.running.len(),
            report.finished.len(),
            report.recovery_executions.len(),
            report.revisited.len(),
            report.failed.len(),
            if report.more { " (more left: run again)" } else { "" }
        );
        for r in &report.revisited {
            println!("  visited again: {} ({})", r.transaction_id, r.outcome);
        }
        for f in &report.failed {
            println!("  failed: {}: {}", f.transaction_id, f.outcome);
        }
    }
    Ok(if report.failed.is_empty() { 0 } else { 4 })
}

/// Exit 0 when nothing was found (or everything found was cleared), 1 when traces are left.
async fn audit(ctx: &Ctx, tables: &[String], clear: bool) -> Result<i32, Failure> {
    let json = ctx.args.json;
    let store = ctx.store().await?;
    let mut left = 0;
    let mut reports = Vec::new();
    for table in tables {
        let shown = !json && std::io::stderr().is_terminal();
        let report = dynamo_saga::audit::audit_table(&store, table, clear, |p| {
            if shown {
                eprint!("\r{}: {} items read", p.table_name, p.scanned);
            }
        })
        .await?;
        if shown {
            eprintln!();
        }
        left += report.traces.iter().filter(|t| !t.cleared).count();
        if !json {
            println!(
                "{}: {} items read ({:.1} read units), {} locked by transactions under way, {} left by ended ones{}",
                report.table_name,
                report.scanned,
                report.read_units,
                report.in_progress,
                report.traces.len(),
                if clear {
                    format!(", {} cleared", report.traces.iter().filter(|t| t.cleared).count())
                } else {
                    String::new()
                }
            );
            for t in &report.traces {
                println!(
                    "  {} of {} ({}){}: {}{}",
                    t.key,
                    t.transaction_id,
                    t.transaction_state,
                    if t.transient { ", an item created only to hold the lock" } else { "" },
                    t.attributes.join(", "),
                    if t.cleared { "  [cleared]" } else { "" }
                );
            }
        }
        reports.push(report);
    }
    if json {
        print_json(&serde_json::to_value(&reports).expect("reports"));
    }
    Ok(if left == 0 { 0 } else { 1 })
}

fn completions(shell: Shell) -> Result<i32, Failure> {
    clap_complete::generate(shell, &mut Args::command(), "dynamo-saga", &mut std::io::stdout());
    Ok(0)
}

async fn run(args: Args) -> Result<i32, Failure> {
    // A completion script needs no AWS configuration, nor the stack SAGA_STACK may name.
    if let Command::Completions { shell } = &args.command {
        return completions(*shell);
    }
    let sdk = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
    let stack = match args.stack.as_deref().filter(|s| !s.is_empty()) {
        Some(name) => Some(stack::Stack::describe(name, &sdk).await?),
        None => None,
    };
    let ctx = Ctx { args, stack, sdk };
    match &ctx.args.command {
        Command::Submit { file, state_machine, in_process, no_follow } => {
            submit(&ctx, file, state_machine.as_deref(), *in_process, *no_follow).await
        }
        Command::Status { id } => show_status(&ctx, id).await,
        Command::Resume { id, state_machine, in_process } => {
            resume(&ctx, id, state_machine.as_deref(), *in_process).await
        }
        Command::Get { item_table, key, isolation } => get(&ctx, item_table, key, *isolation).await,
        Command::Sweep { older_than, max, state_machine, in_process } => {
            sweep(&ctx, *older_than, *max, state_machine.as_deref(), *in_process).await
        }
        Command::Audit { tables, clear } => audit(&ctx, tables, *clear).await,
        Command::Completions { shell } => completions(*shell),
    }
}

/// What to check when DynamoDB says a table does not exist: the item tables were found when the request was
/// checked, so it is most likely the transactions table.
fn missing_table_hint(table: &str) -> String {
    format!(
        "  the transactions table {table:?} ({ENV_TX_TABLE} or --table) may not exist in this account, Region and \
         endpoint:\n  `sam deploy` creates it (the stack's TransactionsTableName output); docs/cli.md shows it created \
         on DynamoDB Local"
    )
}

#[tokio::main]
async fn main() {
    // Usage errors exit 2, --help and --version 0, as clap has it.
    let args = Args::parse();
    if args.verbose > 0 || std::env::var_os("RUST_LOG").is_some() {
        let level = if args.verbose > 1 { "debug" } else { "info" };
        let filter = tracing_subscriber::EnvFilter::try_from_default_env()
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(format!("dynamo_saga={level},warn")));
        tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).init();
    }
    let tx_table = args.table.clone().or_else(|| std::env::var(ENV_TX_TABLE).ok());
    let code = match run(args).await {
        Ok(code) => code,
        Err(Failure(code, text)) => {
            eprintln!("dynamo-saga: {text}");
            if let Some(table) = tx_table.filter(|_| text.contains("ResourceNotFoundException")) {
                eprintln!("{}", missing_table_hint(&table));
            }
            code
        }
    };
    let _ = std::io::stdout().flush();
    std::process::exit(code);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(step: Value, locked: usize, state: &str, elapsed_ms: u64) -> Status {
        serde_json::from_value(json!({
            "Actions": 250, "Attempt": 1, "Batches": 3, "CreatedAtMs": 1, "DeadlineMs": 2, "ElapsedMs": elapsed_ms,
            "Finished": false, "Next": step, "Protocol": 2, "State": state, "TransactionId": "01M8G54TWV946XJ72F77K8XZVD",
            "UpdatedAtMs": 1, "WaitedMs": 0,
            "Progress": {"Applied": 0, "Completed": 0, "Locked": locked, "Restored": 0, "Saved": 0},
            "Usage": {"Calls": 0, "ReadUnits": 0.0, "WriteUnits": 0.0, "Writes": 0},
        }))
        .unwrap()
    }

    /// Without a terminal, a line is printed each time the phase, its count or the state changes, and only then:
    /// "Lock" and "Save" are padded like the others, so their counts show too.
    #[test]
    fn a_progress_line_each_time_the_phase_or_its_count_changes() {
        let mut last = String::new();
        let lock = |n: usize, ms: u64| status(json!({"Step": "Lock", "Batch": n}), n, "PENDING", ms);
        let shown: Vec<Option<String>> = [
            lock(0, 0),
            lock(0, 100),
            lock(1, 200),
            lock(2, 300),
            lock(2, 400),
            status(json!({"Step": "Rollback", "Batch": 0}), 2, "ROLLED_BACK", 500),
        ]
        .iter()
        .map(|s| changed_line(&mut last, s))
        .collect();
        let counts: Vec<Option<&str>> =
            shown.iter().map(|l| l.as_deref().map(|l| l.split(']').nth(1).unwrap().trim())).collect();
        assert_eq!(
            counts,
            [
                Some("0/3 batches  250 actions  PENDING  0.0 s"),
                None,
                Some("1/3 batches  250 actions  PENDING  0.2 s"),
                Some("2/3 batches  250 actions  PENDING  0.3 s"),
                None,
                Some("0/3 batches  250 actions  ROLLED_BACK  0.5 s"),
            ]
        );
    }
}
