//! lock: take the parent lock (first batch) and every item's lock. A run locks up to [`RUN_BATCHES`](crate::constants::RUN_BATCHES) batches at once,
//! every item of them with up to `SAGA_IN_FLIGHT` writes in flight, and then records them locked with one header
//! write; a run that meets another transaction's lock records the batches before it.
//!
//! The caller's condition is evaluated here, in the same conditional write that takes the lock, on the item as it
//! was before the transaction. An item that does not exist is created to hold the lock and marked transient; the
//! condition still sees it as absent, because the write that creates it is the one that evaluates the condition.
//! Meeting another transaction's lock is contention, reported with the holder, never a failure.
//!
//! The lock write returns the item as it was (`ReturnValues: ALL_OLD`, at no extra cost; a run that finds its own lock
//! gets it back from the failed condition). Protocol 2 evaluates each update there ([`dynamo_saga_expressions::eval::apply_update`],
//! with the table's key and index key types): an update DynamoDB would refuse cancels the transaction with
//! `ValidationError` on that action, before anything can commit. A failed condition anywhere takes precedence, as
//! it does in a `TransactWriteItems` call.
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
//! the item as it is ([`crate::read`]), and any later transaction or read through the library clears it.

use aws_sdk_dynamodb::types::AttributeValue;

use super::{
    decided, evaluate, now, opening, ph, release_item, release_key, used, Contention, Outcome, Release, Report,
};
use crate::config::PrecommitCheck;
use crate::constants::{
    ATTR_GONE, ATTR_LOCK, ATTR_LOCKED_AT, ATTR_STONE, ATTR_TOMBSTONE, ATTR_TRANSIENT, H_LATE_WRITES, H_LOCKED,
    H_LOCK_OPEN, H_LOCK_STARTED, MAX_TRANSACT_ACTIONS,
};
use crate::error::{CancellationReason, TxError};
use crate::items::{lock_holder, LockId};
use crate::lanes::concurrently;
use crate::parent::queue;
use crate::parent::{beat_parent, new_rvn, parent_lock_names, unlock_parent};
use crate::plan::Part;
use crate::records;
use crate::records::{Decision, Header, HeaderWrite, TxState, H_LOCK_IDS, H_LOCK_PASS};
use crate::request::{is_tombstone, Action, Op, Parent};
use crate::share::{self, Share};
use crate::store::{Meter, Once, Store, Written};
use crate::value::{self, item_to_json, Item};
use crate::value::{n, s};
use dynamo_saga_expressions::expr;

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
    let plan = crate::stored::read_plan(store, &m, tx_id).await?;
    let run = super::run_from(&store.cfg, batch, h.batches);
    let Some(pass) = claim(store, &m, &h, run.end).await? else {
        // The header moved on first: another pass claimed the lock phase or recorded batches, or the attempt ended.
        return Ok(Report::new(Outcome::Done, &m));
    };
    let mut met = Met::default();
    lock_shares(store, &m, &h, &plan, run.clone(), pass, &mut met).await?;
    let Met { failed, refused, mut contention, taken, superseded, unknown } = met;
    if superseded {
        // A later pass holds the lock phase and takes these items over: leave them to it. A pause first, so that two
        // drivers of one transaction do not keep taking it from each other.
        crate::store::backoff(4).await;
        return Ok(Report::new(Outcome::Done, &m));
    }
    if !failed.is_empty() || (!refused.is_empty() && contention.is_empty()) {
        let outcome =
            decide_refused(store, &m, &h, &plan, run.end, pass, Met { failed, refused, unknown, ..Met::default() })
                .await?;
        return Ok(Report::new(outcome, &m));
    }
    // The batches before the first one that met another transaction's lock are locked whole: the run after the wait
    // starts there.
    let done = contention.iter().map(|c| c.batch).min().unwrap_or(run.end);
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
    plan: &crate::plan::Plan,
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
    let actions = crate::stored::read_batches(store, m, &h.id, plan, run, Part::Heads).await?;
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
    plan: &crate::plan::Plan,
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
    let pass = crate::value::now_ms().max(last + 1);
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
/// the pass still holds the lock phase: the header's `lockedBatches`, `lockIds`. Returns `Some(outcome)` when the header
/// has left `h`'s state or attempt, which means the run must stop.
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

/// Locks the batches of `run` for `pass`, in shares side by side ([`crate::share`]): what [`lock_run`] does for the
/// whole run, each share sending the writes of its batches under the same pass.
async fn lock_shares(
    store: &Store,
    m: &Meter,
    h: &Header,
    plan: &crate::plan::Plan,
    run: std::ops::Range<usize>,
    pass: Pass,
    met: &mut Met,
) -> Result<(), TxError> {
    let parts = share::split(&store.cfg, run.clone());
    let Pass::Id(p, earlier) = pass else { return lock_run(store, m, h, plan, run, pass, met).await };
    if parts.len() < 2 {
        return lock_run(store, m, h, plan, run, pass, met).await;
    }
    let shares = parts
        .iter()
        .map(|r| Share::Lock {
            transaction_id: h.id.clone(),
            attempt: h.attempt,
            pass: p,
            earlier,
            from: r.start,
            to: r.end,
        })
        .collect();
    let done = share::side_by_side(store, shares, |s| async move {
        let Share::Lock { from, to, .. } = s else { unreachable!("lock shares") };
        let mut mine = Met::default();
        lock_run(store, m, h, plan, from..to, pass, &mut mine).await?;
        Ok(share::Done::Done(mine.wire(None)))
    })
    .await?;
    for d in done {
        match d {
            share::Done::Done(w) => met.absorb(m, w)?,
            // The transaction left this attempt while the share ran: leave what the step did to whoever moved it.
            share::Done::Ended(_) => met.superseded = true,
        }
    }
    Ok(())
}

#[cfg(feature = "internals")]
/// A worker's share of a lock step (`share`): the share's batches locked for the step's pass, as the step's
/// own process would have locked them.
pub(crate) async fn share(store: &Store, share: Share) -> Result<share::Done<MetWire>, TxError> {
    let Share::Lock { transaction_id, attempt, pass, earlier, from, to } = share else {
        return Err(TxError::Internal("a lock share is a share of lock".into()));
    };
    let m = Meter::default();
    let h = records::read_header(store, &m, &transaction_id).await?;
    if h.state != TxState::Pending || h.finished() || h.attempt != attempt {
        return Ok(share::Done::Ended(h.state));
    }
    let mut met = Met::default();
    if h.lock_pass == Some(pass) {
        let plan = crate::stored::read_plan(store, &m, &h.id).await?;
        lock_run(store, &m, &h, &plan, from..to, Pass::Id(pass, earlier), &mut met).await?;
    } else {
        // A later pass holds the lock phase: this one's writes would only be taken over.
        met.superseded = true;
    }
    Ok(share::Done::Done(met.wire(Some(m.usage()))))
}

/// What a run met besides locks taken.
#[derive(Default)]
struct Met {
    /// Conditions that failed.
    failed: Vec<(usize, CancellationReason)>,
    /// Updates DynamoDB would refuse (protocol 2).
    refused: Vec<(usize, CancellationReason)>,
    /// Items other transactions hold.
    contention: Vec<Held>,
    /// Items this run holds, with the ids their locks carry.
    taken: Vec<Taken>,
    /// A later pass of this attempt holds the lock phase.
    superseded: bool,
    /// A lock write had no answer that says whether DynamoDB carried it out: it may land later.
    unknown: bool,
}

/// [`Met`] as a share's result crosses from a worker (`share`): items in DynamoDB JSON, and what the worker's
/// writes used.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct MetWire {
    failed: Vec<(usize, CancellationReason)>,
    refused: Vec<(usize, CancellationReason)>,
    /// Each other transaction's item met: its batch, the contention, the item's table and key, and whether the
    /// holder was read from a lock.
    contention: Vec<HeldWire>,
    /// Each item locked: batch, action, the lock's id, table and key.
    taken: Vec<(usize, usize, LockId, String, serde_json::Value)>,
    superseded: bool,
    unknown: bool,
    usage: Option<crate::store::Usage>,
}

/// A [`Held`] as it crosses: batch, contention, table and key, whether the holder was read from a lock.
type HeldWire = (usize, Contention, Option<(String, serde_json::Value)>, bool);

impl Met {
    fn wire(self, usage: Option<crate::store::Usage>) -> MetWire {
        MetWire {
            failed: self.failed,
            refused: self.refused,
            contention: self
                .contention
                .into_iter()
                .map(|h| {
                    let key = h.contention.key.as_ref().map(|(t, k)| (t.clone(), item_to_json(k)));
                    let locked = h.contention.locked;
                    (h.batch, h.contention, key, locked)
                })
                .collect(),
            taken: self.taken.into_iter().map(|t| (t.batch, t.index, t.id, t.table, item_to_json(&t.key))).collect(),
            superseded: self.superseded,
            unknown: self.unknown,
            usage,
        }
    }

    /// Adds a share's result to this run's, and what its writes used to the run's meter `m`.
    fn absorb(&mut self, m: &Meter, w: MetWire) -> Result<(), TxError> {
        let item = |v: &serde_json::Value| {
            value::item_from_json(v).map_err(|e| TxError::Internal(format!("a lock share's item: {e}")))
        };
        self.failed.extend(w.failed);
        self.refused.extend(w.refused);
        for (batch, mut contention, key, locked) in w.contention {
            contention.key = key.map(|(t, k)| Ok::<_, TxError>((t, item(&k)?))).transpose()?;
            contention.locked = locked;
            self.contention.push(Held { batch, contention });
        }
        for (batch, index, id, table, key) in w.taken {
            self.taken.push(Taken { batch, index, id, table, key: item(&key)? });
        }
        self.superseded |= w.superseded;
        self.unknown |= w.unknown;
        if let Some(u) = w.usage {
            m.add(&u);
        }
        Ok(())
    }
}

/// An item another transaction holds, and the batch it is in.
struct Held {
    batch: usize,
    contention: Contention,
}

/// An item a pass holds, and the id its lock carries.
struct Taken {
    batch: usize,
    index: usize,
    id: LockId,
    table: String,
    key: Item,
}

/// Locks the items of the batches of `run`, all of them at once, for `pass`. The locks are taken in no order: item
/// locks go by age (wound-wait, [`crate::drive::Driver::resolve`]), so of two transactions that each hold an item the
/// other needs, the older rolls the younger back and only the younger ever waits, and no two transactions wait for
/// each other.
async fn lock_run(
    store: &Store,
    m: &Meter,
    h: &Header,
    plan: &crate::plan::Plan,
    run: std::ops::Range<usize>,
    pass: Pass,
    met: &mut Met,
) -> Result<(), TxError> {
    let actions = crate::stored::read_batches(store, m, &h.id, plan, run, Part::Heads).await?;
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
        for (index, message) in crate::judge::judge(store, m, &h.id, writes).await?.refused {
            let a = judge.iter().find(|(_, a)| a.index == index).map(|(_, a)| a.describe()).unwrap_or_default();
            let message = format!("{a}: {message}");
            met.refused.push((index, CancellationReason::new(CancellationReason::VALIDATION_ERROR, message)));
        }
    }
    Ok(())
}

/// The write a lock sends next to an item.
#[derive(Clone, PartialEq)]
enum Write {
    /// The lock of an item expected absent (`true`: created to hold the lock, and marked transient) or present.
    Guess(bool),
    /// Gives a lock an earlier pass of this attempt took this pass's id.
    TakeOver,
    /// Replaces the tombstone (as last read) with a lock item that keeps it; the lock is conditional on its
    /// `_sagaTombstone` (the id of the transaction that wrote it) being unchanged.
    Tombstone(Item),
}

/// Most writes one item's lock takes: a takeover, a tombstone and a wrong guess each send another, and a write whose
/// outcome is unknown is followed by one more.
const ITEM_LOCK_WRITES: usize = 24;

/// Locks one item (of `batch`) with the caller's condition for `pass`, and says which id the lock carries. An item of
/// a batch an earlier pass of this attempt claimed may hold that pass's lock: its first write takes it over, and only if
/// the item holds no such lock is it locked as any other. The first lock write of any other item guesses whether
/// the item exists (inserts usually say so with `attribute_not_exists`); a wrong guess costs one failed conditional
/// write and is corrected from the item DynamoDB returns. One write cannot serve both: DynamoDB gives an update of an
/// absent item its key before it evaluates the update, so nothing in the write can tell the item that was absent
/// from one that held only its key.
///
/// A tombstone is locked as an absent item: it is replaced by an item that holds the lock, marked transient, with
/// the tombstone kept in [`ATTR_STONE`] to be put back unless the transaction writes the item. The caller's condition
/// is evaluated on the tombstone with every attribute it reads redirected to one that never exists, except a
/// `Ratchet`'s, which compares against the tombstone's timestamp.
async fn lock_item(
    store: &Store,
    m: &Meter,
    h: &Header,
    batch: usize,
    a: &Action,
    pass: Pass,
    unknown_seen: &std::sync::atomic::AtomicBool,
) -> Result<(ItemLock, Option<LockId>), TxError> {
    let owner = h.owner();
    let schema = store.schema(m, &a.table).await?;
    let pk = schema.partition_key();
    let (mut id, earlier) = match pass {
        Pass::Id(p, earlier) => (Some(LockId::new(p)), batch < earlier),
        Pass::Legacy => (None, false),
    };
    let absent_guess = a.inserts() || (h.absent_tables.contains(&a.table) && !a.needs_item());
    let mut write = if earlier { Write::TakeOver } else { Write::Guess(absent_guess) };
    let mut unknown = 0u32;
    for _ in 0..ITEM_LOCK_WRITES {
        if let Pass::Id(p, _) = pass {
            // A pass sends nothing later than the operation timeout after it started, so a lock write of it is
            // signed by then, whatever holds its driver up: what bounds how late one may land (`Config::revisit_after`).
            // The items it has not reached go to the next pass.
            if crate::value::now_ms() > p + store.cfg.operation_timeout.as_millis() as u64 {
                return Ok((ItemLock::Superseded, None));
            }
        }
        let sent = match &write {
            Write::Tombstone(stone) => {
                let caller = tombstone_condition(a)?;
                if caller.as_ref().is_some_and(|c| c.len() + LOCK_CONDITION_BYTES > expr::MAX_EXPR_BYTES) {
                    let msg = format!(
                        "{}: the condition, evaluated on a tombstone as on an absent item, needs more than DynamoDB's {} bytes",
                        a.describe(),
                        expr::MAX_EXPR_BYTES
                    );
                    let r = CancellationReason::new(CancellationReason::VALIDATION_ERROR, msg);
                    return Ok((ItemLock::Failed(r), None));
                }
                lock_tombstone(store, m, &owner, a, stone, caller.as_deref(), id).await?
            }
            Write::TakeOver => take_over(store, m, &owner, a, id.expect("a pass with ids takes locks over")).await?,
            Write::Guess(absent) => lock_plain(store, m, &owner, a, pk, *absent, id).await?,
        };
        let old = match sent {
            Locked::Now(before) => {
                // A lock taken over stood for the item as it was, unless it created the item.
                let before = match before {
                    Some(b) if lock_holder(&b) == Some(owner.as_str()) && crate::items::flag(&b, ATTR_TRANSIENT) => {
                        None
                    }
                    other => other,
                };
                let before = before.filter(|b| !is_tombstone(b)).map(crate::items::strip_reserved);
                return Ok((locked(store, m, h, a, before.as_ref()).await?, id));
            }
            Locked::Not(old) => old,
            Locked::Unknown(message) => {
                // It may land yet: no later write to this item may carry its id.
                unknown += 1;
                unknown_seen.store(true, std::sync::atomic::Ordering::Relaxed);
                tracing::warn!(tx_id = %h.id, action = a.index, %message, "a lock write's outcome is unknown; the next carries a new id");
                id = id.and_then(LockId::next);
                if id.is_none() || unknown as usize >= ITEM_LOCK_WRITES / 2 {
                    return Err(TxError::DynamoDb { op: "UpdateItem", message });
                }
                crate::store::backoff(unknown).await;
                continue;
            }
        };
        let holder = lock_holder_of(&old);
        if let (Some(item), Some(o)) = (&old, holder) {
            if o == owner {
                match (pass, LockId::of(item)) {
                    // This pass's own earlier write, whose outcome was unknown, landed: one copy, already landed, so
                    // its id is this lock's.
                    (Pass::Id(p, _), Some(f)) if f.pass == p => id = Some(f),
                    (Pass::Id(p, _), Some(f)) if f.pass > p => return Ok((ItemLock::Superseded, None)),
                    (Pass::Id(..), _) if write != Write::TakeOver => {
                        write = Write::TakeOver;
                        continue;
                    }
                    (Pass::Id(..), _) => {
                        return Err(TxError::Internal(format!(
                            "{}: an earlier pass's lock was not taken over: {item:?}",
                            a.describe()
                        )))
                    }
                    // Locked by an earlier run of this phase.
                    (Pass::Legacy, _) => {}
                }
                // The item as it was is the item without the lock, unless the lock created it.
                let before =
                    (!crate::items::flag(item, ATTR_TRANSIENT)).then(|| crate::items::strip_reserved(item.clone()));
                return Ok((locked(store, m, h, a, before.as_ref()).await?, id));
            }
            if records::parse_owner(o).0 == h.id {
                // A late worker of an earlier attempt of this transaction locked it after that attempt was rolled
                // back: let that lock go and try again.
                release_key(store, m, o, &a.table, &a.key, Release::Keep, None).await?;
                write = Write::Guess(false);
                continue;
            }
            let c = Contention {
                holder: o.to_string(),
                action: Some(a.index),
                item: value::key_display(&a.table, &a.key),
                key: Some((a.table.clone(), a.key.clone())),
                locked: true,
            };
            return Ok((ItemLock::Contended(c), None));
        }
        // Not locked: absent, a tombstone, or an item.
        let next = match &old {
            Some(o) if is_tombstone(o) => Write::Tombstone(o.clone()),
            None => Write::Guess(true),
            Some(_) => Write::Guess(false),
        };
        if write == Write::TakeOver {
            // No lock to take over: lock it as any other item.
            write = next;
            continue;
        }
        if next == write {
            // The same write failed on the same item: the caller's condition does not hold.
            let mut r = CancellationReason::new(
                CancellationReason::CONDITIONAL_CHECK_FAILED,
                CancellationReason::CONDITION_FAILED_MESSAGE,
            );
            if a.return_old && !matches!(write, Write::Tombstone(_)) {
                r.item = old.map(|o| item_to_json(&crate::items::strip_reserved(o)));
            }
            return Ok((ItemLock::Failed(r), None));
        }
        write = next;
    }
    Err(TxError::Contended { holder: "unknown".into(), item: value::key_display(&a.table, &a.key) })
}

/// What one lock write came to.
enum Locked {
    /// Locked by this write; the item as it was (none when absent).
    Now(Option<Item>),
    /// Not locked by this write; the item as it is (none when absent).
    Not(Option<Item>),
    /// Sent once, with no answer that says whether DynamoDB carried it out.
    Unknown(String),
}

/// Sends a lock write: once when it carries an id (so that no second copy of it can land), otherwise as any write.
async fn send_lock(
    store: &Store,
    m: &Meter,
    req: aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder,
    id: Option<LockId>,
) -> Result<Locked, TxError> {
    let written = match id {
        Some(_) => match store.update_once(m, req).await? {
            Once::Known(w) => w,
            Once::Unknown(message) => return Ok(Locked::Unknown(message)),
        },
        None => store.update(m, req).await?,
    };
    Ok(match written {
        Written::Done(before) => Locked::Now(before),
        Written::ConditionFailed(old) => Locked::Not(old),
    })
}

/// The value of `_sagaLockedAt` a lock write sets: its id, or the time on a transaction begun before lock ids.
fn locked_at(id: Option<LockId>) -> AttributeValue {
    match id {
        Some(id) => AttributeValue::N(id.number()),
        None => now(),
    }
}

/// An item locked by `h`'s attempt, with the item as it was before the transaction (`None`: absent): protocol 2
/// evaluates the action's update on it.
async fn locked(store: &Store, m: &Meter, h: &Header, a: &Action, before: Option<&Item>) -> Result<ItemLock, TxError> {
    if !h.commits_first() || a.op != Op::Update {
        return Ok(ItemLock::Locked);
    }
    let schema = store.schema(m, &a.table).await?;
    Ok(match evaluate(a, before, &schema) {
        Err(e) => {
            let message = format!("{}: {e}", a.describe());
            ItemLock::Refused(CancellationReason::new(CancellationReason::VALIDATION_ERROR, message))
        }
        Ok(after) => match store.cfg.precommit_check {
            PrecommitCheck::All => ItemLock::Judge,
            PrecommitCheck::NearLimits if dynamo_saga_expressions::eval::near_limits(&after, &schema.key_types()) => {
                ItemLock::Judge
            }
            _ => ItemLock::Locked,
        },
    })
}

/// The condition of the write that locks an item expected `absent` or present (not a tombstone): the caller's
/// condition, if any, joined to the lock's own.
pub(crate) fn lock_condition(absent: bool, caller: Option<&str>) -> String {
    let own = if absent {
        format!("attribute_not_exists({})", ph::PK)
    } else {
        format!(
            "attribute_exists({}) AND attribute_not_exists({}) AND attribute_not_exists({})",
            ph::PK,
            ph::LOCK,
            ph::TOMBSTONE
        )
    };
    match caller {
        Some(c) => expr::and(&own, c),
        None => own,
    }
}

/// Locks an item that is absent or present (not a tombstone) for `owner` (the attempt's lock value), its lock
/// carrying `id`.
async fn lock_plain(
    store: &Store,
    m: &Meter,
    owner: &str,
    a: &Action,
    pk: &str,
    absent: bool,
    id: Option<LockId>,
) -> Result<Locked, TxError> {
    let refs = match &a.condition {
        Some(c) => expr::parse_condition(c).map_err(|e| TxError::Internal(format!("stored condition: {e}")))?,
        None => Default::default(),
    };
    let (names, values) = used(a, &refs);
    let set = if absent {
        format!("SET {} = {}, {} = {}, {} = {}", ph::LOCK, ph::TX, ph::LOCKED_AT, ph::NOW, ph::TRANSIENT, ph::TRUE)
    } else {
        format!("SET {} = {}, {} = {}", ph::LOCK, ph::TX, ph::LOCKED_AT, ph::NOW)
    };
    let cond = lock_condition(absent, a.condition.as_deref());
    let mut req = store
        .client
        .update_item()
        .table_name(&a.table)
        .set_key(Some(a.key.clone()))
        .update_expression(set)
        .condition_expression(cond)
        .set_expression_attribute_names(Some(names))
        .set_expression_attribute_values(Some(values))
        .expression_attribute_names(ph::PK, pk)
        .expression_attribute_names(ph::LOCK, ATTR_LOCK)
        .expression_attribute_names(ph::LOCKED_AT, ATTR_LOCKED_AT)
        .expression_attribute_values(ph::TX, s(owner))
        .expression_attribute_values(ph::NOW, locked_at(id))
        .return_values(aws_sdk_dynamodb::types::ReturnValue::AllOld);
    req = if absent {
        req.expression_attribute_names(ph::TRANSIENT, ATTR_TRANSIENT)
            .expression_attribute_values(ph::TRUE, AttributeValue::Bool(true))
    } else {
        req.expression_attribute_names(ph::TOMBSTONE, ATTR_TOMBSTONE)
    };
    send_lock(store, m, req, id).await
}

/// Gives the lock `owner` holds on an item, taken by an earlier pass of the attempt, the id `id`: conditioned on the
/// lock's id being older (or absent), so that neither a late copy of this write nor one of the earlier pass's can
/// undo it, and a later pass's lock is left alone.
async fn take_over(store: &Store, m: &Meter, owner: &str, a: &Action, id: LockId) -> Result<Locked, TxError> {
    let req = store
        .client
        .update_item()
        .table_name(&a.table)
        .set_key(Some(a.key.clone()))
        .update_expression(format!("SET {} = {}", ph::LOCKED_AT, ph::NOW))
        .condition_expression(format!(
            "{} = {} AND (attribute_not_exists({}) OR {} < {})",
            ph::LOCK,
            ph::TX,
            ph::LOCKED_AT,
            ph::LOCKED_AT,
            ph::NOW
        ))
        .expression_attribute_names(ph::LOCK, ATTR_LOCK)
        .expression_attribute_names(ph::LOCKED_AT, ATTR_LOCKED_AT)
        .expression_attribute_values(ph::TX, s(owner))
        .expression_attribute_values(ph::NOW, locked_at(Some(id)))
        .return_values(aws_sdk_dynamodb::types::ReturnValue::AllOld);
    send_lock(store, m, req, Some(id)).await
}

/// The caller's condition as a tombstone sees it: every attribute it reads but the ratchet's redirected to one that
/// no item has.
fn tombstone_condition(a: &Action) -> Result<Option<String>, TxError> {
    a.condition
        .as_deref()
        .map(|c| expr::redirect_paths(c, &[crate::request::RATCHET_NAME], ph::GONE))
        .transpose()
        .map_err(|e| TxError::Internal(format!("stored condition: {e}")))
}

/// Room the lock's own conditions take beside the caller's, in bytes.
const LOCK_CONDITION_BYTES: usize = 200;

/// Locks the tombstone `stone` (as last read) by replacing it with a transient lock item that keeps it; `caller` is
/// the caller's condition from [`tombstone_condition`].
async fn lock_tombstone(
    store: &Store,
    m: &Meter,
    owner: &str,
    a: &Action,
    stone: &Item,
    caller: Option<&str>,
    id: Option<LockId>,
) -> Result<Locked, TxError> {
    let refs = match caller {
        Some(c) => expr::parse_condition(c).map_err(|e| TxError::Internal(format!("redirected condition: {e}")))?,
        None => Default::default(),
    };
    let (names, values) = used(a, &refs);
    let mut cond = format!("{} = {} AND attribute_not_exists({})", ph::TOMBSTONE, ph::SEEN, ph::LOCK);
    if let Some(c) = caller {
        cond = expr::and(&cond, c);
    }
    let mut item = a.key.clone();
    item.insert(ATTR_LOCK.into(), s(owner));
    item.insert(ATTR_LOCKED_AT.into(), locked_at(id));
    item.insert(ATTR_TRANSIENT.into(), AttributeValue::Bool(true));
    item.insert(ATTR_STONE.into(), AttributeValue::M(stone.clone()));
    let mut req = store
        .client
        .put_item()
        .table_name(&a.table)
        .set_item(Some(item))
        .condition_expression(cond)
        .set_expression_attribute_names(Some(names))
        .set_expression_attribute_values(Some(values))
        .expression_attribute_names(ph::TOMBSTONE, ATTR_TOMBSTONE)
        .expression_attribute_names(ph::LOCK, ATTR_LOCK)
        .expression_attribute_values(ph::SEEN, stone[ATTR_TOMBSTONE].clone());
    if refs.name_placeholders.contains(ph::GONE) {
        req = req.expression_attribute_names(ph::GONE, ATTR_GONE);
    }
    let written = match id {
        Some(_) => match store.put_once(m, req).await? {
            Once::Known(w) => w,
            Once::Unknown(message) => return Ok(Locked::Unknown(message)),
        },
        None => store.put(m, req).await?,
    };
    Ok(match written {
        // The tombstone reads as absent.
        Written::Done(_) => Locked::Now(None),
        Written::ConditionFailed(old) => Locked::Not(old),
    })
}

fn lock_holder_of(old: &Option<crate::value::Item>) -> Option<&str> {
    old.as_ref().and_then(lock_holder)
}

/// Whether transaction `tx_id` has not ended yet (it may be pending, or decided and not finished).
async fn running(store: &Store, m: &Meter, tx_id: &str) -> Result<bool, TxError> {
    match records::read_header(store, m, tx_id).await {
        Ok(h) => Ok(!h.finished()),
        Err(TxError::NotFound(_)) => Ok(false),
        Err(e) => Err(e),
    }
}

/// The parent lock (seed 003): `lockToken` on the parent item, which must exist, with seed 001's lease and record
/// version number. A lock an earlier attempt of this transaction left is let go first.
async fn lock_parent(store: &Store, m: &Meter, h: &Header, p: &Parent) -> Result<ItemLock, TxError> {
    let owner = h.owner();
    for _ in 0..3 {
        let l = match lock_parent_once(store, m, &owner, p).await? {
            ParentLock::Done(l) => return Ok(l),
            ParentLock::Held(l) => l,
        };
        if records::parse_owner(&l.holder).0 != h.id {
            return Ok(ItemLock::Contended(Contention {
                holder: l.holder,
                action: None,
                item: value::key_display(&p.table_name, &p.key),
                key: None,
                locked: true,
            }));
        }
        unlock_parent(store, m, p, &l.holder).await?;
    }
    Err(TxError::Contended { holder: h.id.clone(), item: value::key_display(&p.table_name, &p.key) })
}

enum ParentLock {
    Done(ItemLock),
    /// Held by another lock value.
    Held(crate::items::ParentLockAttrs),
}

async fn lock_parent_once(store: &Store, m: &Meter, owner: &str, p: &Parent) -> Result<ParentLock, TxError> {
    let pk = store.schema(m, &p.table_name).await?.key_names[0].clone();
    let req = store
        .client
        .update_item()
        .table_name(&p.table_name)
        .set_key(Some(p.key.clone()))
        .update_expression(format!(
            "SET {} = {}, {} = {}, {} = {}, {} = {}",
            ph::PARENT_TOKEN, ph::TX, ph::PARENT_AT, ph::NOW, ph::PARENT_LEASE, ph::LEASE, ph::PARENT_RVN, ph::RVN
        ))
        .condition_expression(format!(
            "attribute_exists({}) AND attribute_not_exists({}) AND attribute_not_exists({}) AND (attribute_not_exists({}) OR {} = {})",
            ph::PK, ph::TOMBSTONE, ph::STONE, ph::PARENT_TOKEN, ph::PARENT_TOKEN, ph::TX
        ))
        .expression_attribute_names(ph::TOMBSTONE, ATTR_TOMBSTONE)
        .expression_attribute_names(ph::STONE, ATTR_STONE)
        .expression_attribute_names(ph::PK, pk)
        .expression_attribute_values(ph::TX, s(owner))
        .expression_attribute_values(ph::NOW, now())
        .expression_attribute_values(ph::LEASE, n(store.cfg.lease.as_secs()))
        .expression_attribute_values(ph::RVN, new_rvn());
    let req = parent_lock_names(req);
    let missing = || {
        ItemLock::Failed(CancellationReason::new(
            CancellationReason::CONDITIONAL_CHECK_FAILED,
            format!("the Parent item {} does not exist", value::key_display(&p.table_name, &p.key)),
        ))
    };
    Ok(match store.update(m, req).await? {
        Written::Done(_) => ParentLock::Done(ItemLock::Locked),
        Written::ConditionFailed(None) => ParentLock::Done(missing()),
        // A tombstone, or a lock item standing in for one: the parent does not exist.
        Written::ConditionFailed(Some(old)) if is_tombstone(&old) || old.contains_key(ATTR_STONE) => {
            ParentLock::Done(missing())
        }
        Written::ConditionFailed(Some(old)) => match crate::items::ParentLockAttrs::of(&old) {
            Some(l) if l.holder == owner => ParentLock::Done(ItemLock::Locked),
            Some(l) => ParentLock::Held(l),
            None => return Err(TxError::Internal("the parent lock condition failed on an unlocked parent".into())),
        },
    })
}
