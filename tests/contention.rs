//! Contention between transactions on DynamoDB Local: who waits, who is rolled back, and that every transaction ends.

use std::time::{Duration, Instant};

use dynamo_saga::phase::{begin, lock, Outcome};
use dynamo_saga::records::{self, TxState};
use dynamo_saga::store::Meter;
use dynamo_saga::{Config, Coordinator, TxError};
use harness::workload::{append_to_parent, parent_order};
use harness::{nv, sv, Env};
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

    // The crashed coordinator, waking late, learns it was rolled back and writes nothing.
    let after = env.snapshot().await;
    let late = Coordinator::new(env.store.clone()).drive(crashed).await;
    assert!(matches!(late, Err(TxError::Canceled(_))), "{late:?}");
    assert_eq!(env.snapshot().await, after);
    assert_ne!(before, after);
}

#[tokio::test]
async fn the_older_transaction_wins_and_the_younger_one_is_rolled_back() {
    let env = Env::new("older").await;
    let pks = keys("o", 4);
    seed(&env, &pks).await;
    let ids = begin_in_order(&env, &[adds(&env, &pks[..2], 1, None), adds(&env, &pks[1..], 10, Some("o-new"))]).await;
    let (older, younger) = (&ids[0], &ids[1]);

    // The younger one got there first and holds every lock.
    assert_eq!(lock::lock(&env.store, younger, 0).await.unwrap().outcome, Outcome::Done);
    Coordinator::new(env.store.clone()).drive(older).await.expect("the older transaction commits");

    assert_eq!(state_of(&env, younger).await, TxState::RolledBack);
    let lost = Coordinator::new(env.store.clone()).drive(younger).await;
    let Err(TxError::Canceled(c)) = lost else { panic!("the younger one is cancelled: {lost:?}") };
    assert!(c.message.contains(older.as_str()), "the reason names the winner: {}", c.message);
    assert_eq!([n_of(&env, "o000").await, n_of(&env, "o001").await, n_of(&env, "o002").await, n_of(&env, "o003").await], [1, 1, 0, 0]);
    assert!(env.get(&env.a, json!({"pk": sv("o-new")})).await.is_none());
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
    let out = Coordinator::new(env.store.clone()).drive(&ids[1]).await;
    let Err(TxError::Canceled(c)) = out else { panic!("cancelled after LockWaitSeconds: {out:?}") };
    assert!(t.elapsed() >= Duration::from_secs(1) && t.elapsed() < Duration::from_secs(20), "{:?}", t.elapsed());
    assert_eq!(c.cancellation_reasons[0].code, "TransactionConflict", "{c:?}");
    assert!(c.cancellation_reasons[0].message.as_deref().unwrap_or("").contains(ids[0].as_str()), "{c:?}");
    assert_eq!(c.cancellation_reasons[1].code, "None");

    Coordinator::new(env.store.clone()).drive(&ids[0]).await.expect("the holder still commits");
    assert_eq!([n_of(&env, "w000").await, n_of(&env, "w001").await], [1, 1]);
    env.assert_clean().await;
}

/// Six transactions over overlapping sets of 150 items, run at once, a few times over: each ends, the oldest always
/// commits, and the counters add up to exactly the committed transactions' deltas.
#[tokio::test]
async fn concurrent_overlapping_transactions_all_end_and_the_oldest_commits() {
    let env = Env::new("overlap").await;
    let pks = keys("c", 300);
    seed(&env, &pks).await;
    let mut expected = vec![0i64; pks.len()];
    for round in 0..3 {
        let sets: Vec<(usize, i64)> = (0..6).map(|t| ((t * 29 + round * 7) % 150, 1i64 << (t + 6 * round))).collect();
        let bodies: Vec<Value> = sets.iter().map(|(start, d)| adds(&env, &pks[*start..start + 150], *d, None)).collect();
        let ids = begin_in_order(&env, &bodies).await;
        let coord = Coordinator::new(env.store.clone());
        let runs = ids.iter().map(|id| {
            let coord = coord.clone();
            let id = id.clone();
            async move { tokio::time::timeout(Duration::from_secs(120), coord.drive(&id)).await.expect("no livelock") }
        });
        let results = futures::future::join_all(runs).await;
        assert!(results[0].is_ok(), "the oldest commits: {:?}", results[0]);
        for (r, (start, d)) in results.iter().zip(&sets) {
            match r {
                Ok(_) => (*start..start + 150).for_each(|i| expected[i] += d),
                Err(TxError::Canceled(_)) => {}
                Err(e) => panic!("a transaction failed instead of ending: {e}"),
            }
        }
    }
    for (pk, want) in pks.iter().zip(&expected) {
        assert_eq!(n_of(&env, pk).await, *want, "{pk}");
    }
    env.assert_clean().await;
}

/// Wound-wait keeps a long transaction going: 20 workers keep sending small transactions, all newer than it, over
/// its items while it runs. It commits, every small one ends (committed, or cancelled after its attempts), and each
/// counter is the long one's delta plus those of the small ones that committed on it.
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
                let r = tokio::time::timeout(Duration::from_secs(120), coord.run_retrying(&adds(env, &picked, 1, None), 3)).await.expect("no livelock");
                match r {
                    Ok(c) => {
                        assert!(c.transaction_id > *long, "the small transactions are the newer ones");
                        committed.extend(picked);
                    }
                    Err(TxError::Canceled(_)) => {}
                    Err(e) => panic!("a small transaction failed instead of ending: {e}"),
                }
                ended += 1;
            }
            (committed, ended)
        }
    });
    let long_run = async {
        // Let the small ones start first, so the long one meets their locks from its first batch on.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let r = tokio::time::timeout(Duration::from_secs(300), Coordinator::new(env.store.clone()).drive(&long)).await.expect("the long one ends");
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        r
    };
    let (r, smalls) = tokio::join!(long_run, futures::future::join_all(small));
    let committed = r.expect("the long transaction commits");
    assert_eq!(committed.actions, 500);
    let ended: usize = smalls.iter().map(|(_, e)| e).sum();
    assert!(ended >= 20, "every small worker ran at least once: {ended}");
    let small_committed: usize = smalls.iter().map(|(c, _)| c.len() / 5).sum();
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

/// Two transactions naming the same two items in opposite order, run at once, ten times: both end every time (the
/// global lock order means neither can hold one item while waiting for the other), the older one commits, and the
/// counters count exactly the committed ones.
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
        assert!(a.is_ok(), "the older one commits: {a:?}");
        want += 1;
        match b {
            Ok(_) => want += 100,
            Err(TxError::Canceled(c)) => assert!(c.message.contains(ids[0].as_str()), "rolled back by the older one: {c:?}"),
            Err(e) => panic!("the younger one failed instead of ending: {e}"),
        }
    }
    assert_eq!([n_of(&env, "p000").await, n_of(&env, "p001").await], [want, want]);
    env.assert_clean().await;
}

/// Seed 001's rule on a parent lock (seed 003): a holder that stopped after locking keeps the parent while the record
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
    let parent_token = || async { env.get(&env.a, json!({"pk": sv("PARENT")})).await.unwrap()["lockToken"]["S"].as_str().map(str::to_owned) };
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
            assert!(dynamo_saga::phase::heartbeat(&env.store, &Meter::default(), &holder_header).await.unwrap());
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

    // The holder's coordinator wakes up: it writes nothing, and its transaction has ended rolled back.
    let after = env.snapshot().await;
    let late = Coordinator::new(env.store.clone()).drive(holder).await;
    assert!(matches!(late, Err(TxError::Canceled(_))), "{late:?}");
    assert_eq!(env.snapshot().await, after);
    for pk in &pks {
        assert_eq!(n_of(&env, pk).await, 10, "{pk}: only the waiter's writes");
    }
    assert_eq!(parent_token().await, None, "the parent is released");
    env.assert_clean().await;
}

/// Seed 004: 20 transactions waiting for one parent are served in the order they took their tickets, which here is
/// the reverse of their age; a waiter that died in the queue is rolled back after a lease and the queue moves on.
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
    let out = Coordinator::new(env.store.clone()).drive(&ids[1]).await;
    let Err(TxError::Canceled(c)) = out else { panic!("cancelled at once: {out:?}") };
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    assert!(c.message.contains("Parent") && c.message.contains(ids[0].as_str()), "{}", c.message);
    Coordinator::new(env.store.clone()).drive(&ids[0]).await.expect("the holder commits");
    assert_eq!(parent_order(&env).await, vec!["a".to_owned()]);
    env.assert_clean().await;
}

/// Seed 004's queue rows: a waiter refreshes its row with every heartbeat, so the row outlives its three-lease TTL
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
            assert!(dynamo_saga::phase::heartbeat(&env.store, &Meter::default(), &h).await.unwrap());
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
    env.client.delete_item().table_name(&env.tx_table).set_key(Some(first[0].iter()
        .filter(|(k, _)| *k == "id" || *k == "sk").map(|(k, v)| (k.clone(), v.clone())).collect())).send().await.unwrap();
    let h = records::read_header(&env.store, &Meter::default(), waiter).await.unwrap();
    assert!(dynamo_saga::phase::heartbeat(&env.store, &Meter::default(), &h).await.unwrap());
    assert!(rows().await.is_empty(), "a refresh does not write a row that is gone");
    coord.drive(holder).await.expect("the holder commits");
    coord.drive(waiter).await.expect("the waiter commits");
    assert_eq!(parent_order(&env).await, ["holder", "waiter"]);
    assert!(rows().await.is_empty(), "no queue row left");
    env.assert_clean().await;
}
