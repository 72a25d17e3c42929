//! The one-call path: a request one `TransactWriteItems` call can carry, carried out in that call, at native price and
//! latency.
//!
//! A request qualifies when it has fewer than 100 actions (the header takes the last place) within DynamoDB's 4 MB,
//! and needs nothing beyond native: no `Parent`, no tombstone, no ratchet. The call holds every action as the caller
//! wrote it, each with the condition that the item is neither locked by a transaction of the protocol nor a
//! tombstone, and the transaction's header, written already finished: `COMMITTED`, or nothing at all when DynamoDB
//! cancels the call. So the request is all-or-nothing by DynamoDB's own transaction, and `status` and
//! `ClientRequestToken` see it as any other.
//!
//! When the call is cancelled, the reasons say why. An action whose item is locked or is a tombstone met another
//! transaction, which is contention, not the caller's failure: nothing was written, and the request is begun as the
//! protocol begins it, to wait for that transaction. The same goes for a conflict with a transaction DynamoDB was
//! running, and for a call DynamoDB refuses as a whole (the protocol finds the action to blame). Otherwise the
//! cancellation is the caller's, exactly as native reports it: the header is written `ROLLED_BACK`, finished, with
//! those reasons. A header already there means a driver that ran before carried the request out: it is returned.

use aws_sdk_dynamodb::types::{
    ConditionCheck, Delete, Put, ReturnValuesOnConditionCheckFailure, TransactWriteItem, Update,
};
use tracing::info;

use crate::constants::{
    ATTR_EXPIRES_AT, ATTR_LOCK, ATTR_TOMBSTONE, ATTR_WRITTEN_BY, H_BATCHES, H_DECIDED_AT, H_FINISHED_AT, H_PAGES,
    H_REASONS, H_STATE, MAX_ITEM_BYTES, MAX_TRANSACT_ACTIONS, MAX_TRANSACT_BYTES, TX_PK, WRITTEN_BY_BYTES,
};
use crate::dynamo::store::{Meter, Store, Transacted};
use crate::error::{CancellationReason, TxError};
use crate::model::item_attrs::{ph, strip_reserved};
use crate::model::request::{Action, Op, ValidRequest, RATCHET_NAME};
use crate::model::value::{self, item_to_json, Item};
use crate::model::value::{n, now_ms, s};
use crate::protocol::phase::writes::written_by_clause;
use crate::protocol::records::{self, Decision, TxState};
use dynamo_saga_expressions::expr;

/// Room left in the call's 4 MB for the header and the conditions this module adds.
const HEADER_ROOM_BYTES: usize = 64 * 1024;

/// Whether `valid` can be carried out in one call.
pub fn eligible(valid: &ValidRequest) -> bool {
    valid.parent.is_none()
        && valid.actions.len() < MAX_TRANSACT_ACTIONS
        && valid.actions.iter().all(|a| a.tombstone.is_none() && !a.names.contains_key(RATCHET_NAME))
        && valid.actions.iter().map(crate::model::plan::transact_size).sum::<usize>()
            <= MAX_TRANSACT_BYTES - HEADER_ROOM_BYTES
}

/// What one call came to.
pub(crate) enum Direct {
    /// Carried out: `COMMITTED`, or `ROLLED_BACK` with the caller's reasons; finished either way. The header written.
    Ended(Box<records::Header>),
    /// A driver that ran before carried the request out: its header.
    Existing(Box<records::Header>),
    /// Nothing was written (another transaction's lock or tombstone, a conflict, a call refused as a whole): the
    /// protocol must run it.
    Protocol,
}

/// Carries out `valid`, transaction `tx_id`, in one call with `header` (the attributes every header has).
pub(crate) async fn run(
    store: &Store,
    m: &Meter,
    tx_id: &str,
    valid: &ValidRequest,
    mut header: Item,
) -> Result<Direct, TxError> {
    let mut actions: Vec<&Action> = valid.actions.iter().collect();
    actions.sort_by_key(|a| a.index);
    finish(store, m, &mut header);
    let mut items = actions.iter().map(|a| write_item(a, true, Some(tx_id))).collect::<Result<Vec<_>, _>>()?;
    items.push(header_put(store, header.clone())?);
    let req = store.client.transact_write_items().set_transact_items(Some(items));
    let reasons = match store.transact(m, req).await? {
        Transacted::Done => {
            info!(tx_id = %tx_id, actions = actions.len(), "committed in one TransactWriteItems call");
            return Ok(Direct::Ended(Box::new(records::Header::from_item(&header)?)));
        }
        Transacted::Rejected(message) => return refused_as_a_whole(store, m, tx_id, &actions, header, message).await,
        // Reasons that cannot be matched to the actions (DynamoDB Local lists a refused action's reason alone) are
        // a refusal to find, as one of the whole call is.
        Transacted::Canceled(reasons) if reasons.len() != actions.len() + 1 => {
            let message = reasons.iter().find_map(|r| r.1.clone()).unwrap_or_default();
            return refused_as_a_whole(store, m, tx_id, &actions, header, message).await;
        }
        Transacted::Canceled(reasons) => reasons,
    };
    if reasons.get(actions.len()).is_some_and(|r| r.0 == CancellationReason::CONDITIONAL_CHECK_FAILED) {
        return Ok(Direct::Existing(Box::new(records::read_header(store, m, tx_id).await?)));
    }
    let mut failed = Vec::new();
    for (a, (code, message, item)) in actions.iter().zip(&reasons) {
        match code.as_str() {
            CancellationReason::NONE => {}
            CancellationReason::CONDITIONAL_CHECK_FAILED
                if item.as_ref().is_some_and(|i| i.contains_key(ATTR_LOCK) || i.contains_key(ATTR_TOMBSTONE)) =>
            {
                info!(tx_id = %tx_id, action = a.index, "the item is another transaction's: the protocol runs the request");
                return Ok(Direct::Protocol);
            }
            CancellationReason::CONDITIONAL_CHECK_FAILED | CancellationReason::VALIDATION_ERROR => {
                let message = message.clone().filter(|m| !m.is_empty()).unwrap_or_else(|| match code.as_str() {
                    CancellationReason::CONDITIONAL_CHECK_FAILED => CancellationReason::CONDITION_FAILED_MESSAGE.into(),
                    _ => format!("DynamoDB refused {}", a.describe()),
                });
                let mut r = CancellationReason { code: code.clone(), message: Some(message), item: None };
                if a.return_old && code == CancellationReason::CONDITIONAL_CHECK_FAILED {
                    r.item = item.clone().map(|i| item_to_json(&strip_reserved(i)));
                }
                failed.push((a.index, r));
            }
            _ => {
                info!(tx_id = %tx_id, action = a.index, code, "one TransactWriteItems call was cancelled: the protocol runs the request");
                return Ok(Direct::Protocol);
            }
        }
    }
    if failed.is_empty() {
        return Ok(Direct::Protocol);
    }
    info!(tx_id = %tx_id, failed = failed.len(), "cancelled in one TransactWriteItems call");
    cancelled(store, m, tx_id, header, failed).await
}

/// DynamoDB refused the call as a whole: an answer about the request, never a reason to carry it out another way.
/// DynamoDB is asked about the caller's actions alone, as the caller wrote them ([`crate::protocol::judge`]): those it
/// refuses cancel the transaction with `ValidationError`, named, as `TransactWriteItems` names them; actions it refuses
/// only together are the request's fault, a `ValidationError` for the request. Only when it accepts them all was the
/// refusal about what this module adds (the guard, the header), and the protocol runs the request.
async fn refused_as_a_whole(
    store: &Store,
    m: &Meter,
    tx_id: &str,
    actions: &[&Action],
    header: Item,
    message: String,
) -> Result<Direct, TxError> {
    let writes =
        actions.iter().map(|a| Ok((a.index, write_item(a, false, None)?))).collect::<Result<Vec<_>, TxError>>()?;
    let verdict = crate::protocol::judge::judge(store, m, tx_id, writes).await?;
    if let Some(together) = verdict.together.filter(|_| verdict.refused.is_empty()) {
        return Err(TxError::invalid(None, format!("DynamoDB refused the request as a whole: {together}")));
    }
    if verdict.refused.is_empty() {
        info!(tx_id = %tx_id, %message, "refused only with dynamo-saga's guard and header: the protocol runs the request");
        return Ok(Direct::Protocol);
    }
    info!(tx_id = %tx_id, refused = verdict.refused.len(), "DynamoDB refused actions of the request: cancelled");
    let failed = verdict
        .refused
        .into_iter()
        .map(|(index, message)| {
            let a = actions.iter().find(|a| a.index == index).map(|a| a.describe()).unwrap_or_default();
            (index, CancellationReason::new(CancellationReason::VALIDATION_ERROR, format!("{a}: {message}")))
        })
        .collect();
    cancelled(store, m, tx_id, header, failed).await
}

/// Makes `header` (the attributes every header has) the header of a transaction that ends in this call, `COMMITTED`
/// until [`cancelled`] says otherwise: finished, with no batches or pages, and the usage so far.
pub(crate) fn finish(store: &Store, m: &Meter, header: &mut Item) {
    let now = now_ms();
    for (k, v) in [
        (H_STATE, s(TxState::Committed.as_str())),
        (H_BATCHES, n(0)),
        (H_PAGES, n(0)),
        (H_FINISHED_AT, n(now)),
        (ATTR_EXPIRES_AT, n(now / 1000 + store.cfg.retention.as_secs())),
    ] {
        header.insert(k.to_string(), v);
    }
    records::stamp_usage(header, m);
}

/// Writes the [`finish`]ed `header` `ROLLED_BACK` with the caller's reasons, `failed` (request index, reason):
/// nothing else was written. A header already there is returned instead.
pub(crate) async fn cancelled(
    store: &Store,
    m: &Meter,
    tx_id: &str,
    mut header: Item,
    failed: Vec<(usize, CancellationReason)>,
) -> Result<Direct, TxError> {
    let decision = Decision::actions(failed);
    header.insert(H_STATE.into(), s(TxState::RolledBack.as_str()));
    header.insert(H_REASONS.into(), s(serde_json::to_string(&decision).expect("decisions serialise")));
    header.insert(H_DECIDED_AT.into(), n(now_ms()));
    let written = records::Header::from_item(&header)?;
    if !records::put_header(store, m, header).await? {
        return Ok(Direct::Existing(Box::new(records::read_header(store, m, tx_id).await?)));
    }
    Ok(Direct::Ended(Box::new(written)))
}

fn header_put(store: &Store, header: Item) -> Result<TransactWriteItem, TxError> {
    let put = Put::builder()
        .table_name(&store.cfg.tx_table)
        .set_item(Some(header))
        .condition_expression("attribute_not_exists(#id)")
        .expression_attribute_names("#id", TX_PK)
        .build()
        .map_err(|e| TxError::Internal(e.to_string()))?;
    Ok(TransactWriteItem::builder().put(put).build())
}

/// The caller's action as native takes it; `guarded`, with the condition that no transaction of the protocol holds
/// the item and that it is not a tombstone, and the item back when a condition fails, to tell the two apart; with
/// `stamp`, a `Put`'s or an `Update`'s item marked written by that transaction ([`ATTR_WRITTEN_BY`]). A `Put` of an
/// item the id would take past 400 KB, or an update expression its clause would take past DynamoDB's limits, is sent
/// as written, without it: a snapshot read then sees that write only by what it changes, as a write outside the
/// protocol. (Where DynamoDB refuses an item only with the id, near a local index's share of 400 KB or by an update's
/// result, it refuses the call, and the protocol runs the request: apply writes such an item without the id.)
pub(crate) fn write_item(a: &Action, guarded: bool, stamp: Option<&str>) -> Result<TransactWriteItem, TxError> {
    let mut names = a.names.clone();
    let mut values = a.values.clone();
    let mut update = a.update.clone().unwrap_or_default();
    let mut item = a.item.clone();
    if let Some(tx_id) = stamp {
        match a.op {
            Op::Put => {
                if let Some(item) = item.as_mut().filter(|i| value::item_size(i) + WRITTEN_BY_BYTES <= MAX_ITEM_BYTES) {
                    item.insert(ATTR_WRITTEN_BY.into(), s(tx_id));
                }
            }
            Op::Update => {
                if let Ok(stamped) = expr::add_actions(&update, expr::ClauseKind::Set, &written_by_clause()) {
                    update = stamped;
                    names.insert(ph::WRITTEN_BY.into(), ATTR_WRITTEN_BY.into());
                    values.insert(ph::WRITTEN_BY_ID.into(), s(tx_id));
                }
            }
            Op::Delete | Op::ConditionCheck => {}
        }
    }
    let cond = if guarded {
        names.insert(ph::LOCK.into(), ATTR_LOCK.into());
        names.insert(ph::TOMBSTONE.into(), ATTR_TOMBSTONE.into());
        let own = format!("attribute_not_exists({}) AND attribute_not_exists({})", ph::LOCK, ph::TOMBSTONE);
        Some(match &a.condition {
            Some(c) => expr::and(&own, c),
            None => own,
        })
    } else {
        a.condition.clone()
    };
    let names = (!names.is_empty()).then_some(names);
    let values = (!values.is_empty()).then_some(values);
    let old = if guarded || a.return_old {
        ReturnValuesOnConditionCheckFailure::AllOld
    } else {
        ReturnValuesOnConditionCheckFailure::None
    };
    let internal = |e: aws_sdk_dynamodb::error::BuildError| TxError::Internal(e.to_string());
    // The same guard on each kind of action; the SDK's builders share no trait.
    macro_rules! guarded {
        ($builder:expr) => {
            $builder
                .table_name(&a.table)
                .set_condition_expression(cond)
                .set_expression_attribute_names(names)
                .set_expression_attribute_values(values)
                .return_values_on_condition_check_failure(old)
                .build()
                .map_err(internal)?
        };
    }
    let b = TransactWriteItem::builder();
    Ok(match a.op {
        Op::Put => {
            let item = item.ok_or_else(|| TxError::Internal(format!("{} has no item", a.describe())))?;
            b.put(guarded!(Put::builder().set_item(Some(item))))
        }
        Op::Update => b.update(guarded!(Update::builder().set_key(Some(a.key.clone())).update_expression(update))),
        Op::Delete => b.delete(guarded!(Delete::builder().set_key(Some(a.key.clone())))),
        Op::ConditionCheck => b.condition_check(guarded!(ConditionCheck::builder().set_key(Some(a.key.clone())))),
    }
    .build())
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use serde_json::{json, Value};

    use super::eligible;
    use crate::model::request;
    use crate::model::schema::TableSchema;
    use crate::Config;

    fn valid(body: Value) -> crate::model::request::ValidRequest {
        let s = TableSchema { key_names: vec!["pk".into()], key_types: vec!["S".into()], index_keys: Vec::new() };
        let schemas = HashMap::from([("Items".to_string(), s)]);
        request::validate(request::parse(&body, &Config::new("tx")).unwrap(), &schemas).unwrap()
    }

    fn updates(n: usize) -> Vec<Value> {
        (0..n)
            .map(|i| json!({"Update": {"TableName": "Items", "Key": {"pk": {"S": format!("k{i}")}}, "UpdateExpression": "SET v = :v",
                "ExpressionAttributeValues": {":v": {"N": "1"}}}}))
            .collect()
    }

    #[test]
    fn fewer_than_100_actions_with_nothing_beyond_native_go_in_one_call() {
        assert!(eligible(&valid(json!({"TransactItems": updates(1)}))));
        assert!(
            eligible(&valid(json!({"TransactItems": updates(99), "ClientRequestToken": "t"}))),
            "99 and the header"
        );
        assert!(!eligible(&valid(json!({"TransactItems": updates(100)}))), "no place left for the header");
        let parent = json!({"TransactItems": updates(2), "Parent": {"TableName": "Items", "Key": {"pk": {"S": "p"}}}});
        assert!(!eligible(&valid(parent)), "a Parent");
        let mut items = updates(2);
        items.push(json!({"Put": {"TableName": "Items", "Item": {"pk": {"S": "r"}, "ts": {"N": "5"}}, "Ratchet": {"AttributeName": "ts"}}}));
        assert!(!eligible(&valid(json!({"TransactItems": items}))), "a Ratchet");
        let mut items = updates(2);
        items.push(json!({"Delete": {"TableName": "Items", "Key": {"pk": {"S": "d"}},
            "Tombstone": {"Attributes": {"ts": {"N": "5"}}, "TimeToLiveAttribute": "expiresAt", "TimeToLiveSeconds": 60}}}));
        assert!(!eligible(&valid(json!({"TransactItems": items}))), "a tombstone");
        let big = "x".repeat(300 * 1024);
        let items: Vec<Value> = (0..14)
            .map(|i| json!({"Put": {"TableName": "Items", "Item": {"pk": {"S": format!("b{i}")}, "v": {"S": big}}}}))
            .collect();
        assert!(!eligible(&valid(json!({"TransactItems": items}))), "over 4 MB with the header");
    }
}
