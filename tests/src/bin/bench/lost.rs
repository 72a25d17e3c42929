//! Lost answers through the state machine, with the shipped bound (`RevisitAfterSeconds`, 420 s): on a stack of its
//! own whose functions send every DynamoDB request through `tools/ddb-proxy.mjs`, which loses the answers of a share
//! of the writes and delivers each write up to 15 s later all the same. Each transaction's execution is timed with and
//! without losses; a transaction flagged for the visit is left to the sweeper, so its execution does not wait out the
//! bound.

use dynamo_saga::store::Meter;
use harness::proxy::{lose_answers, stats_of};
use harness::stack::Region;
use harness::Env;
use serde::{Deserialize, Serialize};

/// Answers lost of the writes, and how late a write whose answer was lost lands at most.
const LOSE: f64 = 0.02;
const LATE_MS: u64 = 15_000;
/// The template's `RevisitAfterSeconds` default.
const REVISIT_AFTER_SECONDS: u64 = 420;

/// One size, with or without losses.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LostRow {
    pub actions: usize,
    /// The share of write answers lost (0 or [`LOSE`]).
    pub lose: f64,
    pub runs: usize,
    /// The executions' median and longest wall time on the local stack.
    pub median_ms: f64,
    pub max_ms: f64,
    /// Transitions of the median execution.
    pub transitions: u64,
    /// Write answers the proxy lost over the runs, and the transactions flagged for the sweeper's visit.
    pub lost: u64,
    pub flagged: usize,
}

/// `runs` transactions of each size in `sizes`, of updates of `bytes`-byte items, without and with losses.
pub async fn measure(sizes: &[usize], bytes: usize, runs: usize) -> Vec<LostRow> {
    let vars = [
        ("SAGA_TABLE", format!("bench-lost-tx-{}", std::process::id())),
        ("SAGA_STACK_PROXY", format!("--late-ms {LATE_MS} --seed 5")),
        ("SAGA_REVISIT_AFTER_SECONDS", REVISIT_AFTER_SECONDS.to_string()),
        ("SAGA_FAN_OUT", std::env::var("SAGA_FAN_OUT").unwrap_or_else(|_| "16".into())),
        ("SAGA_SHARE_BATCHES", std::env::var("SAGA_SHARE_BATCHES").unwrap_or_else(|_| "20".into())),
    ];
    let region = Region::start_with("bench-lost", &vars).await;
    let st = &region.stack;
    let proxy = st.stand_in.clone().expect("the stack's functions send through the proxy");
    let env = Env::on_stack_of(st, "bench-lost").await;
    let mut out = Vec::new();
    for &n in sizes {
        for lose in [0.0, LOSE] {
            lose_answers(&proxy, lose, LATE_MS).await;
            let lost_before = stats_of(&proxy).await["lost"].as_u64().unwrap_or(0);
            let mut times = Vec::new();
            let mut flagged = 0;
            for run in 0..=runs {
                let body = super::prepare(&env, super::Kind::Update, n, &format!("lost-{lose}-{n}-{run}"), bytes).await;
                let ex = st.execute(&body).await;
                assert_eq!(ex.output["State"].as_str(), Some("COMMITTED"), "{ex:?}");
                let id = ex.output["TransactionId"].as_str().unwrap();
                let h = dynamo_saga::records::read_header(&env.store, &Meter::default(), id).await.unwrap();
                // The first run warms the functions' processes, as warm Lambda environments are.
                if run > 0 {
                    flagged += usize::from(h.needs_revisit());
                    times.push((ex.duration_ms as f64, ex.transitions));
                }
            }
            times.sort_by(|a, b| a.0.total_cmp(&b.0));
            let lost = stats_of(&proxy).await["lost"].as_u64().unwrap_or(0) - lost_before;
            let (median_ms, transitions) = times[times.len() / 2];
            let row = LostRow {
                actions: n,
                lose,
                runs,
                median_ms,
                max_ms: times.last().map_or(0.0, |t| t.0),
                transitions,
                lost,
                flagged,
            };
            eprintln!("lost answers: {row:?}");
            out.push(row);
        }
    }
    lose_answers(&proxy, 0.0, LATE_MS).await;
    out
}

/// The section of `benchmarks.md`.
pub fn markdown(rows: &[LostRow]) -> String {
    if rows.is_empty() {
        return String::new();
    }
    let mut md = format!(
        "## Lost answers\n\nUpdates through the state machine on a stack whose functions send every DynamoDB request \
         through `tools/ddb-proxy.mjs`, which loses the answer of {:.0}% of the write requests (the connection closed \
         under it) and delivers each such write to DynamoDB up to {} s later all the same, as a request that reached \
         the service whose answer the network lost. The bound is the template's ({REVISIT_AFTER_SECONDS} s): a \
         transaction that may have a write in flight at its end is flagged, and the sweeper visits it once the bound has \
         passed; its execution ends with the transaction. Debug builds of the functions on the local stack, the first \
         run of each size left out (it warms the functions' processes); wall time of each execution.\n\n\
         | actions | answers lost | runs | median (ms) | longest (ms) | transitions | write answers lost | flagged for \
         the sweeper |\n| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
        LOSE * 100.0,
        LATE_MS / 1000
    );
    for r in rows {
        md.push_str(&format!(
            "| {} | {:.0}% | {} | {:.0} | {:.0} | {} | {} | {} of {} |\n",
            r.actions,
            r.lose * 100.0,
            r.runs,
            r.median_ms,
            r.max_ms,
            r.transitions,
            r.lost,
            r.flagged,
            r.runs
        ));
    }
    md.push('\n');
    md
}
