//! A bank under load, for the concurrency test and the soak command: workers run transfers (transactions touching
//! `min_k..=max_k` accounts, debits guarded by `bal >= amount`, the deltas summing to zero) while plain writers,
//! outside the protocol, bump a `visits` counter on random accounts with a condition that respects locks.
//!
//! What must hold afterwards: the total balance is what it was; every account's `txns` counter equals the number of
//! committed transfers that touched it (each applied exactly once, none lost to a rollback's restore); its `visits`
//! equals the plain writes that succeeded on it (none overwritten by a transaction's image); no lock is left; every
//! transfer ended, committed or cancelled, before its deadline.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use dynamo_saga::constants::ATTR_LOCK;
use dynamo_saga::{Coordinator, TxError};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

use crate::{nv, sv, Env};

#[derive(Debug, Clone)]
pub struct Params {
    pub accounts: usize,
    pub workers: usize,
    pub transfers_per_worker: usize,
    pub min_k: usize,
    pub max_k: usize,
    pub plain_writers: usize,
    /// Every transfer's `Options.DeadlineSeconds`.
    pub deadline_seconds: u64,
    pub seed: u64,
}

#[derive(Debug, Clone, Default)]
pub struct Outcome {
    /// Transfers committed.
    pub committed: usize,
    /// Transfers that ended cancelled by their own condition, and transfers still cancelled after every attempt.
    pub condition_failed: usize,
    pub gave_up: usize,
    pub plain_ok: usize,
    pub plain_blocked: usize,
    pub slowest: Duration,
    pub elapsed: Duration,
    /// Committed transfers per account, and plain writes that succeeded per account.
    txns: HashMap<usize, i64>,
    visits: HashMap<usize, i64>,
}

pub const START_BALANCE: i64 = 1_000;
/// Attempts a worker makes at one transfer, not counting those rolled back by an older transfer (see
/// `Coordinator::run_retrying`).
pub const MAX_ATTEMPTS: u32 = 10;

fn acct(i: usize) -> String {
    format!("acct-{i:04}")
}

pub async fn seed(env: &Env, p: &Params) {
    let accounts = (0..p.accounts).map(|i| json!({"pk": sv(&acct(i)), "bal": nv(START_BALANCE), "txns": nv(0), "visits": nv(0)}));
    crate::put_all(&env.client, &env.a, accounts).await;
}

/// A transfer over `k` distinct accounts whose deltas sum to zero.
fn transfer(env: &Env, p: &Params, rng: &mut StdRng) -> (Value, Vec<usize>) {
    let k = rng.gen_range(p.min_k..=p.max_k).min(p.accounts);
    let mut picked: Vec<usize> = rand::seq::index::sample(rng, p.accounts, k).into_vec();
    picked.sort();
    let mut deltas: Vec<i64> = (0..k - 1).map(|_| rng.gen_range(-50..=50)).collect();
    deltas.push(-deltas.iter().sum::<i64>());
    let items: Vec<Value> = picked
        .iter()
        .zip(&deltas)
        .map(|(i, d)| {
            let mut u = json!({"Update": {"TableName": env.a, "Key": {"pk": sv(&acct(*i))},
                "UpdateExpression": "ADD bal :d, txns :one", "ExpressionAttributeValues": {":d": nv(*d), ":one": nv(1)}}});
            if *d < 0 {
                u["Update"]["ConditionExpression"] = json!("bal >= :need");
                u["Update"]["ExpressionAttributeValues"][":need"] = nv(-d);
            }
            u
        })
        .collect();
    (json!({"TransactItems": items, "Options": {"DeadlineSeconds": p.deadline_seconds}}), picked)
}

pub async fn run(env: &Env, p: &Params) -> Outcome {
    let started = Instant::now();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let workers = (0..p.workers).map(|w| {
        let coord = Coordinator::new(env.store.clone());
        let mut rng = StdRng::seed_from_u64(p.seed + w as u64);
        async move {
            let mut out = Outcome::default();
            for _ in 0..p.transfers_per_worker {
                let (body, picked) = transfer(env, p, &mut rng);
                // As a client of DynamoDB does with TransactionConflict, a transfer cancelled by a conflict (not by
                // its own condition) is sent again; each attempt keeps the first one's age.
                let t = Instant::now();
                let limit = Duration::from_secs(p.deadline_seconds + 60);
                let result = tokio::time::timeout(limit, coord.run_retrying(&body, MAX_ATTEMPTS)).await.expect("a transfer never ends: livelock");
                out.slowest = out.slowest.max(t.elapsed());
                match result {
                    Ok(_) => {
                        out.committed += 1;
                        picked.iter().for_each(|i| *out.txns.entry(*i).or_default() += 1);
                    }
                    Err(TxError::Canceled(c)) if c.failed().any(|(_, r)| r.code == "ConditionalCheckFailed") => out.condition_failed += 1,
                    Err(TxError::Canceled(_)) => out.gave_up += 1,
                    Err(e) => panic!("a transfer failed instead of ending: {e}"),
                }
            }
            out
        }
    });
    let plain = (0..p.plain_writers).map(|w| {
        let stop = stop.clone();
        let mut rng = StdRng::seed_from_u64(p.seed + 1000 + w as u64);
        async move {
            let mut out = Outcome::default();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let i = rng.gen_range(0..p.accounts);
                let r = env
                    .client
                    .update_item()
                    .table_name(&env.a)
                    .key("pk", aws_sdk_dynamodb::types::AttributeValue::S(acct(i)))
                    .update_expression("ADD visits :one")
                    .condition_expression("attribute_not_exists(#lock)")
                    .expression_attribute_names("#lock", ATTR_LOCK)
                    .expression_attribute_values(":one", aws_sdk_dynamodb::types::AttributeValue::N("1".into()))
                    .send()
                    .await;
                match r {
                    Ok(_) => {
                        out.plain_ok += 1;
                        *out.visits.entry(i).or_default() += 1;
                    }
                    Err(e) if e.as_service_error().is_some_and(|s| s.is_conditional_check_failed_exception()) => out.plain_blocked += 1,
                    Err(e) => panic!("plain write failed: {e:?}"),
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            out
        }
    });
    let plain = futures::future::join_all(plain);
    let workers = async {
        let r = futures::future::join_all(workers).await;
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        r
    };
    let (w, pl) = tokio::join!(workers, plain);
    let mut total = Outcome { elapsed: started.elapsed(), ..Outcome::default() };
    for o in w.into_iter().chain(pl) {
        total.committed += o.committed;
        total.condition_failed += o.condition_failed;
        total.gave_up += o.gave_up;
        total.plain_ok += o.plain_ok;
        total.plain_blocked += o.plain_blocked;
        total.slowest = total.slowest.max(o.slowest);
        o.txns.iter().for_each(|(k, v)| *total.txns.entry(*k).or_default() += v);
        o.visits.iter().for_each(|(k, v)| *total.visits.entry(*k).or_default() += v);
    }
    total
}

/// Checks every invariant; returns a one-line summary.
pub async fn check(env: &Env, p: &Params, o: &Outcome) -> String {
    let items = env.scan(&env.a).await;
    let num = |v: &Value, k: &str| v[k]["N"].as_str().unwrap().parse::<i64>().unwrap();
    let mut total = 0;
    for i in 0..p.accounts {
        let v = items.values().find(|v| v["pk"]["S"] == acct(i)).expect("account exists");
        total += num(v, "bal");
        assert!(num(v, "bal") >= 0, "{}: negative balance {v}", acct(i));
        assert_eq!(num(v, "txns"), o.txns.get(&i).copied().unwrap_or(0), "{}: committed transfers applied exactly once", acct(i));
        assert_eq!(num(v, "visits"), o.visits.get(&i).copied().unwrap_or(0), "{}: no plain write lost", acct(i));
    }
    assert_eq!(total, START_BALANCE * p.accounts as i64, "total balance conserved");
    assert_eq!(o.committed + o.condition_failed + o.gave_up, p.workers * p.transfers_per_worker, "every transfer ended");
    // Every transaction (each attempt is one) ended, and none ran past its deadline by more than a rollback takes.
    let mut attempts = 0;
    for rec in env.tx_records().await {
        if rec.get("sk").and_then(|v| v.as_s().ok()).map(String::as_str) != Some(dynamo_saga::constants::SK_HEADER) {
            continue;
        }
        attempts += 1;
        let n = |k: &str| rec.get(k).and_then(|v| v.as_n().ok()).and_then(|v| v.parse::<u64>().ok());
        let finished = n("finishedAt").unwrap_or_else(|| panic!("a transaction never ended: {rec:?}"));
        let deadline = n("deadline").expect("deadline");
        assert!(finished <= deadline + 30_000, "a transaction ran past its deadline: {rec:?}");
    }
    let summary = format!(
        "{} transfers over {} accounts, {}-{} accounts each, by {} workers: {} committed, {} refused by their own condition, {} given up (after {MAX_ATTEMPTS} attempts or past the deadline); {} plain writes ({} held off by a lock); slowest transfer {:.1} s; {:.1} s in all; total balance conserved, no lost update",
        p.workers * p.transfers_per_worker,
        p.accounts,
        p.min_k,
        p.max_k,
        p.workers,
        o.committed,
        o.condition_failed,
        o.gave_up,
        o.plain_ok,
        o.plain_blocked,
        o.slowest.as_secs_f64(),
        o.elapsed.as_secs_f64()
    );
    env.assert_clean().await;
    format!("{summary}; {attempts} transactions in all, each ended within its deadline")
}
