//! The write that applies an update action and unlocks its item: apply sends it, and lock has DynamoDB judge it
//! before the commit, exactly as apply will send it.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::{AttributeValue, TransactWriteItem, Update};
use dynamo_saga_expressions::expr::{self, ClauseKind};

use super::{ph, used};
use crate::constants::ATTR_WRITTEN_BY;
use crate::error::TxError;
use crate::model::item_attrs::LockId;
use crate::model::request::Action;
use crate::model::value::{s, Item};
use crate::protocol::records;
use crate::protocol::unlock::{held_condition, unlock_parts};

/// The write that applies update action `a` and unlocks its item while `owner` (an attempt's lock value) holds it
/// with the lock that carries `id` (when known): the caller's update with the lock attributes removed and, where
/// DynamoDB takes it, the transaction's id set in [`ATTR_WRITTEN_BY`], conditioned on the lock. Apply sends it; lock has DynamoDB judge it
/// first ([`judged_write`]).
pub(crate) struct UpdateWrite {
    pub(crate) update: String,
    pub(crate) condition: String,
    pub(crate) names: HashMap<String, String>,
    pub(crate) values: Item,
}

impl UpdateWrite {
    /// With `stamp`, the update also sets the transaction's id; without, it is the caller's update and the lock's
    /// removal alone, which apply sends when DynamoDB refuses the stamped one (an item or expression near a limit).
    pub(crate) fn of(a: &Action, owner: &str, id: Option<LockId>, stamp: bool) -> Result<UpdateWrite, TxError> {
        let caller = a.update.as_deref().unwrap_or_default();
        let parsed = expr::parse_update(caller).map_err(|e| TxError::Internal(format!("stored update: {e}")))?;
        let (mut names, mut values) = used(a, &parsed.refs);
        let (unlock, unlock_names) = unlock_parts();
        names.extend(unlock_names.iter().map(|(p, n)| (p.to_string(), n.to_string())));
        values.insert(ph::TX.into(), s(owner));
        if let Some(id) = id {
            values.insert(ph::LOCK_ID.into(), AttributeValue::N(id.number()));
        }
        let mut update = expr::add_actions(caller, ClauseKind::Remove, unlock.trim_start_matches("REMOVE "))
            .map_err(|e| TxError::Internal(format!("stored update: {e}")))?;
        if stamp {
            update = expr::add_actions(&update, ClauseKind::Set, &written_by_clause())
                .map_err(|e| TxError::Internal(format!("stored update: {e}")))?;
            names.insert(ph::WRITTEN_BY.into(), ATTR_WRITTEN_BY.into());
            values.insert(ph::WRITTEN_BY_ID.into(), s(records::parse_owner(owner).0));
        }
        Ok(UpdateWrite { update, condition: held_condition(id), names, values })
    }
}

/// The clause that sets [`ATTR_WRITTEN_BY`] (`ph::WRITTEN_BY_ID` the transaction's id).
pub(crate) fn written_by_clause() -> String {
    format!("{} = {}", ph::WRITTEN_BY, ph::WRITTEN_BY_ID)
}

/// The update expression apply sends for update action `a` when DynamoDB refuses it with the transaction's id: the
/// caller's, with the lock attributes removed. The room the protocol needs is the room for this one.
pub(crate) fn applied_update_expression(a: &Action) -> Result<String, TxError> {
    UpdateWrite::of(a, "", None, false).map(|w| w.update)
}

/// Update action `a`'s apply write, as one action of a `TransactWriteItems` call, for DynamoDB to judge before the
/// commit ([`crate::protocol::judge`]) as apply sends it when it refuses it with the transaction's id.
pub(crate) fn judged_write(a: &Action, owner: &str, id: Option<LockId>) -> Result<TransactWriteItem, TxError> {
    let w = UpdateWrite::of(a, owner, id, false)?;
    let update = Update::builder()
        .table_name(&a.table)
        .set_key(Some(a.key.clone()))
        .update_expression(w.update)
        .condition_expression(w.condition)
        .set_expression_attribute_names(Some(w.names))
        .set_expression_attribute_values(Some(w.values))
        .build()
        .map_err(|e| TxError::Internal(e.to_string()))?;
    Ok(TransactWriteItem::builder().update(update).build())
}
