//! The calls of many items: `BatchGetItem` (strongly or eventually consistent), `BatchWriteItem`, and the query of a
//! transaction's records by sort-key prefix.

use aws_sdk_dynamodb::operation::batch_get_item::builders::BatchGetItemFluentBuilder;
use aws_sdk_dynamodb::types::{AttributeValue, ConsumedCapacity, ReturnConsumedCapacity, WriteRequest};

use super::{backoff, billed::reported, map_err, Meter, Store};
use crate::error::TxError;
use crate::model::billing;
use crate::model::value::{item_size, Item};

/// How many keys a BatchGetItem request asks of `table`.
pub(super) fn ka_len(req: &BatchGetItemFluentBuilder, table: &str) -> usize {
    req.get_request_items().as_ref().and_then(|r| r.get(table)).map_or(0, |k| k.keys().len())
}

impl Store {
    /// Strongly consistent reads of many keys of one table, in any order; missing items are absent from the result.
    pub async fn batch_get(&self, m: &Meter, table: &str, keys: Vec<Item>) -> Result<Vec<Item>, TxError> {
        self.batch_get_with(m, table, keys, true).await
    }

    /// [`Store::batch_get`] of records that never change once written (request pages), as [`Store::get_written`]
    /// reads one: eventually consistent, then strongly consistent for the keys that found nothing.
    pub async fn batch_get_written(
        &self,
        m: &Meter,
        table: &str,
        keys: Vec<Item>,
        key_names: &[&str],
    ) -> Result<Vec<Item>, TxError> {
        let mut found = self.batch_get_with(m, table, keys.clone(), false).await?;
        if found.len() < keys.len() {
            let key_of = |i: &Item| key_names.iter().map(|k| i.get(*k).cloned()).collect::<Vec<_>>();
            let have: Vec<_> = found.iter().map(key_of).collect();
            let missing: Vec<Item> = keys.into_iter().filter(|k| !have.contains(&key_of(k))).collect();
            found.extend(self.batch_get_with(m, table, missing, true).await?);
        }
        Ok(found)
    }

    /// Eventually consistent reads of many keys of one table (half the read units of [`Store::batch_get`]): an item
    /// may come back as it was a moment ago, or not at all if it was written a moment ago.
    pub async fn batch_get_eventually(&self, m: &Meter, table: &str, keys: Vec<Item>) -> Result<Vec<Item>, TxError> {
        self.batch_get_with(m, table, keys, false).await
    }

    /// Unconditional puts and deletes of many records of one table, 25 per call, retrying unprocessed ones.
    pub async fn batch_write(&self, m: &Meter, table: &str, requests: Vec<WriteRequest>) -> Result<(), TxError> {
        self.admitted(m, table).await?;
        for chunk in requests.chunks(25) {
            let mut pending = chunk.to_vec();
            let mut tries = 0u32;
            while !pending.is_empty() {
                self.before_write().await?;
                let mut keys = Vec::new();
                if self.billing.is_some() {
                    for w in &pending {
                        if let Some(p) = w.put_request() {
                            keys.push(self.key_of(table, p.item()).await?);
                        } else if let Some(d) = w.delete_request() {
                            keys.push((table.to_string(), d.key().clone()));
                        }
                    }
                }
                let before = self.probe(&keys).await?;
                let out = self
                    .client
                    .batch_write_item()
                    .request_items(table, std::mem::take(&mut pending))
                    .return_consumed_capacity(ReturnConsumedCapacity::Total)
                    .send()
                    .await;
                let out = match out {
                    Ok(o) => o,
                    Err(e) => {
                        m.record(true, &[]);
                        return Err(map_err("BatchWriteItem", e));
                    }
                };
                m.record(true, out.consumed_capacity());
                self.charge_write(&keys, before, true, false, Some(reported(out.consumed_capacity()))).await?;
                if let Some(mut u) = out.unprocessed_items {
                    pending = u.remove(table).unwrap_or_default();
                    if !pending.is_empty() {
                        tries += 1;
                        backoff(tries).await;
                    }
                }
            }
        }
        Ok(())
    }

    /// Every record of one transaction whose sort key starts with `prefix` (Query, paginated).
    pub async fn query_prefix(&self, m: &Meter, tx_id: &str, prefix: &str) -> Result<Vec<Item>, TxError> {
        self.admitted(m, &self.cfg.tx_table).await?;
        let mut out = Vec::new();
        let mut start: Option<Item> = None;
        loop {
            self.check_alive()?;
            let r = self
                .client
                .query()
                .table_name(&self.cfg.tx_table)
                .key_condition_expression("#p = :p AND begins_with(#s, :s)")
                .expression_attribute_names("#p", crate::constants::TX_PK)
                .expression_attribute_names("#s", crate::constants::TX_SK)
                .expression_attribute_values(":p", AttributeValue::S(tx_id.into()))
                .expression_attribute_values(":s", AttributeValue::S(prefix.into()))
                .consistent_read(true)
                .set_exclusive_start_key(start.take())
                .return_consumed_capacity(ReturnConsumedCapacity::Total)
                .send()
                .await
                .map_err(|e| map_err("Query", e))?;
            let cc: Vec<ConsumedCapacity> = r.consumed_capacity().into_iter().cloned().collect();
            m.record(false, &cc);
            let page = r.items.unwrap_or_default();
            self.charge_read(billing::read_units(page.iter().map(item_size).sum()), &cc);
            out.extend(page);
            match r.last_evaluated_key {
                Some(k) if !k.is_empty() => start = Some(k),
                _ => break,
            }
        }
        Ok(out)
    }
}
