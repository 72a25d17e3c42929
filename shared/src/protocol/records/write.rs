//! The header's writes: every one conditional on the state its writer expects.

use aws_sdk_dynamodb::types::AttributeValue;

use super::{header_key, Attempt, Decision, Expect, Header, Refusal, TxState, WaitFor};
use crate::constants::{
    H_APPLIED, H_ATTEMPT, H_ATTEMPTS, H_ATTEMPT_STARTED, H_CALLS, H_DECIDED_AT, H_FINISHED_AT, H_LATE_WRITES, H_LOCKED,
    H_LOCK_IDS, H_LOCK_OPEN, H_LOCK_STARTED, H_PARENT_TICKET, H_READ_UNITS, H_REASONS, H_REFUSED, H_RESTORED, H_RETRY,
    H_SAVED, H_STATE, H_UPDATED_AT, H_VERSION, H_WAITED, H_WAIT_FOR, H_WRITES, H_WRITE_UNITS, TX_PK,
    UPDATED_AT_EVERY_MS,
};
use crate::dynamo::store::{Meter, Store, Usage, Written};
use crate::error::TxError;
use crate::model::value::{n, now_ms, s, Item};

/// Reads the header (strongly consistent).
pub async fn read_header(store: &Store, m: &Meter, tx_id: &str) -> Result<Header, TxError> {
    match store.get(m, &store.cfg.tx_table, header_key(tx_id)).await? {
        Some(item) => Header::from_item(&item),
        None => Err(TxError::NotFound(tx_id.to_string())),
    }
}

/// A header write: `set` assignments (attribute name -> value), applied only while the header is as `expect` says
/// and, when `watermark` is given, only while that watermark is below the new value. Bumps the version and adds
/// `usage`. Returns false when the condition did not hold (another coordinator got there first, the state moved on,
/// or another attempt started).
pub async fn update_header(
    store: &Store,
    m: &Meter,
    tx_id: &str,
    expect: impl Into<Expect>,
    set: &[(&str, AttributeValue)],
    watermark: Option<(&str, usize)>,
    usage: &Usage,
) -> Result<bool, TxError> {
    let w = HeaderWrite { set: set.to_vec(), watermark, ..HeaderWrite::default() };
    write_header(store, m, tx_id, expect.into(), w, usage).await
}

/// The parts of a header write beyond the version, time and usage every one of them updates.
#[derive(Debug, Default)]
pub struct HeaderWrite<'a> {
    pub set: Vec<(&'a str, AttributeValue)>,
    pub remove: Vec<&'a str>,
    /// Numbers added to attributes.
    pub add: Vec<(&'a str, AttributeValue)>,
    pub watermark: Option<(&'a str, usize)>,
    /// Attributes that must exist (true) or must not (false).
    pub require: Vec<(&'a str, bool)>,
    /// Attributes that must hold a value, or (`None`) be absent.
    pub equal: Vec<(&'a str, Option<AttributeValue>)>,
}

/// One conditional header write (see [`update_header`]). It always moves the version, which waiters watch. It moves
/// `updatedAt`, the sort key of the open-transactions index the sweeper reads, only when `expect.touched_at` is
/// absent or older than a third of a lease or [`UPDATED_AT_EVERY_MS`], whichever is less: moving an index key costs two
/// more write units (the index entry's delete and put), and the sweeper only needs to know the header moved within its
/// `stale_after`.
pub async fn write_header(
    store: &Store,
    m: &Meter,
    tx_id: &str,
    expect: Expect,
    w: HeaderWrite<'_>,
    usage: &Usage,
) -> Result<bool, TxError> {
    let now = now_ms();
    let every = (store.cfg.lease.as_millis() as u64 / 3).min(UPDATED_AT_EVERY_MS);
    let touch = expect.touched_at.is_none_or(|t| now.saturating_sub(t) >= every);
    let mut expr = String::from("SET #ver = #ver + :one");
    let mut req = store
        .client
        .update_item()
        .table_name(&store.cfg.tx_table)
        .set_key(Some(header_key(tx_id)))
        .expression_attribute_names("#ver", H_VERSION)
        .expression_attribute_names("#st", H_STATE)
        .expression_attribute_values(":one", n(1))
        .expression_attribute_values(":st", s(expect.state.as_str()));
    if touch {
        expr.push_str(", #upd = :now");
        req = req.expression_attribute_names("#upd", H_UPDATED_AT).expression_attribute_values(":now", n(now));
    }
    for (i, (k, v)) in w.set.iter().enumerate() {
        expr.push_str(&format!(", #s{i} = :s{i}"));
        req = req
            .expression_attribute_names(format!("#s{i}"), *k)
            .expression_attribute_values(format!(":s{i}"), v.clone());
    }
    let mut cond = String::from("#st = :st");
    match expect.attempt {
        None => {}
        Some(0) => {
            cond.push_str(" AND attribute_not_exists(#att)");
            req = req.expression_attribute_names("#att", H_ATTEMPT);
        }
        Some(a) => {
            cond.push_str(" AND #att = :att");
            req = req.expression_attribute_names("#att", H_ATTEMPT).expression_attribute_values(":att", n(a));
        }
    }
    if let Some((wm, v)) = w.watermark {
        expr.push_str(", #wm = :wm");
        cond.push_str(" AND (attribute_not_exists(#wm) OR #wm < :wm)");
        req = req.expression_attribute_names("#wm", wm).expression_attribute_values(":wm", n(v));
    }
    for (i, (k, exists)) in w.require.iter().enumerate() {
        cond.push_str(&format!(" AND {}(#q{i})", if *exists { "attribute_exists" } else { "attribute_not_exists" }));
        req = req.expression_attribute_names(format!("#q{i}"), *k);
    }
    for (i, (k, v)) in w.equal.iter().enumerate() {
        req = req.expression_attribute_names(format!("#e{i}"), *k);
        match v {
            Some(v) => {
                cond.push_str(&format!(" AND #e{i} = :e{i}"));
                req = req.expression_attribute_values(format!(":e{i}"), v.clone());
            }
            None => cond.push_str(&format!(" AND attribute_not_exists(#e{i})")),
        }
    }
    if !w.remove.is_empty() {
        let names: Vec<String> = (0..w.remove.len()).map(|i| format!("#r{i}")).collect();
        expr.push_str(&format!(" REMOVE {}", names.join(", ")));
        for (i, k) in w.remove.iter().enumerate() {
            req = req.expression_attribute_names(format!("#r{i}"), *k);
        }
    }
    expr.push_str(" ADD #calls :calls, #writes :writes, #ru :ru, #wu :wu");
    for (i, (k, v)) in w.add.iter().enumerate() {
        expr.push_str(&format!(", #a{i} :a{i}"));
        req = req
            .expression_attribute_names(format!("#a{i}"), *k)
            .expression_attribute_values(format!(":a{i}"), v.clone());
    }
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
        .expression_attribute_values(":wu", n(usage.write_units))
        .return_values(aws_sdk_dynamodb::types::ReturnValue::AllNew);
    match store.update(m, req).await? {
        Written::Done(header) => {
            if let Some(header) = header {
                store.caches.keep_header(tx_id, header);
            }
            Ok(true)
        }
        Written::ConditionFailed(_) => Ok(false),
    }
}

/// Adds to the time attempt `h` has waited for other transactions' locks, whatever state it is in now (a wait can
/// end with the attempt rolled back).
pub async fn add_waited(store: &Store, m: &Meter, h: &Header, ms: u64) -> Result<(), TxError> {
    let (cond, attempt) = match h.attempt {
        0 => ("attribute_exists(#id) AND attribute_not_exists(#att)", None),
        a => ("attribute_exists(#id) AND #att = :att", Some(n(a))),
    };
    let req = store
        .client
        .update_item()
        .table_name(&store.cfg.tx_table)
        .set_key(Some(header_key(&h.id)))
        .update_expression("ADD #w :w")
        .condition_expression(cond)
        .expression_attribute_names("#id", TX_PK)
        .expression_attribute_names("#att", H_ATTEMPT)
        .expression_attribute_names("#w", H_WAITED)
        .expression_attribute_values(":w", n(ms));
    let req = match attempt {
        Some(a) => req.expression_attribute_values(":att", a),
        None => req,
    };
    store.update(m, req).await.map(|_| ())
}

/// The decide step: moves a pending transaction to ROLLED_BACK and records why; with `attempt`, only while that
/// attempt is under way. Returns the state it is in after.
pub async fn decide_rollback(
    store: &Store,
    m: &Meter,
    tx_id: &str,
    attempt: Option<u32>,
    decision: &Decision,
) -> Result<TxState, TxError> {
    let w = rollback_write(decision);
    if write_header(
        store,
        m,
        tx_id,
        Expect { state: TxState::Pending, attempt, touched_at: None },
        w,
        &Usage::default(),
    )
    .await?
    {
        return Ok(TxState::RolledBack);
    }
    Ok(read_header(store, m, tx_id).await?.state)
}

/// The header write that decides a rollback for `decision`.
fn rollback_write(decision: &Decision) -> HeaderWrite<'static> {
    let reasons = serde_json::to_string(decision).expect("decisions serialise");
    let mut w = HeaderWrite {
        set: vec![(H_STATE, s(TxState::RolledBack.as_str())), (H_REASONS, s(reasons)), (H_DECIDED_AT, n(now_ms()))],
        ..HeaderWrite::default()
    };
    if decision.retries() {
        w.set.push((H_RETRY, AttributeValue::Bool(true)));
    }
    w
}

/// [`decide_rollback`] by the lock pass `pass` of `h`'s attempt, which has every write's answer (but those `unknown`
/// says had none): the pass is closed (`lockOpen` removed) in the same write, so that a transaction its own driver
/// cancels is not visited again for late writes. When another pass holds the lock phase, decided as anyone decides.
pub async fn decide_rollback_after_pass(
    store: &Store,
    m: &Meter,
    h: &Header,
    decision: &Decision,
    pass: Option<u64>,
    unknown: bool,
) -> Result<TxState, TxError> {
    if let Some(p) = pass {
        let mut w = rollback_write(decision);
        w.remove.push(H_LOCK_OPEN);
        w.equal.push((H_LOCK_OPEN, Some(n(p))));
        if unknown {
            w.set.push((H_LATE_WRITES, AttributeValue::Bool(true)));
        }
        let expect = Expect { state: TxState::Pending, attempt: Some(h.attempt), touched_at: None };
        if write_header(store, m, &h.id, expect, w, &Usage::default()).await? {
            return Ok(TxState::RolledBack);
        }
    }
    decide_rollback(store, m, &h.id, Some(h.attempt), decision).await
}

/// Gives up the retry a rolled-back attempt was waiting for (`why`: the deadline passed, or nobody drives it): its
/// reason becomes the transaction's, and the transaction ends as it stands. False when that was not to be done any
/// more (another attempt started, or it was given up already).
pub async fn give_up(store: &Store, m: &Meter, h: &Header, why: &str) -> Result<bool, TxError> {
    let Some(d) = &h.decision else { return Ok(false) };
    let reasons = serde_json::to_string(&d.given_up(why)).expect("decisions serialise");
    let w = HeaderWrite {
        set: vec![(H_REASONS, s(reasons))],
        remove: vec![H_RETRY],
        require: vec![(H_RETRY, true)],
        ..HeaderWrite::default()
    };
    write_header(
        store,
        m,
        &h.id,
        Expect { state: TxState::RolledBack, attempt: Some(h.attempt), touched_at: None },
        w,
        &Usage::default(),
    )
    .await
}

/// Most attempts the header's history keeps.
const ATTEMPTS_KEPT: usize = 100;

/// Starts the next attempt of `h`, rolled back and released, whose retry is pending: PENDING again with every
/// watermark cleared and the last attempt in the history; the new attempt first waits for the transaction that
/// rolled the last one back. False when another coordinator did it first, or the retry was given up.
pub async fn restart(store: &Store, m: &Meter, h: &Header) -> Result<bool, TxError> {
    let now = now_ms();
    let d = h.decision.clone().unwrap_or_default();
    let retry = d.retry.as_ref();
    let mut attempts = h.attempts.clone();
    attempts.push(Attempt {
        attempt: h.attempt + 1,
        started_at_ms: h.attempt_started_at,
        ended_at_ms: h.decided_at.unwrap_or(now),
        waited_ms: h.waited_ms,
        rolled_back_by: d.wounded_by.clone(),
        item: retry.map(|r| r.item.clone()),
        reason: retry.and_then(|r| r.reason.message.clone()).or(d.message.clone()).unwrap_or_default(),
    });
    if attempts.len() > ATTEMPTS_KEPT {
        attempts.drain(..attempts.len() - ATTEMPTS_KEPT);
    }
    let mut w = HeaderWrite {
        set: vec![
            (H_STATE, s(TxState::Pending.as_str())),
            (H_ATTEMPT, n(h.attempt + 1)),
            (H_ATTEMPT_STARTED, n(now)),
            (H_ATTEMPTS, s(serde_json::to_string(&attempts).expect("attempts serialise"))),
        ],
        remove: vec![
            H_RETRY,
            H_REASONS,
            H_DECIDED_AT,
            H_LOCK_STARTED,
            H_LOCKED,
            H_SAVED,
            H_APPLIED,
            H_RESTORED,
            H_PARENT_TICKET,
            H_WAITED,
            H_WAIT_FOR,
            H_LOCK_IDS,
        ],
        require: vec![(H_RETRY, true), (H_FINISHED_AT, false)],
        ..HeaderWrite::default()
    };
    if h.lock_open.is_some() {
        // A pass of the attempt rolled back may have writes in flight: the transaction is visited once it ends.
        w.remove.push(H_LOCK_OPEN);
        w.set.push((H_LATE_WRITES, AttributeValue::Bool(true)));
    }
    if let (Some(by), Some(r)) = (d.wounded_by.as_ref(), retry.filter(|r| r.wait)) {
        let wait = WaitFor { holder: by.clone(), action: r.action, item: r.item.clone() };
        w.remove.retain(|k| *k != H_WAIT_FOR);
        w.set.push((H_WAIT_FOR, s(serde_json::to_string(&wait).expect("serialises"))));
    }
    write_header(
        store,
        m,
        &h.id,
        Expect { state: TxState::RolledBack, attempt: Some(h.attempt), touched_at: None },
        w,
        &Usage::default(),
    )
    .await
}

/// Records the usage so far on `header`, counting the write that is to carry it.
pub(crate) fn stamp_usage(header: &mut Item, m: &Meter) {
    let usage = m.usage();
    header.insert(H_CALLS.into(), n(usage.calls + 1));
    header.insert(H_WRITES.into(), n(usage.writes + 1));
    header.insert(H_READ_UNITS.into(), n(usage.read_units));
    header.insert(H_WRITE_UNITS.into(), n(usage.write_units));
}

/// Writes a transaction's first header, with the usage so far; false when the transaction has one already.
pub(crate) async fn put_header(store: &Store, m: &Meter, mut header: Item) -> Result<bool, TxError> {
    stamp_usage(&mut header, m);
    let id = match header.get(TX_PK) {
        Some(AttributeValue::S(id)) => id.clone(),
        _ => return Err(TxError::Internal("a header without an id".into())),
    };
    match store.put_record_if_absent(m, header.clone(), None).await? {
        Written::Done(_) => {
            store.caches.keep_header(&id, header);
            Ok(true)
        }
        Written::ConditionFailed(_) => Ok(false),
    }
}

/// Forgets the header of `tx_id` this process last wrote ([`last_header`]): the next step starts from the header as
/// it is.
pub fn forget_written(store: &Store, tx_id: &str) {
    store.caches.take_header(tx_id);
}

/// The header of `tx_id` as this process's last write of it left it, when the process has not used it since;
/// otherwise the header as it is (strongly consistent). What a driver starts its next step from: every header write
/// a phase makes is conditional on the state and attempt it started from, so a header that has moved on since is met
/// as a failed condition, and the phase reads it again.
pub async fn last_header(store: &Store, m: &Meter, tx_id: &str) -> Result<Header, TxError> {
    match store.caches.take_header(tx_id) {
        Some(item) => Header::from_item(&item),
        None => read_header(store, m, tx_id).await,
    }
}

/// Records on the committed header that DynamoDB refused to apply `action` of `batch`, for `status` and the runbook.
pub async fn note_refusal(
    store: &Store,
    m: &Meter,
    h: &Header,
    batch: usize,
    action: &str,
    message: &str,
) -> Result<(), TxError> {
    let r = Refusal { batch, action: action.to_string(), message: message.to_string(), at_ms: now_ms() };
    let r = serde_json::to_string(&r).expect("a refusal serialises");
    update_header(store, m, &h.id, TxState::Committed, &[(H_REFUSED, s(r))], None, &m.usage()).await.map(|_| ())
}
