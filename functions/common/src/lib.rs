//! What every phase Lambda shares. Each phase function's `main.rs` is one call to [`serve`] with its phase, and so is
//! its arm of `saga-functions` (functions/all), the binary SAM deploys for every function.
//!
//! - Configuration (`SAGA_*` environment variables) and the DynamoDB client are built once per cold start.
//! - Logs are JSON lines, each invocation in a span carrying the Lambda request id and the transaction id.
//! - Errors reach Step Functions under the stable names of [`TxError::name`] (`ValidationError`, `Contended`,
//!   `TransactionCanceled`, `TransactionAborted`, `Throttled`, ...), which the state machine's Retry and Catch
//!   match. A cancelled transaction's error message is the JSON of its cancellation (`TransactionId`, `Message`,
//!   `CancellationReasons`, and `ParentCancellationReason` when the parent was the reason), an aborted one's
//!   `{"TransactionId", "Message"}`; it becomes the execution's failure cause.
//! - Debug builds only: `SAGA_FAULT_FILE` names a file holding `<Phase> <k>`; the next call of that phase claims the
//!   file and dies after its k-th DynamoDB write with `InjectedFault`, as a Lambda timeout would. A file named
//!   `<SAGA_FAULT_FILE>.<TransactionId>` does the same for that transaction only (for Begin given a request, which
//!   has no id yet, `<SAGA_FAULT_FILE>.<execution name>`). A call whose k-th write was its last dies before it
//!   answers. `<Phase> <k> late` also holds the call's first lock write past the k-th and sends it once the
//!   transaction has finished, as a write of a Lambda that timed out may land. `<Phase>Share <k>` (`LockShare`,
//!   `ApplyShare`, `RollbackShare`) is taken by the next invocation running one share of that phase's step for another
//!   (a fanned-out step's worker), never by the step's own call. Release builds ignore all of them.

use std::time::Duration;

pub use aws_lambda_events::apigw::{ApiGatewayProxyRequest, ApiGatewayProxyResponse};
use aws_lambda_events::encodings::Body;
use aws_lambda_events::http::header::{HeaderValue, CONTENT_TYPE};
pub use dynamo_saga::lambda::Phase;
use dynamo_saga::lambda::{handle, Budget};
use dynamo_saga::{Config, Store, TxError};
pub use lambda_runtime::Error;
use lambda_runtime::{service_fn, Diagnostic, LambdaEvent};
use serde_json::{json, Value};
use tracing::Instrument;

/// Time kept back from the Lambda deadline: a call stops starting batches this long before it would be killed.
const MARGIN: Duration = Duration::from_secs(10);

/// A phase error as Lambda reports it.
#[derive(Debug)]
pub struct PhaseError(pub TxError);

impl From<PhaseError> for Diagnostic {
    fn from(e: PhaseError) -> Diagnostic {
        let message = match &e.0 {
            TxError::Canceled(c) => serde_json::to_string(c).unwrap_or_else(|_| c.message.clone()),
            TxError::Aborted(a) => serde_json::to_string(a).unwrap_or_else(|_| a.message.clone()),
            other => other.to_string(),
        };
        Diagnostic { error_type: e.0.name().to_string(), error_message: message }
    }
}

/// JSON log lines; `RUST_LOG` sets the filter.
pub fn init_logs() {
    tracing_subscriber::fmt()
        .json()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info,aws_config=warn".into()),
        )
        .with_current_span(true)
        .with_span_list(false)
        .with_target(false)
        .init();
}

/// The store, from the `SAGA_*` environment variables and the standard AWS configuration chain; with
/// `SAGA_END_EVENT_BUS`, one that announces each transaction it ends there ([`EndEvents`]).
pub async fn store_from_env() -> Result<Store, Error> {
    let cfg = Config::from_env().map_err(|e| format!("configuration: {e}"))?;
    let store = Store::connect(cfg).await;
    Ok(match Box::pin(EndEvents::from_env()).await {
        Some(events) => store.with_announcer(std::sync::Arc::new(events)),
        None => store,
    })
}

/// The event bus each transaction's end event goes to (the template's `EndEvents`: `default`); unset or empty: none.
pub const ENV_END_EVENT_BUS: &str = "SAGA_END_EVENT_BUS";
/// The end event's source and detail-type.
pub const END_EVENT_SOURCE: &str = "dynamo-saga";
pub const END_EVENT_DETAIL_TYPE: &str = "Transaction Ended";

/// The end of each transaction a call of this function ends, as one EventBridge event on the bus
/// [`ENV_END_EVENT_BUS`] names: source [`END_EVENT_SOURCE`], detail-type [`END_EVENT_DETAIL_TYPE`], the transaction's
/// execution as its resource, and `dynamo_saga::metrics::end_event` as its detail. Sent once, by the call that ends
/// the transaction; one PutEvents refuses after the client's retries is logged, not sent again.
#[derive(Debug)]
pub struct EndEvents {
    client: aws_sdk_eventbridge::Client,
    bus: String,
}

impl EndEvents {
    pub async fn from_env() -> Option<EndEvents> {
        let bus = std::env::var(ENV_END_EVENT_BUS).ok().filter(|b| !b.trim().is_empty())?;
        let sdk = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
        let mut conf = aws_sdk_eventbridge::config::Builder::from(&sdk);
        if let Some(log) = dynamo_saga::call_log::CallLog::from_env() {
            conf = conf.interceptor(log);
        }
        Some(EndEvents { client: aws_sdk_eventbridge::Client::from_conf(conf.build()), bus })
    }
}

impl dynamo_saga::store::Announce for EndEvents {
    fn announce(&self, detail: Value) -> futures::future::BoxFuture<'static, Result<(), TxError>> {
        let (client, bus) = (self.client.clone(), self.bus.clone());
        Box::pin(async move {
            let entry = aws_sdk_eventbridge::types::PutEventsRequestEntry::builder()
                .event_bus_name(bus)
                .source(END_EVENT_SOURCE)
                .detail_type(END_EVENT_DETAIL_TYPE)
                .set_resources(detail["ExecutionArn"].as_str().map(|arn| vec![arn.to_string()]))
                .detail(detail.to_string())
                .build();
            let failed = |message: String| TxError::Internal(format!("PutEvents: {message}"));
            let out = client
                .put_events()
                .entries(entry)
                .send()
                .await
                .map_err(|e| failed(aws_sdk_eventbridge::error::DisplayErrorContext(&e).to_string()))?;
            match out.entries().first().and_then(|e| e.error_code()) {
                None if out.failed_entry_count() == 0 => Ok(()),
                code => Err(failed(format!("the entry was refused: {}", code.unwrap_or("no error code")))),
            }
        })
    }
}

/// Runs the Lambda runtime loop for one phase. Lock, Apply and Rollback with `SAGA_FAN_OUT` above 1 run the shares of
/// a step side by side in other invocations of their own function ([`SelfInvoke`]).
pub async fn serve(phase: Phase) -> Result<(), Error> {
    init_logs();
    let mut store = store_from_env().await?;
    if store.cfg.fan_out > 1 && matches!(phase, Phase::Lock | Phase::Apply | Phase::Rollback) {
        store = store.with_workers(std::sync::Arc::new(Box::pin(SelfInvoke::from_env()).await?));
    }
    lambda_runtime::run(service_fn(|event: LambdaEvent<Value>| {
        let store = store.clone();
        async move { invoke(&store, phase, event).await }
    }))
    .await
}

async fn invoke(store: &Store, phase: Phase, event: LambdaEvent<Value>) -> Result<Value, PhaseError> {
    let (input, ctx) = event.into_parts();
    if input.get("Share").is_some() {
        return Box::pin(share(store, phase, &input, &ctx.request_id)).await;
    }
    let tx_id = input.get("TransactionId").and_then(Value::as_str).unwrap_or("").to_string();
    // Begin given a request has no transaction id yet: its faults are named after the execution.
    let fault_key = match input.get("ExecutionArn").and_then(Value::as_str) {
        Some(arn) if tx_id.is_empty() => arn.rsplit(':').next().unwrap_or("").to_string(),
        _ => tx_id.clone(),
    };
    let span = tracing::info_span!("invocation", phase = phase.name(), request_id = %ctx.request_id, tx_id = %tx_id);
    async move {
        let store = injected_fault(store, phase.name(), &fault_key);
        let budget = Budget::before_deadline(ctx.deadline, MARGIN);
        match Box::pin(handle(&store, phase, &input, budget)).await {
            // The injected fault's last write was the call's last: it dies before answering, all the same.
            Ok(_) if store.fault_spent() => {
                let e = TxError::InjectedFault(store.writes_sent().unwrap_or(0));
                tracing::warn!(error_type = e.name(), error = %e, "phase call failed");
                Err(PhaseError(e))
            }
            Ok(out) => {
                tracing::info!(tx_id = %out.transaction_id, step = %out.step, batch = out.batch, batches = out.batches, state = ?out.state, "phase call done");
                Ok(serde_json::to_value(out).expect("serialisable"))
            }
            Err(e) => {
                tracing::warn!(error_type = e.name(), error = %e, "phase call failed");
                Err(PhaseError(e))
            }
        }
    }
    .instrument(span)
    .await
}

/// One share of a step another invocation of this function runs ([`SelfInvoke`]): the share's result.
async fn share(store: &Store, phase: Phase, input: &Value, request_id: &str) -> Result<Value, PhaseError> {
    let tx_id = input.get("TransactionId").and_then(Value::as_str).unwrap_or("");
    let span = tracing::info_span!("share", phase = phase.name(), request_id = %request_id, tx_id = %tx_id);
    async move {
        let store = injected_fault(store, &format!("{}Share", phase.name()), tx_id);
        match Box::pin(dynamo_saga::lambda::handle_share(&store, input)).await {
            Ok(_) if store.fault_spent() => Err(PhaseError(TxError::InjectedFault(store.writes_sent().unwrap_or(0)))),
            Ok(out) => Ok(out),
            Err(e) => {
                tracing::warn!(error_type = e.name(), error = %e, "share failed");
                Err(PhaseError(e))
            }
        }
    }
    .instrument(span)
    .await
}

/// The workers of a fanned-out step (`dynamo_saga::shares`): this function itself, at the version this process
/// runs (so a share runs the step's own code and configuration), invoked synchronously once per share. A share
/// Lambda cannot start (the function's concurrency used up) comes back `Throttled`, and the step runs it itself.
#[derive(Debug)]
pub struct SelfInvoke {
    client: aws_sdk_lambda::Client,
    function: String,
    qualifier: Option<String>,
}

impl SelfInvoke {
    /// This function (`AWS_LAMBDA_FUNCTION_NAME`, `AWS_LAMBDA_FUNCTION_VERSION`), through a client that never retries:
    /// a share that failed is the step's to run again, and a share that is throttled, the step's to run itself.
    pub async fn from_env() -> Result<SelfInvoke, Error> {
        let function = std::env::var("AWS_LAMBDA_FUNCTION_NAME")
            .map_err(|_| "configuration: SAGA_FAN_OUT needs AWS_LAMBDA_FUNCTION_NAME, which Lambda sets")?;
        // Always qualified, `$LATEST` included: the role may invoke the function's versions (`NAME:*`), not the name
        // alone.
        let qualifier = std::env::var("AWS_LAMBDA_FUNCTION_VERSION").ok().filter(|v| !v.is_empty());
        let sdk = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
        let mut conf = aws_sdk_lambda::config::Builder::from(&sdk)
            .retry_config(aws_sdk_lambda::config::retry::RetryConfig::disabled());
        if let Some(log) = dynamo_saga::call_log::CallLog::from_env() {
            conf = conf.interceptor(log);
        }
        Ok(SelfInvoke { client: aws_sdk_lambda::Client::from_conf(conf.build()), function, qualifier })
    }
}

impl dynamo_saga::store::Workers for SelfInvoke {
    fn run(&self, share: Value) -> futures::future::BoxFuture<'static, Result<Value, TxError>> {
        let (client, function, qualifier) = (self.client.clone(), self.function.clone(), self.qualifier.clone());
        Box::pin(async move {
            let sent = client
                .invoke()
                .function_name(&function)
                .set_qualifier(qualifier)
                .payload(aws_sdk_lambda::primitives::Blob::new(share.to_string()))
                .send()
                .await;
            let worker_error = |body: &[u8]| {
                let v: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
                v["errorType"].as_str().map(|t| TxError::from_worker(t, v["errorMessage"].as_str().unwrap_or("")))
            };
            match sent {
                Ok(out) => {
                    let body = out.payload().map(|p| p.as_ref()).unwrap_or_default();
                    if out.function_error().is_some() {
                        return Err(worker_error(body).unwrap_or_else(|| {
                            TxError::WorkerFailed(format!("{function}: {}", String::from_utf8_lossy(body)))
                        }));
                    }
                    serde_json::from_slice(body).map_err(|e| TxError::WorkerFailed(format!("{function}'s answer: {e}")))
                }
                Err(e) => {
                    use aws_sdk_lambda::error::ProvideErrorMetadata;
                    if e.code() == Some("TooManyRequestsException") {
                        return Err(TxError::Throttled(format!("invoking {function}: {}", e.message().unwrap_or(""))));
                    }
                    // A Lambda Invoke API that answers a function's error with a status of its own (the local
                    // stack's) carries the error in the body, as Lambda's payload does.
                    let raw = e.raw_response().and_then(|r| r.body().bytes()).and_then(worker_error);
                    Err(raw.unwrap_or_else(|| {
                        TxError::WorkerFailed(format!(
                            "invoking {function}: {}",
                            aws_sdk_lambda::error::DisplayErrorContext(&e)
                        ))
                    }))
                }
            }
        })
    }
}

/// `store`, or a copy that dies as the fault file for `tx_id` says when it names `call` (a phase, or a phase's share).
#[cfg(debug_assertions)]
fn injected_fault(store: &Store, call: &str, tx_id: &str) -> Store {
    let Ok(base) = std::env::var("SAGA_FAULT_FILE") else { return store.clone() };
    // A fault for this transaction (`<file>.<TransactionId>`) comes first, then one for any transaction.
    let own = format!("{base}.{tx_id}");
    let path = if !tx_id.is_empty() && std::path::Path::new(&own).exists() { own } else { base };
    let Ok(spec) = std::fs::read_to_string(&path) else { return store.clone() };
    let mut words = spec.split_whitespace();
    let (Some(name), Some(Ok(k))) = (words.next(), words.next().map(str::parse::<u64>)) else { return store.clone() };
    let late = words.next() == Some("late");
    // Renaming claims the fault, so exactly one call of the phase takes it even if calls race.
    if name != call || std::fs::rename(&path, format!("{path}.taken")).is_err() {
        return store.clone();
    }
    tracing::warn!(writes = k, late, "injected fault: this call dies after {k} writes");
    if late {
        return store.crash_after_late(k, tx_id);
    }
    store.crash_after(k)
}

#[cfg(not(debug_assertions))]
fn injected_fault(store: &Store, _call: &str, _tx_id: &str) -> Store {
    store.clone()
}

/// An API Gateway Lambda proxy response with a JSON body.
pub fn http_reply(status: u16, body: Value) -> ApiGatewayProxyResponse {
    let mut reply = ApiGatewayProxyResponse::default();
    reply.status_code = i64::from(status);
    reply.headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    reply.body = Some(Body::Text(body.to_string()));
    reply
}

/// An error as AWS JSON APIs answer one: `{"__type", "message"}`, with 400 for bad input, 403 for a table the caller
/// is not entitled to, 404 for an unknown transaction, 429 when throttled and 500 otherwise.
pub fn http_failure(e: &TxError) -> ApiGatewayProxyResponse {
    let status = match e {
        TxError::Validation(_) | TxError::Canceled(_) => 400,
        TxError::AccessDenied(_) => 403,
        TxError::NotFound(_) => 404,
        TxError::Throttled(_) => 429,
        _ => 500,
    };
    let mut body = json!({"__type": e.name(), "message": e.to_string()});
    // A snapshot read's conflict: one reason per item, as TransactGetItems gives them.
    if let TxError::Canceled(c) = e {
        body["CancellationReasons"] = serde_json::to_value(&c.cancellation_reasons).unwrap_or_default();
    }
    http_reply(status, body)
}

/// Serves an API Gateway (REST, Lambda proxy) function: `route` answers each request with a status and a JSON body, or
/// an error, which becomes [`http_failure`]'s answer and a warning naming `what` failed.
pub async fn serve_api<F, Fut>(what: &'static str, route: F) -> Result<(), Error>
where
    F: Fn(Store, ApiGatewayProxyRequest) -> Fut,
    Fut: std::future::Future<Output = Result<(u16, Value), TxError>>,
{
    init_logs();
    let store = store_from_env().await?;
    let (store, route) = (&store, &route);
    lambda_runtime::run(service_fn(|event: LambdaEvent<ApiGatewayProxyRequest>| async move {
        let out = match route(store.clone(), event.payload).await {
            Ok((status, body)) => http_reply(status, body),
            Err(e) => {
                tracing::warn!(error_type = e.name(), error = %e, "{what} request failed");
                http_failure(&e)
            }
        };
        Ok::<ApiGatewayProxyResponse, Error>(out)
    }))
    .await
}

/// The body of a proxy request as JSON; `{}` when there is none.
pub fn body_of(request: &ApiGatewayProxyRequest) -> Result<Value, TxError> {
    let text = match request.body.as_deref() {
        None | Some("") => return Ok(json!({})),
        Some(text) if request.is_base64_encoded => {
            use base64::Engine;
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(text)
                .map_err(|e| TxError::invalid(None, format!("the body is not valid base64: {e}")))?;
            String::from_utf8(bytes).map_err(|_| TxError::invalid(None, "the body is not UTF-8 text"))?
        }
        Some(text) => text.to_string(),
    };
    serde_json::from_str(&text).map_err(|e| TxError::invalid(None, format!("the body is not valid JSON: {e}")))
}

/// The route of a proxy request: its method and resource (`POST`, `/transactions/{id}/resume`).
pub fn route_of(request: &ApiGatewayProxyRequest) -> (&str, &str) {
    (request.http_method.as_str(), request.resource.as_deref().unwrap_or(""))
}

/// Path parameter `name` of a proxy request; empty when absent.
pub fn path_parameter<'a>(request: &'a ApiGatewayProxyRequest, name: &str) -> &'a str {
    request.path_parameters.get(name).map_or("", String::as_str)
}
