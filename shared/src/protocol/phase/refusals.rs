//! What DynamoDB would refuse of a request's actions whatever the items they meet, judged from the request alone:
//! begin checks it before anything is written, and save checks a transaction begun before begin did.

use crate::config::PrecommitCheck;
use crate::dynamo::store::{Meter, Store};
use crate::error::{CancellationReason, TxError};
use crate::model::request::Op;
use crate::model::value::Item;
use crate::protocol::one_call;

/// The actions DynamoDB would refuse whatever the items they meet, from the request alone: each `Put`'s item and
/// each tombstone a `Delete` leaves as a whole new item ([`dynamo_saga_expressions::eval::check_item`]: size, names,
/// nesting, index keys), each update as far as it can be judged without its item
/// ([`dynamo_saga_expressions::eval::check_update`]), and the room each expression leaves for what the protocol adds.
/// `ValidationError` on each such action, as `TransactWriteItems` reports them. With `judge_puts`, a `Put` the
/// pre-commit check covers ([`crate::config::PrecommitCheck`]) is then judged by DynamoDB itself as apply writes it
/// when DynamoDB refuses it with the transaction's id ([`crate::constants::ATTR_WRITTEN_BY`]), which needs no item for it. The request is in hand here, so the protocol's phases never read these items to check them.
pub(crate) async fn refused_items<'a>(
    store: &Store,
    m: &Meter,
    tx_id: &str,
    actions: impl IntoIterator<Item = &'a crate::model::request::Action>,
    judge_puts: bool,
) -> Result<Vec<(usize, CancellationReason)>, TxError> {
    let mut refused = Vec::new();
    // Puts for DynamoDB itself to judge: whether it accepts one does not depend on the item it replaces.
    let mut judge = Vec::new();
    for a in actions {
        let checked = match (&a.op, &a.item, &a.tombstone) {
            (Op::Put, Some(item), _) => Checked::Item(std::borrow::Cow::Borrowed(item)),
            (Op::Delete, _, Some(t)) => Checked::Item(std::borrow::Cow::Owned(t.item(&a.key, tx_id))),
            (Op::Update, _, _) => Checked::Update,
            _ if a.condition.is_some() => Checked::Condition,
            _ => continue,
        };
        let schema = store.schema(m, &a.table).await?;
        let verdict = match checked {
            Checked::Item(item) => {
                let verdict = dynamo_saga_expressions::eval::check_item(&item, &schema.key_types());
                let ask = match store.cfg.judged() {
                    PrecommitCheck::All => true,
                    PrecommitCheck::NearLimits => {
                        dynamo_saga_expressions::eval::near_limits(&item, &schema.key_types())
                    }
                    PrecommitCheck::Off => false,
                };
                if verdict.is_ok() && ask && judge_puts && a.op == Op::Put {
                    judge.push((a.index, one_call::write_item(a, false, None)?, a.describe()));
                }
                verdict
            }
            Checked::Update => super::check_update(a, &schema),
            Checked::Condition => Ok(()),
        };
        let verdict = verdict.and_then(|_| {
            super::check_room(a).map_err(|message| dynamo_saga_expressions::eval::EvalError {
                kind: dynamo_saga_expressions::eval::EvalErrorKind::InvalidExpression,
                message,
            })
        });
        if let Err(e) = verdict {
            let message = format!("{}: {e}", a.describe());
            refused.push((a.index, CancellationReason::new(CancellationReason::VALIDATION_ERROR, message)));
        }
    }
    if refused.is_empty() && !judge.is_empty() {
        let writes = judge.iter().map(|(index, write, _)| (*index, write.clone())).collect();
        for (index, message) in crate::protocol::judge::judge(store, m, tx_id, writes).await?.refused {
            let a = judge.iter().find(|j| j.0 == index).map(|j| j.2.clone()).unwrap_or_default();
            refused.push((
                index,
                CancellationReason::new(CancellationReason::VALIDATION_ERROR, format!("{a}: {message}")),
            ));
        }
    }
    Ok(refused)
}

/// What begin checks of an action: the whole item it leaves, or an update as far as it can be judged without one.
enum Checked<'a> {
    Item(std::borrow::Cow<'a, Item>),
    Update,
    /// A `Delete` or `ConditionCheck` with a condition: only the room its condition leaves the lock's.
    Condition,
}
