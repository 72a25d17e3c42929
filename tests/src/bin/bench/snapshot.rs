//! Snapshot reads (`dynamo_saga::snapshot`) beside the other ways to read many items: native `TransactGetItems` (up to
//! 100, one snapshot), strongly consistent `BatchGetItem` (any number, no snapshot) and a read lock (a snapshot, by
//! locking). Read and write units per item by DynamoDB's rules (DynamoDB Local reports `BatchGetItem`'s right, and
//! under-reports transactional calls: `TransactGetItems` is billed at 2 units per 4 KB of each item), and round trips
//! on the critical path with every call of a pass in flight at once. Then the passes and cancellations of snapshots of
//! 1,000 items while transfers run over them.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use dynamo_saga::read;
use dynamo_saga::value::{item_from_json, item_size};
use harness::trips::{critical_path, traced_store, Tracer};
use harness::{put_all, sv, Env};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

/// One way of reading `items` items.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotRow {
    pub items: usize,
    pub method: String,
    pub read_units_per_item: f64,
    pub write_units_per_item: f64,
    /// Requests on the critical path.
    pub round_trips: usize,
    pub calls: usize,
    pub wall_ms: f64,
    /// Passes over the items (snapshot reads).
    pub passes: Option<u32>,
    pub note: Option<String>,
}

/// Snapshots of 1,000 items while transfers run over them.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotLoad {
    pub items: usize,
    pub workers: usize,
    pub transfer_accounts: String,
    pub transfers_committed: usize,
    pub transfers_per_second: f64,
    pub snapshots: usize,
    pub answered: usize,
    pub cancelled: usize,
    /// Passes of the answered snapshots: median and most.
    pub median_passes: u32,
    pub max_passes: u32,
    pub mean_read_units_per_item: f64,
}

const METHODS: [&str; 4] =
    ["snapshot read", "native TransactGetItems", "BatchGetItem (strongly consistent)", "read lock"];

/// Every method at each of `sizes`, on items of `bytes` bytes.
pub async fn measure(sizes: &[usize], bytes: usize) -> Vec<SnapshotRow> {
    let env = Env::new("bench-snapshot").await;
    let mut out = Vec::new();
    for &n in sizes {
        let keys: Vec<String> = (0..n).map(|i| format!("snap-{n}-{i:06}")).collect();
        put_all(&env.client, &env.a, keys.iter().map(|k| super::item(k, bytes))).await;
        let gets: Vec<Value> =
            keys.iter().map(|k| json!({"Get": {"TableName": env.a, "Key": {"pk": sv(k)}}})).collect();
        for method in METHODS {
            let tracer = Tracer::default();
            let store = traced_store(&env, &tracer, env.store.cfg.concurrency);
            let started = Instant::now();
            let mut row = SnapshotRow {
                items: n,
                method: method.into(),
                read_units_per_item: 0.0,
                write_units_per_item: 0.0,
                round_trips: 0,
                calls: 0,
                wall_ms: 0.0,
                passes: None,
                note: None,
            };
            match method {
                "snapshot read" => {
                    let s = dynamo_saga::snapshot::transact_get_items(&store, &json!({ "TransactItems": gets }))
                        .await
                        .expect("a snapshot of items nothing writes");
                    row.read_units_per_item = s.usage.read_units / n as f64;
                    row.passes = Some(s.passes);
                }
                "native TransactGetItems" if n > 100 => {
                    row.note = Some("TransactGetItems takes at most 100 items".into());
                    out.push(row);
                    continue;
                }
                "native TransactGetItems" => {
                    let items = gets.iter().map(|g| {
                        let get = aws_sdk_dynamodb::types::Get::builder()
                            .table_name(&env.a)
                            .set_key(Some(item_from_json(&g["Get"]["Key"]).unwrap()))
                            .build()
                            .unwrap();
                        aws_sdk_dynamodb::types::TransactGetItem::builder().get(get).build()
                    });
                    let r = store.client.transact_get_items().set_transact_items(Some(items.collect())).send().await;
                    let r = r.expect("TransactGetItems");
                    // Billed by DynamoDB's rule: 2 read units per 4 KB of each item.
                    let units: f64 = r
                        .responses()
                        .iter()
                        .map(|i| 2.0 * (i.item().map_or(0, item_size).max(1).div_ceil(4096)) as f64)
                        .sum();
                    row.read_units_per_item = units / n as f64;
                }
                "BatchGetItem (strongly consistent)" => {
                    // Every call in flight at once, as the snapshot's passes send them.
                    let m = dynamo_saga::store::Meter::default();
                    let calls = gets.chunks(100).map(|chunk| {
                        let keys = chunk.iter().map(|g| item_from_json(&g["Get"]["Key"]).unwrap()).collect();
                        store.batch_get(&m, &env.a, keys)
                    });
                    futures::future::try_join_all(calls).await.expect("BatchGetItem");
                    row.read_units_per_item = m.usage().read_units / n as f64;
                }
                _ => {
                    let keys =
                        gets.iter().map(|g| (env.a.clone(), item_from_json(&g["Get"]["Key"]).unwrap())).collect();
                    let billed = store.with_billing();
                    let lock =
                        read::lock_for_read(&billed, keys, None).await.expect("a read lock on items nothing holds");
                    lock.release().await.expect("released");
                    let bill = billed.bill().unwrap_or_default();
                    row.read_units_per_item = bill.read_units / n as f64;
                    row.write_units_per_item = bill.write_units / n as f64;
                }
            }
            row.wall_ms = started.elapsed().as_secs_f64() * 1000.0;
            let traced = tracer.traced();
            row.calls = traced.len();
            row.round_trips = critical_path(&tracer.calls());
            eprintln!("snapshot reads: {row:?}");
            out.push(row);
        }
    }
    out
}

/// Snapshots of `items` accounts, read one after another by one reader while `workers` run transfers of 2 to 10 of
/// them, for `seconds`.
pub async fn under_load(items: usize, workers: usize, seconds: u64) -> SnapshotLoad {
    use harness::bank::{self, Driver, Params};
    let env = Env::new("bench-snapshot-load").await;
    let p = Params {
        driver: Driver::Library,
        accounts: items,
        workers,
        transfers_per_worker: usize::MAX,
        min_k: 2,
        max_k: 10,
        plain_writers: 0,
        deadline_seconds: 120,
        seed: 55,
    };
    bank::seed(&env, &p).await;
    let gets: Vec<Value> =
        (0..items).map(|i| json!({"Get": {"TableName": env.a, "Key": {"pk": sv(&bank::acct(i))}}})).collect();
    let stop = AtomicBool::new(false);
    let started = Instant::now();
    let transfers = async {
        let coord = dynamo_saga::Coordinator::new(env.store.clone());
        let one = |w: usize| {
            let coord = &coord;
            let stop = &stop;
            let env = &env;
            async move {
                let mut committed = 0;
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    i += 1;
                    let a = ((w as u64 * 7919 + i * 104_729) % items as u64) as usize;
                    let b = (a + 1 + (i as usize * 31) % (items - 1)) % items;
                    let body = json!({"TransactItems": [
                        {"Update": {"TableName": env.a, "Key": {"pk": sv(&bank::acct(a))}, "UpdateExpression": "ADD bal :m",
                            "ExpressionAttributeValues": {":m": {"N": "-1"}}}},
                        {"Update": {"TableName": env.a, "Key": {"pk": sv(&bank::acct(b))}, "UpdateExpression": "ADD bal :p",
                            "ExpressionAttributeValues": {":p": {"N": "1"}}}}]});
                    if coord.run(&body).await.is_ok() {
                        committed += 1;
                    }
                }
                committed
            }
        };
        futures::future::join_all((0..workers).map(one)).await.into_iter().sum::<usize>()
    };
    let reader = async {
        let (mut passes, mut cancelled, mut units) = (Vec::new(), 0, 0.0);
        let mut snapshots = 0;
        while started.elapsed().as_secs() < seconds {
            snapshots += 1;
            match dynamo_saga::snapshot::transact_get_items(&env.store, &json!({ "TransactItems": gets })).await {
                Ok(s) => {
                    let total: i64 =
                        s.responses.iter().flatten().map(|i| i["bal"].as_n().unwrap().parse::<i64>().unwrap()).sum();
                    assert_eq!(total, bank::START_BALANCE * items as i64, "a snapshot saw part of a transfer");
                    passes.push(s.passes);
                    units += s.usage.read_units;
                }
                Err(dynamo_saga::TxError::Canceled(_)) => cancelled += 1,
                Err(e) => panic!("{e}"),
            }
        }
        stop.store(true, Ordering::Relaxed);
        (snapshots, passes, cancelled, units)
    };
    let (committed, (snapshots, mut passes, cancelled, units)) = tokio::join!(transfers, reader);
    let elapsed = started.elapsed().as_secs_f64();
    passes.sort();
    let answered = passes.len();
    let load = SnapshotLoad {
        items,
        workers,
        transfer_accounts: "2".into(),
        transfers_committed: committed,
        transfers_per_second: committed as f64 / elapsed,
        snapshots,
        answered,
        cancelled,
        median_passes: passes.get(answered / 2).copied().unwrap_or(0),
        max_passes: passes.last().copied().unwrap_or(0),
        mean_read_units_per_item: if answered > 0 { units / (answered * items) as f64 } else { 0.0 },
    };
    eprintln!("snapshot reads under load: {load:?}");
    load
}

/// The section of `benchmarks.md`.
pub fn markdown(rows: &[SnapshotRow], load: Option<&SnapshotLoad>) -> String {
    if rows.is_empty() {
        return String::new();
    }
    let mut md = String::from(
        "## Snapshot reads\n\nReading many items on DynamoDB Local, each way once, in process: a snapshot read \
         (`TransactGetItems`'s request, any number of items, every item as committed at one instant: two strongly \
         consistent passes), native `TransactGetItems` (a snapshot of at most 100), strongly consistent `BatchGetItem` \
         (no snapshot) and a read lock (a snapshot, by locking every item with a transaction of `ConditionCheck`s and \
         rolling it back). Units per item by DynamoDB's rules (`TransactGetItems`: 2 per 4 KB of each item); round \
         trips on the critical path, with every call of a pass in flight at once.\n\n\
         | items | method | read units per item | write units per item | round trips | calls | passes | wall ms |\n\
         | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |\n",
    );
    for r in rows {
        match &r.note {
            Some(note) => md.push_str(&format!("| {} | {} | - | - | - | - | - | {note} |\n", r.items, r.method)),
            None => md.push_str(&format!(
                "| {} | {} | {:.3} | {:.3} | {} | {} | {} | {:.0} |\n",
                r.items,
                r.method,
                r.read_units_per_item,
                r.write_units_per_item,
                r.round_trips,
                r.calls,
                r.passes.map_or_else(|| "-".to_string(), |p| p.to_string()),
                r.wall_ms
            )),
        }
    }
    if let Some(l) = load {
        md.push_str(&format!(
            "\nUnder writes: one reader read {} accounts as snapshots, one after another, while {} workers ran transfers \
             of {} accounts each ({} committed, {:.0} a second): {} snapshots, {} answered (median {} passes, at most \
             {}; {:.3} read units per item), {} cancelled with `TransactionConflict` after 8 passes. Every answer \
             had the bank's total.\n",
            l.items,
            l.workers,
            l.transfer_accounts,
            l.transfers_committed,
            l.transfers_per_second,
            l.snapshots,
            l.answered,
            l.median_passes,
            l.max_passes,
            l.mean_read_units_per_item,
            l.cancelled
        ));
    }
    md.push('\n');
    md
}
