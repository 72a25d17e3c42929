//! What is reported of each finished transaction: its metrics in CloudWatch Embedded Metric Format (EMF), one JSON log
//! line which CloudWatch Logs turns into metrics without any API call or permission ([`record`]), and the detail of its
//! end event ([`end_event`]).
//!
//! The Release function writes the line when its call is the one that finished the transaction (a repeated Release
//! finds it finished and writes nothing, so each transaction counts once; a call that dies between its finishing
//! write and the line loses that transaction's line). The namespace is `SAGA_METRICS_NAMESPACE` (the template's
//! `DynamoSaga/<stack name>`, beside the sweeper's metrics); the metrics have no dimensions:
//!
//! | metric | unit | value |
//! | --- | --- | --- |
//! | `Committed` | Count | 1 if it committed, else 0 |
//! | `RolledBack` | Count | 1 if it rolled back, else 0 |
//! | `Conflicts` | Count | attempts rolled back by another transaction, plus 1 if it ended cancelled with
//! `TransactionConflict` |
//! | `Attempts` | Count | attempts, the last included |
//! | `Actions` | Count | actions of the request |
//! | `WriteUnits` | Count | write capacity units of every call made for it, as DynamoDB reported them |
//! | `ReadUnits` | Count | read capacity units, likewise |
//! | `Duration` | Milliseconds | from Begin to the end of Release |
//! | `WaitedTime` | Milliseconds | time spent waiting for other transactions' locks |
//!
//! The line also carries, as properties searchable in CloudWatch Logs Insights but not metrics, `TransactionId`,
//! `State`, the first cancellation reason's code and action (`CancellationCode`, `CancelledAction`: an index, or
//! `Parent`), and the `ExecutionArn`.

use serde_json::{json, Value};

use crate::protocol::records::{Header, TxState};

/// The EMF record of a finished transaction in CloudWatch namespace `namespace`; `now_ms` is its timestamp (the end of
/// Release).
pub fn record(h: &Header, namespace: &str, now_ms: u64) -> Value {
    let cancellation = h.cancellation();
    let first_reason = cancellation.as_ref().and_then(|c| {
        c.parent_cancellation_reason.as_ref().map(|r| (r.code.clone(), Value::String("Parent".into()))).or_else(|| {
            c.cancellation_reasons
                .iter()
                .enumerate()
                .find(|(_, r)| r.code != "None")
                .map(|(i, r)| (r.code.clone(), json!(i)))
        })
    });
    let ended_in_conflict = cancellation.as_ref().is_some_and(|c| {
        c.cancellation_reasons
            .iter()
            .chain(c.parent_cancellation_reason.as_ref())
            .any(|r| r.code == "TransactionConflict")
    });
    let attempts = h.attempt as u64 + 1;
    let conflicts = h.attempt as u64 + u64::from(ended_in_conflict);
    let finished = h.finished_at.unwrap_or(now_ms);
    let waited = h.waited_ms + h.attempts.iter().map(|a| a.waited_ms).sum::<u64>();
    let metric = |name: &str, unit: &str| json!({"Name": name, "Unit": unit});
    let mut line = json!({
        "_aws": {
            "Timestamp": now_ms,
            "CloudWatchMetrics": [{
                "Namespace": namespace,
                "Dimensions": [[]],
                "Metrics": [
                    metric("Committed", "Count"),
                    metric("RolledBack", "Count"),
                    metric("Conflicts", "Count"),
                    metric("Attempts", "Count"),
                    metric("Actions", "Count"),
                    metric("WriteUnits", "Count"),
                    metric("ReadUnits", "Count"),
                    metric("Duration", "Milliseconds"),
                    metric("WaitedTime", "Milliseconds"),
                ],
            }],
        },
        "Committed": u64::from(h.state == TxState::Committed),
        "RolledBack": u64::from(h.state == TxState::RolledBack),
        "Conflicts": conflicts,
        "Attempts": attempts,
        "Actions": h.actions,
        "WriteUnits": h.usage.write_units,
        "ReadUnits": h.usage.read_units,
        "Duration": finished.saturating_sub(h.created_at),
        "WaitedTime": waited,
        "TransactionId": h.id,
        "State": h.state.as_str(),
    });
    if let Some((code, action)) = first_reason {
        line["CancellationCode"] = json!(code);
        line["CancelledAction"] = action;
    }
    if let Some(arn) = &h.execution_arn {
        line["ExecutionArn"] = json!(arn);
    }
    line
}

/// The most failed actions an end event names: an event holds 256 KB, a transaction any number of actions.
pub const END_EVENT_REASONS: usize = 100;

/// The detail of the event announcing that `h` has ended ([`crate::dynamo::store::Announce`]): its id, state, sizes,
/// attempts, timings and capacity, its execution and token when it has them, and for a rolled-back one the cancellation:
/// its message, the parent's reason, and the first [`END_EVENT_REASONS`] failed actions (`Index`, `Code`, `Message`;
/// `FailedActions` counts them all).
pub fn end_event(h: &Header, now_ms: u64) -> Value {
    let finished = h.finished_at.unwrap_or(now_ms);
    let mut detail = json!({
        "TransactionId": h.id,
        "State": h.state.as_str(),
        "Actions": h.actions,
        "Batches": h.batches,
        "Attempts": h.attempt as u64 + 1,
        "CreatedAtMs": h.created_at,
        "FinishedAtMs": finished,
        "DurationMs": finished.saturating_sub(h.created_at),
        "Usage": {"Calls": h.usage.calls, "WriteUnits": h.usage.write_units, "ReadUnits": h.usage.read_units},
    });
    if let Some(arn) = &h.execution_arn {
        detail["ExecutionArn"] = json!(arn);
    }
    if let Some(token) = &h.client_request_token {
        detail["ClientRequestToken"] = json!(token);
    }
    if let Some(c) = h.cancellation() {
        let failed: Vec<Value> = c
            .failed()
            .take(END_EVENT_REASONS)
            .map(|(i, r)| json!({"Index": i, "Code": r.code, "Message": r.message}))
            .collect();
        let mut cancellation = json!({"Message": c.message, "FailedActions": c.failed().count(), "Reasons": failed});
        if let Some(p) = &c.parent_cancellation_reason {
            cancellation["ParentReason"] = json!({"Code": p.code, "Message": p.message});
        }
        detail["Cancellation"] = cancellation;
    }
    detail
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::constants::{H_ACTIONS, H_BATCHES, H_STATE, TX_PK};
    use crate::error::CancellationReason;
    use crate::model::value::{n, s};
    use crate::protocol::records::{Attempt, Decision};

    fn header(state: TxState) -> Header {
        let item = [
            (TX_PK, s("01JDQ4W5Z3ZC4V8Y9B7Q2X1N6M")),
            (H_STATE, s(state.as_str())),
            (H_ACTIONS, n(250)),
            (H_BATCHES, n(3)),
        ];
        let mut h = Header::from_item(&item.into_iter().map(|(k, v)| (k.to_string(), v)).collect()).unwrap();
        h.created_at = 1_000;
        h.finished_at = Some(4_500);
        h.actions = 250;
        h.usage.write_units = 1340.0;
        h.usage.read_units = 12.5;
        h
    }

    /// Every metric the directive names is a top-level number of the record, with the directive's unit, as the EMF
    /// specification requires; a record CloudWatch would reject (a missing or non-numeric member) fails here.
    fn assert_valid_emf(line: &Value) {
        let aws = &line["_aws"];
        assert!(aws["Timestamp"].is_u64(), "{line}");
        let directives = aws["CloudWatchMetrics"].as_array().unwrap();
        assert_eq!(directives.len(), 1);
        let d = &directives[0];
        assert!(!d["Namespace"].as_str().unwrap().is_empty());
        for set in d["Dimensions"].as_array().unwrap() {
            for dim in set.as_array().unwrap() {
                assert!(line[dim.as_str().unwrap()].is_string(), "dimension {dim} must be a string member: {line}");
            }
        }
        let metrics = d["Metrics"].as_array().unwrap();
        assert!(metrics.len() <= 100);
        for m in metrics {
            let name = m["Name"].as_str().unwrap();
            assert!(line[name].is_number(), "metric {name} must be a number member: {line}");
            assert!(["Count", "Milliseconds"].contains(&m["Unit"].as_str().unwrap()));
        }
    }

    #[test]
    fn a_committed_transaction_counts_once_with_its_actions_units_and_duration() {
        let line = record(&header(TxState::Committed), "saga-tx", 5_000);
        assert_valid_emf(&line);
        let got: Vec<Value> =
            ["Committed", "RolledBack", "Conflicts", "Attempts", "Actions", "WriteUnits", "ReadUnits", "Duration"]
                .iter()
                .map(|k| line[*k].clone())
                .collect();
        assert_eq!(got, [json!(1), json!(0), json!(0), json!(1), json!(250), json!(1340.0), json!(12.5), json!(3_500)]);
        assert_eq!(line["State"].as_str(), Some("COMMITTED"));
        assert_eq!(line["_aws"]["CloudWatchMetrics"][0]["Namespace"], "saga-tx");
        assert!(line.get("CancellationCode").is_none());
    }

    #[test]
    fn a_retried_transaction_counts_its_conflicts_and_waits() {
        let mut h = header(TxState::Committed);
        h.attempt = 2;
        h.waited_ms = 40;
        h.attempts = (1..=2)
            .map(|n| Attempt {
                attempt: n,
                started_at_ms: 0,
                ended_at_ms: 0,
                waited_ms: 100,
                rolled_back_by: Some("older".into()),
                item: None,
                reason: "wounded".into(),
            })
            .collect();
        let line = record(&h, "saga-tx", 5_000);
        assert_valid_emf(&line);
        assert_eq!(
            (line["Attempts"].clone(), line["Conflicts"].clone(), line["WaitedTime"].clone()),
            (json!(3), json!(2), json!(240))
        );
    }

    #[test]
    fn a_rolled_back_transaction_names_its_first_reason() {
        let mut h = header(TxState::RolledBack);
        let conflict = CancellationReason::new(
            CancellationReason::TRANSACTION_CONFLICT,
            "held by 01JDQ4V2A8M3K7P5R9T1W6X4YB past LockWaitSeconds",
        );
        h.decision = Some(Decision::actions(vec![(3, conflict)]));
        let line = record(&h, "saga-tx", 5_000);
        assert_valid_emf(&line);
        assert_eq!((line["Committed"].clone(), line["RolledBack"].clone()), (json!(0), json!(1)));
        assert_eq!(
            (line["CancellationCode"].as_str(), line["CancelledAction"].clone()),
            (Some("TransactionConflict"), json!(3))
        );
        assert_eq!(line["Conflicts"], 1, "ending in TransactionConflict is a conflict");
    }
}
