//! The transactions table: the header record, the plan, request pages, item images and token records.
//!
//! The header is the single source of truth about a transaction: its state (`PENDING` -> `COMMITTED` |
//! `ROLLED_BACK`), a version bumped by every write (what waiters watch to tell a live transaction from a dead one),
//! one progress watermark per phase, the reasons of a rollback, and the usage of every phase run. Every header write
//! is conditional on the state the writer expects, which is what makes running a phase late or twice harmless.

use std::collections::HashMap;
use std::time::{SystemTime, UNIX_EPOCH};

use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::{AttributeValue, PutRequest, WriteRequest};
use serde::{Deserialize, Serialize};

use crate::constants::*;
use crate::error::{Cancellation, CancellationReason, TxError};
use crate::plan::{self, Plan};
use crate::request::{Action, Parent};
use crate::store::{Meter, Store, Usage, Written};
use crate::value::Item;

pub fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum TxState {
    Pending,
    Committed,
    RolledBack,
}

impl TxState {
    pub fn as_str(self) -> &'static str {
        match self {
            TxState::Pending => "PENDING",
            TxState::Committed => "COMMITTED",
            TxState::RolledBack => "ROLLED_BACK",
        }
    }
    fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "PENDING" => TxState::Pending,
            "COMMITTED" => TxState::Committed,
            "ROLLED_BACK" => TxState::RolledBack,
            _ => return None,
        })
    }
}

/// Why a transaction rolled back: the failing actions (request order) and, for causes that are not one action's
/// (a lost parent lock, a deadline, another transaction's priority), a message.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Decision {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default)]
    pub failed: Vec<(usize, CancellationReason)>,
    /// The older transaction that rolled this one back because it needed an item this one held (wound-wait).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wounded_by: Option<String>,
}

impl Decision {
    pub fn because(message: impl Into<String>) -> Self {
        Self { message: Some(message.into()), ..Self::default() }
    }
    /// DynamoDB's shape: one reason per action, in request order.
    pub fn cancellation(&self, tx_id: &str, actions: usize) -> Cancellation {
        let mut reasons = vec![CancellationReason::none(); actions];
        for (i, r) in &self.failed {
            if let Some(slot) = reasons.get_mut(*i) {
                *slot = r.clone();
            }
        }
        let mut c = Cancellation::new(tx_id, reasons);
        if let Some(m) = &self.message {
            c.message = format!("{}: {m}", c.message);
        }
        c
    }
}

/// The header record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Header {
    pub id: String,
    pub state: TxState,
    pub version: u64,
    pub created_at: u64,
    pub updated_at: u64,
    pub deadline: u64,
    pub finished_at: Option<u64>,
    pub actions: usize,
    pub batches: usize,
    pub pages: usize,
    pub parent: Option<Parent>,
    pub client_request_token: Option<String>,
    pub lock_wait_seconds: Option<u64>,
    /// Its ticket in the parent's FIFO queue, once taken.
    #[serde(default)]
    pub parent_ticket: Option<u64>,
    pub lock_started: usize,
    pub locked: usize,
    pub saved: usize,
    pub applied: usize,
    pub completed: usize,
    pub restored: usize,
    pub decision: Option<Decision>,
    pub execution_arn: Option<String>,
    pub usage: Usage,
    pub body_hash: String,
}

impl Header {
    pub fn finished(&self) -> bool {
        self.finished_at.is_some()
    }
    pub fn cancellation(&self) -> Option<Cancellation> {
        (self.state == TxState::RolledBack)
            .then(|| self.decision.clone().unwrap_or_default().cancellation(&self.id, self.actions))
    }

    pub(crate) fn from_item(item: &Item) -> Result<Self, TxError> {
        let s = |k: &str| match item.get(k) {
            Some(AttributeValue::S(s)) => Some(s.clone()),
            _ => None,
        };
        let n = |k: &str| match item.get(k) {
            Some(AttributeValue::N(n)) => n.parse::<f64>().ok(),
            _ => None,
        };
        let u = |k: &str| n(k).map(|x| x as u64);
        let bad = |what: &str| TxError::Internal(format!("transaction header has no valid {what}"));
        let id = s(TX_PK).ok_or_else(|| bad(TX_PK))?;
        Ok(Header {
            state: s(H_STATE).as_deref().and_then(TxState::parse).ok_or_else(|| bad(H_STATE))?,
            version: u(H_VERSION).unwrap_or(0),
            created_at: u(H_CREATED_AT).unwrap_or(0),
            updated_at: u(H_UPDATED_AT).unwrap_or(0),
            deadline: u(H_DEADLINE).unwrap_or(u64::MAX),
            finished_at: u(H_FINISHED_AT),
            actions: u(H_ACTIONS).ok_or_else(|| bad(H_ACTIONS))? as usize,
            batches: u(H_BATCHES).ok_or_else(|| bad(H_BATCHES))? as usize,
            pages: u(H_PAGES).unwrap_or(0) as usize,
            parent: s(H_PARENT).map(|p| serde_json::from_str(&p)).transpose().map_err(|_| bad(H_PARENT))?,
            client_request_token: s(H_TOKEN),
            lock_wait_seconds: u(H_LOCK_WAIT),
            parent_ticket: u(H_PARENT_TICKET),
            lock_started: u(H_LOCK_STARTED).unwrap_or(0) as usize,
            locked: u(H_LOCKED).unwrap_or(0) as usize,
            saved: u(H_SAVED).unwrap_or(0) as usize,
            applied: u(H_APPLIED).unwrap_or(0) as usize,
            completed: u(H_COMPLETED).unwrap_or(0) as usize,
            restored: u(H_RESTORED).unwrap_or(0) as usize,
            decision: s(H_REASONS).map(|r| serde_json::from_str(&r)).transpose().map_err(|_| bad(H_REASONS))?,
            execution_arn: s(H_EXECUTION),
            usage: Usage {
                calls: u(H_CALLS).unwrap_or(0),
                writes: u(H_WRITES).unwrap_or(0),
                read_units: n(H_READ_UNITS).unwrap_or(0.0),
                write_units: n(H_WRITE_UNITS).unwrap_or(0.0),
            },
            body_hash: s(H_BODY_HASH).unwrap_or_default(),
            id,
        })
    }
}

/// Header: longest wait for another transaction's lock, in seconds (absent: until the deadline).
pub const H_LOCK_WAIT: &str = "lockWaitSeconds";
/// Header: write requests made, summed over phase runs.
pub const H_WRITES: &str = "ddbWrites";

pub fn s(v: impl Into<String>) -> AttributeValue {
    AttributeValue::S(v.into())
}
pub fn n(v: impl ToString) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

pub fn header_key(tx_id: &str) -> Item {
    HashMap::from([(TX_PK.to_string(), s(tx_id)), (TX_SK.to_string(), s(SK_HEADER))])
}
fn record_key(tx_id: &str, sk: String) -> Item {
    HashMap::from([(TX_PK.to_string(), s(tx_id)), (TX_SK.to_string(), s(sk))])
}
pub fn image_sk(pos: usize) -> String {
    format!("{SK_IMAGE_PREFIX}{pos:08}")
}
fn page_sk(p: usize) -> String {
    format!("{SK_PAGE_PREFIX}{p:06}")
}

/// Reads the header (strongly consistent).
pub async fn read_header(store: &Store, m: &Meter, tx_id: &str) -> Result<Header, TxError> {
    match store.get(m, &store.cfg.tx_table, header_key(tx_id)).await? {
        Some(item) => Header::from_item(&item),
        None => Err(TxError::NotFound(tx_id.to_string())),
    }
}

/// A header write: `set` assignments (attribute name -> value), applied only while the header is in `state` and,
/// when `watermark` is given, only while that watermark is below the new value. Bumps the version and adds `usage`.
/// Returns false when the condition did not hold (another coordinator got there first, or the state moved on).
pub async fn update_header(
    store: &Store,
    m: &Meter,
    tx_id: &str,
    state: TxState,
    set: &[(&str, AttributeValue)],
    watermark: Option<(&str, usize)>,
    usage: &Usage,
) -> Result<bool, TxError> {
    let mut expr = String::from("SET #ver = #ver + :one, #upd = :now");
    let mut req = store
        .client
        .update_item()
        .table_name(&store.cfg.tx_table)
        .set_key(Some(header_key(tx_id)))
        .expression_attribute_names("#ver", H_VERSION)
        .expression_attribute_names("#upd", H_UPDATED_AT)
        .expression_attribute_names("#st", H_STATE)
        .expression_attribute_values(":one", n(1))
        .expression_attribute_values(":now", n(now_ms()))
        .expression_attribute_values(":st", s(state.as_str()));
    for (i, (k, v)) in set.iter().enumerate() {
        expr.push_str(&format!(", #s{i} = :s{i}"));
        req = req.expression_attribute_names(format!("#s{i}"), *k).expression_attribute_values(format!(":s{i}"), v.clone());
    }
    let mut cond = String::from("#st = :st");
    if let Some((wm, v)) = watermark {
        expr.push_str(", #wm = :wm");
        cond.push_str(" AND (attribute_not_exists(#wm) OR #wm < :wm)");
        req = req.expression_attribute_names("#wm", wm).expression_attribute_values(":wm", n(v));
    }
    expr.push_str(" ADD #calls :calls, #writes :writes, #ru :ru, #wu :wu");
    let req = req
        .update_expression(expr)
        .condition_expression(cond)
        .expression_attribute_names("#calls", H_CALLS)
        .expression_attribute_names("#writes", H_WRITES)
        .expression_attribute_names("#ru", H_READ_UNITS)
        .expression_attribute_names("#wu", H_WRITE_UNITS)
        .expression_attribute_values(":calls", n(usage.calls))
        .expression_attribute_values(":writes", n(usage.writes))
        .expression_attribute_values(":ru", n(usage.read_units))
        .expression_attribute_values(":wu", n(usage.write_units));
    Ok(matches!(store.update(m, req).await?, Written::Done(_)))
}

/// The decide step: moves a pending transaction to ROLLED_BACK and records why. Returns the state it is in after.
pub async fn decide_rollback(store: &Store, m: &Meter, tx_id: &str, decision: &Decision) -> Result<TxState, TxError> {
    let reasons = serde_json::to_string(decision).expect("decisions serialise");
    let ok = update_header(
        store,
        m,
        tx_id,
        TxState::Pending,
        &[(H_STATE, s(TxState::RolledBack.as_str())), (H_REASONS, s(reasons))],
        None,
        &Usage::default(),
    )
    .await?;
    if ok {
        return Ok(TxState::RolledBack);
    }
    Ok(read_header(store, m, tx_id).await?.state)
}

fn expires_at(store: &Store, from_ms: u64) -> AttributeValue {
    n(from_ms / 1000 + store.cfg.retention.as_secs())
}

/// Writes the plan, then the request pages. Both are plain puts: writing them twice writes the same bytes.
pub async fn write_plan(store: &Store, m: &Meter, tx_id: &str, plan: &Plan, stream: &[u8], expires_ms: u64) -> Result<(), TxError> {
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
    let reqs = reqs
        .into_iter()
        .map(|item| WriteRequest::builder().put_request(PutRequest::builder().set_item(Some(item)).build().expect("item set")).build())
        .collect();
    store.batch_write(m, &store.cfg.tx_table, reqs).await
}

pub async fn read_plan(store: &Store, m: &Meter, tx_id: &str) -> Result<Plan, TxError> {
    let item = store
        .get(m, &store.cfg.tx_table, record_key(tx_id, SK_PLAN.into()))
        .await?
        .ok_or_else(|| TxError::Internal(format!("transaction {tx_id} has no plan record")))?;
    match item.get(R_BODY) {
        Some(AttributeValue::S(b)) => serde_json::from_str(b).map_err(|e| TxError::Internal(format!("plan record: {e}"))),
        _ => Err(TxError::Internal("plan record has no body".into())),
    }
}

/// The actions of batch `b`, in lock order, each with its lock-order position.
pub async fn read_batch(store: &Store, m: &Meter, tx_id: &str, plan: &Plan, b: usize) -> Result<Vec<(usize, Action)>, TxError> {
    let pages = plan.pages(b);
    let keys: Vec<Item> = pages.clone().map(|p| record_key(tx_id, page_sk(p))).collect();
    let mut got: HashMap<String, Vec<u8>> = HashMap::new();
    for item in store.batch_get(m, &store.cfg.tx_table, keys).await? {
        if let (Some(AttributeValue::S(sk)), Some(AttributeValue::B(body))) = (item.get(TX_SK), item.get(R_BODY)) {
            got.insert(sk.clone(), body.as_ref().to_vec());
        }
    }
    let mut bytes = Vec::new();
    for p in pages.clone() {
        bytes.extend(got.remove(&page_sk(p)).ok_or_else(|| TxError::Internal(format!("request page {p} of {tx_id} is missing")))?);
    }
    let actions = plan::decode_batch(plan, b, pages.start, &bytes).map_err(TxError::Internal)?;
    Ok(plan.actions(b).zip(actions).collect())
}

/// An item image: the item before the transaction changed it, or `None` for an item the transaction created.
#[derive(Debug, Clone, PartialEq)]
pub enum Image {
    Existed(Item),
    Transient,
}

pub fn image_request(store: &Store, tx_id: &str, pos: usize, image: &Image, expires_ms: u64) -> WriteRequest {
    let mut rec = record_key(tx_id, image_sk(pos));
    match image {
        Image::Existed(item) => rec.insert(I_ITEM.into(), AttributeValue::M(item.clone())),
        Image::Transient => rec.insert(I_TRANSIENT.into(), AttributeValue::Bool(true)),
    };
    rec.insert(ATTR_EXPIRES_AT.into(), expires_at(store, expires_ms));
    WriteRequest::builder().put_request(PutRequest::builder().set_item(Some(rec)).build().expect("item set")).build()
}

/// The saved images of the given lock-order positions (absent when none was saved).
pub async fn read_images(store: &Store, m: &Meter, tx_id: &str, positions: &[usize]) -> Result<HashMap<usize, Image>, TxError> {
    let keys: Vec<Item> = positions.iter().map(|p| record_key(tx_id, image_sk(*p))).collect();
    let mut out = HashMap::new();
    for rec in store.batch_get(m, &store.cfg.tx_table, keys).await? {
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
pub async fn read_image(store: &Store, m: &Meter, tx_id: &str, pos: usize) -> Result<Option<Image>, TxError> {
    Ok(read_images(store, m, tx_id, &[pos]).await?.remove(&pos))
}

pub fn token_key(token: &str) -> Item {
    HashMap::from([(TX_PK.to_string(), s(format!("{TOKEN_PK_PREFIX}{token}"))), (TX_SK.to_string(), s(SK_TOKEN))])
}

/// Strips dynamo-saga's reserved attributes from an item.
pub fn strip_reserved(mut item: Item) -> Item {
    item.retain(|k, _| !k.starts_with(RESERVED_PREFIX));
    item
}

/// The parent lock as a parent item carries it (seeds 001 and 003).
#[derive(Debug, Clone, PartialEq)]
pub struct ParentLockAttrs {
    /// `lockToken`: the holder's transaction id.
    pub holder: String,
    /// `lockTokenAt`, ms since the epoch on the holder's clock.
    pub locked_at: Option<u64>,
    /// `recordVersionNumber`.
    pub record_version_number: Option<u64>,
    /// `leaseDuration`, seconds.
    pub lease_seconds: Option<u64>,
}

impl ParentLockAttrs {
    /// The lock on `item`, when one is held.
    pub fn of(item: &Item) -> Option<Self> {
        let Some(AttributeValue::S(holder)) = item.get(PARENT_LOCK_TOKEN) else { return None };
        let num = |k: &str| match item.get(k) {
            Some(AttributeValue::N(v)) => v.parse().ok(),
            _ => None,
        };
        Some(Self {
            holder: holder.clone(),
            locked_at: num(PARENT_LOCKED_AT),
            record_version_number: num(PARENT_RVN),
            lease_seconds: num(PARENT_LEASE),
        })
    }
}

pub fn lock_holder(item: &Item) -> Option<&str> {
    match item.get(ATTR_LOCK) {
        Some(AttributeValue::S(t)) => Some(t),
        _ => None,
    }
}

pub fn flag(item: &Item, attr: &str) -> bool {
    matches!(item.get(attr), Some(AttributeValue::Bool(true)))
}
