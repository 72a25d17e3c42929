//! `dynamo-saga submit`: validate and start a transaction, and follow it to its end.

use std::time::{Duration, Instant};

use dynamo_saga::start::{self, Started};
use dynamo_saga::{phase, staging, Coordinator, Store, TxError, TxState};
use serde_json::{json, Value};

use crate::api::Api;
use crate::context::{Ctx, Failure};
use crate::output::{follow, print_status, Reader};

/// Validate and start a transaction and follow it to its end: through a stack's API (--stack or SAGA_STACK), through a
/// state machine (--state-machine or SAGA_STATE_MACHINE_ARN), or in this process (--in-process); one of them is
/// required.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// TransactWriteItems JSON (`-` reads stdin).
    pub file: String,
    /// The state machine to run it, the request begun in this process (without a stack: SAGA_STATE_MACHINE_ARN).
    #[arg(long, value_name = "ARN", conflicts_with = "in_process")]
    pub state_machine: Option<String>,
    /// Drive it in this process, with your own access to the tables, even when a stack or state machine is set.
    #[arg(long)]
    pub in_process: bool,
    /// Start it and report its status without following it.
    #[arg(long)]
    pub no_follow: bool,
}

/// The JSON object in `path` (`-`: stdin).
pub(crate) fn read_request(path: &str) -> Result<Value, Failure> {
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
async fn stage_through(api: &Api, body: &Value) -> Result<String, Failure> {
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

pub async fn exec(ctx: &Ctx, args: &Args) -> Result<i32, Failure> {
    let Args { file, state_machine, in_process, no_follow } = args;
    let (state_machine_arn, in_process, no_follow) = (state_machine.as_deref(), *in_process, *no_follow);
    let body = read_request(file)?;
    let json = ctx.json;
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
