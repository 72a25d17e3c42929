//! The status API behind API Gateway (REST, Lambda proxy integration): `GET /transactions/{id}` answers 200 with
//! [`dynamo_saga::status::Status`] (state, next phase, batches done by each phase, the cancellation reasons of a
//! rollback, capacity used, timings, the execution ARN), or 400 (`ValidationError`), 404 (`TransactionNotFound`),
//! 429 (`Throttled`) or 500 with `{"__type", "message"}`. It only reads.

use dynamo_saga::{status, Store, TxError};
use saga_lambda::{path_parameter, route_of, ApiGatewayProxyRequest, Error};
use serde_json::Value;

async fn route(store: &Store, request: &ApiGatewayProxyRequest) -> Result<Value, TxError> {
    match route_of(request) {
        ("GET", "/transactions/{id}") => {
            let id = path_parameter(request, "id");
            Ok(serde_json::to_value(status::status(store, id).await?).expect("serialisable"))
        }
        (method, resource) => Err(TxError::invalid(None, format!("no route {method} {resource}"))),
    }
}

/// Serves the function's events until the Lambda runtime stops it.
pub async fn run() -> Result<(), Error> {
    saga_lambda::serve_api("status", |store, request| async move { route(&store, &request).await.map(|b| (200, b)) })
        .await
}
