//! What a small request costs to orchestrate: 10 updates, which one `TransactWriteItems` call carries with the
//! transaction's header, sent the ways a caller sends them on the local stack. `POST /transactions` (the API function,
//! given the proxy event API Gateway gives it) and an EventBridge event (the events function, given the event the
//! rule delivers) carry it out in the function, with no execution; a `StartExecution` of the state machine runs one.

use harness::api;
use harness::stack::stack;
use harness::Env;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::time::Instant;

/// One way of sending the request.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SmallRow {
    pub way: String,
    /// The function that receives the request.
    pub function: String,
    pub actions: usize,
    pub runs: usize,
    /// State machine executions the runs started.
    pub executions: usize,
    /// The function call's median wall time on the local stack, from the invoking side (its run time and the local
    /// Invoke API's overhead: above what Lambda bills).
    pub median_ms: f64,
    pub memory_mb: u64,
    /// USD per 1,000 actions: the Lambda call at `memory_mb` for `median_ms`, and Step Functions' transitions.
    pub lambda_usd_per_1000: f64,
    pub step_functions_usd_per_1000: f64,
}

/// `runs` requests of 10 updates each way.
pub async fn measure(bytes: usize, runs: usize) -> Vec<SmallRow> {
    let st = stack().await;
    let env = Env::on_stack("bench-small").await;
    let settings = super::deployed_settings();
    let sfn = st.sfn_client();
    let executions = || async {
        let out = sfn
            .list_executions()
            .state_machine_arn(harness::sfn_api::STATE_MACHINE_ARN)
            .send()
            .await
            .expect("ListExecutions");
        out.executions().len()
    };
    let n = 10;
    let mut out = Vec::new();
    for (way, function) in [("POST /transactions", "saga-stage"), ("EventBridge event", "saga-events")] {
        let before = executions().await;
        let mut ms = Vec::new();
        for run in 0..=runs {
            let body = super::prepare(&env, super::Kind::Update, n, &format!("small-{function}-{run}"), bytes).await;
            let payload = if function == "saga-stage" {
                api::event("POST", "/transactions", json!({}), Some(body.to_string()))
            } else {
                json!({"version": "0", "id": format!("bench-small-{run}-{}", std::process::id()),
                    "detail-type": "TransactWriteItems", "source": "dynamo-saga", "account": "000000000000",
                    "time": "2026-01-01T00:00:00Z", "region": "us-east-1", "resources": [], "detail": body})
            };
            let started = Instant::now();
            let answer = st.invoke(function, &payload).await.unwrap_or_else(|e| panic!("{way}: {e:?}"));
            let elapsed = started.elapsed().as_secs_f64() * 1000.0;
            let answer: Value = match answer.get("body").and_then(Value::as_str) {
                Some(text) => serde_json::from_str(text).expect("the API's JSON answer"),
                None => answer,
            };
            assert_eq!(
                (answer["State"].as_str(), answer["Finished"].as_bool()),
                (Some("COMMITTED"), Some(true)),
                "{way}: {answer}"
            );
            // The first call of each way warms the function's process, as a warm Lambda environment is.
            if run > 0 {
                ms.push(elapsed);
            }
        }
        let executions = executions().await - before;
        ms.sort_by(f64::total_cmp);
        let median_ms = ms[ms.len() / 2];
        let memory_mb = settings.get(function).unwrap_or_else(|| panic!("{function} is not in template.yaml")).0;
        let per_1000 = |usd: f64| usd / n as f64 * 1000.0;
        out.push(SmallRow {
            way: way.into(),
            function: function.into(),
            actions: n,
            runs,
            executions,
            median_ms,
            memory_mb,
            lambda_usd_per_1000: per_1000(super::lambda_calls_usd(1, median_ms.ceil() as u64, memory_mb)),
            step_functions_usd_per_1000: 0.0,
        });
        eprintln!("small request, {way}: {executions} executions, {median_ms:.0} ms a call");
    }
    out
}

/// The section of `benchmarks.md`: each way's orchestration beside DynamoDB's own cost of the same request
/// (`dynamodb_per_1000`, from the billing pass at 10 actions), and a `STANDARD` execution of the same request
/// (`standard`: transitions in USD and its Lambda calls in USD, per 1,000 actions, from the state machine pass).
pub fn markdown(rows: &[SmallRow], dynamodb_per_1000: Option<f64>, standard: Option<(f64, f64)>) -> String {
    if rows.is_empty() {
        return String::new();
    }
    let mut md = String::from(
        "## Orchestration of a small request\n\nA request of 10 updates, which one `TransactWriteItems` call carries with \
         the transaction's header, sent the ways a caller sends it on the local stack: `POST /transactions` (the API \
         function given the proxy event API Gateway gives it) and an EventBridge event (the events function given the \
         event the rule delivers) carry it out in the function that receives it, and start no execution; a \
         `StartExecution` runs a `STANDARD` execution (the state machine pass above). Orchestration is Step Functions \
         and Lambda; Lambda is priced at the function's `MemorySize` in `template.yaml` for the call's median wall time \
         on the local stack (debug builds, seen from the invoking side: above what Lambda bills); DynamoDB is the billing \
         pass's price of the same 10 updates by dynamo-saga, which carries them out in that one call. USD per 1,000 \
         actions, US East prices.\n\n\
         | way | function | executions started | median call (ms) | Step Functions | Lambda | orchestration | DynamoDB | \
         orchestration / DynamoDB |\n| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
    );
    let ddb = |o: f64| dynamodb_per_1000.map_or("-".into(), |d| format!("{:.2}", o / d));
    let cell = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.6}"));
    for r in rows {
        let orchestration = r.step_functions_usd_per_1000 + r.lambda_usd_per_1000;
        md.push_str(&format!(
            "| {} | `{}` | {} of {} | {:.0} | {:.6} | {:.6} | {:.6} | {} | {} |\n",
            r.way,
            r.function,
            r.executions,
            r.runs + 1,
            r.median_ms,
            r.step_functions_usd_per_1000,
            r.lambda_usd_per_1000,
            orchestration,
            cell(dynamodb_per_1000),
            ddb(orchestration)
        ));
    }
    if let Some((sfn, lambda)) = standard {
        md.push_str(&format!(
            "| `StartExecution` (`STANDARD`) | `saga-begin` | 1 | - | {sfn:.6} | {lambda:.6} | {:.6} | {} | {} |\n",
            sfn + lambda,
            cell(dynamodb_per_1000),
            ddb(sfn + lambda)
        ));
    }
    md.push('\n');
    md
}
