//! `dynamo-saga`: submit a transaction and follow it, read a transaction's status, read an item at an isolation
//! level, run the sweeper once. AWS settings come from the standard chain (profile, region, credentials, and
//! `AWS_ENDPOINT_URL_DYNAMODB` / `AWS_ENDPOINT_URL_SFN` for local endpoints); dynamo-saga's from the `SAGA_*`
//! variables the functions use (`SAGA_TABLE`, `SAGA_ALLOWED_TABLES`, ...) and `SAGA_STATE_MACHINE_ARN`.
//!
//! Exit codes: 0 done (committed), 1 the transaction rolled back, 2 bad arguments or a rejected request,
//! 3 no such transaction, 4 any other failure.

use std::io::{IsTerminal, Write};
use std::str::FromStr;
use std::time::{Duration, Instant};

use clap::{CommandFactory, Parser, Subcommand};
use clap_complete::Shell;
use indicatif::{ProgressBar, ProgressStyle};

use dynamo_saga::constants::ENV_TX_TABLE;
use dynamo_saga::read::{self, Isolation};
use dynamo_saga::status::{self, Status};
use dynamo_saga::sweeper::{StateMachine, Sweeper};
use dynamo_saga::value::{item_from_json, item_to_json};
use dynamo_saga::{phase, stage, start, Config, Coordinator, Store, TxError, TxState};
use serde_json::{json, Value};

/// Submit a transaction and follow it, read its status, read an item at an isolation level, or sweep.
#[derive(Debug, Parser)]
#[command(name = "dynamo-saga", version, about, long_about = None, after_help = EXIT_CODES)]
struct Args {
    /// Print JSON on stdout instead of text (and no progress on stderr).
    #[arg(long, global = true)]
    json: bool,
    /// The transactions table (default: SAGA_TABLE; the other SAGA_* settings still apply).
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
struct Failure(i32, String);

impl From<TxError> for Failure {
    fn from(e: TxError) -> Self {
        let code = match &e {
            TxError::Validation(_) => 2,
            TxError::NotFound(_) => 3,
            TxError::Canceled(_) | TxError::Aborted(_) => 1,
            _ => 4,
        };
        Failure(code, format!("{}: {e}", e.name()))
    }
}

async fn store(a: &Args) -> Result<Store, Failure> {
    let lookup = |k: &str| match &a.table {
        Some(t) if k == ENV_TX_TABLE => Some(t.clone()),
        _ => std::env::var(k).ok(),
    };
    let mut cfg =
        Config::from_vars(lookup).map_err(|e| match lookup(ENV_TX_TABLE).filter(|t| !t.trim().is_empty()) {
            None => Failure(2, format!("{e} (or pass --table)")),
            Some(_) => Failure(2, e.to_string()),
        })?;
    // Metrics lines go to a function's log, which CloudWatch reads; here they would only mix into the output.
    cfg.metrics_namespace = None;
    Ok(Store::connect(cfg).await)
}

async fn state_machine(arn: Option<&str>) -> Option<StateMachine> {
    let arn =
        arn.map(String::from).or_else(|| std::env::var("SAGA_STATE_MACHINE_ARN").ok().filter(|s| !s.is_empty()))?;
    Some(StateMachine { client: dynamo_saga::calls::state_machine_client().await, arn })
}

/// The state machine a command that would otherwise run in this process needs: an error that says what to pass when
/// none is set, rather than a silent fallback to this process.
async fn required_state_machine(arn: Option<&str>, command: &str) -> Result<StateMachine, Failure> {
    state_machine(arn).await.ok_or_else(|| {
        Failure(
            2,
            format!(
                "{command} needs a state machine (--state-machine ARN, or SAGA_STATE_MACHINE_ARN) or --in-process to \
                 run the transaction in this process"
            ),
        )
    })
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
    store: &Store,
    id: &str,
    json: bool,
    mut stopped: impl FnMut() -> Option<String>,
) -> Result<Status, Failure> {
    let mut progress = Progress::new(json);
    loop {
        let s = status::status(store, id).await?;
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
        tokio::time::sleep(Duration::from_millis(250)).await;
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

/// Stages `body` (create, append in chunks of at most 1,000 actions, seal): validated and written, ready to run.
async fn stage_request(store: &Store, body: &Value) -> Result<String, Failure> {
    let mut envelope = body.as_object().cloned().unwrap_or_default();
    let items = envelope.remove("TransactItems").unwrap_or(Value::Null);
    let Some(list) = items.as_array() else {
        return Err(TxError::invalid(None, "TransactItems is required and must be an array").into());
    };
    let id = stage::create(store, &Value::Object(envelope)).await?;
    let chunks: Vec<&[Value]> = list.chunks(1000).collect();
    for (i, chunk) in chunks.iter().enumerate() {
        stage::append(store, &id, i, &json!(chunk)).await?;
    }
    stage::seal(store, &id, Some(chunks.len())).await?;
    Ok(id)
}

async fn submit(
    a: &Args,
    path: &str,
    state_machine_arn: Option<&str>,
    in_process: bool,
    no_follow: bool,
) -> Result<i32, Failure> {
    let body = read_request(path)?;
    let store = store(a).await?;
    let sm = if in_process { None } else { Some(required_state_machine(state_machine_arn, "submit").await?) };
    let started = Instant::now();
    let final_status = match sm {
        Some(sm) => {
            // Under 100 actions the request goes to start() whole, as POST /transactions sends it, which carries it
            // out in one call when it can; a larger one is staged in chunks, so no single call holds all of it.
            let small = body["TransactItems"]
                .as_array()
                .is_some_and(|a| a.len() < dynamo_saga::constants::MAX_TRANSACT_ACTIONS);
            let started = if small {
                dynamo_saga::start::start(&store, &sm, &body).await?
            } else {
                let id = stage_request(&store, &body).await?;
                dynamo_saga::start::start(&store, &sm, &json!({ "TransactionId": id })).await?
            };
            let id = started.transaction_id;
            if !a.json {
                match &started.execution_arn {
                    Some(arn) => eprintln!("transaction {id}: execution {arn}"),
                    None => eprintln!(
                        "transaction {id}: {} in one TransactWriteItems call; its execution could not be started",
                        started.state.as_str()
                    ),
                }
            }
            let arn = started.execution_arn.unwrap_or_default();
            if no_follow {
                status::status(&store, &id).await?
            } else {
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
                let s = follow(&store, &id, a.json, || rx.borrow_and_update().clone()).await;
                watcher.abort();
                s?
            }
        }
        None => {
            let begun = phase::begin::submit_here(&store, &body).await?;
            let id = begun.transaction_id.clone();
            if !a.json && begun.batches == 0 {
                eprintln!("transaction {id}: {} actions in one TransactWriteItems call", begun.actions);
            } else if !a.json {
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
            let s = follow(&store, &id, a.json, stopped).await;
            if let Ok(Err(e)) = driver.await {
                if !matches!(e, TxError::Canceled(_) | TxError::Aborted(_)) {
                    return Err(e.into());
                }
            }
            s?
        }
    };
    print_status(a.json, &final_status);
    if !a.json {
        println!("  {:.1} s in all", started.elapsed().as_secs_f64());
    }
    Ok(match (final_status.finished, final_status.state) {
        (_, TxState::RolledBack) => 1,
        (true, TxState::Committed) | (false, _) => 0,
        (true, TxState::Pending) => 4,
    })
}

async fn show_status(a: &Args, id: &str) -> Result<i32, Failure> {
    let s = status::status(&store(a).await?, id).await?;
    print_status(a.json, &s);
    Ok(0)
}

async fn resume(a: &Args, id: &str, state_machine_arn: Option<&str>, in_process: bool) -> Result<i32, Failure> {
    status::check_id(id)?;
    let store = store(a).await?;
    let sm = if in_process { None } else { Some(required_state_machine(state_machine_arn, "resume").await?) };
    if let Some(sm) = sm {
        let resumed = start::resume(&store, Some(&sm), id).await?;
        if a.json {
            print_json(&serde_json::to_value(&resumed).expect("resumed"));
        } else {
            match &resumed.execution_arn {
                Some(arn) => println!("transaction {id}: {}, resumed by execution {arn}", resumed.state.as_str()),
                None => println!("transaction {id}: {}, finished: nothing to resume", resumed.state.as_str()),
            }
        }
        return Ok(0);
    }
    let outcome = Coordinator::new(store.clone()).drive(id).await;
    let s = status::status(&store, id).await?;
    print_status(a.json, &s);
    match outcome {
        Ok(_) => Ok(0),
        Err(TxError::Canceled(_) | TxError::Aborted(_)) => Ok(1),
        Err(e) => Err(e.into()),
    }
}

async fn get(a: &Args, table: &str, key: &str, isolation: Isolation) -> Result<i32, Failure> {
    let bad_key = |m: String| Failure(2, m);
    let key: Value = serde_json::from_str(key).map_err(|e| bad_key(format!("KEY is not valid JSON: {e}")))?;
    let key = item_from_json(&key).map_err(|e| bad_key(format!("KEY is not DynamoDB JSON: {e}")))?;
    let item = read::get_item(&store(a).await?, table, key, isolation).await?;
    match (item, a.json) {
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

async fn sweep(
    a: &Args,
    older_than: Option<u64>,
    max: Option<usize>,
    state_machine_arn: Option<&str>,
    in_process: bool,
) -> Result<i32, Failure> {
    let mut sweeper =
        Sweeper::from_vars(store(a).await?, |k| std::env::var(k).ok()).map_err(|e| Failure(2, e.to_string()))?;
    if let Some(s) = older_than {
        sweeper.stale_after = Duration::from_secs(s);
    }
    if let Some(n) = max {
        sweeper.max_transactions = n;
    }
    sweeper.state_machine =
        if in_process { None } else { Some(required_state_machine(state_machine_arn, "sweep").await?) };
    let report = sweeper.sweep().await?;
    let v = serde_json::to_value(&report).expect("report");
    if a.json {
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
async fn audit(a: &Args, tables: &[String], clear: bool) -> Result<i32, Failure> {
    let store = store(a).await?;
    let mut left = 0;
    let mut reports = Vec::new();
    for table in tables {
        let shown = !a.json && std::io::stderr().is_terminal();
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
        if !a.json {
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
    if a.json {
        print_json(&serde_json::to_value(&reports).expect("reports"));
    }
    Ok(if left == 0 { 0 } else { 1 })
}

async fn run(a: Args) -> Result<i32, Failure> {
    match &a.command {
        Command::Submit { file, state_machine, in_process, no_follow } => {
            submit(&a, file, state_machine.as_deref(), *in_process, *no_follow).await
        }
        Command::Status { id } => show_status(&a, id).await,
        Command::Resume { id, state_machine, in_process } => {
            resume(&a, id, state_machine.as_deref(), *in_process).await
        }
        Command::Get { item_table, key, isolation } => get(&a, item_table, key, *isolation).await,
        Command::Sweep { older_than, max, state_machine, in_process } => {
            sweep(&a, *older_than, *max, state_machine.as_deref(), *in_process).await
        }
        Command::Audit { tables, clear } => audit(&a, tables, *clear).await,
        Command::Completions { shell } => {
            clap_complete::generate(*shell, &mut Args::command(), "dynamo-saga", &mut std::io::stdout());
            Ok(0)
        }
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
