//! Many writes with a bound on how many are in flight: fixed lanes, each sending its items one after another, so
//! that a run waits for about `items / limit` requests one after another whatever order DynamoDB answers in.

use std::future::Future;

use crate::error::TxError;

/// Runs `f` over `items` with at most `limit` in flight, and returns the results in the order of `items`: `limit`
/// lanes, each sending its items one after another, lane `l` taking items `l`, `l + limit`, `l + 2 * limit`, ...
/// ([`lanes`]). The lanes are fixed in advance, not taken by whichever lane is free first: a run then waits for
/// `ceil(items / limit)` requests one after another whatever order DynamoDB answers in, where a shared queue gave a
/// lane that happened to be answered fast more than its share, and the run's longest chain grew with it. Every
/// request a lane sends knows its lane ([`lane`]), so a trace of the run can tell what waited for what.
pub(crate) async fn concurrently<T, R, F, Fut>(items: Vec<T>, limit: usize, f: F) -> Result<Vec<R>, TxError>
where
    F: Fn(T) -> Fut,
    Fut: Future<Output = Result<R, TxError>>,
{
    let window = WINDOWS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let f = &f;
    let lanes = lanes(items, limit).into_iter().enumerate().map(|(lane, mine)| {
        LANE.scope(Lane { window, lane }, async move {
            let mut done = Vec::with_capacity(mine.len());
            for (i, item) in mine {
                done.push((i, f(item).await));
            }
            done
        })
    });
    let mut done: Vec<(usize, Result<R, TxError>)> =
        futures::future::join_all(lanes).await.into_iter().flatten().collect();
    done.sort_by_key(|(i, _)| *i);
    done.into_iter().map(|(_, r)| r).collect()
}

/// `items` dealt to at most `limit` lanes as cards are dealt, each with its index: lane `l` holds items `l`,
/// `l + lanes`, ... in order, so no lane holds more than one item more than another.
fn lanes<T>(items: Vec<T>, limit: usize) -> Vec<Vec<(usize, T)>> {
    let count = limit.clamp(1, items.len().max(1));
    let mut lanes: Vec<Vec<(usize, T)>> = (0..count).map(|_| Vec::new()).collect();
    for (i, item) in items.into_iter().enumerate() {
        lanes[i % count].push((i, item));
    }
    lanes
}

/// One lane of one run of [`concurrently`]: what a request sent in it knows of where it stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Lane {
    /// The run, numbered in this process.
    pub window: u64,
    pub lane: usize,
}

tokio::task_local! {
    static LANE: Lane;
}

static WINDOWS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The lane of [`concurrently`] the caller runs in, if any: a benchmark's trace reads it when a request goes out.
#[cfg(any(test, feature = "internals"))]
pub fn lane() -> Option<Lane> {
    LANE.try_with(|l| *l).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_are_dealt_to_lanes_in_turn_and_no_lane_holds_two_more_than_another() {
        let dealt = lanes((0..10).collect(), 4);
        let indexes: Vec<Vec<usize>> = dealt.iter().map(|l| l.iter().map(|(i, _)| *i).collect()).collect();
        assert_eq!(indexes, [vec![0, 4, 8], vec![1, 5, 9], vec![2, 6], vec![3, 7]]);
        assert!(dealt.iter().flatten().all(|(i, item)| i == item));
        assert_eq!(lanes((0..3).collect::<Vec<u8>>(), 256).len(), 3, "no lane without an item");
        assert_eq!(lanes(Vec::<u8>::new(), 16).len(), 1);
        assert_eq!(lanes((0..5).collect::<Vec<u8>>(), 0).len(), 1, "a limit of 0 still runs");
        for (n, limit) in [(1_980, 256), (99, 16), (10_000, 7)] {
            let sizes: Vec<usize> = lanes((0..n).collect::<Vec<usize>>(), limit).iter().map(Vec::len).collect();
            assert_eq!(sizes.iter().max(), Some(&n.div_ceil(limit)), "{n} items in {limit} lanes");
            assert!(sizes.iter().max().unwrap() - sizes.iter().min().unwrap() <= 1);
        }
    }

    #[tokio::test]
    async fn a_run_answers_in_the_order_of_its_items_whatever_order_the_lanes_end_in() {
        let out = concurrently((0..50u64).collect(), 8, |i| async move {
            // Later items end first.
            tokio::time::sleep(std::time::Duration::from_micros(50 - i)).await;
            Ok::<_, TxError>((i, lane().expect("a lane").lane))
        })
        .await
        .expect("no error");
        assert_eq!(out.iter().map(|(i, _)| *i).collect::<Vec<_>>(), (0..50).collect::<Vec<_>>());
        assert!(out.iter().all(|(i, lane)| *lane == *i as usize % 8), "item i goes out in lane i % 8");
    }
}
