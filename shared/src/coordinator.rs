//! The in-process driver: runs a whole transaction through the same phase functions the Lambdas run, for Rust
//! services that do not use Step Functions (the role the Java dynamodb-transactions library's TransactionManager
//! plays). It is also how the sweeper and tests finish a transaction somebody else started.
//!
//! Contention follows wound-wait, decided by transaction age (ULIDs sort by start time):
//! - a holder that is committed or rolled back is helped to its end;
//! - a pending holder younger than us is rolled back ("wounded"), so the older transaction always wins and two
//!   transactions can never keep rolling each other back;
//! - a pending holder older than us is waited for, and rolled back only if its header version stays unchanged for
//!   a whole lease (measured on our own clock, so no trust in other machines' clocks);
//! - a `Parent` goes by ticket instead (see [`crate::phase::queue`]): its holder is waited for whatever its age;
//! - a wait longer than `LockWaitSeconds`, or past the deadline, cancels our own transaction with
//!   `TransactionConflict` on the contended action, as DynamoDB reports a conflict.

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tracing::{info, warn};

use crate::error::{CancellationReason, TxError};
use crate::phase::{self, resume::Step, Contention, Outcome, Release};
use crate::records::{self, Decision, Header, TxState};
use crate::store::{Meter, Store, Usage};

/// What a transaction waiting for another's lock has seen so far. The state machine carries it between Lambda calls
/// as `Contention`, so a wait spanning many calls still measures the holder's progress and the time waited.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Waiting {
    /// The holder's transaction id.
    pub holder: String,
    /// The holder's header version (for the parent, the parent item's record version number), and when (ms since the
    /// epoch, on the waiter's clock) it was first seen.
    pub version: u64,
    pub since_ms: u64,
    /// When this transaction started waiting.
    pub waiting_since_ms: u64,
    /// The contended action (request order), or none for the parent item.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<usize>,
    pub item: String,
}

/// What to do after [`Coordinator::resolve`].
#[derive(Debug, Clone, PartialEq)]
pub enum Resolution {
    /// Something changed (a lock was broken, a holder helped or rolled back, or this transaction was cancelled):
    /// run the next step now.
    Retry,
    /// Wait, then try again with this.
    Wait(Waiting),
}

/// Runs one step of a transaction (anything but `Finished`). Each phase's future is boxed: they are large, and a
/// coordinator that helps another transaction nests them.
pub async fn run_step(s: &Store, tx_id: &str, step: Step) -> Result<crate::phase::Report, TxError> {
    match step {
        Step::Lock(b) => Box::pin(phase::lock::lock(s, tx_id, b)).await,
        Step::Save(b) => Box::pin(phase::save::save(s, tx_id, b)).await,
        Step::Apply(b) => Box::pin(phase::apply::apply(s, tx_id, b)).await,
        Step::Commit => Box::pin(phase::commit::commit(s, tx_id)).await,
        Step::Complete(b) => Box::pin(phase::complete::complete(s, tx_id, b)).await,
        Step::Rollback(b) => Box::pin(phase::rollback::rollback(s, tx_id, b, None)).await,
        Step::Release => Box::pin(phase::release::release(s, tx_id)).await,
        Step::Finished => Err(TxError::Internal(format!("transaction {tx_id} has finished: no step to run"))),
    }
}

/// The result of a committed transaction.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Committed {
    pub transaction_id: String,
    pub state: TxState,
    pub actions: usize,
    pub batches: usize,
    /// DynamoDB calls and capacity, summed over every phase run (recorded on the header).
    pub usage: Usage,
    pub elapsed_ms: u64,
}

#[derive(Debug, Clone)]
pub struct Coordinator {
    store: Store,
    /// First wait after meeting a lock; doubles up to `max_wait`.
    pub min_wait: Duration,
    pub max_wait: Duration,
}

impl Coordinator {
    pub fn new(store: Store) -> Self {
        Self { store, min_wait: Duration::from_millis(20), max_wait: Duration::from_millis(500) }
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Runs a whole transaction: begin, then drive it to its end. Errors with `TransactionCanceled` (and the reasons)
    /// when it rolled back.
    pub async fn run(&self, body: &Value) -> Result<Committed, TxError> {
        let begun = Box::pin(phase::begin::begin(&self.store, body)).await?;
        self.drive(&begun.transaction_id).await
    }

    /// `run`, sending the request again after a cancellation that was not its own doing (a conflict with another
    /// transaction, not a failed condition). Every attempt carries the first one's age (a ULID with the first
    /// attempt's timestamp), so under wound-wait a retried transaction only gets older relative to newcomers and
    /// cannot be starved by a stream of them.
    ///
    /// An attempt rolled back by an older transaction (wound-wait) waits for that one to end, then tries again
    /// without counting against `attempts`: each such rollback means an older transaction is making progress, and
    /// the oldest always commits, so these retries end. Other cancellations (`LockWaitSeconds`, a holder judged
    /// stale) count, up to `attempts` in all. No attempt starts after the first one's deadline. A request with a
    /// `ClientRequestToken` is not retried: the token names the first attempt.
    pub async fn run_retrying(&self, body: &Value, attempts: u32) -> Result<Committed, TxError> {
        let first = ulid::Ulid::new();
        let mut counted = 1;
        let mut deadline = None;
        loop {
            let id = ulid::Ulid::from_parts(first.timestamp_ms(), rand_bits()).to_string();
            let begun = Box::pin(phase::begin::begin_as(&self.store, body, None, Some(&id))).await?;
            let result = self.drive(&begun.transaction_id).await;
            let Err(TxError::Canceled(c)) = &result else { return result };
            if body.get("ClientRequestToken").is_some() || c.failed().any(|(_, r)| r.code == CancellationReason::CONDITIONAL_CHECK_FAILED) {
                return result;
            }
            let h = records::read_header(&self.store, &Meter::default(), &begun.transaction_id).await?;
            let deadline = *deadline.get_or_insert(h.deadline);
            match h.decision.and_then(|d| d.wounded_by) {
                Some(older) => self.wait_for_end(&older).await?,
                None if counted < attempts => {
                    counted += 1;
                    self.sleep(counted.min(6)).await;
                }
                None => return result,
            }
            if records::now_ms() >= deadline {
                return result;
            }
        }
    }

    /// Waits until transaction `tx_id` has ended, or has made no progress (an unchanged header version) for a whole
    /// lease. A transaction rolled back by an older one waits for it before trying again: starting at once would take
    /// the locks the older one is still waiting for, and be rolled back by it again and again.
    pub async fn wait_for_end(&self, tx_id: &str) -> Result<(), TxError> {
        let lease = self.store.cfg.lease;
        let mut seen: Option<(u64, Instant)> = None;
        let mut attempt = 0;
        loop {
            let h = match records::read_header(&self.store, &Meter::default(), tx_id).await {
                Ok(h) => h,
                Err(TxError::NotFound(_)) => return Ok(()),
                Err(e) => return Err(e),
            };
            if h.finished() {
                return Ok(());
            }
            match seen {
                Some((v, since)) if v == h.version => {
                    if since.elapsed() >= lease {
                        return Ok(());
                    }
                }
                _ => seen = Some((h.version, Instant::now())),
            }
            attempt += 1;
            self.sleep(attempt).await;
        }
    }

    /// Drives an existing transaction from wherever it stopped to its end.
    pub async fn drive(&self, tx_id: &str) -> Result<Committed, TxError> {
        let started = Instant::now();
        let h = Box::pin(self.drive_until(tx_id, |_, _| false)).await?;
        finished(&h, started)
    }

    /// Drives a pending transaction until every item is locked, meeting other transactions' locks as [`drive`]
    /// does; it then holds every lock and has changed nothing. Errors with `TransactionCanceled` when it was rolled
    /// back instead (by its own condition, a deadline, or an older transaction), after finishing that rollback.
    ///
    /// [`drive`]: Coordinator::drive
    pub async fn drive_locks(&self, tx_id: &str) -> Result<Header, TxError> {
        let started = Instant::now();
        let h = Box::pin(self.drive_until(tx_id, |h, step| h.state == TxState::Pending && !matches!(step, Step::Lock(_)))).await?;
        match (h.state, finished(&h, started)) {
            (TxState::Pending, _) => Ok(h),
            (_, Err(e)) => Err(e),
            (_, Ok(_)) => Err(TxError::Internal(format!("transaction {tx_id} committed while its locks were being taken"))),
        }
    }

    /// Runs steps until `stop` says so or the transaction has finished; returns the header last read.
    async fn drive_until(&self, tx_id: &str, stop: impl Fn(&Header, &Step) -> bool) -> Result<Header, TxError> {
        let mut waiting: Option<Waiting> = None;
        let mut attempt = 0u32;
        loop {
            let (h, step) = Box::pin(phase::resume::resume(&self.store, tx_id)).await?;
            if step == Step::Finished || stop(&h, &step) {
                return Ok(h);
            }
            let report = run_step(&self.store, tx_id, step).await?;
            match report.outcome {
                Outcome::Contended(c) => match Box::pin(self.resolve_all(&h, &c, &report.also_contended, waiting.as_ref(), None)).await? {
                    Resolution::Retry => {}
                    Resolution::Wait(w) => {
                        waiting = Some(w);
                        attempt += 1;
                        self.sleep(attempt).await;
                    }
                },
                Outcome::Done | Outcome::Canceled | Outcome::Ended { .. } => {
                    waiting = None;
                    attempt = 0;
                }
            }
        }
    }

    async fn sleep(&self, attempt: u32) {
        let base = self.min_wait.as_millis() as u64;
        let cap = (base << attempt.min(10)).min(self.max_wait.as_millis() as u64).max(1);
        let jitter = (ulid::Ulid::new().random() % (cap as u128)) as u64;
        tokio::time::sleep(Duration::from_millis(cap / 2 + jitter / 2)).await;
    }

    /// Resolves every contention a lock run met: each younger or decided holder is dealt with at once (one at a
    /// time, a stream of newer transactions could keep an old one busy), then what to do about `first` is returned.
    pub async fn resolve_all(
        &self,
        me: &Header,
        first: &Contention,
        others: &[Contention],
        prev: Option<&Waiting>,
        help_budget: Option<Duration>,
    ) -> Result<Resolution, TxError> {
        let mut changed = false;
        let mut seen = std::collections::HashSet::from([first.holder.clone()]);
        for c in others {
            if seen.insert(c.holder.clone()) {
                changed |= Box::pin(self.resolve(me, c, None, help_budget)).await? == Resolution::Retry;
            }
        }
        match Box::pin(self.resolve(me, first, prev, help_budget)).await? {
            Resolution::Wait(_) if changed => Ok(Resolution::Retry),
            r => Ok(r),
        }
    }

    /// Resolves one contention met by transaction `me`. `prev` is what the previous attempt saw (the state machine
    /// carries it between Lambda calls in `Contention`). Helping another transaction to its end is bounded by
    /// `help_budget` when given; stopping it half-way is safe, as every phase is.
    pub async fn resolve(
        &self,
        me: &Header,
        c: &Contention,
        prev: Option<&Waiting>,
        help_budget: Option<Duration>,
    ) -> Result<Resolution, TxError> {
        let s = &self.store;
        let m = Meter::default();
        let now = records::now_ms();
        let holder = match records::read_header(s, &m, &c.holder).await {
            Ok(h) => Some(h),
            Err(TxError::NotFound(_)) => None,
            Err(e) => return Err(e),
        };
        let watched = match &holder {
            Some(h) if h.state == TxState::Pending && !h.finished() => Some(Box::pin(self.liveness(&m, me, h, c)).await?),
            _ => None,
        };
        match holder {
            // A lock left by a transaction that has ended (or whose records have expired): nobody will release it.
            Some(ref h) if h.finished() => return self.break_lock(me, c).await.map(|_| Resolution::Retry),
            None if c.action.is_some() => return self.break_lock(me, c).await.map(|_| Resolution::Retry),
            Some(ref h) if h.state != TxState::Pending => {
                info!(tx_id = %me.id, holder = %h.id, "helping a decided transaction to its end");
                self.help(&h.id, help_budget).await?;
                return Ok(Resolution::Retry);
            }
            // Item locks go by age (wound-wait); the parent goes by ticket (FIFO), so its holder is never wounded.
            Some(ref h) if h.id > me.id && c.action.is_some() => {
                info!(tx_id = %me.id, holder = %h.id, "rolling back a younger transaction that holds our lock");
                let d = Decision {
                    wounded_by: Some(me.id.clone()),
                    ..Decision::because(format!("an older transaction ({}) needed {}", me.id, c.item))
                };
                records::decide_rollback(s, &m, &h.id, &d).await?;
                self.help(&h.id, help_budget).await?;
                return Ok(Resolution::Retry);
            }
            Some(ref h) => {
                let (version, lease_ms) = watched.unwrap_or_default();
                let same = prev.is_some_and(|p| p.holder == h.id && p.version == version);
                if same && now.saturating_sub(prev.map_or(now, |p| p.since_ms)) >= lease_ms {
                    warn!(tx_id = %me.id, holder = %h.id, "holder made no progress for a whole lease: rolling it back");
                    let d = Decision::because(format!("no progress for {} s while {} waited", lease_ms / 1000, me.id));
                    records::decide_rollback(s, &m, &h.id, &d).await?;
                    self.help(&h.id, help_budget).await?;
                    return Ok(Resolution::Retry);
                }
            }
            // A parent lock held by someone outside this protocol: only waiting helps.
            None => {}
        }
        let waiting_since_ms = prev.map_or(now, |p| p.waiting_since_ms);
        let waited_ms = now.saturating_sub(waiting_since_ms);
        let waited_too_long = me.lock_wait_seconds.is_some_and(|w| waited_ms >= w * 1000);
        if waited_too_long || now > me.deadline {
            let reason = CancellationReason::new(
                CancellationReason::TRANSACTION_CONFLICT,
                format!("{} is locked by transaction {}", c.item, c.holder),
            );
            let d = match c.action {
                Some(i) => Decision { failed: vec![(i, reason)], ..Decision::default() },
                None => Decision::because(format!("the Parent item {} is locked by {}", c.item, c.holder)),
            };
            records::decide_rollback(s, &m, &me.id, &d).await?;
            return Ok(Resolution::Retry);
        }
        // A waiting transaction makes no progress of its own, so it beats its heart: younger waiters judge an older
        // holder stale only when its version stays the same for a whole lease.
        if now.saturating_sub(me.updated_at) >= s.cfg.lease.as_millis() as u64 / 3 {
            Box::pin(phase::heartbeat(s, &m, me)).await?;
        }
        let version = watched.map_or(0, |w| w.0);
        let (since_ms, version) = match prev {
            Some(p) if p.holder == c.holder && p.version == version => (p.since_ms, version),
            _ => (now, version),
        };
        Ok(Resolution::Wait(Waiting {
            holder: c.holder.clone(),
            version,
            since_ms,
            waiting_since_ms,
            action: c.action,
            item: c.item.clone(),
        }))
    }

    /// What a waiter watches of a pending holder, and for how long: for an item, the holder's header version and
    /// our lease; for the parent, the record version number and the lease on the parent item itself (seed 001).
    async fn liveness(&self, m: &Meter, me: &Header, h: &Header, c: &Contention) -> Result<(u64, u64), TxError> {
        let s = &self.store;
        let ours = (h.version, s.cfg.lease.as_millis() as u64);
        let (Some(p), None) = (&me.parent, c.action) else { return Ok(ours) };
        let Some(item) = s.get(m, &p.table_name, p.key.clone()).await? else { return Ok(ours) };
        match records::ParentLockAttrs::of(&item) {
            Some(a) if a.holder == h.id => match (a.record_version_number, a.lease_seconds) {
                (Some(rvn), Some(lease)) => Ok((rvn, lease.saturating_mul(1000))),
                _ => Ok(ours),
            },
            _ => Ok(ours),
        }
    }

    async fn help(&self, tx_id: &str, budget: Option<Duration>) -> Result<(), TxError> {
        match budget {
            None => Box::pin(self.drive_quietly(tx_id)).await,
            Some(b) => match tokio::time::timeout(b, Box::pin(self.drive_quietly(tx_id))).await {
                Ok(r) => r,
                Err(_) => Ok(()),
            },
        }
    }

    /// Drives another transaction to its end, whatever its outcome.
    async fn drive_quietly(&self, tx_id: &str) -> Result<(), TxError> {
        match self.drive(tx_id).await {
            Ok(_) | Err(TxError::Canceled(_)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Clears a lock whose transaction has ended: an item lock is released like a rollback would, a parent lock
    /// removed, each only while it still names that transaction.
    async fn break_lock(&self, me: &Header, c: &Contention) -> Result<(), TxError> {
        let s = &self.store;
        let m = Meter::default();
        warn!(tx_id = %me.id, holder = %c.holder, item = %c.item, "clearing a lock left by an ended transaction");
        match c.action {
            Some(i) => {
                let plan = records::read_plan(s, &m, &me.id).await?;
                for b in 0..plan.batch_count() {
                    for (_, a) in records::read_batch(s, &m, &me.id, &plan, b).await? {
                        if a.index == i {
                            return phase::release_key(s, &m, &c.holder, &a.table, &a.key, Release::Keep).await;
                        }
                    }
                }
                Ok(())
            }
            None => match &me.parent {
                Some(p) => phase::unlock_parent(s, &m, p, &c.holder).await,
                None => Ok(()),
            },
        }
    }
}

fn rand_bits() -> u128 {
    ulid::Ulid::new().random()
}

fn finished(h: &Header, started: Instant) -> Result<Committed, TxError> {
    match h.state {
        TxState::Committed => Ok(Committed {
            transaction_id: h.id.clone(),
            state: h.state,
            actions: h.actions,
            batches: h.batches,
            usage: h.usage,
            elapsed_ms: started.elapsed().as_millis() as u64,
        }),
        _ => Err(TxError::Canceled(Box::new(h.cancellation().unwrap_or_else(|| Decision::default().cancellation(&h.id, h.actions))))),
    }
}
