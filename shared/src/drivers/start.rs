//! Starting a transaction for a caller that does not wait for it (the API's `POST /transactions`, the events
//! function).
//!
//! The request is validated and begun here, before any execution exists, so a bad request is answered at once with
//! the action and the reason and starts nothing. A request one `TransactWriteItems` call can carry is carried out here,
//! in that call (`direct`), and needs no execution at all: the answer says how it ended. Any other is run by an
//! execution started with `{"TransactionId": id}` and named after the transaction: a retried call (the same
//! `ClientRequestToken`, so the same transaction) finds its execution already there instead of starting another. The
//! request is stored by begin, so it is not bound by the 256 KB of an execution input, only by what reaches this code.
//!
//! A transaction begun here whose execution could not be started (Step Functions throttled or failed) is not left
//! open: calling again with the same token starts it, and if nobody does, the sweeper rolls it back once it has stood
//! still for its `SweepAfterSeconds` (a pending transaction nobody drives can never commit).

use aws_sdk_sfn::error::ProvideErrorMetadata;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::dynamo::store::{Meter, Store};
use crate::error::{Cancellation, TxError};
use crate::protocol::phase::begin;
use crate::protocol::records::{self, TxState};

/// A deployed dynamo-saga state machine: where [`start`] starts executions (and the sweeper its recovery executions).
#[derive(Debug, Clone)]
pub struct StateMachine {
    pub client: aws_sdk_sfn::Client,
    pub arn: String,
}

impl StateMachine {
    /// Starts execution `name` for transaction `tx_id` (input `{"TransactionId"}`), as Step Functions answers it.
    pub async fn start_for(
        &self,
        tx_id: &str,
        name: &str,
    ) -> Result<
        aws_sdk_sfn::operation::start_execution::StartExecutionOutput,
        aws_sdk_sfn::error::SdkError<aws_sdk_sfn::operation::start_execution::StartExecutionError>,
    > {
        let input = json!({ "TransactionId": tx_id }).to_string();
        self.client.start_execution().state_machine_arn(&self.arn).name(name).input(input).send().await
    }
}

/// What [`start`] did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Started {
    pub transaction_id: String,
    /// The execution named after the transaction: started by this call, or by an earlier one with the same request.
    /// Absent for a transaction carried out in one `TransactWriteItems` call, which no execution runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execution_arn: Option<String>,
    /// The transaction's state when this call answered: `PENDING` while its execution runs it, `COMMITTED` or
    /// `ROLLED_BACK` when it has ended (carried out in one call, here or by an earlier call with the same request).
    pub state: TxState,
    /// Whether the transaction has ended: nothing is left to run, and `state` is its outcome.
    #[serde(default)]
    pub finished: bool,
    /// For a transaction that ended `ROLLED_BACK` because of its actions: the reasons, one per action, as
    /// `TransactionCanceledException` gives them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancellation: Option<Box<Cancellation>>,
}

impl Started {
    /// The answer for a transaction that has ended: the execution that ran it, if one did, and its reasons.
    fn ended(h: &records::Header) -> Self {
        let cancellation = match h.rollback_error() {
            Some(TxError::Canceled(c)) => Some(c),
            _ => None,
        };
        Started {
            transaction_id: h.id.clone(),
            execution_arn: h.execution_arn.clone(),
            state: h.state,
            finished: true,
            cancellation,
        }
    }
}

/// `body` is a request (`TransactItems`, with `ClientRequestToken`, `Parent` and `Options` as `TransactWriteItems`
/// and dynamo-saga take them) or `{"TransactionId"}` of a sealed staged transaction. Validates and begins the
/// request (every check Begin makes; nothing is written for a bad one); carries it out here when one call can, and
/// otherwise starts its execution.
pub async fn start(store: &Store, sm: &StateMachine, body: &Value) -> Result<Started, TxError> {
    let staged = body.as_object().filter(|o| o.len() == 1).and_then(|o| o.get("TransactionId"));
    let (id, state) = match staged {
        Some(Value::String(id)) => {
            // Only a transaction that exists (a sealed staged one, or one begun before) is started.
            let h = records::read_header(store, &Meter::default(), id).await?;
            if h.finished() {
                return Ok(Started::ended(&h));
            }
            (id.clone(), h.state)
        }
        Some(_) => return Err(TxError::invalid(None, "TransactionId must be a string")),
        None => {
            let begun = begin::submit(store, body, None, None).await?;
            begun.report_end(store).await;
            if let Some(h) = begun.header.as_deref().filter(|h| h.finished()) {
                return Ok(Started::ended(h));
            }
            (begun.transaction_id, begun.state)
        }
    };
    let started = |execution_arn: String| Started {
        transaction_id: id.clone(),
        execution_arn: Some(execution_arn),
        state,
        finished: false,
        cancellation: None,
    };
    match sm.start_for(&id, &id).await {
        Ok(out) => Ok(started(out.execution_arn().to_string())),
        Err(e) if e.as_service_error().is_some_and(|s| s.is_execution_already_exists()) => {
            Ok(started(execution_arn(&sm.arn, &id)))
        }
        Err(e) => {
            let detail = aws_sdk_sfn::error::DisplayErrorContext(&e);
            let message =
                format!("transaction {id} is begun, but StartExecution failed (call again to start it): {detail}");
            Err(start_failed(e.code(), message))
        }
    }
}

/// Resumes transaction `tx_id` in a new execution of `sm` (named `resume-<id>-<ULID>`), for a transaction whose
/// execution ended before it did: after `RecoveryNeeded`, once what DynamoDB refused is mended (its status's
/// `Refused`), or to finish it sooner than the sweeper would. Every phase is safe to run from several executions at
/// once, so resuming one whose execution still runs costs calls, nothing else. A transaction that has finished starts
/// nothing and answers its state. `TransactionNotFound` for an unknown id, whether or not a state machine is given;
/// `InternalError` for an open transaction when none is.
pub async fn resume(store: &Store, sm: Option<&StateMachine>, tx_id: &str) -> Result<Started, TxError> {
    let h = records::read_header(store, &Meter::default(), tx_id).await?;
    if h.finished() {
        return Ok(Started { execution_arn: None, ..Started::ended(&h) });
    }
    let sm = sm.ok_or_else(|| TxError::Internal("no state machine is set: nothing can start an execution".into()))?;
    match sm.start_for(tx_id, &format!("resume-{tx_id}-{}", ulid::Ulid::new())).await {
        Ok(out) => Ok(Started {
            transaction_id: h.id,
            execution_arn: Some(out.execution_arn().to_string()),
            state: h.state,
            finished: false,
            cancellation: None,
        }),
        Err(e) => {
            let message =
                format!("StartExecution failed (call again): {}", aws_sdk_sfn::error::DisplayErrorContext(&e));
            Err(start_failed(e.code(), message))
        }
    }
}

/// A `StartExecution` that failed: `Throttled` when Step Functions asks to slow down, which callers retry.
fn start_failed(code: Option<&str>, message: String) -> TxError {
    match code {
        Some("ThrottlingException" | "ExecutionLimitExceeded") => TxError::Throttled(message),
        _ => TxError::Internal(message),
    }
}

/// The ARN of execution `name` of a state machine:
/// `arn:<partition>:states:<region>:<account>:execution:<machine>:<name>`.
pub fn execution_arn(state_machine_arn: &str, name: &str) -> String {
    format!("{}:{name}", state_machine_arn.replacen(":stateMachine:", ":execution:", 1))
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_execution_arn_is_the_state_machine_arn_with_execution_and_the_name() {
        assert_eq!(
            super::execution_arn(
                "arn:aws:states:eu-west-1:123456789012:stateMachine:saga-transaction",
                "01JDQ4W5Z3ZC4V8Y9B7Q2X1N6M"
            ),
            "arn:aws:states:eu-west-1:123456789012:execution:saga-transaction:01JDQ4W5Z3ZC4V8Y9B7Q2X1N6M"
        );
    }
}
