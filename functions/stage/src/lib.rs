//! The API's writing routes behind API Gateway (REST, Lambda proxy integration).
//!
//! - `POST /transactions` with a request (`TransactItems`, `ClientRequestToken`?, `Parent`?, `Options`?) or
//!   `{"TransactionId"}` of a sealed staged transaction: validates and begins it (`dynamo_saga::start`). A request one
//!   `TransactWriteItems` call can carry is carried out here, in that call: 200 `{"TransactionId", "State", "Finished":
//!   true, "Cancellation"?}`, with no execution. Any other is run by the state machine's execution named after it: 200
//!   `{"TransactionId", "ExecutionArn", "State", "Finished": false}` as soon as it starts. A call repeated with the
//!   same `ClientRequestToken` gets the same answer. `GET /transactions/{id}` then tells how it goes. Needs
//!   `SAGA_STATE_MACHINE_ARN`.
//!
//! - `POST /transactions/{id}/resume`: starts a new execution for a transaction whose execution ended before it did
//!   (after `RecoveryNeeded`, once what DynamoDB refused is mended: `GET /transactions/{id}` shows it as `Refused`).
//!   200 `{"TransactionId", "ExecutionArn", "State"}`; for a finished transaction, no `ExecutionArn`.
//!
//! Staging, for transactions larger than one request:
//!
//! - `POST /transactions/staged` with `{"ClientRequestToken"?, "Parent"?, "Options"?}`: 201 `{"TransactionId"}`.
//! - `PUT /transactions/staged/{id}/chunks/{chunk}` with `{"TransactItems": [...]}`: 200 `{"TransactionId", "Chunk",
//!   "Actions", "Created"}`. Chunks are numbered from 0; sending one again is harmless.
//! - `POST /transactions/staged/{id}/seal` with `{"Chunks": n}` (optional): 200 `{"TransactionId", "Actions",
//!   "Batches", "State", "ExecutionInput"}`. `ExecutionInput` (`{"TransactionId"}`) is what `POST /transactions`
//!   then takes to run it.
//!
//! With caller entitlements (`SAGA_CALLER_ENTITLEMENTS`, `dynamo_saga::entitlements`), a request, a staged
//! transaction's `Parent` and each chunk may name only tables the caller (API Gateway's
//! `requestContext.identity.userArn`) is entitled to; any other is refused before anything is written.
//!
//! Errors answer 400 (`ValidationError`), 403 (`AccessDenied`, naming the action and the table), 404
//! (`TransactionNotFound`), 429 (`Throttled`) or 500, with `{"__type", "message"}` as AWS JSON APIs do.

use dynamo_saga::entitlements::{self, Caller, Entitlements};
use dynamo_saga::sweeper::StateMachine;
use dynamo_saga::{staging, start, Store, TxError};
use saga_lambda::{body_of, path_parameter, route_of, ApiGatewayProxyRequest, Error};
use serde_json::{json, Value};

fn bad(msg: impl Into<String>) -> TxError {
    TxError::invalid(None, msg)
}

/// What the function holds from its cold start on.
struct Api {
    runner: Option<StateMachine>,
    entitlements: Option<Entitlements>,
}

async fn route(store: &Store, api: &Api, request: &ApiGatewayProxyRequest) -> Result<(u16, Value), TxError> {
    let body = body_of(request)?;
    let caller = Caller::Principal(request.request_context.identity.user_arn.as_deref());
    let entitled = |named: &Value| entitlements::check_request(api.entitlements.as_ref(), &caller, named);
    match route_of(request) {
        ("POST", "/transactions") => {
            let runner = api.runner.as_ref().ok_or_else(|| {
                TxError::Internal("SAGA_STATE_MACHINE_ARN is not set: this function cannot start executions".into())
            })?;
            if !body.is_object() {
                return Err(bad(
                    "the body must be a JSON object: a request with TransactItems, or {\"TransactionId\"}",
                ));
            }
            entitled(&body)?;
            let started = start::start(store, runner, &body).await?;
            Ok((200, serde_json::to_value(started).expect("serialisable")))
        }
        ("POST", "/transactions/{id}/resume") => {
            let id = path_parameter(request, "id");
            dynamo_saga::status::check_id(id)?;
            let resumed = start::resume(store, api.runner.as_ref(), id).await?;
            Ok((200, serde_json::to_value(resumed).expect("serialisable")))
        }
        ("POST", "/transactions/staged") => {
            entitled(&body)?;
            let id = staging::create(store, &body).await?;
            Ok((201, json!({ "TransactionId": id })))
        }
        ("PUT", "/transactions/staged/{id}/chunks/{chunk}") => {
            let chunk: usize =
                path_parameter(request, "chunk").parse().map_err(|_| bad("the chunk number must be a whole number"))?;
            let items = body.get("TransactItems").ok_or_else(|| bad("the body must be {\"TransactItems\": [...]}"))?;
            entitled(items)?;
            let done = staging::append(store, path_parameter(request, "id"), chunk, items).await?;
            Ok((200, serde_json::to_value(done).expect("serialisable")))
        }
        ("POST", "/transactions/staged/{id}/seal") => {
            let chunks = match body.get("Chunks") {
                None | Some(Value::Null) => None,
                Some(v) => Some(v.as_u64().ok_or_else(|| bad("Chunks must be a whole number"))? as usize),
            };
            // With a ClientRequestToken an earlier transaction already used, the seal answers that transaction, not
            // the staged id: the execution input names the one that runs.
            let begun = staging::seal(store, path_parameter(request, "id"), chunks).await?;
            Ok((
                200,
                json!({"TransactionId": begun.transaction_id, "Actions": begun.actions, "Batches": begun.batches,
                "State": begun.state, "ExecutionInput": {"TransactionId": begun.transaction_id}}),
            ))
        }
        (method, resource) => Err(TxError::invalid(None, format!("no route {method} {resource}"))),
    }
}

/// Serves the function's events until the Lambda runtime stops it.
pub async fn run() -> Result<(), Error> {
    let runner = match std::env::var("SAGA_STATE_MACHINE_ARN") {
        Ok(arn) if !arn.is_empty() => {
            Some(StateMachine { client: dynamo_saga::call_log::state_machine_client().await, arn })
        }
        _ => None,
    };
    let entitlements = Entitlements::from_vars(|k| std::env::var(k).ok()).map_err(|e| format!("configuration: {e}"))?;
    let api = &Api { runner, entitlements };
    saga_lambda::serve_api("API", |store, request| async move { route(&store, api, &request).await }).await
}
