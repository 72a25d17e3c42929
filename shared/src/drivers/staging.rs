//! Staging: a transaction too big for one request (a Step Functions execution input holds 256 KB, a Lambda payload
//! 6 MB) is created, its actions appended in chunks, then sealed, which validates and begins it as one request. The
//! execution that runs it is then started with just `{"TransactionId": id}`.
//!
//! - [`create`] takes the request without `TransactItems` (`ClientRequestToken`, `Parent`, `Options`) and returns the
//!   transaction id.
//! - [`append`] stores chunk `n` (0, 1, 2, ...) of `TransactItems`. Appending the same chunk again is a no-op;
//!   the same number with other actions is rejected. A chunk is at most [`MAX_CHUNK_BYTES`] of JSON.
//! - [`seal`] checks the chunks are 0..n with none missing, assembles the request in chunk order and begins it under
//!   the staged id, with every check `begin` makes. Sealing again returns the same transaction. A request larger than
//!   `Config::max_request_bytes` (in a Lambda function, what its memory can hold while the request is validated) is
//!   refused before it is read into memory.
//!
//! Staged records live in the transactions table under the transaction's id and expire by TTL like the rest.

use aws_sdk_dynamodb::types::AttributeValue;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::constants::{ATTR_EXPIRES_AT, MEMORY_BYTES_PER_REQUEST_BYTE, TX_PK, TX_SK};
use crate::dynamo::store::{Meter, Store, Written};
use crate::error::TxError;
use crate::model::value::Item;
use crate::model::value::{n, now_ms, s};
use crate::protocol::phase::begin::{self, Begun};

/// Largest chunk of actions, as JSON: a chunk is stored as one item, and DynamoDB items hold 400 KB.
pub const MAX_CHUNK_BYTES: usize = 350 * 1024;
const SK_STAGE: &str = "stage";
/// Where the limit comes from, for the error message.
const SEAL_LIMIT_HINT: &str = "SAGA_MAX_REQUEST_BYTES or the template's StageMemorySize";
const SK_CHUNK_PREFIX: &str = "stage#";
const A_BODY: &str = "body";
const A_HASH: &str = "hash";
const A_COUNT: &str = "actions";

/// A chunk as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Appended {
    pub transaction_id: String,
    pub chunk: usize,
    pub actions: usize,
    /// False when this chunk had been appended before with the same actions.
    pub created: bool,
}

fn key(id: &str, sk: &str) -> Item {
    [(TX_PK.to_string(), s(id)), (TX_SK.to_string(), s(sk))].into_iter().collect()
}

fn chunk_sk(chunk: usize) -> String {
    format!("{SK_CHUNK_PREFIX}{chunk:06}")
}

fn invalid(msg: impl Into<String>) -> TxError {
    TxError::invalid(None, msg)
}

fn expires(store: &Store) -> AttributeValue {
    n(now_ms() / 1000 + store.cfg.default_deadline.as_secs() + store.cfg.retention.as_secs())
}

/// Creates a staged transaction from the request's other fields; returns its id.
pub async fn create(store: &Store, envelope: &Value) -> Result<String, TxError> {
    let obj = envelope.as_object().ok_or_else(|| invalid("the request must be a JSON object"))?;
    for k in obj.keys() {
        match k.as_str() {
            "ClientRequestToken" | "Parent" | "Options" => {}
            "TransactItems" => {
                return Err(invalid("TransactItems are appended in chunks after create, not given to it"))
            }
            other => {
                return Err(invalid(format!("unknown field {other:?} (expected ClientRequestToken, Parent, Options)")))
            }
        }
    }
    // The fields are checked now, with a stand-in action, so a bad Parent or Options fails here rather than at seal.
    let mut probe = obj.clone();
    // Only errors about the request's own fields count; the stand-in action may well not pass the allow-list.
    let table =
        store.cfg.allowed_tables.as_ref().and_then(|t| t.iter().next().cloned()).unwrap_or_else(|| "stand-in".into());
    let stand_in = serde_json::json!({"ConditionCheck": {"TableName": table, "Key": {"k": {"S": "k"}}, "ConditionExpression": "attribute_exists(k)"}});
    probe.insert("TransactItems".into(), Value::Array(vec![stand_in]));
    if let Err(TxError::Validation(v)) = crate::model::request::parse(&Value::Object(probe), &store.cfg) {
        if v.action.is_none() {
            return Err(TxError::Validation(v));
        }
    }
    let id = ulid::Ulid::new().to_string();
    let m = Meter::default();
    let mut item = key(&id, SK_STAGE);
    item.insert(A_BODY.into(), s(Value::Object(obj.clone()).to_string()));
    item.insert(ATTR_EXPIRES_AT.into(), expires(store));
    let put = store.client.put_item().table_name(&store.cfg.tx_table).set_item(Some(item));
    store.put(&m, put).await?;
    Ok(id)
}

/// Appends chunk `chunk` (an array of `TransactItems` entries) to a staged transaction.
pub async fn append(store: &Store, id: &str, chunk: usize, items: &Value) -> Result<Appended, TxError> {
    let list = items.as_array().ok_or_else(|| invalid("a chunk is a JSON array of TransactItems entries"))?;
    if list.is_empty() {
        return Err(invalid("a chunk must hold at least one action"));
    }
    let body = items.to_string();
    if body.len() > MAX_CHUNK_BYTES {
        return Err(invalid(format!(
            "chunk {chunk} is {} bytes of JSON; at most {MAX_CHUNK_BYTES}: split it",
            body.len()
        )));
    }
    let m = Meter::default();
    staged(store, &m, id).await?;
    let hash: String = Sha256::digest(body.as_bytes()).iter().map(|b| format!("{b:02x}")).collect();
    let mut item = key(id, &chunk_sk(chunk));
    item.insert(A_BODY.into(), s(body));
    item.insert(A_HASH.into(), s(&hash));
    item.insert(A_COUNT.into(), n(list.len()));
    item.insert(ATTR_EXPIRES_AT.into(), expires(store));
    match store.put_record_if_absent(&m, item, Some(A_HASH)).await? {
        Written::Done(old) => {
            Ok(Appended { transaction_id: id.into(), chunk, actions: list.len(), created: old.is_none() })
        }
        Written::ConditionFailed(_) => {
            Err(invalid(format!("chunk {chunk} of {id} was already appended with other actions")))
        }
    }
}

/// Validates and begins the staged transaction. `chunks`, when given, is how many chunks the caller appended.
pub async fn seal(store: &Store, id: &str, chunks: Option<usize>) -> Result<Begun, TxError> {
    let m = Meter::default();
    let envelope = staged(store, &m, id).await?;
    let records = store.query_prefix(&m, id, SK_CHUNK_PREFIX).await?;
    let bytes: usize = records.iter().map(|r| r.get(A_BODY).and_then(|b| b.as_s().ok()).map_or(0, String::len)).sum();
    if let Some(max) = store.cfg.max_request_bytes.filter(|max| bytes > *max) {
        return Err(invalid(format!(
            "{id} is {bytes} bytes of actions; this function takes at most {max} (about 1/{MEMORY_BYTES_PER_REQUEST_BYTE} of its \
             memory, {SEAL_LIMIT_HINT}): send fewer or smaller actions, or give the function more memory"
        )));
    }
    let mut items = Vec::new();
    for (i, r) in records.iter().enumerate() {
        let sk = match r.get(TX_SK) {
            Some(AttributeValue::S(sk)) => sk.clone(),
            _ => String::new(),
        };
        if sk != chunk_sk(i) {
            return Err(invalid(format!("chunk {i} of {id} is missing; chunks are numbered 0, 1, 2, ...")));
        }
        let body = match r.get(A_BODY) {
            Some(AttributeValue::S(b)) => b,
            _ => return Err(TxError::Internal(format!("chunk {i} of {id} has no body"))),
        };
        match serde_json::from_str::<Value>(body) {
            Ok(Value::Array(a)) => items.extend(a),
            _ => return Err(TxError::Internal(format!("chunk {i} of {id} is not a JSON array"))),
        }
    }
    if records.is_empty() {
        return Err(invalid(format!("{id} has no actions: append at least one chunk before sealing")));
    }
    if let Some(want) = chunks.filter(|w| *w != records.len()) {
        return Err(invalid(format!("{id} has {} chunks, not the {want} the caller appended", records.len())));
    }
    let mut body = envelope;
    body.insert("TransactItems".into(), Value::Array(items));
    begin::begin_as(store, (&Value::Object(body)).into(), None, Some(id), false, false).await
}

/// The staged request's other fields; an error when `id` was never created.
async fn staged(store: &Store, m: &Meter, id: &str) -> Result<Map<String, Value>, TxError> {
    let rec =
        store.get(m, &store.cfg.tx_table, key(id, SK_STAGE)).await?.ok_or_else(|| TxError::NotFound(id.to_string()))?;
    match rec.get(A_BODY) {
        Some(AttributeValue::S(b)) => match serde_json::from_str(b) {
            Ok(Value::Object(o)) => Ok(o),
            _ => Err(TxError::Internal(format!("staged request {id} is not a JSON object"))),
        },
        _ => Err(TxError::Internal(format!("staged request {id} has no body"))),
    }
}
