//! release: the last step of both endings. Lets go of the parent lock, marks the header finished, takes it out of the
//! open-transactions index and starts its retention period (TTL).

use super::end::End;
use super::{Outcome, Report};
use crate::constants::{
    ATTR_EXPIRES_AT, H_CALLS, H_FINISHED_AT, H_OPEN_SHARD, H_READ_UNITS, H_REVISIT_AT, H_STATE, H_UPDATED_AT,
    H_VERSION, H_WRITES, H_WRITE_UNITS,
};
use crate::dynamo::store::{Meter, Store};
use crate::error::TxError;
use crate::model::value::{n, now_ms, s};
use crate::protocol::parent::release_parent;
use crate::protocol::records::{self, Header, TxState};

pub async fn release(store: &Store, tx_id: &str) -> Result<Report, TxError> {
    let m = Meter::default();
    let h = records::read_header(store, &m, tx_id).await?;
    release_from(store, m, h).await
}

/// [`release`] from the header `h` its caller has just read.
pub(crate) async fn release_from(store: &Store, m: Meter, h: Header) -> Result<Report, TxError> {
    let tx_id = h.id.clone();
    let tx_id = tx_id.as_str();
    if h.finished() {
        return Ok(Report::new(Outcome::Done, &m));
    }
    let done = match h.state {
        TxState::Pending => false,
        TxState::Committed => h.completed >= h.batches,
        TxState::RolledBack => h.restored >= h.batches,
    };
    if !done {
        return Err(TxError::Internal(format!("release of transaction {tx_id} before its items were released")));
    }
    if h.retry_pending {
        return Err(TxError::Internal(format!("release of transaction {tx_id}, which is to start another attempt")));
    }
    release_parent(store, &m, &h).await?;
    let now_ms = now_ms();
    let usage = m.usage();
    let end = End::of(store, &h, now_ms);
    let req = store
        .client
        .update_item()
        .table_name(&store.cfg.tx_table)
        .set_key(Some(records::header_key(tx_id)))
        .update_expression(
            match end.revisit_at {
                None => "SET #fin = :now, #upd = :now, #exp = :exp, #ver = #ver + :one REMOVE #open ADD #calls :calls, #writes :writes, #ru :ru, #wu :wu",
                Some(_) => "SET #fin = :now, #upd = :now, #exp = :exp, #ver = #ver + :one, #open = :open, #rat = :rat ADD #calls :calls, #writes :writes, #ru :ru, #wu :wu",
            },
        )
        .condition_expression("#st = :st AND attribute_not_exists(#fin)")
        .expression_attribute_names("#fin", H_FINISHED_AT)
        .expression_attribute_names("#upd", H_UPDATED_AT)
        .expression_attribute_names("#exp", ATTR_EXPIRES_AT)
        .expression_attribute_names("#ver", H_VERSION)
        .expression_attribute_names("#open", H_OPEN_SHARD)
        .expression_attribute_names("#st", H_STATE)
        .expression_attribute_names("#calls", H_CALLS)
        .expression_attribute_names("#writes", H_WRITES)
        .expression_attribute_names("#ru", H_READ_UNITS)
        .expression_attribute_names("#wu", H_WRITE_UNITS)
        .expression_attribute_values(":now", n(now_ms))
        .expression_attribute_values(":exp", n(end.expires_at))
        .expression_attribute_values(":one", n(1))
        .expression_attribute_values(":st", s(h.state.as_str()))
        .expression_attribute_values(":calls", n(usage.calls + 1))
        .expression_attribute_values(":writes", n(usage.writes + 1))
        .expression_attribute_values(":ru", n(usage.read_units))
        .expression_attribute_values(":wu", n(usage.write_units))
        .return_values(aws_sdk_dynamodb::types::ReturnValue::AllNew);
    let req = match end.revisit_at {
        Some(at) => req
            .expression_attribute_names("#rat", H_REVISIT_AT)
            .expression_attribute_values(":rat", n(at))
            .expression_attribute_values(":open", s(end.shard)),
        None => req,
    };
    if let crate::dynamo::store::Written::Done(Some(header)) = store.update(&m, req).await? {
        store.caches.keep_header(tx_id, header);
    }
    tracing::info!(tx_id, state = h.state.as_str(), "finished");
    Ok(Report::new(Outcome::Done, &m))
}
