//! CPU time, of this process and of DynamoDB Local, for the benchmark: where a run's time goes on a machine whose cores
//! DynamoDB Local shares with its client, and what DynamoDB Local itself spends on each kind of write.
//!
//! DynamoDB Local is measured from outside, as any process is: the CPU time Linux accounts to it (`/proc/<pid>/stat`)
//! across calls the benchmark sends.

use std::path::PathBuf;

use aws_sdk_dynamodb::types::{
    AttributeValue, BatchStatementRequest, PutRequest, ReturnValue, ReturnValuesOnConditionCheckFailure,
    TransactWriteItem, Update, WriteRequest,
};
use aws_sdk_dynamodb::Client;
use dynamo_saga::value::Item;
use futures::StreamExt;
use serde::{Deserialize, Serialize};

/// CPU seconds (user and system) of process `pid`, or of this process for `None`; `None` when Linux does not say.
pub fn cpu_seconds(pid: Option<u32>) -> Option<f64> {
    let path = pid.map_or_else(|| PathBuf::from("/proc/self/stat"), |p| PathBuf::from(format!("/proc/{p}/stat")));
    let stat = std::fs::read_to_string(path).ok()?;
    // The fields after the command name, which is in parentheses and may hold spaces: utime and stime are the 12th and
    // 13th of them, in clock ticks.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    Some(ticks / clock_ticks_per_second())
}

/// CPU milliseconds (user and system) this process has spent, to the microsecond.
pub fn own_cpu_ms() -> f64 {
    // SAFETY: getrusage writes the struct it is given, which is plain data.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let r = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    assert_eq!(r, 0, "getrusage");
    timeval_ms(usage.ru_utime) + timeval_ms(usage.ru_stime)
}

fn timeval_ms(t: libc::timeval) -> f64 {
    t.tv_sec as f64 * 1000.0 + t.tv_usec as f64 / 1000.0
}

/// Runs `cmd` to its end, its standard output captured: what it printed, and the CPU milliseconds (user and system)
/// the process spent, from the kernel's accounting of it (`wait4`). Panics when it does not exit 0.
// The child is reaped by `wait4`, which std's `Child::wait` cannot replace: it does not return the usage.
#[allow(clippy::zombie_processes)]
pub fn run_measured(mut cmd: std::process::Command) -> (String, f64) {
    use std::io::Read;
    let what = format!("{cmd:?}");
    let mut child = cmd.stdout(std::process::Stdio::piped()).spawn().unwrap_or_else(|e| panic!("{what}: {e}"));
    let mut out = String::new();
    child.stdout.take().expect("stdout").read_to_string(&mut out).expect("its output");
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: as above; the child is waited for here once, and `child` is not waited for again.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(r, pid, "wait4 {what}");
    assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "{what} failed ({status}): {out}");
    (out, timeval_ms(usage.ru_utime) + timeval_ms(usage.ru_stime))
}

fn clock_ticks_per_second() -> f64 {
    static TICKS: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| {
        std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
            .unwrap_or(100.0)
    })
}

/// The process id of the DynamoDB Local serving `endpoint`, when `tools/dynamodb-local.sh` started it (it keeps the id in
/// `.local/dynamodb-<port>.pid`).
pub fn dynamodb_local_pid(endpoint: &str) -> Option<u32> {
    let port = endpoint.rsplit(':').next()?.trim_end_matches('/');
    let file = crate::root().join(format!(".local/dynamodb-{port}.pid"));
    std::fs::read_to_string(file).ok()?.trim().parse().ok()
}

/// CPU time per action of one or more runs: DynamoDB Local's and this process's (the client's).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CpuPerAction {
    pub dynamodb_ms: f64,
    pub client_ms: f64,
}

/// Measures the CPU time DynamoDB Local (`pid`) and this process spend while `run` runs.
pub struct CpuMeter {
    pid: Option<u32>,
    dynamodb: f64,
    client: f64,
}

impl CpuMeter {
    pub fn start(pid: Option<u32>) -> CpuMeter {
        CpuMeter { pid, dynamodb: cpu_seconds(pid).unwrap_or(0.0), client: cpu_seconds(None).unwrap_or(0.0) }
    }

    /// The CPU milliseconds spent since [`CpuMeter::start`]: (DynamoDB Local's, this process's); DynamoDB Local's is
    /// `None` when its process is unknown.
    pub fn elapsed_ms(&self) -> (Option<f64>, f64) {
        let dynamodb = self.pid.and(cpu_seconds(self.pid)).map(|s| (s - self.dynamodb) * 1000.0);
        (dynamodb, (cpu_seconds(None).unwrap_or(0.0) - self.client) * 1000.0)
    }
}

/// One kind of write call, as DynamoDB Local serves it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum WriteCall {
    /// `UpdateItem` shaped as a lock write: two attributes set, conditioned on the item existing unlocked, the old
    /// item returned.
    LockUpdate,
    /// `UpdateItem` shaped as an apply write: the caller's `ADD` with the lock attributes removed, conditioned on the
    /// lock.
    ApplyUpdate,
    /// `TransactWriteItems` of 100 updates, as chunked sends them.
    Transact100,
    /// PartiQL `BatchExecuteStatement` of 25 `UPDATE` statements shaped as lock writes, `RETURNING ALL OLD *`.
    PartiqlLock25,
    /// PartiQL `BatchExecuteStatement` of 25 `UPDATE` statements shaped as apply writes.
    PartiqlApply25,
    /// `BatchWriteItem` of 25 puts: unconditional, so no protocol write can be one.
    BatchPut25,
}

impl WriteCall {
    pub const ALL: [WriteCall; 6] = [
        WriteCall::LockUpdate,
        WriteCall::ApplyUpdate,
        WriteCall::Transact100,
        WriteCall::PartiqlLock25,
        WriteCall::PartiqlApply25,
        WriteCall::BatchPut25,
    ];

    pub fn describe(self) -> &'static str {
        match self {
            WriteCall::LockUpdate => "`UpdateItem`, a lock write (conditional, `ALL_OLD`)",
            WriteCall::ApplyUpdate => "`UpdateItem`, an apply write (conditional)",
            WriteCall::Transact100 => "`TransactWriteItems` of 100 updates (chunked's call)",
            WriteCall::PartiqlLock25 => {
                "PartiQL `BatchExecuteStatement` of 25 lock-shaped `UPDATE`s, `RETURNING ALL OLD *`"
            }
            WriteCall::PartiqlApply25 => "PartiQL `BatchExecuteStatement` of 25 apply-shaped `UPDATE`s",
            WriteCall::BatchPut25 => "`BatchWriteItem` of 25 puts (unconditional)",
        }
    }

    /// Items one call carries.
    fn items(self) -> usize {
        match self {
            WriteCall::LockUpdate | WriteCall::ApplyUpdate => 1,
            WriteCall::Transact100 => 100,
            _ => 25,
        }
    }
}

/// What DynamoDB Local spent on one kind of write call.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WriteCpu {
    pub call: WriteCall,
    pub items: usize,
    /// DynamoDB Local's CPU milliseconds per item written.
    pub dynamodb_ms_per_item: f64,
}

const LOCK: &str = "_sagaLock";
const LOCKED_AT: &str = "_sagaLockedAt";

/// DynamoDB Local's CPU per item written by each kind of call, on `items`, items of `table` that exist already
/// (partition key `pk`, a number `v`), each call kind writing each item once: a lock-shaped write locks it and an
/// apply-shaped one unlocks it, so those kinds run in pairs, and the puts put each item as it is. Single-item calls go
/// `in_flight` at a time, `TransactWriteItems` one after another as chunked sends them, the other calls 8 at a time.
pub async fn write_cpu(client: &Client, pid: u32, table: &str, items: &[Item], in_flight: usize) -> Vec<WriteCpu> {
    let mut out = Vec::new();
    for call in WriteCall::ALL {
        let started = CpuMeter::start(Some(pid));
        let chunks: Vec<&[Item]> = items.chunks(call.items()).collect();
        let at_once = match call {
            WriteCall::LockUpdate | WriteCall::ApplyUpdate => in_flight,
            WriteCall::Transact100 => 1,
            _ => 8,
        };
        futures::stream::iter(chunks)
            .map(|chunk| send(client, table, call, chunk))
            .buffer_unordered(at_once)
            .collect::<Vec<()>>()
            .await;
        let ms = started.elapsed_ms().0.unwrap_or(f64::NAN);
        out.push(WriteCpu { call, items: items.len(), dynamodb_ms_per_item: ms / items.len() as f64 });
    }
    out
}

fn sv(s: &str) -> AttributeValue {
    AttributeValue::S(s.into())
}

fn nv(n: &str) -> AttributeValue {
    AttributeValue::N(n.into())
}

/// Sends one call of kind `call` over `items`; panics if DynamoDB Local refuses any of its writes.
async fn send(client: &Client, table: &str, call: WriteCall, items: &[Item]) {
    let keys: Vec<AttributeValue> = items.iter().map(|i| i.get("pk").expect("an item with its key").clone()).collect();
    let owner = "01JDQ5A7K2M9P4R6T8V1W3X5Z7";
    let id = "1795744605123.001";
    match call {
        WriteCall::LockUpdate => {
            client
                .update_item()
                .table_name(table)
                .key("pk", keys[0].clone())
                .update_expression("SET #l = :tx, #a = :id")
                .condition_expression("attribute_exists(#pk) AND attribute_not_exists(#l)")
                .expression_attribute_names("#pk", "pk")
                .expression_attribute_names("#l", LOCK)
                .expression_attribute_names("#a", LOCKED_AT)
                .expression_attribute_values(":tx", sv(owner))
                .expression_attribute_values(":id", nv(id))
                .return_values(ReturnValue::AllOld)
                .send()
                .await
                .expect("a lock-shaped UpdateItem");
        }
        WriteCall::ApplyUpdate => {
            client
                .update_item()
                .table_name(table)
                .key("pk", keys[0].clone())
                .update_expression("ADD v :one REMOVE #l, #a")
                .condition_expression("#l = :tx AND #a = :id")
                .expression_attribute_names("#l", LOCK)
                .expression_attribute_names("#a", LOCKED_AT)
                .expression_attribute_values(":tx", sv(owner))
                .expression_attribute_values(":id", nv(id))
                .expression_attribute_values(":one", nv("1"))
                .send()
                .await
                .expect("an apply-shaped UpdateItem");
        }
        WriteCall::Transact100 => {
            let items = keys.iter().map(|k| {
                let update = Update::builder()
                    .table_name(table)
                    .key("pk", k.clone())
                    .update_expression("ADD v :one")
                    .condition_expression("attribute_not_exists(#l)")
                    .expression_attribute_names("#l", LOCK)
                    .expression_attribute_values(":one", nv("1"))
                    .build()
                    .expect("a complete Update");
                TransactWriteItem::builder().update(update).build()
            });
            client
                .transact_write_items()
                .set_transact_items(Some(items.collect()))
                .send()
                .await
                .expect("TransactWriteItems of 100 updates");
        }
        WriteCall::PartiqlLock25 | WriteCall::PartiqlApply25 => {
            let statements = keys.iter().map(|k| {
                let (statement, parameters) = if call == WriteCall::PartiqlLock25 {
                    (
                        format!(
                            "UPDATE \"{table}\" SET \"{LOCK}\" = ? SET \"{LOCKED_AT}\" = ? WHERE \"pk\" = ? AND \
                             \"pk\" IS NOT MISSING AND \"{LOCK}\" IS MISSING RETURNING ALL OLD *"
                        ),
                        vec![sv(owner), nv(id), k.clone()],
                    )
                } else {
                    (
                        format!(
                            "UPDATE \"{table}\" SET \"v\" = \"v\" + 1 REMOVE \"{LOCK}\" REMOVE \"{LOCKED_AT}\" WHERE \
                             \"pk\" = ? AND \"{LOCK}\" = ? AND \"{LOCKED_AT}\" = ?"
                        ),
                        vec![k.clone(), sv(owner), nv(id)],
                    )
                };
                BatchStatementRequest::builder()
                    .statement(statement)
                    .set_parameters(Some(parameters))
                    .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
                    .build()
                    .expect("a complete statement")
            });
            let answer = client
                .batch_execute_statement()
                .set_statements(Some(statements.collect()))
                .send()
                .await
                .expect("BatchExecuteStatement");
            if let Some(e) = answer.responses().iter().find_map(|r| r.error()) {
                panic!("{call:?}: a statement was refused: {e:?}");
            }
        }
        WriteCall::BatchPut25 => {
            let puts = items.iter().map(|item| {
                WriteRequest::builder()
                    .put_request(PutRequest::builder().set_item(Some(item.clone())).build().expect("a complete put"))
                    .build()
            });
            let answer =
                client.batch_write_item().request_items(table, puts.collect()).send().await.expect("BatchWriteItem");
            assert!(answer.unprocessed_items().is_none_or(|u| u.is_empty()), "DynamoDB Local left items unprocessed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_cpu_time_is_read_and_grows_with_work() {
        let before = cpu_seconds(None).expect("Linux reports this process's CPU time");
        let mut x = 0u64;
        let started = std::time::Instant::now();
        while started.elapsed() < std::time::Duration::from_millis(150) {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        }
        std::hint::black_box(x);
        let after = cpu_seconds(None).expect("again");
        assert!(after - before >= 0.05, "150 ms of spinning counted {:.3} s", after - before);
        assert_eq!(cpu_seconds(Some(u32::MAX)), None, "no such process");
    }

    #[test]
    fn dynamodb_local_is_found_by_the_port_of_its_endpoint() {
        let dir = crate::root().join(".local");
        std::fs::create_dir_all(&dir).unwrap();
        let port = 1; // no server listens on port 1
        let file = dir.join(format!("dynamodb-{port}.pid"));
        std::fs::write(&file, "4242\n").unwrap();
        let found = dynamodb_local_pid(&format!("http://127.0.0.1:{port}"));
        std::fs::remove_file(&file).unwrap();
        assert_eq!(found, Some(4242));
        assert_eq!(dynamodb_local_pid("http://127.0.0.1:2"), None);
    }
}
