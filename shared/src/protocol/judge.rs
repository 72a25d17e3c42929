//! DynamoDB as the judge of writes, asked without writing: the writes go in one `TransactWriteItems` call together
//! with a `ConditionCheck` that cannot hold, so DynamoDB validates every write, evaluates it on its item, and cancels
//! the call, writing nothing. A write it would refuse comes back as a `ValidationError` reason on that write, or (as
//! DynamoDB Local answers) the whole call is refused with a `ValidationException`, and halving the writes finds the
//! ones to blame.
//!
//! This is what no list of rules can promise: the service's own answer, whatever rule it applies, including one added
//! after this code was written. The one-call path asks it when DynamoDB refuses a request as a whole (to name the
//! action, or to learn that what this library adds was at fault), and lock asks it of the writes it will apply after
//! the commit ([`crate::config::PrecommitCheck`]).

use aws_sdk_dynamodb::types::{ConditionCheck, TransactWriteItem};

use crate::constants::{MAX_TRANSACT_ACTIONS, SK_JUDGE, TX_PK};
use crate::dynamo::store::{Meter, Store, Transacted};
use crate::error::{CancellationReason, TxError};
use crate::protocol::records::record_key;

/// Most writes one call judges: `TransactWriteItems` takes 100 actions, and the impossible condition takes one.
pub const WRITES_PER_CALL: usize = MAX_TRANSACT_ACTIONS - 1;

/// DynamoDB's answer about a set of writes.
#[derive(Debug, Default, PartialEq)]
pub struct Verdict {
    /// The writes it refuses, each by its tag, with its message.
    pub refused: Vec<(usize, String)>,
    /// It refuses the writes together though it accepts each half of them: a rule about the whole call (its size,
    /// say). The message of the refusal.
    pub together: Option<String>,
}

/// Asks DynamoDB whether it accepts `writes` (each tagged, for example with its action's index in the request),
/// sent as they are to be sent later, on the items as they are now. Nothing is written. `tx_id` names the record the
/// impossible condition is checked on: `(tx_id, "judge")` in the transactions table, which is never written.
pub async fn judge(
    store: &Store,
    m: &Meter,
    tx_id: &str,
    writes: Vec<(usize, TransactWriteItem)>,
) -> Result<Verdict, TxError> {
    let mut verdict = Verdict::default();
    for chunk in writes.chunks(WRITES_PER_CALL) {
        let together = judge_part(store, m, tx_id, chunk, &mut verdict.refused).await?;
        verdict.together = verdict.together.or(together);
    }
    verdict.refused.sort_by_key(|r| r.0);
    Ok(verdict)
}

/// Judges `part` in one call, halving it while DynamoDB refuses it as a whole; `Some(message)` when it is refused
/// as a whole and no write in it is refused on its own.
async fn judge_part(
    store: &Store,
    m: &Meter,
    tx_id: &str,
    part: &[(usize, TransactWriteItem)],
    refused: &mut Vec<(usize, String)>,
) -> Result<Option<String>, TxError> {
    let mut items: Vec<TransactWriteItem> = part.iter().map(|(_, w)| w.clone()).collect();
    items.push(impossible(store, tx_id)?);
    let req = store.client.transact_write_items().set_transact_items(Some(items));
    match store.transact(m, req).await? {
        Transacted::Done => Err(TxError::Internal("a judging call that cannot succeed wrote its items".into())),
        // Reasons that cannot be matched to the writes (DynamoDB Local lists a refused write's reason alone): halve.
        Transacted::Canceled(reasons) if reasons.len() != part.len() + 1 => {
            let refusal = reasons.iter().find(|r| r.0 == CancellationReason::VALIDATION_ERROR);
            match (refusal, part) {
                (None, _) => Ok(None),
                (Some(r), [(tag, _)]) => {
                    refused.push((*tag, r.1.clone().unwrap_or_else(|| "DynamoDB refused the write".into())));
                    Ok(None)
                }
                (Some(r), _) => halve(store, m, tx_id, part, refused, r.1.clone().unwrap_or_default()).await,
            }
        }
        Transacted::Canceled(reasons) => {
            for ((tag, _), (code, message, _)) in part.iter().zip(&reasons) {
                if code == CancellationReason::VALIDATION_ERROR {
                    refused.push((*tag, message.clone().unwrap_or_else(|| "DynamoDB refused the write".into())));
                }
            }
            Ok(None)
        }
        Transacted::Rejected(message) if part.len() == 1 => {
            refused.push((part[0].0, message));
            Ok(None)
        }
        Transacted::Rejected(message) => halve(store, m, tx_id, part, refused, message).await,
    }
}

/// Judges each half of `part`, which DynamoDB refused with `message`; `Some(message)` when neither half explains it.
async fn halve(
    store: &Store,
    m: &Meter,
    tx_id: &str,
    part: &[(usize, TransactWriteItem)],
    refused: &mut Vec<(usize, String)>,
    message: String,
) -> Result<Option<String>, TxError> {
    let before = refused.len();
    let (a, b) = part.split_at(part.len() / 2);
    let first = Box::pin(judge_part(store, m, tx_id, a, refused)).await?;
    let second = Box::pin(judge_part(store, m, tx_id, b, refused)).await?;
    Ok(if refused.len() > before { first.or(second) } else { Some(message) })
}

/// A check of a record that is never written: it fails, and the call with it.
fn impossible(store: &Store, tx_id: &str) -> Result<TransactWriteItem, TxError> {
    let check = ConditionCheck::builder()
        .table_name(&store.cfg.tx_table)
        .set_key(Some(record_key(tx_id, SK_JUDGE.to_string())))
        .condition_expression("attribute_exists(#id)")
        .expression_attribute_names("#id", TX_PK)
        .build()
        .map_err(|e| TxError::Internal(e.to_string()))?;
    Ok(TransactWriteItem::builder().condition_check(check).build())
}
