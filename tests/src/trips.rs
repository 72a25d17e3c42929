//! DynamoDB round trips on a run's critical path: a client interceptor notes when each request goes out and when
//! its answer comes back, and [`critical_path`] finds the longest chain of requests each sent after the one before
//! it was answered. That chain is what a run waits for however fast DynamoDB answers; requests sent side by side
//! count once.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use aws_sdk_dynamodb::config::interceptors::{
    BeforeDeserializationInterceptorContextRef, BeforeTransmitInterceptorContextRef,
};
use aws_sdk_dynamodb::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_smithy_types::config_bag::{Storable, StoreReplace};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// When one request attempt went out, and its operation.
#[derive(Debug, Clone)]
struct SentAt(Instant, String);

impl Storable for SentAt {
    type Storer = StoreReplace<Self>;
}

/// Notes every request attempt of the client it is added to, as (sent, answered).
#[derive(Debug, Clone, Default)]
pub struct Tracer(Arc<Mutex<Vec<Traced>>>);

/// One request attempt: when it went out, when its answer came back, and its operation (`UpdateItem`, ...).
#[derive(Debug, Clone)]
pub struct Traced {
    pub sent: Instant,
    pub answered: Instant,
    pub operation: String,
}

impl Tracer {
    /// Every request attempt so far, as (sent, answered).
    pub fn calls(&self) -> Vec<(Instant, Instant)> {
        self.traced().iter().map(|t| (t.sent, t.answered)).collect()
    }

    /// Every request attempt so far.
    pub fn traced(&self) -> Vec<Traced> {
        self.0.lock().expect("tracer lock").clone()
    }
}

impl Intercept for Tracer {
    fn name(&self) -> &'static str {
        "RoundTripTracer"
    }

    fn read_before_transmit(
        &self,
        ctx: &BeforeTransmitInterceptorContextRef<'_>,
        _: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let target = ctx.request().headers().get("x-amz-target").unwrap_or_default();
        let operation = target.rsplit('.').next().unwrap_or_default().to_string();
        cfg.interceptor_state().store_put(SentAt(Instant::now(), operation));
        Ok(())
    }

    fn read_before_deserialization(
        &self,
        _: &BeforeDeserializationInterceptorContextRef<'_>,
        _: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        if let Some(SentAt(sent, operation)) = cfg.load::<SentAt>() {
            let t = Traced { sent: *sent, answered: Instant::now(), operation: operation.clone() };
            self.0.lock().expect("tracer lock").push(t);
        }
        Ok(())
    }
}

/// The most requests in one chain where each was sent no earlier than the one before it was answered.
pub fn critical_path<T: Ord + Copy>(calls: &[(T, T)]) -> usize {
    let mut by_start: Vec<(T, T)> = calls.to_vec();
    by_start.sort();
    // Chains ending at each answered request, released to `best` once a later request starts after that answer.
    let mut open: std::collections::BinaryHeap<std::cmp::Reverse<(T, usize)>> = Default::default();
    let (mut best, mut longest) = (0, 0);
    for (start, end) in by_start {
        while let Some(std::cmp::Reverse((e, len))) = open.peek().copied() {
            if e > start {
                break;
            }
            open.pop();
            best = best.max(len);
        }
        let len = best + 1;
        longest = longest.max(len);
        open.push(std::cmp::Reverse((end, len)));
    }
    longest
}

#[cfg(test)]
mod tests {
    use super::critical_path;

    #[test]
    fn requests_side_by_side_count_once_and_one_after_another_each() {
        assert_eq!(critical_path::<u32>(&[]), 0);
        assert_eq!(critical_path(&[(0, 10)]), 1);
        assert_eq!(critical_path(&[(0, 10), (0, 10), (1, 9)]), 1, "three at once");
        assert_eq!(critical_path(&[(0, 10), (10, 20), (20, 30)]), 3, "one after another");
        // Sixteen at a time, three waves, plus a header write after them.
        let mut calls: Vec<(u32, u32)> = (0..48).map(|i| (i / 16 * 10, i / 16 * 10 + 9)).collect();
        calls.push((40, 45));
        assert_eq!(critical_path(&calls), 4);
        assert_eq!(critical_path(&[(0, 100), (1, 2), (3, 4), (5, 6)]), 3, "a long request beside a short chain");
    }
}
