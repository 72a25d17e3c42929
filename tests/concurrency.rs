//! Concurrency on DynamoDB Local, in-process and through the state machine: bank transfers over shared accounts with
//! plain writers outside the protocol writing the same items (see `harness::bank` for what is checked), and a shop
//! whose concurrent orders want the same units. Under any contention every transaction ends committed or refused by
//! its own condition: one rolled back by an older transaction tries again by itself, keeping its age.
//! `tools/soak.sh` runs bigger banks.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use dynamo_saga::{Coordinator, TxError};
use harness::bank::{check, run, seed, Driver, Params};
use harness::stack::stack;
use harness::{nv, sv, Env};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

fn logs() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
}

async fn bank(env: &Env, p: Params) -> harness::bank::Outcome {
    seed(env, &p).await;
    let outcome = run(env, &p).await;
    harness::report(format!("concurrency: {}", check(env, &p, &outcome).await.0));
    // Wound-wait, with a transfer rolled back by an older one trying again with its age and waiting for that one: no
    // transfer is starved or cancelled by another, so every one commits or is refused by its own condition.
    assert_eq!(outcome.gave_up, 0, "every transfer ends by its own condition: {outcome:?}");
    assert!(outcome.committed > 0, "{outcome:?}");
    assert!(outcome.plain_ok > 0, "plain writers wrote: {outcome:?}");
    outcome
}

fn library_bank() -> Params {
    Params {
        driver: Driver::Library,
        accounts: 50,
        workers: 8,
        transfers_per_worker: 3,
        min_k: 10,
        max_k: 50,
        plain_writers: 2,
        deadline_seconds: 120,
        seed: 7,
    }
}

/// Through the protocol (one call turned off), so the plain writers meet its locks.
#[tokio::test]
async fn transfers_and_plain_writers_keep_every_invariant() {
    logs();
    let env = Env::with("bank", |c| dynamo_saga::Config { direct: false, ..c }).await;
    let outcome = bank(&env, library_bank()).await;
    assert!(outcome.plain_blocked > 0, "plain writers met locks: {outcome:?}");
}

/// The same transfers as the library runs them: each of 10 to 50 accounts in one TransactWriteItems call, which
/// DynamoDB serialises against the plain writers; one that meets a conflict is run by the protocol instead.
#[tokio::test]
async fn transfers_in_one_call_and_plain_writers_keep_every_invariant() {
    logs();
    let env = Env::new("bank1").await;
    bank(&env, library_bank()).await;
}

/// Sixteen executions of the state machine at a time, transfers of 2 to 40 accounts over 40, with plain writers.
#[tokio::test]
async fn sixteen_concurrent_executions_of_transfers_end_by_their_own_conditions() {
    logs();
    let env = Env::on_stack("smbank").await;
    let p = Params {
        driver: Driver::StateMachine,
        accounts: 40,
        workers: 16,
        transfers_per_worker: 2,
        min_k: 2,
        max_k: 40,
        plain_writers: 2,
        deadline_seconds: 300,
        seed: 11,
    };
    bank(&env, p).await;
}

/// One shop order: units `units` of table `a` go from AVAILABLE to SOLD to `order`, and the order item is written.
fn order(env: &Env, order: &str, units: &[usize]) -> Value {
    let mut items: Vec<Value> = units
        .iter()
        .map(|u| {
            json!({"Update": {"TableName": env.a, "Key": {"pk": sv(&format!("UNIT#{u:03}"))},
                "UpdateExpression": "SET #s = :sold, #o = :order", "ConditionExpression": "#s = :available",
                "ExpressionAttributeNames": {"#s": "status", "#o": "owner"},
                "ExpressionAttributeValues": {":sold": sv("SOLD"), ":order": sv(order), ":available": sv("AVAILABLE")}}})
        })
        .collect();
    items.push(json!({"Put": {"TableName": env.a, "Item": {"pk": sv(&format!("ORDER#{order}")), "units": nv(units.len() as i64)},
        "ConditionExpression": "attribute_not_exists(pk)"}}));
    json!({ "TransactItems": items })
}

/// Many concurrent orders for overlapping units: each unit is sold once, and every order is either wholly filled or
/// refused by its own condition (`ConditionalCheckFailed` on a unit another order bought), with nothing of it
/// written.
async fn shop(env: &Env, driver: Driver, orders: usize, units: usize) {
    let items = (0..units).map(|u| json!({"pk": sv(&format!("UNIT#{u:03}")), "status": sv("AVAILABLE")}));
    harness::put_all(&env.client, &env.a, items).await;
    let mut rng = StdRng::seed_from_u64(5);
    let wanted: Vec<(String, Vec<usize>)> = (0..orders)
        .map(|i| {
            let k = rng.gen_range(3..=units / 3);
            let start = rng.gen_range(0..=units - k);
            (format!("o{i:02}"), (start..start + k).collect())
        })
        .collect();
    let started = Instant::now();
    let coord = Coordinator::new(env.store.clone());
    let runs = wanted.iter().map(|(name, us)| {
        let (coord, body) = (coord.clone(), order(env, name, us));
        let run = async move {
            match driver {
                Driver::Library => coord.run(&body).await.map(|_| ()),
                Driver::StateMachine => {
                    let ex = stack().await.execute(&body).await;
                    match (ex.status.as_str(), ex.cancellation()) {
                        ("SUCCEEDED", _) => Ok(()),
                        (_, Some(c)) => Err(TxError::Canceled(Box::new(serde_json::from_value(c).unwrap()))),
                        _ => panic!("an order's execution failed instead of ending: {ex:?}"),
                    }
                }
                Driver::Native => unreachable!(
                    "the shop's orders exceed no limit of native TransactWriteItems: it compares dynamo-saga's drivers"
                ),
            }
        };
        async move { tokio::time::timeout(Duration::from_secs(600), run).await.expect("every order ends") }
    });
    let results = futures::future::join_all(runs).await;
    let elapsed = started.elapsed();
    let table = env.scan(&env.a).await;
    let owner_of: BTreeMap<usize, Option<String>> = (0..units)
        .map(|u| {
            let it = table.values().find(|v| v["pk"]["S"] == format!("UNIT#{u:03}")).expect("unit exists");
            (u, it.get("owner").map(|o| o["S"].as_str().unwrap().to_owned()))
        })
        .collect();
    let mut filled = BTreeSet::new();
    for ((name, us), r) in wanted.iter().zip(&results) {
        let placed = table.values().any(|v| v["pk"]["S"] == format!("ORDER#{name}"));
        match r {
            Ok(()) => {
                assert!(placed, "{name} committed: its order item exists");
                for u in us {
                    assert_eq!(owner_of[u].as_deref(), Some(name.as_str()), "{name} committed: unit {u} is its");
                }
                filled.insert(name.clone());
            }
            Err(TxError::Canceled(c)) => {
                harness::assert_named(c);
                assert!(
                    c.failed().all(|(_, r)| r.code == "ConditionalCheckFailed"),
                    "{name} is refused by its own condition only: {c:?}"
                );
                assert!(!placed, "{name} was refused: no order item");
                assert!(
                    us.iter().all(|u| owner_of[u].as_deref() != Some(name.as_str())),
                    "{name} was refused: none of its units is its"
                );
                assert!(
                    us.iter().any(|u| owner_of[u].is_some()),
                    "{name} was refused because a unit it wanted was sold"
                );
            }
            Err(e) => panic!("{name} failed instead of ending: {e}"),
        }
    }
    // Each unit is sold once: to an order that committed and wanted it.
    for (u, owner) in &owner_of {
        if let Some(o) = owner {
            assert!(filled.contains(o), "unit {u} is owned by {o}, which did not commit");
        }
    }
    let sold = owner_of.values().filter(|o| o.is_some()).count();
    harness::report(format!(
        "shop ({}): {orders} concurrent orders for {units} units: {} wholly filled, {} refused by their own condition, {sold} units sold once each, {:.1} s",
        driver.name(),
        filled.len(),
        orders - filled.len(),
        elapsed.as_secs_f64()
    ));
    assert!(!filled.is_empty());
    env.assert_clean().await;
}

#[tokio::test]
async fn concurrent_orders_for_overlapping_units_sell_each_unit_once() {
    logs();
    shop(&Env::new("shop").await, Driver::Library, 24, 60).await;
}

#[tokio::test]
async fn concurrent_order_executions_for_overlapping_units_sell_each_unit_once() {
    logs();
    shop(&Env::on_stack("smshop").await, Driver::StateMachine, 16, 60).await;
}
