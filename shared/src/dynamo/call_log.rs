//! The AWS calls a process makes, as IAM sees them: with `SAGA_CALL_LOG` naming a file, every DynamoDB, Step
//! Functions, SQS and EventBridge request the clients [`CallLog`] is added to send appends one JSON line to it, naming the principal
//! (the Lambda function's name, or `caller` for a process that is not a Lambda), the operation and each action and
//! resource IAM authorizes for it. The permission simulation (`tools/iam-sim.mjs`) evaluates those lines against the
//! policies the template deploys. Without the variable nothing is recorded and the clients carry no interceptor.
//!
//! A line: `{"principal": "saga-lock", "service": "dynamodb", "operation": "UpdateItem",
//! "requests": [{"action": "dynamodb:UpdateItem", "resource": "table/orders"}]}`, where `resource` is the part of the
//! ARN after the account (`table/T`, `table/T/index/I`, `stateMachine:NAME`, `execution:NAME:ID`, a queue's name,
//! `event-bus/NAME`). A `PutEvents` request also carries the condition keys IAM sees (`context`: `events:source` and
//! `events:detail-type`, the values of its entries).

use std::collections::HashSet;
use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use aws_sdk_dynamodb::config::interceptors::BeforeTransmitInterceptorContextRef;
use aws_sdk_dynamodb::config::{ConfigBag, Intercept, RuntimeComponents};
use serde_json::{json, Value};

use crate::constants::ENV_CALL_LOG;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Appends each request of the client it is added to as one line of the call log.
#[derive(Debug, Clone)]
pub struct CallLog {
    path: PathBuf,
    principal: String,
    /// Lines already written by this process: a call repeated (every lock write of a batch, say) is written once.
    written: Arc<Mutex<HashSet<String>>>,
}

impl CallLog {
    /// The log `SAGA_CALL_LOG` names, if it names one.
    pub fn from_env() -> Option<CallLog> {
        let path = std::env::var(ENV_CALL_LOG).ok().filter(|p| !p.trim().is_empty())?;
        let principal = std::env::var("AWS_LAMBDA_FUNCTION_NAME").ok().filter(|p| !p.is_empty());
        let principal = principal.unwrap_or_else(|| "caller".into());
        Some(CallLog { path: path.into(), principal, written: Arc::default() })
    }

    fn record(&self, target: &str, body: &[u8]) -> std::io::Result<()> {
        let Some((service, operation)) = target.split_once('.') else { return Ok(()) };
        let body: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
        let (service, requests) = match service {
            s if s.starts_with("DynamoDB") => ("dynamodb", dynamodb_requests(operation, &body)),
            s if s.starts_with("AWSStepFunctions") => ("states", states_requests(operation, &body)),
            "AmazonSQS" => ("sqs", sqs_requests(operation, &body)),
            "AWSEvents" => ("events", events_requests(operation, &body)),
            _ => return Ok(()),
        };
        self.write(json!({"principal": self.principal, "service": service, "operation": operation,
            "requests": requests}))
    }

    /// Appends one call's line, unless this process wrote the same line before.
    fn write(&self, line: Value) -> std::io::Result<()> {
        let line = line.to_string();
        if !self.written.lock().map_err(|_| std::io::Error::other("call log lock"))?.insert(line.clone()) {
            return Ok(());
        }
        let mut file = std::fs::OpenOptions::new().create(true).append(true).open(&self.path)?;
        // One write per line: appends from many processes to one file stay whole lines.
        file.write_all(format!("{line}\n").as_bytes())
    }
}

impl Intercept for CallLog {
    fn name(&self) -> &'static str {
        "CallLog"
    }

    fn read_before_transmit(
        &self,
        context: &BeforeTransmitInterceptorContextRef<'_>,
        _: &RuntimeComponents,
        _: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let sent = context.request();
        let Some(target) = sent.headers().get("x-amz-target") else {
            // Lambda's REST API names its operation by the path: a function invoking itself for a share of a step.
            return match invoked_function(sent.uri()) {
                Some(resource) => self
                    .write(json!({"principal": self.principal, "service": "lambda", "operation": "Invoke",
                        "requests": [request("lambda:InvokeFunction".into(), resource)]}))
                    .map_err(|e| format!("{ENV_CALL_LOG}: {e}").into()),
                None => Ok(()),
            };
        };
        let body = sent.body().bytes().unwrap_or_default();
        self.record(target, body).map_err(|e| format!("{ENV_CALL_LOG}: {e}").into())
    }
}

/// `function:NAME` (`function:NAME:QUALIFIER`) for a Lambda Invoke request's URI
/// (`/2015-03-31/functions/NAME/invocations[?Qualifier=Q]`), `None` for any other.
fn invoked_function(uri: &str) -> Option<String> {
    let (path, query) = uri.split_once('?').unwrap_or((uri, ""));
    let name = path.split("/2015-03-31/functions/").nth(1)?.strip_suffix("/invocations")?;
    let name = name.replace("%3A", ":");
    let name = name.rsplit_once(":function:").map_or(name.as_str(), |(_, n)| n).to_string();
    match query.split('&').find_map(|kv| kv.strip_prefix("Qualifier=")) {
        Some(q) => Some(format!("function:{name}:{q}")),
        None => Some(format!("function:{name}")),
    }
}

fn request(action: String, resource: String) -> Value {
    json!({"action": action, "resource": resource})
}

fn table_resource(body: &Value) -> String {
    let table = body["TableName"].as_str().unwrap_or("*");
    match body["IndexName"].as_str() {
        Some(index) => format!("table/{table}/index/{index}"),
        None => format!("table/{table}"),
    }
}

/// What IAM authorizes for one DynamoDB request: a transaction's items each by their own action on their own table,
/// a batch by the batch action on each of its tables, anything else by its own action on its table (or index).
fn dynamodb_requests(operation: &str, body: &Value) -> Vec<Value> {
    let per_table = |key: &str, action: &str| -> Vec<Value> {
        let tables = body[key].as_object().map(|m| m.keys().cloned().collect::<Vec<_>>()).unwrap_or_default();
        tables.into_iter().map(|t| request(format!("dynamodb:{action}"), format!("table/{t}"))).collect()
    };
    let per_item = |items: &Value| -> Vec<Value> {
        let items = items.as_array().map(Vec::as_slice).unwrap_or_default();
        items
            .iter()
            .filter_map(|i| i.as_object()?.iter().next())
            .map(|(kind, action)| {
                let iam = match kind.as_str() {
                    "Put" => "PutItem",
                    "Update" => "UpdateItem",
                    "Delete" => "DeleteItem",
                    "ConditionCheck" => "ConditionCheckItem",
                    _ => "GetItem",
                };
                request(format!("dynamodb:{iam}"), table_resource(action))
            })
            .collect()
    };
    match operation {
        "TransactWriteItems" | "TransactGetItems" => per_item(&body["TransactItems"]),
        "BatchWriteItem" | "BatchGetItem" => per_table("RequestItems", operation),
        _ => vec![request(format!("dynamodb:{operation}"), table_resource(body))],
    }
}

/// What IAM authorizes for one Step Functions request: the state machine or execution its ARN names.
fn states_requests(operation: &str, body: &Value) -> Vec<Value> {
    let arn = ["executionArn", "stateMachineArn"].iter().find_map(|k| body[*k].as_str()).unwrap_or("*");
    let resource = arn.splitn(6, ':').nth(5).unwrap_or(arn).to_string();
    vec![request(format!("states:{operation}"), resource)]
}

/// What IAM authorizes for one SQS request: the queue its URL names (`https://sqs.REGION.amazonaws.com/ACCOUNT/NAME`).
fn sqs_requests(operation: &str, body: &Value) -> Vec<Value> {
    let name = body["QueueUrl"].as_str().and_then(|u| u.rsplit('/').next()).unwrap_or("*");
    vec![request(format!("sqs:{operation}"), name.to_string())]
}

fn events_requests(operation: &str, body: &Value) -> Vec<Value> {
    let entries = body["Entries"].as_array().cloned().unwrap_or_default();
    let bus =
        |e: &Value| e["EventBusName"].as_str().unwrap_or("default").rsplit('/').next().unwrap_or("default").to_string();
    let buses: std::collections::BTreeSet<String> = entries.iter().map(bus).collect();
    let values = |k: &str| -> Vec<String> {
        let set: std::collections::BTreeSet<String> =
            entries.iter().filter_map(|e| e[k].as_str().map(str::to_string)).collect();
        set.into_iter().collect()
    };
    let context = json!({"events:source": values("Source"), "events:detail-type": values("DetailType")});
    buses
        .into_iter()
        .map(|b| {
            let mut r = request(format!("events:{operation}"), format!("event-bus/{b}"));
            r["context"] = context.clone();
            r
        })
        .collect()
}

/// A Step Functions client from the standard configuration chain, recording its calls when `SAGA_CALL_LOG` is set.
#[cfg(feature = "internals")]
pub async fn state_machine_client() -> aws_sdk_sfn::Client {
    let sdk = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
    let mut conf = aws_sdk_sfn::config::Builder::from(&sdk);
    if let Some(log) = CallLog::from_env() {
        conf = conf.interceptor(log);
    }
    aws_sdk_sfn::Client::from_conf(conf.build())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_invocation_is_authorized_on_the_function_it_names() {
        assert_eq!(
            invoked_function("http://127.0.0.1:9000/2015-03-31/functions/saga-lock/invocations").as_deref(),
            Some("function:saga-lock")
        );
        assert_eq!(
            invoked_function(
                "https://lambda.eu-west-1.amazonaws.com/2015-03-31/functions/s-LockFunction-1/invocations?Qualifier=7"
            )
            .as_deref(),
            Some("function:s-LockFunction-1:7")
        );
        assert_eq!(invoked_function("https://dynamodb.eu-west-1.amazonaws.com/"), None);
    }

    #[test]
    fn a_transaction_is_authorized_item_by_item() {
        let body = json!({"TransactItems": [
            {"Put": {"TableName": "a", "Item": {}}},
            {"ConditionCheck": {"TableName": "b", "Key": {}}},
            {"Update": {"TableName": "a", "Key": {}}}]});
        let got = dynamodb_requests("TransactWriteItems", &body);
        assert_eq!(
            got,
            vec![
                request("dynamodb:PutItem".into(), "table/a".into()),
                request("dynamodb:ConditionCheckItem".into(), "table/b".into()),
                request("dynamodb:UpdateItem".into(), "table/a".into()),
            ]
        );
    }

    #[test]
    fn batches_queries_and_executions_name_their_resources() {
        let batch = json!({"RequestItems": {"tx": [], "orders": []}});
        let mut got = dynamodb_requests("BatchWriteItem", &batch);
        got.sort_by_key(|r| r["resource"].to_string());
        assert_eq!(got[0]["resource"], "table/orders");
        assert_eq!(got[1], request("dynamodb:BatchWriteItem".into(), "table/tx".into()));
        let query = json!({"TableName": "tx", "IndexName": "open"});
        assert_eq!(dynamodb_requests("Query", &query)[0]["resource"], "table/tx/index/open");
        let start = json!({"stateMachineArn": "arn:aws:states:us-east-1:1:stateMachine:sm", "input": "{}"});
        assert_eq!(states_requests("StartExecution", &start)[0]["resource"], "stateMachine:sm");
        let describe = json!({"executionArn": "arn:aws:states:us-east-1:1:execution:sm:x"});
        assert_eq!(states_requests("DescribeExecution", &describe)[0]["resource"], "execution:sm:x");
    }
}
