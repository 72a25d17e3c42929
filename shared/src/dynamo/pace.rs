//! How many DynamoDB requests a process keeps in flight: up to the configured limit (`SAGA_IN_FLIGHT`) while calls
//! succeed, halved when DynamoDB throttles (additive increase, multiplicative decrease, as TCP paces a network).
//!
//! The SDK retries a throttled request itself, after a short jittered wait ([`crate::Store::connect`]); the pace makes
//! every other request of the process wait for a slot meanwhile, so a busy table sees fewer requests at once instead
//! of the same number retrying. It learns of throttling from every response the client receives (an interceptor),
//! retried attempts included.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use aws_sdk_dynamodb::config::interceptors::AfterDeserializationInterceptorContextRef;
use aws_sdk_dynamodb::config::{ConfigBag, Intercept, RuntimeComponents};
use tokio::sync::Notify;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A throttled response halves the limit at most this often, so that one burst of throttled requests (all sent at
/// the old limit) counts once.
const CUT_EVERY_MS: u64 = 100;

/// The in-flight limit of one process's DynamoDB requests, shared by every clone of its store.
#[derive(Debug)]
pub struct Pace {
    max: usize,
    limit: AtomicUsize,
    in_flight: AtomicUsize,
    /// Successes since the limit last grew.
    successes: AtomicUsize,
    last_cut_ms: AtomicU64,
    throttled: AtomicU64,
    /// Writes a multi-Region strongly consistent table refused for a concurrent change of the item from another
    /// Region (`ReplicatedWriteConflictException`).
    conflicts: AtomicU64,
    freed: Notify,
}

impl Pace {
    pub fn new(max: usize) -> Arc<Pace> {
        let max = max.max(1);
        Arc::new(Pace {
            max,
            limit: AtomicUsize::new(max),
            in_flight: AtomicUsize::new(0),
            successes: AtomicUsize::new(0),
            last_cut_ms: AtomicU64::new(0),
            throttled: AtomicU64::new(0),
            conflicts: AtomicU64::new(0),
            freed: Notify::new(),
        })
    }

    /// The requests allowed in flight now.
    pub fn limit(&self) -> usize {
        self.limit.load(Ordering::SeqCst)
    }

    /// Throttled responses seen so far.
    pub fn throttled(&self) -> u64 {
        self.throttled.load(Ordering::SeqCst)
    }

    /// Writes refused with `ReplicatedWriteConflictException` so far. Each is sent again: by the SDK, which models the
    /// error as retryable, or for a write sent once by the store ([`crate::Store::update_once`]).
    pub fn conflicts(&self) -> u64 {
        self.conflicts.load(Ordering::SeqCst)
    }

    /// Waits for a slot; the slot is given back when the returned guard drops.
    pub async fn slot(self: &Arc<Self>) -> Slot {
        loop {
            // Registered before the check, so a slot freed in between still wakes this waiter.
            let freed = self.freed.notified();
            let now = self.in_flight.load(Ordering::SeqCst);
            if now < self.limit() {
                if self.in_flight.compare_exchange(now, now + 1, Ordering::SeqCst, Ordering::SeqCst).is_ok() {
                    return Slot(self.clone());
                }
                continue;
            }
            freed.await;
        }
    }

    /// A response that was not throttled: after as many as the limit, the limit grows by one, up to the maximum.
    fn succeeded(&self) {
        let limit = self.limit();
        if limit >= self.max {
            return;
        }
        if self.successes.fetch_add(1, Ordering::SeqCst) + 1 >= limit {
            self.successes.store(0, Ordering::SeqCst);
            let _ = self.limit.compare_exchange(limit, (limit + 1).min(self.max), Ordering::SeqCst, Ordering::SeqCst);
            self.freed.notify_waiters();
        }
    }

    /// A throttled response: the limit halves (at most once every [`CUT_EVERY_MS`]), down to one.
    fn was_throttled(&self, now_ms: u64) {
        self.throttled.fetch_add(1, Ordering::SeqCst);
        let last = self.last_cut_ms.load(Ordering::SeqCst);
        if now_ms.saturating_sub(last) < CUT_EVERY_MS {
            return;
        }
        if self.last_cut_ms.compare_exchange(last, now_ms, Ordering::SeqCst, Ordering::SeqCst).is_ok() {
            let limit = self.limit();
            let _ = self.limit.compare_exchange(limit, (limit / 2).max(1), Ordering::SeqCst, Ordering::SeqCst);
            self.successes.store(0, Ordering::SeqCst);
        }
    }
}

/// A request's place in flight; dropping it frees the place.
#[derive(Debug)]
pub struct Slot(Arc<Pace>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
        self.0.freed.notify_waiters();
    }
}

/// Tells the pace of every response the client receives: throttled (DynamoDB's
/// `ProvisionedThroughputExceededException`, `ThrottlingException` or `RequestLimitExceeded`) or not.
#[derive(Debug, Clone)]
pub struct Watch(pub Arc<Pace>);

impl Intercept for Watch {
    fn name(&self) -> &'static str {
        "Pace"
    }

    fn read_after_deserialization(
        &self,
        context: &AfterDeserializationInterceptorContextRef<'_>,
        _: &RuntimeComponents,
        _: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        match context.output_or_error() {
            Ok(_) => self.0.succeeded(),
            Err(e) => {
                let text = format!("{e:?}");
                if is_throttling(text.as_bytes()) {
                    self.0.was_throttled(crate::model::value::now_ms());
                } else if is_replicated_conflict(text.as_bytes()) {
                    self.0.conflicts.fetch_add(1, Ordering::SeqCst);
                    tracing::debug!("a write met a concurrent change from another Region: sending it again");
                }
            }
        }
        Ok(())
    }
}

/// DynamoDB's refusal of a write to a multi-Region strongly consistent table whose item another Region is changing
/// at the same moment: nothing was written, and sending it again is what AWS advises.
pub const REPLICATED_WRITE_CONFLICT: &str = "ReplicatedWriteConflictException";

/// Whether a DynamoDB error (its body, or the SDK's rendering of it) is [`REPLICATED_WRITE_CONFLICT`].
pub(crate) fn is_replicated_conflict(body: &[u8]) -> bool {
    String::from_utf8_lossy(body).contains(REPLICATED_WRITE_CONFLICT)
}

/// Whether a DynamoDB error (its body, or the SDK's rendering of it) names a throttling error.
fn is_throttling(body: &[u8]) -> bool {
    let text = String::from_utf8_lossy(body);
    ["ProvisionedThroughputExceededException", "ThrottlingException", "RequestLimitExceeded"]
        .iter()
        .any(|name| text.contains(name))
}

#[cfg(test)]
mod tests {
    use super::{is_throttling, Pace, CUT_EVERY_MS};

    #[test]
    fn throttling_halves_the_limit_at_most_once_a_window_and_successes_grow_it_back() {
        let p = Pace::new(16);
        p.was_throttled(1_000);
        assert_eq!(p.limit(), 8);
        p.was_throttled(1_000 + CUT_EVERY_MS / 2);
        assert_eq!(p.limit(), 8, "one burst counts once");
        p.was_throttled(1_000 + CUT_EVERY_MS);
        assert_eq!(p.limit(), 4);
        for _ in 0..4 {
            p.succeeded();
        }
        assert_eq!(p.limit(), 5, "a limit's worth of successes adds one");
        for _ in 0..1_000 {
            p.succeeded();
        }
        assert_eq!(p.limit(), 16, "never past the maximum");
        for t in 0..10 {
            p.was_throttled(10_000 + t * CUT_EVERY_MS);
        }
        assert_eq!((p.limit(), p.throttled()), (1, 13), "never below one");
    }

    #[test]
    fn dynamodbs_throttling_errors_are_recognised() {
        let pte =
            br#"{"__type":"com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException","message":"x"}"#;
        assert!(is_throttling(pte));
        assert!(is_throttling(br#"{"__type":"com.amazon.coral.availability#ThrottlingException"}"#));
        assert!(!is_throttling(br#"{"__type":"com.amazonaws.dynamodb.v20120810#ConditionalCheckFailedException"}"#));
        let conflict =
            br#"{"__type":"com.amazonaws.dynamodb.v20120810#ReplicatedWriteConflictException","message":"x"}"#;
        assert!(super::is_replicated_conflict(conflict) && !is_throttling(conflict));
        assert!(!super::is_replicated_conflict(pte));
    }

    #[tokio::test]
    async fn no_more_slots_are_taken_than_the_limit() {
        let p = Pace::new(2);
        let a = p.slot().await;
        let _b = p.slot().await;
        let third = tokio::spawn({
            let p = p.clone();
            async move { p.slot().await }
        });
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        assert!(!third.is_finished(), "a third request waits");
        drop(a);
        let _c = tokio::time::timeout(std::time::Duration::from_secs(1), third).await.expect("freed").unwrap();
    }
}
