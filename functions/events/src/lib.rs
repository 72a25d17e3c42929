//! The target of the stack's EventBridge rule: a `TransactWriteItems` event (source `dynamo-saga` or
//! `dynamo-saga.*`, detail-type `TransactWriteItems`) whose detail is the request.
//!
//! EventBridge invokes this function asynchronously. It checks the sender (the event's account and source) against
//! the caller entitlements (`SAGA_CALLER_ENTITLEMENTS`, `dynamo_saga::entitlements`), then starts the request as `POST
//! /transactions` does (`dynamo_saga::start`): one `TransactWriteItems` call can carry it, so it is carried out here
//! with no execution, or it is begun and its execution started. A request without a `ClientRequestToken` takes the
//! event's id as one: EventBridge and Lambda deliver an event at least once, each time with the same id, so every
//! delivery is the same transaction and applies once.
//!
//! An event refused for good (a sender not entitled to a table, a request that is not valid) goes to the dead-letter
//! queue (`SAGA_DEAD_LETTER_QUEUE_URL`) at once, as received, with message attributes `ErrorType` (the stable error
//! name: `AccessDenied`, `ValidationError`, ...), `ErrorMessage` and `RequestID` (this invocation's), and the
//! invocation succeeds: retrying cannot change the answer. Any other failure (throttling, a service error) fails the
//! invocation, which Lambda retries; after its last retry Lambda sends the event to the same queue with its own
//! attributes (`RequestID`, `ErrorCode`, `ErrorMessage`).

use aws_sdk_sqs::types::MessageAttributeValue;
use dynamo_saga::entitlements::{self, Caller, Entitlements};
use dynamo_saga::sweeper::StateMachine;
use dynamo_saga::{start, Store, TxError};
use lambda_runtime::{service_fn, Diagnostic, LambdaEvent};
use saga_lambda::{Error, PhaseError};
use serde::Deserialize;
use serde_json::{json, Value};

/// The queue refused events go to.
const ENV_DEAD_LETTER_QUEUE_URL: &str = "SAGA_DEAD_LETTER_QUEUE_URL";
/// The most of an error message a dead-letter message carries, as Lambda's own dead-letter queue keeps 1 KB.
const MAX_MESSAGE_BYTES: usize = 1024;

/// What the function holds from its cold start on.
struct Events {
    store: Store,
    runner: StateMachine,
    entitlements: Option<Entitlements>,
    queue: aws_sdk_sqs::Client,
    queue_url: String,
}

/// What this function reads of an EventBridge event (its structure:
/// <https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-events-structure.html>): who sent it, its id and the
/// request. An event without `detail-type`, `source` or `detail` is not one.
#[derive(Deserialize)]
#[serde(rename_all = "kebab-case")]
struct Event {
    #[serde(default)]
    id: Option<String>,
    #[serde(rename = "detail-type")]
    _detail_type: String,
    source: String,
    #[serde(default)]
    account: Option<String>,
    detail: Value,
}

/// `event` as an EventBridge event, or why it is not one.
fn parse(event: &Value) -> Result<Event, TxError> {
    serde_json::from_value(event.clone()).map_err(|e| TxError::invalid(None, format!("not an EventBridge event: {e}")))
}

/// Whether retrying the same event could end otherwise: for these, never.
fn refused_for_good(e: &TxError) -> bool {
    matches!(e, TxError::Validation(_) | TxError::AccessDenied(_) | TxError::NotFound(_) | TxError::UnknownFormat(_))
}

/// Starts the request of `event`, or says why it cannot be.
async fn start_event(ev: &Events, event: &Value) -> Result<start::Started, TxError> {
    let parsed = parse(event)?;
    let account = parsed.account.as_deref().unwrap_or("");
    entitlements::check_request(
        ev.entitlements.as_ref(),
        &Caller::Event { account, source: &parsed.source },
        &parsed.detail,
    )?;
    let mut request = parsed.detail;
    let top = request
        .as_object_mut()
        .ok_or_else(|| TxError::invalid(None, "the event's detail must be the request, a JSON object"))?;
    if let Some(id) = parsed.id.filter(|id| !id.is_empty()) {
        top.entry("ClientRequestToken").or_insert(Value::String(id));
    }
    start::start(&ev.store, &ev.runner, &request).await
}

/// Sends a refused event to the dead-letter queue, as received, with why.
async fn dead_letter(ev: &Events, event: &Value, e: &TxError, request_id: &str) -> Result<(), TxError> {
    let text = |v: &str| MessageAttributeValue::builder().data_type("String").string_value(v).build();
    let mut message = e.to_string();
    if message.len() > MAX_MESSAGE_BYTES {
        let cut = (0..=MAX_MESSAGE_BYTES).rev().find(|i| message.is_char_boundary(*i)).unwrap_or(0);
        message.truncate(cut);
    }
    let attribute = |v: &str| text(v).map_err(|e| TxError::Internal(format!("a message attribute: {e}")));
    ev.queue
        .send_message()
        .queue_url(&ev.queue_url)
        .message_body(event.to_string())
        .message_attributes("ErrorType", attribute(e.name())?)
        .message_attributes("ErrorMessage", attribute(&message)?)
        .message_attributes("RequestID", attribute(request_id)?)
        .send()
        .await
        .map_err(|err| {
            TxError::Internal(format!(
                "the dead-letter queue refused the event: {}",
                aws_sdk_sqs::error::DisplayErrorContext(&err)
            ))
        })?;
    Ok(())
}

async fn handle(ev: &Events, event: LambdaEvent<Value>) -> Result<Value, PhaseError> {
    let (event, ctx) = event.into_parts();
    match start_event(ev, &event).await {
        Ok(started) => {
            tracing::info!(tx_id = %started.transaction_id, state = ?started.state, finished = started.finished, "event started");
            Ok(serde_json::to_value(started).expect("serialisable"))
        }
        Err(e) if refused_for_good(&e) => {
            tracing::warn!(error_type = e.name(), error = %e, "event refused: sent to the dead-letter queue");
            dead_letter(ev, &event, &e, &ctx.request_id).await.map_err(PhaseError)?;
            Ok(json!({ "Refused": { "ErrorType": e.name(), "ErrorMessage": e.to_string() } }))
        }
        Err(e) => {
            tracing::warn!(error_type = e.name(), error = %e, "event failed: Lambda retries it");
            Err(PhaseError(e))
        }
    }
}

/// Serves the function's events until the Lambda runtime stops it.
pub async fn run() -> Result<(), Error> {
    saga_lambda::init_logs();
    let store = saga_lambda::store_from_env().await?;
    let arn =
        std::env::var("SAGA_STATE_MACHINE_ARN").map_err(|_| "configuration: SAGA_STATE_MACHINE_ARN is not set")?;
    let runner = StateMachine { client: dynamo_saga::call_log::state_machine_client().await, arn };
    let entitlements = Entitlements::from_vars(|k| std::env::var(k).ok()).map_err(|e| format!("configuration: {e}"))?;
    let queue_url = std::env::var(ENV_DEAD_LETTER_QUEUE_URL)
        .map_err(|_| format!("configuration: {ENV_DEAD_LETTER_QUEUE_URL} is not set"))?;
    let sdk = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
    let mut conf = aws_sdk_sqs::config::Builder::from(&sdk);
    if let Some(log) = dynamo_saga::call_log::CallLog::from_env() {
        conf = conf.interceptor(log);
    }
    let queue = aws_sdk_sqs::Client::from_conf(conf.build());
    let ev = &Events { store, runner, entitlements, queue, queue_url };
    lambda_runtime::run(service_fn(|event: LambdaEvent<Value>| async move {
        handle(ev, event).await.map_err(Diagnostic::from)
    }))
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sample_event_gives_its_sender_id_and_request() {
        let sample: Value = serde_json::from_str(include_str!("../../../events/eventbridge-transaction.json")).unwrap();
        let e = parse(&sample).unwrap();
        assert_eq!(e.source, sample["source"].as_str().unwrap());
        assert_eq!(e.account.as_deref(), sample["account"].as_str());
        assert_eq!(e.id.as_deref(), sample["id"].as_str());
        assert_eq!(e.detail, sample["detail"]);
    }

    #[test]
    fn an_event_without_its_type_sender_or_detail_is_not_one() {
        let sample: Value = serde_json::from_str(include_str!("../../../events/eventbridge-transaction.json")).unwrap();
        for field in ["detail-type", "source", "detail"] {
            let mut event = sample.clone();
            event.as_object_mut().unwrap().remove(field);
            let e = parse(&event).err().unwrap_or_else(|| panic!("{field} missing: parsed"));
            assert!(matches!(e, TxError::Validation(_)), "{field}: {e:?}");
            assert!(e.to_string().contains("not an EventBridge event") && e.to_string().contains(field), "{e}");
        }
        let mut event = sample;
        event.as_object_mut().unwrap().retain(|k, _| ["detail-type", "source", "detail"].contains(&k.as_str()));
        let e = parse(&event).unwrap();
        assert_eq!((e.id, e.account), (None, None), "id and account are optional");
    }
}
