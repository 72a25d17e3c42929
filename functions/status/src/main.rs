//! The status API behind API Gateway (REST, Lambda proxy integration): `GET /transactions/{id}` answers 200 with
//! [`dynamo_saga::status::Status`] (state, next phase, batches done by each phase, the cancellation reasons of a
//! rollback, capacity used, timings, the execution ARN), or 400 (`ValidationError`), 404 (`TransactionNotFound`),
//! 429 (`Throttled`) or 500 with `{"__type", "message"}`. It only reads.

use dynamo_saga::{status, Store, TxError};
use saga_lambda::Error;
use serde_json::Value;

async fn route(store: &Store, event: &Value) -> Result<Value, TxError> {
    let method = event["httpMethod"].as_str().unwrap_or("");
    let resource = event["resource"].as_str().unwrap_or("");
    match (method, resource) {
        ("GET", "/transactions/{id}") => {
            let id = event["pathParameters"]["id"].as_str().unwrap_or("");
            Ok(serde_json::to_value(status::status(store, id).await?).expect("serialisable"))
        }
        _ => Err(TxError::invalid(None, format!("no route {method} {resource}"))),
    }
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    saga_lambda::serve_api("status", |store, event| async move { route(&store, &event).await.map(|body| (200, body)) })
        .await
}
