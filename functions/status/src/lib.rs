//! The reading API behind API Gateway (REST, Lambda proxy integration); it only reads.
//!
//! - `GET /transactions/{id}` answers 200 with [`dynamo_saga::status::Status`] (state, next phase, batches done by
//!   each phase, the cancellation reasons of a rollback, capacity used, timings, the execution ARN).
//! - `POST /transactions/reads` takes `TransactGetItems`'s request, any number of `Get`s, and answers 200 with every
//!   item as committed at one instant ([`dynamo_saga::snapshot`]): `{"Responses": [{"Item": ...} or {}], "Passes",
//!   "ReadUnits", "Calls"}`. The caller's entitlements (`SAGA_CALLER_ENTITLEMENTS`) must let it read each table. An
//!   answer over what a Lambda function may answer API Gateway with (6 MB) is refused before it is sent.
//!
//! Errors: 400 (`ValidationError`; `TransactionCanceled` with `CancellationReasons` when items kept changing), 403
//! (`AccessDenied`), 404 (`TransactionNotFound`), 429 (`Throttled`) or 500, with `{"__type", "message"}`.

use dynamo_saga::entitlements::{self, Caller, Entitlements};
use dynamo_saga::{snapshot, status, Store, TxError};
use saga_lambda::{body_of, path_parameter, route_of, ApiGatewayProxyRequest, Error};
use serde_json::Value;

/// The most a Lambda function may answer a synchronous invocation with (6 MB), which API Gateway's proxy answer,
/// the body as one JSON string among its headers, must fit.
const MAX_ANSWER_BYTES: usize = 6 * 1024 * 1024;
/// Room in it for the proxy answer's status and headers.
const ENVELOPE_BYTES: usize = 1024;

async fn route(
    store: &Store,
    entitlements: Option<&Entitlements>,
    request: &ApiGatewayProxyRequest,
) -> Result<Value, TxError> {
    match route_of(request) {
        ("GET", "/transactions/{id}") => {
            let id = path_parameter(request, "id");
            Ok(serde_json::to_value(status::status(store, id).await?).expect("serialisable"))
        }
        ("POST", "/transactions/reads") => {
            let body = body_of(request)?;
            let caller = Caller::Principal(request.request_context.identity.user_arn.as_deref());
            entitlements::check_read(entitlements, &caller, &body)?;
            let answer = snapshot::transact_get_items(store, &body).await?.to_json();
            // The body travels as one JSON string inside the proxy answer: its quotes and backslashes escaped.
            let sent = serde_json::to_string(&answer.to_string()).expect("serialisable").len() + ENVELOPE_BYTES;
            if sent > MAX_ANSWER_BYTES {
                return Err(TxError::invalid(
                    None,
                    format!(
                        "the answer holds {sent} bytes, over the {MAX_ANSWER_BYTES} a Lambda function may answer API \
                         Gateway with: read fewer items in one request (or project fewer attributes), or read through \
                         the library, which has no such limit"
                    ),
                ));
            }
            Ok(answer)
        }
        (method, resource) => Err(TxError::invalid(None, format!("no route {method} {resource}"))),
    }
}

/// Serves the function's events until the Lambda runtime stops it.
pub async fn run() -> Result<(), Error> {
    let entitlements = Entitlements::from_vars(|k| std::env::var(k).ok()).map_err(|e| format!("configuration: {e}"))?;
    let entitlements = &entitlements;
    saga_lambda::serve_api("status", |store, request| async move {
        route(&store, entitlements.as_ref(), &request).await.map(|b| (200, b))
    })
    .await
}
