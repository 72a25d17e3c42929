//! dynamo-saga's attributes on the callers' own items: an item's lock, its flags, a parent lock, and the item without
//! them.

use aws_sdk_dynamodb::types::AttributeValue;

use crate::constants::*;
use crate::value::Item;

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
