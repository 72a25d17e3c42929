//! lock: take the parent lock (first batch) and every item's lock. A run locks up to
//! [`RUN_BATCHES`](crate::constants::RUN_BATCHES) batches at once, every item of them with up to `SAGA_IN_FLIGHT`
//! writes in flight, and then records them locked with one header write; a run that meets another transaction's lock
//! records the batches before it.
//!
//! The caller's condition is evaluated here, in the same conditional write that takes the lock, on the item as it
//! was before the transaction. An item that does not exist is created to hold the lock and marked transient; the
//! condition still sees it as absent, because the write that creates it is the one that evaluates the condition.
//! Meeting another transaction's lock is contention, reported with the holder, never a failure.
//!
//! The lock write returns the item as it was (`ReturnValues: ALL_OLD`, at no extra cost; a run that finds its own lock
//! gets it back from the failed condition). Protocol 2 evaluates each update there
//! ([`dynamo_saga_expressions::eval::apply_update`], with the table's key and index key types): an update DynamoDB
//! would refuse cancels the transaction with `ValidationError` on that action, before anything can commit. A failed
//! condition anywhere takes precedence, as it does in a `TransactWriteItems` call.
//!
//! **Lock passes and lock ids.** Apply writes an item only while its lock is the one its batch was recorded locked
//! with, so a lock write that lands late (sent, its sender gave up on it or died, and DynamoDB carried it out after the
//! item was applied) can never have the item applied twice. Each run of lock writes is one pass, which first claims
//! the lock phase on the header (`lockPass`: a number above every earlier pass's, checked and set in one conditional
//! write, so one pass at a time holds it), and every lock write carries an id ([`LockId`], in `_sagaLockedAt`): the
//! pass's number. Lock writes are sent once ([`Store::update_once`]): the SDK never sends a copy of one, and when a
//! write's outcome is unknown (a timeout, a broken connection, a server error) the next write to that item carries a
//! new id, so no two requests that might both land carry the same id. An item a pass finds locked by an earlier pass
//! of the same attempt is given the new pass's id in a write conditioned on the older id (so no late copy of either
//! can undo it); one it finds locked by its own earlier write keeps that write's id, which had one copy, already
//! landed. The pass records its batches locked, with the ids it saw them take, only while it still holds the claim;
//! and only a pass whose every write to those batches had a known outcome records them. A late lock write therefore
//! carries an id apply does not expect: apply leaves it alone and removes it ([`super::apply`]), committed reads see
//! the item as it is ([`crate::drivers::read`]), and any later transaction or read through the library clears it.

use aws_sdk_dynamodb::types::AttributeValue;

use super::{decided, evaluate, now, opening, ph, used, Contention, Outcome, Report};
use crate::constants::{
    H_LATE_WRITES, H_LOCKED, H_LOCK_IDS, H_LOCK_OPEN, H_LOCK_PASS, H_LOCK_STARTED, MAX_TRANSACT_ACTIONS,
};
use crate::dynamo::lanes::concurrently;
use crate::dynamo::store::{Meter, Store};
use crate::error::{CancellationReason, TxError};
use crate::model::item_attrs::LockId;
use crate::model::plan::Part;
use crate::model::value::{self};
use crate::model::value::{n, s};
use crate::protocol::parent::beat_parent;
use crate::protocol::parent::queue;
use crate::protocol::records;
use crate::protocol::records::{Decision, Header, HeaderWrite, TxState};
use crate::protocol::shares::{self, Share};
use crate::protocol::unlock::{release_item, release_key, Release};

mod item;
mod met;

pub(crate) use item::lock_condition;
use item::{lock_item, lock_parent};
#[cfg(feature = "internals")]
use met::MetWire;
use met::{Held, Met, Taken};

enum ItemLock {
    Locked,
    /// Locked, and the write apply will send is one for DynamoDB to judge before the commit (protocol 2,
    /// [`crate::config::PrecommitCheck`]).
    Judge,
    /// Locked, and DynamoDB would refuse the action's update (protocol 2).
    Refused(CancellationReason),
    Failed(CancellationReason),
    Contended(Contention),
    /// Locked by this attempt for a later lock pass, which has claimed the lock phase since this one did.
    Superseded,
}

/// The lock pass a run writes for.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Pass {
    /// This pass's number ([`LockId::pass`]), and the batch before which an earlier pass of the attempt may have
    /// taken locks (the `lockStarted` it claimed over): those are taken over.
    Id(u64, usize),
    /// A transaction begun before lock writes carried ids: its locks carry the time instead, and apply trusts any
    /// lock of its attempt.
    Legacy,
}

pub async fn lock(store: &Store, tx_id: &str, batch: usize) -> Result<Report, TxError> {
    let m = Meter::default();
    let h = records::read_header(store, &m, tx_id).await?;
    lock_from(store, m, h, batch).await
}

/// [`lock`] from the header `h` its caller has just read.
pub(crate) async fn lock_from(store: &Store, m: Meter, h: Header, batch: usize) -> Result<Report, TxError> {
    let h = match opening(h, &m, TxState::Pending, |h| h.locked, batch) {
        Ok(h) => h,
        Err(report) => return Ok(*report),
    };
    let tx_id = h.id.as_str();
    if batch >= h.batches {
        return Err(TxError::Internal(format!("batch {batch} is out of range ({} batches)", h.batches)));
    }
    if batch == 0 {
        if let Some(report) = open_attempt(store, &m, &h).await? {
            return Ok(report);
        }
    }
    let plan = crate::protocol::stored_request::read_plan(store, &m, tx_id).await?;
    let run = super::run_from(&store.cfg, batch, h.batches);
    let Some(pass) = claim(store, &m, &h, run.end).await? else {
        // The header moved on first: another pass claimed the lock phase or recorded batches, or the attempt ended.
        return Ok(Report::new(Outcome::Done, &m));
    };
    let mut met = Met::default();
    lock_shares(store, &m, &h, &plan, run.clone(), pass, &mut met).await?;
    let Met { failed, refused, mut contention, taken, superseded, unknown, stopped_at } = met;
    if superseded {
        // A later pass holds the lock phase and takes these items over: leave them to it. A pause first, so that two
        // drivers of one transaction do not keep taking it from each other.
        crate::dynamo::store::backoff(4).await;
        return Ok(Report::new(Outcome::Done, &m));
    }
    if !failed.is_empty() || (!refused.is_empty() && contention.is_empty()) {
        let outcome =
            decide_refused(store, &m, &h, &plan, run.end, pass, Met { failed, refused, unknown, ..Met::default() })
                .await?;
        return Ok(Report::new(outcome, &m));
    }
    // The batches before the first one that met another transaction's lock are locked whole: the run after the wait
    // starts there. So are those before the first batch a share run here for want of a worker left for the call's
    // deadline: the next call goes on from there.
    let done = contention.iter().map(|c| c.batch).chain(stopped_at).min().unwrap_or(run.end);
    if done > batch && batch > 0 {
        beat_parent(store, &m, &h).await?;
    }
    let ended = if done > batch {
        record(store, &m, &h, pass, batch..done, &taken, unknown).await?
    } else {
        // Nothing to record (the run's first batch met another transaction's lock): every write of the pass has its
        // answer all the same, which the header is told, so that the next pass does not count this one abandoned.
        settle(store, &m, &h, pass, unknown).await?;
        None
    };
    if let Some(ended) = ended {
        let_go_after_decision(store, &m, &h, &plan, run, taken, pass, &ended).await?;
        return Ok(Report::new(ended, &m));
    }
    if !contention.is_empty() {
        contention.sort_by_key(|c| c.contention.action);
        let mut contention = contention.into_iter().map(|c| c.contention);
        let first = contention.next().expect("a contention");
        let mut r = Report::new(Outcome::Contended(first), &m);
        r.also_contended = contention.collect();
        return Ok(r);
    }
    Ok(Report::new(Outcome::Done, &m))
}

/// What a lock run lets go of when its transaction was decided while it was taking locks (`ended`): whoever decided it
/// may already have passed the items, so this run's locks are released here.
#[allow(clippy::too_many_arguments)]
async fn let_go_after_decision(
    store: &Store,
    m: &Meter,
    h: &Header,
    plan: &crate::model::plan::Plan,
    run: std::ops::Range<usize>,
    taken: Vec<Taken>,
    pass: Pass,
    ended: &Outcome,
) -> Result<(), TxError> {
    let owner = h.owner();
    if h.commits_first() && *ended == (Outcome::Ended { state: TxState::Committed }) {
        // Committed by a pass that recorded every batch locked before this one could: each item it took is now
        // that pass's, under that pass's id, unless this pass locked it after apply had written it. Those locks,
        // which carry this pass's ids, are let go of; the others are the items' "not applied yet" marks, which
        // only apply removes.
        if let Pass::Id(..) = pass {
            concurrently(taken, store.cfg.concurrency, |t| {
                let (m, owner) = (m, &owner);
                async move {
                    release_key(store, m, owner, &t.table, &t.key, Release::Keep, Some(t.id)).await.map(|_| ())
                }
            })
            .await?;
        }
        return Ok(());
    }
    // The transaction was decided while this run was taking locks: whoever decided it may already have passed
    // these items, so let go of them here.
    let actions = crate::protocol::stored_request::read_batches(store, m, &h.id, plan, run, Part::Heads).await?;
    concurrently(actions, store.cfg.concurrency, |(_, _, a)| {
        let (m, owner) = (m, &owner);
        async move { release_item(store, m, owner, &a, Release::Keep).await }
    })
    .await?;
    Ok(())
}

/// What the first lock step of an attempt does before any batch: wait, holding nothing, for the transaction that
/// rolled the attempt before it back, and take the `Parent` lock in its queue's order. `Some` when the step ends there.
async fn open_attempt(store: &Store, m: &Meter, h: &Header) -> Result<Option<Report>, TxError> {
    // Another attempt first waits, holding nothing, for the transaction that rolled the last one back to end;
    // starting at once would take the locks that one is waiting for.
    if let Some(w) = &h.wait_for {
        if running(store, m, &w.holder).await? {
            let c = Contention {
                holder: w.holder.clone(),
                action: w.action,
                item: w.item.clone(),
                key: None,
                locked: false,
            };
            return Ok(Some(Report::new(Outcome::Contended(c), m)));
        }
    }
    if let Some(p) = &h.parent {
        // FIFO: take a ticket, and try for the parent only when nobody is queued ahead.
        let ticket = queue::enqueue(store, m, h, p).await?;
        if let Some(holder) = queue::ahead(store, m, &h.id, p, ticket).await? {
            let c = Contention {
                holder,
                action: None,
                item: value::key_display(&p.table_name, &p.key),
                key: None,
                locked: false,
            };
            return Ok(Some(Report::new(Outcome::Contended(c), m)));
        }
        match lock_parent(store, m, h, p).await? {
            ItemLock::Locked | ItemLock::Judge | ItemLock::Superseded => {
                queue::leave(store, m, &records::Header { parent_ticket: Some(ticket), ..h.clone() }).await?
            }
            ItemLock::Contended(c) => return Ok(Some(Report::new(Outcome::Contended(c), m))),
            ItemLock::Failed(r) | ItemLock::Refused(r) => {
                return Ok(Some(Report::new(decided(store, m, h, &Decision::parent(r)).await?, m)))
            }
        }
    }
    Ok(None)
}

/// The decision of an attempt whose run met failing conditions or refusals: as DynamoDB reports every failing
/// condition of a transaction, the later batches are evaluated too when the transaction is one DynamoDB could have
/// run itself.
async fn decide_refused(
    store: &Store,
    m: &Meter,
    h: &Header,
    plan: &crate::model::plan::Plan,
    run_end: usize,
    pass: Pass,
    met: Met,
) -> Result<Outcome, TxError> {
    let Met { mut failed, mut refused, mut unknown, .. } = met;
    // DynamoDB reports every failing condition of a transaction; for transactions it could have run itself, do
    // the same by evaluating the remaining batches too.
    // Those batches' locks are this attempt's too: `lockStarted` covers them first, so that a rollback looks at
    // them (one that cannot move it, because the attempt was decided meanwhile, leaves them alone).
    let later_batches = run_end..plan.batch_count();
    if h.actions <= MAX_TRANSACT_ACTIONS
        && !later_batches.is_empty()
        && (h.lock_started >= later_batches.end
            || records::update_header(
                store,
                m,
                &h.id,
                records::Expect::at(h),
                &[],
                Some((H_LOCK_STARTED, later_batches.end)),
                &Default::default(),
            )
            .await?)
    {
        let mut later = Met::default();
        lock_run(store, m, h, plan, later_batches, pass, &mut later).await?;
        failed.append(&mut later.failed);
        refused.append(&mut later.refused);
        unknown |= later.unknown;
    }
    let reasons = if failed.is_empty() { refused } else { failed };
    let d = Decision::actions(reasons);
    decided_after(store, m, h, &d, pass, unknown).await
}

/// Claims the lock phase of `h`'s attempt for a new pass, from the first batch not recorded locked to at least `end`:
/// one header write that sets `lockPass` above every earlier pass's and moves `lockStarted` to `end` (so a rollback
/// looks at those batches), conditioned on the pass and the batches recorded being those `h` shows. The pass begin
/// claimed for a driver in this process ([`Store::keep_claim`]) is taken instead, with no write, while the header
/// still shows it. `None` when the header moved on first.
async fn claim(store: &Store, m: &Meter, h: &Header, end: usize) -> Result<Option<Pass>, TxError> {
    let Some(last) = h.lock_pass else {
        legacy_started(store, m, h, end).await?;
        return Ok(Some(Pass::Legacy));
    };
    if store.caches.take_claim(&h.id) == Some(last) && h.lock_started >= end {
        // Begin's claim for this process, which nobody has taken since: no pass has sent a lock write yet.
        return Ok(Some(Pass::Id(last, h.locked)));
    }
    let pass = crate::model::value::now_ms().max(last + 1);
    let mut set = vec![(H_LOCK_PASS, n(pass)), (H_LOCK_STARTED, n(h.lock_started.max(end))), (H_LOCK_OPEN, n(pass))];
    if h.lock_open.is_some() {
        // The last pass never said it had every answer: it died, timed out or was overtaken, and a write it sent may
        // land after the transaction ends.
        set.push((H_LATE_WRITES, AttributeValue::Bool(true)));
    }
    let w = HeaderWrite {
        set,
        equal: vec![(H_LOCK_PASS, Some(n(last))), (H_LOCKED, (h.locked > 0).then(|| n(h.locked)))],
        ..HeaderWrite::default()
    };
    if records::write_header(store, m, &h.id, records::Expect::at(h), w, &Default::default()).await? {
        return Ok(Some(Pass::Id(pass, h.lock_started)));
    }
    Ok(None)
}

/// A transaction begun before lock ids: records that locking of the batches up to `end` has begun, as lock did then.
async fn legacy_started(store: &Store, m: &Meter, h: &Header, end: usize) -> Result<(), TxError> {
    if h.lock_started < end {
        records::update_header(
            store,
            m,
            &h.id,
            records::Expect::at(h),
            &[],
            Some((H_LOCK_STARTED, end)),
            &Default::default(),
        )
        .await?;
    }
    Ok(())
}

/// Records the batches `batches` locked by `pass`, with the ids their locks carry (`taken`), and the run's usage, while
/// the pass still holds the lock phase: the header's `lockedBatches`, `lockIds`. Returns `Some(outcome)` when the
/// header has left `h`'s state or attempt, which means the run must stop.
async fn record(
    store: &Store,
    m: &Meter,
    h: &Header,
    pass: Pass,
    batches: std::ops::Range<usize>,
    taken: &[Taken],
    unknown: bool,
) -> Result<Option<Outcome>, TxError> {
    let usage = m.usage();
    let Pass::Id(p, _) = pass else {
        return super::progress(store, m, h, H_LOCKED, batches.end).await;
    };
    let actions: Vec<usize> = taken.iter().filter(|t| batches.contains(&t.batch)).map(|t| t.index).collect();
    let except: Vec<(usize, LockId)> = taken
        .iter()
        .filter(|t| batches.contains(&t.batch) && t.id != LockId::new(p))
        .map(|t| (t.index, t.id))
        .collect();
    let ids = h.lock_ids.record(batches.start, p, &actions, &except);
    let mut set = vec![(H_LOCK_IDS, s(serde_json::to_string(&ids).expect("lock ids serialise")))];
    if unknown {
        set.push((H_LATE_WRITES, AttributeValue::Bool(true)));
    }
    let w = HeaderWrite {
        set,
        remove: vec![H_LOCK_OPEN],
        watermark: Some((H_LOCKED, batches.end)),
        equal: vec![(H_LOCK_PASS, Some(n(p)))],
        ..HeaderWrite::default()
    };
    if records::write_header(store, m, &h.id, records::Expect::at(h), w, &usage).await? {
        return Ok(None);
    }
    let now = records::read_header(store, m, &h.id).await?;
    if now.state != h.state || now.attempt != h.attempt {
        return Ok(Some(Outcome::Ended { state: now.state }));
    }
    Ok(None)
}

/// Tells the header that `pass`, which recorded nothing, has every write's answer (`lockOpen` removed), and that a
/// write of it may land late when one had no answer (`unknown`). Nothing when a later pass holds the lock phase or the
/// attempt was decided: the header then keeps saying the pass may have writes in flight, which only costs a visit.
async fn settle(store: &Store, m: &Meter, h: &Header, pass: Pass, unknown: bool) -> Result<(), TxError> {
    let Pass::Id(p, _) = pass else { return Ok(()) };
    let w = HeaderWrite {
        set: if unknown { vec![(H_LATE_WRITES, AttributeValue::Bool(true))] } else { Vec::new() },
        remove: vec![H_LOCK_OPEN],
        equal: vec![(H_LOCK_PASS, Some(n(p)))],
        ..HeaderWrite::default()
    };
    records::write_header(store, m, &h.id, records::Expect::at(h), w, &Default::default()).await?;
    Ok(())
}

/// Decides the rollback of `h`'s attempt after `pass` met a failed condition or a refused write with every write's
/// answer in hand: the pass is closed in the same write (see [`records::decide_rollback_after_pass`]).
async fn decided_after(
    store: &Store,
    m: &Meter,
    h: &Header,
    d: &Decision,
    pass: Pass,
    unknown: bool,
) -> Result<Outcome, TxError> {
    let p = match pass {
        Pass::Id(p, _) => Some(p),
        Pass::Legacy => None,
    };
    Ok(match records::decide_rollback_after_pass(store, m, h, d, p, unknown).await? {
        TxState::RolledBack => Outcome::Canceled,
        state => Outcome::Ended { state },
    })
}

/// Locks the batches of `run` for `pass`, in shares side by side ([`crate::protocol::shares`]): what [`lock_run`] does
/// for the whole run, each share sending the writes of its batches under the same pass.
async fn lock_shares(
    store: &Store,
    m: &Meter,
    h: &Header,
    plan: &crate::model::plan::Plan,
    run: std::ops::Range<usize>,
    pass: Pass,
    met: &mut Met,
) -> Result<(), TxError> {
    let Pass::Id(p, earlier) = pass else { return lock_run(store, m, h, plan, run, pass, met).await };
    if shares::split(&store.cfg, run.clone()).len() < 2 {
        // Into `met` directly: a share's result crosses as JSON, and every lock taken with it.
        return lock_run(store, m, h, plan, run, pass, met).await;
    }
    let shares = |r: std::ops::Range<usize>| Share::Lock {
        transaction_id: h.id.clone(),
        attempt: h.attempt,
        pass: p,
        earlier,
        from: r.start,
        to: r.end,
    };
    let done = shares::in_shares(store, run, shares, |r| async move {
        let mut mine = Met::default();
        lock_run(store, m, h, plan, r, pass, &mut mine).await?;
        Ok(mine.wire(None))
    })
    .await?;
    met.stopped_at = done.stopped_at;
    for d in done.results {
        match d {
            shares::Done::Done(w) => met.absorb(m, w)?,
            // The transaction left this attempt while the share ran: leave what the step did to whoever moved it.
            shares::Done::Ended(_) => met.superseded = true,
        }
    }
    Ok(())
}

#[cfg(feature = "internals")]
/// A worker's share of a lock step (`share`): the share's batches locked for the step's pass, as the step's
/// own process would have locked them.
pub(crate) async fn share(store: &Store, share: Share) -> Result<shares::Done<MetWire>, TxError> {
    let Share::Lock { transaction_id, attempt, pass, earlier, from, to } = share else {
        return Err(TxError::Internal("a lock share is a share of lock".into()));
    };
    let m = Meter::default();
    let h = records::read_header(store, &m, &transaction_id).await?;
    if h.state != TxState::Pending || h.finished() || h.attempt != attempt {
        return Ok(shares::Done::Ended(h.state));
    }
    let mut met = Met::default();
    if h.lock_pass == Some(pass) {
        let plan = crate::protocol::stored_request::read_plan(store, &m, &h.id).await?;
        lock_run(store, &m, &h, &plan, from..to, Pass::Id(pass, earlier), &mut met).await?;
    } else {
        // A later pass holds the lock phase: this one's writes would only be taken over.
        met.superseded = true;
    }
    Ok(shares::Done::Done(met.wire(Some(m.usage()))))
}

/// Locks the items of the batches of `run`, all of them at once, for `pass`. The locks are taken in no order: item
/// locks go by age (wound-wait, [`crate::drivers::driver::Driver::resolve`]), so of two transactions that each hold an
/// item the other needs, the older rolls the younger back and only the younger ever waits, and no two transactions wait
/// for each other.
async fn lock_run(
    store: &Store,
    m: &Meter,
    h: &Header,
    plan: &crate::model::plan::Plan,
    run: std::ops::Range<usize>,
    pass: Pass,
    met: &mut Met,
) -> Result<(), TxError> {
    let actions = crate::protocol::stored_request::read_batches(store, m, &h.id, plan, run, Part::Heads).await?;
    let unknown = std::sync::atomic::AtomicBool::new(false);
    let unknown = &unknown;
    let results = concurrently(actions, store.cfg.concurrency, |(batch, _, a)| async move {
        let (r, id) = match lock_item(store, m, h, batch, &a, pass, unknown).await {
            // DynamoDB refuses the lock write itself (the caller's condition, say, with a value it refuses): the
            // request's fault, named as `TransactWriteItems` names it, before anything can commit.
            Err(TxError::DynamoDb { message, .. }) if message.starts_with("ValidationException") => {
                let message = format!("{}: {message}", a.describe());
                (ItemLock::Refused(CancellationReason::new(CancellationReason::VALIDATION_ERROR, message)), None)
            }
            other => other?,
        };
        Ok((batch, a, r, id))
    })
    .await?;
    met.unknown |= unknown.load(std::sync::atomic::Ordering::Relaxed);
    let mut judge = Vec::new();
    for (batch, a, r, id) in results {
        if let Some(id) = id {
            met.taken.push(Taken { batch, index: a.index, id, table: a.table.clone(), key: a.key.clone() });
        }
        match r {
            ItemLock::Locked => {}
            ItemLock::Judge => judge.push((batch, a)),
            ItemLock::Refused(reason) => met.refused.push((a.index, reason)),
            ItemLock::Failed(reason) => met.failed.push((a.index, reason)),
            ItemLock::Contended(contention) => met.contention.push(Held { batch, contention }),
            ItemLock::Superseded => met.superseded = true,
        }
    }
    if !judge.is_empty() && met.failed.is_empty() && met.refused.is_empty() && !met.superseded {
        let owner = h.owner();
        let id_of =
            |batch: usize, index: usize| met.taken.iter().find(|t| t.batch == batch && t.index == index).map(|t| t.id);
        let writes = judge
            .iter()
            .map(|(b, a)| Ok((a.index, super::writes::judged_write(a, &owner, id_of(*b, a.index))?)))
            .collect::<Result<Vec<_>, TxError>>()?;
        for (index, message) in crate::protocol::judge::judge(store, m, &h.id, writes).await?.refused {
            let a = judge.iter().find(|(_, a)| a.index == index).map(|(_, a)| a.describe()).unwrap_or_default();
            let message = format!("{a}: {message}");
            met.refused.push((index, CancellationReason::new(CancellationReason::VALIDATION_ERROR, message)));
        }
    }
    Ok(())
}

/// Whether transaction `tx_id` has not ended yet (it may be pending, or decided and not finished).
async fn running(store: &Store, m: &Meter, tx_id: &str) -> Result<bool, TxError> {
    match records::read_header(store, m, tx_id).await {
        Ok(h) => Ok(!h.finished()),
        Err(TxError::NotFound(_)) => Ok(false),
        Err(e) => Err(e),
    }
}
