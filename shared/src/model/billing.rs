//! The capacity DynamoDB bills for a call, computed from its documented rules and the sizes of the items involved.
//!
//! DynamoDB Local under-reports transactional capacity, so the benchmark (`tools/bench.sh`) runs its capacity pass on
//! a [`Store`](crate::Store) with billing on ([`Store::with_billing`](crate::Store::with_billing)): every write reads
//! the items it touches before and after (outside the meter), and every call is billed by these rules, from the
//! Amazon DynamoDB Developer Guide ("Read/write capacity mode", "Item sizes and formats", "Capacity management for
//! transactions"):
//! - a standard write (`PutItem`, `UpdateItem`, `DeleteItem`, each item of `BatchWriteItem`) costs 1 write unit per
//!   started KB of the larger of the item before and after it; a write whose condition fails still costs the size of
//!   the item as it is;
//! - a transactional write costs 2 write units per started KB for every item of the call, `ConditionCheck` included;
//! - a strongly consistent read costs 1 read unit per started 4 KB of the item, and a read of a missing item costs
//!   1; an eventually consistent read half as much; `BatchGetItem` counts each item on its own; `Query` adds up the
//!   sizes of the items a page returns, then rounds up to 4 KB;
//! - a write also costs write units in each global secondary index it changes ("Global secondary indexes", provisioned
//!   throughput considerations): 1 per started KB of the index entry when an item enters or leaves the index or a
//!   projected attribute changes, and 2 entries' worth when an index key changes (the old entry is deleted, a new one
//!   written). An index entry is its projected attributes plus the table's and the index's keys, plus 100 bytes.
//!   In a transaction, index writes are counted as transactional writes.
//!
//! Item sizes follow [`crate::model::value::item_size`]. The non-transactional calls are billed twice, by these rules
//! and by what DynamoDB reported (`ReturnConsumedCapacity`), so a run can show the two agree where DynamoDB Local is
//! right.

use serde::{Deserialize, Serialize};

use crate::model::value::{item_size, Item};

/// One write unit covers this many bytes of an item.
pub const WRITE_UNIT_BYTES: usize = 1024;
/// One read unit covers this many bytes of an item (strongly consistent).
pub const READ_UNIT_BYTES: usize = 4096;

/// Write units of a standard write of an item of `before` bytes that has `after` bytes afterwards (0 = absent).
pub fn write_units(before: usize, after: usize) -> f64 {
    before.max(after).max(1).div_ceil(WRITE_UNIT_BYTES) as f64
}

/// Write units of one item of a `TransactWriteItems` call.
#[cfg(any(test, feature = "internals"))]
pub fn transact_units(before: usize, after: usize) -> f64 {
    2.0 * write_units(before, after)
}

/// Read units of a strongly consistent read of an item of `size` bytes (0 = missing).
pub fn read_units(size: usize) -> f64 {
    size.max(1).div_ceil(READ_UNIT_BYTES) as f64
}

/// Read units of a read of an item of `size` bytes: strongly consistent, or eventually consistent at half the price.
pub fn read_units_as(size: usize, consistent: bool) -> f64 {
    if consistent {
        read_units(size)
    } else {
        read_units(size) / 2.0
    }
}

/// What one global secondary index holds of an item.
#[derive(Debug, Clone, PartialEq)]
pub enum Projection {
    All,
    KeysOnly,
    Include(Vec<String>),
}

/// A global secondary index: its key attribute names and its projection.
#[derive(Debug, Clone, PartialEq)]
pub struct Index {
    pub keys: Vec<String>,
    pub projection: Projection,
}

impl Index {
    /// The index entry of `item` (absent when the item lacks an index key), with the table's keys `table_keys`.
    fn entry(&self, table_keys: &[String], item: &Item) -> Option<Item> {
        if !self.keys.iter().all(|k| item.contains_key(k)) {
            return None;
        }
        let keep = |name: &String| match &self.projection {
            Projection::All => true,
            Projection::KeysOnly => table_keys.contains(name) || self.keys.contains(name),
            Projection::Include(extra) => table_keys.contains(name) || self.keys.contains(name) || extra.contains(name),
        };
        Some(item.iter().filter(|(k, _)| keep(k)).map(|(k, v)| (k.clone(), v.clone())).collect())
    }

    /// Write units (standard) that changing an item from `before` to `after` costs in this index.
    pub fn write_units(&self, table_keys: &[String], before: Option<&Item>, after: Option<&Item>) -> f64 {
        let units = |e: &Item| (item_size(e) + 100).div_ceil(WRITE_UNIT_BYTES) as f64;
        let (b, a) = (before.and_then(|i| self.entry(table_keys, i)), after.and_then(|i| self.entry(table_keys, i)));
        match (b, a) {
            (None, None) => 0.0,
            (Some(x), None) | (None, Some(x)) => units(&x),
            (Some(x), Some(y)) if self.keys.iter().all(|k| x.get(k) == y.get(k)) => {
                if x == y {
                    0.0
                } else {
                    units(&x).max(units(&y))
                }
            }
            (Some(x), Some(y)) => units(&x) + units(&y),
        }
    }
}

/// What a store with billing on has sent and what it costs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Bill {
    /// Requests sent to DynamoDB (the billing reads not counted).
    pub calls: u64,
    /// Of those, calls that write (`TransactWriteItems` included), and `TransactWriteItems` calls.
    pub write_calls: u64,
    pub transact_calls: u64,
    /// Write and read units by the rules above.
    pub write_units: f64,
    pub read_units: f64,
    /// The non-transactional calls alone: units by the rules, and as DynamoDB reported them.
    pub plain_write_units: f64,
    pub plain_write_reported: f64,
    pub plain_read_units: f64,
    pub plain_read_reported: f64,
}

impl Bill {
    /// Adds another store's bill (the benchmark adds the bills of a run's processes).
    #[cfg_attr(not(feature = "internals"), allow(dead_code))]
    pub fn add(&mut self, o: &Bill) {
        self.calls += o.calls;
        self.write_calls += o.write_calls;
        self.transact_calls += o.transact_calls;
        self.write_units += o.write_units;
        self.read_units += o.read_units;
        self.plain_write_units += o.plain_write_units;
        self.plain_write_reported += o.plain_write_reported;
        self.plain_read_units += o.plain_read_units;
        self.plain_read_reported += o.plain_read_reported;
    }

    pub(crate) fn plain_write(&mut self, units: f64, reported: f64) {
        self.calls += 1;
        self.write_calls += 1;
        self.write_units += units;
        self.plain_write_units += units;
        self.plain_write_reported += reported;
    }

    pub(crate) fn plain_read(&mut self, units: f64, reported: f64) {
        self.calls += 1;
        self.read_units += units;
        self.plain_read_units += units;
        self.plain_read_reported += reported;
    }

    pub(crate) fn transact(&mut self, units: f64) {
        self.calls += 1;
        self.write_calls += 1;
        self.transact_calls += 1;
        self.write_units += units;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_round_up_per_started_kb_of_the_larger_image() {
        assert_eq!(write_units(0, 0), 1.0);
        assert_eq!(write_units(0, 1024), 1.0);
        assert_eq!(write_units(1025, 10), 2.0);
        assert_eq!(write_units(500, 2500), 3.0);
    }

    #[test]
    fn transactional_writes_cost_double() {
        assert_eq!(transact_units(900, 1000), 2.0);
        assert_eq!(transact_units(1000, 1100), 4.0);
        assert_eq!(transact_units(0, 0), 2.0);
    }

    #[test]
    fn an_index_costs_a_write_to_enter_or_leave_and_two_when_its_key_changes() {
        use aws_sdk_dynamodb::types::AttributeValue as A;
        let keys = vec!["id".to_string()];
        let ix = Index { keys: vec!["shard".into(), "at".into()], projection: Projection::KeysOnly };
        let item = |at: Option<&str>, note: &str| {
            let mut i = Item::from([
                ("id".into(), A::S("t1".into())),
                ("shard".into(), A::S("3".into())),
                ("note".into(), A::S(note.into())),
            ]);
            if let Some(at) = at {
                i.insert("at".into(), A::N(at.into()));
            }
            i
        };
        let (a1, a2, none) = (item(Some("1"), "x"), item(Some("2"), "x"), item(None, "x"));
        assert_eq!(ix.write_units(&keys, None, Some(&a1)), 1.0);
        assert_eq!(ix.write_units(&keys, Some(&a1), Some(&a2)), 2.0);
        assert_eq!(ix.write_units(&keys, Some(&a1), Some(&none)), 1.0);
        assert_eq!(ix.write_units(&keys, Some(&a1), None), 1.0);
        // An attribute the index does not project changes nothing in it.
        assert_eq!(ix.write_units(&keys, Some(&a1), Some(&item(Some("1"), "y"))), 0.0);
        let all = Index { projection: Projection::All, ..ix };
        assert_eq!(all.write_units(&keys, Some(&a1), Some(&item(Some("1"), "y"))), 1.0);
    }

    #[test]
    fn reads_round_up_per_started_4_kb_and_a_missing_item_costs_one() {
        assert_eq!(read_units(0), 1.0);
        assert_eq!(read_units(4096), 1.0);
        assert_eq!(read_units(4097), 2.0);
        assert_eq!(read_units_as(4097, false), 1.0);
        assert_eq!(read_units_as(100, false), 0.5);
    }
}
