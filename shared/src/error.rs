//! Errors with stable names.
//!
//! [`TxError::name`] is the `errorType` a Lambda reports and the error name Step Functions' `Retry` and `Catch` match,
//! so these strings are part of the public contract: never rename one.

use serde::{Deserialize, Serialize};

/// Why one action of a cancelled transaction did not go through, in the shape of DynamoDB's `CancellationReason`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct CancellationReason {
    /// `None`, `ConditionalCheckFailed`, `ValidationError`, `TransactionConflict`, ... as DynamoDB names them.
    pub code: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The item as it was, in DynamoDB JSON, when the action asked for `ReturnValuesOnConditionCheckFailure: ALL_OLD`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub item: Option<serde_json::Value>,
}

impl CancellationReason {
    pub const NONE: &'static str = "None";
    pub const CONDITIONAL_CHECK_FAILED: &'static str = "ConditionalCheckFailed";
    pub const VALIDATION_ERROR: &'static str = "ValidationError";
    pub const TRANSACTION_CONFLICT: &'static str = "TransactionConflict";
    /// DynamoDB's message for a failed condition.
    pub const CONDITION_FAILED_MESSAGE: &'static str = "The conditional request failed";

    pub fn none() -> Self {
        Self { code: Self::NONE.into(), message: None, item: None }
    }
    pub fn new(code: &str, message: impl Into<String>) -> Self {
        Self { code: code.into(), message: Some(message.into()), item: None }
    }
    pub fn is_none(&self) -> bool {
        self.code == Self::NONE
    }
}

/// The cause of a `TransactionCanceled` error: what DynamoDB's `TransactionCanceledException` carries, plus the id
/// and, when the request's `Parent` item was the reason, that reason.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Cancellation {
    pub transaction_id: String,
    pub message: String,
    /// One reason per action, in request order.
    pub cancellation_reasons: Vec<CancellationReason>,
    /// Why the `Parent` item stopped the transaction (it does not exist, another transaction held it past
    /// `LockWaitSeconds`, or its lock was taken over), when it did; the actions' reasons are then all `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_cancellation_reason: Option<CancellationReason>,
}

impl Cancellation {
    pub fn new(transaction_id: &str, reasons: Vec<CancellationReason>) -> Self {
        let codes: Vec<&str> = reasons.iter().map(|r| r.code.as_str()).collect();
        let message = if codes.len() <= 20 {
            format!(
                "Transaction cancelled, please refer cancellation reasons for specific reasons [{}]",
                codes.join(", ")
            )
        } else {
            let failed: Vec<String> = reasons
                .iter()
                .enumerate()
                .filter(|(_, r)| !r.is_none())
                .take(10)
                .map(|(i, r)| format!("{i}: {}", r.code))
                .collect();
            format!(
                "Transaction cancelled, please refer cancellation reasons for specific reasons (actions {})",
                failed.join(", ")
            )
        };
        Self {
            transaction_id: transaction_id.into(),
            message,
            cancellation_reasons: reasons,
            parent_cancellation_reason: None,
        }
    }

    /// Index (request order) and reason of each action that did not pass.
    pub fn failed(&self) -> impl Iterator<Item = (usize, &CancellationReason)> {
        self.cancellation_reasons.iter().enumerate().filter(|(_, r)| !r.is_none())
    }

    /// Whether the cancellation says what to act on: an action's reason, or the `Parent` item's.
    pub fn is_named(&self) -> bool {
        self.failed().next().is_some() || self.parent_cancellation_reason.is_some()
    }
}

/// The cause of a `TransactionAborted` error: the transaction was rolled back because whatever drove it gave up
/// after an error (the state machine's Abort) or stopped (the sweeper found it abandoned). Nothing was applied and no
/// action is to blame; sending the request again is safe.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Abort {
    pub transaction_id: String,
    pub message: String,
}

/// A bad request: which action (request order) and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Invalid {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<usize>,
    pub message: String,
}

impl std::fmt::Display for Invalid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.action {
            Some(i) => write!(f, "TransactItems[{i}]: {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

/// A request naming a table its caller is not entitled to (`crate::drivers::entitlements`): which action (`None`: the
/// `Parent`, or not known), which table, and the message, which names both.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Denied {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<usize>,
    pub table: String,
    pub message: String,
}

#[derive(Debug, thiserror::Error)]
pub enum TxError {
    /// The request is malformed or breaks a limit; nothing was written.
    #[error("{0}")]
    Validation(Invalid),
    /// The caller may not name a table of the request (the stack's caller entitlements); nothing was written.
    #[error("{}", .0.message)]
    AccessDenied(Denied),
    /// The transaction rolled back; the reasons say which actions failed and why.
    #[error("{}", .0.message)]
    Canceled(Box<Cancellation>),
    /// The transaction rolled back because its driver gave up or stopped, not because of an action.
    #[error("{}", .0.message)]
    Aborted(Box<Abort>),
    /// Another transaction holds a lock this one needs; wait and try the phase again.
    #[error("item {item} is locked by transaction {holder}")]
    Contended { holder: String, item: String },
    /// DynamoDB (or Step Functions, starting an execution) kept throttling after the SDK's retries; try again later.
    #[error("throttled: {0}")]
    Throttled(String),
    /// No transaction has this id.
    #[error("transaction {0} not found")]
    NotFound(String),
    /// A DynamoDB call failed for a reason that retrying the phase may fix (network, service error).
    #[error("DynamoDB call {op} failed: {message}")]
    DynamoDb { op: &'static str, message: String },
    /// DynamoDB refused to apply a committed action (protocol 2 applies after the commit). The item keeps its lock and
    /// the transaction stays committed and open: it is applied, exactly once, when DynamoDB accepts the write (the
    /// sweeper tries again on each pass).
    #[error("transaction {tx_id} is committed, and DynamoDB refused to apply {action}: {message}")]
    ApplyRejected { tx_id: String, action: String, message: String },
    /// A record of the transactions table is not what this version of the library wrote.
    #[error("internal error: {0}")]
    Internal(String),
    /// A transaction's records are of a format (or a protocol) newer than this version of dynamo-saga knows: written by
    /// a newer deploy. Nothing is read further or written; a driver of the newer version finishes the transaction.
    #[error("{0}")]
    UnknownFormat(String),
    /// A share of a step, run by another invocation of the phase's function (`share`), failed for a reason none of
    /// the other names gives; running the step again may succeed.
    #[error("a share of the step failed: {0}")]
    WorkerFailed(String),
    /// Test-only fault injection: the coordinator "died" before this call.
    #[error("injected fault: the coordinator stopped after {0} writes")]
    InjectedFault(u64),
}

impl TxError {
    /// The stable error name (Lambda `errorType`, Step Functions error).
    pub fn name(&self) -> &'static str {
        match self {
            TxError::Validation(_) => "ValidationError",
            TxError::AccessDenied(_) => "AccessDenied",
            TxError::Canceled(_) => "TransactionCanceled",
            TxError::Aborted(_) => "TransactionAborted",
            TxError::Contended { .. } => "Contended",
            TxError::Throttled(_) => "Throttled",
            TxError::NotFound(_) => "TransactionNotFound",
            TxError::DynamoDb { .. } => "DynamoDbError",
            TxError::ApplyRejected { .. } => "ApplyRejected",
            TxError::Internal(_) => "InternalError",
            TxError::UnknownFormat(_) => "UnknownRecordFormat",
            TxError::WorkerFailed(_) => "WorkerFailed",
            TxError::InjectedFault(_) => "InjectedFault",
        }
    }

    /// Whether running the same phase again later may succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            TxError::Contended { .. } | TxError::Throttled(_) | TxError::DynamoDb { .. } | TxError::WorkerFailed(_)
        )
    }

    /// Whether DynamoDB answered that the table of the call does not exist (`ResourceNotFoundException`).
    pub fn is_missing_table(&self) -> bool {
        matches!(self, TxError::DynamoDb { message, .. } if message.starts_with("ResourceNotFoundException"))
    }

    /// The error a share's worker ended with, by the name it gave (its Lambda `errorType`) and its message: the same
    /// error where the step can act on it by name (throttling runs the share here instead; a fault, a DynamoDB error
    /// or records of an unknown format fail the step as they would have failed it here), `WorkerFailed` otherwise.
    pub fn from_worker(name: &str, message: &str) -> Self {
        match name {
            "Throttled" => TxError::Throttled(message.to_string()),
            "DynamoDbError" => TxError::DynamoDb { op: "a share", message: message.to_string() },
            "UnknownRecordFormat" => TxError::UnknownFormat(message.to_string()),
            "TransactionNotFound" => TxError::NotFound(message.to_string()),
            "InjectedFault" => TxError::InjectedFault(0),
            _ => TxError::WorkerFailed(format!("{name}: {message}")),
        }
    }

    pub fn invalid(action: Option<usize>, message: impl Into<String>) -> Self {
        TxError::Validation(Invalid { action, message: message.into() })
    }

    /// A JSON body for API responses and Step Functions causes.
    pub fn to_json(&self) -> serde_json::Value {
        let mut v = serde_json::json!({ "errorType": self.name(), "errorMessage": self.to_string() });
        match self {
            TxError::Validation(inv) => v["details"] = serde_json::to_value(inv).unwrap_or_default(),
            TxError::AccessDenied(d) => v["details"] = serde_json::to_value(d).unwrap_or_default(),
            TxError::Canceled(c) => v["details"] = serde_json::to_value(c).unwrap_or_default(),
            TxError::Aborted(a) => v["details"] = serde_json::to_value(a).unwrap_or_default(),
            TxError::Contended { holder, item } => v["details"] = serde_json::json!({"Holder": holder, "Item": item}),
            _ => {}
        }
        v
    }
}

pub type Result<T, E = TxError> = std::result::Result<T, E>;
