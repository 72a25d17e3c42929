//! How a [`Driver`] resolves the contention its steps meet ([`Driver::resolve_all`], [`Driver::resolve`]).
//!
//! Contention follows wound-wait, decided by transaction age (ULIDs sort by start time):
//! - a holder that is committed or rolled back is helped to the end of its attempt;
//! - a pending holder younger than us is rolled back ("wounded"), so the older transaction always wins and two
//!   transactions can never keep rolling each other back;
//! - a pending holder older than us is waited for, and rolled back only if its header version stays unchanged for
//!   a whole lease (measured on our own clock, so no trust in other machines' clocks);
//! - a `Parent` goes by ticket instead (see [`crate::protocol::parent::queue`]): its holder is waited for whatever its
//!   age;
//! - a wait longer than `LockWaitSeconds`, or past the deadline, cancels our own transaction with
//!   `TransactionConflict` on each contended action (or as the parent's reason), naming the holder, as DynamoDB
//!   reports a conflict.
//!
//! A transaction rolled back by another's need (wounded, found stalled, its parent taken over) is not cancelled: its
//! own driver starts another attempt of it ([`crate::protocol::phase::retry`]), with the same id and so the same age. A
//! wounded transaction's next attempt first waits, holding nothing, for the one that wounded it to end. Each such
//! rollback means an older transaction is making progress, and the oldest always commits, so a retried transaction only
//! gets older relative to newcomers: it is never starved. Only the deadline ends the retries.

use std::time::Duration;

use tracing::{info, warn};

use super::{Driver, Resolution, Waiting};
use crate::dynamo::store::Meter;
use crate::error::{CancellationReason, TxError};
use crate::protocol::phase::Contention;
use crate::protocol::records::{self, Decision, Header, TxState};
use crate::protocol::unlock::Release;

impl Driver {
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
        for (i, c) in others.iter().enumerate() {
            if seen.insert(c.holder.clone()) {
                // The holder's other contentions go with it: an ended attempt's locks are all cleared at once.
                let same: Vec<Contention> = others[i + 1..].iter().filter(|o| o.holder == c.holder).cloned().collect();
                changed |= Box::pin(self.resolve(me, c, &same, None, help_budget)).await? == Resolution::Retry;
            }
        }
        match Box::pin(self.resolve(me, first, others, prev, help_budget)).await? {
            Resolution::Wait(_) if changed => Ok(Resolution::Retry),
            r => Ok(r),
        }
    }

    /// Resolves one contention met by transaction `me`; `others` are the other contentions of the same lock run, named
    /// with it when the wait is given up, and cleared with it when they carry the same ended attempt's lock. `prev` is
    /// what the previous attempt saw (the state machine carries it between Lambda calls in `Contention`). Helping
    /// another transaction to its end is bounded by `help_budget` when given; stopping it half-way is safe, as every
    /// phase is.
    pub async fn resolve(
        &self,
        me: &Header,
        c: &Contention,
        others: &[Contention],
        prev: Option<&Waiting>,
        help_budget: Option<Duration>,
    ) -> Result<Resolution, TxError> {
        let s = &self.store;
        let m = Meter::default();
        let (holder_id, holder_attempt) = records::parse_owner(&c.holder);
        if holder_id == me.id {
            // A lock an earlier attempt of ours left behind.
            return self.break_locks(me, c, others).await;
        }
        let holder = match records::read_header(s, &m, holder_id).await {
            Ok(h) => Some(h),
            Err(TxError::NotFound(_)) => None,
            Err(e) => return Err(e),
        };
        // A pending holder, or one whose rolled-back attempt awaits its driver's next: watched for progress.
        let watched = match &holder {
            Some(h) if !h.finished() && (h.state == TxState::Pending || awaits_retry(h)) => {
                Some(Box::pin(self.liveness(&m, me, h, c)).await?)
            }
            _ => None,
        };
        // Read after the holder's version: a version first seen now was written before this moment, so a lease counted
        // from it never ends before a whole lease after the holder's last beat.
        let now = crate::model::value::now_ms();
        match holder {
            // A lock left by a transaction that has ended (or whose records have expired), or by an attempt that was
            // followed by another: nobody will release it.
            Some(ref h) if h.finished() => return self.break_locks(me, c, others).await,
            None if c.action.is_some() => {
                // Its items' locks only: a parent lock whose holder has no header may be held outside this protocol.
                let items: Vec<Contention> = others.iter().filter(|o| o.action.is_some()).cloned().collect();
                return self.break_locks(me, c, &items).await;
            }
            Some(ref h) if c.locked && h.attempt != holder_attempt => return self.break_locks(me, c, others).await,
            Some(ref h) if awaits_retry(h) => {
                let (version, lease_ms) = watched.unwrap_or_default();
                if stalled(prev, &c.holder, version, lease_ms, now) {
                    warn!(tx_id = %me.id, holder = %h.id, "no attempt followed a rolled-back one for a whole lease: ending it");
                    Box::pin(records::give_up(
                        s,
                        &m,
                        h,
                        &format!("no other attempt started for {} s, while {} waited", lease_ms / 1000, me.id),
                    ))
                    .await?;
                    self.help(&h.id, help_budget).await?;
                    return Ok(Resolution::Retry);
                }
            }
            Some(ref h) if h.state != TxState::Pending => {
                info!(tx_id = %me.id, holder = %h.id, "helping a decided transaction to the end of its attempt");
                self.help(&h.id, help_budget).await?;
                return Ok(Resolution::Retry);
            }
            // Item locks go by age (wound-wait); the parent goes by ticket (FIFO), so its holder is never wounded.
            Some(ref h) if h.id > me.id && c.action.is_some() => {
                info!(tx_id = %me.id, holder = %h.id, "rolling back a younger transaction that holds our lock");
                let d = Decision::wound(&me.id, Box::pin(self.action_of(&m, &h.id, c)).await?, &c.item);
                return self.roll_back_holder(&m, h, c, holder_attempt, &d, help_budget).await;
            }
            Some(ref h) => {
                let (version, lease_ms) = watched.unwrap_or_default();
                if stalled(prev, &c.holder, version, lease_ms, now) {
                    warn!(tx_id = %me.id, holder = %h.id, "holder made no progress for a whole lease: rolling it back");
                    let d = self.stale_decision(&m, me, h, c, lease_ms).await?;
                    return self.roll_back_holder(&m, h, c, holder_attempt, &d, help_budget).await;
                }
            }
            // A parent lock held by someone outside this protocol: only waiting helps.
            None => {}
        }
        self.wait(&m, me, c, others, prev, watched, now).await
    }

    /// Waits for the holder of `c`, which nothing else resolves yet: gives the wait up once `LockWaitSeconds` or the
    /// deadline passes, beats `me`'s heart meanwhile, and says what it waits on (`watched`: the holder's version and
    /// lease, when watched).
    #[allow(clippy::too_many_arguments)]
    async fn wait(
        &self,
        m: &Meter,
        me: &Header,
        c: &Contention,
        others: &[Contention],
        prev: Option<&Waiting>,
        watched: Option<(u64, u64)>,
        now: u64,
    ) -> Result<Resolution, TxError> {
        let s = &self.store;
        let waiting_since_ms = prev.map_or(now, |p| p.waiting_since_ms);
        let waited_ms = now.saturating_sub(waiting_since_ms);
        let waited_too_long = me.lock_wait_seconds.filter(|w| waited_ms >= w * 1000);
        if waited_too_long.is_some() || now > me.deadline {
            let limit = match waited_too_long {
                Some(w) => format!("LockWaitSeconds ({w}) passed waiting for it"),
                None => "the deadline passed waiting for it".to_string(),
            };
            self.give_up(me, std::iter::once(c).chain(others), &limit).await?;
            return Ok(Resolution::Retry);
        }
        // A waiting transaction makes no progress of its own, so it beats its heart: younger waiters judge an older
        // holder stale only when its version stays the same for a whole lease.
        if now.saturating_sub(me.updated_at) >= s.cfg.lease.as_millis() as u64 / 3 {
            Box::pin(crate::protocol::parent::heartbeat(s, m, me)).await?;
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

    /// The decision that rolls back holder `h`, which made no progress for a whole lease (`lease_ms`) while `me`
    /// waited for `c`.
    async fn stale_decision(
        &self,
        m: &Meter,
        me: &Header,
        h: &Header,
        c: &Contention,
        lease_ms: u64,
    ) -> Result<Decision, TxError> {
        Ok(match c.action {
            Some(_) => Decision::retry(
                Some(&me.id),
                Box::pin(self.action_of(m, &h.id, c)).await?,
                &c.item,
                format!(
                    "transaction {} waited {} s for {} while this one made no progress",
                    me.id,
                    lease_ms / 1000,
                    c.item
                ),
            ),
            None => Decision::retry(
                Some(&me.id),
                None,
                &c.item,
                format!(
                    "transaction {} took the Parent item {} over after {} s without a heartbeat",
                    me.id,
                    c.item,
                    lease_ms / 1000
                ),
            ),
        })
    }

    /// Decides the holder's attempt rolled back with `d` (the attempt its lock names, or for a queue row its current
    /// one), then helps it to the end of that attempt.
    async fn roll_back_holder(
        &self,
        m: &Meter,
        h: &Header,
        c: &Contention,
        holder_attempt: u32,
        d: &Decision,
        help_budget: Option<Duration>,
    ) -> Result<Resolution, TxError> {
        let attempt = if c.locked { holder_attempt } else { h.attempt };
        Box::pin(records::decide_rollback(&self.store, m, &h.id, Some(attempt), d)).await?;
        self.help(&h.id, help_budget).await?;
        Ok(Resolution::Retry)
    }

    /// Gives up waiting: decides this attempt of `me` rolled back with `TransactionConflict` on each contended action
    /// (or as the parent's reason), naming the holder, `limit` saying why the wait ended.
    pub async fn give_up<'c>(
        &self,
        me: &Header,
        contentions: impl Iterator<Item = &'c Contention>,
        limit: &str,
    ) -> Result<(), TxError> {
        let d = give_up_waiting(me, contentions, limit);
        Box::pin(records::decide_rollback(&self.store, &Meter::default(), &me.id, Some(me.attempt), &d)).await?;
        Ok(())
    }

    /// The action of transaction `tx_id` on the item `c` is about (request order), when `c` names one.
    async fn action_of(&self, m: &Meter, tx_id: &str, c: &Contention) -> Result<Option<usize>, TxError> {
        let Some((table, key)) = &c.key else { return Ok(None) };
        Ok(crate::protocol::stored_request::find_action(&self.store, m, tx_id, table, key)
            .await?
            .map(|(_, _, a)| a.index))
    }

    /// What a waiter watches of a holder, and for how long: for an item, the holder's header version and our lease;
    /// for the parent, the record version number and the lease on the parent item itself (as the DynamoDB Lock Client
    /// keeps it).
    async fn liveness(&self, m: &Meter, me: &Header, h: &Header, c: &Contention) -> Result<(u64, u64), TxError> {
        let s = &self.store;
        let ours = (h.version, s.cfg.lease.as_millis() as u64);
        let (Some(p), None) = (&me.parent, c.action) else { return Ok(ours) };
        let Some(item) = s.get(m, &p.table_name, p.key.clone()).await? else { return Ok(ours) };
        match crate::model::item_attrs::ParentLockAttrs::of(&item) {
            Some(a) if records::parse_owner(&a.holder).0 == h.id && h.state == TxState::Pending => {
                match (a.record_version_number, a.lease_seconds) {
                    (Some(rvn), Some(lease)) => Ok((rvn, lease.saturating_mul(1000))),
                    _ => Ok(ours),
                }
            }
            _ => Ok(ours),
        }
    }

    /// Drives another transaction to the end of its attempt, bounded by `budget` when given.
    /// Only a decided attempt is helped: once the transaction is pending again (its driver started its next attempt),
    /// that attempt is its driver's to run, and helping stops. So helping never meets contention of its own, and one
    /// transaction's wait never runs down a chain of others' lock phases.
    async fn help(&self, tx_id: &str, budget: Option<Duration>) -> Result<(), TxError> {
        let run = Box::pin(self.drive_until(tx_id, false, |h, _| h.state == TxState::Pending));
        let r = match budget {
            None => run.await,
            Some(b) => match tokio::time::timeout(b, run).await {
                Ok(r) => r,
                Err(_) => return Ok(()),
            },
        };
        r.map(|_| ())
    }

    /// Clears the lock `c` met, whose attempt has ended, and every other lock of the run that carries the same lock
    /// value (in `others`): an attempt that ended with many items locked costs the run one retry, not one a lock.
    async fn break_locks(&self, me: &Header, c: &Contention, others: &[Contention]) -> Result<Resolution, TxError> {
        let same: Vec<&Contention> = std::iter::once(c).chain(others.iter().filter(|o| o.holder == c.holder)).collect();
        let locks = same.len();
        warn!(tx_id = %me.id, holder = %c.holder, item = %c.item, locks, "clearing locks left by an ended attempt");
        for chunk in same.chunks(self.store.cfg.concurrency.max(1)) {
            futures::future::try_join_all(chunk.iter().map(|c| self.break_lock(me, c))).await?;
        }
        Ok(Resolution::Retry)
    }

    /// Clears one lock whose attempt has ended: an item lock is released like a rollback would, a parent lock
    /// removed, each only while it still holds that lock value.
    async fn break_lock(&self, me: &Header, c: &Contention) -> Result<(), TxError> {
        let s = &self.store;
        let m = Meter::default();
        match (&c.key, c.action, &me.parent) {
            (Some((table, key)), _, _) => {
                crate::protocol::unlock::release_key(s, &m, &c.holder, table, key, Release::Keep, None)
                    .await
                    .map(|_| ())
            }
            (None, Some(_), _) => Ok(()),
            (None, None, Some(p)) => crate::protocol::parent::unlock_parent(s, &m, p, &c.holder).await,
            (None, None, None) => Ok(()),
        }
    }
}

/// Whether a rolled-back attempt of `h` is waiting for its driver to start the next one.
fn awaits_retry(h: &Header) -> bool {
    h.state == TxState::RolledBack && h.retry_pending && h.restored >= h.batches && !h.finished()
}

/// Whether the holder a waiter watches showed the same `version` for a whole lease (`prev` is what the waiter saw
/// before, on its own clock).
fn stalled(prev: Option<&Waiting>, holder: &str, version: u64, lease_ms: u64, now: u64) -> bool {
    prev.is_some_and(|p| p.holder == holder && p.version == version && now.saturating_sub(p.since_ms) >= lease_ms)
}

/// The decision of a transaction that gives up waiting (`limit` says why): `TransactionConflict` on every contended
/// action naming its holder, and on the parent when that was contended.
fn give_up_waiting<'c>(me: &Header, contentions: impl Iterator<Item = &'c Contention>, limit: &str) -> Decision {
    let mut d = Decision::default();
    for c in contentions {
        let holder = records::parse_owner(&c.holder).0;
        let waited_for = me.wait_for.as_ref().is_some_and(|w| w.holder == c.holder) && me.locked == 0;
        let text = match (c.action, waited_for) {
            (Some(_), true) => format!("transaction {holder}, which rolled back an earlier attempt of this one to take {}, has not ended; {limit}", c.item),
            (Some(_), false) => format!("{} is locked by transaction {holder}; {limit}", c.item),
            (None, _) if c.locked => format!("the Parent item {} is locked by transaction {holder}; {limit}", c.item),
            (None, _) => format!("transaction {holder} is ahead in the queue for the Parent item {}; {limit}", c.item),
        };
        let reason = CancellationReason::new(CancellationReason::TRANSACTION_CONFLICT, text);
        match c.action {
            Some(i) if !d.failed.iter().any(|(j, _)| *j == i) => d.failed.push((i, reason)),
            Some(_) => {}
            None => d.parent = Some(reason),
        }
    }
    d.failed.sort_by_key(|(i, _)| *i);
    d
}
