//! Lock order, batches and request pages.
//!
//! Actions are sorted by table and key, the one global order every coordinator locks in, so two transactions can
//! never each hold an item the other waits for. The sorted actions are grouped into batches: each batch is applied
//! with one `TransactWriteItems` call holding at most `batch_size - 1` actions plus the fencing `ConditionCheck`, and
//! at most 4 MB. Each batch is written as newline-delimited JSON and deflated on its own (so one batch is read and
//! inflated without the others); the batches, end to end, are the request stream, cut into fixed-size pages (one
//! record each, so a transaction is not bounded by DynamoDB's 400 KB item limit). A page is paid for in write units
//! when the transaction begins and in read units by every phase that reads it, so deflating pays for itself: an
//! insert's item is in both its page and its table. A plan written before pages were deflated says so
//! (`deflated: false`) and is read as it was written.

use std::collections::HashMap;
use std::ops::Range;

use serde::{Deserialize, Serialize};

use crate::model::request::{Action, Op, RESERVED_OVERHEAD};
use crate::model::schema::TableSchema;
use crate::model::value;

/// Where each batch starts, in actions (lock order) and in bytes of the request stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Plan {
    /// `starts[b] = [first action, first byte]` of batch `b`; the last entry is `[total actions, total bytes]`.
    pub starts: Vec<[u64; 2]>,
    pub page_bytes: u64,
    /// Whether each batch's bytes are deflated (RFC 1951); absent in plans written before they were.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub deflated: bool,
    /// `items[b]`: the byte of the request stream where batch `b`'s `Put` items start (its end when it has none);
    /// empty in plans written before the parts were split, whose actions carry their items.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub items: Vec<u64>,
}

/// How much of a batch a phase reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// Every action whole, `Put` items included.
    Whole,
    /// The actions without their `Put` items (`item` is `None`), which is all lock and rollback need. A plan
    /// written before the parts were split gives them whole.
    Heads,
}

impl Plan {
    pub fn batch_count(&self) -> usize {
        self.starts.len() - 1
    }
    pub fn action_count(&self) -> usize {
        self.starts.last().map_or(0, |s| s[0] as usize)
    }
    pub fn total_bytes(&self) -> u64 {
        self.starts.last().map_or(0, |s| s[1])
    }
    pub fn page_count(&self) -> usize {
        self.total_bytes().div_ceil(self.page_bytes) as usize
    }
    /// The actions (positions in lock order) of batch `b`.
    pub fn actions(&self, b: usize) -> Range<usize> {
        self.starts[b][0] as usize..self.starts[b + 1][0] as usize
    }
    /// The bytes of the request stream that hold batch `b` (deflated when the plan is).
    pub fn bytes(&self, b: usize) -> Range<u64> {
        self.starts[b][1]..self.starts[b + 1][1]
    }
    /// The bytes of the request stream to read for `part` of batch `b`.
    fn part(&self, b: usize, part: Part) -> Range<u64> {
        let r = self.bytes(b);
        match (part, self.items.get(b)) {
            (Part::Heads, Some(&at)) => r.start..at,
            _ => r,
        }
    }
    /// The pages to read for batch `b`, whole.
    #[cfg(any(test, feature = "internals"))]
    pub fn pages(&self, b: usize) -> Range<usize> {
        self.pages_of(b, Part::Whole)
    }
    /// The pages to read for `part` of batch `b`.
    pub fn pages_of(&self, b: usize, part: Part) -> Range<usize> {
        let r = self.part(b, part);
        if r.is_empty() {
            return 0..0;
        }
        (r.start / self.page_bytes) as usize..(r.end.div_ceil(self.page_bytes)) as usize
    }
    /// The batch that holds the action at lock-order position `pos`.
    #[cfg(any(test, feature = "internals"))]
    pub fn batch_of(&self, pos: usize) -> usize {
        self.starts.partition_point(|s| s[0] as usize <= pos) - 1
    }
}

/// Sorts actions into the global lock order: table, then key attributes in key-schema order.
pub fn sort(actions: &mut [Action], schemas: &HashMap<String, TableSchema>) {
    actions.sort_by_cached_key(|a| {
        let names = schemas.get(&a.table).map(|s| s.key_names.as_slice()).unwrap_or(&[]);
        value::key_order(&a.table, &a.key, names)
    });
}

/// The size an action adds to its batch's TransactWriteItems call, for the 4 MB limit. For an update the resulting
/// item is unknown before it runs, so its key and values stand in; DynamoDB rejects an oversized call as a whole and
/// the apply phase then applies that batch's actions one at a time.
pub fn transact_size(a: &Action) -> usize {
    match a.op {
        Op::Put => a.item.as_ref().map_or(0, value::item_size) + RESERVED_OVERHEAD,
        Op::Update => value::item_size(&a.key) + value::item_size(&a.values) + RESERVED_OVERHEAD,
        Op::Delete | Op::ConditionCheck => 0,
    }
}

/// Builds the plan and the request stream for actions already in lock order: each batch its actions without their
/// `Put` items (one JSON action per line, deflated), then those items (one JSON item per line, deflated).
pub fn build(actions: &[Action], batch_size: usize, max_batch_bytes: usize, page_bytes: usize) -> (Plan, Vec<u8>) {
    let per_batch = batch_size.saturating_sub(1).max(1);
    let mut stream = Vec::new();
    let mut starts = vec![[0u64, 0u64]];
    let mut items = Vec::new();
    let mut first = 0;
    let (mut count, mut bytes) = (0usize, 0usize);
    for (pos, a) in actions.iter().enumerate() {
        let size = transact_size(a);
        if count > 0 && (count == per_batch || bytes + size > max_batch_bytes) {
            items.push(write_batch(&mut stream, &actions[first..pos]));
            starts.push([pos as u64, stream.len() as u64]);
            first = pos;
            count = 0;
            bytes = 0;
        }
        count += 1;
        bytes += size;
    }
    if first < actions.len() {
        items.push(write_batch(&mut stream, &actions[first..]));
    }
    starts.push([actions.len() as u64, stream.len() as u64]);
    (Plan { starts, page_bytes: page_bytes as u64, deflated: true, items }, stream)
}

/// Appends one batch's two parts to `stream`; returns where its items start.
fn write_batch(stream: &mut Vec<u8>, batch: &[Action]) -> u64 {
    let mut heads = Vec::new();
    let mut bodies = Vec::new();
    for a in batch {
        let head = Action { item: None, ..a.clone() };
        serde_json::to_writer(&mut heads, &head).expect("actions always serialise");
        heads.push(b'\n');
        if let Some(item) = &a.item {
            serde_json::to_writer(&mut bodies, &crate::model::value::item_to_json(item))
                .expect("items always serialise");
            bodies.push(b'\n');
        }
    }
    stream.extend(deflate(&heads));
    let at = stream.len() as u64;
    if !bodies.is_empty() {
        stream.extend(deflate(&bodies));
    }
    at
}

/// Deflate level 6, zlib's default: within a few per cent of the smallest output for JSON at a fraction of the time.
fn deflate(bytes: &[u8]) -> Vec<u8> {
    miniz_oxide::deflate::compress_to_vec(bytes, 6)
}

/// The most a batch may inflate to: far above any batch `build` writes (a 4 MB call's actions with their JSON
/// around them), so only a damaged page reaches it.
const MAX_INFLATED_BATCH: usize = 64 * 1024 * 1024;

/// The default page size and 4 MB limit.
#[cfg(any(test, feature = "internals"))]
pub fn build_default(actions: &[Action], batch_size: usize) -> (Plan, Vec<u8>) {
    use crate::constants::{MAX_TRANSACT_BYTES, PAGE_TARGET_BYTES};
    build(actions, batch_size, MAX_TRANSACT_BYTES - 64 * 1024, PAGE_TARGET_BYTES)
}

/// Parses `part` of the actions of one batch from the bytes of the pages that hold it (`first_page` is the first
/// page's number, as [`Plan::pages_of`] gives it).
pub fn decode_batch(plan: &Plan, b: usize, part: Part, first_page: usize, pages: &[u8]) -> Result<Vec<Action>, String> {
    let base = first_page as u64 * plan.page_bytes;
    let slice = |r: Range<u64>| {
        pages
            .get((r.start - base) as usize..(r.end - base) as usize)
            .ok_or("request pages are shorter than the plan says")
    };
    let Some(&at) = plan.items.get(b) else {
        return lines(&inflated(plan, b, slice(plan.bytes(b))?)?);
    };
    let mut actions: Vec<Action> = lines(&inflated(plan, b, slice(plan.bytes(b).start..at)?)?)?;
    if part == Part::Heads {
        return Ok(actions);
    }
    let items: Vec<serde_json::Value> = lines(&inflated(plan, b, slice(at..plan.bytes(b).end)?)?)?;
    let mut items = items.iter().map(crate::model::value::item_from_json);
    for a in actions.iter_mut().filter(|a| a.op == Op::Put) {
        let item = items.next().ok_or_else(|| format!("batch {b} has fewer Put items than Puts"))?;
        a.item = Some(item.map_err(|e| format!("stored item does not parse: {e}"))?);
    }
    if items.next().is_some() {
        return Err(format!("batch {b} has more Put items than Puts"));
    }
    Ok(actions)
}

/// The bytes of a deflated part (as they are in a plan from before deflating).
fn inflated<'a>(plan: &Plan, b: usize, slice: &'a [u8]) -> Result<std::borrow::Cow<'a, [u8]>, String> {
    if !plan.deflated || slice.is_empty() {
        return Ok(std::borrow::Cow::Borrowed(slice));
    }
    miniz_oxide::inflate::decompress_to_vec_with_limit(slice, MAX_INFLATED_BATCH)
        .map(std::borrow::Cow::Owned)
        .map_err(|e| format!("request pages of batch {b} do not inflate: {e}"))
}

/// One JSON value per line.
fn lines<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<Vec<T>, String> {
    bytes
        .split(|c| *c == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice::<T>(l).map_err(|e| format!("stored action does not parse: {e}")))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::constants::MAX_TRANSACT_BYTES;
    use crate::model::value::Item;
    use aws_sdk_dynamodb::types::AttributeValue;

    /// `n` hex digits that do not repeat (a chain of SHA-256 digests), so they deflate about as well as real data.
    fn noise(seed: usize, n: usize) -> String {
        use sha2::{Digest, Sha256};
        let mut digest = Sha256::digest(seed.to_le_bytes());
        let mut out = String::with_capacity(n + 64);
        while out.len() < n {
            out.push_str(&format!("{digest:x}"));
            digest = Sha256::digest(digest);
        }
        out.truncate(n);
        out
    }

    fn action(i: usize, table: &str, pk: &str, op: Op, pad: usize) -> Action {
        let key: Item = [("pk".to_string(), AttributeValue::S(pk.into()))].into();
        let mut item = key.clone();
        item.insert("pad".into(), AttributeValue::S(noise(i, pad)));
        Action {
            index: i,
            op,
            table: table.into(),
            key,
            item: (op == Op::Put).then_some(item),
            update: None,
            condition: None,
            names: Default::default(),
            values: Default::default(),
            return_old: false,
            tombstone: None,
        }
    }

    fn schemas() -> HashMap<String, TableSchema> {
        let s = TableSchema { key_names: vec!["pk".into()], key_types: vec!["S".into()], index_keys: Vec::new() };
        [("aaa".to_string(), s.clone()), ("bbb".to_string(), s)].into()
    }

    #[test]
    fn sorts_by_table_then_key_and_keeps_request_index() {
        let mut a = vec![
            action(0, "bbb", "a", Op::Put, 0),
            action(1, "aaa", "z", Op::Put, 0),
            action(2, "aaa", "b", Op::Put, 0),
        ];
        sort(&mut a, &schemas());
        let got: Vec<(usize, &str)> = a.iter().map(|a| (a.index, a.table.as_str())).collect();
        assert_eq!(got, vec![(2, "aaa"), (1, "aaa"), (0, "bbb")]);
    }

    #[test]
    fn batches_leave_room_for_the_fence() {
        let a: Vec<Action> = (0..250).map(|i| action(i, "aaa", &format!("{i:05}"), Op::Put, 10)).collect();
        let (plan, _) = build_default(&a, 100);
        assert_eq!(plan.batch_count(), 3);
        assert_eq!(plan.actions(0), 0..99);
        assert_eq!(plan.actions(1), 99..198);
        assert_eq!(plan.actions(2), 198..250);
        let (plan, _) = build_default(&a[..99], 100);
        assert_eq!(plan.batch_count(), 1);
        let (plan, _) = build_default(&a[..100], 100);
        assert_eq!(plan.batch_count(), 2);
        let (plan, _) = build_default(&a[..1], 100);
        assert_eq!(plan.batch_count(), 1);
    }

    #[test]
    fn configurable_batch_size() {
        let a: Vec<Action> = (0..10).map(|i| action(i, "aaa", &format!("{i}"), Op::Update, 0)).collect();
        let (plan, _) = build_default(&a, 5);
        assert_eq!(plan.batch_count(), 3);
        assert!((0..3).all(|b| plan.actions(b).len() <= 4));
    }

    #[test]
    fn splits_at_four_megabytes() {
        // 99 puts of 100 KB each would be about 9.7 MB in one call.
        let a: Vec<Action> = (0..99).map(|i| action(i, "aaa", &format!("{i:03}"), Op::Put, 100 * 1024)).collect();
        let (plan, _) = build_default(&a, 100);
        assert!(plan.batch_count() >= 3);
        for b in 0..plan.batch_count() {
            let size: usize = plan.actions(b).map(|i| transact_size(&a[i])).sum();
            assert!(size <= MAX_TRANSACT_BYTES, "batch {b} is {size} bytes");
        }
        // Deletes and condition checks are not part of the apply call and do not count.
        let d: Vec<Action> = (0..99).map(|i| action(i, "aaa", &format!("{i:03}"), Op::Delete, 0)).collect();
        assert_eq!(build_default(&d, 100).0.batch_count(), 1);
    }

    #[test]
    fn pages_round_trip_batches() {
        let a: Vec<Action> = (0..300).map(|i| action(i, "aaa", &format!("{i:05}"), Op::Put, 700)).collect();
        let (plan, stream) = build(&a, 100, MAX_TRANSACT_BYTES, 4 * 1024);
        assert!(plan.page_count() > 10);
        for b in 0..plan.batch_count() {
            let pages = plan.pages(b);
            let start = pages.start * 4 * 1024;
            let end = (pages.end * 4 * 1024).min(stream.len());
            let got = decode_batch(&plan, b, Part::Whole, pages.start, &stream[start..end]).unwrap();
            assert_eq!(got, a[plan.actions(b)].to_vec());
            // The heads alone: fewer pages, the same actions without their items.
            let heads = plan.pages_of(b, Part::Heads);
            let full = plan.actions(b).len() == 99;
            assert!(
                heads.start == pages.start && (heads.end < pages.end || !full && heads.end == pages.end),
                "batch {b}: heads in {heads:?} of {pages:?}"
            );
            let start = heads.start * 4 * 1024;
            let end = (heads.end * 4 * 1024).min(stream.len());
            let got = decode_batch(&plan, b, Part::Heads, heads.start, &stream[start..end]).unwrap();
            let want: Vec<Action> = a[plan.actions(b)].iter().map(|a| Action { item: None, ..a.clone() }).collect();
            assert_eq!(got, want);
        }
        assert_eq!(plan.batch_of(0), 0);
        assert_eq!(plan.batch_of(98), 0);
        assert_eq!(plan.batch_of(99), 1);
        assert_eq!(plan.batch_of(299), 3);
    }

    #[test]
    fn each_put_gets_its_own_item_back_among_other_actions() {
        let ops = [Op::Update, Op::Put, Op::Delete, Op::Put, Op::ConditionCheck];
        let a: Vec<Action> = (0..250).map(|i| action(i, "aaa", &format!("{i:05}"), ops[i * 7 % 5], 300)).collect();
        let (plan, stream) = build(&a, 100, MAX_TRANSACT_BYTES, 1024);
        assert_eq!(plan.items.len(), plan.batch_count());
        for b in 0..plan.batch_count() {
            let pages = plan.pages(b);
            let got = decode_batch(
                &plan,
                b,
                Part::Whole,
                pages.start,
                &stream[pages.start * 1024..(pages.end * 1024).min(stream.len())],
            )
            .unwrap();
            assert_eq!(got, a[plan.actions(b)].to_vec());
        }
        // A batch of no Put has no items part: both reads are the same pages.
        let d: Vec<Action> = (0..10).map(|i| action(i, "aaa", &format!("{i:05}"), Op::Delete, 0)).collect();
        let (plan, stream) = build(&d, 100, MAX_TRANSACT_BYTES, 1024);
        assert_eq!(plan.items, vec![stream.len() as u64]);
        assert_eq!(plan.pages_of(0, Part::Heads), plan.pages(0));
    }

    #[test]
    fn a_plan_from_before_the_parts_were_split_is_read_whole() {
        let a: Vec<Action> = (0..150).map(|i| action(i, "aaa", &format!("{i:05}"), Op::Put, 200)).collect();
        let (plan, _) = build(&a, 100, MAX_TRANSACT_BYTES, 1024);
        let mut stream = Vec::new();
        let mut starts = vec![[0u64, 0u64]];
        for b in 0..plan.batch_count() {
            let mut lines = Vec::new();
            for a in &a[plan.actions(b)] {
                serde_json::to_writer(&mut lines, a).unwrap();
                lines.push(b'\n');
            }
            stream.extend(deflate(&lines));
            starts.push([plan.actions(b).end as u64, stream.len() as u64]);
        }
        let text =
            serde_json::to_string(&serde_json::json!({"starts": starts, "pageBytes": 1024, "deflated": true})).unwrap();
        let old: Plan = serde_json::from_str(&text).unwrap();
        for b in 0..old.batch_count() {
            let pages = old.pages_of(b, Part::Heads);
            assert_eq!(pages, old.pages(b));
            let got = decode_batch(
                &old,
                b,
                Part::Heads,
                pages.start,
                &stream[pages.start * 1024..(pages.end * 1024).min(stream.len())],
            )
            .unwrap();
            assert_eq!(got, a[old.actions(b)].to_vec(), "its actions carry their items");
        }
    }

    #[test]
    fn pages_are_deflated_and_a_plan_from_before_is_read_as_written() {
        let a: Vec<Action> = (0..300).map(|i| action(i, "aaa", &format!("{i:05}"), Op::Put, 700)).collect();
        let json: usize = a.iter().map(|a| serde_json::to_vec(a).unwrap().len() + 1).sum();
        let (plan, stream) = build(&a, 100, MAX_TRANSACT_BYTES, 16 * 1024);
        assert!(plan.deflated);
        assert!(stream.len() * 10 < json * 9, "deflated {} of {json} bytes", stream.len());
        // A plan record of the version before: no `deflated`, batches of plain JSON lines.
        let mut plain = Vec::new();
        let mut starts = vec![[0u64, 0u64]];
        for b in 0..plan.batch_count() {
            for a in &a[plan.actions(b)] {
                serde_json::to_writer(&mut plain, a).unwrap();
                plain.push(b'\n');
            }
            starts.push([plan.actions(b).end as u64, plain.len() as u64]);
        }
        let text = serde_json::to_string(&serde_json::json!({"starts": starts, "pageBytes": 16 * 1024})).unwrap();
        let old: Plan = serde_json::from_str(&text).unwrap();
        assert!(!old.deflated);
        assert!(old.items.is_empty(), "a plan from before the parts were split reads its batches whole");
        for b in 0..old.batch_count() {
            let pages = old.pages(b);
            let got = decode_batch(
                &old,
                b,
                Part::Heads,
                pages.start,
                &plain[pages.start * 16 * 1024..(pages.end * 16 * 1024).min(plain.len())],
            )
            .unwrap();
            assert_eq!(got, a[old.actions(b)].to_vec());
        }
    }
}
