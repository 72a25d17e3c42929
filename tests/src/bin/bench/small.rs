//! What a small request costs to orchestrate: 10 updates, which one `TransactWriteItems` call carries with the
//! transaction's header, sent the ways a caller sends them on the local stack. `POST /transactions` (the API function,
//! given the proxy event API Gateway gives it) and an EventBridge event (the events function, given the event the
//! rule delivers) carry it out in the function, with no execution; a `StartExecution` of the state machine runs one.

use harness::api;
use harness::stack::stack;
use harness::Env;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::path::Path;
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

/// USD per API Gateway REST API request (US East, the first 333 million a month).
pub const USD_PER_API_REQUEST: f64 = 3.50 / 1e6;
/// USD per GB of logs CloudWatch Logs ingests (US East, Standard class).
pub const USD_PER_LOG_GB: f64 = 0.50;
/// USD per EventBridge event published to a bus (custom events, US East).
pub const USD_PER_EVENT: f64 = 1.00 / 1e6;

/// What a transaction costs beyond DynamoDB, Step Functions and Lambda, sent the way a service sends it: API Gateway's
/// requests, the end event the stack publishes, and the logs CloudWatch Logs ingests.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AllInRow {
    pub way: String,
    pub actions: usize,
    pub transactions: usize,
    /// API Gateway requests a transaction takes: `POST /transactions`, or the staging calls (create, one a chunk,
    /// seal) and `POST /transactions` with the sealed transaction's id. Learning the end from the end event, a caller
    /// polls nothing.
    pub api_requests: usize,
    /// Lambda calls a transaction took, counted by their request ids in the functions' log lines.
    pub lambda_calls: usize,
    /// Bytes of the functions' own log lines a transaction wrote (JSON, the metrics record among them), measured on
    /// the local stack at the template's `RUST_LOG`, warnings left out.
    pub function_log_bytes: u64,
    /// Warning and error lines a transaction wrote on the local stack, and their bytes (not in the price: they count
    /// the engine's failures, requests timed out or throttled and sent again, which DynamoDB Local on 2 cores gives
    /// far more of than DynamoDB).
    #[serde(default)]
    pub warnings: u64,
    #[serde(default)]
    pub warning_bytes: u64,
    /// Lambda's own records of its calls: `lambda_calls` times [`platform_record_bytes`].
    pub platform_log_bytes: u64,
    /// The API's access log records: `api_requests` times [`access_record_bytes`].
    pub access_log_bytes: u64,
    /// Events published: the end event.
    pub events: usize,
    pub api_gateway_usd_per_1000: f64,
    pub logs_usd_per_1000: f64,
    pub events_usd_per_1000: f64,
}

/// The functions' own log lines in the local stack's `lambda.log` so far (`cargo lambda watch` writes its own lines
/// there too, none of them JSON).
#[derive(Default)]
struct FunctionLogs {
    /// Bytes of the lines every transaction writes: `INFO` lines and the metrics record.
    bytes: u64,
    /// Lines and bytes at `WARN` and `ERROR`: a request that failed and was sent again, and the like, as many as
    /// the engine gave failures.
    warnings: u64,
    warning_bytes: u64,
    /// The request ids of the calls that wrote them.
    ids: BTreeSet<String>,
}

impl FunctionLogs {
    /// What was written after `before`.
    fn since(&self, before: &FunctionLogs) -> FunctionLogs {
        FunctionLogs {
            bytes: self.bytes - before.bytes,
            warnings: self.warnings - before.warnings,
            warning_bytes: self.warning_bytes - before.warning_bytes,
            ids: self.ids.difference(&before.ids).cloned().collect(),
        }
    }
}

fn function_logs(dir: &Path) -> FunctionLogs {
    let text = std::fs::read_to_string(dir.join("lambda.log")).unwrap_or_default();
    let mut logs = FunctionLogs::default();
    for line in text.lines().filter(|l| l.starts_with('{')) {
        let v = serde_json::from_str::<Value>(line).unwrap_or_default();
        if matches!(v["level"].as_str(), Some("WARN" | "ERROR")) {
            logs.warnings += 1;
            logs.warning_bytes += line.len() as u64 + 1;
        } else {
            logs.bytes += line.len() as u64 + 1;
        }
        if let Some(id) = v["span"]["request_id"].as_str() {
            logs.ids.insert(id.to_string());
        }
    }
    logs
}

/// What Lambda writes of each call in JSON (the template's `LogFormat`): a `platform.start` and a `platform.report`
/// record, in the shapes AWS documents, with values of their usual widths. No local engine writes them.
pub fn platform_record_bytes() -> u64 {
    let id = "8f5b3c1e-2a4d-4b6f-9c8e-1d2f3a4b5c6d";
    let start = json!({"time": "2026-12-06T12:00:00.000Z", "type": "platform.start",
        "record": {"requestId": id, "version": "12"}});
    let report = json!({"time": "2026-12-06T12:00:00.245Z", "type": "platform.report",
        "record": {"requestId": id, "metrics": {"durationMs": 245.123, "billedDurationMs": 246, "memorySizeMB": 256,
        "maxMemoryUsedMB": 38}, "status": "success"}});
    (start.to_string().len() + report.to_string().len() + 2) as u64
}

/// One access log record of the API: template.yaml's `AccessLogSetting` format with each `$context` variable given a
/// value of its usual width for a signed SDK call (an assumed role's caller, the Python SDK's user agent).
pub fn access_record_bytes() -> u64 {
    let template = std::fs::read_to_string(harness::root().join("template.yaml")).expect("template.yaml");
    let mut lines = template.lines().skip_while(|l| !l.trim_start().starts_with("AccessLogSetting:"));
    lines.next().expect("template.yaml has an AccessLogSetting");
    let mut lines = lines.skip_while(|l| !l.trim_start().starts_with("Format: >-"));
    let indent = |l: &str| l.len() - l.trim_start().len();
    let key = lines.next().map(indent).expect("an access log Format");
    let format =
        lines.take_while(|l| indent(l) > key && !l.trim().is_empty()).map(str::trim).collect::<Vec<_>>().join(" ");
    let values = [
        ("$context.requestId", "c6af9ac6-7b61-11e6-9a41-93e8deadbeef"),
        ("$context.extendedRequestId", "BXn1kFN9IAMEbXw="),
        ("$context.requestTime", "06/Dec/2026:12:00:00 +0000"),
        ("$context.httpMethod", "POST"),
        ("$context.resourcePath", "/transactions/staged/{id}/chunks/{chunk}"),
        ("$context.path", "/prod/transactions/staged/01KC0S7W2D8R4Q4V9J2X3M5N6P/chunks/0"),
        ("$context.status", "200"),
        ("$context.responseLength", "412"),
        ("$context.responseLatency", "245"),
        ("$context.integration.status", "200"),
        ("$context.integration.latency", "243"),
        ("$context.error.responseType", "-"),
        ("$context.error.message", "-"),
        ("$context.identity.caller", "AROAEXAMPLEROLEID0000:orders-service"),
        ("$context.identity.userArn", "arn:aws:sts::123456789012:assumed-role/orders-service/orders-service"),
        ("$context.identity.accountId", "123456789012"),
        ("$context.identity.sourceIp", "203.0.113.10"),
        ("$context.identity.userAgent", "Boto3/1.35.0 md/Botocore#1.35.0 ua/2.0 os/linux#6.1 md/arch#x86_64 lang/python#3.12.3 md/pyimpl#CPython cfg/retry-mode#legacy Botocore/1.35.0"),
    ];
    // Longest names first, so that a name which begins a longer one never replaces part of it.
    let mut record = format.clone();
    let mut sorted = values.to_vec();
    sorted.sort_by_key(|(k, _)| std::cmp::Reverse(k.len()));
    for (k, v) in sorted {
        record = record.replace(k, v);
    }
    assert!(!record.contains("$context."), "a $context variable with no value here: {record}");
    serde_json::from_str::<Value>(&record)
        .unwrap_or_else(|e| panic!("the access log format is not JSON: {e}: {record}"));
    record.len() as u64 + 1
}

/// The all-in rows: `runs` requests of 10 updates through `POST /transactions`, and one of each size of `staged`
/// staged through the API and run by the state machine. The stack must log at the template's level.
pub async fn all_in(bytes: usize, runs: usize, staged: &[usize]) -> Vec<AllInRow> {
    let st = stack().await;
    let functions_env = std::fs::read_to_string(st.dir.join("functions.env")).unwrap_or_default();
    let template = std::fs::read_to_string(harness::root().join("template.yaml")).expect("template.yaml");
    let level = template
        .lines()
        .find_map(|l| l.trim().strip_prefix("RUST_LOG: "))
        .expect("template.yaml sets RUST_LOG")
        .to_string();
    assert!(
        functions_env.lines().any(|l| l == format!("RUST_LOG={level}")),
        "the stack's functions log at another level than template.yaml's RUST_LOG={level}: start it with RUST_LOG={level}"
    );
    let env = Env::on_stack("bench-allin").await;
    let (platform, access) = (platform_record_bytes(), access_record_bytes());
    let row =
        |way: &str, actions: usize, transactions: usize, api_requests: usize, calls: usize, logs: FunctionLogs| {
            let per_1000 = |usd_per_transaction: f64| usd_per_transaction * 1000.0 / actions as f64;
            let per = |x: u64| x / transactions as u64;
            let log_bytes = per(logs.bytes);
            let (platform_log_bytes, access_log_bytes) = (calls as u64 * platform, api_requests as u64 * access);
            let all_logs = (log_bytes + platform_log_bytes + access_log_bytes) as f64 / 1e9;
            AllInRow {
                way: way.into(),
                actions,
                transactions,
                api_requests,
                lambda_calls: calls,
                function_log_bytes: log_bytes,
                warnings: per(logs.warnings),
                warning_bytes: per(logs.warning_bytes),
                platform_log_bytes,
                access_log_bytes,
                events: 1,
                api_gateway_usd_per_1000: per_1000(api_requests as f64 * USD_PER_API_REQUEST),
                logs_usd_per_1000: per_1000(all_logs * USD_PER_LOG_GB),
                events_usd_per_1000: per_1000(USD_PER_EVENT),
            }
        };
    let mut out = Vec::new();
    let n = 10;
    let before = function_logs(&st.dir);
    for run in 0..runs {
        let body = super::prepare(&env, super::Kind::Update, n, &format!("allin-{run}"), bytes).await;
        let event = api::event("POST", "/transactions", json!({}), Some(body.to_string()));
        let answer = st.invoke("saga-stage", &event).await.expect("POST /transactions");
        let answer: Value = serde_json::from_str(answer["body"].as_str().unwrap()).unwrap();
        assert_eq!(answer["State"], "COMMITTED", "{answer}");
    }
    let after = function_logs(&st.dir);
    // The API function's calls, and any phase call they made (none: each request is carried out in its one call).
    let calls = runs + after.ids.difference(&before.ids).count();
    out.push(row("POST /transactions", n, runs, 1, calls.div_ceil(runs), after.since(&before)));
    for &n in staged {
        let body = super::prepare(&env, super::Kind::Update, n, &format!("allin-staged-{n}"), bytes).await;
        let before = function_logs(&st.dir);
        let items = body["TransactItems"].as_array().expect("TransactItems");
        let staged = super::stage(st, items).await;
        let (sealed, _) =
            super::stage_call(st, "POST", "/transactions/staged/{id}/seal", json!({"id": staged.id}), String::new())
                .await;
        let (started, _) =
            super::stage_call(st, "POST", "/transactions", Value::Null, sealed["ExecutionInput"].to_string()).await;
        let arn = started["ExecutionArn"].as_str().unwrap_or_else(|| panic!("an execution runs it: {started}"));
        let (status, output, ..) = st.ended(arn).await;
        assert_eq!(status, "SUCCEEDED", "{n} updates staged: {output}");
        let after = function_logs(&st.dir);
        // Create, each chunk, the seal, and `POST /transactions` with the seal's `ExecutionInput`.
        let api_requests = 3 + staged.chunks;
        // The phase functions' calls by their request ids, and the API function's, which log none.
        let calls = after.ids.difference(&before.ids).count() + api_requests;
        let logs = after.since(&before);
        eprintln!(
            "all in, {n} updates staged: {api_requests} API requests, {calls} Lambda calls, {} log bytes, {} warnings",
            logs.bytes, logs.warnings
        );
        out.push(row("staged through the API, run by the state machine", n, 1, api_requests, calls, logs));
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

/// The all-in section of `benchmarks.md`.
pub fn all_in_markdown(rows: &[AllInRow]) -> String {
    if rows.is_empty() {
        return String::new();
    }
    let mut md = format!(
        "## Beyond DynamoDB, Step Functions and Lambda\n\nWhat a transaction of updates costs besides those, sent \
         the way a service sends it on the local stack: API Gateway's requests (${:.2} a million, REST API), the end \
         event the stack publishes (${:.2} a million) and the logs CloudWatch Logs ingests (${:.2} a GB). The \
         functions' own log lines are measured at template.yaml's `RUST_LOG`; Lambda's records of a call \
         (`platform.start`, `platform.report`: {} bytes) and the API's access record ({} bytes) are sized from \
         their formats, as no local engine writes them. The caller learns the end from the end event, polling \
         nothing; each poll would add one request and its record. Warning and error lines are left out of the \
         price: each is a request that failed and was sent again (a timeout, a throttle), which DynamoDB Local on 2 \
         cores gives far more of than DynamoDB; the last column gives those of this run. USD per 1,000 actions, US \
         East prices.\n\n\
         | way | actions | transactions | API requests | Lambda calls | functions' log bytes | Lambda's and the \
         API's log bytes | API Gateway | end event | logs | all three | warning lines locally (bytes) |\n\
         | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
        USD_PER_API_REQUEST * 1e6,
        USD_PER_EVENT * 1e6,
        USD_PER_LOG_GB,
        platform_record_bytes(),
        access_record_bytes(),
    );
    for r in rows {
        md.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {:.6} | {:.6} | {:.6} | {:.6} | {} ({}) |\n",
            r.way,
            r.actions,
            r.transactions,
            r.api_requests,
            r.lambda_calls,
            r.function_log_bytes,
            r.platform_log_bytes + r.access_log_bytes,
            r.api_gateway_usd_per_1000,
            r.events_usd_per_1000,
            r.logs_usd_per_1000,
            r.api_gateway_usd_per_1000 + r.events_usd_per_1000 + r.logs_usd_per_1000,
            r.warnings,
            r.warning_bytes
        ));
    }
    md.push('\n');
    md
}
