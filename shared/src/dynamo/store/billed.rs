//! A store's bill by DynamoDB's rules ([`Store::with_billing`], the benchmark's capacity pass): each write reads the
//! items it touches before and after it, outside the meter, and charges the units DynamoDB's documented rules give
//! them, in the table and in its global secondary indexes.

use aws_sdk_dynamodb::operation::transact_write_items::builders::TransactWriteItemsFluentBuilder;
use aws_sdk_dynamodb::types::ConsumedCapacity;

use super::{map_err, Meter, Store};
use crate::error::TxError;
use crate::model::billing;
use crate::model::value::{item_size, Item};

/// What DynamoDB reported a call consumed (DynamoDB Local gives only the total).
pub(super) fn reported(cc: &[ConsumedCapacity]) -> f64 {
    cc.iter().map(|c| c.capacity_units.unwrap_or(0.0)).sum()
}

impl Store {
    /// The items at `keys` as they are now, read outside the meter; `None` when billing is off.
    pub(super) async fn probe(&self, keys: &[(String, Item)]) -> Result<Option<Vec<Option<Item>>>, TxError> {
        if self.billing.is_none() {
            return Ok(None);
        }
        let mut items = Vec::with_capacity(keys.len());
        for chunk in keys.chunks(16) {
            items.extend(futures::future::try_join_all(chunk.iter().map(|k| self.item_now(k))).await?);
        }
        Ok(Some(items))
    }

    /// One item as it is now, read outside the meter.
    pub(super) async fn item_now(&self, (table, key): &(String, Item)) -> Result<Option<Item>, TxError> {
        let out =
            self.client.get_item().table_name(table).set_key(Some(key.clone())).consistent_read(true).send().await;
        out.map(|o| o.item).map_err(|e| map_err("GetItem", e))
    }

    /// Bills one write call from its items before it and after it (`changed`: the call changed them), in the table
    /// and in its global secondary indexes. `reported` is what DynamoDB said the call consumed, for the
    /// non-transactional cross-check (`None`: not given, as for a failed condition).
    pub(super) async fn charge_write(
        &self,
        keys: &[(String, Item)],
        before: Option<Vec<Option<Item>>>,
        changed: bool,
        transactional: bool,
        reported: Option<f64>,
    ) -> Result<(), TxError> {
        let (Some(bill), Some(before)) = (&self.billing, before) else { return Ok(()) };
        let after = if changed { self.probe(keys).await?.unwrap_or_default() } else { before.clone() };
        let factor = if transactional { 2.0 } else { 1.0 };
        let mut units = 0.0;
        for (((table, _), b), a) in keys.iter().zip(&before).zip(&after) {
            let size = |i: &Option<Item>| i.as_ref().map_or(0, item_size);
            units += factor * billing::write_units(size(b), size(a));
            let table_keys = self.schema(&Meter::default(), table).await?.key_names.clone();
            for ix in self.caches.indexes(table) {
                units += factor * ix.write_units(&table_keys, b.as_ref(), a.as_ref());
            }
        }
        let mut b = bill.lock().expect("bill lock");
        match (transactional, reported) {
            (true, _) => b.transact(units),
            (false, Some(r)) => b.plain_write(units, r),
            (false, None) => {
                b.calls += 1;
                b.write_calls += 1;
                b.write_units += units;
            }
        }
        Ok(())
    }

    /// Bills one read call of `units` by the rules, which DynamoDB reported as `cc`.
    pub(super) fn charge_read(&self, units: f64, cc: &[ConsumedCapacity]) {
        if let Some(bill) = &self.billing {
            bill.lock().expect("bill lock").plain_read(units, reported(cc));
        }
    }

    /// The key of `item` in `table`, for billing.
    pub(super) async fn key_of(&self, table: &str, item: &Item) -> Result<(String, Item), TxError> {
        let schema = self.schema(&Meter::default(), table).await?;
        let key = schema.key_names.iter().filter_map(|k| item.get(k).map(|v| (k.clone(), v.clone()))).collect();
        Ok((table.to_string(), key))
    }

    /// The items one `TransactWriteItems` request touches, when billing is on.
    pub(super) async fn transact_keys(
        &self,
        req: &TransactWriteItemsFluentBuilder,
    ) -> Result<Vec<(String, Item)>, TxError> {
        let mut keys = Vec::new();
        if self.billing.is_none() {
            return Ok(keys);
        }
        for t in req.get_transact_items().iter().flatten() {
            if let Some(p) = t.put() {
                keys.push(self.key_of(p.table_name(), p.item()).await?);
            } else if let Some(u) = t.update() {
                keys.push((u.table_name().to_string(), u.key().clone()));
            } else if let Some(d) = t.delete() {
                keys.push((d.table_name().to_string(), d.key().clone()));
            } else if let Some(c) = t.condition_check() {
                keys.push((c.table_name().to_string(), c.key().clone()));
            }
        }
        Ok(keys)
    }

    /// The table and key of a single-item write, for billing it: empty when the store does not bill, so that an
    /// unbilled write copies nothing.
    pub(super) fn billed_key(&self, table: &Option<String>, key: &Option<Item>) -> (String, Item) {
        match (&self.billing, table, key) {
            (Some(_), Some(table), Some(key)) => (table.clone(), key.clone()),
            _ => Default::default(),
        }
    }

    /// The table and key of a `PutItem`'s `item`, for billing it: empty when the store does not bill.
    pub(super) async fn billed_item_key(
        &self,
        table: &Option<String>,
        item: &Option<Item>,
    ) -> Result<(String, Item), TxError> {
        match (&self.billing, table, item) {
            (Some(_), Some(table), Some(item)) => self.key_of(table, item).await,
            _ => Ok(Default::default()),
        }
    }
}
