//! The stored request in the transactions table: the plan (batch boundaries), the request pages (each batch's
//! actions, deflated), and protocol 1's item images. Written once by begin (images by save), then only read: the
//! redo log every phase works from.

use std::collections::HashMap;
use std::sync::Arc;

use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::{AttributeValue, PutRequest, WriteRequest};

use crate::constants::{
    ATTR_EXPIRES_AT, I_ATTEMPT, I_ITEM, I_TRANSIENT, R_BODY, SK_IMAGE_PREFIX, SK_PAGE_PREFIX, SK_PLAN, TX_PK, TX_SK,
};
use crate::dynamo::store::{Meter, Store};
use crate::error::TxError;
use crate::model::plan::{self, Plan};
use crate::model::request::Action;
use crate::model::value::{key_order, n, s, Item};
use crate::protocol::records::record_key;

pub fn image_sk(pos: usize) -> String {
    format!("{SK_IMAGE_PREFIX}{pos:08}")
}
fn page_sk(p: usize) -> String {
    format!("{SK_PAGE_PREFIX}{p:06}")
}

fn expires_at(store: &Store, from_ms: u64) -> AttributeValue {
    n(from_ms / 1000 + store.cfg.retention.as_secs())
}

/// Writes the plan, then the request pages. Both are plain puts: writing them twice writes the same bytes.
pub async fn write_plan(
    store: &Store,
    m: &Meter,
    tx_id: &str,
    plan: &Plan,
    stream: &[u8],
    expires_ms: u64,
) -> Result<(), TxError> {
    let exp = expires_at(store, expires_ms);
    let mut reqs = Vec::with_capacity(plan.page_count() + 1);
    let mut plan_item = record_key(tx_id, SK_PLAN.into());
    plan_item.insert(R_BODY.into(), s(serde_json::to_string(plan).expect("plans serialise")));
    plan_item.insert(ATTR_EXPIRES_AT.into(), exp.clone());
    reqs.push(plan_item);
    for (p, chunk) in stream.chunks(plan.page_bytes as usize).enumerate() {
        let mut page = record_key(tx_id, page_sk(p));
        page.insert(R_BODY.into(), AttributeValue::B(Blob::new(chunk.to_vec())));
        page.insert(ATTR_EXPIRES_AT.into(), exp.clone());
        reqs.push(page);
    }
    let pages: Vec<Arc<Vec<u8>>> = stream.chunks(plan.page_bytes as usize).map(|c| Arc::new(c.to_vec())).collect();
    let reqs = reqs
        .into_iter()
        .map(|item| {
            WriteRequest::builder()
                .put_request(PutRequest::builder().set_item(Some(item)).build().expect("item set"))
                .build()
        })
        .collect();
    store.batch_write(m, &store.cfg.tx_table, reqs).await?;
    store.caches.keep_plan(tx_id, Arc::new(plan.clone()));
    for (p, bytes) in pages.into_iter().enumerate() {
        store.caches.keep_page(tx_id, p, bytes);
    }
    Ok(())
}

/// The plan, which never changes once written: the one this process wrote or read before, or an eventually
/// consistent read (see [`Store::get_written`]).
pub async fn read_plan(store: &Store, m: &Meter, tx_id: &str) -> Result<Arc<Plan>, TxError> {
    if let Some(plan) = store.caches.known_plan(tx_id) {
        return Ok(plan);
    }
    let item = store
        .get_written(m, &store.cfg.tx_table, record_key(tx_id, SK_PLAN.into()))
        .await?
        .ok_or_else(|| TxError::Internal(format!("transaction {tx_id} has no plan record")))?;
    let plan: Plan = match item.get(R_BODY) {
        Some(AttributeValue::S(b)) => {
            serde_json::from_str(b).map_err(|e| TxError::Internal(format!("plan record: {e}")))?
        }
        _ => return Err(TxError::Internal("plan record has no body".into())),
    };
    let plan = Arc::new(plan);
    store.caches.keep_plan(tx_id, plan.clone());
    Ok(plan)
}

/// `part` of the actions of every batch of `run`, read side by side: each with its batch and its lock-order position.
pub async fn read_batches(
    store: &Store,
    m: &Meter,
    tx_id: &str,
    plan: &Plan,
    run: std::ops::Range<usize>,
    part: plan::Part,
) -> Result<Vec<(usize, usize, Action)>, TxError> {
    let reads = run.map(|b| async move {
        let actions = read_batch(store, m, tx_id, plan, b, part).await?;
        Ok::<_, TxError>(actions.into_iter().map(move |(pos, a)| (b, pos, a)))
    });
    let mut out = Vec::new();
    for batch in futures::future::join_all(reads).await {
        out.extend(batch?);
    }
    Ok(out)
}

/// `part` of the actions of batch `b` (see [`plan::Part`]), in lock order, each with its lock-order position.
pub async fn read_batch(
    store: &Store,
    m: &Meter,
    tx_id: &str,
    plan: &Plan,
    b: usize,
    part: plan::Part,
) -> Result<Vec<(usize, Action)>, TxError> {
    let pages = plan.pages_of(b, part);
    let mut got: HashMap<usize, Arc<Vec<u8>>> =
        pages.clone().filter_map(|p| Some((p, store.caches.known_page(tx_id, p)?))).collect();
    let keys: Vec<Item> =
        pages.clone().filter(|p| !got.contains_key(p)).map(|p| record_key(tx_id, page_sk(p))).collect();
    if !keys.is_empty() {
        // Pages never change once written: eventually consistent reads, at half the price (see Store::get_written).
        for item in store.batch_get_written(m, &store.cfg.tx_table, keys, &[TX_PK, TX_SK]).await? {
            if let (Some(AttributeValue::S(sk)), Some(AttributeValue::B(body))) = (item.get(TX_SK), item.get(R_BODY)) {
                if let Some(p) = sk.strip_prefix(SK_PAGE_PREFIX).and_then(|p| p.parse::<usize>().ok()) {
                    let body = Arc::new(body.as_ref().to_vec());
                    store.caches.keep_page(tx_id, p, body.clone());
                    got.insert(p, body);
                }
            }
        }
    }
    let mut bytes = Vec::new();
    for p in pages.clone() {
        bytes.extend(
            got.remove(&p).ok_or_else(|| TxError::Internal(format!("request page {p} of {tx_id} is missing")))?.iter(),
        );
    }
    let actions = plan::decode_batch(plan, b, part, pages.start, &bytes).map_err(TxError::Internal)?;
    Ok(plan.actions(b).zip(actions).collect())
}

/// An item image: the item before the transaction changed it, or `None` for an item the transaction created.
#[derive(Debug, Clone, PartialEq)]
pub enum Image {
    Existed(Item),
    Transient,
}

/// The image of lock-order position `pos`, saved by `attempt`.
pub fn image_request(
    store: &Store,
    tx_id: &str,
    attempt: u32,
    pos: usize,
    image: &Image,
    expires_ms: u64,
) -> WriteRequest {
    let mut rec = record_key(tx_id, image_sk(pos));
    match image {
        Image::Existed(item) => rec.insert(I_ITEM.into(), AttributeValue::M(item.clone())),
        Image::Transient => rec.insert(I_TRANSIENT.into(), AttributeValue::Bool(true)),
    };
    if attempt > 0 {
        rec.insert(I_ATTEMPT.into(), n(attempt));
    }
    rec.insert(ATTR_EXPIRES_AT.into(), expires_at(store, expires_ms));
    WriteRequest::builder().put_request(PutRequest::builder().set_item(Some(rec)).build().expect("item set")).build()
}

/// The images `attempt` saved of the given lock-order positions (absent when it saved none: an image an earlier
/// attempt saved shows the item before the transactions that changed it since, and is never restored).
pub async fn read_images(
    store: &Store,
    m: &Meter,
    tx_id: &str,
    attempt: u32,
    positions: &[usize],
) -> Result<HashMap<usize, Image>, TxError> {
    let keys: Vec<Item> = positions.iter().map(|p| record_key(tx_id, image_sk(*p))).collect();
    let mut out = HashMap::new();
    for rec in store.batch_get(m, &store.cfg.tx_table, keys).await? {
        let saved_by = match rec.get(I_ATTEMPT) {
            Some(AttributeValue::N(v)) => {
                v.parse::<u32>().map_err(|_| TxError::Internal(format!("image of {tx_id}: attempt {v}")))?
            }
            _ => 0,
        };
        if saved_by != attempt {
            continue;
        }
        let Some(AttributeValue::S(sk)) = rec.get(TX_SK) else { continue };
        let Some(pos) = sk.strip_prefix(SK_IMAGE_PREFIX).and_then(|p| p.parse::<usize>().ok()) else { continue };
        let img = match rec.get(I_ITEM) {
            Some(AttributeValue::M(item)) => Image::Existed(item.clone()),
            _ => Image::Transient,
        };
        out.insert(pos, img);
    }
    Ok(out)
}

/// One image, for committed reads.
pub async fn read_image(
    store: &Store,
    m: &Meter,
    tx_id: &str,
    attempt: u32,
    pos: usize,
) -> Result<Option<Image>, TxError> {
    Ok(read_images(store, m, tx_id, attempt, &[pos]).await?.remove(&pos))
}

/// The action (and its lock-order position) of transaction `tx_id` on `table`/`key`: a binary search over the
/// batches, which are in lock order, reading one batch's request pages per step.
pub async fn find_action(
    store: &Store,
    m: &Meter,
    tx_id: &str,
    table: &str,
    key: &Item,
) -> Result<Option<(usize, usize, Action)>, TxError> {
    let plan = read_plan(store, m, tx_id).await?;
    let names = store.schema(m, table).await?.key_names.clone();
    let target = key_order(table, key, &names);
    let order = |a: &Action| {
        let a = a.clone();
        async move {
            let names = store.schema(m, &a.table).await?.key_names.clone();
            Ok::<_, TxError>(key_order(&a.table, &a.key, &names))
        }
    };
    // The last batch whose first action does not sort after the key.
    let (mut lo, mut hi) = (0, plan.batch_count());
    while hi - lo > 1 {
        let mid = (lo + hi) / 2;
        let batch = read_batch(store, m, tx_id, &plan, mid, plan::Part::Heads).await?;
        let Some((_, first)) = batch.first() else { break };
        if order(first).await? <= target {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    for (pos, a) in read_batch(store, m, tx_id, &plan, lo, plan::Part::Whole).await? {
        if a.table == table && order(&a).await? == target {
            return Ok(Some((lo, pos, a)));
        }
    }
    Ok(None)
}
