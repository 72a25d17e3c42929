//! A crash between consecutive DynamoDB writes, at every write of a transaction (sampled for the big one, every one
//! with `SAGA_CRASH_FULL=1`): a second coordinator resumes and finishes, the first coordinator waking late writes
//! nothing, the result is all-or-nothing, no lock attribute is left, and the `ADD` counter moved exactly once. The
//! same for a transaction whose attempt an older one rolled back: at every write of that attempt's rollback, of the
//! start of the next attempt and of that attempt to its end.

use dynamo_saga::phase::{apply, begin, commit, complete, lock, release, retry, rollback, save};
use dynamo_saga::records::{self, read_header, Decision};
use dynamo_saga::store::Meter;
use dynamo_saga::sweeper::Sweeper;
use dynamo_saga::{Coordinator, TxError, TxState};
use harness::workload::{
    assert_mixed_committed, assert_tombstones_committed, mixed, refused_at_lock, seed_mixed, seed_tombstones,
    tombstones,
};
use harness::{nv, sv, Env};
use serde_json::{json, Value};

/// What a scenario's transaction does.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Work {
    /// Every kind of action ([`mixed`]).
    Mixed,
    /// Every kind of action over tombstones, and a tombstone delete ([`tombstones`]).
    Tombstones,
}

/// The transaction of a scenario: `n` actions. On the rollback path the last one fails after the others were locked:
/// from 100 actions on, an update that sets an attribute the index of its table keys as a number to a string (lock
/// refuses it on the item its lock write returns, last of all, so the rollback has every other lock and placeholder
/// to remove); below, an `ADD` to a string, which DynamoDB refuses as a whole call and lock then refuses the same way.
async fn scenario(env: &Env, tag: &str, n: usize, commit_path: bool, work: Work) -> Value {
    let good = if commit_path { n } else { n - 1 };
    let mut body = match work {
        Work::Mixed => {
            seed_mixed(env, tag, good).await;
            mixed(env, tag, good)
        }
        Work::Tombstones => {
            seed_tombstones(env, tag, good).await;
            tombstones(env, tag, good)
        }
    };
    if !commit_path && n >= 100 {
        body["TransactItems"].as_array_mut().unwrap().push(refused_at_lock(env, tag).await);
    } else if !commit_path {
        env.put(&env.b, json!({"pk": sv(&format!("{tag}-zz")), "sk": nv(0), "s": sv("text")})).await;
        body["TransactItems"].as_array_mut().unwrap().push(json!({"Update": {"TableName": env.b,
            "Key": {"pk": sv(&format!("{tag}-zz")), "sk": nv(0)}, "UpdateExpression": "ADD s :one", "ExpressionAttributeValues": {":one": nv(1)}}}));
    }
    body["ClientRequestToken"] = json!(tag);
    body
}

/// Runs every phase of the ended transaction again, as a coordinator that slept through its end would, and checks
/// none of them sends a single write.
async fn late_coordinator_writes_nothing(env: &Env, tx: &str) {
    let h = read_header(&env.store, &Meter::default(), tx).await.unwrap();
    assert!(h.finished());
    let s = &env.store;
    let mut reports = Vec::new();
    for b in 0..h.batches {
        reports.push(lock::lock(s, tx, b).await.unwrap());
        reports.push(save::save(s, tx, b).await.unwrap());
        reports.push(apply::apply(s, tx, b).await.unwrap());
        reports.push(complete::complete(s, tx, b).await.unwrap());
        reports.push(rollback::rollback(s, tx, b, None).await.unwrap());
    }
    reports.push(commit::commit(s, tx).await.unwrap());
    reports.push(retry::retry(s, tx).await.unwrap());
    reports.push(release::release(s, tx).await.unwrap());
    for r in reports {
        assert_eq!(r.usage.writes, 0, "a late phase run wrote: {r:?}");
    }
}

/// Who finishes a transaction after its coordinator died.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Recovery {
    /// A second coordinator sent the same request (same ClientRequestToken) resumes it.
    Coordinator,
    /// The sweeper finds it through the open-transactions index: a pending one is rolled back, a decided one finished.
    Sweeper,
}

async fn crash_matrix(name: &str, n: usize, commit_path: bool) {
    crash_matrix_by(name, n, commit_path, Recovery::Coordinator, 1, Work::Mixed).await;
}

/// Every crash point (or every `stride`-th, plus the first 24 and the last 6, unless `SAGA_CRASH_FULL=1`). A request
/// small enough for one `TransactWriteItems` call is carried out in it: its matrix is that call's, and the protocol's
/// matrix for the same request is run too, with that path turned off.
async fn crash_matrix_by(name: &str, n: usize, commit_path: bool, recovery: Recovery, stride: u64, work: Work) {
    // In MRSC mode there is no one-call path: the protocol's matrix is the request's only one.
    if n < 100 && work == Work::Mixed && harness::one_call() {
        let env = Env::new(name).await;
        crash_matrix_on(&env, &format!("{name} (one call)"), n, commit_path, recovery, stride, work).await;
        let env = Env::with(&format!("{name}-p"), |c| dynamo_saga::Config { direct: false, ..c }).await;
        crash_matrix_on(&env, &format!("{name} (protocol)"), n, commit_path, recovery, stride, work).await;
    } else {
        // Every test table is "t-...": the rollback path's indexed table too.
        let env = Env::with(name, |c| c.with_allowed_tables(["t-*"])).await;
        crash_matrix_on(&env, name, n, commit_path, recovery, stride, work).await;
    }
}

#[allow(clippy::too_many_arguments)]
async fn crash_matrix_on(
    env: &Env,
    name: &str,
    n: usize,
    commit_path: bool,
    recovery: Recovery,
    stride: u64,
    work: Work,
) {
    // A clean run counts the writes a whole transaction makes.
    let body = scenario(env, "count", n, commit_path, work).await;
    let counter = harness::write_counter(&env.store);
    let clean = Coordinator::new(counter.clone()).run(&body).await;
    assert_eq!(clean.is_ok(), commit_path);
    if let (Err(TxError::Canceled(c)), true) = (&clean, n >= 100) {
        // The failure is met in the one lock run that takes every batch: every other item was locked (a lock write
        // and a release each), no batch was recorded locked, and nothing was saved or applied.
        let h = read_header(&env.store, &Meter::default(), &c.transaction_id).await.unwrap();
        assert_eq!(
            (h.lock_started, h.locked, h.saved, h.applied),
            (h.batches, 0, 0, 0),
            "{name}: the rollback path must lock every batch before it fails: {h:?}"
        );
        let writes = counter.writes_sent().unwrap();
        assert!(writes >= 2 * (n as u64 - 1), "{name}: {writes} writes cannot lock and release {} items", n - 1);
        let failed: Vec<(usize, &str)> = c.failed().map(|(i, r)| (i, r.code.as_str())).collect();
        assert_eq!(failed, vec![(n - 1, "ValidationError")], "{name}: {c:?}");
    }
    let total = counter.writes_sent().unwrap();
    let points = crash_points(total, stride);
    let mut violations = Vec::new();
    for &k in &points {
        let tag = format!("k{k}");
        let body = scenario(env, &tag, n, commit_path, work).await;
        // The tables as they were, for a rollback to be compared with: a second coordinator of the commit path must
        // commit (asserted below), so its run needs no copy of them (a scan of every earlier crash point's items).
        let rollback_allowed = !commit_path || recovery == Recovery::Sweeper;
        let before = if rollback_allowed { Some(env.snapshot().await) } else { None };
        let first = Coordinator::new(env.store.crash_after(k)).run(&body).await;
        assert!(
            matches!(first, Err(TxError::InjectedFault(_))),
            "crash point {k} of {total}: the first coordinator should have died, got {first:?}"
        );
        let tx = match recovery {
            Recovery::Coordinator => {
                // A second coordinator: the same request with the same ClientRequestToken resumes the same transaction.
                let second = Coordinator::new(env.store.clone()).run(&body).await;
                let tx = match &second {
                    Ok(c) => c.transaction_id.clone(),
                    Err(TxError::Canceled(c)) => c.transaction_id.clone(),
                    Err(e) => panic!("crash point {k}: the second coordinator failed: {e}"),
                };
                if second.is_ok() != commit_path {
                    violations.push(format!("crash point {k}: outcome {second:?}"));
                    continue;
                }
                tx
            }
            Recovery::Sweeper => {
                let report = sweep_now(env, k).await;
                match report.finished.first() {
                    Some(f) => f.transaction_id.clone(),
                    None => {
                        // The coordinator died before the header existed: nothing to recover, nothing changed.
                        assert_eq!(
                            Some(env.snapshot().await),
                            before,
                            "crash point {k}: a transaction without a header wrote"
                        );
                        continue;
                    }
                }
            }
        };
        let state = read_header(&env.store, &Meter::default(), &tx).await.unwrap().state;
        match state {
            TxState::Committed if work == Work::Mixed => assert_mixed_committed(env, &tag, n).await,
            TxState::Committed => assert_tombstones_committed(env, &tag, n, &tx).await,
            TxState::RolledBack => match &before {
                Some(before) => assert_eq!(&env.snapshot().await, before, "crash point {k}: rollback left changes"),
                None => panic!("crash point {k}: the commit path rolled back"),
            },
            TxState::Pending => violations.push(format!("crash point {k}: still pending after recovery")),
        }
        if recovery == Recovery::Coordinator || !commit_path {
            // A second coordinator finishes what the first began; the rollback path never commits, whoever recovers.
            assert_eq!(state, if commit_path { TxState::Committed } else { TxState::RolledBack }, "crash point {k}");
        }
        late_coordinator_writes_nothing(env, &tx).await;
    }
    let path = if commit_path { "commit path" } else { "rollback path" };
    finish_matrix(env, name, n, path, points.len(), total, recovery, violations).await;
}

/// The crash points of a transaction of `total` writes: every one with `SAGA_CRASH_FULL=1`, otherwise every
/// `stride`-th of the first 24, every `17 * stride`-th, and the last 6.
fn crash_points(total: u64, stride: u64) -> Vec<u64> {
    let full = std::env::var("SAGA_CRASH_FULL").is_ok_and(|v| v == "1");
    (0..total).filter(|k| full || (*k <= 24 && k % stride == 0) || k % (17 * stride) == 0 || *k + 6 >= total).collect()
}

/// One sweep that finds every open transaction stale; none of them may fail to recover.
async fn sweep_now(env: &Env, k: u64) -> dynamo_saga::sweeper::SweepReport {
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    let mut sweeper = Sweeper::new(env.store.clone());
    sweeper.stale_after = std::time::Duration::from_millis(1);
    let report = sweeper.sweep().await.unwrap();
    assert!(report.failed.is_empty(), "crash point {k}: {report:?}");
    report
}

/// After a matrix: no lock left, its figure reported, and no violation.
#[allow(clippy::too_many_arguments)]
async fn finish_matrix(
    env: &Env,
    name: &str,
    n: usize,
    what: &str,
    points: usize,
    total: u64,
    recovery: Recovery,
    violations: Vec<String>,
) {
    env.assert_clean().await;
    harness::report(format!(
        "crash {name}: {n} actions, {what}, {points} crash points of {total} writes, recovered by the {}, {} violations",
        format!("{recovery:?}").to_lowercase(),
        violations.len()
    ));
    assert!(violations.is_empty(), "{violations:#?}");
}

#[tokio::test]
async fn crash_anywhere_commit_1() {
    crash_matrix("crash-c1", 1, true).await;
}

#[tokio::test]
async fn crash_anywhere_commit_2() {
    crash_matrix("crash-c2", 2, true).await;
}

#[tokio::test]
async fn crash_anywhere_commit_250() {
    crash_matrix("crash-c250", 250, true).await;
}

#[tokio::test]
async fn crash_anywhere_rollback_1() {
    crash_matrix("crash-r1", 1, false).await;
}

#[tokio::test]
async fn crash_anywhere_rollback_2() {
    crash_matrix("crash-r2", 2, false).await;
}

#[tokio::test]
async fn crash_anywhere_rollback_250() {
    crash_matrix("crash-r250", 250, false).await;
}

#[tokio::test]
async fn crash_anywhere_commit_101() {
    crash_matrix_by("crash-c101", 101, true, Recovery::Coordinator, 3, Work::Mixed).await;
}

#[tokio::test]
async fn crash_anywhere_rollback_101() {
    crash_matrix_by("crash-r101", 101, false, Recovery::Coordinator, 3, Work::Mixed).await;
}

#[tokio::test]
async fn crash_anywhere_commit_1_recovered_by_the_sweeper() {
    crash_matrix_by("crash-sc1", 1, true, Recovery::Sweeper, 1, Work::Mixed).await;
}

#[tokio::test]
async fn crash_anywhere_rollback_1_recovered_by_the_sweeper() {
    crash_matrix_by("crash-sr1", 1, false, Recovery::Sweeper, 1, Work::Mixed).await;
}

#[tokio::test]
async fn crash_anywhere_commit_2_recovered_by_the_sweeper() {
    crash_matrix_by("crash-sc2", 2, true, Recovery::Sweeper, 1, Work::Mixed).await;
}

#[tokio::test]
async fn crash_anywhere_rollback_2_recovered_by_the_sweeper() {
    crash_matrix_by("crash-sr2", 2, false, Recovery::Sweeper, 1, Work::Mixed).await;
}

#[tokio::test]
async fn crash_anywhere_commit_101_recovered_by_the_sweeper() {
    crash_matrix_by("crash-sc101", 101, true, Recovery::Sweeper, 3, Work::Mixed).await;
}

#[tokio::test]
async fn crash_anywhere_rollback_101_recovered_by_the_sweeper() {
    crash_matrix_by("crash-sr101", 101, false, Recovery::Sweeper, 3, Work::Mixed).await;
}

#[tokio::test]
async fn crash_anywhere_commit_250_recovered_by_the_sweeper() {
    crash_matrix_by("crash-sc250", 250, true, Recovery::Sweeper, 4, Work::Mixed).await;
}

#[tokio::test]
async fn crash_anywhere_rollback_250_recovered_by_the_sweeper() {
    crash_matrix_by("crash-sr250", 250, false, Recovery::Sweeper, 4, Work::Mixed).await;
}

#[tokio::test]
async fn crash_anywhere_over_tombstones_commit_5() {
    crash_matrix_by("crash-tc5", 5, true, Recovery::Coordinator, 1, Work::Tombstones).await;
}

#[tokio::test]
async fn crash_anywhere_over_tombstones_rollback_6() {
    crash_matrix_by("crash-tr6", 6, false, Recovery::Coordinator, 1, Work::Tombstones).await;
}

#[tokio::test]
async fn crash_anywhere_over_tombstones_commit_5_recovered_by_the_sweeper() {
    crash_matrix_by("crash-stc5", 5, true, Recovery::Sweeper, 1, Work::Tombstones).await;
}

#[tokio::test]
async fn crash_anywhere_over_tombstones_rollback_6_recovered_by_the_sweeper() {
    crash_matrix_by("crash-str6", 6, false, Recovery::Sweeper, 1, Work::Tombstones).await;
}

/// Transaction `tag` (the [`mixed`] request of `n` actions, its items seeded), fully locked, then rolled back by an
/// older transaction that needed its first item (wound-wait), which then committed: its own driver has the rollback
/// to finish, the next attempt to start, and that attempt to run. Returns its id.
async fn wounded(env: &Env, tag: &str, n: usize) -> String {
    let older = begin::begin(
        &env.store,
        &json!({"TransactItems": [{"ConditionCheck": {"TableName": env.a,
        "Key": {"pk": sv(&format!("{tag}-older"))}, "ConditionExpression": "attribute_not_exists(pk)"}}]}),
    )
    .await
    .unwrap()
    .transaction_id;
    tokio::time::sleep(std::time::Duration::from_millis(3)).await;
    let mut body = mixed(env, tag, n);
    body["ClientRequestToken"] = json!(tag);
    let tx = begin::begin(&env.store, &body).await.unwrap().transaction_id;
    assert!(older < tx);
    let coord = Coordinator::new(env.store.clone());
    let h = coord.drive_locks(&tx).await.unwrap();
    let d = Decision::wound(&older, Some(0), &format!("{tag}-new-0"));
    assert_eq!(
        records::decide_rollback(&env.store, &Meter::default(), &tx, Some(h.attempt), &d).await.unwrap(),
        TxState::RolledBack
    );
    coord.drive(&older).await.expect("the older transaction commits");
    tx
}

/// Every crash point of a wounded transaction's driver (see [`wounded`]), or every `stride`-th plus the first 24 and
/// the last 6: a second driver commits it (every `ADD` once), or the sweeper ends it rolled back (nothing changed, and
/// the reason names the action); a late coordinator then writes nothing.
async fn crash_matrix_retry(name: &str, n: usize, recovery: Recovery, stride: u64) {
    let env = Env::new(name).await;
    seed_mixed(&env, "count", n).await;
    let tx = wounded(&env, "count", n).await;
    let counter = harness::write_counter(&env.store);
    Coordinator::new(counter.clone()).drive(&tx).await.expect("a clean run of the next attempt commits");
    let total = counter.writes_sent().unwrap();
    let points = crash_points(total, stride);
    let mut violations = Vec::new();
    for &k in &points {
        let tag = format!("k{k}");
        seed_mixed(&env, &tag, n).await;
        // The tables as they were, for the sweeper's rollback to be compared with (a second driver commits).
        let before = if recovery == Recovery::Sweeper { Some(env.snapshot().await) } else { None };
        let tx = wounded(&env, &tag, n).await;
        let first = Coordinator::new(env.store.crash_after(k)).drive(&tx).await;
        assert!(
            matches!(first, Err(TxError::InjectedFault(_))),
            "crash point {k} of {total}: the driver should have died, got {first:?}"
        );
        match recovery {
            Recovery::Coordinator => match Coordinator::new(env.store.clone()).drive(&tx).await {
                Ok(_) => assert_mixed_committed(&env, &tag, n).await,
                other => violations.push(format!("crash point {k}: a second driver got {other:?}")),
            },
            Recovery::Sweeper => {
                sweep_now(&env, k).await;
                let h = read_header(&env.store, &Meter::default(), &tx).await.unwrap();
                match h.state {
                    TxState::Committed => assert_mixed_committed(&env, &tag, n).await,
                    TxState::RolledBack => {
                        assert_eq!(Some(env.snapshot().await), before, "crash point {k}: rollback left changes")
                    }
                    TxState::Pending => violations.push(format!("crash point {k}: still pending after the sweep")),
                }
                if !h.finished() {
                    violations.push(format!("crash point {k}: not finished after the sweep: {h:?}"));
                }
            }
        }
        late_coordinator_writes_nothing(&env, &tx).await;
    }
    finish_matrix(
        &env,
        name,
        n,
        "an attempt rolled back by an older transaction and retried",
        points.len(),
        total,
        recovery,
        violations,
    )
    .await;
}

#[tokio::test]
async fn crash_anywhere_in_a_retried_attempt_2() {
    crash_matrix_retry("crash-rt2", 2, Recovery::Coordinator, 1).await;
}

#[tokio::test]
async fn crash_anywhere_in_a_retried_attempt_101() {
    crash_matrix_retry("crash-rt101", 101, Recovery::Coordinator, 3).await;
}

#[tokio::test]
async fn crash_anywhere_in_a_retried_attempt_2_recovered_by_the_sweeper() {
    crash_matrix_retry("crash-srt2", 2, Recovery::Sweeper, 1).await;
}
