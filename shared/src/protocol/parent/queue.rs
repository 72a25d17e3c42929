//! FIFO waiting for a parent lock. Every transaction with a `Parent` takes a ticket from an atomic counter
//! and leaves a row in that parent's queue, both in the transactions table; it tries for the parent only when no
//! live row with a smaller ticket is ahead of it, so waiters are served in ticket order.
//!
//! - The ticket is kept on the header, so a retried lock phase keeps its place. A crash between taking a ticket and
//!   writing it on the header leaves a row whose ticket the header does not name: such a row is dead.
//! - A row is live while its transaction is unfinished and names that ticket. Rows of finished (or expired)
//!   transactions are deleted by whoever finds them; a waiter whose coordinator died stops beating its header's
//!   heart, so the one behind it rolls it back after a lease (see [`crate::drivers::coordinator`]) and its row goes
//!   with it.
//! - A row is deleted once its transaction holds the parent, and at release. It expires by TTL three leases after it
//!   was last written, and a waiter refreshes it with every heartbeat (a third of a lease), so only a dead waiter's
//!   row expires.

use crate::constants::{ATTR_EXPIRES_AT, H_PARENT_TICKET, QUEUE_PREFIX, Q_NEXT, TX_PK, TX_SK, T_TX};
use crate::dynamo::store::{Meter, Store, Usage, Written};
use crate::error::TxError;
use crate::model::request::Parent;
use crate::model::value;
use crate::model::value::Item;
use crate::model::value::{n, now_ms, s};
use crate::protocol::records;
use crate::protocol::records::Header;
use aws_sdk_dynamodb::types::AttributeValue;
use std::collections::HashMap;

const NEXT_SK: &str = "next";
const ROW_PREFIX: &str = "t";

/// The partition of the transactions table holding one parent's counter and queue rows.
pub fn queue_key(p: &Parent) -> String {
    format!("{QUEUE_PREFIX}{}", value::key_display(&p.table_name, &p.key))
}

fn row_sk(ticket: u64) -> String {
    format!("{ROW_PREFIX}{ticket:020}")
}

fn key(pk: &str, sk: &str) -> Item {
    HashMap::from([(TX_PK.to_owned(), s(pk)), (TX_SK.to_owned(), s(sk))])
}

/// This transaction's ticket: the one on its header, or a new one (counter, then row, then header).
pub(crate) async fn enqueue(store: &Store, m: &Meter, h: &Header, p: &Parent) -> Result<u64, TxError> {
    if let Some(t) = h.parent_ticket {
        return Ok(t);
    }
    let q = queue_key(p);
    let out = store
        .client
        .update_item()
        .table_name(&store.cfg.tx_table)
        .set_key(Some(key(&q, NEXT_SK)))
        .update_expression("ADD #n :one")
        .expression_attribute_names("#n", Q_NEXT)
        .expression_attribute_values(":one", n(1))
        .return_values(aws_sdk_dynamodb::types::ReturnValue::UpdatedNew);
    let ticket = match store.update(m, out).await? {
        Written::Done(Some(new)) => match new.get(Q_NEXT) {
            Some(AttributeValue::N(t)) => {
                t.parse::<u64>().map_err(|_| TxError::Internal(format!("queue counter {t}")))?
            }
            _ => return Err(TxError::Internal("the queue counter returned no value".into())),
        },
        _ => return Err(TxError::Internal("the queue counter did not move".into())),
    };
    put_row(store, m, &q, ticket, &h.id).await?;
    records::update_header(
        store,
        m,
        &h.id,
        records::Expect::at(h),
        &[(H_PARENT_TICKET, n(ticket))],
        None,
        &Usage::default(),
    )
    .await?;
    Ok(ticket)
}

/// Writes a queue row, to expire by TTL three leases from now unless its waiter refreshes it.
async fn put_row(store: &Store, m: &Meter, q: &str, ticket: u64, tx_id: &str) -> Result<(), TxError> {
    let mut row = key(q, &row_sk(ticket));
    row.insert(T_TX.to_owned(), s(tx_id));
    row.insert(ATTR_EXPIRES_AT.to_owned(), n(now_ms() / 1000 + 3 * store.cfg.lease.as_secs()));
    store.put(m, store.client.put_item().table_name(&store.cfg.tx_table).set_item(Some(row))).await.map(|_| ())
}

/// A waiter refreshes its row (part of its heartbeat, while it does not hold the parent yet), so that only a dead
/// waiter's row expires. A row that is gone stays gone: its waiter has lost its place (it still waits for those
/// ahead of it), and a row coming back could make a transaction that went ahead in the meantime wait for it.
pub(crate) async fn refresh(store: &Store, m: &Meter, h: &Header) -> Result<(), TxError> {
    let (Some(p), Some(t), 0) = (&h.parent, h.parent_ticket, h.locked) else { return Ok(()) };
    let req = store
        .client
        .update_item()
        .table_name(&store.cfg.tx_table)
        .set_key(Some(key(&queue_key(p), &row_sk(t))))
        .update_expression("SET #e = :e")
        .condition_expression("#tx = :tx")
        .expression_attribute_names("#e", ATTR_EXPIRES_AT)
        .expression_attribute_names("#tx", T_TX)
        .expression_attribute_values(":e", n(now_ms() / 1000 + 3 * store.cfg.lease.as_secs()))
        .expression_attribute_values(":tx", s(&h.id));
    store.update(m, req).await.map(|_| ())
}

/// The first live transaction queued ahead of `ticket`, deleting the dead rows met on the way.
pub(crate) async fn ahead(
    store: &Store,
    m: &Meter,
    me: &str,
    p: &Parent,
    ticket: u64,
) -> Result<Option<String>, TxError> {
    let q = queue_key(p);
    let mine = row_sk(ticket);
    for row in store.query_prefix(m, &q, ROW_PREFIX).await? {
        let (Some(AttributeValue::S(sk)), Some(AttributeValue::S(tx))) = (row.get(TX_SK), row.get(T_TX)) else {
            continue;
        };
        if *sk >= mine {
            break;
        }
        let theirs: Option<u64> = sk[ROW_PREFIX.len()..].parse().ok();
        let live = tx != me
            && match records::read_header(store, m, tx).await {
                Ok(h) => !h.finished() && (h.parent_ticket.is_none() || h.parent_ticket == theirs),
                Err(TxError::NotFound(_)) => false,
                Err(e) => return Err(e),
            };
        if live {
            return Ok(Some(tx.clone()));
        }
        remove_row(store, m, &q, sk).await?;
    }
    Ok(None)
}

/// Deletes this transaction's row (when it has one): it holds the parent, or has ended.
pub(crate) async fn leave(store: &Store, m: &Meter, h: &Header) -> Result<(), TxError> {
    match (&h.parent, h.parent_ticket) {
        (Some(p), Some(t)) => remove_row(store, m, &queue_key(p), &row_sk(t)).await,
        _ => Ok(()),
    }
}

async fn remove_row(store: &Store, m: &Meter, q: &str, sk: &str) -> Result<(), TxError> {
    store
        .delete(m, store.client.delete_item().table_name(&store.cfg.tx_table).set_key(Some(key(q, sk))))
        .await
        .map(|_| ())
}
