//! The scheduled sweeper. Environment: the `SAGA_*` variables of every function, plus `SAGA_STATE_MACHINE_ARN` (start
//! recovery executions of this state machine; unset: finish transactions in-process), `SAGA_SWEEP_AFTER_SECONDS`
//! (how long a transaction must have been still to count as stale, default 120) and `SAGA_SWEEP_MAX` (transactions
//! per run, default 100). The event is ignored except for optional `OlderThanSeconds` and `MaxTransactions`, for runs
//! by hand; the output is the sweep report.

use std::time::Duration;

use dynamo_saga::sweeper::{StateMachine, Sweeper};
use lambda_runtime::{service_fn, Diagnostic, LambdaEvent};
use saga_lambda::{Error, PhaseError};
use serde_json::Value;

/// Serves the function's events until the Lambda runtime stops it.
pub async fn run() -> Result<(), Error> {
    saga_lambda::init_logs();
    let store = saga_lambda::store_from_env().await?;
    let mut sweeper =
        Sweeper::from_vars(store, |k| std::env::var(k).ok()).map_err(|e| format!("configuration: {e}"))?;
    if let Ok(arn) = std::env::var("SAGA_STATE_MACHINE_ARN") {
        if !arn.is_empty() {
            let client = dynamo_saga::call_log::state_machine_client().await;
            sweeper.state_machine = Some(StateMachine { client, arn });
        }
    }
    let sweeper = &sweeper;
    lambda_runtime::run(service_fn(|event: LambdaEvent<Value>| async move {
        let mut this = sweeper.clone();
        if let Some(s) = event.payload.get("OlderThanSeconds").and_then(Value::as_u64) {
            this.stale_after = Duration::from_secs(s);
        }
        if let Some(n) = event.payload.get("MaxTransactions").and_then(Value::as_u64) {
            this.max_transactions = n as usize;
        }
        // The call's time less a margin, as a phase call keeps it (a deadline that is not a real one, as a local
        // Invoke API gives, leaves the phases' fallback).
        let budget = dynamo_saga::lambda::Budget::before_deadline(event.context.deadline, Duration::from_secs(10));
        this.budget = budget.until.saturating_duration_since(std::time::Instant::now());
        match this.sweep().await {
            Ok(report) => Ok(serde_json::to_value(report).expect("serialisable")),
            Err(e) => Err(Diagnostic::from(PhaseError(e))),
        }
    }))
    .await
}
