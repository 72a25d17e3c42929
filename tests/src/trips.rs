//! DynamoDB round trips on a run's critical path: a client interceptor notes when each request goes out, when its
//! answer comes back, its operation and how many items it carries, and [`critical_path`] finds the longest chain of
//! requests each sent after the one before it was answered. That chain is what a run waits for however fast DynamoDB
//! answers; requests sent side by side count once.
//!
//! [`modelled_ms`] weighs the same chain by a latency [`Model`] instead of counting it: the wall time the run would
//! take where each request costs the model's time and nothing else does (DynamoDB Local's own CPU per request, which
//! no real endpoint has, drops out; so does the client's own work between requests).

use std::sync::{Arc, Mutex};
use std::time::Instant;

use aws_sdk_dynamodb::config::interceptors::{
    BeforeDeserializationInterceptorContextRef, BeforeTransmitInterceptorContextRef,
};
use aws_sdk_dynamodb::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_smithy_types::config_bag::{Storable, StoreReplace};
use serde_json::Value;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// One request attempt on its way: when it went out, its operation and its items.
#[derive(Debug, Clone)]
struct Sent(Instant, String, usize);

impl Storable for Sent {
    type Storer = StoreReplace<Self>;
}

/// Notes every request attempt of the client it is added to.
#[derive(Debug, Clone, Default)]
pub struct Tracer(Arc<Mutex<Vec<Traced>>>);

/// One request attempt: when it went out, when its answer came back, its operation (`UpdateItem`, ...) and, for a
/// call that carries many items, how many (0 for a single-item call).
#[derive(Debug, Clone)]
pub struct Traced {
    pub sent: Instant,
    pub answered: Instant,
    pub operation: String,
    pub items: usize,
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

/// The items a multi-item call carries, from its JSON body; 0 for every other operation.
fn items_of(operation: &str, body: Option<&[u8]>) -> usize {
    let Some(body) = body.and_then(|b| serde_json::from_slice::<Value>(b).ok()) else {
        return 0;
    };
    let len = |v: &Value| v.as_array().map_or(0, Vec::len);
    match operation {
        "TransactWriteItems" | "TransactGetItems" => len(&body["TransactItems"]),
        "BatchExecuteStatement" => len(&body["Statements"]),
        "BatchWriteItem" => body["RequestItems"].as_object().map_or(0, |t| t.values().map(len).sum()),
        "BatchGetItem" => body["RequestItems"].as_object().map_or(0, |t| t.values().map(|v| len(&v["Keys"])).sum()),
        _ => 0,
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
        let items = items_of(&operation, ctx.request().body().bytes());
        cfg.interceptor_state().store_put(Sent(Instant::now(), operation, items));
        Ok(())
    }

    fn read_before_deserialization(
        &self,
        _: &BeforeDeserializationInterceptorContextRef<'_>,
        _: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        if let Some(Sent(sent, operation, items)) = cfg.load::<Sent>() {
            let t = Traced { sent: *sent, answered: Instant::now(), operation: operation.clone(), items: *items };
            self.0.lock().expect("tracer lock").push(t);
        }
        Ok(())
    }
}

/// What each DynamoDB request costs in a latency model: AWS publishes no latency per operation, so the model is
/// stated, and results are shown at several.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Model {
    /// A request's round trip: a single-item read or write costs this.
    pub per_call_ms: f64,
    /// Added per item to a call that carries many (`TransactWriteItems`, `BatchWriteItem`, `BatchExecuteStatement`,
    /// `BatchGetItem`, `TransactGetItems`).
    pub per_item_ms: f64,
}

impl Model {
    /// The reference model: 5 ms a call, 0.25 ms an item.
    pub const REFERENCE: Model = Model { per_call_ms: 5.0, per_item_ms: 0.25 };

    /// The reference model and the ones beside it: per call 3 and 10 ms, per item 0.1 and 0.5 ms.
    pub const SENSITIVITY: [Model; 5] = [
        Model::REFERENCE,
        Model { per_call_ms: 3.0, per_item_ms: 0.25 },
        Model { per_call_ms: 10.0, per_item_ms: 0.25 },
        Model { per_call_ms: 5.0, per_item_ms: 0.1 },
        Model { per_call_ms: 5.0, per_item_ms: 0.5 },
    ];

    /// A Lambda call through Step Functions, on top of its run time.
    pub const LAMBDA_CALL_MS: f64 = 25.0;

    fn cost(&self, t: &Traced) -> f64 {
        self.per_call_ms + self.per_item_ms * t.items as f64
    }
}

/// The wall time of the traced calls under `model`: the heaviest chain of requests each sent after the one before
/// it was answered, each weighing what the model says it costs.
pub fn modelled_ms(calls: &[Traced], model: Model) -> f64 {
    let weighed: Vec<(Instant, Instant, f64)> = calls.iter().map(|t| (t.sent, t.answered, model.cost(t))).collect();
    heaviest_chain(&weighed)
}

/// The most requests in one chain where each was sent no earlier than the one before it was answered.
pub fn critical_path<T: Ord + Copy>(calls: &[(T, T)]) -> usize {
    let weighed: Vec<(T, T, f64)> = calls.iter().map(|&(s, e)| (s, e, 1.0)).collect();
    heaviest_chain(&weighed).round() as usize
}

/// The greatest total weight of one chain of calls (sent, answered, weight) where each was sent no earlier than the
/// one before it was answered.
fn heaviest_chain<T: Ord + Copy>(calls: &[(T, T, f64)]) -> f64 {
    let mut order: Vec<usize> = (0..calls.len()).collect();
    order.sort_by_key(|&i| (calls[i].0, calls[i].1));
    // Chains ending at each answered request, released to `best` once a later request starts after that answer.
    let mut open: std::collections::BinaryHeap<std::cmp::Reverse<(T, usize)>> = Default::default();
    let mut chain = vec![0.0f64; calls.len()];
    let (mut best, mut heaviest) = (0.0f64, 0.0f64);
    for i in order {
        let (start, end, weight) = calls[i];
        while let Some(std::cmp::Reverse((e, j))) = open.peek().copied() {
            if e > start {
                break;
            }
            open.pop();
            best = best.max(chain[j]);
        }
        chain[i] = best + weight;
        heaviest = heaviest.max(chain[i]);
        open.push(std::cmp::Reverse((end, i)));
    }
    heaviest
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn a_model_weighs_each_call_by_its_items_and_the_heaviest_chain_wins() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + std::time::Duration::from_millis(ms);
        let call = |s: u64, e: u64, op: &str, items: usize| Traced {
            sent: at(s),
            answered: at(e),
            operation: op.into(),
            items,
        };
        // Two single writes one after another, beside one TransactWriteItems of 100 items: 5 + 25 beats 5 + 5.
        let calls = [call(0, 1, "UpdateItem", 0), call(1, 2, "UpdateItem", 0), call(0, 2, "TransactWriteItems", 100)];
        assert_eq!(modelled_ms(&calls, Model::REFERENCE), 30.0);
        assert_eq!(modelled_ms(&calls[..2], Model::REFERENCE), 10.0);
        assert_eq!(modelled_ms(&calls[..2], Model { per_call_ms: 3.0, per_item_ms: 0.5 }), 6.0);
        assert_eq!(modelled_ms(&[], Model::REFERENCE), 0.0);
    }

    #[test]
    fn the_items_of_a_call_are_read_from_its_body() {
        let body = |v: Value| serde_json::to_vec(&v).unwrap();
        let transact = body(serde_json::json!({"TransactItems": [{}, {}, {}]}));
        assert_eq!(items_of("TransactWriteItems", Some(&transact)), 3);
        let batch = body(serde_json::json!({"RequestItems": {"a": [{}, {}], "b": [{}]}}));
        assert_eq!(items_of("BatchWriteItem", Some(&batch)), 3);
        let get = body(serde_json::json!({"RequestItems": {"a": {"Keys": [{}, {}]}, "b": {"Keys": [{}]}}}));
        assert_eq!(items_of("BatchGetItem", Some(&get)), 3);
        assert_eq!(items_of("UpdateItem", Some(&transact)), 0);
        assert_eq!(items_of("BatchWriteItem", None), 0);
    }
}
