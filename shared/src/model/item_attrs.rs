//! dynamo-saga's attributes on the callers' own items: an item's lock, its flags, a parent lock, and the item without
//! them.

use aws_sdk_dynamodb::types::AttributeValue;

use crate::constants::{
    ATTR_LOCK, ATTR_LOCKED_AT, PARENT_LEASE, PARENT_LOCKED_AT, PARENT_LOCK_TOKEN, PARENT_RVN, RESERVED_PREFIX,
};
use crate::model::value::Item;

/// Strips dynamo-saga's reserved attributes from an item.
pub fn strip_reserved(mut item: Item) -> Item {
    item.retain(|k, _| !k.starts_with(RESERVED_PREFIX));
    item
}

/// The parent lock as a parent item carries it (the DynamoDB Lock Client's lease and record version number).
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

/// Which write took an item's lock (`_sagaLockedAt`, a number): the lock pass that sent it, named by the epoch
/// milliseconds it started at (unique within its attempt: each pass claims a number above the last on the header),
/// and, when earlier writes of that pass to the item had no certain outcome, how many came before it (the number's
/// thousandths). Apply writes an item only while its lock carries the id its batch was recorded locked with, so a
/// lock write that lands late, after the item was applied, carries another id and is never applied again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LockId {
    pub pass: u64,
    /// Writes of this pass to the item that came before this one with no certain outcome (below 1,000).
    pub retry: u16,
}

impl LockId {
    /// Most writes of one pass to one item.
    pub const MAX_RETRY: u16 = 999;

    pub fn new(pass: u64) -> Self {
        Self { pass, retry: 0 }
    }

    /// The id the next write carries after this one's outcome was unknown; `None` past [`LockId::MAX_RETRY`].
    pub fn next(self) -> Option<Self> {
        (self.retry < Self::MAX_RETRY).then_some(Self { retry: self.retry + 1, ..self })
    }

    /// As a DynamoDB number: `1732612345678`, or `1732612345678.002` for a retry.
    pub fn number(&self) -> String {
        match self.retry {
            0 => self.pass.to_string(),
            r => format!("{}.{r:03}", self.pass),
        }
    }

    /// The id a DynamoDB number names (as DynamoDB returns it, trailing zeros of the fraction dropped).
    pub fn parse(n: &str) -> Option<Self> {
        let (pass, fraction) = match n.split_once('.') {
            Some((p, f)) => (p, f),
            None => (n, ""),
        };
        if fraction.len() > 3 || !fraction.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let retry = if fraction.is_empty() { 0 } else { format!("{fraction:0<3}").parse().ok()? };
        Some(Self { pass: pass.parse().ok()?, retry })
    }

    /// The id of the lock on `item`, when it carries one.
    pub fn of(item: &Item) -> Option<Self> {
        match item.get(ATTR_LOCKED_AT) {
            Some(AttributeValue::N(n)) => Self::parse(n),
            _ => None,
        }
    }
}

impl std::fmt::Display for LockId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.number())
    }
}

impl serde::Serialize for LockId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.number())
    }
}

impl<'de> serde::Deserialize<'de> for LockId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Self::parse(&s).ok_or_else(|| serde::de::Error::custom(format!("not a lock id: {s:?}")))
    }
}

/// The ids an attempt's locks carry, batch by batch, as lock recorded them on the header (`lockIds`): each run of
/// batches a lock pass recorded, and the actions whose id is not their pass's (an earlier write of theirs had no
/// certain outcome).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct LockIds {
    /// (first batch, pass) of each run of batches one pass recorded, in batch order.
    pub runs: Vec<(usize, u64)>,
    /// Action (request order) -> its lock's id, where it is not its batch's pass's.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub except: std::collections::BTreeMap<usize, LockId>,
}

impl LockIds {
    /// The id of action `index` of `batch`, once its batch was recorded locked.
    pub fn id_of(&self, batch: usize, index: usize) -> Option<LockId> {
        if let Some(id) = self.except.get(&index) {
            return Some(*id);
        }
        self.runs.iter().rev().find(|(from, _)| *from <= batch).map(|(_, pass)| LockId::new(*pass))
    }

    /// These ids with batches `from..` recorded locked by `pass`, `except` (their actions whose id is another) being
    /// every such action of those batches: what an earlier pass recorded of them is replaced.
    pub fn record(&self, from: usize, pass: u64, actions: &[usize], except: &[(usize, LockId)]) -> Self {
        let mut runs: Vec<(usize, u64)> = self.runs.iter().copied().filter(|(b, _)| *b < from).collect();
        if runs.last().is_none_or(|(_, p)| *p != pass) {
            runs.push((from, pass));
        }
        let mut kept = self.except.clone();
        kept.retain(|i, _| !actions.contains(i));
        kept.extend(except.iter().copied());
        Self { runs, except: kept }
    }
}

/// Placeholders the library adds to requests; callers may not use names starting with `#_saga` / `:_saga`.
pub(crate) mod ph {
    pub const LOCK: &str = "#_sagaL";
    pub const LOCKED_AT: &str = "#_sagaA";
    pub const TRANSIENT: &str = "#_sagaT";
    pub const APPLIED: &str = "#_sagaP";
    pub const PK: &str = "#_sagaK";
    pub const PARENT_TOKEN: &str = "#_sagaLT";
    pub const PARENT_AT: &str = "#_sagaLA";
    pub const PARENT_LEASE: &str = "#_sagaLD";
    pub const PARENT_RVN: &str = "#_sagaRV";
    pub const LEASE: &str = ":_sagaLease";
    pub const RVN: &str = ":_sagaRvn";
    pub const STATE: &str = "#_sagaS";
    pub const TOMBSTONE: &str = "#_sagaTomb";
    pub const STONE: &str = "#_sagaStone";
    /// Stands for an attribute that no item has (see [`dynamo_saga_expressions::expr::redirect_paths`]).
    pub const GONE: &str = "#_sagaGone";
    pub const SEEN: &str = ":_sagaSeen";
    pub const TX: &str = ":_sagaTx";
    pub const WRITTEN_BY: &str = "#_sagaW";
    pub const WRITTEN_BY_ID: &str = ":_sagaW";
    pub const NOW: &str = ":_sagaNow";
    pub const TRUE: &str = ":_sagaTrue";
    pub const PENDING: &str = ":_sagaPending";
    pub const ATTEMPT: &str = "#_sagaAttempt";
    pub const ATTEMPT_N: &str = ":_sagaAttempt";
    /// The id a lock is expected to carry ([`crate::model::item_attrs::LockId`]).
    pub const LOCK_ID: &str = ":_sagaId";
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lock_id_is_a_number_dynamodb_gives_back_as_it_likes_and_retries_sort_after_their_pass() {
        let id = LockId::new(1_732_612_345_678);
        assert_eq!(id.number(), "1732612345678");
        let retried = id.next().unwrap();
        assert_eq!(retried.number(), "1732612345678.001");
        // DynamoDB drops a fraction's trailing zeros.
        assert_eq!(LockId::parse("1732612345678.01"), Some(LockId { pass: 1_732_612_345_678, retry: 10 }));
        assert_eq!(LockId::parse("1732612345678.1"), Some(LockId { pass: 1_732_612_345_678, retry: 100 }));
        assert_eq!(LockId::parse(&retried.number()), Some(retried));
        assert_eq!(LockId::parse("1.0001"), None, "no more than three retry digits");
        assert_eq!(LockId::parse("x"), None);
        assert!(id < retried && retried < LockId::new(id.pass + 1), "ordered as DynamoDB orders the numbers");
        let last = LockId { retry: LockId::MAX_RETRY, ..id };
        assert_eq!(last.next(), None);
        let json = serde_json::to_string(&retried).unwrap();
        assert_eq!(serde_json::from_str::<LockId>(&json).unwrap(), retried);
    }

    #[test]
    fn lock_ids_name_each_batch_by_the_pass_that_recorded_it_and_the_exceptions_by_action() {
        let none = LockIds::default();
        assert_eq!(none.id_of(0, 0), None, "nothing recorded yet");
        // Batches 0-6 recorded by pass 10, action 3 locked by its second write.
        let first = none.record(0, 10, &[0, 1, 2, 3], &[(3, LockId { pass: 10, retry: 1 })]);
        assert_eq!(first.id_of(0, 0), Some(LockId::new(10)));
        assert_eq!(first.id_of(6, 2), Some(LockId::new(10)));
        assert_eq!(first.id_of(1, 3), Some(LockId { pass: 10, retry: 1 }));
        // Batches from 7 by pass 12, which took over every lock of them; the same pass again from 9 adds no run.
        let second = first.record(7, 12, &[7, 8], &[]);
        assert_eq!(second.runs, vec![(0, 10), (7, 12)]);
        assert_eq!(second.id_of(6, 2), Some(LockId::new(10)));
        assert_eq!(second.id_of(7, 7), Some(LockId::new(12)));
        assert_eq!(second.record(9, 12, &[9], &[]).runs, vec![(0, 10), (7, 12)]);
        // Batches recorded again from 0 by pass 13 replace what was recorded of them, exceptions included.
        let again = second.record(0, 13, &[0, 1, 2, 3, 7, 8], &[]);
        assert_eq!(again.runs, vec![(0, 13)]);
        assert_eq!(again.id_of(1, 3), Some(LockId::new(13)));
        let json = serde_json::to_string(&first).unwrap();
        assert_eq!(serde_json::from_str::<LockIds>(&json).unwrap(), first);
    }
}
