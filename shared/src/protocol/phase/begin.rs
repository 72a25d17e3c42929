//! begin: validate everything, sort into lock order, plan batches, write the plan, the pages and the header.
//!
//! Nothing touches the caller's tables here, so a bad request writes nothing anywhere but (at most) its token
//! record. With a `ClientRequestToken`, beginning the same request again returns the same transaction; the same token
//! with a different body is rejected, as DynamoDB rejects it.
//!
//! A driver calls [`submit`], which carries out a request small enough for one `TransactWriteItems` call in that call
//! ([`direct`]) and begins the others.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use tracing::info;

use crate::constants::{
    ATTR_EXPIRES_AT, ATTR_TRANSIENT, EXISTENCE_SAMPLE, H_ABSENT_TABLES, H_ACTIONS, H_BATCHES, H_BODY_HASH,
    H_CREATED_AT, H_DEADLINE, H_EXECUTION, H_FORMAT, H_ITEMS_CHECKED, H_LOCK_OPEN, H_LOCK_PASS, H_LOCK_STARTED,
    H_LOCK_WAIT, H_OPEN_SHARD, H_PAGES, H_PARENT, H_PROTOCOL, H_STATE, H_TOKEN, H_UPDATED_AT, H_VERSION,
    MAX_TRANSACT_BYTES, OPEN_SHARD_PREFIX, PAGE_TARGET_BYTES, PROTOCOL, RECORD_FORMAT, T_TX,
};
use crate::dynamo::store::{Meter, Store, Usage, Written};
use crate::error::TxError;
use crate::model::plan;
use crate::model::request::{self, Request, ValidRequest};
use crate::model::schema::TableSchema;
use crate::model::value::Item;
use crate::model::value::{n, now_ms, s};
use crate::protocol::one_call::{self, Direct};
use crate::protocol::records::{self, TxState};

/// A transaction that exists, ready for the lock phase.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Begun {
    pub transaction_id: String,
    pub actions: usize,
    pub batches: usize,
    /// False when a request with the same `ClientRequestToken` had already begun this transaction.
    pub created: bool,
    pub state: TxState,
    pub usage: Usage,
    /// The transaction's header, when this call wrote it whole (it carried the request out in one call) or found the
    /// transaction begun before.
    #[serde(skip)]
    pub header: Option<Box<records::Header>>,
    /// Whether this call carried the request out in one call: the transaction has ended here.
    #[serde(skip)]
    pub ended_here: bool,
}

/// Validates a request against the tables' key schemas without writing anything.
pub async fn validate<'a>(store: &Store, m: &Meter, body: impl Into<Request<'a>>) -> Result<ValidRequest, TxError> {
    let parsed = body.into().parse(&store.cfg)?;
    let mut schemas: HashMap<String, TableSchema> = HashMap::new();
    for t in request::tables_of(&parsed) {
        let schema = store.schema(m, &t).await?;
        schemas.insert(t, (*schema).clone());
    }
    let mut valid = request::validate(parsed, &schemas)?;
    plan::sort(&mut valid.actions, &schemas);
    Ok(valid)
}

/// Begins a transaction this process then drives (see [`submit_here`]).
pub async fn begin<'a>(store: &Store, body: impl Into<Request<'a>>) -> Result<Begun, TxError> {
    begin_as(store, body.into(), None, None, false, true).await
}

/// `begin`, recording the Step Functions execution that drives the transaction (with none, this process drives it).
#[cfg(feature = "internals")]
pub async fn begin_with_execution<'a>(
    store: &Store,
    body: impl Into<Request<'a>>,
    execution_arn: Option<&str>,
) -> Result<Begun, TxError> {
    begin_as(store, body.into(), execution_arn, None, false, execution_arn.is_none()).await
}

/// What a driver calls: `begin`, or, for a request one `TransactWriteItems` call can carry ([`direct`]), that one
/// call, after which the transaction has ended (`state` is `COMMITTED` or `ROLLED_BACK` and it is finished). A
/// request that meets another transaction's lock that way is begun as `begin` does. `id` is the transaction's id
/// when the driver chose it (see [`execution_id`]); beginning it again returns the transaction as it is.
pub async fn submit<'a>(
    store: &Store,
    body: impl Into<Request<'a>>,
    execution_arn: Option<&str>,
    id: Option<&str>,
) -> Result<Begun, TxError> {
    begin_as(store, body.into(), execution_arn, id, store.cfg.one_call(), false).await
}

/// [`submit`] for a driver that then runs the transaction's steps in this process (the in-process coordinator, the
/// CLI in-process): begin also claims the first lock pass for it (`phase::lock`), which saves its first lock step a
/// header write.
pub async fn submit_here<'a>(store: &Store, body: impl Into<Request<'a>>) -> Result<Begun, TxError> {
    begin_as(store, body.into(), None, None, store.cfg.one_call(), true).await
}

/// The transaction id of the Step Functions execution `arn`, started at `start_time` (its `$$.Execution.StartTime`,
/// RFC 3339): a ULID of that time whose random part comes from the ARN. A Begin task that runs twice (Lambda or the
/// state machine retrying it) begins one transaction, never two, even when the first run carried it out in one call.
#[cfg(feature = "internals")]
pub fn execution_id(arn: &str, start_time: &str) -> Result<String, TxError> {
    use aws_smithy_types::date_time::{DateTime, Format};
    use sha2::{Digest, Sha256};
    let ms = DateTime::from_str(start_time, Format::DateTimeWithOffset)
        .ok()
        .and_then(|t| u64::try_from(t.to_millis().ok()?).ok())
        .ok_or_else(|| TxError::invalid(None, format!("ExecutionStartTime {start_time:?} is not an RFC 3339 time")))?;
    let digest = Sha256::digest(arn.as_bytes());
    let random = digest[..10].iter().fold(0u128, |r, b| (r << 8) | u128::from(*b));
    Ok(ulid::Ulid::from_parts(ms, random).to_string())
}

/// `begin` under an id chosen before (a staged transaction's, or an execution's); beginning it again returns the
/// transaction as it is. With `direct`, a request one call can carry is carried out in that call. `here`: this process
/// drives the transaction, and begin claims its first lock pass.
pub(crate) async fn begin_as(
    store: &Store,
    body: Request<'_>,
    execution_arn: Option<&str>,
    id: Option<&str>,
    direct: bool,
    here: bool,
) -> Result<Begun, TxError> {
    let m = Meter::default();
    if let Some(id) = id {
        match records::read_header(store, &m, id).await {
            Ok(h) => return Ok(already_begun(h, m.usage())),
            Err(TxError::NotFound(_)) => {}
            Err(e) => return Err(e),
        }
    }
    let valid = validate(store, &m, body).await?;
    let now = now_ms();
    let tx_id = id.map_or_else(|| ulid::Ulid::new().to_string(), String::from);
    let tx_id = match by_token(store, &m, &valid, tx_id, now).await? {
        Ok(tx_id) => tx_id,
        Err(begun) => return Ok(*begun),
    };

    let deadline = now + valid.options.deadline_seconds * 1000;
    let actions = valid.actions.len();
    let ended = |d: Direct, usage: Usage, tx_id: String| match d {
        Direct::Ended(h) => Some(Begun {
            transaction_id: tx_id,
            actions,
            batches: 0,
            created: true,
            state: h.state,
            usage,
            header: Some(h),
            ended_here: true,
        }),
        Direct::Existing(h) => Some(already_begun(*h, usage)),
        Direct::Protocol => None,
    };
    if direct && one_call::eligible(&valid) {
        let header = header_item(store, &tx_id, &valid, now, deadline, execution_arn);
        let d = one_call::run(store, &m, &tx_id, &valid, header).await?;
        if let Some(b) = ended(d, m.usage(), tx_id.clone()) {
            return Ok(b);
        }
    }
    let refused = super::refusals::refused_items(store, &m, &tx_id, &valid.actions, true).await?;
    if !refused.is_empty() {
        info!(tx_id = %tx_id, refused = refused.len(), "an item DynamoDB would refuse: cancelled before anything was locked");
        let mut header = header_item(store, &tx_id, &valid, now, deadline, execution_arn);
        one_call::finish(store, &m, &mut header);
        let d = one_call::cancelled(store, &m, &tx_id, header, refused).await?;
        return ended(d, m.usage(), tx_id.clone())
            .ok_or_else(|| TxError::Internal("a cancelled header was not written".into()));
    }

    let (plan, stream) =
        plan::build(&valid.actions, store.cfg.batch_size, MAX_TRANSACT_BYTES - 64 * 1024, PAGE_TARGET_BYTES);
    let (written, absent) = futures::join!(
        crate::protocol::stored_request::write_plan(store, &m, &tx_id, &plan, &stream, deadline),
        absent_tables(store, &m, &valid.actions)
    );
    written?;
    let absent = absent?;

    let mut header = header_item(store, &tx_id, &valid, now, deadline, execution_arn);
    // Driven in this process (not by a state machine's Lock function), the first lock pass is claimed here, for the
    // first run of batches: this process's lock step takes it without a write of its own (`phase::lock`).
    let claimed = here;
    protocol_fields(&mut header, store, &tx_id, &plan, &absent, now, claimed);
    let created = records::put_header(store, &m, header).await?;
    if created && claimed {
        store.caches.keep_claim(&tx_id, now);
    }
    info!(tx_id = %tx_id, actions = plan.action_count(), batches = plan.batch_count(), created, "begun");
    Ok(Begun {
        transaction_id: tx_id,
        actions: plan.action_count(),
        batches: plan.batch_count(),
        created,
        state: TxState::Pending,
        usage: m.usage(),
        header: None,
        ended_here: false,
    })
}

/// The id to begin under: `tx_id`, or the transaction the request's `ClientRequestToken` already names, whose first
/// attempt stopped between the token and the header. `Err` with the answer when that transaction has begun.
async fn by_token(
    store: &Store,
    m: &Meter,
    valid: &ValidRequest,
    tx_id: String,
    now: u64,
) -> Result<Result<String, Box<Begun>>, TxError> {
    let Some(token) = &valid.client_request_token else { return Ok(Ok(tx_id)) };
    match claim_token(store, m, token, &tx_id, valid, now).await? {
        Claim::New => Ok(Ok(tx_id)),
        Claim::Existing(existing) => match records::read_header(store, m, &existing).await {
            Ok(h) => {
                info!(tx_id = %existing, "ClientRequestToken seen before: returning the existing transaction");
                Ok(Err(Box::new(already_begun(h, m.usage()))))
            }
            // The first attempt stopped between the token and the header: finish what it started.
            Err(TxError::NotFound(_)) => Ok(Ok(existing)),
            Err(e) => Err(e),
        },
    }
}

/// The header fields of a transaction the protocol carries out in batches: its plan's shape, the open-transactions
/// index, the tables found mostly absent (`absent`), and with `claimed` the first lock pass, claimed for this process.
fn protocol_fields(
    header: &mut Item,
    store: &Store,
    tx_id: &str,
    plan: &plan::Plan,
    absent: &[String],
    now: u64,
    claimed: bool,
) {
    let shard = records::shard_of(tx_id);
    for (k, v) in [
        (H_STATE, s(TxState::Pending.as_str())),
        (H_BATCHES, n(plan.batch_count())),
        (H_PAGES, n(plan.page_count())),
        (H_PROTOCOL, n(PROTOCOL)),
        (H_ITEMS_CHECKED, n(1)),
        (H_OPEN_SHARD, s(format!("{OPEN_SHARD_PREFIX}{shard}"))),
        (H_LOCK_PASS, n(now)),
    ] {
        header.insert(k.to_string(), v);
    }
    if !absent.is_empty() {
        header.insert(H_ABSENT_TABLES.to_string(), s(serde_json::to_string(&absent).expect("table names serialise")));
    }
    if claimed {
        header.insert(H_LOCK_STARTED.to_string(), n(super::run_end(&store.cfg, 0, plan.batch_count())));
        // Open from here: a driver of this process that dies mid-pass leaves it so (`phase::lock`).
        header.insert(H_LOCK_OPEN.to_string(), n(now));
    }
}

/// The tables most of whose items `actions` name do not exist: a sample of up to [`EXISTENCE_SAMPLE`] of each table's
/// keys, spread over its actions, read eventually consistent while begin writes the request. Lock's first write to an
/// item guesses whether it exists, and a wrong guess costs one more conditional write: an insert says so itself
/// (`attribute_not_exists`), and on a table where most items are new (upserts: `ADD` to new counters, say) every
/// first write expects the item absent. An item another transaction created only to hold its lock, or a tombstone,
/// counts as absent. Tables of inserts only are not read.
async fn absent_tables(
    store: &Store,
    m: &Meter,
    actions: &[crate::model::request::Action],
) -> Result<Vec<String>, TxError> {
    let mut by_table: std::collections::BTreeMap<&str, Vec<&Item>> = Default::default();
    for a in actions.iter().filter(|a| !a.inserts()) {
        by_table.entry(&a.table).or_default().push(&a.key);
    }
    let reads = by_table.into_iter().map(|(table, keys)| async move {
        let step = keys.len().div_ceil(EXISTENCE_SAMPLE).max(1);
        let sample: Vec<Item> = keys.iter().step_by(step).map(|k| (*k).clone()).collect();
        let found = store.batch_get_eventually(m, table, sample.clone()).await?;
        let present = found
            .iter()
            .filter(|i| !crate::model::item_attrs::flag(i, ATTR_TRANSIENT) && !crate::model::request::is_tombstone(i))
            .count();
        Ok::<_, TxError>((present * 2 < sample.len()).then(|| table.to_string()))
    });
    let found = futures::future::try_join_all(reads).await?;
    Ok(found.into_iter().flatten().collect())
}

/// The header attributes every transaction has, whichever way it is carried out: id, version, times, counts, the
/// request's hash, its parent, token and options, and the execution.
fn header_item(
    store: &Store,
    tx_id: &str,
    valid: &ValidRequest,
    now: u64,
    deadline: u64,
    execution_arn: Option<&str>,
) -> Item {
    let mut header = records::header_key(tx_id);
    for (k, v) in [
        (H_VERSION, n(1)),
        (H_FORMAT, n(RECORD_FORMAT)),
        (H_CREATED_AT, n(now)),
        (H_UPDATED_AT, n(now)),
        (H_DEADLINE, n(deadline)),
        (H_ACTIONS, n(valid.actions.len())),
        (H_BODY_HASH, s(&valid.body_hash)),
        (ATTR_EXPIRES_AT, n(deadline / 1000 + store.cfg.retention.as_secs())),
    ] {
        header.insert(k.to_string(), v);
    }
    if let Some(p) = &valid.parent {
        header.insert(H_PARENT.into(), s(serde_json::to_string(p).expect("parents serialise")));
    }
    if let Some(t) = &valid.client_request_token {
        header.insert(H_TOKEN.into(), s(t));
    }
    if let Some(w) = valid.options.lock_wait_seconds {
        header.insert(H_LOCK_WAIT.into(), n(w));
    }
    if let Some(arn) = execution_arn {
        header.insert(H_EXECUTION.into(), s(arn));
    }
    header
}

impl Begun {
    /// Reports the end of a transaction this run carried out in one call, with the capacity that call consumed: its
    /// metrics line (CloudWatch EMF, [`crate::protocol::metrics`]) when metrics are on, and its end event when the
    /// store announces ends ([`Store::announce`]). Such a transaction never reaches the Release function, which reports
    /// every other one's.
    pub async fn report_end(&self, store: &Store) {
        let Some(h) = self.header.as_deref().filter(|_| self.ended_here) else { return };
        let h = records::Header { usage: self.usage, ..h.clone() };
        if let Some(namespace) = store.cfg.metrics_namespace.as_deref() {
            println!("{}", crate::protocol::metrics::record(&h, namespace, now_ms()));
        }
        store.announce(crate::protocol::metrics::end_event(&h, now_ms())).await;
    }
}

fn already_begun(h: records::Header, usage: Usage) -> Begun {
    Begun {
        transaction_id: h.id.clone(),
        actions: h.actions,
        batches: h.batches,
        created: false,
        state: h.state,
        usage,
        header: Some(Box::new(h)),
        ended_here: false,
    }
}

enum Claim {
    New,
    Existing(String),
}

/// Maps a ClientRequestToken to a transaction id, once; tells a retry (same body) from a reuse (different body).
async fn claim_token(
    store: &Store,
    m: &Meter,
    token: &str,
    tx_id: &str,
    valid: &ValidRequest,
    now: u64,
) -> Result<Claim, TxError> {
    let hash = valid.body_hash.as_str();
    let mut rec = records::token_key(token);
    rec.insert(T_TX.into(), s(tx_id));
    rec.insert(H_BODY_HASH.into(), s(hash));
    rec.insert(ATTR_EXPIRES_AT.into(), n(now / 1000 + store.cfg.retention.as_secs()));
    let old = match store.put_record_if_absent(m, rec, None).await? {
        Written::Done(_) => return Ok(Claim::New),
        Written::ConditionFailed(Some(old)) => old,
        Written::ConditionFailed(None) => store
            .get(m, &store.cfg.tx_table, records::token_key(token))
            .await?
            .ok_or_else(|| TxError::Internal("token record vanished".into()))?,
    };
    let field = |k: &str| match old.get(k) {
        Some(aws_sdk_dynamodb::types::AttributeValue::S(v)) => v.clone(),
        _ => String::new(),
    };
    // A token claimed before requests were hashed typed carries the hash of the request's JSON as it came.
    let stored = field(H_BODY_HASH);
    if stored != hash && valid.legacy_hash.as_deref() != Some(stored.as_str()) {
        return Err(TxError::invalid(
            None,
            format!(
                "ClientRequestToken {token:?} was already used with a different request (IdempotentParameterMismatch)"
            ),
        ));
    }
    Ok(Claim::Existing(field(T_TX)))
}
