//! What every command works with: the global options, the stack they name, the AWS configuration, and a failure's
//! exit code ([`Failure`], of its own module, which the stack's outputs use too).

use dynamo_saga::constants::ENV_TX_TABLE;
use dynamo_saga::sweeper::StateMachine;
use dynamo_saga::{Config, Store};

use crate::api::Api;
pub use crate::failure::Failure;
use crate::stack::{self, Stack};

/// The global options, the stack they name, and the AWS configuration loaded once.
pub struct Ctx {
    /// `--json`: JSON on stdout, no progress on stderr.
    pub json: bool,
    /// `--table`: the transactions table without a stack.
    pub table: Option<String>,
    pub stack: Option<Stack>,
    pub sdk: aws_config::SdkConfig,
}

impl Ctx {
    /// The `SAGA_*` setting `k`: the stack's, when a stack is named and sets it; `--table`; else the environment.
    pub fn var(&self, k: &str) -> Option<String> {
        if let Some(v) = self.stack.as_ref().and_then(|s| s.var(k)) {
            return Some(v);
        }
        match &self.table {
            Some(t) if k == ENV_TX_TABLE => Some(t.clone()),
            _ => std::env::var(k).ok(),
        }
    }

    /// A store on this process's own credentials, for the commands that read or write the tables themselves.
    pub async fn store(&self) -> Result<Store, Failure> {
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
    pub fn api(&self, in_process: bool) -> Result<Option<Api>, Failure> {
        match &self.stack {
            Some(stack) if !in_process => {
                Api::new(stack.output(stack::API_URL)?, &self.sdk).map(Some).map_err(|e| Failure(4, e))
            }
            _ => Ok(None),
        }
    }

    /// The state machine `arn` names, else the stack's, else `SAGA_STATE_MACHINE_ARN`'s.
    pub async fn state_machine(&self, arn: Option<&str>) -> Result<Option<StateMachine>, Failure> {
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
    pub async fn required_state_machine(&self, arn: Option<&str>, command: &str) -> Result<StateMachine, Failure> {
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

/// What to check when DynamoDB says a table does not exist: the item tables were found when the request was
/// checked, so it is most likely the transactions table.
pub fn missing_table_hint(table: &str) -> String {
    format!(
        "  the transactions table {table:?} ({ENV_TX_TABLE} or --table) may not exist in this account, Region and \
         endpoint:\n  `sam deploy` creates it (the stack's TransactionsTableName output); docs/cli.md shows it created \
         on DynamoDB Local"
    )
}
