//! Contention between transactions on DynamoDB Local: who waits, who is rolled back, and that every transaction ends.

use std::time::{Duration, Instant};

use dynamo_saga::lambda::{handle, Budget, Phase};
use dynamo_saga::phase::{apply, begin, commit, lock, save, Outcome};
use dynamo_saga::records::{self, TxState};
use dynamo_saga::status::{self, Status};
use dynamo_saga::store::Meter;
use dynamo_saga::{Config, Coordinator};
use harness::workload::{append_to_parent, parent_order};
use harness::{canceled, nv, sv, Env};
use serde_json::{json, Value};

/// `ADD n :delta` on items `pk` of table `a`, plus a guarded insert of `new` when given.
fn adds(env: &Env, pks: &[String], delta: i64, insert: Option<&str>) -> Value {
    let mut items: Vec<Value> = pks
        .iter()
        .map(|pk| {
            json!({"Update": {"TableName": env.a, "Key": {"pk": sv(pk)}, "UpdateExpression": "ADD n :d",
                "ExpressionAttributeValues": {":d": nv(delta)}}})
        })
        .collect();
    if let Some(pk) = insert {
        items.push(json!({"Put": {"TableName": env.a, "Item": {"pk": sv(pk), "by": nv(delta)}, "ConditionExpression": "attribute_not_exists(pk)"}}));
    }
    json!({ "TransactItems": items })
}

async fn seed(env: &Env, pks: &[String]) {
    for pk in pks {
        env.put(&env.a, json!({"pk": sv(pk), "n": nv(0)})).await;
    }
}

async fn n_of(env: &Env, pk: &str) -> i64 {
    let it = env.get(&env.a, json!({"pk": sv(pk)})).await.expect("item exists");
    it["n"]["N"].as_str().unwrap().parse().unwrap()
}

fn keys(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}{i:03}")).collect()
}

/// Begins transactions one after another, a few milliseconds apart, so their ULIDs sort in begin order.
async fn begin_in_order(env: &Env, bodies: &[Value]) -> Vec<String> {
    let mut ids = Vec::new();
    for b in bodies {
        ids.push(begin::begin(&env.store, b).await.expect("begins").transaction_id);
        tokio::time::sleep(Duration::from_millis(3)).await;
    }
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "ids sort by age: {ids:?}");
    ids
}

async fn state_of(env: &Env, id: &str) -> TxState {
    records::read_header(&env.store, &Meter::default(), id).await.unwrap().state
}

async fn status_of(env: &Env, id: &str) -> Status {
    status::status(&env.store, id).await.unwrap()
}

/// The phases a worker of `id`'s rolled-back attempt could still be running, each run late: none writes.
async fn late_workers_write_nothing(env: &Env, id: &str) {
    let s = &env.store;
    let reports = [
        lock::lock(s, id, 0).await.unwrap(),
        save::save(s, id, 0).await.unwrap(),
        apply::apply(s, id, 0).await.unwrap(),
        commit::commit(s, id).await.unwrap(),
    ];
    for r in reports {
        assert_eq!(r.usage.writes, 0, "a late worker of a rolled-back attempt wrote: {r:?}");
    }
}

#[tokio::test]
async fn meeting_a_lock_reports_the_holder_and_proceeds_once_it_ends() {
    let env = Env::new("contended").await;
    let pks = keys("x", 3);
    seed(&env, &pks).await;
    let ids = begin_in_order(&env, &[adds(&env, &pks, 1, None), adds(&env, &pks[1..], 10, None)]).await;
    let (older, younger) = (&ids[0], &ids[1]);

    assert_eq!(lock::lock(&env.store, older, 0).await.unwrap().outcome, Outcome::Done);
    let met = lock::lock(&env.store, younger, 0).await.unwrap().outcome;
    let Outcome::Contended(c) = met else { panic!("expected Contended, got {met:?}") };
    assert_eq!(c.holder, *older, "names the holder");
    assert_eq!(c.action, Some(0), "names the younger transaction's contended action");
    assert!(c.item.contains("x001"), "names the item: {}", c.item);

    // The younger one waits for the older, pending holder, and commits once the holder has committed.
    let coord = Coordinator::new(env.store.clone());
    let waiter = tokio::spawn({
        let coord = coord.clone();
        let id = younger.clone();
        async move { coord.drive(&id).await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiter.is_finished(), "the younger transaction waits while the older one holds its items");
    assert_eq!(state_of(&env, younger).await, TxState::Pending);
    coord.drive(older).await.expect("the holder commits");
    waiter.await.unwrap().expect("the waiter commits after the holder ended");

    assert_eq!(n_of(&env, "x000").await, 1);
    assert_eq!(n_of(&env, "x001").await, 11);
    assert_eq!(n_of(&env, "x002").await, 11);
    env.assert_clean().await;
}

#[tokio::test]
async fn a_stale_pending_holder_is_rolled_back_after_a_lease_and_its_items_restored() {
    let lease = Duration::from_secs(1);
    let env = Env::with("stale", |c| Config { lease, ..c }).await;
    let pks = keys("s", 150);
    seed(&env, &pks).await;
    let before = env.snapshot().await;
    let ids = begin_in_order(&env, &[adds(&env, &pks, 1, Some("s-new")), adds(&env, &pks[..5], 100, None)]).await;
    let (crashed, waiter) = (&ids[0], &ids[1]);

    // The older transaction locks both of its batches, then its coordinator dies.
    for b in 0..2 {
        assert_eq!(lock::lock(&env.store, crashed, b).await.unwrap().outcome, Outcome::Done);
    }
    assert!(env.get(&env.a, json!({"pk": sv("s-new")})).await.is_some(), "the insert's placeholder is locked in");

    let t = Instant::now();
    Coordinator::new(env.store.clone()).drive(waiter).await.expect("the waiter commits");
    assert!(t.elapsed() >= lease, "the holder was rolled back only after a whole lease: {:?}", t.elapsed());

    assert_eq!(state_of(&env, crashed).await, TxState::RolledBack);
    assert!(env.get(&env.a, json!({"pk": sv("s-new")})).await.is_none(), "the stale holder's insert is undone");
    for (i, pk) in pks.iter().enumerate() {
        assert_eq!(n_of(&env, pk).await, if i < 5 { 100 } else { 0 }, "{pk}");
    }
    env.assert_clean().await;

    // Workers of the stale attempt that wake late write nothing. Its driver, waking late, finds the attempt rolled
    // back by a waiter, which was not its request's doing: it starts a second attempt, which commits.
    let after = env.snapshot().await;
    late_workers_write_nothing(&env, crashed).await;
    assert_eq!(env.snapshot().await, after);
    assert_ne!(before, after);
    Coordinator::new(env.store.clone()).drive(crashed).await.expect("the second attempt commits");
    let st = status_of(&env, crashed).await;
    assert_eq!((st.attempt, st.attempts.len()), (2, 1), "{st:?}");
    assert_eq!(st.attempts[0].rolled_back_by.as_deref(), Some(waiter.as_str()), "{st:?}");
    assert!(st.attempts[0].reason.contains("no progress"), "{st:?}");
    for (i, pk) in pks.iter().enumerate() {
        assert_eq!(n_of(&env, pk).await, if i < 5 { 101 } else { 1 }, "{pk}");
    }
    assert!(env.get(&env.a, json!({"pk": sv("s-new")})).await.is_some());
    env.assert_clean().await;
}

/// Wound-wait: the older transaction rolls back the younger one that holds its item and commits; the younger one is
/// not cancelled for it (that was not its request's doing) but tries again, once the older one has ended, as the
/// same transaction, and commits; its status shows both attempts and who rolled back the first.
#[tokio::test]
async fn the_older_transaction_wins_and_the_younger_one_tries_again_after_it() {
    let env = Env::new("older").await;
    let pks = keys("o", 4);
    seed(&env, &pks).await;
    let ids = begin_in_order(&env, &[adds(&env, &pks[..2], 1, None), adds(&env, &pks[1..], 10, Some("o-new"))]).await;
    let (older, younger) = (&ids[0], &ids[1]);

    // The younger one got there first and holds every lock.
    assert_eq!(lock::lock(&env.store, younger, 0).await.unwrap().outcome, Outcome::Done);
    Coordinator::new(env.store.clone()).drive(older).await.expect("the older transaction commits");

    assert_eq!(state_of(&env, younger).await, TxState::RolledBack);
    assert_eq!(
        [n_of(&env, "o000").await, n_of(&env, "o001").await, n_of(&env, "o002").await, n_of(&env, "o003").await],
        [1, 1, 0, 0]
    );
    assert!(env.get(&env.a, json!({"pk": sv("o-new")})).await.is_none(), "the wounded attempt's insert is undone");
    let st = status_of(&env, younger).await;
    assert_eq!(st.next, dynamo_saga::phase::resume::Step::Retry, "{st:?}");
    late_workers_write_nothing(&env, younger).await;

    let done = Coordinator::new(env.store.clone())
        .drive(younger)
        .await
        .expect("the younger transaction commits on its second attempt");
    assert_eq!(done.transaction_id, *younger, "the same transaction, with the same age");
    assert_eq!(
        [n_of(&env, "o000").await, n_of(&env, "o001").await, n_of(&env, "o002").await, n_of(&env, "o003").await],
        [1, 11, 10, 10]
    );
    assert!(env.get(&env.a, json!({"pk": sv("o-new")})).await.is_some());
    let st = status_of(&env, younger).await;
    assert_eq!((st.state, st.attempt, st.attempts.len()), (TxState::Committed, 2, 1), "{st:?}");
    let first = &st.attempts[0];
    assert_eq!(first.rolled_back_by.as_deref(), Some(older.as_str()), "{st:?}");
    assert!(
        first.item.as_deref().is_some_and(|i| i.contains("o001")) && first.reason.contains(older.as_str()),
        "{st:?}"
    );
    env.assert_clean().await;
}

#[tokio::test]
async fn lock_wait_seconds_cancels_with_transaction_conflict() {
    let env = Env::new("lockwait").await;
    let pks = keys("w", 2);
    seed(&env, &pks).await;
    let mut waiting = adds(&env, &pks, 10, None);
    waiting["Options"] = json!({"LockWaitSeconds": 1});
    let ids = begin_in_order(&env, &[adds(&env, &pks, 1, None), waiting]).await;
    assert_eq!(lock::lock(&env.store, &ids[0], 0).await.unwrap().outcome, Outcome::Done);

    let t = Instant::now();
    let c = canceled(Coordinator::new(env.store.clone()).drive(&ids[1]).await);
    assert!(t.elapsed() >= Duration::from_secs(1) && t.elapsed() < Duration::from_secs(20), "{:?}", t.elapsed());
    assert_eq!(c.cancellation_reasons[0].code, "TransactionConflict", "{c:?}");
    assert!(c.cancellation_reasons[0].message.as_deref().unwrap_or("").contains(ids[0].as_str()), "{c:?}");
    assert!(c.cancellation_reasons[0].message.as_deref().unwrap_or("").contains("LockWaitSeconds"), "{c:?}");
    assert_eq!(c.cancellation_reasons[1].code, "TransactionConflict", "every contended action is named: {c:?}");

    Coordinator::new(env.store.clone()).drive(&ids[0]).await.expect("the holder still commits");
    assert_eq!([n_of(&env, "w000").await, n_of(&env, "w001").await], [1, 1]);
    env.assert_clean().await;
}

/// Six transactions over overlapping sets of 150 items, run at once, a few times over: every one commits (those rolled
/// back by an older one try again), and the counters add up to exactly their deltas.
#[tokio::test]
async fn concurrent_overlapping_transactions_all_end_and_the_oldest_commits() {
    let env = Env::new("overlap").await;
    let pks = keys("c", 300);
    seed(&env, &pks).await;
    let mut expected = vec![0i64; pks.len()];
    for round in 0..3 {
        let sets: Vec<(usize, i64)> = (0..6).map(|t| ((t * 29 + round * 7) % 150, 1i64 << (t + 6 * round))).collect();
        let bodies: Vec<Value> =
            sets.iter().map(|(start, d)| adds(&env, &pks[*start..start + 150], *d, None)).collect();
        let ids = begin_in_order(&env, &bodies).await;
        let coord = Coordinator::new(env.store.clone());
        let runs = ids.iter().map(|id| {
            let coord = coord.clone();
            let id = id.clone();
            async move { tokio::time::timeout(Duration::from_secs(120), coord.drive(&id)).await.expect("no livelock") }
        });
        let results = futures::future::join_all(runs).await;
        for (r, (start, d)) in results.into_iter().zip(&sets) {
            r.expect("every transaction commits");
            (*start..start + 150).for_each(|i| expected[i] += d);
        }
    }
    for (pk, want) in pks.iter().zip(&expected) {
        assert_eq!(n_of(&env, pk).await, *want, "{pk}");
    }
    env.assert_clean().await;
}

/// Wound-wait keeps a long transaction going: 20 workers keep sending small transactions, all newer than it, over
/// its items while it runs. It commits, and so does every small one (those it rolls back try again, keeping their
/// age, until they get through); each counter is the long one's delta plus the small ones'.
#[tokio::test]
async fn a_long_transaction_commits_while_twenty_newer_ones_hammer_its_items() {
    let env = Env::new("hammer").await;
    let pks = keys("h", 500);
    seed(&env, &pks).await;
    let long = begin::begin(&env.store, &adds(&env, &pks, 1000, None)).await.unwrap().transaction_id;
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let small = (0..20).map(|w| {
        let (env, pks, long, done) = (&env, &pks, &long, done.clone());
        async move {
            let coord = Coordinator::new(env.store.clone());
            let mut committed = vec![];
            let mut ended = 0;
            let mut k = 0;
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                // Five items spread over the long transaction's batches, different each time.
                let picked: Vec<String> = (0..5).map(|j| pks[(w * 7 + k * 13 + j * 101) % pks.len()].clone()).collect();
                k += 1;
                let r = tokio::time::timeout(Duration::from_secs(120), coord.run(&adds(env, &picked, 1, None)))
                    .await
                    .expect("no livelock");
                let c = r.expect("every small transaction commits");
                assert!(c.transaction_id > *long, "the small transactions are the newer ones");
                committed.extend(picked);
                ended += 1;
            }
            (committed, ended)
        }
    });
    let long_run = async {
        // Let the small ones start first, so the long one meets their locks from its first batch on.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let r = tokio::time::timeout(Duration::from_secs(300), Coordinator::new(env.store.clone()).drive(&long))
            .await
            .expect("the long one ends");
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        r
    };
    let (r, smalls) = tokio::join!(long_run, futures::future::join_all(small));
    let committed = r.expect("the long transaction commits");
    assert_eq!(committed.actions, 500);
    let ended: usize = smalls.iter().map(|(_, e)| e).sum();
    assert!(ended >= 20, "every small worker ran at least once: {ended}");
    let small_committed: usize = smalls.iter().map(|(c, _)| c.len() / 5).sum();
    assert_eq!(small_committed, ended);
    harness::report(format!(
        "wound-wait: a 500-action transaction committed in {:.1} s while 20 workers ran {ended} newer 5-action transactions over its items ({small_committed} committed)",
        committed.elapsed_ms as f64 / 1000.0
    ));
    let mut want: std::collections::HashMap<&str, i64> = pks.iter().map(|p| (p.as_str(), 1000)).collect();
    for (c, _) in &smalls {
        c.iter().for_each(|p| *want.get_mut(p.as_str()).unwrap() += 1);
    }
    for pk in &pks {
        assert_eq!(n_of(&env, pk).await, want[pk.as_str()], "{pk}");
    }
    env.assert_clean().await;
}

/// Two transactions naming the same two items in opposite order, run at once, ten times: both commit every time
/// (the global lock order means neither can hold one item while waiting for the other, and the younger one, when
/// rolled back, tries again), and the counters count both.
#[tokio::test]
async fn two_transactions_naming_each_others_items_in_opposite_order_both_end() {
    let env = Env::new("opposite").await;
    let pks = keys("p", 2);
    seed(&env, &pks).await;
    let reversed: Vec<String> = pks.iter().rev().cloned().collect();
    let mut want = 0;
    for _ in 0..10 {
        let ids = begin_in_order(&env, &[adds(&env, &pks, 1, None), adds(&env, &reversed, 100, None)]).await;
        let coord = Coordinator::new(env.store.clone());
        let run = |id: String| {
            let coord = coord.clone();
            async move { tokio::time::timeout(Duration::from_secs(60), coord.drive(&id)).await.expect("no deadlock") }
        };
        let (a, b) = tokio::join!(run(ids[0].clone()), run(ids[1].clone()));
        a.expect("the older one commits");
        b.expect("the younger one commits");
        want += 101;
    }
    assert_eq!([n_of(&env, "p000").await, n_of(&env, "p001").await], [want, want]);
    env.assert_clean().await;
}

/// The lock client's rule on a parent lock: a holder that stopped after locking keeps the parent while the record
/// version number on the parent item moves (a heartbeat), and a waiter takes over only after seeing one number for
/// the whole lease written on the item. The
/// holder's late coordinator then writes nothing, and its transaction ends rolled back with every lock released.
#[tokio::test]
async fn a_parent_lock_is_taken_over_only_after_a_lease_without_a_heartbeat() {
    let lease = Duration::from_secs(2);
    let env = Env::with("takeover", |c| Config { lease, ..c }).await;
    let pks = keys("t", 3);
    seed(&env, &pks).await;
    env.put(&env.a, json!({"pk": sv("PARENT"), "n": nv(0)})).await;
    let with_parent = |delta| {
        let mut b = adds(&env, &pks, delta, None);
        b["Parent"] = json!({"TableName": env.a, "Key": {"pk": sv("PARENT")}});
        b
    };
    let ids = begin_in_order(&env, &[with_parent(1), with_parent(10)]).await;
    let (holder, waiter) = (&ids[0], &ids[1]);
    // The holder takes the parent and every item, then its coordinator stops.
    assert_eq!(lock::lock(&env.store, holder, 0).await.unwrap().outcome, Outcome::Done);
    let parent_token = || async {
        env.get(&env.a, json!({"pk": sv("PARENT")})).await.unwrap()["lockToken"]["S"].as_str().map(str::to_owned)
    };
    assert_eq!(parent_token().await.as_deref(), Some(holder.as_str()));

    let parent = env.get(&env.a, json!({"pk": sv("PARENT")})).await.unwrap();
    assert_eq!(parent["leaseDuration"], nv(2), "the lease is on the parent item: {parent}");
    let rvn = || async { env.get(&env.a, json!({"pk": sv("PARENT")})).await.unwrap()["recordVersionNumber"].clone() };

    // For two leases the holder's heart beats (a new record version number on the parent): the waiter waits and
    // takes nothing over.
    let coord = Coordinator::new(env.store.clone());
    let holder_header = records::read_header(&env.store, &Meter::default(), holder).await.unwrap();
    let beats = async {
        let t = Instant::now();
        while t.elapsed() < lease * 2 {
            let before = rvn().await;
            assert!(dynamo_saga::parent::heartbeat(&env.store, &Meter::default(), &holder_header).await.unwrap());
            assert_ne!(rvn().await, before);
            tokio::time::sleep(lease / 4).await;
        }
    };
    let (waited, ()) = tokio::join!(tokio::time::timeout(lease * 2, coord.drive(waiter)), beats);
    assert!(waited.is_err(), "the waiter did not finish while the holder's heart beat: {waited:?}");
    assert_eq!(state_of(&env, holder).await, TxState::Pending);
    assert_eq!(parent_token().await.as_deref(), Some(holder.as_str()));

    // Without a heartbeat, the waiter takes over after a whole lease, no sooner.
    let t = Instant::now();
    coord.drive(waiter).await.expect("the waiter commits");
    assert!(t.elapsed() >= lease, "taken over after {:?}, before a whole lease", t.elapsed());
    assert_eq!(state_of(&env, holder).await, TxState::RolledBack);

    // The holder's workers wake up: they write nothing (its attempt is rolled back, its locks gone).
    let after = env.snapshot().await;
    late_workers_write_nothing(&env, holder).await;
    assert_eq!(env.snapshot().await, after);
    for pk in &pks {
        assert_eq!(n_of(&env, pk).await, 10, "{pk}: only the waiter's writes");
    }
    assert_eq!(parent_token().await, None, "the parent is released");
    // Its driver wakes up: losing the parent was not its request's doing, so it queues for the parent again in a
    // second attempt, which commits.
    Coordinator::new(env.store.clone()).drive(holder).await.expect("the holder's second attempt commits");
    for pk in &pks {
        assert_eq!(n_of(&env, pk).await, 11, "{pk}");
    }
    let st = status_of(&env, holder).await;
    assert_eq!((st.attempt, st.attempts[0].rolled_back_by.as_deref()), (2, Some(waiter.as_str())), "{st:?}");
    assert!(st.attempts[0].reason.contains("Parent"), "{st:?}");
    assert_eq!(parent_token().await, None, "the parent is released");
    env.assert_clean().await;
}

/// The FIFO parent queue: 20 transactions waiting for one parent are served in the order they took their tickets, which
/// here is the reverse of their age; a waiter that died in the queue is rolled back after a lease and the queue moves
/// on.
#[tokio::test]
async fn twenty_transactions_queued_on_one_parent_are_served_in_ticket_order() {
    let env = Env::with("fifo", |c| Config { lease: Duration::from_secs(2), ..c }).await;
    env.put(&env.a, json!({"pk": sv("QUEUED"), "order": {"L": []}})).await;
    let names: Vec<String> = (0..=21).map(|i| format!("w{i:02}")).collect();
    let bodies: Vec<Value> = names.iter().map(|n| append_to_parent(&env, n)).collect();
    let ids = begin_in_order(&env, &bodies).await;
    // w00 holds the parent.
    assert_eq!(lock::lock(&env.store, &ids[0], 0).await.unwrap().outcome, Outcome::Done);
    // The rest take tickets youngest first; w21, queued second, dies there (its coordinator never comes back).
    let mut ticket_order = vec![];
    for i in (1..=21).rev() {
        let r = lock::lock(&env.store, &ids[i], 0).await.unwrap();
        assert!(matches!(r.outcome, Outcome::Contended(ref c) if c.action.is_none()), "{i}: {r:?}");
        ticket_order.push(i);
    }
    let dead = ticket_order.remove(0);
    assert_eq!(dead, 21);
    let coord = Coordinator::new(env.store.clone());
    let waiters = ticket_order.iter().map(|&i| {
        let (coord, id) = (coord.clone(), ids[i].clone());
        async move { tokio::time::timeout(Duration::from_secs(120), coord.drive(&id)).await.expect("no livelock") }
    });
    let holder = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        coord.drive(&ids[0]).await
    };
    let (results, first) = tokio::join!(futures::future::join_all(waiters), holder);
    first.expect("the holder commits");
    for r in &results {
        r.as_ref().expect("every live waiter commits");
    }
    let mut want = vec![names[0].clone()];
    want.extend(ticket_order.iter().map(|&i| names[i].clone()));
    assert_eq!(parent_order(&env).await, want, "served in ticket order");
    assert_eq!(state_of(&env, &ids[dead]).await, TxState::RolledBack, "the dead waiter was rolled back");
    let queue = env.queue_rows().await;
    assert!(queue.is_empty(), "no queue row left: {queue:?}");
    env.assert_clean().await;
}

/// `LockWaitSeconds: 0` with the parent held: cancelled at once, naming the holder, and out of the queue.
#[tokio::test]
async fn lock_wait_zero_on_a_held_parent_fails_at_once() {
    let env = Env::new("fifozero").await;
    env.put(&env.a, json!({"pk": sv("QUEUED"), "order": {"L": []}})).await;
    let mut impatient = append_to_parent(&env, "b");
    impatient["Options"] = json!({"LockWaitSeconds": 0});
    let ids = begin_in_order(&env, &[append_to_parent(&env, "a"), impatient]).await;
    assert_eq!(lock::lock(&env.store, &ids[0], 0).await.unwrap().outcome, Outcome::Done);
    let t = Instant::now();
    let c = canceled(Coordinator::new(env.store.clone()).drive(&ids[1]).await);
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    assert!(c.message.contains("Parent") && c.message.contains(ids[0].as_str()), "{}", c.message);
    let p = c.parent_cancellation_reason.as_ref().expect("the parent's reason is a field of its own");
    assert_eq!(p.code, "TransactionConflict", "{c:?}");
    assert!(p.message.as_deref().unwrap_or("").contains(ids[0].as_str()), "it names the holder: {c:?}");
    assert!(c.failed().next().is_none(), "no action is to blame: {c:?}");
    Coordinator::new(env.store.clone()).drive(&ids[0]).await.expect("the holder commits");
    assert_eq!(parent_order(&env).await, vec!["a".to_owned()]);
    env.assert_clean().await;
}

/// The FIFO queue's rows: a waiter refreshes its row with every heartbeat, so the row outlives its three-lease TTL
/// while the waiter lives; a row that expired anyway (deleted here, as TTL would) stays gone, and its waiter still
/// goes once the parent is free.
#[tokio::test]
async fn a_waiter_keeps_its_queue_row_alive_while_it_waits() {
    let lease = Duration::from_secs(2);
    let env = Env::with("qrow", |c| Config { lease, ..c }).await;
    env.put(&env.a, json!({"pk": sv("QUEUED"), "order": {"L": []}})).await;
    let ids = begin_in_order(&env, &[append_to_parent(&env, "holder"), append_to_parent(&env, "waiter")]).await;
    let (holder, waiter) = (&ids[0], &ids[1]);
    assert_eq!(lock::lock(&env.store, holder, 0).await.unwrap().outcome, Outcome::Done);
    assert!(matches!(lock::lock(&env.store, waiter, 0).await.unwrap().outcome, Outcome::Contended(_)));
    let rows = || env.queue_rows();
    let first = rows().await;
    assert_eq!(first.len(), 1, "the waiter's row: {first:?}");
    let expires = |r: &dynamo_saga::value::Item| r["expiresAt"].as_n().unwrap().parse::<u64>().unwrap();
    let now_s = || std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    assert!(expires(&first[0]) <= now_s() + 3 * lease.as_secs(), "a row lives three leases unless refreshed");

    // The waiter waits two leases while the holder's heart beats, then the holder finishes and the waiter goes next.
    let h = records::read_header(&env.store, &Meter::default(), holder).await.unwrap();
    let coord = Coordinator::new(env.store.clone());
    let beats = async {
        let t = Instant::now();
        while t.elapsed() < lease * 2 {
            assert!(dynamo_saga::parent::heartbeat(&env.store, &Meter::default(), &h).await.unwrap());
            tokio::time::sleep(lease / 4).await;
        }
        rows().await
    };
    let (waited, during) = tokio::join!(tokio::time::timeout(lease * 2, coord.drive(waiter)), beats);
    assert!(waited.is_err(), "the waiter waited: {waited:?}");
    assert_eq!(during.len(), 1, "the waiter's row is still there: {during:?}");
    assert_eq!((&during[0]["sk"], &during[0]["txId"]), (&first[0]["sk"], &first[0]["txId"]), "at the same ticket");
    assert!(expires(&during[0]) > expires(&first[0]), "with a later expiry");

    // The row expires anyway: refreshing does not bring it back, and the waiter still goes after the holder.
    env.client
        .delete_item()
        .table_name(&env.tx_table)
        .set_key(Some(
            first[0].iter().filter(|(k, _)| *k == "id" || *k == "sk").map(|(k, v)| (k.clone(), v.clone())).collect(),
        ))
        .send()
        .await
        .unwrap();
    let h = records::read_header(&env.store, &Meter::default(), waiter).await.unwrap();
    assert!(dynamo_saga::parent::heartbeat(&env.store, &Meter::default(), &h).await.unwrap());
    assert!(rows().await.is_empty(), "a refresh does not write a row that is gone");
    coord.drive(holder).await.expect("the holder commits");
    coord.drive(waiter).await.expect("the waiter commits");
    assert_eq!(parent_order(&env).await, ["holder", "waiter"]);
    assert!(rows().await.is_empty(), "no queue row left");
    env.assert_clean().await;
}

/// Rolls attempt `id` back as an older transaction `by` does when it needs `id`'s first action's item (wound-wait),
/// and releases its locks, as `by` helping it would; its own driver then finds the next attempt to start.
async fn wound(env: &Env, id: &str, by: &str, item: &str) {
    let h = records::read_header(&env.store, &Meter::default(), id).await.unwrap();
    let d = records::Decision::wound(by, Some(0), item);
    assert_eq!(
        records::decide_rollback(&env.store, &Meter::default(), id, Some(h.attempt), &d).await.unwrap(),
        TxState::RolledBack
    );
    for b in 0..h.batches {
        dynamo_saga::phase::rollback::rollback(&env.store, id, b, None).await.unwrap();
    }
}

/// Seeds `pks`, then begins an older transaction adding 1 to the first and a younger one adding 10 to each: the
/// younger one's first attempt locks them all, the older one wounds it for the first item and commits. Returns the
/// older and the younger.
async fn wounded_after_locking(env: &Env, pks: &[String]) -> (String, String) {
    seed(env, pks).await;
    let ids = begin_in_order(env, &[adds(env, &pks[..1], 1, None), adds(env, pks, 10, None)]).await;
    let (older, younger) = (ids[0].clone(), ids[1].clone());
    assert_eq!(lock::lock(&env.store, &younger, 0).await.unwrap().outcome, Outcome::Done);
    wound(env, &younger, &older, &pks[0]).await;
    Coordinator::new(env.store.clone()).drive(&older).await.expect("the older one commits");
    (older, younger)
}

/// Locks item `pk` of table `a` as a worker of `id`'s first attempt waking late would: with that attempt's lock value,
/// the id itself (see records::owner).
async fn lock_as_first_attempt(env: &Env, pk: &str, id: &str) {
    env.client
        .update_item()
        .table_name(&env.a)
        .key("pk", aws_sdk_dynamodb::types::AttributeValue::S(pk.into()))
        .update_expression("SET #l = :t")
        .expression_attribute_names("#l", dynamo_saga::constants::ATTR_LOCK)
        .expression_attribute_values(":t", aws_sdk_dynamodb::types::AttributeValue::S(id.into()))
        .send()
        .await
        .unwrap();
}

/// A wounded transaction's next attempt waits, holding nothing, for the older one to end; when that takes longer
/// than its `LockWaitSeconds`, it gives up with `TransactionConflict` on the contended action, naming the older
/// transaction, and its status shows both attempts.
#[tokio::test]
async fn a_wounded_transaction_waits_for_the_older_one_and_gives_up_naming_it() {
    let env = Env::new("woundwait").await;
    let pks = keys("g", 2);
    seed(&env, &pks).await;
    let mut impatient = adds(&env, &pks, 10, None);
    impatient["Options"] = json!({"LockWaitSeconds": 1});
    let ids = begin_in_order(&env, &[adds(&env, &pks[..1], 1, None), impatient]).await;
    let (older, younger) = (&ids[0], &ids[1]);
    assert_eq!(lock::lock(&env.store, younger, 0).await.unwrap().outcome, Outcome::Done);
    wound(&env, younger, older, "g000").await;
    assert_eq!(lock::lock(&env.store, older, 0).await.unwrap().outcome, Outcome::Done);

    let t = Instant::now();
    let c = canceled(Coordinator::new(env.store.clone()).drive(younger).await);
    assert!(t.elapsed() >= Duration::from_secs(1), "{:?}", t.elapsed());
    let r = &c.cancellation_reasons[0];
    assert_eq!(r.code, "TransactionConflict", "{c:?}");
    let msg = r.message.as_deref().unwrap_or("");
    assert!(msg.contains(older.as_str()) && msg.contains("LockWaitSeconds"), "{c:?}");
    let st = status_of(&env, younger).await;
    assert_eq!((st.attempt, st.attempts.len()), (2, 1), "{st:?}");
    assert_eq!(st.attempts[0].rolled_back_by.as_deref(), Some(older.as_str()));
    assert!(st.waited_ms >= 1000, "the second attempt's wait is recorded: {st:?}");

    Coordinator::new(env.store.clone()).drive(older).await.expect("the older one commits");
    assert_eq!([n_of(&env, "g000").await, n_of(&env, "g001").await], [1, 0]);
    env.assert_clean().await;
}

/// No attempt starts after the transaction's deadline: the wounded transaction ends with `TransactionConflict` on
/// the contended action, saying the deadline passed.
#[tokio::test]
async fn no_attempt_starts_after_the_deadline() {
    let env = Env::new("deadline").await;
    let pks = keys("d", 2);
    seed(&env, &pks).await;
    let mut brief = adds(&env, &pks, 10, None);
    brief["Options"] = json!({"DeadlineSeconds": 1});
    let ids = begin_in_order(&env, &[adds(&env, &pks[..1], 1, None), brief]).await;
    let (older, younger) = (&ids[0], &ids[1]);
    assert_eq!(lock::lock(&env.store, younger, 0).await.unwrap().outcome, Outcome::Done);
    wound(&env, younger, older, "d000").await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let c = canceled(Coordinator::new(env.store.clone()).drive(younger).await);
    let msg = c.cancellation_reasons[0].message.clone().unwrap_or_default();
    assert_eq!(c.cancellation_reasons[0].code, "TransactionConflict", "{c:?}");
    assert!(msg.contains(older.as_str()) && msg.contains("deadline"), "{c:?}");
    assert_eq!(status_of(&env, younger).await.attempt, 1, "no second attempt started");
    Coordinator::new(env.store.clone()).drive(older).await.expect("the older one commits");
    env.assert_clean().await;
}

/// A transaction whose driver stopped after its attempt was rolled back by another's need starts no other attempt:
/// the sweeper ends it, with the reason it carries on the contended action.
#[tokio::test]
async fn the_sweeper_ends_a_transaction_whose_driver_stopped_before_another_attempt() {
    let env = Env::new("sweepretry").await;
    let pks = keys("e", 2);
    let (older, younger) = &wounded_after_locking(&env, &pks).await;

    tokio::time::sleep(Duration::from_millis(5)).await;
    let mut sweeper = dynamo_saga::sweeper::Sweeper::new(env.store.clone());
    sweeper.stale_after = Duration::from_millis(1);
    let report = sweeper.sweep().await.unwrap();
    assert!(report.failed.is_empty() && report.rolled_back.contains(younger), "{report:?}");
    let h = records::read_header(&env.store, &Meter::default(), younger).await.unwrap();
    assert!(h.finished() && !h.retry_pending, "{h:?}");
    let c = h.cancellation().unwrap();
    harness::assert_named(&c);
    assert!(c.cancellation_reasons[0].message.as_deref().unwrap_or("").contains(older.as_str()), "{c:?}");
    assert_eq!([n_of(&env, "e000").await, n_of(&env, "e001").await], [1, 0]);
    env.assert_clean().await;
}

/// A worker of an earlier attempt that wakes late and locks an item after that attempt was rolled back leaves a lock
/// with the earlier attempt's value: reads see the item as it is, and the next attempt lets that lock go and commits.
#[tokio::test]
async fn a_lock_left_by_a_late_worker_of_an_earlier_attempt_is_let_go() {
    let env = Env::new("leftover").await;
    let pks = keys("l", 3);
    let (_, younger) = &wounded_after_locking(&env, &pks).await;
    lock_as_first_attempt(&env, "l002", younger).await;
    let key = dynamo_saga::value::item_from_json(&json!({"pk": sv("l002")})).unwrap();
    let read = dynamo_saga::read::get_item(&env.store, &env.a, key, dynamo_saga::read::Isolation::Committed)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(read["n"].as_n().unwrap(), "0");
    Coordinator::new(env.store.clone()).drive(younger).await.expect("the second attempt commits");
    assert_eq!([n_of(&env, "l000").await, n_of(&env, "l001").await, n_of(&env, "l002").await], [11, 10, 10]);
    env.assert_clean().await;
}

/// Every lock a lock run meets that was left by one ended attempt is cleared in one step: a transaction meeting 30
/// items a late worker of another's first attempt locked, first while that one runs its second attempt and then after
/// it has finished, goes through its lock phase in one Lock call of two steps (one clears, one locks), not one step a
/// lock (which took a younger waiter past its `LockWaitSeconds`).
#[tokio::test]
async fn an_ended_attempts_locks_are_all_cleared_in_one_step() {
    let env = Env::new("leftovers").await;
    let pks = keys("m", 30);
    let (_, retried) = &wounded_after_locking(&env, &pks).await;
    let coord = Coordinator::new(env.store.clone());
    let attempt = || async { records::read_header(&env.store, &Meter::default(), retried).await.unwrap().attempt };
    let first = attempt().await;
    dynamo_saga::phase::retry::retry(&env.store, retried).await.unwrap();
    assert_eq!(attempt().await, first + 1, "the second attempt has started");
    let two_steps = || Budget { until: Instant::now() + Duration::from_secs(50), max_steps: 2 };
    let mut newer = Vec::new();
    for finished in [false, true] {
        if finished {
            coord.drive(retried).await.expect("the second attempt commits");
        }
        for pk in &pks {
            lock_as_first_attempt(&env, pk, retried).await;
        }
        let id = begin::begin(&env.store, &adds(&env, &pks, 100, None)).await.unwrap().transaction_id;
        let out = handle(&env.store, Phase::Lock, &json!({"TransactionId": id}), two_steps()).await.unwrap();
        assert_ne!(out.step, "Lock", "30 locks of one ended attempt, finished: {finished}: {out:?}");
        assert_eq!(out.state, TxState::Pending, "{out:?}");
        coord.drive(&id).await.expect("it commits");
        newer.push(id);
    }
    coord.drive(retried).await.expect("the retried transaction ends");
    assert_eq!(state_of(&env, retried).await, TxState::Committed);
    assert_eq!(n_of(&env, "m000").await, 211);
    for pk in &pks[1..] {
        assert_eq!(n_of(&env, pk).await, 210, "{pk}");
    }
    env.assert_clean().await;
}

/// Retries keep the first attempt's age: a transaction rolled back by an older one, and waiting for it, then meets a
/// newer transaction holding its other item; being older, it rolls that one back rather than queueing behind it, and
/// commits. The newer one then tries again and commits too. A retried transaction is never starved by newcomers.
#[tokio::test]
async fn a_retried_transaction_keeps_its_age_over_newer_ones() {
    let env = Env::new("age").await;
    let pks = keys("a", 2);
    seed(&env, &pks).await;
    let ids = begin_in_order(
        &env,
        &[adds(&env, &pks[..1], 1, None), adds(&env, &pks, 10, None), adds(&env, &pks[1..], 100, None)],
    )
    .await;
    let (older, retried, newer) = (&ids[0], &ids[1], &ids[2]);
    assert_eq!(lock::lock(&env.store, retried, 0).await.unwrap().outcome, Outcome::Done);
    wound(&env, retried, older, "a000").await;
    assert_eq!(lock::lock(&env.store, older, 0).await.unwrap().outcome, Outcome::Done);
    assert_eq!(
        lock::lock(&env.store, newer, 0).await.unwrap().outcome,
        Outcome::Done,
        "the newer one takes a001 meanwhile"
    );

    let coord = Coordinator::new(env.store.clone());
    let second = tokio::spawn({
        let (coord, id) = (coord.clone(), retried.clone());
        async move { coord.drive(&id).await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!second.is_finished(), "the second attempt waits for the older transaction");
    coord.drive(older).await.expect("the older one commits");
    second.await.unwrap().expect("the retried transaction commits");
    assert_eq!(
        state_of(&env, newer).await,
        TxState::RolledBack,
        "the newer holder was rolled back by the retried, older one"
    );
    coord.drive(newer).await.expect("the newer one commits on its second attempt");
    let st = status_of(&env, newer).await;
    assert_eq!(st.attempts[0].rolled_back_by.as_deref(), Some(retried.as_str()), "{st:?}");
    assert_eq!([n_of(&env, "a000").await, n_of(&env, "a001").await], [11, 110]);
    env.assert_clean().await;
}

/// An image saved by an earlier attempt shows the item before the transactions that changed it since: a later
/// attempt rolled back before it saved its own images must leave the item as those transactions left it, and a
/// committed read must not read through the old image.
#[tokio::test]
async fn a_later_attempt_never_restores_an_earlier_attempts_image() {
    let env = Env::new("staleimage").await;
    let pks = keys("x", 1);
    seed(&env, &pks).await;
    let ids = begin_in_order(&env, &[adds(&env, &pks, 10, None), adds(&env, &pks, 1, None)]).await;
    let (older, younger) = (&ids[0], &ids[1]);
    // The younger one's first attempt locks and saves x (its image: n = 0), then the older one wounds it.
    assert_eq!(lock::lock(&env.store, younger, 0).await.unwrap().outcome, Outcome::Done);
    assert_eq!(save::save(&env.store, younger, 0).await.unwrap().outcome, Outcome::Done);
    wound(&env, younger, older, "x000").await;
    Coordinator::new(env.store.clone()).drive(older).await.expect("the older one commits");
    assert_eq!(n_of(&env, "x000").await, 10);
    // Its second attempt locks x, which now holds the older one's write, and is rolled back before it saves.
    assert_eq!(dynamo_saga::phase::retry::retry(&env.store, younger).await.unwrap().outcome, Outcome::Done);
    assert_eq!(lock::lock(&env.store, younger, 0).await.unwrap().outcome, Outcome::Done);
    let read = dynamo_saga::read::get_item(
        &env.store,
        &env.a,
        dynamo_saga::value::item_from_json(&json!({"pk": sv("x000")})).unwrap(),
        dynamo_saga::read::Isolation::Committed,
    )
    .await
    .unwrap();
    assert_eq!(
        read.and_then(|i| i.get("n").cloned()),
        Some(aws_sdk_dynamodb::types::AttributeValue::N("10".into())),
        "a committed read sees the older one's write"
    );
    Coordinator::new(env.store.clone()).cancel(younger, "stopped by the test").await.unwrap();
    assert_eq!(
        n_of(&env, "x000").await,
        10,
        "the first attempt's image (n = 0) was not put back over the older one's write"
    );
    env.assert_clean().await;
}

/// A Rollback phase call that runs late or twice (a Lambda retried after a timeout while the first call still runs)
/// after its transaction has started its next attempt must not end that attempt: without the state machine's Abort
/// reason it leaves a pending transaction alone, writing nothing.
#[tokio::test]
async fn a_late_rollback_call_leaves_the_next_attempt_alone() {
    let env = Env::new("laterollback").await;
    let pks = keys("l", 2);
    seed(&env, &pks).await;
    let ids = begin_in_order(&env, &[adds(&env, &pks[..1], 10, None), adds(&env, &pks, 1, None)]).await;
    let (older, younger) = (&ids[0], &ids[1]);
    assert_eq!(lock::lock(&env.store, younger, 0).await.unwrap().outcome, Outcome::Done);
    wound(&env, younger, older, "l000").await;
    Coordinator::new(env.store.clone()).drive(older).await.expect("the older one commits");
    assert_eq!(dynamo_saga::phase::retry::retry(&env.store, younger).await.unwrap().outcome, Outcome::Done);
    assert_eq!(lock::lock(&env.store, younger, 0).await.unwrap().outcome, Outcome::Done);
    let late = dynamo_saga::phase::rollback::rollback(&env.store, younger, 0, None).await.unwrap();
    assert_eq!(late.usage.writes, 0, "a late rollback call wrote: {late:?}");
    let st = status_of(&env, younger).await;
    assert_eq!((st.state, st.attempt), (TxState::Pending, 2), "{st:?}");
    Coordinator::new(env.store.clone()).drive(younger).await.expect("the second attempt commits");
    assert_eq!([n_of(&env, "l000").await, n_of(&env, "l001").await], [11, 1]);
    env.assert_clean().await;
}

/// One state machine execution's lock waits are bounded (`Config::execution_waits`, which keeps a Standard execution
/// inside its history): driven as the state machine drives it (Lock, then Lock again with the `Contention` and `Waits`
/// each answer gives), a transaction that would wait without end (`LockWaitSeconds: null`) waits exactly that many
/// times, then is cancelled with `TransactionConflict` naming the holder and the bound.
#[tokio::test]
async fn one_execution_waits_at_most_execution_waits_times() {
    let env = Env::with("execwaits", |c| Config { execution_waits: 3, ..c }).await;
    let pks = keys("x", 2);
    seed(&env, &pks).await;
    let mut waiting = adds(&env, &pks, 10, None);
    waiting["Options"] = json!({"LockWaitSeconds": null});
    let ids = begin_in_order(&env, &[adds(&env, &pks, 1, None), waiting]).await;
    assert_eq!(lock::lock(&env.store, &ids[0], 0).await.unwrap().outcome, Outcome::Done);

    let budget = || Budget::before_deadline(0, Duration::ZERO);
    let mut input = json!({"TransactionId": ids[1]});
    let mut waits = Vec::new();
    let out = loop {
        let out = handle(&env.store, Phase::Lock, &input, budget()).await.unwrap();
        if out.step != "Wait" {
            break out;
        }
        assert!(out.wait_seconds.is_some() && out.contention.is_some(), "{out:?}");
        waits.push(out.waits);
        assert!(waits.len() <= 3, "waited past the bound: {waits:?}");
        input = json!({"TransactionId": ids[1], "Waits": out.waits, "Contention": out.contention});
    };
    assert_eq!(waits, [1, 2, 3], "each Wait adds one");
    assert_eq!((out.step.as_str(), out.state, out.waits), ("Rollback", TxState::RolledBack, 3), "{out:?}");

    // The state machine goes on to Rollback and Release, which fails the execution with the reasons.
    let input = json!({"TransactionId": ids[1], "Waits": 3});
    let out = handle(&env.store, Phase::Rollback, &input, budget()).await.unwrap();
    assert_eq!((out.step.as_str(), out.waits), ("Release", 3), "{out:?}");
    let c = canceled(handle(&env.store, Phase::Release, &input, budget()).await);
    assert_eq!(c.cancellation_reasons.len(), 2, "{c:?}");
    for r in &c.cancellation_reasons {
        assert_eq!(r.code, "TransactionConflict", "every contended action is named: {c:?}");
        let m = r.message.as_deref().unwrap_or("");
        assert!(m.contains(ids[0].as_str()) && m.contains("waited 3 times"), "{c:?}");
    }

    Coordinator::new(env.store.clone()).drive(&ids[0]).await.expect("the holder still commits");
    assert_eq!([n_of(&env, "x000").await, n_of(&env, "x001").await], [1, 1]);
    env.assert_clean().await;
}
