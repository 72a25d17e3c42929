//! A command's failure: its message and the exit code the CLI ends with.

use dynamo_saga::TxError;

/// A failure and its exit code.
pub struct Failure(pub i32, pub String);

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
