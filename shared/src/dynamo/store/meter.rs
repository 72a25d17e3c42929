//! What a phase run used: DynamoDB calls and the capacity DynamoDB reported, added up across its concurrent calls.

use std::sync::Mutex;

use aws_sdk_dynamodb::types::ConsumedCapacity;

/// DynamoDB calls and capacity one phase run used.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Usage {
    /// Requests sent to DynamoDB.
    pub calls: u64,
    /// Of those, requests that write (conditional failures included).
    pub writes: u64,
    /// Capacity units DynamoDB reported (`ReturnConsumedCapacity: TOTAL`).
    pub read_units: f64,
    pub write_units: f64,
}

impl Usage {
    pub fn add(&mut self, o: &Usage) {
        self.calls += o.calls;
        self.writes += o.writes;
        self.read_units += o.read_units;
        self.write_units += o.write_units;
    }
}

/// Collects [`Usage`] across the concurrent calls of one phase run.
#[derive(Debug, Default)]
pub struct Meter(Mutex<Usage>);

impl Meter {
    pub fn usage(&self) -> Usage {
        *self.0.lock().expect("meter lock")
    }
    /// Adds what another process used for this run (a share a worker ran: `share`).
    pub fn add(&self, other: &Usage) {
        self.0.lock().expect("meter lock").add(other)
    }
    pub(crate) fn record(&self, write: bool, cc: &[ConsumedCapacity]) {
        let mut u = self.0.lock().expect("meter lock");
        u.calls += 1;
        if write {
            u.writes += 1;
        }
        for c in cc {
            // DynamoDB Local reports only CapacityUnits; AWS also splits reads and writes.
            let (r, w) = match (c.read_capacity_units, c.write_capacity_units) {
                (None, None) => {
                    let units = c.capacity_units.unwrap_or(0.0);
                    if write {
                        (0.0, units)
                    } else {
                        (units, 0.0)
                    }
                }
                (r, w) => (r.unwrap_or(0.0), w.unwrap_or(0.0)),
            };
            u.read_units += r;
            u.write_units += w;
        }
    }
}
