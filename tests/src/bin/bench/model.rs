//! A model of a transaction's time through the state machine that counts CPU as well as round trips.
//!
//! N updates are run in this process as the state machine runs them, each phase call as its Lambda runs it
//! (`lambda::handle`), at the template's defaults (fan-out, share size, in-flight limit), on a client that traces every
//! request. For each phase call: its traced requests weighed by the reference latency model (the longest chain, as
//! [`harness::trips::modelled_ms`]), this process's CPU time over the call, and the invocations that share its work.
//! The call takes the larger of the chain and its CPU divided by those invocations, plus the Lambda round trips: one
//! for the call, and one more for each step whose shares run in other invocations (they are invoked side by side).
//! A step's shares run side by side and the largest sets its time, so the invocations working on a call are its
//! batches over the sum, across its steps, of each step's largest share; phases that are not fanned out have one.

use harness::trips::{modelled_ms, traced_store, Model, Tracer};
use harness::Env;
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::time::Instant;

/// DynamoDB's default on-demand throughput quota for a table: 40,000 write request units a second.
pub const TABLE_WRITE_UNITS_PER_SECOND: f64 = 40_000.0;

/// The CPU per item the sensitivity rows scale the measured CPU by.
pub const CPU_FACTORS: [f64; 4] = [0.5, 1.0, 1.5, 2.0];

/// One phase's calls.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PhaseModel {
    pub phase: String,
    pub calls: usize,
    pub requests: usize,
    /// The longest chain of the phase's requests under the reference model, summed over its calls.
    pub chain_ms: f64,
    /// This process's CPU over the phase's calls.
    pub cpu_ms: f64,
    /// The invocations working on the phase's calls, on average over their CPU.
    pub invocations: f64,
    pub lambda_ms: f64,
    /// Summed over the phase's calls: max(chain, CPU / invocations) + Lambda round trips.
    pub modelled_ms: f64,
}

/// One transaction size.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelRow {
    pub actions: usize,
    pub fan_out: usize,
    pub share_batches: usize,
    pub in_flight: usize,
    pub phases: Vec<PhaseModel>,
    pub modelled_ms: f64,
    /// The same calls with CPU left out: the chains and the Lambda round trips alone.
    pub round_trips_only_ms: f64,
    pub cpu_ms: f64,
    /// The time under each factor of [`CPU_FACTORS`] on the CPU measured: (factor, modelled ms).
    pub sensitivity: Vec<(f64, f64)>,
    /// The least time the table's default write quota allows for the transaction's write units (as DynamoDB Local
    /// reports them for its single-item writes: two an update of an item under 1 KB): a floor beside the model, which
    /// does not count it.
    pub quota_floor_ms: f64,
    pub write_units: f64,
    pub wall_ms: f64,
}

/// One phase call, as measured.
struct CallUse {
    phase: String,
    requests: usize,
    chain_ms: f64,
    cpu_ms: f64,
    invocations: f64,
    lambda_ms: f64,
}

impl CallUse {
    fn modelled(&self, cpu_factor: f64) -> f64 {
        self.chain_ms.max(self.cpu_ms * cpu_factor / self.invocations) + self.lambda_ms
    }
}

/// For a fanned-out call over `batches`: (invocations working, steps with shares in other invocations).
fn fanned(cfg: &dynamo_saga::Config, batches: std::ops::Range<usize>) -> (f64, usize) {
    let (mut largest, mut shared) = (0usize, 0usize);
    let mut from = batches.start;
    while from < batches.end {
        let to = (from + cfg.step_batches()).min(batches.end);
        let shares = dynamo_saga::shares::split(cfg, from..to);
        largest += shares.iter().map(|s| s.len()).max().unwrap_or(0);
        shared += usize::from(shares.len() > 1);
        from = to;
    }
    if largest == 0 {
        return (1.0, 0);
    }
    (batches.len() as f64 / largest as f64, shared)
}

/// `n` updates of `bytes`-byte items at fan-out `fan_out` (shares of at most `share_batches`).
pub async fn measure(n: usize, bytes: usize, fan_out: usize, share_batches: usize) -> ModelRow {
    use dynamo_saga::lambda::{handle, Budget, Phase};
    let env =
        Env::with(&format!("bench-model-{n}"), |c| dynamo_saga::Config { fan_out, share_batches, direct: false, ..c })
            .await;
    let body = super::prepare(&env, super::Kind::Update, n, "model", bytes).await;
    let tracer = Tracer::default();
    let in_flight = super::default_in_flight();
    // Deployed, each share is an invocation of its own with its own in-flight limit; in this one process the shares
    // share one store, so it is given the limit of all of them together.
    let store = traced_store(&env, &tracer, in_flight * fan_out.max(1));
    let cfg = store.cfg.clone();
    let budget =
        || Budget { until: Instant::now() + std::time::Duration::from_secs(600), max_steps: Budget::MAX_STEPS };
    let mut calls: Vec<CallUse> = Vec::new();
    let started = Instant::now();
    let (mut phase, mut input) = (Phase::Begin, body);
    let mut batch = 0;
    let out = loop {
        let (traced_before, cpu_before) = (tracer.traced().len(), harness::cpu::own_cpu_ms());
        let out = handle(&store, phase, &input, budget()).await.unwrap_or_else(|e| panic!("{n} updates: {e}"));
        let cpu_ms = harness::cpu::own_cpu_ms() - cpu_before;
        let traced = tracer.traced();
        let mine = &traced[traced_before..];
        let name = phase.name().to_string();
        let (invocations, shared) = if matches!(phase, Phase::Lock | Phase::Apply | Phase::Rollback) {
            let end = if out.step == name { out.batch } else { out.batches };
            fanned(&cfg, batch..end.max(batch))
        } else {
            (1.0, 0)
        };
        calls.push(CallUse {
            phase: name,
            requests: mine.len(),
            chain_ms: modelled_ms(mine, Model::REFERENCE),
            cpu_ms,
            invocations,
            lambda_ms: (1 + shared) as f64 * Model::LAMBDA_CALL_MS,
        });
        phase = match out.step.as_str() {
            "Finished" => break out,
            "Lock" => Phase::Lock,
            "Save" => Phase::Save,
            "Commit" => Phase::Commit,
            "Apply" => Phase::Apply,
            "Complete" => Phase::Complete,
            "Release" => Phase::Release,
            other => panic!("{n} updates as the state machine runs them: step {other}"),
        };
        batch = out.batch;
        input = json!({"TransactionId": out.transaction_id, "Waits": out.waits});
    };
    let wall_ms = started.elapsed().as_secs_f64() * 1000.0;
    assert_eq!(out.state, dynamo_saga::TxState::Committed, "{n} updates: {out:?}");
    let header =
        dynamo_saga::records::read_header(&env.store, &dynamo_saga::store::Meter::default(), &out.transaction_id)
            .await
            .expect("the header");
    // Single-item writes only, whose capacity DynamoDB Local reports as DynamoDB bills it.
    let write_units = header.usage.write_units;
    let mut phases: Vec<PhaseModel> = Vec::new();
    for c in &calls {
        let p = match phases.iter_mut().find(|p| p.phase == c.phase) {
            Some(p) => p,
            None => {
                phases.push(PhaseModel {
                    phase: c.phase.clone(),
                    calls: 0,
                    requests: 0,
                    chain_ms: 0.0,
                    cpu_ms: 0.0,
                    invocations: 0.0,
                    lambda_ms: 0.0,
                    modelled_ms: 0.0,
                });
                phases.last_mut().expect("just pushed")
            }
        };
        p.calls += 1;
        p.requests += c.requests;
        p.chain_ms += c.chain_ms;
        // Weighed by CPU, so that the phase's CPU over it is the time its CPU takes.
        p.invocations += c.cpu_ms / c.invocations;
        p.cpu_ms += c.cpu_ms;
        p.lambda_ms += c.lambda_ms;
        p.modelled_ms += c.modelled(1.0);
    }
    for p in &mut phases {
        p.invocations = if p.invocations > 0.0 { p.cpu_ms / p.invocations } else { 1.0 };
    }
    let total = |factor: f64| calls.iter().map(|c| c.modelled(factor)).sum::<f64>();
    let row = ModelRow {
        actions: n,
        fan_out,
        share_batches,
        in_flight,
        modelled_ms: total(1.0),
        round_trips_only_ms: calls.iter().map(|c| c.chain_ms + c.lambda_ms).sum(),
        cpu_ms: calls.iter().map(|c| c.cpu_ms).sum(),
        sensitivity: CPU_FACTORS.iter().map(|&f| (f, total(f))).collect(),
        quota_floor_ms: write_units / TABLE_WRITE_UNITS_PER_SECOND * 1000.0,
        write_units,
        wall_ms,
        phases,
    };
    eprintln!(
        "model {n:>6} updates, fan-out {fan_out}: {:.0} ms with CPU ({:.0} ms of round trips alone), {:.0} ms of CPU; quota floor {:.0} ms",
        row.modelled_ms, row.round_trips_only_ms, row.cpu_ms, row.quota_floor_ms
    );
    row
}

/// The section of `benchmarks.md`; `chunked` gives chunked `TransactWriteItems`' modelled time at a size, from the
/// round-trip pass of the same run.
pub fn markdown(rows: &[ModelRow], chunked: impl Fn(usize) -> Option<f64>) -> String {
    let Some(first) = rows.first() else { return String::new() };
    let mut md = format!(
        "## A model with CPU\n\nThe round-trip model above leaves CPU out, and a large transaction's phases are CPU-bound. \
         Here N updates run in this process as the state machine runs them, each phase call as its Lambda runs it \
         (`lambda::handle`), at the template's defaults: `PhaseFanOut` {}, shares of at most {} batches, {} requests in \
         flight in each invocation (in this one process, where the shares share one store, that many times the \
         fan-out). Each call is modelled as the larger of its traced requests' longest chain under the reference model \
         ({} ms a request, {} ms an item) and this process's CPU time over the call divided by the invocations working \
         on it, plus {} ms for each Lambda round trip: the call's own, and one for each step whose shares run in other \
         invocations. A step's shares run side by side and its largest share sets its time, so a call's invocations \
         working are its batches over the sum of each step's largest share; Begin, Save, Commit, Complete and Release \
         run in one invocation. CPU here is of the benchmark machine's cores (the benchmark's build profile, x86-64); a Lambda \
         function's vCPU is of a like speed, and the sensitivity columns scale the CPU by a factor. The floor is the \
         least time a table's default on-demand quota ({} write request units a second) allows for the transaction's \
         write units; the model does not count the quota.\n\n",
        first.fan_out,
        first.share_batches,
        first.in_flight,
        Model::REFERENCE.per_call_ms,
        Model::REFERENCE.per_item_ms,
        Model::LAMBDA_CALL_MS,
        TABLE_WRITE_UNITS_PER_SECOND
    );
    md.push_str(
        "| actions | modelled with CPU (ms) | round trips alone (ms) | chunked, modelled (ms) | with CPU vs chunked | CPU \
         (ms) | CPU per update (ms) |",
    );
    for f in CPU_FACTORS {
        md.push_str(&format!(" CPU x{f} (ms) |"));
    }
    md.push_str(
        " table quota floor (ms) | wall time in this run (ms) |\n| ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    );
    md.push_str(&" ---: |".repeat(CPU_FACTORS.len()));
    md.push_str(" ---: | ---: |\n");
    for r in rows {
        let c = chunked(r.actions);
        md.push_str(&format!(
            "| {} | {:.0} | {:.0} | {} | {} | {:.0} | {:.3} |",
            r.actions,
            r.modelled_ms,
            r.round_trips_only_ms,
            c.map_or("-".into(), |c| format!("{c:.0}")),
            c.map_or("-".into(), |c| format!("{:.2}x", r.modelled_ms / c)),
            r.cpu_ms,
            r.cpu_ms / r.actions as f64
        ));
        for (_, ms) in &r.sensitivity {
            md.push_str(&format!(" {ms:.0} |"));
        }
        md.push_str(&format!(" {:.0} | {:.0} |\n", r.quota_floor_ms, r.wall_ms));
    }
    md.push_str(
        "\nBy phase, at the largest size (calls, requests, the chains' sum, CPU, invocations working, Lambda round trips, \
         modelled; `docs/benchmarks.json` has every size):\n\n\
         | actions | phase | calls | requests | chain (ms) | CPU (ms) | invocations working | Lambda (ms) | modelled (ms) \
         |\n| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
    );
    if let Some(r) = rows.iter().max_by_key(|r| r.actions) {
        for p in &r.phases {
            md.push_str(&format!(
                "| {} | {} | {} | {} | {:.0} | {:.0} | {:.1} | {:.0} | {:.0} |\n",
                r.actions,
                p.phase,
                p.calls,
                p.requests,
                p.chain_ms,
                p.cpu_ms,
                p.invocations,
                p.lambda_ms,
                p.modelled_ms
            ));
        }
    }
    md.push('\n');
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_invocations_working_on_a_call_are_its_batches_over_its_steps_largest_shares() {
        let cfg = dynamo_saga::Config { fan_out: 16, share_batches: 20, ..dynamo_saga::Config::new("t") };
        // 102 batches: one step of 16 shares of 6 or 7 batches.
        let (inv, shared) = fanned(&cfg, 0..102);
        assert!((inv - 102.0 / 7.0).abs() < 1e-9 && shared == 1, "{inv} {shared}");
        // 1,011 batches: three full steps of 16 shares of 20, then 51 batches in 11 shares of 5 or 4.
        let (inv, shared) = fanned(&cfg, 0..1011);
        assert_eq!(shared, 4);
        assert!((inv - 1011.0 / (3.0 * 20.0 + 5.0)).abs() < 1e-9, "{inv}");
        let one = dynamo_saga::Config::new("t");
        assert_eq!(fanned(&one, 0..40), (1.0, 0), "without fan-out, one invocation");
        assert_eq!(fanned(&cfg, 5..5), (1.0, 0));
    }
}
