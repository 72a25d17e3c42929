//! The transaction's header: its model and its writes, and the keys of the transactions table's records (the
//! stored request is [`crate::protocol::stored_request`]'s).
//!
//! The header is the single source of truth about a transaction: its state (`PENDING` -> `COMMITTED` |
//! `ROLLED_BACK`), a version bumped by every write (what waiters watch to tell a live transaction from a dead one),
//! one progress watermark per phase, the reasons of a rollback, and the usage of every phase run. Every header write
//! is conditional on the state the writer expects, which is what makes running a phase late or twice harmless.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use serde::{Deserialize, Serialize};

use crate::constants::{
    H_ABSENT_TABLES, H_ACTIONS, H_APPLIED, H_ATTEMPT, H_ATTEMPTS, H_ATTEMPT_STARTED, H_BATCHES, H_BODY_HASH, H_CALLS,
    H_COMPLETED, H_CREATED_AT, H_DEADLINE, H_DECIDED_AT, H_EXECUTION, H_FINISHED_AT, H_FORMAT, H_ITEMS_CHECKED,
    H_LATE_WRITES, H_LOCKED, H_LOCK_IDS, H_LOCK_OPEN, H_LOCK_PASS, H_LOCK_STARTED, H_LOCK_WAIT, H_PAGES, H_PARENT,
    H_PARENT_TICKET, H_PROTOCOL, H_READ_UNITS, H_REASONS, H_REFUSED, H_RESTORED, H_RETRY, H_REVISITED_AT, H_REVISIT_AT,
    H_REVISIT_CLEARED, H_SAVED, H_STATE, H_TOKEN, H_UPDATED_AT, H_VERSION, H_WAITED, H_WAIT_FOR, H_WRITES,
    H_WRITE_UNITS, OPEN_SHARDS, PROTOCOL, RECORD_FORMAT, SK_HEADER, SK_TOKEN, TOKEN_PK_PREFIX, TX_PK, TX_SK,
};
use crate::dynamo::store::Usage;
use crate::error::{Abort, Cancellation, CancellationReason, TxError};
use crate::model::item_attrs::{LockId, LockIds};
use crate::model::request::Parent;
use crate::model::value::{s, Item};

mod write;

pub use write::{
    add_waited, decide_rollback, decide_rollback_after_pass, forget_written, give_up, last_header, note_refusal,
    read_header, restart, update_header, write_header, HeaderWrite,
};
pub(crate) use write::{put_header, stamp_usage};

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

/// Why a transaction rolled back. Every rollback is one of four kinds, which decide what its caller sees:
/// - actions failed (`failed`: their own conditions, a write DynamoDB rejected, a wait given up): `TransactionCanceled`
///   with those actions' `CancellationReasons`, as DynamoDB reports them;
/// - the `Parent` item stopped it (`parent`): `TransactionCanceled` with `ParentCancellationReason`;
/// - not the request's own doing (`retry`: an older transaction needed one of its items, or a waiter judged it stalled
///   or took its parent over): its driver starts another attempt of the same transaction, and only if none can start
///   (the deadline passed, or nobody drives it any more) is it given up, the reason it carries going to its action;
/// - its driver gave up after an error, or nobody drove it (`message` alone): `TransactionAborted`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Decision {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default)]
    pub failed: Vec<(usize, CancellationReason)>,
    /// The reason that concerns the request's `Parent` item.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<CancellationReason>,
    /// The transaction whose need caused the rollback: an older one that needed an item this one held (wound-wait),
    /// or one that found this one stalled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wounded_by: Option<String>,
    /// Set while another attempt is to start (see [`Retry`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<Retry>,
}

/// A rollback that was not the request's own doing, and what to report if the transaction cannot try again.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Retry {
    /// The contended action (request order), or none for the `Parent` item.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<usize>,
    /// The contended item, for messages and the attempt history.
    pub item: String,
    /// Reported on `action` (or as the parent's reason) when no other attempt starts.
    pub reason: CancellationReason,
    /// The next attempt waits for the transaction that caused this rollback to end (an older one that needed the
    /// item) before it locks anything.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub wait: bool,
}

impl Decision {
    /// A rollback because these actions failed (request order).
    pub fn actions(mut failed: Vec<(usize, CancellationReason)>) -> Self {
        failed.sort_by_key(|(i, _)| *i);
        Self { failed, ..Self::default() }
    }
    /// A rollback because of the `Parent` item.
    pub fn parent(reason: CancellationReason) -> Self {
        Self { parent: Some(reason), ..Self::default() }
    }
    /// A rollback no action is to blame for: the driver gave up or stopped.
    pub fn aborted(message: impl Into<String>) -> Self {
        Self { message: Some(message.into()), ..Self::default() }
    }
    /// A rollback that was not the request's own doing: `by` (when known) caused it on `item` (the request's
    /// `action`, or the parent), and `message` says how; the transaction tries again at once.
    pub fn retry(by: Option<&str>, action: Option<usize>, item: &str, message: String) -> Self {
        let reason = CancellationReason::new(CancellationReason::TRANSACTION_CONFLICT, message);
        Self {
            wounded_by: by.map(str::to_owned),
            retry: Some(Retry { action, item: item.to_owned(), reason, wait: false }),
            ..Self::default()
        }
    }
    /// Wound-wait: the older transaction `by` needed `item` (the request's `action`); the transaction tries again
    /// once `by` has ended.
    pub fn wound(by: &str, action: Option<usize>, item: &str) -> Self {
        let mut d = Self::retry(Some(by), action, item, format!("an older transaction, {by}, needed {item}"));
        if let Some(r) = &mut d.retry {
            r.wait = true;
        }
        d
    }

    /// Whether another attempt is to start.
    pub fn retries(&self) -> bool {
        self.retry.is_some()
    }

    /// The decision when no other attempt will start, `why`: the retry's reason goes to its action (or the parent).
    pub fn given_up(&self, why: &str) -> Self {
        let Some(r) = &self.retry else { return self.clone() };
        let mut reason = r.reason.clone();
        reason.message = Some(format!("{}; {why}", reason.message.as_deref().unwrap_or_default()));
        let mut d = match r.action {
            Some(i) => Self::actions(vec![(i, reason)]),
            None => Self::parent(reason),
        };
        d.wounded_by = self.wounded_by.clone();
        d
    }

    /// DynamoDB's shape: one reason per action, in request order. A decision still to be retried is shown as if
    /// given up.
    pub fn cancellation(&self, tx_id: &str, actions: usize) -> Cancellation {
        if self.retries() {
            return self.given_up("another attempt is to start").cancellation(tx_id, actions);
        }
        let mut reasons = vec![CancellationReason::none(); actions];
        for (i, r) in &self.failed {
            if let Some(slot) = reasons.get_mut(*i) {
                *slot = r.clone();
            }
        }
        let mut c = Cancellation::new(tx_id, reasons);
        if let Some(p) = &self.parent {
            c.message = format!("{}; the Parent item: {}", c.message, p.message.as_deref().unwrap_or(&p.code));
            c.parent_cancellation_reason = Some(p.clone());
        }
        if let Some(m) = &self.message {
            c.message = format!("{}: {m}", c.message);
        }
        c
    }

    /// What the caller of a transaction rolled back for this reason gets.
    pub fn error(&self, tx_id: &str, actions: usize) -> TxError {
        let c = self.cancellation(tx_id, actions);
        if c.is_named() {
            return TxError::Canceled(Box::new(c));
        }
        let message = self.message.clone().unwrap_or_else(|| "rolled back".into());
        TxError::Aborted(Box::new(Abort {
            transaction_id: tx_id.to_owned(),
            message: format!("Transaction aborted: {message}"),
        }))
    }
}

/// One attempt that was rolled back and followed by another, as the status reports it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Attempt {
    /// Counted from 1.
    pub attempt: u32,
    pub started_at_ms: u64,
    pub ended_at_ms: u64,
    /// Time spent waiting for other transactions' locks.
    pub waited_ms: u64,
    /// The transaction that rolled it back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rolled_back_by: Option<String>,
    /// The contended item.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub item: Option<String>,
    pub reason: String,
}

/// What a new attempt waits for before taking any lock: the transaction that rolled the last one back, until it ends.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct WaitFor {
    pub holder: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<usize>,
    pub item: String,
}

/// The value of the lock attributes (`_sagaLock`, the parent's `lockToken`) that attempt `attempt` of transaction
/// `tx_id` writes: the id itself for the first attempt, `<id>.<n>` for the n-th retry. Every lock write and release
/// is conditional on it, so nothing a late worker of an earlier attempt sends can touch a later attempt's locks.
pub fn owner(tx_id: &str, attempt: u32) -> String {
    if attempt == 0 {
        tx_id.to_owned()
    } else {
        format!("{tx_id}.{attempt}")
    }
}

/// The transaction id and attempt a lock value names (see [`owner`]).
pub fn parse_owner(owner: &str) -> (&str, u32) {
    match owner.split_once('.') {
        Some((id, n)) => (id, n.parse().unwrap_or(0)),
        None => (owner, 0),
    }
}

/// What a header write expects to find: the state, and (when given) the attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expect {
    pub state: TxState,
    pub attempt: Option<u32>,
    /// The header's `updatedAt` as last read, when the write may leave it alone (see [`write_header`]); `None` moves
    /// it.
    pub touched_at: Option<u64>,
}

impl Expect {
    /// The state and attempt `h` is in; the write moves `updatedAt` only when it is old (see [`write_header`]).
    pub fn at(h: &Header) -> Self {
        Self { state: h.state, attempt: Some(h.attempt), touched_at: Some(h.updated_at) }
    }
}

impl From<TxState> for Expect {
    fn from(state: TxState) -> Self {
        Self { state, attempt: None, touched_at: None }
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
    /// The protocol it runs (`protocol` on the header): 1 applies before it commits, 2 after.
    #[serde(default = "first_protocol")]
    pub protocol: u32,
    /// Whether begin checked the items that replace others (`itemsChecked` on the header).
    #[serde(default)]
    pub items_checked: bool,
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
    /// When the transaction was decided, when it was.
    #[serde(default)]
    pub decided_at: Option<u64>,
    pub execution_arn: Option<String>,
    pub usage: Usage,
    pub body_hash: String,
    /// The attempt under way, 0 for the first.
    #[serde(default)]
    pub attempt: u32,
    #[serde(default)]
    pub attempt_started_at: u64,
    /// A rolled-back attempt is to be followed by another.
    #[serde(default)]
    pub retry_pending: bool,
    #[serde(default)]
    pub wait_for: Option<WaitFor>,
    /// Milliseconds the attempt under way has waited for other transactions' locks.
    #[serde(default)]
    pub waited_ms: u64,
    /// The attempts rolled back and followed by another, oldest first.
    #[serde(default)]
    pub attempts: Vec<Attempt>,
    /// The last write of this committed transaction DynamoDB refused to apply, when one was.
    #[serde(default)]
    pub refused: Option<Refusal>,
    /// The lock pass that last claimed the lock phase (`lockPass`, see [`crate::model::item_attrs::LockId`]); none on a
    /// transaction begun before lock writes carried ids, whose locks carry none.
    #[serde(default)]
    pub lock_pass: Option<u64>,
    /// The ids the locks of the batches recorded locked carry (`lockIds`).
    #[serde(default)]
    pub lock_ids: LockIds,
    /// Tables most of whose items the request names did not exist when begin looked (`absentTables`): lock's first
    /// write to one of their items expects it absent.
    #[serde(default)]
    pub absent_tables: Vec<String>,
    /// The lock pass that may still have lock writes in flight (`lockOpen`), when one may.
    #[serde(default)]
    pub lock_open: Option<u64>,
    /// Some write of this transaction may land after its end (`lateWrites`).
    #[serde(default)]
    pub late_writes: bool,
    /// When the finished transaction is to be visited again (`revisitAt`, epoch milliseconds); removed by the visit.
    #[serde(default)]
    pub revisit_at: Option<u64>,
    /// When that visit was made (`revisitedAt`), and the items it cleared (`revisitCleared`).
    #[serde(default)]
    pub revisited_at: Option<u64>,
    #[serde(default)]
    pub revisit_cleared: u64,
}

/// A committed write DynamoDB refused at apply (`ApplyRejected`): the item keeps its lock until the write is applied.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Refusal {
    /// The batch that holds it.
    pub batch: usize,
    /// The action: its place in the request, its kind, table and key.
    pub action: String,
    /// DynamoDB's message.
    pub message: String,
    /// When it was refused (ms since the epoch).
    pub at_ms: u64,
}

impl Header {
    pub fn finished(&self) -> bool {
        self.finished_at.is_some()
    }
    /// Whether, once finished, the transaction must be visited again after [`crate::Config::revisit_after`]: a write of
    /// it may land after its end. That is so when a lock pass may still have had writes in flight when it ended (its
    /// driver died, timed out, was overtaken by another pass, or someone else decided the transaction meanwhile), and
    /// when a lock write's answer was lost. A transaction its own live driver ended, every answer in hand, is not
    /// visited. (A parent lock write is sent before the first pass claims the lock phase: one in flight when its Lock
    /// call died there is not counted.)
    pub fn needs_revisit(&self) -> bool {
        self.late_writes || self.lock_open.is_some()
    }
    /// A visit for writes that landed late is due or under way: the transaction finished, and was not visited yet.
    pub fn revisit_pending(&self) -> bool {
        self.revisit_at.is_some()
    }
    /// Carried out in one `TransactWriteItems` call (`direct`): the only transactions without batches,
    /// since the protocol's have at least one.
    pub fn direct(&self) -> bool {
        self.batches == 0
    }
    pub fn cancellation(&self) -> Option<Cancellation> {
        (self.state == TxState::RolledBack)
            .then(|| self.decision.clone().unwrap_or_default().cancellation(&self.id, self.actions))
    }
    /// What the caller of a rolled-back transaction gets: `TransactionCanceled` or `TransactionAborted`.
    pub fn rollback_error(&self) -> Option<TxError> {
        (self.state == TxState::RolledBack)
            .then(|| self.decision.clone().unwrap_or_default().error(&self.id, self.actions))
    }
    /// Whether it commits before it applies (protocol 2): nothing is written to an item before the commit but its
    /// lock, and each item is applied and unlocked in one write after it.
    pub fn commits_first(&self) -> bool {
        self.protocol >= 2
    }
    /// The value this attempt's locks carry (see `owner`).
    pub fn owner(&self) -> String {
        owner(&self.id, self.attempt)
    }
    /// The id the lock of action `index` of `batch` carries, once that batch was recorded locked; none for a
    /// transaction begun before lock writes carried ids.
    pub fn lock_id(&self, batch: usize, index: usize) -> Option<LockId> {
        self.lock_pass.and(self.lock_ids.id_of(batch, index))
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
        let format = u(H_FORMAT).map_or(1, |f| f as u32);
        let protocol = u(H_PROTOCOL).map_or(1, |p| p as u32);
        if format > RECORD_FORMAT || protocol > PROTOCOL {
            return Err(TxError::UnknownFormat(format!(
                "transaction {id} was written in record format {format} and protocol {protocol}; this version of \
                 dynamo-saga knows format {RECORD_FORMAT} and protocols up to {PROTOCOL}: a newer version must finish it"
            )));
        }
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
            protocol: u(H_PROTOCOL).map_or(1, |p| p as u32),
            items_checked: u(H_ITEMS_CHECKED).is_some(),
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
            decided_at: u(H_DECIDED_AT),
            execution_arn: s(H_EXECUTION),
            usage: Usage {
                calls: u(H_CALLS).unwrap_or(0),
                writes: u(H_WRITES).unwrap_or(0),
                read_units: n(H_READ_UNITS).unwrap_or(0.0),
                write_units: n(H_WRITE_UNITS).unwrap_or(0.0),
            },
            body_hash: s(H_BODY_HASH).unwrap_or_default(),
            attempt: u(H_ATTEMPT).unwrap_or(0) as u32,
            attempt_started_at: u(H_ATTEMPT_STARTED).or(u(H_CREATED_AT)).unwrap_or(0),
            retry_pending: matches!(item.get(H_RETRY), Some(AttributeValue::Bool(true))),
            wait_for: s(H_WAIT_FOR).map(|w| serde_json::from_str(&w)).transpose().map_err(|_| bad(H_WAIT_FOR))?,
            waited_ms: u(H_WAITED).unwrap_or(0),
            attempts: s(H_ATTEMPTS)
                .map(|a| serde_json::from_str(&a))
                .transpose()
                .map_err(|_| bad(H_ATTEMPTS))?
                .unwrap_or_default(),
            refused: s(H_REFUSED).map(|r| serde_json::from_str(&r)).transpose().map_err(|_| bad(H_REFUSED))?,
            lock_pass: u(H_LOCK_PASS),
            lock_open: u(H_LOCK_OPEN),
            late_writes: matches!(item.get(H_LATE_WRITES), Some(AttributeValue::Bool(true))),
            revisit_at: u(H_REVISIT_AT),
            revisited_at: u(H_REVISITED_AT),
            revisit_cleared: u(H_REVISIT_CLEARED).unwrap_or(0),
            absent_tables: s(H_ABSENT_TABLES)
                .map(|r| serde_json::from_str(&r))
                .transpose()
                .map_err(|_| bad(H_ABSENT_TABLES))?
                .unwrap_or_default(),
            lock_ids: s(H_LOCK_IDS)
                .map(|r| serde_json::from_str(&r))
                .transpose()
                .map_err(|_| bad(H_LOCK_IDS))?
                .unwrap_or_default(),
            id,
        })
    }
}

fn first_protocol() -> u32 {
    1
}

/// The partition of the open-transactions index a transaction's header is in (`open#N`, and `revisit#N` while it waits
/// to be visited again): from its id, so that many transactions do not share one key.
pub fn shard_of(tx_id: &str) -> u32 {
    ulid::Ulid::from_string(tx_id).map(|u| (u.random() % OPEN_SHARDS as u128) as u32).unwrap_or(0)
}

pub fn header_key(tx_id: &str) -> Item {
    HashMap::from([(TX_PK.to_string(), s(tx_id)), (TX_SK.to_string(), s(SK_HEADER))])
}
pub(crate) fn record_key(tx_id: &str, sk: String) -> Item {
    HashMap::from([(TX_PK.to_string(), s(tx_id)), (TX_SK.to_string(), s(sk))])
}
pub fn token_key(token: &str) -> Item {
    HashMap::from([(TX_PK.to_string(), s(format!("{TOKEN_PK_PREFIX}{token}"))), (TX_SK.to_string(), s(SK_TOKEN))])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::value::n;

    #[test]
    fn a_header_of_a_newer_record_format_or_protocol_is_refused_by_name_not_misread() {
        let header = |extra: &[(&str, AttributeValue)]| {
            let mut item = header_key("01JAAAAAAAAAAAAAAAAAAAAAAA");
            for (k, v) in [(H_STATE, s("PENDING")), (H_ACTIONS, n(3)), (H_BATCHES, n(1)), (H_PROTOCOL, n(PROTOCOL))] {
                item.insert(k.to_string(), v);
            }
            for (k, v) in extra {
                item.insert(k.to_string(), v.clone());
            }
            Header::from_item(&item)
        };
        assert!(header(&[]).is_ok(), "no format: the first");
        assert!(header(&[(H_FORMAT, n(RECORD_FORMAT))]).is_ok());
        for newer in [(H_FORMAT, n(RECORD_FORMAT + 1)), (H_PROTOCOL, n(PROTOCOL + 1))] {
            let e = header(std::slice::from_ref(&newer)).expect_err("a newer format is refused");
            assert_eq!(e.name(), "UnknownRecordFormat", "{newer:?}: {e}");
            assert!(e.to_string().contains("a newer version must finish it"), "{e}");
        }
    }
}
