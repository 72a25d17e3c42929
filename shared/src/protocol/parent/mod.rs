//! The parent lock's upkeep (the DynamoDB Lock Client's lease and record version number): the heartbeat a transaction
//! beats on its parent item while it holds it, and the release of the parent and of its place in the parent's queue
//! ([`super::queue`]).

use aws_sdk_dynamodb::types::AttributeValue;

use crate::model::item_attrs::ph;

pub mod queue;
use crate::constants::{PARENT_LEASE, PARENT_LOCKED_AT, PARENT_LOCK_TOKEN, PARENT_RVN};
use crate::error::TxError;
use crate::protocol::records::{self, Header};
use aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder;

use crate::dynamo::store::{Meter, Store};
use crate::model::request::{Action, Parent};
use crate::model::value::{n, s};

/// `req` with the names of the parent lock's four attributes (token, time, lease, record version number).
pub(crate) fn parent_lock_names(req: UpdateItemFluentBuilder) -> UpdateItemFluentBuilder {
    req.expression_attribute_names(ph::PARENT_TOKEN, PARENT_LOCK_TOKEN)
        .expression_attribute_names(ph::PARENT_AT, PARENT_LOCKED_AT)
        .expression_attribute_names(ph::PARENT_LEASE, PARENT_LEASE)
        .expression_attribute_names(ph::PARENT_RVN, PARENT_RVN)
}

/// Lets go of the parent lock (token, time, lease and record version number) while `holder` (an attempt's lock
/// value) holds it.
pub(crate) async fn unlock_parent(store: &Store, m: &Meter, p: &Parent, holder: &str) -> Result<(), TxError> {
    let req = store
        .client
        .update_item()
        .table_name(&p.table_name)
        .set_key(Some(p.key.clone()))
        .update_expression(format!(
            "REMOVE {}, {}, {}, {}",
            ph::PARENT_TOKEN,
            ph::PARENT_AT,
            ph::PARENT_LEASE,
            ph::PARENT_RVN
        ))
        .condition_expression(format!("{} = {}", ph::PARENT_TOKEN, ph::TX))
        .expression_attribute_values(ph::TX, s(holder));
    let req = parent_lock_names(req);
    store.update(m, req).await.map(|_| ())
}

/// Lets go of `h`'s attempt's place in its parent's queue and of the parent lock, when it has a parent.
pub(crate) async fn release_parent(store: &Store, m: &Meter, h: &Header) -> Result<(), TxError> {
    let Some(p) = &h.parent else { return Ok(()) };
    queue::leave(store, m, h).await?;
    unlock_parent(store, m, p, &h.owner()).await
}

/// A new record version number for the parent item: random, and small enough to survive a JSON number in the state
/// machine (53 bits).
pub(crate) fn new_rvn() -> AttributeValue {
    n((ulid::Ulid::new().random() as u64) & ((1 << 53) - 1))
}

/// The lock client's heartbeat on the parent item: a new record version number, only while `h`'s attempt holds the
/// parent (a transaction not holding it yet, or that lost it, writes nothing).
pub async fn beat_parent(store: &Store, m: &Meter, h: &Header) -> Result<(), TxError> {
    renew_parent(store, m, h, None).await.map(|_| ())
}

/// Seals the parent lock before a commit sent without `TransactWriteItems` (multi-Region strongly consistent tables):
/// a new record version number and a lease of [`sealed_lease`] seconds, only while `h`'s attempt holds the parent.
/// A waiter, this protocol's or the DynamoDB Lock Client's, takes a lock over only once its record version number has
/// stayed the same for the whole lease the lock item names, so none can take the parent between this write and a
/// commit first sent within the lock's ordinary lease after it: such a commit lands inside the sealed lease. False
/// when the parent is no longer `h`'s.
pub(crate) async fn seal_parent(store: &Store, m: &Meter, h: &Header) -> Result<bool, TxError> {
    renew_parent(store, m, h, Some(sealed_lease(&store.cfg))).await
}

/// A new record version number on `h`'s parent, and with `lease` a new lease (seconds), only while `h`'s attempt holds
/// it. False when the parent is no longer `h`'s; true with no parent.
async fn renew_parent(store: &Store, m: &Meter, h: &Header, lease: Option<u64>) -> Result<bool, TxError> {
    let Some(p) = &h.parent else { return Ok(true) };
    let req = store
        .client
        .update_item()
        .table_name(&p.table_name)
        .set_key(Some(p.key.clone()))
        .condition_expression(format!("{} = {}", ph::PARENT_TOKEN, ph::TX))
        .expression_attribute_names(ph::PARENT_TOKEN, PARENT_LOCK_TOKEN)
        .expression_attribute_names(ph::PARENT_RVN, PARENT_RVN)
        .expression_attribute_values(ph::TX, s(h.owner()))
        .expression_attribute_values(ph::RVN, new_rvn());
    let req = match lease {
        None => req.update_expression(format!("SET {} = {}", ph::PARENT_RVN, ph::RVN)),
        Some(secs) => req
            .update_expression(format!("SET {} = {}, {} = {}", ph::PARENT_RVN, ph::RVN, ph::PARENT_LEASE, ph::LEASE))
            .expression_attribute_names(ph::PARENT_LEASE, PARENT_LEASE)
            .expression_attribute_values(ph::LEASE, n(secs)),
    };
    Ok(matches!(store.update(m, req).await?, crate::dynamo::store::Written::Done(_)))
}

/// The lease, in seconds, a sealed parent lock names ([`seal_parent`]): the ordinary lease, within which the commit
/// is first sent, the operation timeout, within which the SDK may send it again, and the revisit bound, within which
/// a sent write lands.
pub(crate) fn sealed_lease(cfg: &crate::config::Config) -> u64 {
    cfg.lease.as_secs() + cfg.operation_timeout.as_secs() + cfg.revisit_after.as_secs()
}

/// A transaction that is alive but not moving (waiting for a lock, or holding a read lock) tells waiters so: a new
/// header version, and when it holds a parent a new record version number on it, or when it waits for one a
/// refreshed queue row. False when `h` is no longer pending.
pub async fn heartbeat(store: &Store, m: &Meter, h: &Header) -> Result<bool, TxError> {
    if !records::update_header(store, m, &h.id, records::Expect::at(h), &[], None, &m.usage()).await? {
        return Ok(false);
    }
    beat_parent(store, m, h).await?;
    queue::refresh(store, m, h).await?;
    Ok(true)
}

/// Whether action `a` writes the parent item itself.
pub(crate) fn same_item(p: &Parent, a: &Action) -> bool {
    p.table_name == a.table && p.key == a.key
}
