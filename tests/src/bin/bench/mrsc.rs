//! MRSC mode beside the single-Region protocol, in the same run (`bash tools/bench.sh --mrsc-only`, and every full
//! run): updates on a store configured for multi-Region strongly consistent tables
//! ([`dynamo_saga::Config::with_strong_multi_region`]) whose client goes through an MRSC stand-in
//! (`tools/ddb-proxy.mjs --mrsc`, answering no conflicts), and the same updates on a single-Region store. Each way
//! runs twice on fresh items: once billed by DynamoDB's rules, once with every request traced for the latency model,
//! the reference model with a cross-Region write latency added to each write (an MRSC write is answered once another
//! Region has it; AWS publishes no figure for it, so the rows are modelled at several).

use dynamo_saga::Store;
use harness::trips::{critical_path, modelled_ms, traced_client, Model, Tracer};
use harness::Env;
use serde::{Deserialize, Serialize};

use super::{prepare, run, Kind, Method};

/// The cross-Region write latency the rows are read at, and the ones beside it.
pub const WRITE_MS: f64 = 20.0;
pub const SENSITIVITY_WRITE_MS: [f64; 3] = [10.0, 20.0, 50.0];

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MrscRow {
    pub actions: usize,
    pub mrsc: Way,
    pub single_region: Way,
}

/// One way of running `actions` updates.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Way {
    pub write_units_per_action: f64,
    pub read_units_per_action: f64,
    /// `TransactWriteItems` calls of the billed run (none in MRSC mode).
    pub transact_calls: u64,
    /// Requests of the traced run, and those on its critical path.
    pub calls: usize,
    pub round_trips: usize,
    /// The traced run under the reference model alone (5 ms a request, 0.25 ms an item).
    pub modelled_ms: f64,
    /// Under the reference model with each cross-Region write latency of [`SENSITIVITY_WRITE_MS`] added to every
    /// write: (write latency, modelled ms).
    pub cross_region: Vec<(f64, f64)>,
}

impl Way {
    pub fn at(&self, write_ms: f64) -> Option<f64> {
        self.cross_region.iter().find(|(w, _)| *w == write_ms).map(|(_, ms)| *ms)
    }
}

pub async fn measure(sizes: &[usize], bytes: usize) -> Vec<MrscRow> {
    let stand_in = harness::proxy::Proxy::start_args(&["--mrsc", "--conflict", "0"]).await;
    let mut out = Vec::new();
    for &n in sizes {
        let env = Env::new(&format!("bench-mrsc-{n}")).await;
        // The library's defaults (the tests' environments cut steps into small shares).
        let cfg = dynamo_saga::Config::new(&env.tx_table).with_allowed_tables([env.a.clone(), env.b.clone()]);
        let mrsc =
            way(&env, &harness::client_for(&stand_in.url), cfg.clone().with_strong_multi_region(), n, "m", bytes).await;
        let single_region = way(&env, &env.client, cfg, n, "s", bytes).await;
        eprintln!(
            "MRSC {n:>6} updates: {:.2} write units an action ({:.2} single-Region), {} requests, {} round trips ({} and {}), modelled {:.0} ms at {WRITE_MS} ms a write ({:.0} ms single-Region, 5 ms a request)",
            mrsc.write_units_per_action,
            single_region.write_units_per_action,
            mrsc.calls,
            mrsc.round_trips,
            single_region.calls,
            single_region.round_trips,
            mrsc.at(WRITE_MS).unwrap_or(f64::NAN),
            single_region.modelled_ms,
        );
        out.push(MrscRow { actions: n, mrsc, single_region });
    }
    out
}

async fn way(
    env: &Env,
    client: &aws_sdk_dynamodb::Client,
    cfg: dynamo_saga::Config,
    n: usize,
    tag: &str,
    bytes: usize,
) -> Way {
    let name = |pass: &str| format!("update-mrsc{tag}-{n}-{pass}");
    let body = prepare(env, Kind::Update, n, &format!("mrsc{tag}-bill"), bytes).await;
    let billing = Store::new(client.clone(), cfg.clone()).with_billing();
    run(env, &billing, Method::Saga, &body, &name("bill")).await.unwrap_or_else(|e| panic!("{n} updates: {e}"));
    let bill = billing.bill().expect("a billing store's bill");
    let body = prepare(env, Kind::Update, n, &format!("mrsc{tag}-time"), bytes).await;
    let tracer = Tracer::default();
    run(env, &Store::new(traced_client(client, &tracer), cfg), Method::Saga, &body, &name("time"))
        .await
        .unwrap_or_else(|e| panic!("{n} updates: {e}"));
    let calls = tracer.traced();
    let cross_region = SENSITIVITY_WRITE_MS
        .iter()
        .map(|&write_ms| (write_ms, modelled_ms(&calls, Model { write_ms, ..Model::REFERENCE })))
        .collect();
    Way {
        write_units_per_action: bill.write_units / n as f64,
        read_units_per_action: bill.read_units / n as f64,
        transact_calls: bill.transact_calls,
        calls: calls.len(),
        round_trips: critical_path(&tracer.calls()),
        modelled_ms: modelled_ms(&calls, Model::REFERENCE),
        cross_region,
    }
}

pub fn markdown(rows: &[MrscRow]) -> String {
    let beside: Vec<f64> = SENSITIVITY_WRITE_MS.iter().copied().filter(|w| *w != WRITE_MS).collect();
    let list = |sep: &str| beside.iter().map(|w| format!("{w:.0}")).collect::<Vec<_>>().join(sep);
    let reference = Model::REFERENCE;
    let mut md = format!(
        "## MRSC mode\n\nUpdates in MRSC mode (`SAGA_MULTI_REGION_CONSISTENCY=strong`: no `TransactWriteItems`, a \
         `Parent` sealed by its own write) through an MRSC stand-in, beside the same protocol single-Region, each run \
         on fresh items in this run. Capacity is what the writing Region bills by DynamoDB's rules; each other \
         replica bills the replicated writes. Modelled time: {} ms a request and {} ms an item, plus a cross-Region \
         write latency on every write ({WRITE_MS:.0} ms; {} beside it), which the stand-in does not measure.\n\n\
         | updates | write units an action, MRSC (single-Region) | read units an action | `TransactWriteItems` calls, MRSC (single-Region) | requests | round trips, MRSC (single-Region) | modelled ms at {WRITE_MS:.0} ms a write ({}) | single-Region, modelled ms |\n\
         | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
        reference.per_call_ms,
        reference.per_item_ms,
        list(" and "),
        list(" / "),
    );
    let ms = |w: &Way, write_ms: f64| w.at(write_ms).map_or("-".to_string(), |v| format!("{v:.0}"));
    for r in rows {
        let (m, s) = (&r.mrsc, &r.single_region);
        let others: Vec<String> = beside.iter().map(|w| ms(m, *w)).collect();
        md.push_str(&format!(
            "| {} | {:.2} ({:.2}) | {:.2} | {} ({}) | {} | {} ({}) | {} ({}) | {:.0} |\n",
            r.actions,
            m.write_units_per_action,
            s.write_units_per_action,
            m.read_units_per_action,
            m.transact_calls,
            s.transact_calls,
            m.calls,
            m.round_trips,
            s.round_trips,
            ms(m, WRITE_MS),
            others.join(" / "),
            s.modelled_ms,
        ));
    }
    md.push('\n');
    md
}
