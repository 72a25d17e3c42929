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

/// What runs each transfer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Driver {
    /// `Coordinator::run`, in this process.
    Library,
    /// One execution of the state machine each, on the local stack (`tools/sfn-local.mjs`).
    StateMachine,
    /// Native `TransactWriteItems` (at most 100 actions), sent again by the client after a `TransactionConflict`, with
    /// backoff, as DynamoDB's documentation advises: the baseline for contention.
    Native,
}

impl Driver {
    pub fn name(self) -> &'static str {
        match self {
            Driver::Library => "dynamo-saga in-process",
            Driver::StateMachine => "dynamo-saga state machine",
            Driver::Native => "native TransactWriteItems with client retries",
        }
    }
}

#[derive(Debug, Clone)]
pub struct Params {
    pub driver: Driver,
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
    /// Each transfer's time to end, in the order they ended.
    pub times: Vec<Duration>,
    /// The transfers' transaction ids (dynamo-saga drivers).
    pub ids: Vec<String>,
    /// `TransactWriteItems` calls the native driver sent again after a conflict.
    pub native_retries: usize,
    /// Committed transfers per account, and plain writes that succeeded per account.
    txns: HashMap<usize, i64>,
    visits: HashMap<usize, i64>,
}

pub const START_BALANCE: i64 = 1_000;

/// The key of account `i`.
pub fn acct(i: usize) -> String {
    format!("acct-{i:04}")
}

pub async fn seed(env: &Env, p: &Params) {
    let accounts =
        (0..p.accounts).map(|i| json!({"pk": sv(&acct(i)), "bal": nv(START_BALANCE), "txns": nv(0), "visits": nv(0)}));
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

/// Runs one transfer to its end with `driver`; its transaction id when it committed (and how many times a native
/// call was sent again).
async fn transfer_once(
    driver: Driver,
    coord: &Coordinator,
    body: &Value,
    retries: &mut usize,
) -> Result<String, TxError> {
    match driver {
        Driver::Library => coord.run(body).await.map(|c| c.transaction_id),
        Driver::Native => native_with_retries(coord.store(), body, retries).await.map(|_| "native".to_owned()),
        Driver::StateMachine => {
            let ex = crate::stack::stack().await.execute(body).await;
            match (ex.status.as_str(), ex.error.as_deref()) {
                ("SUCCEEDED", _) => Ok(ex.output["TransactionId"].as_str().expect("TransactionId").to_owned()),
                (_, Some("TransactionCanceled")) => Err(TxError::Canceled(Box::new(
                    serde_json::from_value(ex.cancellation().expect("a named cancellation")).unwrap(),
                ))),
                _ => panic!("a transfer's execution failed instead of ending: {ex:?}"),
            }
        }
    }
}

/// `TransactWriteItems`, sent again after a cancellation for `TransactionConflict` (or throttling) with full-jitter
/// backoff from 25 ms to 1.6 s, until it commits or fails a condition.
async fn native_with_retries(store: &dynamo_saga::Store, body: &Value, retries: &mut usize) -> Result<(), TxError> {
    use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
    let items: Vec<_> = body["TransactItems"].as_array().unwrap().iter().map(crate::native_item).collect();
    assert!(items.len() <= 100, "native TransactWriteItems takes at most 100 actions");
    let mut attempt = 0;
    loop {
        match store.client.transact_write_items().set_transact_items(Some(items.clone())).send().await {
            Ok(_) => return Ok(()),
            Err(e) => match e.into_service_error() {
                TransactWriteItemsError::TransactionCanceledException(c) => {
                    let reasons: Vec<dynamo_saga::CancellationReason> = c
                        .cancellation_reasons()
                        .iter()
                        .map(|r| dynamo_saga::CancellationReason {
                            code: r.code().unwrap_or("None").to_owned(),
                            message: r.message().map(str::to_owned),
                            item: None,
                        })
                        .collect();
                    if reasons.iter().any(|r| r.code == "ConditionalCheckFailed") {
                        return Err(TxError::Canceled(Box::new(dynamo_saga::Cancellation::new("native", reasons))));
                    }
                }
                TransactWriteItemsError::TransactionInProgressException(_)
                | TransactWriteItemsError::ProvisionedThroughputExceededException(_) => {}
                other => panic!("native TransactWriteItems failed: {other:?}"),
            },
        }
        attempt += 1;
        *retries += 1;
        dynamo_saga::store::backoff(attempt).await;
    }
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
                // A transfer rolled back by an older one is not cancelled: it tries again by itself, keeping its age.
                let t = Instant::now();
                let limit = Duration::from_secs(p.deadline_seconds + 60);
                let result =
                    tokio::time::timeout(limit, transfer_once(p.driver, &coord, &body, &mut out.native_retries))
                        .await
                        .expect("a transfer never ends: livelock");
                out.slowest = out.slowest.max(t.elapsed());
                out.times.push(t.elapsed());
                match result {
                    Ok(id) => {
                        out.committed += 1;
                        out.ids.push(id);
                        picked.iter().for_each(|i| *out.txns.entry(*i).or_default() += 1);
                    }
                    Err(TxError::Canceled(c))
                        if crate::assert_named(&c).failed().any(|(_, r)| r.code == "ConditionalCheckFailed") =>
                    {
                        out.condition_failed += 1;
                        out.ids.push(c.transaction_id.clone());
                    }
                    Err(TxError::Canceled(c)) => {
                        out.gave_up += 1;
                        out.ids.push(c.transaction_id.clone());
                    }
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
                    Err(e) if e.as_service_error().is_some_and(|s| s.is_conditional_check_failed_exception()) => {
                        out.plain_blocked += 1
                    }
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
        total.times.extend(o.times);
        total.ids.extend(o.ids);
        total.native_retries += o.native_retries;
        o.txns.iter().for_each(|(k, v)| *total.txns.entry(*k).or_default() += v);
        o.visits.iter().for_each(|(k, v)| *total.visits.entry(*k).or_default() += v);
    }
    total
}

/// Checks every invariant; returns a one-line summary and the number of attempts the transfers took (with the
/// native driver, the calls sent).
pub async fn check(env: &Env, p: &Params, o: &Outcome) -> (String, u64) {
    let items = env.scan(&env.a).await;
    let num = |v: &Value, k: &str| v[k]["N"].as_str().unwrap().parse::<i64>().unwrap();
    let mut total = 0;
    for i in 0..p.accounts {
        let v = items.values().find(|v| v["pk"]["S"] == acct(i)).expect("account exists");
        total += num(v, "bal");
        assert!(num(v, "bal") >= 0, "{}: negative balance {v}", acct(i));
        assert_eq!(
            num(v, "txns"),
            o.txns.get(&i).copied().unwrap_or(0),
            "{}: committed transfers applied exactly once",
            acct(i)
        );
        assert_eq!(num(v, "visits"), o.visits.get(&i).copied().unwrap_or(0), "{}: no plain write lost", acct(i));
    }
    assert_eq!(total, START_BALANCE * p.accounts as i64, "total balance conserved");
    assert_eq!(
        o.committed + o.condition_failed + o.gave_up,
        p.workers * p.transfers_per_worker,
        "every transfer ended"
    );
    // Every transaction ended, and none ran past its deadline by more than a rollback takes.
    let (mut transactions, mut attempts) = (0, 0);
    for rec in env.tx_records().await {
        let text = |k: &str| rec.get(k).and_then(|v| v.as_s().ok()).cloned().unwrap_or_default();
        if text("sk") != dynamo_saga::constants::SK_HEADER || !o.ids.contains(&text("id")) {
            continue;
        }
        let n = |k: &str| rec.get(k).and_then(|v| v.as_n().ok()).and_then(|v| v.parse::<u64>().ok());
        transactions += 1;
        attempts += 1 + n(dynamo_saga::constants::H_ATTEMPT).unwrap_or(0);
        let finished = n("finishedAt").unwrap_or_else(|| panic!("a transaction never ended: {rec:?}"));
        let deadline = n("deadline").expect("deadline");
        assert!(finished <= deadline + 30_000, "a transaction ran past its deadline: {rec:?}");
    }
    if p.driver != Driver::Native {
        assert_eq!(
            transactions,
            p.workers * p.transfers_per_worker,
            "one transaction per transfer, however many attempts"
        );
    }
    let summary = format!(
        "{} transfers over {} accounts, {}-{} accounts each, by {} workers ({}): {} committed, {} refused by their own condition, {} given up (a wait past LockWaitSeconds or the deadline); {} plain writes ({} held off by a lock); slowest transfer {:.1} s; {:.1} s in all; total balance conserved, no lost update",
        p.workers * p.transfers_per_worker,
        p.accounts,
        p.min_k,
        p.max_k,
        p.workers,
        p.driver.name(),
        o.committed,
        o.condition_failed,
        o.gave_up,
        o.plain_ok,
        o.plain_blocked,
        o.slowest.as_secs_f64(),
        o.elapsed.as_secs_f64()
    );
    env.assert_clean().await;
    if p.driver == Driver::Native {
        attempts = (p.workers * p.transfers_per_worker + o.native_retries) as u64;
    }
    (format!("{summary}; {attempts} attempts in all, each transfer ended within its deadline"), attempts)
}
