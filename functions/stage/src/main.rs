//! The staging API behind API Gateway (REST, Lambda proxy integration), for transactions larger than one request:
//!
//! - `POST /transactions/staged` with `{"ClientRequestToken"?, "Parent"?, "Options"?}`: 201 `{"TransactionId"}`.
//! - `PUT /transactions/staged/{id}/chunks/{chunk}` with `{"TransactItems": [...]}`: 200 `{"TransactionId", "Chunk",
//!   "Actions", "Created"}`. Chunks are numbered from 0; sending one again is harmless.
//! - `POST /transactions/staged/{id}/seal` with `{"Chunks": n}` (optional): 200 `{"TransactionId", "Actions",
//!   "Batches", "State", "ExecutionInput"}`. `ExecutionInput` (`{"TransactionId"}`) is what `POST /transactions`
//!   then takes to run it.
//!
//! Errors answer 400 (`ValidationError`), 404 (`TransactionNotFound`), 429 (`Throttled`) or 500, with `{"__type", "message"}` as AWS
//! JSON APIs do.

use dynamo_saga::{stage, Store, TxError};
use saga_lambda::Error;
use serde_json::{json, Value};

fn bad(msg: impl Into<String>) -> TxError {
    TxError::invalid(None, msg)
}

async fn route(store: &Store, event: &Value) -> Result<(u16, Value), TxError> {
    let method = event["httpMethod"].as_str().unwrap_or("");
    let resource = event["resource"].as_str().unwrap_or("");
    let param = |k: &str| event["pathParameters"][k].as_str().unwrap_or("").to_string();
    let body: Value = match event["body"].as_str() {
        None | Some("") => json!({}),
        Some(text) => serde_json::from_str(text).map_err(|e| bad(format!("the body is not valid JSON: {e}")))?,
    };
    match (method, resource) {
        ("POST", "/transactions/staged") => {
            let id = stage::create(store, &body).await?;
            Ok((201, json!({ "TransactionId": id })))
        }
        ("PUT", "/transactions/staged/{id}/chunks/{chunk}") => {
            let chunk: usize = param("chunk").parse().map_err(|_| bad("the chunk number must be a whole number"))?;
            let items = body.get("TransactItems").ok_or_else(|| bad("the body must be {\"TransactItems\": [...]}"))?;
            let done = stage::append(store, &param("id"), chunk, items).await?;
            Ok((200, serde_json::to_value(done).expect("serialisable")))
        }
        ("POST", "/transactions/staged/{id}/seal") => {
            let chunks = match body.get("Chunks") {
                None | Some(Value::Null) => None,
                Some(v) => Some(v.as_u64().ok_or_else(|| bad("Chunks must be a whole number"))? as usize),
            };
            let id = param("id");
            let begun = stage::seal(store, &id, chunks).await?;
            Ok((200, json!({"TransactionId": begun.transaction_id, "Actions": begun.actions, "Batches": begun.batches,
                "State": begun.state, "ExecutionInput": {"TransactionId": id}})))
        }
        _ => Err(TxError::invalid(None, format!("no route {method} {resource}"))),
    }
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    saga_lambda::serve_api("staging", |store, event| async move { route(&store, &event).await }).await
}
