//! `dynamo-saga sweep`: finish abandoned transactions once, as the scheduled sweeper does.

use std::time::Duration;

use dynamo_saga::sweeper::{SweepReport, Sweeper};
use serde_json::{json, Value};

use crate::context::{Ctx, Failure};
use crate::output::print_json;
use crate::stack::{self, Stack};

/// Finish abandoned transactions once, as the scheduled sweeper does.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Only transactions still for this long (default: SAGA_SWEEP_AFTER_SECONDS, else 120, as the sweeper
    /// function).
    #[arg(long, value_name = "SECONDS")]
    pub older_than: Option<u64>,
    /// At most this many transactions (default: SAGA_SWEEP_MAX, else 100).
    #[arg(long, value_name = "N")]
    pub max: Option<usize>,
    /// Start recovery executions of this state machine (default: SAGA_STATE_MACHINE_ARN), which is also asked
    /// whether an execution still drives a transaction.
    #[arg(long, value_name = "ARN", conflicts_with = "in_process")]
    pub state_machine: Option<String>,
    /// Finish them in this process, with no state machine to ask whether an execution still drives one: a
    /// transaction still for --older-than is taken as abandoned.
    #[arg(long)]
    pub in_process: bool,
}

/// Runs the stack's sweeper function once (`lambda:InvokeFunction`), as its schedule does, and returns its report.
async fn sweep_by_stack(
    ctx: &Ctx,
    stack: &Stack,
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

pub async fn exec(ctx: &Ctx, args: &Args) -> Result<i32, Failure> {
    let Args { older_than, max, state_machine, in_process } = args;
    let (older_than, max, state_machine_arn, in_process) = (*older_than, *max, state_machine.as_deref(), *in_process);
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
    if ctx.json {
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
