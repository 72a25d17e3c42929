//! What a store keeps in memory for the later calls and steps of the same process: tables' key schemas and indexes,
//! and of each transaction its plan, request pages, last header and unused lock pass. A store's clones share them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::OnceCell;

use crate::model::billing;
use crate::model::plan::Plan;
use crate::model::schema::TableSchema;
use crate::model::value::Item;

/// The caches of one store and its clones.
#[derive(Default)]
pub(crate) struct Caches {
    /// Each table's key schema, described once per store: the first caller describes it, and callers that ask while
    /// it does (a phase's first writes, side by side) wait for its answer instead of sending their own.
    schemas: Mutex<HashMap<String, Arc<OnceCell<Arc<TableSchema>>>>>,
    /// Each described table's global secondary indexes, for billing.
    indexes: Mutex<HashMap<String, Vec<billing::Index>>>,
    /// Plans this process wrote or read, by transaction id: a plan never changes once written, so each phase run
    /// after the first in a process saves a read.
    plans: Kept<Arc<Plan>>,
    /// Lock passes this process claimed and has not used yet, by transaction id (`phase::lock`): the next lock step
    /// of the transaction in this process takes its pass from here instead of claiming one.
    claims: Kept<u64>,
    /// The header this process last wrote of each transaction, as the write left it: the driver's next step starts
    /// from it instead of reading it again (`phase::resume`).
    headers: Kept<Item>,
    /// Request pages this process wrote or read, by transaction id and page number, and their bytes in all: pages
    /// never change once written, so the phases of a transaction begun or run before in this process read none.
    pages: Mutex<Pages>,
}

impl Caches {
    /// The cell that holds `table`'s key schema once it is described.
    pub(crate) fn schema_cell(&self, table: &str) -> Arc<OnceCell<Arc<TableSchema>>> {
        let mut schemas = self.schemas.lock().expect("schema cache");
        match schemas.get(table) {
            Some(cell) => cell.clone(),
            None => schemas.entry(table.to_string()).or_default().clone(),
        }
    }

    /// Keeps the global secondary indexes of `table`, as its description gave them.
    pub(crate) fn keep_indexes(&self, table: &str, indexes: Vec<billing::Index>) {
        self.indexes.lock().expect("index cache").insert(table.to_string(), indexes);
    }

    /// The global secondary indexes of `table`, once it is described.
    pub(crate) fn indexes(&self, table: &str) -> Vec<billing::Index> {
        self.indexes.lock().expect("index cache").get(table).cloned().unwrap_or_default()
    }

    /// Keeps `header`, the header item of `tx_id` as this process's write just left it.
    pub(crate) fn keep_header(&self, tx_id: &str, header: Item) {
        self.headers.keep(tx_id, header)
    }

    /// Takes the header item of `tx_id` this process last wrote, if it has not been taken since.
    pub(crate) fn take_header(&self, tx_id: &str) -> Option<Item> {
        self.headers.take(tx_id)
    }

    /// Keeps page `page` of `tx_id`'s request.
    pub(crate) fn keep_page(&self, tx_id: &str, page: usize, bytes: Arc<Vec<u8>>) {
        let mut pages = self.pages.lock().expect("pages lock");
        if pages.1 + bytes.len() > PAGE_BYTES_KEPT {
            *pages = Default::default();
        }
        pages.1 += bytes.len();
        pages.0.insert((tx_id.to_string(), page), bytes);
    }

    /// Page `page` of `tx_id`'s request, if this process wrote or read it.
    pub(crate) fn known_page(&self, tx_id: &str, page: usize) -> Option<Arc<Vec<u8>>> {
        self.pages.lock().expect("pages lock").0.get(&(tx_id.to_string(), page)).cloned()
    }

    /// Keeps lock pass `pass`, which this process claimed for transaction `tx_id` and has not used, for the next lock
    /// step of that transaction in this process.
    pub(crate) fn keep_claim(&self, tx_id: &str, pass: u64) {
        self.claims.keep(tx_id, pass)
    }

    /// Takes the lock pass this process kept for `tx_id`, if any: one lock step uses it, never two.
    pub(crate) fn take_claim(&self, tx_id: &str) -> Option<u64> {
        self.claims.take(tx_id)
    }

    /// The plan of `tx_id` if this process has written or read it.
    pub(crate) fn known_plan(&self, tx_id: &str) -> Option<Arc<Plan>> {
        self.plans.get(tx_id)
    }

    /// Keeps the plan of `tx_id`, which is in the transactions table.
    pub(crate) fn keep_plan(&self, tx_id: &str, plan: Arc<Plan>) {
        self.plans.keep(tx_id, plan)
    }
}

/// Request pages by transaction id and page number, and their bytes in all.
type Pages = (HashMap<(String, usize), Arc<Vec<u8>>>, usize);

/// The most bytes of request pages a store keeps; past it, it forgets them all and starts again.
const PAGE_BYTES_KEPT: usize = 64 * 1024 * 1024;

/// The most plans, headers or lock passes a store keeps; past it, it forgets them all and starts again.
const PLANS_KEPT: usize = 64;

/// Values a store keeps by transaction id for the later steps of the same process, at most [`PLANS_KEPT`] of them.
struct Kept<V>(Mutex<HashMap<String, V>>);

impl<V> Default for Kept<V> {
    fn default() -> Self {
        Self(Mutex::default())
    }
}

impl<V: Clone> Kept<V> {
    fn keep(&self, tx_id: &str, value: V) {
        let mut kept = self.0.lock().expect("kept values lock");
        if kept.len() >= PLANS_KEPT {
            kept.clear();
        }
        kept.insert(tx_id.to_string(), value);
    }

    fn get(&self, tx_id: &str) -> Option<V> {
        self.0.lock().expect("kept values lock").get(tx_id).cloned()
    }

    fn take(&self, tx_id: &str) -> Option<V> {
        self.0.lock().expect("kept values lock").remove(tx_id)
    }
}
