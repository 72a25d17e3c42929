//! Letting go of an item's lock, only while the lock is the one a transaction's attempt holds: the lock attributes
//! removed, an item created to hold the lock deleted, a tombstone or a saved image put back. Every phase that ends
//! a lock (apply, complete, rollback, the visit for late writes, lock meeting its own attempt's leftovers) lets go
//! this way, so a late or repeated release changes nothing.

use aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder;
use aws_sdk_dynamodb::types::AttributeValue;

use crate::constants::{ATTR_APPLIED, ATTR_LOCK, ATTR_LOCKED_AT, ATTR_STONE, ATTR_TRANSIENT};
use crate::dynamo::store::{Meter, Store, Written};
use crate::error::TxError;
use crate::model::item_attrs::{lock_holder, ph, LockId};
use crate::model::request::Action;
use crate::model::value::{s, Item};

/// How a transaction lets go of one item.
#[derive(Debug, Clone)]
pub(crate) enum Release {
    /// Remove the lock attributes; delete the item instead if it exists only to hold the lock.
    Keep,
    /// Delete the item (a committed `Delete`, or rolling back an item the transaction created); an item locked in
    /// place of a tombstone gets its tombstone back.
    Delete,
    /// Put the saved image back (rolling back an item that existed).
    Restore(Item),
    /// Unlock a committed `Delete`'s tombstone and give it its time to live (attribute, epoch seconds).
    Expire(String, AttributeValue),
}

/// Lets go of one item, only while `owner` (an attempt's lock value) holds it: a late or repeated release changes
/// nothing.
pub(crate) async fn release_item(
    store: &Store,
    m: &Meter,
    owner: &str,
    a: &Action,
    how: Release,
) -> Result<(), TxError> {
    release_key(store, m, owner, &a.table, &a.key, how, None).await.map(|_| ())
}

/// `REMOVE` of every attribute a lock leaves on an item, with their names: what Keep and Expire share.
fn unlock_clause(req: UpdateItemFluentBuilder) -> (UpdateItemFluentBuilder, String) {
    let (clause, names) = unlock_parts();
    let req = names.iter().fold(req, |req, (p, n)| req.expression_attribute_names(*p, *n));
    (req, clause)
}

/// The clause that removes the lock attributes, and the names it uses.
pub(crate) fn unlock_parts() -> (String, [(&'static str, &'static str); 5]) {
    let clause = format!("REMOVE {}, {}, {}, {}, {}", ph::LOCK, ph::LOCKED_AT, ph::TRANSIENT, ph::APPLIED, ph::STONE);
    let names = [
        (ph::LOCK, ATTR_LOCK),
        (ph::LOCKED_AT, ATTR_LOCKED_AT),
        (ph::TRANSIENT, ATTR_TRANSIENT),
        (ph::APPLIED, ATTR_APPLIED),
        (ph::STONE, ATTR_STONE),
    ];
    (clause, names)
}

/// The condition that `owner` holds an item's lock (`ph::TX` its value), and when `id` is given, the lock that carries
/// that id (`ph::LOCK_ID`; see [`crate::model::item_attrs::LockId`]).
pub(crate) fn held_condition(id: Option<LockId>) -> String {
    match id {
        Some(_) => format!("{} = {} AND {} = {}", ph::LOCK, ph::TX, ph::LOCKED_AT, ph::LOCK_ID),
        None => format!("{} = {}", ph::LOCK, ph::TX),
    }
}

/// The names and values [`held_condition`] uses.
fn held_values<B: HeldValues>(req: B, owner: &str, id: Option<LockId>) -> B {
    let req = req.held_name(ph::LOCK, ATTR_LOCK).held_value(ph::TX, s(owner));
    match id {
        Some(id) => {
            req.held_name(ph::LOCKED_AT, ATTR_LOCKED_AT).held_value(ph::LOCK_ID, AttributeValue::N(id.number()))
        }
        None => req,
    }
}

/// The request builders [`held_values`] adds names and values to.
trait HeldValues: Sized {
    fn held_name(self, placeholder: &str, name: &str) -> Self;
    fn held_value(self, placeholder: &str, value: AttributeValue) -> Self;
}

macro_rules! held_values_for {
    ($($builder:ty),*) => {$(
        impl HeldValues for $builder {
            fn held_name(self, placeholder: &str, name: &str) -> Self {
                self.expression_attribute_names(placeholder, name)
            }
            fn held_value(self, placeholder: &str, value: AttributeValue) -> Self {
                self.expression_attribute_values(placeholder, value)
            }
        }
    )*};
}

held_values_for!(
    UpdateItemFluentBuilder,
    aws_sdk_dynamodb::operation::put_item::builders::PutItemFluentBuilder,
    aws_sdk_dynamodb::operation::delete_item::builders::DeleteItemFluentBuilder
);

/// [`release_item`] by table and key; with `id`, only the lock that carries that id (see
/// [`crate::model::item_attrs::LockId`]). Returns the item as it was when it did not hold that lock (`None`: released,
/// or absent).
pub(crate) async fn release_key(
    store: &Store,
    m: &Meter,
    owner: &str,
    table: &str,
    key: &Item,
    how: Release,
    id: Option<LockId>,
) -> Result<Option<Item>, TxError> {
    let c = &store.client;
    let held = held_condition(id);
    // The lock it is: the item holds it, with `id` when given.
    let this_lock = |old: &Item| lock_holder(old) == Some(owner) && id.is_none_or(|id| LockId::of(old) == Some(id));
    let written = match how {
        Release::Keep => {
            let (req, unlock) = unlock_clause(c.update_item().table_name(table).set_key(Some(key.clone())));
            let req = held_values(req, owner, id).update_expression(unlock).condition_expression(format!(
                "{held} AND (attribute_not_exists({}) OR attribute_exists({}))",
                ph::TRANSIENT,
                ph::APPLIED
            ));
            match store.update(m, req).await? {
                // Created only to hold the lock and never written: it must not outlive the transaction.
                Written::ConditionFailed(Some(old)) if this_lock(&old) => {
                    return Box::pin(release_key(store, m, owner, table, key, Release::Delete, id)).await
                }
                w => w,
            }
        }
        Release::Delete => {
            let req = held_values(c.delete_item().table_name(table).set_key(Some(key.clone())), owner, id)
                .condition_expression(format!("{held} AND attribute_not_exists({})", ph::STONE))
                .expression_attribute_names(ph::STONE, ATTR_STONE);
            match store.delete(m, req).await? {
                Written::ConditionFailed(Some(old)) if this_lock(&old) => match old.get(ATTR_STONE) {
                    // The item stood in for a tombstone: deleting it leaves the tombstone.
                    Some(AttributeValue::M(stone)) => {
                        let restore = Release::Restore(stone.clone());
                        return Box::pin(release_key(store, m, owner, table, key, restore, id)).await;
                    }
                    _ => Written::ConditionFailed(Some(old)),
                },
                w => w,
            }
        }
        Release::Expire(attr, at) => {
            let (req, unlock) = unlock_clause(c.update_item().table_name(table).set_key(Some(key.clone())));
            let req = held_values(req, owner, id)
                .update_expression(format!("SET #_sagaTtl = :_sagaTtl {unlock}"))
                .condition_expression(held)
                .expression_attribute_names("#_sagaTtl", attr)
                .expression_attribute_values(":_sagaTtl", at);
            match store.update(m, req).await {
                Ok(w) => w,
                // The table's indexes refuse the time to live (an index key of another type): a tombstone that never
                // expires is better than a committed transaction that cannot finish.
                Err(TxError::DynamoDb { message, .. }) if message.starts_with("ValidationException") => {
                    tracing::warn!(owner, table, %message, "the tombstone's time to live was refused; it is kept without one");
                    return Box::pin(release_key(store, m, owner, table, key, Release::Keep, id)).await;
                }
                Err(e) => return Err(e),
            }
        }
        Release::Restore(item) => put_held(store, m, owner, table, item, id).await?,
    };
    Ok(match written {
        Written::Done(_) => None,
        Written::ConditionFailed(old) => old,
    })
}

/// Puts `item` in place of the one `owner` (an attempt's lock value) holds, with `id` when given; nothing when it no
/// longer holds it.
pub(crate) async fn put_held(
    store: &Store,
    m: &Meter,
    owner: &str,
    table: &str,
    item: Item,
    id: Option<LockId>,
) -> Result<Written, TxError> {
    let req = held_values(store.client.put_item().table_name(table).set_item(Some(item)), owner, id)
        .condition_expression(held_condition(id));
    store.put(m, req).await
}
