//! Settings, read once (from the environment in the Lambdas and the CLI, or built in code by library users).

use std::collections::BTreeSet;
use std::time::Duration;

use crate::constants::{
    DEFAULT_ATTEMPT_TIMEOUT_SECONDS, DEFAULT_IDLE_CONNECTION_SECONDS, DEFAULT_OPERATION_TIMEOUT_SECONDS,
    DEFAULT_REVISIT_AFTER_SECONDS, ENV_ALLOWED_TABLES, ENV_ATTEMPT_TIMEOUT_SECONDS, ENV_BATCH_SIZE,
    ENV_COMMITTED_READS, ENV_DEADLINE_SECONDS, ENV_DIRECT, ENV_EVENTUAL_REGION, ENV_EXECUTION_WAITS, ENV_FAN_OUT,
    ENV_IDLE_CONNECTION_SECONDS, ENV_IN_FLIGHT, ENV_LEASE_SECONDS, ENV_MAX_ACTIONS, ENV_MAX_DEADLINE_SECONDS,
    ENV_MAX_REQUEST_BYTES, ENV_METRICS_NAMESPACE, ENV_MULTI_REGION, ENV_OPERATION_TIMEOUT_SECONDS, ENV_PRECOMMIT_CHECK,
    ENV_RETENTION_SECONDS, ENV_REVISIT_AFTER_SECONDS, ENV_SHARE_BATCHES, ENV_TX_TABLE, EXECUTION_WAITS,
    LAMBDA_MEMORY_MB, MAX_DEADLINE_SECONDS, MAX_FAN_OUT, MAX_TRANSACT_ACTIONS, MEMORY_BYTES_PER_REQUEST_BYTE,
    RUN_BATCHES,
};
use crate::error::TxError;

#[derive(Debug, Clone)]
pub struct Config {
    /// The transactions table (headers, plans, request pages, item images, token records).
    pub tx_table: String,
    /// Tables a transaction may touch; `None` allows every table but the transactions table itself.
    pub allowed_tables: Option<BTreeSet<String>>,
    /// Most actions in one TransactWriteItems call, the fencing ConditionCheck included (DynamoDB allows 100).
    pub batch_size: usize,
    /// Most actions one transaction may have.
    pub max_actions: usize,
    /// How long a transaction may go without a header write before others may treat it as stale.
    pub lease: Duration,
    /// How long finished records (header, plan, pages, images, tokens) are kept before TTL deletes them.
    pub retention: Duration,
    /// Default for `Options.DeadlineSeconds`: a pending transaction older than this is rolled back.
    pub default_deadline: Duration,
    /// Default for `Options.LockWaitSeconds`: the longest a transaction waits for another's lock.
    pub default_lock_wait: Duration,
    /// Concurrent DynamoDB requests one phase run may have in flight (`SAGA_IN_FLIGHT`).
    pub concurrency: usize,
    /// Shares one lock, apply or rollback step is cut into (`SAGA_FAN_OUT`), each run side by side: by the store's
    /// workers when it has them ([`crate::dynamo::store::Store::with_workers`], another invocation of the phase's
    /// Lambda function each), otherwise in this process. 1, the default, runs one share a step, as a single process
    /// gains nothing from more.
    pub fan_out: usize,
    /// Most batches one share takes (`SAGA_SHARE_BATCHES`, default [`RUN_BATCHES`]): a step takes up to `fan_out`
    /// times this, dealt evenly to as many shares as `fan_out` allows while each takes at least a quarter of this.
    pub share_batches: usize,
    /// Largest `Options.DeadlineSeconds` a request may ask for (and cap on `default_deadline`): 604,800 (a week), or
    /// less where the driver cannot outlive it, such as an Express workflow's 5 minutes.
    pub max_deadline: Duration,
    /// The CloudWatch namespace the Release function writes each finished transaction's metrics to, as an EMF line
    /// (`metrics`); `None`: no metrics.
    pub metrics_namespace: Option<String>,
    /// Largest staged request, in bytes of JSON, that `staging::seal` takes: sealing holds the whole request in
    /// memory, several times over. `None`: no limit.
    pub max_request_bytes: Option<usize>,
    /// Whether a request one `TransactWriteItems` call can carry (fewer than 100 actions, no `Parent`, tombstone or
    /// ratchet) is carried out in that one call instead of the protocol (see `direct`).
    pub direct: bool,
    /// How a committed read ([`crate::drivers::read::Isolation::Committed`]) answers for an item a committed
    /// transaction has not applied yet (`SAGA_COMMITTED_READS`): evaluate the transaction's write on the item, writing
    /// nothing (the default), or apply that write first and read the item it leaves.
    pub committed_reads: CommittedReads,
    /// Which writes DynamoDB itself judges before a transaction of batches commits (`SAGA_PRECOMMIT_CHECK`), beyond
    /// the rules this library checks (`judge`).
    pub precommit_check: PrecommitCheck,
    /// Most lock waits one state machine execution makes (`SAGA_EXECUTION_WAITS`, default 2,000): the
    /// bound that keeps a Standard execution inside its 25,000 history events however long `LockWaitSeconds` and the
    /// deadline allow. Past it the transaction is cancelled with `TransactionConflict` naming the holder, as a wait
    /// past `LockWaitSeconds` is. The in-process coordinator keeps no history and has no such bound.
    pub execution_waits: u32,
    /// The longest one HTTP attempt of a DynamoDB request may take before the client gives up on it
    /// (`SAGA_ATTEMPT_TIMEOUT_SECONDS`, default 10): the SDK's operation attempt timeout.
    pub attempt_timeout: Duration,
    /// The longest a DynamoDB request may take with all its retries (`SAGA_OPERATION_TIMEOUT_SECONDS`, default 60): the
    /// SDK's operation timeout.
    pub operation_timeout: Duration,
    /// How long after a transaction ended a write its drivers sent may still land (`SAGA_REVISIT_AFTER_SECONDS`,
    /// default 420): a transaction that may have such writes ([`crate::protocol::records::Header::needs_revisit`]) is
    /// visited again once this has passed since it finished, and whatever of it remains is removed. On AWS the bound is
    /// a lock pass's longest life (the lease) plus the five minutes DynamoDB accepts a signed request for (SigV4).
    pub revisit_after: Duration,
    /// The longest a pooled connection to DynamoDB may sit idle and still carry a request
    /// (`SAGA_IDLE_CONNECTION_SECONDS`, default 20); an older one is closed and the request goes on a new connection.
    /// DynamoDB closes connections that sat idle, and a client that was not running meanwhile (a warm Lambda
    /// function between invocations) finds out only when it writes a request on one: the request is lost with the
    /// connection, and its answer with it. Kept below the service's idle close, a warm function's first request after
    /// a pause opens a fresh connection instead. Only for stores whose client this library builds
    /// ([`crate::Store::from_conf`], [`crate::Store::connect`]).
    pub idle_connection: Duration,
    /// Whether the tables are multi-Region strongly consistent global tables (`SAGA_MULTI_REGION_CONSISTENCY`), where
    /// the protocol sends no `TransactWriteItems` ([`MultiRegion`]).
    pub multi_region: MultiRegion,
    /// The one Region that may drive transactions on global tables with multi-Region eventual consistency
    /// (`SAGA_EVENTUAL_CONSISTENCY_REGION`). On such a table a condition holds only in the Region that checks it and
    /// conflicting writes resolve by last writer wins, so two Regions could both take one lock: a transaction naming
    /// one is refused unless this names the Region its store's client is in.
    pub eventual_region: Option<String>,
}

/// See [`Config::multi_region`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MultiRegion {
    /// Tables of one Region (or, pinned by [`Config::eventual_region`], eventually consistent global tables driven
    /// from one Region): everything DynamoDB offers there, `TransactWriteItems` included. A multi-Region strongly
    /// consistent table is refused, as it would refuse the calls.
    #[default]
    None,
    /// Multi-Region strongly consistent (MRSC) global tables, which take no `TransactWriteItems` or
    /// `TransactGetItems`: every request goes through the protocol's single-item conditional writes (no one-call
    /// path, no transactional judging before the commit, a `Parent` fenced by its own conditional writes), and a
    /// write refused with `ReplicatedWriteConflictException` is contention, sent again. The transactions table has no
    /// time to live there: the sweeper deletes finished records itself.
    Strong,
}

/// See [`Config::precommit_check`]: the safety net for what no list of DynamoDB's rules covers (a rule added later,
/// DynamoDB differing from DynamoDB Local). Each judged write costs one action of a cancelled `TransactWriteItems`
/// call, which DynamoDB bills as a transactional write: about 2 write units per started KB of the item.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PrecommitCheck {
    /// Updates and `Put`s whose result comes near one of DynamoDB's limits (size, nesting, key lengths: see
    /// `eval::near_limits`), where an error of the local rules would matter: nothing extra for ordinary
    /// writes.
    #[default]
    NearLimits,
    /// Every update and `Put`: covers any rule at the price of a transactional write per item.
    All,
    /// None: the local rules alone.
    Off,
}

/// See [`Config::committed_reads`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CommittedReads {
    /// The write the transaction will apply, evaluated on the item as it is: no write, and every such read looks
    /// the action up in the transaction's request again.
    #[default]
    Evaluate,
    /// The reader applies that one item's write (the same conditional write apply sends), then reads the item: one
    /// write, after which the item is plain for every later reader.
    Apply,
}

impl Config {
    /// Batches one lock, apply or rollback step takes: [`Config::fan_out`] shares of [`Config::share_batches`] each.
    pub fn step_batches(&self) -> usize {
        self.fan_out.max(1).saturating_mul(self.share_batches.max(1))
    }

    pub fn new(tx_table: impl Into<String>) -> Self {
        Self {
            tx_table: tx_table.into(),
            allowed_tables: None,
            batch_size: MAX_TRANSACT_ACTIONS,
            max_actions: 100_000,
            lease: Duration::from_secs(30),
            retention: Duration::from_secs(7 * 24 * 3600),
            default_deadline: Duration::from_secs(900),
            default_lock_wait: Duration::from_secs(60),
            concurrency: 256,
            fan_out: 1,
            share_batches: RUN_BATCHES,
            max_deadline: Duration::from_secs(MAX_DEADLINE_SECONDS),
            metrics_namespace: None,
            max_request_bytes: None,
            direct: true,
            committed_reads: CommittedReads::Evaluate,
            precommit_check: PrecommitCheck::NearLimits,
            execution_waits: EXECUTION_WAITS,
            attempt_timeout: Duration::from_secs(DEFAULT_ATTEMPT_TIMEOUT_SECONDS),
            operation_timeout: Duration::from_secs(DEFAULT_OPERATION_TIMEOUT_SECONDS),
            revisit_after: Duration::from_secs(DEFAULT_REVISIT_AFTER_SECONDS),
            idle_connection: Duration::from_secs(DEFAULT_IDLE_CONNECTION_SECONDS),
            multi_region: MultiRegion::None,
            eventual_region: None,
        }
    }

    /// This configuration for multi-Region strongly consistent global tables ([`MultiRegion::Strong`]): no one-call
    /// path and no transactional judging, which need `TransactWriteItems`.
    pub fn with_strong_multi_region(mut self) -> Self {
        self.multi_region = MultiRegion::Strong;
        self.direct = false;
        self.precommit_check = PrecommitCheck::Off;
        self
    }

    /// Whether the protocol may send `TransactWriteItems` (not on MRSC tables).
    pub fn transactions_allowed(&self) -> bool {
        self.multi_region == MultiRegion::None
    }

    /// Whether a request one `TransactWriteItems` call can carry goes in that call: [`Config::direct`], where the
    /// tables take the call.
    pub fn one_call(&self) -> bool {
        self.direct && self.transactions_allowed()
    }

    /// The precommit check in force: [`Config::precommit_check`], or none where the tables take no
    /// `TransactWriteItems`, which DynamoDB's judging needs.
    pub fn judged(&self) -> PrecommitCheck {
        if self.transactions_allowed() {
            self.precommit_check
        } else {
            PrecommitCheck::Off
        }
    }

    pub fn with_allowed_tables<I: IntoIterator<Item = S>, S: Into<String>>(mut self, tables: I) -> Self {
        self.allowed_tables = Some(tables.into_iter().map(Into::into).collect());
        self
    }

    /// Reads the `SAGA_*` environment variables; fails early, naming the variable, when one is missing or malformed.
    pub fn from_env() -> Result<Self, TxError> {
        Self::from_vars(|k| std::env::var(k).ok())
    }

    /// [`Config::from_env`] with `lookup` standing in for the environment.
    pub fn from_vars(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, TxError> {
        let var = |k: &str| lookup(k).filter(|v| !v.trim().is_empty());
        let num = |k: &str| whole_number(&lookup, k);
        let table = var(ENV_TX_TABLE).ok_or_else(|| TxError::Internal(format!("{ENV_TX_TABLE} is not set")))?;
        let mut c = Config::new(table);
        if let Some(list) = var(ENV_ALLOWED_TABLES) {
            let tables: BTreeSet<String> =
                list.split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty() && s != "*").collect();
            if !list.split(',').any(|s| s.trim() == "*") {
                c.allowed_tables = Some(tables);
            }
        }
        if let Some(n) = num(ENV_BATCH_SIZE)? {
            c.batch_size = n as usize;
        }
        if let Some(n) = num(ENV_MAX_ACTIONS)? {
            c.max_actions = n as usize;
        }
        if let Some(n) = num(ENV_IN_FLIGHT)? {
            c.concurrency = n as usize;
        }
        if let Some(n) = num(ENV_FAN_OUT)? {
            c.fan_out = n as usize;
        }
        if let Some(n) = num(ENV_SHARE_BATCHES)? {
            c.share_batches = n as usize;
        }
        if let Some(n) = num(ENV_LEASE_SECONDS)? {
            c.lease = Duration::from_secs(n);
        }
        if let Some(n) = num(ENV_RETENTION_SECONDS)? {
            c.retention = Duration::from_secs(n);
        }
        if let Some(n) = num(ENV_MAX_DEADLINE_SECONDS)? {
            c.max_deadline = Duration::from_secs(n.clamp(1, MAX_DEADLINE_SECONDS));
        }
        if let Some(n) = num(ENV_DEADLINE_SECONDS)? {
            c.default_deadline = Duration::from_secs(n);
        }
        // A default over the driver's limit would fail every transaction that does not set its own: the limit wins.
        c.default_deadline = c.default_deadline.min(c.max_deadline);
        if let Some(n) = num(ENV_EXECUTION_WAITS)? {
            c.execution_waits = u32::try_from(n).unwrap_or(u32::MAX);
        }
        if let Some(n) = num(ENV_ATTEMPT_TIMEOUT_SECONDS)? {
            c.attempt_timeout = Duration::from_secs(n);
        }
        if let Some(n) = num(ENV_OPERATION_TIMEOUT_SECONDS)? {
            c.operation_timeout = Duration::from_secs(n);
        }
        if let Some(n) = num(ENV_REVISIT_AFTER_SECONDS)? {
            c.revisit_after = Duration::from_secs(n);
        }
        if let Some(n) = num(ENV_IDLE_CONNECTION_SECONDS)? {
            c.idle_connection = Duration::from_secs(n);
        }
        c.metrics_namespace = var(ENV_METRICS_NAMESPACE).map(|v| v.trim().to_string());
        c.max_request_bytes = match num(ENV_MAX_REQUEST_BYTES)? {
            Some(n) => Some(n as usize),
            None => num(LAMBDA_MEMORY_MB)?.map(|mb| mb as usize * 1024 * 1024 / MEMORY_BYTES_PER_REQUEST_BYTE),
        };
        c.multi_region = match var(ENV_MULTI_REGION).map(|v| v.trim().to_ascii_lowercase()) {
            None => MultiRegion::None,
            Some(v) if v == "none" => MultiRegion::None,
            Some(v) if v == "strong" => MultiRegion::Strong,
            Some(v) => return Err(TxError::Internal(format!("{ENV_MULTI_REGION}={v:?} must be none or strong"))),
        };
        let strong = c.multi_region == MultiRegion::Strong;
        c.eventual_region = var(ENV_EVENTUAL_REGION).map(|v| v.trim().to_string());
        c.direct = match var(ENV_DIRECT).map(|v| v.trim().to_ascii_lowercase()) {
            None => !strong,
            Some(v) if v == "true" => true,
            Some(v) if v == "false" => false,
            Some(v) => return Err(TxError::Internal(format!("{ENV_DIRECT}={v:?} must be true or false"))),
        };
        c.committed_reads = match var(ENV_COMMITTED_READS).map(|v| v.trim().to_ascii_lowercase()) {
            None => CommittedReads::Evaluate,
            Some(v) if v == "evaluate" => CommittedReads::Evaluate,
            Some(v) if v == "apply" => CommittedReads::Apply,
            Some(v) => return Err(TxError::Internal(format!("{ENV_COMMITTED_READS}={v:?} must be evaluate or apply"))),
        };
        c.precommit_check = match var(ENV_PRECOMMIT_CHECK).map(|v| v.trim().to_ascii_lowercase()) {
            None if strong => PrecommitCheck::Off,
            None => PrecommitCheck::NearLimits,
            Some(v) if v == "near-limits" => PrecommitCheck::NearLimits,
            Some(v) if v == "all" => PrecommitCheck::All,
            Some(v) if v == "off" => PrecommitCheck::Off,
            Some(v) => {
                return Err(TxError::Internal(format!("{ENV_PRECOMMIT_CHECK}={v:?} must be near-limits, all or off")))
            }
        };
        c.check()?;
        Ok(c)
    }

    /// Rejects settings the protocol cannot work with.
    pub fn check(&self) -> Result<(), TxError> {
        if !(2..=MAX_TRANSACT_ACTIONS).contains(&self.batch_size) {
            return Err(TxError::Internal(format!(
                "batch size ({ENV_BATCH_SIZE}) {} must be between 2 and {MAX_TRANSACT_ACTIONS} (one place is the fencing \
                 ConditionCheck)",
                self.batch_size
            )));
        }
        if self.attempt_timeout.is_zero() || self.operation_timeout < self.attempt_timeout {
            return Err(TxError::Internal(format!(
                "the attempt timeout ({ENV_ATTEMPT_TIMEOUT_SECONDS}) must be at least 1 s and no longer than the \
                 operation timeout ({ENV_OPERATION_TIMEOUT_SECONDS})"
            )));
        }
        if !(1..=MAX_FAN_OUT).contains(&self.fan_out) || self.share_batches == 0 {
            return Err(TxError::Internal(format!(
                "the fan-out ({ENV_FAN_OUT}) {} must be between 1 and {MAX_FAN_OUT}, and the batches of a share \
                 ({ENV_SHARE_BATCHES}) at least 1",
                self.fan_out
            )));
        }
        if !self.transactions_allowed() && (self.direct || self.precommit_check != PrecommitCheck::Off) {
            return Err(TxError::Internal(format!(
                "multi-Region strongly consistent tables ({ENV_MULTI_REGION}=strong) take no TransactWriteItems: the \
                 one-call path ({ENV_DIRECT}) and the precommit check ({ENV_PRECOMMIT_CHECK}) must be off"
            )));
        }
        if self.max_actions == 0 || self.concurrency == 0 {
            return Err(TxError::Internal(format!(
                "max actions ({ENV_MAX_ACTIONS}) and the in-flight limit ({ENV_IN_FLIGHT}) must be at least 1"
            )));
        }
        Ok(())
    }

    /// Whether a request may write `table`: never the transactions table; otherwise any table when no allow-list is
    /// set, or one the list names. An entry ending in `*` names every table starting with what comes before it (as
    /// `table/prefix*` does in an IAM policy).
    pub fn table_allowed(&self, table: &str) -> bool {
        let listed = |entry: &String| match entry.strip_suffix('*') {
            Some(prefix) => table.starts_with(prefix),
            None => entry == table,
        };
        table != self.tx_table && self.allowed_tables.as_ref().is_none_or(|s| s.iter().any(listed))
    }
}

/// The setting `k` as a whole number, `None` when unset or blank; an error naming it when it is something else.
pub(crate) fn whole_number(lookup: impl Fn(&str) -> Option<String>, k: &str) -> Result<Option<u64>, TxError> {
    lookup(k)
        .filter(|v| !v.trim().is_empty())
        .map(|v| v.trim().parse::<u64>().map_err(|_| TxError::Internal(format!("{k}={v:?} is not a whole number"))))
        .transpose()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn from(vars: &[(&str, &str)]) -> Config {
        Config::from_vars(|k| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())).unwrap()
    }

    /// A value out of range fails start-up naming its variable, as a malformed one does.
    #[test]
    fn a_setting_out_of_range_names_its_variable() {
        let vars = |extra: (&'static str, &'static str)| {
            move |k: &str| match k {
                ENV_TX_TABLE => Some("tx".to_string()),
                _ if k == extra.0 => Some(extra.1.to_string()),
                _ => None,
            }
        };
        for (k, v) in [(ENV_BATCH_SIZE, "1"), (ENV_BATCH_SIZE, "101"), (ENV_MAX_ACTIONS, "0"), (ENV_IN_FLIGHT, "0")] {
            let e = Config::from_vars(vars((k, v))).unwrap_err().to_string();
            assert!(e.contains(k), "{k}={v}: {e}");
        }
        let e = Config::from_vars(vars((ENV_BATCH_SIZE, "many"))).unwrap_err().to_string();
        assert!(e.contains("SAGA_BATCH_SIZE=\"many\" is not a whole number"), "{e}");
    }

    #[test]
    fn an_express_limit_caps_the_default_deadline_and_refuses_longer_requests() {
        let c = from(&[(ENV_TX_TABLE, "tx"), (ENV_DEADLINE_SECONDS, "900"), (ENV_MAX_DEADLINE_SECONDS, "240")]);
        assert_eq!((c.default_deadline.as_secs(), c.max_deadline.as_secs()), (240, 240));
        let items = serde_json::json!([{"ConditionCheck": {"TableName": "Orders", "Key": {"pk": {"S": "a"}}, "ConditionExpression": "attribute_exists(pk)"}}]);
        let ask = |secs: Option<u64>| {
            let mut body = serde_json::json!({ "TransactItems": items });
            if let Some(s) = secs {
                body["Options"] = serde_json::json!({ "DeadlineSeconds": s });
            }
            crate::model::request::parse(&body, &c).map(|p| p.options.deadline_seconds)
        };
        assert_eq!(ask(None).unwrap(), 240, "no DeadlineSeconds: the capped default");
        assert_eq!(ask(Some(240)).unwrap(), 240);
        let e = ask(Some(300)).unwrap_err();
        assert_eq!(e.name(), "ValidationError");
        assert!(
            e.to_string().contains("between 1 and 240") && e.to_string().contains("SAGA_MAX_DEADLINE_SECONDS"),
            "{e}"
        );
        let standard = from(&[(ENV_TX_TABLE, "tx")]);
        assert_eq!((standard.default_deadline.as_secs(), standard.max_deadline.as_secs()), (900, 604_800));
        assert!(standard.metrics_namespace.is_none());
        let e = crate::model::request::parse(
            &serde_json::json!({"TransactItems": items, "Options": {"DeadlineSeconds": 604_801}}),
            &standard,
        )
        .unwrap_err();
        assert!(e.to_string().contains("between 1 and 604800") && !e.to_string().contains("SAGA_MAX"), "{e}");
        assert_eq!(
            from(&[(ENV_TX_TABLE, "tx"), (ENV_METRICS_NAMESPACE, "DynamoSaga/prod")]).metrics_namespace.as_deref(),
            Some("DynamoSaga/prod")
        );
    }

    #[test]
    fn a_lambda_function_takes_staged_requests_its_memory_can_hold() {
        assert_eq!(from(&[(ENV_TX_TABLE, "tx")]).max_request_bytes, None, "no limit outside Lambda");
        let stage = from(&[(ENV_TX_TABLE, "tx"), (LAMBDA_MEMORY_MB, "1024")]);
        assert_eq!(stage.max_request_bytes, Some(1024 * 1024 * 1024 / 40));
        assert!(
            stage.max_request_bytes.unwrap() > 20_900_019,
            "the benchmark's 100,000 updates fit the template's 1024 MB"
        );
        let set = from(&[(ENV_TX_TABLE, "tx"), (LAMBDA_MEMORY_MB, "1024"), (ENV_MAX_REQUEST_BYTES, "5000000")]);
        assert_eq!(set.max_request_bytes, Some(5_000_000), "the variable wins");
        assert!(from(&[(ENV_TX_TABLE, "tx")]).direct, "small requests go in one call unless told otherwise");
        assert!(!from(&[(ENV_TX_TABLE, "tx"), (ENV_DIRECT, "False")]).direct);
        assert!(Config::from_vars(|k| [(ENV_TX_TABLE, "tx"), (ENV_DIRECT, "no")]
            .iter()
            .find(|(n, _)| *n == k)
            .map(|(_, v)| v.to_string()))
        .is_err());
        assert!(Config::from_vars(|k| [(ENV_TX_TABLE, "tx"), (ENV_MAX_REQUEST_BYTES, "10MB")]
            .iter()
            .find(|(n, _)| *n == k)
            .map(|(_, v)| v.to_string()))
        .is_err());
    }

    #[test]
    fn committed_reads_evaluate_unless_told_to_apply() {
        use super::CommittedReads;
        assert_eq!(from(&[(ENV_TX_TABLE, "tx")]).committed_reads, CommittedReads::Evaluate);
        assert_eq!(
            from(&[(ENV_TX_TABLE, "tx"), (ENV_COMMITTED_READS, "Apply")]).committed_reads,
            CommittedReads::Apply
        );
        assert_eq!(
            from(&[(ENV_TX_TABLE, "tx"), (ENV_COMMITTED_READS, "evaluate")]).committed_reads,
            CommittedReads::Evaluate
        );
        let e = Config::from_vars(|k| {
            [(ENV_TX_TABLE, "tx"), (ENV_COMMITTED_READS, "help")]
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        })
        .unwrap_err();
        assert!(e.to_string().contains(ENV_COMMITTED_READS), "{e}");
    }

    #[test]
    fn the_precommit_check_is_a_setting() {
        use super::PrecommitCheck;
        assert_eq!(from(&[(ENV_TX_TABLE, "tx")]).precommit_check, PrecommitCheck::NearLimits);
        assert_eq!(from(&[(ENV_TX_TABLE, "tx"), (ENV_PRECOMMIT_CHECK, "All")]).precommit_check, PrecommitCheck::All);
        assert_eq!(from(&[(ENV_TX_TABLE, "tx"), (ENV_PRECOMMIT_CHECK, "off")]).precommit_check, PrecommitCheck::Off);
        let e = Config::from_vars(|k| {
            [(ENV_TX_TABLE, "tx"), (ENV_PRECOMMIT_CHECK, "some")]
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        })
        .unwrap_err();
        assert!(e.to_string().contains(ENV_PRECOMMIT_CHECK), "{e}");
    }

    #[test]
    fn strong_multi_region_tables_turn_off_what_needs_transact_write_items() {
        let plain = from(&[(ENV_TX_TABLE, "tx")]);
        assert_eq!((plain.multi_region, plain.transactions_allowed()), (MultiRegion::None, true));
        let strong = from(&[(ENV_TX_TABLE, "tx"), (ENV_MULTI_REGION, "STRONG")]);
        assert_eq!(strong.multi_region, MultiRegion::Strong);
        assert!(!strong.transactions_allowed() && !strong.direct);
        assert_eq!(strong.precommit_check, PrecommitCheck::Off);
        let built = Config::new("tx").with_strong_multi_region();
        assert_eq!(
            (built.direct, built.precommit_check, built.multi_region),
            (false, PrecommitCheck::Off, MultiRegion::Strong)
        );
        assert!(built.check().is_ok());
        let refused = |vars: &[(&str, &str)]| {
            Config::from_vars(|k| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string()))
                .unwrap_err()
                .to_string()
        };
        for extra in [(ENV_DIRECT, "true"), (ENV_PRECOMMIT_CHECK, "near-limits"), (ENV_PRECOMMIT_CHECK, "all")] {
            let e = refused(&[(ENV_TX_TABLE, "tx"), (ENV_MULTI_REGION, "strong"), extra]);
            assert!(e.contains("take no TransactWriteItems") && e.contains(extra.0), "{extra:?}: {e}");
        }
        let e = refused(&[(ENV_TX_TABLE, "tx"), (ENV_MULTI_REGION, "eventual")]);
        assert!(e.contains(ENV_MULTI_REGION), "{e}");
        let pinned = from(&[(ENV_TX_TABLE, "tx"), (ENV_EVENTUAL_REGION, " eu-west-1 ")]);
        assert_eq!(pinned.eventual_region.as_deref(), Some("eu-west-1"));
    }

    #[test]
    fn the_in_flight_limit_is_a_setting() {
        assert_eq!(from(&[(ENV_TX_TABLE, "tx")]).concurrency, 256);
        assert_eq!(from(&[(ENV_TX_TABLE, "tx"), (ENV_IN_FLIGHT, "64")]).concurrency, 64);
        let refuse = |v: &str| {
            Config::from_vars(|k| {
                [(ENV_TX_TABLE, "tx"), (ENV_IN_FLIGHT, v)].iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())
            })
        };
        for bad in ["0", "many"] {
            let e = refuse(bad).unwrap_err();
            assert!(e.to_string().contains(ENV_IN_FLIGHT), "{bad}: {e}");
        }
    }

    #[test]
    fn allow_list_entries_are_names_or_prefixes() {
        let c = Config::new("tx").with_allowed_tables(["Orders", "prod-*"]);
        assert!(c.table_allowed("Orders"));
        assert!(!c.table_allowed("Orders2"), "a plain entry is an exact name");
        assert!(c.table_allowed("prod-stock") && c.table_allowed("prod-"));
        assert!(!c.table_allowed("staging-stock"));
        assert!(!Config::new("tx").table_allowed("tx"), "never the transactions table");
        assert!(Config::new("tx").table_allowed("anything"), "no list: every table but the transactions table");
        let c = Config::new("prod-tx").with_allowed_tables(["prod-*"]);
        assert!(!c.table_allowed("prod-tx"), "not even through a prefix");
    }
}
