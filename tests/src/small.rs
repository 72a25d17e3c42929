//! The small transaction the reads and snapshot suites stop between every two of its writes: an update, a delete, an
//! insert and a condition check on four items of table A, each item's value before and after it.

use dynamo_saga::records::{read_header, token_key, TxState};
use dynamo_saga::store::Meter;
use dynamo_saga::TxError;
use serde_json::{json, Value};

use crate::{nv, sv, Env};

/// Each item of the transaction: key, value before, value after (None: absent).
pub fn items(tag: &str) -> Vec<(String, Option<i64>, Option<i64>)> {
    vec![
        (format!("{tag}-upd"), Some(1), Some(9)),
        (format!("{tag}-del"), Some(1), None),
        (format!("{tag}-new"), None, Some(7)),
        (format!("{tag}-chk"), Some(1), Some(1)),
    ]
}

/// The transaction over [`items`] of `tag`, with `tag` as its `ClientRequestToken`.
pub fn request(env: &Env, tag: &str) -> Value {
    let key = |k: &str| json!({"pk": sv(&format!("{tag}-{k}"))});
    json!({"ClientRequestToken": tag, "TransactItems": [
        {"Update": {"TableName": env.a, "Key": key("upd"), "UpdateExpression": "SET v = :v", "ExpressionAttributeValues": {":v": nv(9)}}},
        {"Delete": {"TableName": env.a, "Key": key("del"), "ConditionExpression": "attribute_exists(pk)"}},
        {"Put": {"TableName": env.a, "Item": {"pk": sv(&format!("{tag}-new")), "v": nv(7)}, "ConditionExpression": "attribute_not_exists(pk)"}},
        {"ConditionCheck": {"TableName": env.a, "Key": key("chk"), "ConditionExpression": "v = :one", "ExpressionAttributeValues": {":one": nv(1)}}},
    ]})
}

/// The state of the transaction a `ClientRequestToken` started, if it got as far as its header.
pub async fn state_of(env: &Env, token: &str) -> Option<TxState> {
    let rec = env
        .client
        .get_item()
        .table_name(&env.tx_table)
        .set_key(Some(token_key(token)))
        .consistent_read(true)
        .send()
        .await
        .unwrap()
        .item?;
    let id = rec.get(dynamo_saga::constants::T_TX).and_then(|v| v.as_s().ok()).cloned()?;
    match read_header(&env.store, &Meter::default(), &id).await {
        Ok(h) => Some(h.state),
        Err(TxError::NotFound(_)) => None,
        Err(e) => panic!("{e}"),
    }
}
