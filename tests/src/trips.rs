//! DynamoDB round trips on a run's critical path: a client interceptor notes when each request goes out, when its
//! answer comes back, its operation, how many items it carries and the lane of the library's concurrent writes it
//! went out in, and [`critical_path`] finds the longest chain of requests each sent after the one before it was
//! answered. That chain is what a run waits for however fast DynamoDB answers; requests sent side by side count once.
//! Within one run of concurrent writes, a request waits only for the one before it in its lane: the answer of another
//! lane's request that happened to come first (DynamoDB Local answers out of order when it is busy) is not what it
//! waited for, so no chain runs across lanes.
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
use dynamo_saga::lanes::Lane;
use serde_json::Value;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// One request attempt on its way: when it went out, its operation, its items, its lane and whether it commits.
#[derive(Debug, Clone)]
struct Sent(Instant, String, usize, Option<Lane>, bool);

impl Storable for Sent {
    type Storer = StoreReplace<Self>;
}

/// Notes every request attempt of the client it is added to.
#[derive(Debug, Clone, Default)]
pub struct Tracer(Arc<Mutex<Vec<Traced>>>);

/// One request attempt: when it went out, when its answer came back, its operation (`UpdateItem`, ...), for a call
/// that carries many items how many (0 for a single-item call), and the lane it went out in.
#[derive(Debug, Clone)]
pub struct Traced {
    pub sent: Instant,
    pub answered: Instant,
    pub operation: String,
    pub items: usize,
    pub lane: Option<Lane>,
    /// A header write that moves a transaction to `COMMITTED` (or writes it committed): the commit point, after which
    /// committed reads see the transaction's values.
    pub commits: bool,
}

impl Tracer {
    /// Every request attempt so far, as (sent, answered, lane).
    pub fn calls(&self) -> Vec<Call<Instant>> {
        self.traced().iter().map(|t| Call { sent: t.sent, answered: t.answered, lane: t.lane }).collect()
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

/// Whether a request writes a transaction header `COMMITTED`: a header write whose values hold the state (commit,
/// save and commit in one, or a call carried out in one `TransactWriteItems` with its header written committed).
fn commits(operation: &str, body: Option<&[u8]>) -> bool {
    matches!(operation, "UpdateItem" | "TransactWriteItems" | "PutItem")
        && body.is_some_and(|b| {
            let text = String::from_utf8_lossy(b);
            text.contains(&format!("\"S\":\"{}\"", dynamo_saga::TxState::Committed.as_str()))
        })
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
        let body = ctx.request().body().bytes();
        let items = items_of(&operation, body);
        let commits = commits(&operation, body);
        cfg.interceptor_state().store_put(Sent(Instant::now(), operation, items, dynamo_saga::lanes::lane(), commits));
        Ok(())
    }

    fn read_before_deserialization(
        &self,
        _: &BeforeDeserializationInterceptorContextRef<'_>,
        _: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        if let Some(Sent(sent, operation, items, lane, commits)) = cfg.load::<Sent>() {
            let t = Traced {
                sent: *sent,
                answered: Instant::now(),
                operation: operation.clone(),
                items: *items,
                lane: *lane,
                commits: *commits,
            };
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
    /// Added to every write (`PutItem`, `UpdateItem`, `DeleteItem`, `BatchWriteItem`, `TransactWriteItems`): none
    /// but on multi-Region strongly consistent tables, where a write is answered once another Region has it.
    #[serde(default)]
    pub write_ms: f64,
}

impl Model {
    /// The reference model: 5 ms a call, 0.25 ms an item.
    pub const REFERENCE: Model = Model { per_call_ms: 5.0, per_item_ms: 0.25, write_ms: 0.0 };

    /// The reference model and the ones beside it: per call 3 and 10 ms, per item 0.1 and 0.5 ms.
    pub const SENSITIVITY: [Model; 5] = [
        Model::REFERENCE,
        Model { per_call_ms: 3.0, per_item_ms: 0.25, write_ms: 0.0 },
        Model { per_call_ms: 10.0, per_item_ms: 0.25, write_ms: 0.0 },
        Model { per_call_ms: 5.0, per_item_ms: 0.1, write_ms: 0.0 },
        Model { per_call_ms: 5.0, per_item_ms: 0.5, write_ms: 0.0 },
    ];

    /// A Lambda call through Step Functions, on top of its run time.
    pub const LAMBDA_CALL_MS: f64 = 25.0;

    fn cost(&self, t: &Traced) -> f64 {
        let writes = matches!(
            t.operation.as_str(),
            "PutItem" | "UpdateItem" | "DeleteItem" | "BatchWriteItem" | "TransactWriteItems"
        );
        self.per_call_ms + self.per_item_ms * t.items as f64 + if writes { self.write_ms } else { 0.0 }
    }
}

/// A request as [`critical_path`] sees it.
#[derive(Debug, Clone, Copy)]
pub struct Call<T> {
    pub sent: T,
    pub answered: T,
    pub lane: Option<Lane>,
}

/// The wall time of the traced calls under `model`: the heaviest chain of requests each sent after the one before
/// it was answered (never across two lanes of one run), each weighing what the model says it costs.
pub fn modelled_ms(calls: &[Traced], model: Model) -> f64 {
    chains(calls, model).into_iter().fold(0.0, f64::max)
}

/// The modelled time until the first request that commits was answered: the heaviest chain ending at it (see
/// [`modelled_ms`]); `None` when no request commits.
pub fn modelled_commit_ms(calls: &[Traced], model: Model) -> Option<f64> {
    let chains = chains(calls, model);
    let first = calls.iter().enumerate().filter(|(_, t)| t.commits).min_by_key(|(_, t)| t.answered)?.0;
    Some(chains[first])
}

/// The heaviest chain ending at each traced call, under `model`.
fn chains(calls: &[Traced], model: Model) -> Vec<f64> {
    let weighed: Vec<(Call<Instant>, f64)> =
        calls.iter().map(|t| (Call { sent: t.sent, answered: t.answered, lane: t.lane }, model.cost(t))).collect();
    heaviest_chains(&weighed)
}

/// The most requests in one chain where each was sent no earlier than the one before it was answered, and never from
/// one lane of a run to another.
pub fn critical_path<T: Ord + Copy>(calls: &[Call<T>]) -> usize {
    let weighed: Vec<(Call<T>, f64)> = calls.iter().map(|&c| (c, 1.0)).collect();
    heaviest_chains(&weighed).into_iter().fold(0.0, f64::max).round() as usize
}

/// For each call, the greatest total weight of one chain of calls ending at it, where each was sent no earlier than the
/// one before it was answered, and not from one lane of a run to another lane of the same run.
fn heaviest_chains<T: Ord + Copy>(calls: &[(Call<T>, f64)]) -> Vec<f64> {
    use std::collections::HashMap;
    let mut order: Vec<usize> = (0..calls.len()).collect();
    order.sort_by_key(|&i| (calls[i].0.sent, calls[i].0.answered));
    // Chains ending at each answered request, released to the bests once a later request starts after that answer:
    // the best of requests outside any run, of each run, and of each lane.
    let mut open: std::collections::BinaryHeap<std::cmp::Reverse<(T, usize)>> = Default::default();
    let mut chain = vec![0.0f64; calls.len()];
    let mut outside = 0.0f64;
    let mut by_window: HashMap<u64, f64> = HashMap::new();
    let mut by_lane: HashMap<Lane, f64> = HashMap::new();
    for i in order {
        let (call, weight) = calls[i];
        while let Some(std::cmp::Reverse((e, j))) = open.peek().copied() {
            if e > call.sent {
                break;
            }
            open.pop();
            match calls[j].0.lane {
                None => outside = outside.max(chain[j]),
                Some(l) => {
                    let w = by_window.entry(l.window).or_default();
                    *w = w.max(chain[j]);
                    let b = by_lane.entry(l).or_default();
                    *b = b.max(chain[j]);
                }
            }
        }
        let before = match call.lane {
            None => by_window.values().copied().fold(outside, f64::max),
            Some(l) => {
                let others = by_window.iter().filter(|(w, _)| **w != l.window).map(|(_, b)| *b).fold(outside, f64::max);
                others.max(by_lane.get(&l).copied().unwrap_or(0.0))
            }
        };
        chain[i] = before + weight;
        open.push(std::cmp::Reverse((call.answered, i)));
    }
    chain
}

/// `client`, noting every request in `tracer`.
pub fn traced_client(client: &aws_sdk_dynamodb::Client, tracer: &Tracer) -> aws_sdk_dynamodb::Client {
    aws_sdk_dynamodb::Client::from_conf(client.config().to_builder().interceptor(tracer.clone()).build())
}

/// A store on `env`'s DynamoDB whose client notes every request in `tracer`, with `in_flight` writes in flight.
pub fn traced_store(env: &crate::Env, tracer: &Tracer, in_flight: usize) -> dynamo_saga::Store {
    let cfg = dynamo_saga::Config { concurrency: in_flight, ..(*env.store.cfg).clone() };
    dynamo_saga::Store::new(traced_client(&env.client, tracer), cfg)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plain(calls: &[(u32, u32)]) -> Vec<Call<u32>> {
        calls.iter().map(|&(sent, answered)| Call { sent, answered, lane: None }).collect()
    }

    #[test]
    fn requests_side_by_side_count_once_and_one_after_another_each() {
        assert_eq!(critical_path::<u32>(&[]), 0);
        assert_eq!(critical_path(&plain(&[(0, 10)])), 1);
        assert_eq!(critical_path(&plain(&[(0, 10), (0, 10), (1, 9)])), 1, "three at once");
        assert_eq!(critical_path(&plain(&[(0, 10), (10, 20), (20, 30)])), 3, "one after another");
        // Sixteen at a time, three waves, plus a header write after them.
        let mut calls: Vec<(u32, u32)> = (0..48).map(|i| (i / 16 * 10, i / 16 * 10 + 9)).collect();
        calls.push((40, 45));
        assert_eq!(critical_path(&plain(&calls)), 4);
        assert_eq!(
            critical_path(&plain(&[(0, 100), (1, 2), (3, 4), (5, 6)])),
            3,
            "a long request beside a short chain"
        );
    }

    #[test]
    fn a_request_waits_for_its_own_lane_and_for_what_came_before_the_run_not_for_other_lanes() {
        let lane = |window, lane| Some(Lane { window, lane });
        let call = |sent, answered, l| Call { sent, answered, lane: l };
        // A header read, then a run of two lanes: lane 0 is answered fast three times while lane 1's one request is
        // slow; then a header write after the run.
        let calls = [
            call(0, 1, None),
            call(2, 3, lane(1, 0)),
            call(3, 4, lane(1, 0)),
            call(4, 5, lane(1, 0)),
            call(2, 9, lane(1, 1)),
            // Lane 1 sends its second request after lane 0's third answer: it waited for its own first request only.
            call(9, 10, lane(1, 1)),
            call(11, 12, None),
        ];
        assert_eq!(critical_path(&calls), 5, "read, lane 0's three, write; lane 1's two are on a shorter chain");
        // Timed the same without lanes, lane 1's second request would seem to wait for lane 0's third.
        let timed: Vec<Call<u32>> = calls.iter().map(|c| Call { lane: None, ..*c }).collect();
        assert_eq!(critical_path(&timed), 6);
        let mut late = calls.to_vec();
        late[5] = call(9, 10, lane(1, 1));
        late.insert(6, call(10, 11, lane(1, 1)));
        late.insert(7, call(11, 12, lane(1, 1)));
        late[8] = call(12, 13, None);
        assert_eq!(critical_path(&late), 6, "lane 1's four requests: read, four, write");
        let timed: Vec<Call<u32>> = late.iter().map(|c| Call { lane: None, ..*c }).collect();
        assert_eq!(critical_path(&timed), 8, "by timing alone, lane 1 would extend lane 0's chain");
        // A second run after the first waits for every lane of the first.
        let two_runs = [call(0, 5, lane(1, 0)), call(0, 9, lane(1, 1)), call(9, 10, lane(2, 0))];
        assert_eq!(critical_path(&two_runs), 2);
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
            lane: None,
            commits: op == "TransactWriteItems",
        };
        // Two single writes one after another, beside one TransactWriteItems of 100 items: 5 + 25 beats 5 + 5.
        let calls = [call(0, 1, "UpdateItem", 0), call(1, 2, "UpdateItem", 0), call(0, 2, "TransactWriteItems", 100)];
        assert_eq!(modelled_ms(&calls, Model::REFERENCE), 30.0);
        assert_eq!(modelled_ms(&calls[..2], Model::REFERENCE), 10.0);
        assert_eq!(modelled_ms(&calls[..2], Model { per_call_ms: 3.0, per_item_ms: 0.5, write_ms: 0.0 }), 6.0);
        assert_eq!(modelled_ms(&[], Model::REFERENCE), 0.0);
        // A cross-Region write latency weighs on writes only: the two writes' chain gains it twice, the one call once.
        let mrsc = Model { write_ms: 20.0, ..Model::REFERENCE };
        assert_eq!(modelled_ms(&calls[..2], mrsc), 50.0);
        let read_then_write = [call(0, 1, "GetItem", 0), call(1, 2, "PutItem", 0)];
        assert_eq!(modelled_ms(&read_then_write, mrsc), 30.0);
        assert_eq!(modelled_ms(&calls, mrsc), 50.0);
        // The commit is the TransactWriteItems here: the chain ending at it.
        assert_eq!(modelled_commit_ms(&calls, Model::REFERENCE), Some(30.0));
        assert_eq!(modelled_commit_ms(&calls[..2], Model::REFERENCE), None);
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
        let commit = body(serde_json::json!({"ExpressionAttributeValues": {":s0": {"S": "COMMITTED"}}}));
        assert!(commits("UpdateItem", Some(&commit)));
        assert!(!commits("GetItem", Some(&commit)));
        assert!(!commits("UpdateItem", Some(&transact)));
        assert_eq!(items_of("UpdateItem", Some(&transact)), 0);
        assert_eq!(items_of("BatchWriteItem", None), 0);
    }
}
