//! What a lock run met besides the locks it took, and its form on the wire between a run and its workers.

use super::Contention;
use crate::dynamo::store::Meter;
use crate::error::{CancellationReason, TxError};
use crate::model::item_attrs::LockId;
use crate::model::value::{self, item_to_json, Item};

/// What a run met besides locks taken.
#[derive(Default)]
pub(super) struct Met {
    /// Conditions that failed.
    pub(super) failed: Vec<(usize, CancellationReason)>,
    /// Updates DynamoDB would refuse (protocol 2).
    pub(super) refused: Vec<(usize, CancellationReason)>,
    /// Items other transactions hold.
    pub(super) contention: Vec<Held>,
    /// Items this run holds, with the ids their locks carry.
    pub(super) taken: Vec<Taken>,
    /// A later pass of this attempt holds the lock phase.
    pub(super) superseded: bool,
    /// A lock write had no answer that says whether DynamoDB carried it out: it may land later.
    pub(super) unknown: bool,
    /// The first batch a share run here for want of a worker left for the call's deadline
    /// ([`crate::protocol::shares::Shared::stopped_at`]).
    pub(super) stopped_at: Option<usize>,
}

/// [`Met`] as a share's result crosses from a worker (`share`): items in DynamoDB JSON, and what the worker's
/// writes used.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct MetWire {
    pub(super) failed: Vec<(usize, CancellationReason)>,
    pub(super) refused: Vec<(usize, CancellationReason)>,
    /// Each other transaction's item met: its batch, the contention, the item's table and key, and whether the
    /// holder was read from a lock.
    pub(super) contention: Vec<HeldWire>,
    /// Each item locked: batch, action, the lock's id, table and key.
    pub(super) taken: Vec<(usize, usize, LockId, String, serde_json::Value)>,
    pub(super) superseded: bool,
    pub(super) unknown: bool,
    pub(super) usage: Option<crate::dynamo::store::Usage>,
}

/// A [`Held`] as it crosses: batch, contention, table and key, whether the holder was read from a lock.
pub(super) type HeldWire = (usize, Contention, Option<(String, serde_json::Value)>, bool);

impl Met {
    pub(super) fn wire(self, usage: Option<crate::dynamo::store::Usage>) -> MetWire {
        MetWire {
            failed: self.failed,
            refused: self.refused,
            contention: self
                .contention
                .into_iter()
                .map(|h| {
                    let key = h.contention.key.as_ref().map(|(t, k)| (t.clone(), item_to_json(k)));
                    let locked = h.contention.locked;
                    (h.batch, h.contention, key, locked)
                })
                .collect(),
            taken: self.taken.into_iter().map(|t| (t.batch, t.index, t.id, t.table, item_to_json(&t.key))).collect(),
            superseded: self.superseded,
            unknown: self.unknown,
            usage,
        }
    }

    /// Adds a share's result to this run's, and what its writes used to the run's meter `m`.
    pub(super) fn absorb(&mut self, m: &Meter, w: MetWire) -> Result<(), TxError> {
        let item = |v: &serde_json::Value| {
            value::item_from_json(v).map_err(|e| TxError::Internal(format!("a lock share's item: {e}")))
        };
        self.failed.extend(w.failed);
        self.refused.extend(w.refused);
        for (batch, mut contention, key, locked) in w.contention {
            contention.key = key.map(|(t, k)| Ok::<_, TxError>((t, item(&k)?))).transpose()?;
            contention.locked = locked;
            self.contention.push(Held { batch, contention });
        }
        for (batch, index, id, table, key) in w.taken {
            self.taken.push(Taken { batch, index, id, table, key: item(&key)? });
        }
        self.superseded |= w.superseded;
        self.unknown |= w.unknown;
        if let Some(u) = w.usage {
            m.add(&u);
        }
        Ok(())
    }
}

/// An item another transaction holds, and the batch it is in.
pub(super) struct Held {
    pub(super) batch: usize,
    pub(super) contention: Contention,
}

/// An item a pass holds, and the id its lock carries.
pub(super) struct Taken {
    pub(super) batch: usize,
    pub(super) index: usize,
    pub(super) id: LockId,
    pub(super) table: String,
    pub(super) key: Item,
}
