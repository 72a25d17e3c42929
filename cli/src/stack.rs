//! A deployed stack's settings (`--stack NAME`, `SAGA_STACK`): its outputs and parameters as CloudFormation's
//! `DescribeStacks` gives them, read each time the CLI starts, so no `SAGA_*` setting is copied by hand and none drifts
//! from the stack.

use std::collections::HashMap;

use dynamo_saga::constants::{
    ENV_ALLOWED_TABLES, ENV_BATCH_SIZE, ENV_DEADLINE_SECONDS, ENV_EVENTUAL_REGION, ENV_IN_FLIGHT, ENV_LEASE_SECONDS,
    ENV_MAX_ACTIONS, ENV_MAX_DEADLINE_SECONDS, ENV_MULTI_REGION, ENV_PRECOMMIT_CHECK, ENV_RETENTION_SECONDS,
    ENV_REVISIT_AFTER_SECONDS, ENV_SWEEP_AFTER_SECONDS, ENV_TX_TABLE, MAX_DEADLINE_SECONDS,
};

use crate::failure::Failure;

/// The `SAGA_*` variables the template gives every function (its `Globals`), and the parameter each is read from.
pub const PARAMETER_VARIABLES: &[(&str, &str)] = &[
    (ENV_ALLOWED_TABLES, "AllowedTables"),
    (ENV_BATCH_SIZE, "BatchSize"),
    (ENV_MAX_ACTIONS, "MaxActions"),
    (ENV_IN_FLIGHT, "InFlightLimit"),
    (ENV_LEASE_SECONDS, "LeaseSeconds"),
    (ENV_DEADLINE_SECONDS, "DeadlineSeconds"),
    (ENV_RETENTION_SECONDS, "RetentionSeconds"),
    (ENV_REVISIT_AFTER_SECONDS, "RevisitAfterSeconds"),
    (ENV_EVENTUAL_REGION, "EventualConsistencyRegion"),
];

/// The outputs the CLI reads.
pub const API_URL: &str = "ApiUrl";
pub const STATE_MACHINE_ARN: &str = "StateMachineArn";
pub const TRANSACTIONS_TABLE: &str = "TransactionsTableName";
pub const SWEEPER_FUNCTION_ARN: &str = "SweeperFunctionArn";

/// One stack's outputs and parameters.
#[derive(Debug, Clone)]
pub struct Stack {
    pub name: String,
    outputs: HashMap<String, String>,
    parameters: HashMap<String, String>,
}

impl Stack {
    /// Reads stack `name` in the Region and account of `sdk`.
    pub async fn describe(name: &str, sdk: &aws_config::SdkConfig) -> Result<Stack, Failure> {
        let client = aws_sdk_cloudformation::Client::new(sdk);
        let out = client.describe_stacks().stack_name(name).send().await.map_err(|e| {
            let text = aws_sdk_cloudformation::error::DisplayErrorContext(&e).to_string();
            if text.contains("does not exist") {
                Failure(2, format!("stack {name} does not exist in this account and Region (--stack, SAGA_STACK)"))
            } else {
                Failure(4, format!("DescribeStacks {name}: {text}"))
            }
        })?;
        let stack = out.stacks().first().ok_or_else(|| Failure(2, format!("stack {name} does not exist")))?;
        let status = stack.stack_status().map(|s| s.as_str().to_string()).unwrap_or_default();
        // A stack being created, one whose creation was rolled back, and one being deleted have no outputs to trust;
        // one being updated, or whose update was rolled back, still has its last ones.
        let unusable = (status.starts_with("CREATE_") && status != "CREATE_COMPLETE")
            || status.starts_with("ROLLBACK_")
            || status.starts_with("DELETE_");
        if unusable {
            return Err(Failure(2, format!("stack {name} is {status}: it has no outputs to use")));
        }
        let outputs = stack
            .outputs()
            .iter()
            .filter_map(|o| Some((o.output_key()?.to_string(), o.output_value()?.to_string())))
            .collect();
        let parameters = stack
            .parameters()
            .iter()
            .filter_map(|p| Some((p.parameter_key()?.to_string(), p.parameter_value()?.to_string())))
            .collect();
        Ok(Stack { name: name.to_string(), outputs, parameters })
    }

    /// Output `key`, or an error that names it.
    pub fn output(&self, key: &str) -> Result<&str, Failure> {
        self.outputs.get(key).map(String::as_str).ok_or_else(|| {
            Failure(2, format!("stack {} has no output {key}: is it a dynamo-saga stack of this version?", self.name))
        })
    }

    /// The `SAGA_*` variable `k` as the stack's functions have it: from an output or a parameter.
    pub fn var(&self, k: &str) -> Option<String> {
        match k {
            ENV_TX_TABLE => self.outputs.get(TRANSACTIONS_TABLE).cloned(),
            // An Express workflow's executions last 5 minutes: the template caps deadlines at 240 s for them.
            ENV_MAX_DEADLINE_SECONDS => match self.parameters.get("WorkflowType").map(String::as_str) {
                Some("EXPRESS") => Some("240".into()),
                _ => Some(MAX_DEADLINE_SECONDS.to_string()),
            },
            ENV_SWEEP_AFTER_SECONDS => self.parameters.get("SweepAfterSeconds").cloned(),
            // MRSC tables take no TransactWriteItems, with which DynamoDB would judge the writes before the commit.
            ENV_MULTI_REGION => Some(if self.strong() { "strong" } else { "none" }.into()),
            ENV_PRECOMMIT_CHECK if self.strong() => Some("off".into()),
            ENV_PRECOMMIT_CHECK => self.parameters.get("PrecommitCheck").cloned(),
            _ => {
                let (_, parameter) = PARAMETER_VARIABLES.iter().find(|(v, _)| *v == k)?;
                self.parameters.get(*parameter).cloned()
            }
        }
    }

    /// Whether the stack's tables are multi-Region strongly consistent (`MultiRegionConsistency` `STRONG`).
    fn strong(&self) -> bool {
        self.parameters.get("MultiRegionConsistency").is_some_and(|v| v == "STRONG")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The template's `Globals` give every function `SAGA_X: !Ref Parameter` (or a list parameter joined with commas):
    /// the CLI reads each of those from the same parameter, so its settings are the functions'.
    #[test]
    fn every_setting_the_template_gives_the_functions_is_read_from_its_parameter() {
        let template = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../template.yaml")).unwrap();
        let globals = template.split_once("\nGlobals:").unwrap().1.split_once("\n# ").unwrap().0;
        let from_parameters: Vec<(String, String)> = globals
            .lines()
            .filter_map(|l| {
                // `SAGA_X: !Ref Parameter`, or a list parameter joined: `SAGA_X: !Join [",", !Ref Parameter]`.
                let (k, v) = l.trim().split_once(": !Ref ").or_else(|| l.trim().split_once(": !Join [\",\", !Ref "))?;
                Some((k.to_string(), v.trim().trim_end_matches(']').to_string()))
            })
            .filter(|(k, _)| k.starts_with("SAGA_") && k != ENV_TX_TABLE)
            .collect();
        assert!(from_parameters.len() >= 8, "{from_parameters:?}");
        let mine: Vec<(String, String)> =
            PARAMETER_VARIABLES.iter().map(|(k, p)| (k.to_string(), p.to_string())).collect();
        assert_eq!(from_parameters, mine);
        assert!(
            globals.contains(
                "SAGA_TABLE: !If [OwnsTransactionsTable, !Ref TransactionsTable, !Ref TransactionsTableName]"
            ),
            "read from the TransactionsTableName output"
        );
        assert!(globals.contains("SAGA_MAX_DEADLINE_SECONDS: !If [ExpressWorkflow, 240, 604800]"));
        assert!(globals.contains("SAGA_MULTI_REGION_CONSISTENCY: !If [StrongMultiRegion, strong, none]"));
        assert!(globals.contains("SAGA_PRECOMMIT_CHECK: !If [StrongMultiRegion, \"off\", !Ref PrecommitCheck]"));
        assert!(template.contains("StrongMultiRegion: !Equals [!Ref MultiRegionConsistency, STRONG]"));
        assert!(template.contains("SAGA_SWEEP_AFTER_SECONDS: !Ref SweepAfterSeconds"));
        let outputs = template.split_once("\nOutputs:").unwrap().1;
        for key in [API_URL, STATE_MACHINE_ARN, TRANSACTIONS_TABLE, SWEEPER_FUNCTION_ARN] {
            assert!(outputs.contains(&format!("\n  {key}:")), "the template has no output {key}");
        }
    }

    #[test]
    fn a_stack_gives_the_settings_of_its_functions() {
        let stack = Stack {
            name: "s".into(),
            outputs: [(TRANSACTIONS_TABLE.to_string(), "s-TransactionsTable-1".to_string())].into(),
            parameters: [("AllowedTables", "Orders,Inventory"), ("BatchSize", "50"), ("WorkflowType", "EXPRESS")]
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .into(),
        };
        assert_eq!(stack.var(ENV_TX_TABLE).as_deref(), Some("s-TransactionsTable-1"));
        assert_eq!(stack.var(ENV_ALLOWED_TABLES).as_deref(), Some("Orders,Inventory"));
        assert_eq!(stack.var(ENV_BATCH_SIZE).as_deref(), Some("50"));
        assert_eq!(stack.var(ENV_MAX_DEADLINE_SECONDS).as_deref(), Some("240"), "Express caps deadlines");
        assert_eq!(stack.var(ENV_IN_FLIGHT), None, "a parameter the stack does not list");
        assert_eq!(stack.var("SAGA_DIRECT"), None, "not a template setting");
        assert_eq!(stack.var(ENV_MULTI_REGION).as_deref(), Some("none"), "MultiRegionConsistency's default");
        assert_eq!(stack.var(ENV_PRECOMMIT_CHECK), None, "a parameter the stack does not list");
    }

    #[test]
    fn a_stack_in_mrsc_mode_gives_its_functions_mode_and_no_precommit_check() {
        let parameters =
            [("MultiRegionConsistency", "STRONG"), ("PrecommitCheck", "all"), ("EventualConsistencyRegion", "")];
        let stack = Stack {
            name: "s".into(),
            outputs: [(TRANSACTIONS_TABLE.to_string(), "dynamo-saga-transactions".to_string())].into(),
            parameters: parameters.map(|(k, v)| (k.to_string(), v.to_string())).into(),
        };
        assert_eq!(stack.var(ENV_TX_TABLE).as_deref(), Some("dynamo-saga-transactions"));
        assert_eq!(stack.var(ENV_MULTI_REGION).as_deref(), Some("strong"));
        assert_eq!(stack.var(ENV_PRECOMMIT_CHECK).as_deref(), Some("off"), "as the template sets it in STRONG mode");
        assert_eq!(stack.var(ENV_EVENTUAL_REGION).as_deref(), Some(""));
    }
}
