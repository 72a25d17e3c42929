//! Every name the protocol writes to DynamoDB, in one place.
//!
//! Items that take part in a transaction carry the reserved attributes below while they are locked; a request that
//! names any attribute starting with [`RESERVED_PREFIX`] is rejected, so the protocol's bookkeeping can never collide
//! with the caller's data.

/// Attribute names starting with this prefix belong to dynamo-saga.
pub const RESERVED_PREFIX: &str = "_saga";

/// On a locked item: the id of the transaction that holds the lock.
pub const ATTR_LOCK: &str = "_sagaLock";
/// On a locked item: the id of the write that took the lock ([`crate::model::item_attrs::LockId`]: the epoch
/// milliseconds its lock pass started at, with a thousandths part after writes of unknown outcome), which apply checks;
/// on a transaction begun before lock ids, when the lock was taken.
pub const ATTR_LOCKED_AT: &str = "_sagaLockedAt";
/// On a locked item: present (true) when the item did not exist and was created only to hold the lock.
pub const ATTR_TRANSIENT: &str = "_sagaTransient";
/// On a locked item: present (true) once the transaction's write has been applied to it.
pub const ATTR_APPLIED: &str = "_sagaApplied";

/// On every item a transaction has written (a `Put` or an `Update`, by apply or in one `TransactWriteItems` call):
/// the id of the last transaction that wrote it. It stays after the item is unlocked, so that any transaction's write
/// between two reads of an item changes it, even one that leaves the caller's attributes as they were: snapshot
/// reads ([`crate::drivers::snapshot`]) compare two reads of each item to find one instant they all held.
pub const ATTR_WRITTEN_BY: &str = "_sagaTx";
/// What [`ATTR_WRITTEN_BY`] adds to an item's size: its name and a transaction id (a ULID, 26 characters). An item
/// a transaction writes may hold this much less than DynamoDB's 400 KB.
pub const WRITTEN_BY_BYTES: usize = 7 + 26;

/// On a tombstone (a `Delete` with `Tombstone`): the id of the transaction that wrote it. Reads through
/// the library hide items that carry it, and conditions see them as absent.
pub const ATTR_TOMBSTONE: &str = "_sagaTombstone";
/// On a locked, transient item that replaced a tombstone: the tombstone, put back if the transaction does not write
/// the item. Kept out of the top level so that the tombstone's time to live cannot delete a locked item.
pub const ATTR_STONE: &str = "_sagaStone";
/// An attribute name dynamo-saga never writes, so that a condition reading it sees an absent attribute.
pub const ATTR_GONE: &str = "_sagaGone";

/// The attribute on the `Parent` item that holds the transaction id while the parent is locked (the lock client's
/// lockToken).
pub const PARENT_LOCK_TOKEN: &str = "lockToken";
/// On the parent item: when the parent lock was taken (epoch milliseconds).
pub const PARENT_LOCKED_AT: &str = "lockTokenAt";
/// On the parent item: the holder's lease in seconds (the DynamoDB Lock Client's leaseDuration): a waiter that sees the
/// same [`PARENT_RVN`] for this long, on its own clock, judges the holder dead.
pub const PARENT_LEASE: &str = "leaseDuration";
/// On the parent item: the record version number (as the DynamoDB Lock Client keeps it), a new random number at every
/// heartbeat of the holder.
pub const PARENT_RVN: &str = "recordVersionNumber";

// ---- The transactions table ----

/// Partition key of the transactions table: the transaction id (a ULID), or `token#...` for token records.
pub const TX_PK: &str = "id";
/// Sort key of the transactions table: the kind of record.
pub const TX_SK: &str = "sk";
/// Sort key of the header record.
pub const SK_HEADER: &str = "tx";
/// Sort key of the plan record (batch boundaries).
pub const SK_PLAN: &str = "plan";
/// Sort key prefix of request pages; followed by the zero-padded page number.
pub const SK_PAGE_PREFIX: &str = "page#";
/// Sort key prefix of item images; followed by the zero-padded action position in lock order.
pub const SK_IMAGE_PREFIX: &str = "img#";
/// Sort key of a ClientRequestToken record.
pub const SK_TOKEN: &str = "token";
/// A record never written: the condition that cannot hold when DynamoDB is asked to judge writes
/// ([`crate::protocol::judge`]).
pub const SK_JUDGE: &str = "judge";
/// Partition key prefix of ClientRequestToken records.
pub const TOKEN_PK_PREFIX: &str = "token#";
/// Partition key of the sweeper's place in its pass over the transactions table for expired records, where the table
/// has no time to live (multi-Region strongly consistent tables: [`crate::drivers::sweeper`]); its sort key is
/// [`SK_CURSOR`].
#[cfg(feature = "internals")]
pub const EXPIRY_PK: &str = "sweep#expired";
#[cfg(feature = "internals")]
pub const SK_CURSOR: &str = "cursor";
/// The expiry cursor: the key of the last record the pass looked at.
#[cfg(feature = "internals")]
pub const C_AFTER_ID: &str = "afterId";
#[cfg(feature = "internals")]
pub const C_AFTER_SK: &str = "afterSk";

/// Header: PENDING, COMMITTED or ROLLED_BACK.
pub const H_STATE: &str = "state";
/// Header: incremented by every header write; a waiter that sees it unchanged for a whole lease knows nobody is
/// working.
pub const H_VERSION: &str = "version";
pub const H_CREATED_AT: &str = "createdAt";
pub const H_UPDATED_AT: &str = "updatedAt";
/// A header's `updatedAt` is moved by a write at least this often while the transaction progresses (more often with a
/// lease under 30 s: every third of a lease), not by every write; the sweeper's `stale_after` must be longer (the
/// template allows no less than 30 s).
pub const UPDATED_AT_EVERY_MS: u64 = 10_000;
/// Header: epoch milliseconds after which a pending transaction is cancelled instead of waiting any longer.
pub const H_DEADLINE: &str = "deadline";
/// Header: epoch milliseconds when the transaction reached its end (everything unlocked).
pub const H_FINISHED_AT: &str = "finishedAt";
pub const H_ACTIONS: &str = "actionCount";
pub const H_BATCHES: &str = "batchCount";
/// Header: the protocol a transaction of batches runs (absent: 1). 1 applies every batch before it commits, from saved
/// images; 2 commits first and applies each item with its unlock. A transaction keeps its protocol to the end.
pub const H_PROTOCOL: &str = "protocol";
/// Header: the format of the transaction's records (absent: 1). A version of dynamo-saga reads only the formats it
/// knows, up to [`RECORD_FORMAT`], and refuses a newer one with `UnknownRecordFormat` instead of misreading it.
pub const H_FORMAT: &str = "format";
/// The format of the records this version writes.
pub const RECORD_FORMAT: u32 = 1;
/// The protocol new transactions run (see [`H_PROTOCOL`]).
pub const PROTOCOL: u32 = 2;
/// Header: present (1) when begin checked every `Put`'s item and tombstone against the index key types; protocol-2
/// transactions begun before it did have save check them.
pub const H_ITEMS_CHECKED: &str = "itemsChecked";
pub const H_PAGES: &str = "pageCount";
/// Header: the Parent reference as JSON.
pub const H_PARENT: &str = "parent";
pub const H_TOKEN: &str = "clientRequestToken";
/// Header: number of batches whose locking has started (rollback looks no further).
pub const H_LOCK_STARTED: &str = "lockStarted";
/// Header progress watermarks: batches done by each phase, counted from the first.
pub const H_LOCKED: &str = "lockedBatches";
pub const H_SAVED: &str = "savedBatches";
pub const H_APPLIED: &str = "appliedBatches";
pub const H_COMPLETED: &str = "completedBatches";
pub const H_RESTORED: &str = "restoredBatches";
/// Header: the CancellationReasons of a rolled-back transaction, as JSON.
pub const H_REASONS: &str = "reasons";
/// Header: when the transaction was decided (epoch milliseconds).
pub const H_DECIDED_AT: &str = "decidedAt";
/// Header: the attempt under way, 0 for the first (absent means 0). Lock values carry it (`records::owner`), and
/// every phase's header write is conditional on it.
pub const H_ATTEMPT: &str = "attempt";
/// Header: when the attempt under way started (absent: at `createdAt`).
pub const H_ATTEMPT_STARTED: &str = "attemptStartedAt";
/// Header: present (true) while a rolled-back attempt is to be followed by another (see `records::Decision`).
pub const H_RETRY: &str = "retry";
/// Header: the transaction a new attempt waits for before it locks anything, as JSON.
pub const H_WAIT_FOR: &str = "waitFor";
/// Header: milliseconds the attempt under way has waited for other transactions' locks.
pub const H_WAITED: &str = "waitedMs";
/// Header: the lock pass that may have lock writes in flight (its number, as `lockPass`): set when a pass claims the
/// lock phase, removed when it has its every write's answer. Left on the header by a pass that died, timed out or
/// was overtaken, it means a lock of this transaction may land later.
pub const H_LOCK_OPEN: &str = "lockOpen";
/// Header: present (true) once any write of this transaction may land after it ends (a lock pass abandoned, a lock
/// write whose answer was lost).
pub const H_LATE_WRITES: &str = "lateWrites";
/// Header: when the finished transaction is to be visited again for writes that landed after its end (epoch
/// milliseconds); removed by that visit.
pub const H_REVISIT_AT: &str = "revisitAt";
/// Header: when that visit was made (epoch milliseconds), and how many items it cleared.
pub const H_REVISITED_AT: &str = "revisitedAt";
pub const H_REVISIT_CLEARED: &str = "revisitCleared";
/// Partition of the open-transactions index ([`H_OPEN_SHARD`]) that holds open transactions, followed by the shard
/// number.
pub const OPEN_SHARD_PREFIX: &str = "open#";
/// Partition of the open-transactions index ([`H_OPEN_SHARD`]) that holds finished transactions waiting to be
/// visited again, followed by the shard number; their sort key, `updatedAt`, is when they finished.
pub const REVISIT_SHARD_PREFIX: &str = "revisit#";
/// Header: the attempts rolled back and followed by another, as JSON (the last 100).
pub const H_ATTEMPTS: &str = "attempts";
/// Header: the Step Functions execution driving the transaction, when there is one.
pub const H_EXECUTION: &str = "executionArn";
/// Header usage counters, summed over every phase run.
pub const H_CALLS: &str = "ddbCalls";
pub const H_READ_UNITS: &str = "readUnits";
pub const H_WRITE_UNITS: &str = "writeUnits";
/// Header: a short hash of the request body, to tell a retried ClientRequestToken from a reused one.
pub const H_BODY_HASH: &str = "bodyHash";
/// Header: the transaction's ticket in its parent's FIFO queue.
pub const H_PARENT_TICKET: &str = "parentTicket";
/// Partition key prefix of a parent's queue (its ticket counter and one row per queued transaction).
pub const QUEUE_PREFIX: &str = "queue#";
/// Queue counter record: the last ticket handed out.
pub const Q_NEXT: &str = "lastTicket";
/// Every record: the DynamoDB TTL attribute (epoch seconds).
pub const ATTR_EXPIRES_AT: &str = "expiresAt";
/// Header: partition key of the sparse index of open transactions; removed when the transaction finishes.
pub const H_OPEN_SHARD: &str = "openShard";
/// Name of the sparse global secondary index (partition key [`H_OPEN_SHARD`], sort key [`H_UPDATED_AT`]).
pub const OPEN_INDEX: &str = "open-transactions";
/// Number of partitions of the open-transactions index, so that many open transactions do not share one key.
pub const OPEN_SHARDS: u32 = 8;

/// Page and plan records: the payload.
pub const R_BODY: &str = "body";
/// Image records: the item as it was before the transaction changed it.
pub const I_ITEM: &str = "item";
/// Image records: true when the item did not exist before the transaction.
pub const I_TRANSIENT: &str = "transient";
/// Image records: the attempt that saved the image (absent: the first). Only the attempt that saved an image may
/// restore it or read through it: an earlier attempt's image shows the item before later transactions changed it.
pub const I_ATTEMPT: &str = "attempt";
/// Token records: the transaction id the token maps to.
pub const T_TX: &str = "txId";

// ---- Limits ----

/// The batches one share of a lock, apply or rollback step takes at once by default (`SAGA_SHARE_BATCHES`): their
/// items are written side by side (up to `SAGA_IN_FLIGHT` at a time), and one header write records the step, so a
/// transaction of 2,000 actions waits for the round trips of its slowest writes, not of twenty batches one after
/// another.
pub const RUN_BATCHES: usize = 20;
/// The most shares one step fans out to (`SAGA_FAN_OUT`).
pub const MAX_FAN_OUT: usize = 64;
/// Keys of each table begin reads, of a request's own, to guess whether its items exist (`phase::begin`).
pub const EXISTENCE_SAMPLE: usize = 16;
/// DynamoDB's TransactWriteItems action limit.
pub const MAX_TRANSACT_ACTIONS: usize = 100;
/// DynamoDB's TransactWriteItems aggregate size limit.
pub const MAX_TRANSACT_BYTES: usize = 4 * 1024 * 1024;
/// DynamoDB's item size limit.
pub const MAX_ITEM_BYTES: usize = 400 * 1024;
/// Size of a request page record. A phase reads every page that holds a byte of its batch, so a page that a batch
/// shares with its neighbours is read by each of them: small pages keep those reads small (16 KB is 2 read units
/// eventually consistent), while a batch of 99 inserted 1 KB items, deflated, still takes only a few.
pub const PAGE_TARGET_BYTES: usize = 16 * 1024;
/// DynamoDB's limit on a ClientRequestToken's length.
pub const MAX_TOKEN_LEN: usize = 36;
/// DynamoDB's limit on one expression string.
#[cfg(feature = "internals")]
pub const MAX_EXPRESSION_BYTES: usize = 4096;

// ---- Environment variables read once at start-up by the functions and the CLI ----

pub const ENV_TX_TABLE: &str = "SAGA_TABLE";
pub const ENV_ALLOWED_TABLES: &str = "SAGA_ALLOWED_TABLES";
pub const ENV_BATCH_SIZE: &str = "SAGA_BATCH_SIZE";
pub const ENV_MAX_ACTIONS: &str = "SAGA_MAX_ACTIONS";
pub const ENV_LEASE_SECONDS: &str = "SAGA_LEASE_SECONDS";
pub const ENV_RETENTION_SECONDS: &str = "SAGA_RETENTION_SECONDS";
pub const ENV_DEADLINE_SECONDS: &str = "SAGA_DEADLINE_SECONDS";
/// Largest `Options.DeadlineSeconds` (default [`MAX_DEADLINE_SECONDS`]); the template sets 240 for Express workflows.
pub const ENV_MAX_DEADLINE_SECONDS: &str = "SAGA_MAX_DEADLINE_SECONDS";
/// The CloudWatch namespace of per-transaction metrics (CloudWatch EMF, written by the Release function); unset or
/// empty: none.
pub const ENV_METRICS_NAMESPACE: &str = "SAGA_METRICS_NAMESPACE";
/// Largest staged request, in bytes of JSON, that sealing will take; unset: derived from the Lambda function's memory
/// ([`LAMBDA_MEMORY_MB`], [`MEMORY_BYTES_PER_REQUEST_BYTE`]), else no limit.
pub const ENV_MAX_REQUEST_BYTES: &str = "SAGA_MAX_REQUEST_BYTES";
/// `true` (the default) or `false`: whether a request one `TransactWriteItems` call can carry is carried out in that
/// call ([`crate::protocol::one_call`]) rather than by the protocol.
pub const ENV_DIRECT: &str = "SAGA_DIRECT";
/// `none` (the default) or `strong`: whether the tables are multi-Region strongly consistent (MRSC) global tables,
/// which take no `TransactWriteItems` ([`crate::config::MultiRegion`]).
pub const ENV_MULTI_REGION: &str = "SAGA_MULTI_REGION_CONSISTENCY";
/// The one Region allowed to drive transactions on global tables with multi-Region eventual consistency (MREC); unset,
/// such tables are refused ([`crate::config::Config::eventual_region`]).
pub const ENV_EVENTUAL_REGION: &str = "SAGA_EVENTUAL_CONSISTENCY_REGION";
/// `evaluate` (the default) or `apply`: how a committed read answers for an item a committed transaction has not
/// applied yet ([`crate::config::CommittedReads`]).
pub const ENV_COMMITTED_READS: &str = "SAGA_COMMITTED_READS";
/// How many shares one lock, apply or rollback step of a large transaction is cut into, each run side by side by an
/// invocation of its own (default 1: the step's own process runs them all; [`crate::protocol::shares`]).
pub const ENV_FAN_OUT: &str = "SAGA_FAN_OUT";
/// How many batches one share of such a step takes (default [`RUN_BATCHES`]).
pub const ENV_SHARE_BATCHES: &str = "SAGA_SHARE_BATCHES";
/// Most DynamoDB requests one phase call keeps in flight at once (default 256): each batch's item writes go out this
/// many at a time, so a phase's round trips on the critical path are about its items divided by this.
pub const ENV_IN_FLIGHT: &str = "SAGA_IN_FLIGHT";
/// `near-limits` (the default), `all` or `off`: which writes DynamoDB judges before a transaction of batches commits
/// ([`crate::config::PrecommitCheck`]).
pub const ENV_PRECOMMIT_CHECK: &str = "SAGA_PRECOMMIT_CHECK";
/// Seconds one HTTP attempt of a DynamoDB request may take (default [`DEFAULT_ATTEMPT_TIMEOUT_SECONDS`]).
pub const ENV_ATTEMPT_TIMEOUT_SECONDS: &str = "SAGA_ATTEMPT_TIMEOUT_SECONDS";
pub const DEFAULT_ATTEMPT_TIMEOUT_SECONDS: u64 = 10;
/// Seconds a DynamoDB request may take with its retries (default [`DEFAULT_OPERATION_TIMEOUT_SECONDS`]).
pub const ENV_OPERATION_TIMEOUT_SECONDS: &str = "SAGA_OPERATION_TIMEOUT_SECONDS";
pub const DEFAULT_OPERATION_TIMEOUT_SECONDS: u64 = 60;
/// Seconds after its end at which a transaction that may have writes still in flight is visited again
/// ([`crate::config::Config::revisit_after`]; default [`DEFAULT_REVISIT_AFTER_SECONDS`]).
pub const ENV_REVISIT_AFTER_SECONDS: &str = "SAGA_REVISIT_AFTER_SECONDS";
/// A lock pass's longest life (the default lease, 30 s), SigV4's five minutes, and a minute and a half for clocks and
/// a request's own time.
pub const DEFAULT_REVISIT_AFTER_SECONDS: u64 = 420;
/// Seconds a pooled connection to DynamoDB may sit idle and still be used for a request
/// ([`crate::config::Config::idle_connection`]; default [`DEFAULT_IDLE_CONNECTION_SECONDS`]).
pub const ENV_IDLE_CONNECTION_SECONDS: &str = "SAGA_IDLE_CONNECTION_SECONDS";
/// Well under the minute after which clients that sat idle (a warm Lambda between invocations) find their pooled
/// connection closed by the service.
pub const DEFAULT_IDLE_CONNECTION_SECONDS: u64 = 20;
/// Which callers of the API and which EventBridge senders may name which of the allowed tables
/// ([`crate::drivers::entitlements`]); unset or empty: every caller may name every allowed table.
#[cfg(feature = "internals")]
pub const ENV_CALLER_ENTITLEMENTS: &str = "SAGA_CALLER_ENTITLEMENTS";
/// A file to append every AWS call this process's clients make to, one JSON line each, for the permission simulation
/// ([`crate::dynamo::call_log`]); unset: nothing is recorded.
pub const ENV_CALL_LOG: &str = "SAGA_CALL_LOG";
/// The memory Lambda gives the function, in MB, as Lambda sets it.
pub const LAMBDA_MEMORY_MB: &str = "AWS_LAMBDA_FUNCTION_MEMORY_SIZE";
/// Memory to allow per byte of request JSON when a request is validated and begun in one call: the benchmark's largest
/// run (100,000 updates, 20.9 MB of JSON) peaked at 615 MiB, about 31 bytes a byte; 40 keeps a fifth spare.
pub const MEMORY_BYTES_PER_REQUEST_BYTE: usize = 40;
/// The longest deadline any transaction may have: a week.
pub const MAX_DEADLINE_SECONDS: u64 = 7 * 24 * 3600;
/// Most lock waits one state machine execution makes (default [`EXECUTION_WAITS`]); past them its transaction is
/// cancelled as a wait past `LockWaitSeconds` is.
pub const ENV_EXECUTION_WAITS: &str = "SAGA_EXECUTION_WAITS";
/// How long a transaction must have been still for the sweeper to count it abandoned, in seconds.
#[cfg(feature = "internals")]
pub const ENV_SWEEP_AFTER_SECONDS: &str = "SAGA_SWEEP_AFTER_SECONDS";
/// The most transactions one sweeper run finishes.
#[cfg(feature = "internals")]
pub const ENV_SWEEP_MAX: &str = "SAGA_SWEEP_MAX";
/// A Standard execution holds 25,000 history events and each lock wait adds 9 (Wait 2, Relock 5, Route 2): 2,000
/// waits are 18,000 events, which leaves about 7,000 for the transaction's own calls (the largest, 100,000 actions,
/// took 473 in the benchmark), retried calls and later attempts.
pub const EXECUTION_WAITS: u32 = 2_000;
/// Header: longest wait for another transaction's lock, in seconds (absent: until the deadline).
pub const H_LOCK_WAIT: &str = "lockWaitSeconds";
/// Header: write requests made, summed over phase runs.
pub const H_WRITES: &str = "ddbWrites";
/// Header: the last committed write DynamoDB refused to apply ([`Refusal`], JSON).
pub const H_REFUSED: &str = "refused";
/// Header: the lock pass that last claimed the lock phase, a number above every earlier one of the transaction (the
/// epoch milliseconds it started at, or one more than the last); absent on a transaction begun before lock writes
/// carried ids ([`LockId`]).
pub const H_LOCK_PASS: &str = "lockPass";
/// Header: the ids the locks of the batches recorded locked carry ([`LockIds`], JSON).
pub const H_LOCK_IDS: &str = "lockIds";
/// Header: the tables most of whose items the request names did not exist when begin looked (JSON list).
pub const H_ABSENT_TABLES: &str = "absentTables";
