//! The phase Lambdas' contract with the state machine: what each Task state sends and gets back.
//!
//! Input: `{"TransactionId": "...", "Waits": n?, "Contention": {...}?}` (Begin takes the request itself, or
//! `{"Request": {...}, "ExecutionArn": "..."}` from the state machine, or `{"TransactionId": "..."}` for a transaction
//! already begun or staged; the Abort call adds `"Abort": true, "Error": {...}`).
//!
//! Output: `{"TransactionId", "Step", "Batch", "Batches", "Actions", "State", "Attempts", "Waits", "WaitSeconds"?,
//! "Contention"?}`, where `Step` names the next Task (`Lock`, `Save`, `Apply`, `Commit`, `Complete`, `Rollback`,
//! `Release`), `Wait` (another transaction holds a lock: wait `WaitSeconds`, then Lock again with `Contention`), or
//! `Finished`. An execution ends when its transaction does: a transaction that may still have a write in flight when
//! it ends is visited by the sweeper once none can land ([`crate::protocol::phase::revisit`]).
//!
//! `Waits` counts the lock waits of this execution: every Task passes it on, and a call that answers `Wait` adds one.
//! When it reaches [`crate::Config::execution_waits`] the transaction is cancelled as a wait past `LockWaitSeconds`
//! is, so a Standard execution stays inside its 25,000 history events however long the wait may last.
//!
//! A phase call runs as many steps of its own phase as fit in its budget (a lock or apply step is a run of up to 20
//! batches), then names the next step. Calls are idempotent: a call for a phase the transaction has already left does
//! nothing and names the step it is at.

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tracing::info;

use crate::constants::H_EXECUTION;
use crate::drivers::driver::{run_step_from, Driver, Resolution, Waiting};
use crate::dynamo::store::{Meter, Store};
use crate::error::TxError;
use crate::protocol::phase::resume::{self, Step};
use crate::protocol::phase::{begin, rollback, Outcome};
use crate::protocol::records::{self, Decision, Header, TxState};

/// The functions, one per Task of the state machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Begin,
    Lock,
    Save,
    Apply,
    Commit,
    Complete,
    Rollback,
    Release,
}

impl Phase {
    pub fn name(self) -> &'static str {
        match self {
            Phase::Begin => "Begin",
            Phase::Lock => "Lock",
            Phase::Save => "Save",
            Phase::Apply => "Apply",
            Phase::Commit => "Commit",
            Phase::Complete => "Complete",
            Phase::Rollback => "Rollback",
            Phase::Release => "Release",
        }
    }

    /// Whether `step` is this phase's work. Begin also starts every attempt after the first.
    fn owns(self, step: Step) -> bool {
        matches!(
            (self, step),
            (Phase::Begin, Step::Retry)
                | (Phase::Lock, Step::Lock(_))
                | (Phase::Save, Step::Save(_))
                | (Phase::Apply, Step::Apply(_))
                | (Phase::Commit, Step::Commit)
                | (Phase::Complete, Step::Complete(_))
                | (Phase::Rollback, Step::Rollback(_))
                | (Phase::Release, Step::Release)
        )
    }
}

/// How much one call may do.
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    /// Stop starting steps after this instant (the Lambda deadline less a margin for one step, which is at most a
    /// run of [`crate::constants::RUN_BATCHES`] batches).
    pub until: Instant,
    /// The most steps one call runs.
    pub max_steps: usize,
}

impl Budget {
    pub const MAX_STEPS: usize = 50;

    /// Used when the deadline given is not a real one (`cargo lambda watch` sends a fixed `600000`).
    pub const FALLBACK: Duration = Duration::from_secs(50);

    /// A budget ending `margin` before `deadline_ms` (ms since the epoch, as Lambda gives it).
    pub fn before_deadline(deadline_ms: u64, margin: Duration) -> Self {
        let now = crate::model::value::now_ms();
        let left = if deadline_ms > now {
            Duration::from_millis(deadline_ms - now).saturating_sub(margin)
        } else {
            Self::FALLBACK
        };
        Self { until: Instant::now() + left, max_steps: Self::MAX_STEPS }
    }

    fn left(&self) -> Duration {
        self.until.saturating_duration_since(Instant::now())
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
struct PhaseInput {
    transaction_id: String,
    #[serde(default)]
    contention: Option<Waiting>,
    #[serde(default)]
    waits: u32,
    #[serde(default)]
    abort: bool,
    /// The Revisit Task's call of the Release function, from an execution started under an earlier definition of the
    /// state machine, which waited for the visit: the visit is now the sweeper's, and the call answers as Release.
    #[serde(default, rename = "Revisit")]
    _revisit: bool,
    #[serde(default)]
    error: Option<Value>,
}

/// A phase call's result: what the state machine's Route dispatches on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct StepOutput {
    pub transaction_id: String,
    pub step: String,
    /// The batch the next step works on (0 when it is not per batch).
    pub batch: usize,
    pub batches: usize,
    pub actions: usize,
    pub state: TxState,
    /// Attempts so far, this one included.
    pub attempts: u32,
    /// Lock waits this execution has made (see the module's documentation).
    #[serde(default)]
    pub waits: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_seconds: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contention: Option<Waiting>,
}

impl StepOutput {
    fn at(h: &Header, step: Step, waits: u32) -> Self {
        let (name, batch) = match step {
            Step::Lock(b) => ("Lock", b),
            Step::Save(b) => ("Save", b),
            Step::Apply(b) => ("Apply", b),
            Step::Commit => ("Commit", 0),
            Step::Complete(b) => ("Complete", b),
            Step::Rollback(b) => ("Rollback", b),
            Step::Retry => ("Retry", 0),
            Step::Release => ("Release", 0),
            Step::Finished => ("Finished", 0),
        };
        StepOutput {
            transaction_id: h.id.clone(),
            step: name.into(),
            batch,
            batches: h.batches,
            actions: h.actions,
            state: h.state,
            attempts: h.attempt + 1,
            waits,
            wait_seconds: None,
            contention: None,
        }
    }
}

/// Handles an invocation of a phase function by another of the same function for one share of its step
/// (`{"TransactionId", "Share": {...}}`, [`crate::protocol::shares`]): the share's result as JSON.
pub async fn handle_share(store: &Store, input: &Value) -> Result<Value, TxError> {
    use crate::protocol::shares::Share;
    let share = input.get("Share").ok_or_else(|| TxError::invalid(None, "a share's input is {\"Share\": {...}}"))?;
    let share: Share = serde_json::from_value(share.clone())
        .map_err(|e| TxError::invalid(None, format!("Share is not a share of a step: {e}")))?;
    // A worker's own share is its whole work: it fans out no further.
    let store = store.without_workers();
    let out = match share {
        Share::Lock { .. } => serde_json::to_value(crate::protocol::phase::lock::share(&store, share).await?),
        Share::Apply { .. } => serde_json::to_value(crate::protocol::phase::apply::share(&store, share).await?),
        Share::Rollback { .. } => serde_json::to_value(crate::protocol::phase::rollback::share(&store, share).await?),
    };
    out.map_err(|e| TxError::Internal(format!("a share's result: {e}")))
}

/// Handles one Task invocation of `phase`.
pub async fn handle(store: &Store, phase: Phase, input: &Value, budget: Budget) -> Result<StepOutput, TxError> {
    // A share this call runs itself for want of a worker stops when the call must stop starting steps.
    let store = &store.with_deadline(budget.until);
    let (tx_id, contention, waits) = if phase == Phase::Begin {
        let (tx_id, waits) = begin_or_pick_up(store, input).await?;
        (tx_id, None, waits)
    } else {
        let input: PhaseInput = serde_json::from_value(input.clone()).map_err(|e| {
            TxError::Validation(crate::error::Invalid {
                action: None,
                message: format!("{} expects {{\"TransactionId\": \"...\"}}: {e}", phase.name()),
            })
        })?;
        // A call starts from the header as it is, not from one this process wrote in an earlier call (Begin's call
        // starts from the header it has just written).
        records::forget_written(store, &input.transaction_id);
        if input.abort {
            let why = Decision::aborted(abort_reason(input.error.as_ref()));
            let (h, _) = resume::resume(store, &input.transaction_id).await?;
            if h.state == TxState::Pending {
                rollback::rollback(store, &input.transaction_id, 0, Some(&why)).await?;
            }
        }
        (input.transaction_id, input.contention, input.waits)
    };
    let tx_id = tx_id.as_str();
    let driver = Driver::new(store.clone());
    let mut waiting = contention;
    let mut steps = 0;
    loop {
        let (h, step) = resume::resume_written(store, tx_id).await?;
        if phase == Phase::Release && (steps > 0 || step == Step::Finished) {
            if steps > 0 && step == Step::Finished {
                // This call finished the transaction: its one metrics line and end event (a repeated Release finds it
                // finished).
                let now = crate::model::value::now_ms();
                if let Some(namespace) = store.cfg.metrics_namespace.as_deref() {
                    println!("{}", crate::protocol::metrics::record(&h, namespace, now));
                }
                store.announce(crate::protocol::metrics::end_event(&h, now)).await;
            }
            // A transaction that may have a write still in flight (`Header::needs_revisit`) stays in the index's
            // `revisit#` partitions for the sweeper, which visits it once no such write can land: the execution ends
            // with the transaction, whoever waits on it learning the outcome now.
            return released(&h, step, waits);
        }
        if !phase.owns(step) || steps >= budget.max_steps || (steps > 0 && budget.left().is_zero()) {
            return Ok(StepOutput::at(&h, step, waits));
        }
        let report = run_step_from(store, h.clone(), step).await?;
        steps += 1;
        info!(tx_id, phase = phase.name(), ?step, outcome = ?report.outcome, calls = report.usage.calls, "step done");
        match report.outcome {
            Outcome::Contended(c) => {
                match driver.resolve_all(&h, &c, &report.also_contended, waiting.as_ref(), Some(budget.left())).await? {
                    Resolution::Retry => {}
                    Resolution::Wait(_) if waits >= store.cfg.execution_waits => {
                        let limit = format!(
                            "this execution has waited {waits} times, the most one execution's history allows ({})",
                            crate::constants::ENV_EXECUTION_WAITS
                        );
                        driver.give_up(&h, std::iter::once(&c).chain(&report.also_contended), &limit).await?;
                    }
                    Resolution::Wait(w) => {
                        let (h, step) = resume::resume_written(store, tx_id).await?;
                        let mut out = StepOutput::at(&h, step, waits);
                        if phase.owns(step) {
                            out.waits = waits + 1;
                            out.step = "Wait".into();
                            out.wait_seconds = Some(wait_seconds(&w));
                            out.contention = Some(w);
                        }
                        return Ok(out);
                    }
                }
            }
            Outcome::Done | Outcome::Canceled | Outcome::Ended { .. } => {
                if let Some(w) = waiting.take() {
                    records::add_waited(
                        store,
                        &Meter::default(),
                        &h,
                        crate::model::value::now_ms().saturating_sub(w.waiting_since_ms),
                    )
                    .await?;
                }
            }
        }
    }
}

/// Release ends the execution: a committed transaction finishes, a rolled-back one fails with its reasons
/// (`TransactionCanceled`) or, when no action is to blame, `TransactionAborted`.
fn released(h: &Header, step: Step, waits: u32) -> Result<StepOutput, TxError> {
    match (step, h.rollback_error()) {
        (Step::Finished, Some(e)) => Err(e),
        _ => Ok(StepOutput::at(h, step, waits)),
    }
}

/// Begin's input: the request itself, `{"Request": {...}, "ExecutionArn": "...", "ExecutionStartTime": "..."}` from
/// the state machine, or `{"TransactionId"}` (in either) for a transaction already begun or staged. A request is
/// submitted ([`begin::submit`]) under the execution's own id ([`begin::execution_id`]), so a retried Begin picks up
/// what the first run did. The Retry Task sends `{"TransactionId", "Waits"}`. Returns the transaction's id and the
/// execution's lock waits so far.
async fn begin_or_pick_up(store: &Store, input: &Value) -> Result<(String, u32), TxError> {
    let (request, arn, start_time) = match input.get("Request") {
        Some(r) if input.get("TransactItems").is_none() => (
            r,
            input.get("ExecutionArn").and_then(Value::as_str),
            input.get("ExecutionStartTime").and_then(Value::as_str),
        ),
        _ => (input, None, None),
    };
    let pick_up = request.as_object().filter(|o| o.keys().all(|k| k == "TransactionId" || k == "Waits"));
    let existing = pick_up.and_then(|o| o.get("TransactionId")).and_then(Value::as_str);
    let waits = pick_up
        .and_then(|o| o.get("Waits"))
        .and_then(Value::as_u64)
        .map_or(0, |w| u32::try_from(w).unwrap_or(u32::MAX));
    let Some(id) = existing else {
        let id = match (arn, start_time) {
            (Some(arn), Some(t)) => Some(begin::execution_id(arn, t)?),
            _ => None,
        };
        let begun = begin::submit(store, request, arn, id.as_deref()).await?;
        begun.report_end(store).await;
        return Ok((begun.transaction_id, 0));
    };
    let (h, _) = resume::resume(store, id).await?;
    if let Some(arn) = arn.filter(|a| !h.finished() && h.execution_arn.as_deref() != Some(*a)) {
        // This execution now drives the transaction: the sweeper asks it, not the one before, whether it runs.
        let m = Meter::default();
        records::update_header(store, &m, id, h.state, &[(H_EXECUTION, crate::model::value::s(arn))], None, &m.usage())
            .await?;
    }
    Ok((id.to_string(), waits))
}

/// Backoff while waiting for a holder: about 1 s at first, growing with the time waited up to 10 s, with jitter so
/// waiters do not come back in step.
fn wait_seconds(w: &Waiting) -> u64 {
    let waited = crate::model::value::now_ms().saturating_sub(w.waiting_since_ms) / 1000;
    let cap = (1 + waited / 4).min(10);
    1 + (ulid::Ulid::new().random() % cap as u128) as u64
}

fn abort_reason(error: Option<&Value>) -> String {
    let name = error.and_then(|e| e.get("Error")).and_then(Value::as_str).unwrap_or("an error");
    let cause = error.and_then(|e| e.get("Cause")).and_then(Value::as_str).unwrap_or("");
    let cause: String = cause.chars().take(500).collect();
    if cause.is_empty() {
        format!("the state machine gave up after {name}")
    } else {
        format!("the state machine gave up after {name}: {cause}")
    }
}
