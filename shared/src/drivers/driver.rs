//! Running a transaction's steps and resolving the contention they meet: the step dispatcher ([`run_step`]) and the
//! wound-wait decision ([`Driver::resolve_all`]), shared by the in-process [`crate::Coordinator`] and the Lambdas'
//! contract ([`crate::drivers::lambda`]).
//!
//! How a driver resolves the contention its steps meet is [`wound_wait`]'s part.

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::dynamo::store::{Meter, Store, Usage};
use crate::error::TxError;
use crate::model::request::Request;
use crate::protocol::phase::{self, resume::Step, Outcome};
use crate::protocol::records::{self, Decision, Header, TxState};

mod wound_wait;

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

/// What to do after [`Driver::resolve`].
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
pub async fn run_step(s: &Store, tx_id: &str, step: Step) -> Result<crate::protocol::phase::Report, TxError> {
    match step {
        Step::Lock(b) => Box::pin(phase::lock::lock(s, tx_id, b)).await,
        Step::Save(b) => Box::pin(phase::save::save(s, tx_id, b)).await,
        Step::Apply(b) => Box::pin(phase::apply::apply(s, tx_id, b)).await,
        Step::Commit => Box::pin(phase::commit::commit(s, tx_id)).await,
        Step::Complete(b) => Box::pin(phase::complete::complete(s, tx_id, b)).await,
        Step::Rollback(b) => Box::pin(phase::rollback::rollback(s, tx_id, b, None)).await,
        Step::Retry => Box::pin(phase::retry::retry(s, tx_id)).await,
        Step::Release => Box::pin(phase::release::release(s, tx_id)).await,
        Step::Finished => Err(TxError::Internal(format!("transaction {tx_id} has finished: no step to run"))),
    }
}

/// Runs the step [`phase::resume::next_step`] gave for the header `h` the caller has just read: the phase starts from
/// that header instead of reading it again (one round trip fewer a step). Every header write a phase makes is
/// conditional on the state and attempt it read, so a header that has moved on since is met as a failed condition, and
/// the phase reads it again, as it would after a fresh read.
pub async fn run_step_from(s: &Store, h: Header, step: Step) -> Result<crate::protocol::phase::Report, TxError> {
    let m = crate::dynamo::store::Meter::default();
    match step {
        Step::Lock(b) => Box::pin(phase::lock::lock_from(s, m, h, b)).await,
        Step::Save(b) => Box::pin(phase::save::save_from(s, m, h, b)).await,
        Step::Apply(b) => Box::pin(phase::apply::apply_from(s, m, h, b)).await,
        Step::Commit => Box::pin(phase::commit::commit_from(s, m, h)).await,
        Step::Complete(b) => Box::pin(phase::complete::complete_from(s, m, h, b)).await,
        Step::Release => Box::pin(phase::release::release_from(s, m, h)).await,
        other => run_step(s, &h.id, other).await,
    }
}

/// Runs the step [`phase::resume::next_step`] gave for the header `h`, as [`run_step_from`] does, joining to it the
/// steps after it that would only write the header, in one header write: save and commit
/// ([`phase::commit::with_save`]), and the last apply run, complete and release ([`phase::end::with_apply`]). What
/// a driver that runs every phase itself does (the in-process coordinator); the state machine's Lambdas run one phase
/// each.
pub async fn run_joined(s: &Store, h: Header, step: Step) -> Result<crate::protocol::phase::Report, TxError> {
    let m = crate::dynamo::store::Meter::default();
    match step {
        Step::Save(_) if phase::commit::with_save(&h) => Box::pin(phase::commit::save_and_commit(s, m, h)).await,
        Step::Apply(b) if phase::end::with_apply(&h, phase::run_end(&s.cfg, b, h.batches)) => {
            Box::pin(phase::apply::apply_and_finish(s, m, h, b)).await
        }
        other => run_step_from(s, h, other).await,
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

/// Runs transactions' steps and resolves the contention they meet. Cheap to clone (the store's client is shared).
#[derive(Debug, Clone)]
pub struct Driver {
    store: Store,
    /// First wait after meeting a lock; doubles up to `max_wait`.
    pub min_wait: Duration,
    pub max_wait: Duration,
}

impl Driver {
    pub fn new(store: Store) -> Self {
        Self { store, min_wait: Duration::from_millis(20), max_wait: Duration::from_millis(500) }
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Runs a whole transaction: submit it (a request one `TransactWriteItems` call can carry is carried out in that
    /// call, see `direct`), or begin it and drive it to its end, starting another attempt whenever one is rolled
    /// back by another transaction's need. Errors with `TransactionCanceled` (and the reasons) when it rolled back:
    /// by its own conditions, a wait past `LockWaitSeconds`, or the deadline.
    pub async fn run<'a>(&self, body: impl Into<Request<'a>>) -> Result<Committed, TxError> {
        let started = Instant::now();
        let begun = Box::pin(phase::begin::submit_here(&self.store, body.into())).await?;
        if begun.created && begun.state == TxState::Committed {
            // Carried out in one call: the result carries the capacity that call consumed, which its header cannot.
            return Ok(Committed {
                transaction_id: begun.transaction_id,
                state: begun.state,
                actions: begun.actions,
                batches: begun.batches,
                usage: begun.usage,
                elapsed_ms: started.elapsed().as_millis() as u64,
            });
        }
        // Begin's header write is where the first step starts.
        let h = Box::pin(self.steps(&begun.transaction_id, true, |_, _| false)).await?;
        finished(&h, started)
    }

    /// Drives an existing transaction from wherever it stopped to its end, as its driver: an attempt rolled back by
    /// another transaction's need is followed by another.
    pub async fn drive(&self, tx_id: &str) -> Result<Committed, TxError> {
        let started = Instant::now();
        let h = Box::pin(self.drive_until(tx_id, true, |_, _| false)).await?;
        finished(&h, started)
    }

    /// Rolls a transaction back unless it has committed (no other attempt follows), and drives it to its end.
    pub async fn cancel(&self, tx_id: &str, why: &str) -> Result<(), TxError> {
        let m = Meter::default();
        let h = records::read_header(&self.store, &m, tx_id).await?;
        if h.state == TxState::Pending {
            records::decide_rollback(&self.store, &m, tx_id, Some(h.attempt), &Decision::aborted(why)).await?;
        }
        let h = records::read_header(&self.store, &m, tx_id).await?;
        if h.retry_pending {
            records::give_up(&self.store, &m, &h, why).await?;
        }
        Box::pin(self.drive_until(tx_id, false, |_, _| false)).await.map(|_| ())
    }

    /// Drives a pending transaction until every item is locked, meeting other transactions' locks as [`drive`]
    /// does (and starting another attempt when one is rolled back by another's need); it then holds every lock and
    /// has changed nothing. Errors with `TransactionCanceled` when it was rolled back instead (by its own condition,
    /// a wait past its limits, or the deadline), after finishing that rollback.
    ///
    /// [`drive`]: Driver::drive
    pub async fn drive_locks(&self, tx_id: &str) -> Result<Header, TxError> {
        let started = Instant::now();
        let h = Box::pin(
            self.drive_until(tx_id, true, |h, step| h.state == TxState::Pending && !matches!(step, Step::Lock(_))),
        )
        .await?;
        match (h.state, finished(&h, started)) {
            (TxState::Pending, _) => Ok(h),
            (_, Err(e)) => Err(e),
            (_, Ok(_)) => {
                Err(TxError::Internal(format!("transaction {tx_id} committed while its locks were being taken")))
            }
        }
    }

    /// Runs steps until `stop` says so or the transaction has finished; returns the header last read. `own`: this is
    /// the transaction's driver, which starts another attempt when one is rolled back by another's need; a
    /// coordinator helping another transaction stops at the end of its attempt instead.
    pub async fn drive_until(
        &self,
        tx_id: &str,
        own: bool,
        stop: impl Fn(&Header, &Step) -> bool,
    ) -> Result<Header, TxError> {
        // The first step starts from the header as it is, not from one this process wrote before.
        records::forget_written(&self.store, tx_id);
        Box::pin(self.steps(tx_id, own, stop)).await
    }

    /// [`Driver::drive_until`], its first step starting from the header as this process last wrote it, if it has.
    async fn steps(&self, tx_id: &str, own: bool, stop: impl Fn(&Header, &Step) -> bool) -> Result<Header, TxError> {
        let mut waiting: Option<Waiting> = None;
        let mut attempt = 0u32;
        loop {
            let (h, step) = Box::pin(phase::resume::resume_written(&self.store, tx_id)).await?;
            if step == Step::Finished || stop(&h, &step) || (step == Step::Retry && !own) {
                return Ok(h);
            }
            let report = run_joined(&self.store, h.clone(), step).await?;
            match report.outcome {
                Outcome::Contended(c) => {
                    match Box::pin(self.resolve_all(&h, &c, &report.also_contended, waiting.as_ref(), None)).await? {
                        Resolution::Retry => {}
                        Resolution::Wait(w) => {
                            waiting = Some(w);
                            attempt += 1;
                            self.sleep(attempt).await;
                        }
                    }
                }
                Outcome::Done | Outcome::Canceled | Outcome::Ended { .. } => {
                    if let Some(w) = waiting.take() {
                        Box::pin(records::add_waited(
                            &self.store,
                            &Meter::default(),
                            &h,
                            crate::model::value::now_ms().saturating_sub(w.waiting_since_ms),
                        ))
                        .await?;
                    }
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
        _ => Err(h.rollback_error().unwrap_or_else(|| Decision::default().error(&h.id, h.actions))),
    }
}
