//! The sweeper: finds open transactions that stopped moving and drives each one to its end.
//!
//! Open transactions are found through the sparse `open-transactions` index (partition `open#0`..`open#7`, sort key
//! `updatedAt`), never by scanning. A transaction whose Step Functions execution is still running is left alone
//! (`DescribeExecution`). Every other stale one is finished: a pending transaction is decided `ROLLED_BACK` (nobody
//! is driving it, so it can never commit) and rolled back; a decided one is completed or rolled back. The work is
//! done by a recovery execution of the state machine when one is configured (its name carries the header version,
//! so sweeping twice starts it once), or in-process within the time budget otherwise. Each run handles at most
//! `max_transactions`; the report says whether more were left.
//!
//! Each run also visits again the finished transactions that may have had writes in flight when they ended, once
//! `Config::revisit_after` has passed since they finished (partitions `revisit#0`..`revisit#7` of the same index,
//! [`crate::protocol::phase::revisit`]): in-process, a read of each item the transaction named and a conditional write
//! for each one that still holds something of it.
//!
//! Where the transactions table has no time to live (multi-Region strongly consistent tables, which do not support
//! it), each run also deletes what TTL would: records whose `expiresAt` has passed, found by a pass over the table a
//! few pages a run ([`EXPIRY_PAGES`]), resumed where the last run stopped (a cursor record), each deleted only while it
//! is still expired.

use std::time::{Duration, Instant};

use aws_sdk_dynamodb::types::AttributeValue;
use serde::{Deserialize, Serialize};
use tracing::{info, warn};

use crate::config::MultiRegion;
use crate::constants::{
    ATTR_EXPIRES_AT, C_AFTER_ID, C_AFTER_SK, ENV_SWEEP_AFTER_SECONDS, ENV_SWEEP_MAX, EXPIRY_PK, H_OPEN_SHARD,
    H_UPDATED_AT, OPEN_INDEX, OPEN_SHARDS, OPEN_SHARD_PREFIX, REVISIT_SHARD_PREFIX, SK_CURSOR, TX_PK, TX_SK,
};
use crate::drivers::driver::Driver;
use crate::dynamo::store::{Meter, Store};
use crate::error::TxError;
use crate::protocol::records::{self, Decision, TxState};

/// Pages (of at most [`EXPIRY_PAGE_ITEMS`] records each) one run's pass for expired records reads: with a run every 5
/// minutes, a week's worth of transactions of 1,000 records each a minute is passed over in about half a day.
pub const EXPIRY_PAGES: usize = 8;
pub const EXPIRY_PAGE_ITEMS: i32 = 1000;

/// Where the sweeper sends the work: a state machine to start recovery executions of, or nowhere (in-process).
pub use crate::drivers::start::StateMachine;

#[derive(Debug, Clone)]
pub struct Sweeper {
    pub store: Store,
    pub state_machine: Option<StateMachine>,
    /// A transaction is stale when its header has not changed for this long.
    pub stale_after: Duration,
    pub max_transactions: usize,
    /// In-process work stops starting new transactions after this long.
    pub budget: Duration,
}

/// What one sweep did.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct SweepReport {
    /// Stale open transactions looked at.
    pub examined: usize,
    /// Left alone because their execution is still running.
    pub running: Vec<String>,
    /// Recovery executions started (or found already started).
    pub recovery_executions: Vec<String>,
    /// Driven to their end in-process, with the state they ended in.
    pub finished: Vec<Swept>,
    /// Pending transactions this sweep decided to roll back.
    pub rolled_back: Vec<String>,
    /// Transactions that could not be handled this time, and why.
    pub failed: Vec<Swept>,
    /// Finished transactions visited again for writes that landed after their end
    /// ([`crate::protocol::phase::revisit`]), with what the visit cleared.
    #[serde(default)]
    pub revisited: Vec<Swept>,
    /// Expired records deleted, where the transactions table has no time to live to delete them.
    #[serde(default)]
    pub expired: usize,
    /// True when more stale transactions were left for the next run.
    pub more: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Swept {
    pub transaction_id: String,
    pub outcome: String,
}

impl Sweeper {
    pub fn new(store: Store) -> Self {
        Self {
            store,
            state_machine: None,
            stale_after: Duration::from_secs(120),
            max_transactions: 100,
            budget: Duration::from_secs(600),
        }
    }

    /// A sweeper with the settings the sweeper function runs with: `SAGA_SWEEP_AFTER_SECONDS` (how long a transaction
    /// must have been still to count as abandoned, default 120) and `SAGA_SWEEP_MAX` (transactions a run, default 100),
    /// read through `var`; a value that is not a whole number is an error naming it.
    pub fn from_vars(store: Store, var: impl Fn(&str) -> Option<String>) -> Result<Self, TxError> {
        let mut sweeper = Self::new(store);
        let num = |k: &str| crate::config::whole_number(&var, k);
        if let Some(s) = num(ENV_SWEEP_AFTER_SECONDS)? {
            sweeper.stale_after = Duration::from_secs(s);
        }
        if let Some(n) = num(ENV_SWEEP_MAX)? {
            sweeper.max_transactions = n as usize;
        }
        Ok(sweeper)
    }

    pub async fn sweep(&self) -> Result<SweepReport, TxError> {
        let started = Instant::now();
        let mut report = SweepReport::default();
        let cutoff = crate::model::value::now_ms().saturating_sub(self.stale_after.as_millis() as u64);
        let (ids, more) = self.stale(OPEN_SHARD_PREFIX, cutoff).await?;
        report.more = more;
        for id in ids {
            if started.elapsed() >= self.budget {
                report.more = true;
                break;
            }
            report.examined += 1;
            if let Err(e) = self.sweep_one(&id, &mut report, started).await {
                warn!(tx_id = %id, error = %e, "sweeper could not finish a transaction");
                report.failed.push(Swept { transaction_id: id, outcome: format!("{}: {e}", e.name()) });
            }
        }
        // Finished transactions whose late writes can no longer land: visited again, in-process (a few reads each).
        let due = crate::model::value::now_ms().saturating_sub(self.store.cfg.revisit_after.as_millis() as u64);
        let (ids, more) = self.stale(REVISIT_SHARD_PREFIX, due).await?;
        report.more |= more;
        for id in ids {
            if started.elapsed() >= self.budget {
                report.more = true;
                break;
            }
            match crate::protocol::phase::revisit::revisit(&self.store, &id).await {
                Ok(crate::protocol::phase::revisit::Revisit::Done { items, cleared, .. }) => report
                    .revisited
                    .push(Swept { transaction_id: id, outcome: format!("{cleared} of {items} items cleared") }),
                Ok(_) => {}
                Err(e) => {
                    warn!(tx_id = %id, error = %e, "sweeper could not visit a transaction again");
                    report.failed.push(Swept { transaction_id: id, outcome: format!("{}: {e}", e.name()) });
                }
            }
        }
        if self.store.cfg.multi_region == MultiRegion::Strong && started.elapsed() < self.budget {
            report.expired = self.delete_expired().await?;
        }
        info!(
            expired = report.expired,
            revisited = report.revisited.len(),
            examined = report.examined,
            running = report.running.len(),
            recovery = report.recovery_executions.len(),
            finished = report.finished.len(),
            rolled_back = report.rolled_back.len(),
            failed = report.failed.len(),
            more = report.more,
            "sweep done"
        );
        Ok(report)
    }

    /// Ids of the transactions in the index partitions `prefix` (`open#`: open; `revisit#`: finished and waiting to be
    /// visited again) whose header has not changed since `cutoff`, oldest first, at most `max_transactions`; and
    /// whether there were more.
    async fn stale(&self, prefix: &str, cutoff: u64) -> Result<(Vec<String>, bool), TxError> {
        let mut found: Vec<(u64, String)> = Vec::new();
        let mut more = false;
        // The oldest `max_transactions` overall are among the oldest `max_transactions` of each shard, so one page a
        // shard (the index sorts by updatedAt) is enough.
        for shard in 0..OPEN_SHARDS {
            let r = self
                .store
                .client
                .query()
                .table_name(&self.store.cfg.tx_table)
                .index_name(OPEN_INDEX)
                .key_condition_expression("#sh = :sh AND #upd < :cut")
                .expression_attribute_names("#sh", H_OPEN_SHARD)
                .expression_attribute_names("#upd", H_UPDATED_AT)
                .expression_attribute_values(":sh", AttributeValue::S(format!("{prefix}{shard}")))
                .expression_attribute_values(":cut", AttributeValue::N(cutoff.to_string()))
                .limit(self.max_transactions as i32)
                .send()
                .await
                .map_err(|e| TxError::DynamoDb { op: "Query", message: e.to_string() })?;
            more |= r.last_evaluated_key.is_some_and(|k| !k.is_empty());
            for item in r.items.unwrap_or_default() {
                if let (Some(AttributeValue::S(id)), Some(AttributeValue::N(at))) =
                    (item.get(TX_PK), item.get(H_UPDATED_AT))
                {
                    found.push((at.parse().unwrap_or(0), id.clone()));
                }
            }
        }
        found.sort();
        if found.len() > self.max_transactions {
            found.truncate(self.max_transactions);
            more = true;
        }
        Ok((found.into_iter().map(|(_, id)| id).collect(), more))
    }

    /// Deletes what TTL would where the table has none: up to [`EXPIRY_PAGES`] pages of the pass over the table,
    /// from where the last run stopped; each record whose `expiresAt` has passed is deleted unless it was written
    /// again meanwhile. The pass starts again from the top once it reaches the end.
    async fn delete_expired(&self) -> Result<usize, TxError> {
        let m = Meter::default();
        let s = &self.store;
        let table = &s.cfg.tx_table;
        let cursor_key = crate::protocol::records::record_key(EXPIRY_PK, SK_CURSOR.to_string());
        let mut start =
            s.get(&m, table, cursor_key.clone()).await?.and_then(|c| match (c.get(C_AFTER_ID), c.get(C_AFTER_SK)) {
                (Some(id), Some(sk)) => Some([(TX_PK.to_string(), id.clone()), (TX_SK.to_string(), sk.clone())].into()),
                _ => None,
            });
        let now = AttributeValue::N((crate::model::value::now_ms() / 1000).to_string());
        let mut deleted = 0;
        for _ in 0..EXPIRY_PAGES {
            let page = s
                .client
                .scan()
                .table_name(table)
                .set_exclusive_start_key(start.take())
                .filter_expression("#e < :now")
                .expression_attribute_names("#e", ATTR_EXPIRES_AT)
                .expression_attribute_values(":now", now.clone())
                .limit(EXPIRY_PAGE_ITEMS)
                .send()
                .await
                .map_err(|e| TxError::DynamoDb { op: "Scan", message: e.to_string() })?;
            for item in page.items.unwrap_or_default() {
                let (Some(id), Some(sk)) = (item.get(TX_PK), item.get(TX_SK)) else { continue };
                let req = s
                    .client
                    .delete_item()
                    .table_name(table)
                    .key(TX_PK, id.clone())
                    .key(TX_SK, sk.clone())
                    .condition_expression("#e < :now")
                    .expression_attribute_names("#e", ATTR_EXPIRES_AT)
                    .expression_attribute_values(":now", now.clone());
                if matches!(s.delete(&m, req).await?, crate::dynamo::store::Written::Done(_)) {
                    deleted += 1;
                }
            }
            start = page.last_evaluated_key.filter(|k| !k.is_empty());
            if start.is_none() {
                break;
            }
        }
        match start {
            Some(after) => {
                let blank = || AttributeValue::S(String::new());
                let req = s
                    .client
                    .put_item()
                    .table_name(table)
                    .item(TX_PK, AttributeValue::S(EXPIRY_PK.into()))
                    .item(TX_SK, AttributeValue::S(SK_CURSOR.into()))
                    .item(C_AFTER_ID, after.get(TX_PK).cloned().unwrap_or_else(blank))
                    .item(C_AFTER_SK, after.get(TX_SK).cloned().unwrap_or_else(blank));
                s.put(&m, req).await?;
            }
            None => {
                s.delete(&m, s.client.delete_item().table_name(table).set_key(Some(cursor_key))).await?;
            }
        }
        Ok(deleted)
    }

    async fn sweep_one(&self, id: &str, report: &mut SweepReport, started: Instant) -> Result<(), TxError> {
        let m = Meter::default();
        let h = records::read_header(&self.store, &m, id).await?;
        let cutoff = crate::model::value::now_ms().saturating_sub(self.stale_after.as_millis() as u64);
        if h.finished() || h.updated_at >= cutoff {
            return Ok(());
        }
        if let (Some(sm), Some(arn)) = (&self.state_machine, &h.execution_arn) {
            if !is_express(arn) && execution_running(&sm.client, arn).await? {
                report.running.push(id.to_string());
                return Ok(());
            }
        }
        if h.state == TxState::Pending {
            let d = Decision::aborted(format!(
                "abandoned: no execution was driving it and it made no progress for {} s",
                self.stale_after.as_secs()
            ));
            if records::decide_rollback(&self.store, &m, id, Some(h.attempt), &d).await? == TxState::RolledBack {
                report.rolled_back.push(id.to_string());
            }
        } else if h.retry_pending {
            // Nobody drives it any more, so no other attempt will start: it ends with the reason it carries.
            let why = format!(
                "no other attempt started within {} s: nothing was driving the transaction",
                self.stale_after.as_secs()
            );
            if records::give_up(&self.store, &m, &h, &why).await? {
                report.rolled_back.push(id.to_string());
            }
        }
        match &self.state_machine {
            Some(sm) => {
                let h = records::read_header(&self.store, &m, id).await?;
                let name = format!("recover-{id}-v{}", h.version);
                let arn = match sm.start_for(id, &name).await {
                    Ok(out) => out.execution_arn,
                    Err(e) if e.as_service_error().is_some_and(|s| s.is_execution_already_exists()) => name,
                    Err(e) => {
                        return Err(TxError::Internal(format!(
                            "StartExecution: {}",
                            aws_sdk_sfn::error::DisplayErrorContext(&e)
                        )))
                    }
                };
                report.recovery_executions.push(arn);
            }
            None => {
                let left = self.budget.saturating_sub(started.elapsed());
                let driver = Driver::new(self.store.clone());
                let outcome = match tokio::time::timeout(left, driver.drive(id)).await {
                    Ok(Ok(done)) => format!("{:?}", done.state),
                    Ok(Err(TxError::Canceled(_) | TxError::Aborted(_))) => "RolledBack".to_string(),
                    Ok(Err(e)) => return Err(e),
                    Err(_) => {
                        report.more = true;
                        "TimedOut".to_string()
                    }
                };
                report.finished.push(Swept { transaction_id: id.to_string(), outcome });
            }
        }
        Ok(())
    }
}

/// Whether `arn` names an execution of an Express state machine (`arn:<partition>:states:<region>:<account>:express:
/// <state machine>:<name>:<id>`). Step Functions keeps no history of those, and `DescribeExecution` does not answer for
/// them, so the sweeper cannot ask whether one still runs. It need not: an Express execution lasts 5 minutes at most,
/// so one whose transaction has not moved for `SweepAfterSeconds` (over 300 with Express, as the template says) has
/// ended, and the transaction is recovered like one whose execution failed.
pub fn is_express(arn: &str) -> bool {
    arn.split(':').nth(5) == Some("express")
}

async fn execution_running(client: &aws_sdk_sfn::Client, arn: &str) -> Result<bool, TxError> {
    match client.describe_execution().execution_arn(arn).send().await {
        Ok(out) => Ok(out.status == aws_sdk_sfn::types::ExecutionStatus::Running),
        Err(e) if e.as_service_error().is_some_and(|s| s.is_execution_does_not_exist()) => Ok(false),
        Err(e) => Err(TxError::Internal(format!("DescribeExecution: {}", aws_sdk_sfn::error::DisplayErrorContext(&e)))),
    }
}
