//! The local stack for end-to-end tests: DynamoDB Local, the Lambda functions behind `cargo lambda watch`, and the
//! real state machine definition run by `tools/sfn-local.mjs` (aws-local-stepfunctions), one runner per test process.
//!
//! `tools/test.sh` starts one stack for the whole run and exports its settings (`LAMBDA_ENDPOINT`,
//! `DYNAMODB_ENDPOINT`, `SAGA_TABLE`, `SAGA_FAULT_FILE`). A test binary run without them starts its own through
//! `tools/stack.sh`, stopped by a watchdog when the process exits.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use aws_sdk_dynamodb::Client;
use serde_json::{json, Value};
use tokio::sync::{oneshot, OnceCell};

use crate::{client_for, create_tx_table, root};

pub struct Stack {
    pub dynamodb: String,
    pub lambda: String,
    pub tx_table: String,
    pub fault_file: PathBuf,
    /// The functions' `SAGA_MAX_ACTIONS`.
    pub max_actions: usize,
    /// The stack's Step Functions endpoint (`target/debug/stepfunctions-local`), the functions' `AWS_ENDPOINT_URL_SFN`.
    pub sfn: String,
    /// The stack's directory: `lambda.log` holds what the functions wrote (their metrics lines among it).
    pub dir: PathBuf,
    /// The API's base URL (`tools/apigw-local.py`): `POST {api}/transactions`, signed ([`crate::api`]).
    pub api: String,
    /// moto's server: SQS and CloudFormation.
    pub moto: String,
    /// The `tools/ddb-proxy.mjs` the functions send their DynamoDB requests through, when they have one (an MRSC
    /// stand-in, or `SAGA_STACK_PROXY`'s).
    pub stand_in: Option<String>,
    /// The events function's dead-letter queue, at moto's server.
    pub dead_letter_queue: String,
    /// The queue a rule on moto's default bus fills with the end event of every transaction the functions end.
    pub end_events: String,
}

/// The most actions a transaction may have on a stack the tests start: above the 10,000-action test, and low enough
/// that a request over it still fits a Lambda payload (6 MB).
pub const TEST_MAX_ACTIONS: usize = 12_000;

static STACK: OnceCell<Stack> = OnceCell::const_new();

pub async fn stack() -> &'static Stack {
    STACK
        .get_or_init(|| async {
            let settings = match std::env::var("LAMBDA_ENDPOINT") {
                Ok(_) => [
                    "DYNAMODB_ENDPOINT",
                    "LAMBDA_ENDPOINT",
                    "SAGA_TABLE",
                    "SAGA_FAULT_FILE",
                    "SAGA_MAX_ACTIONS",
                    "SFN_ENDPOINT",
                    "STACK_DIR",
                    "API_URL",
                    "MOTO_ENDPOINT",
                    "DEAD_LETTER_QUEUE_URL",
                    "END_EVENTS_QUEUE_URL",
                ]
                .iter()
                .map(|k| (k.to_string(), std::env::var(k).unwrap_or_else(|_| panic!("{k} is not set"))))
                .chain(std::env::var("SAGA_DYNAMODB_STAND_IN").ok().map(|u| ("SAGA_DYNAMODB_STAND_IN".to_string(), u)))
                .collect(),
                Err(_) => tokio::task::spawn_blocking(start_own).await.unwrap(),
            };
            let st = Stack::from_settings(&settings);
            let client = st.client();
            if client.describe_table().table_name(&st.tx_table).send().await.is_err() {
                create_tx_table(&client, &st.tx_table).await;
            }
            st
        })
        .await
}

fn start_own() -> HashMap<String, String> {
    let max_actions = TEST_MAX_ACTIONS.to_string();
    start_named(&format!("tests-{}", std::process::id()), &[("SAGA_MAX_ACTIONS", &max_actions)])
}

/// A stack of this process's, as one Region of a multi-Region group: on this run's DynamoDB Local, its transactions
/// table `tx_table`, its functions in `region` and in MRSC mode, each DynamoDB request of theirs through an MRSC
/// stand-in of its own (`tools/stack.sh`, `SAGA_MULTI_REGION_CONSISTENCY=strong`). Stopped when dropped.
pub struct Region {
    pub stack: Stack,
    name: String,
}

impl Region {
    pub async fn start(name: &str, region: &str, tx_table: &str) -> Region {
        let vars = [
            ("SAGA_STACK_REGION", region.to_string()),
            ("SAGA_MULTI_REGION_CONSISTENCY", "strong".to_string()),
            ("SAGA_TABLE", tx_table.to_string()),
        ];
        Self::start_with(name, &vars).await
    }

    /// A stack of this process's on this run's DynamoDB Local, started with `vars` (`tools/stack.sh`'s settings: its
    /// transactions table, a proxy for its functions' requests, ...). Stopped when dropped.
    pub async fn start_with(name: &str, vars: &[(&str, String)]) -> Region {
        let ddb = crate::endpoint().await;
        let name = format!("{name}-{}", std::process::id());
        let vars: Vec<(String, String)> = std::iter::once(("SAGA_STACK_DYNAMODB".to_string(), ddb))
            .chain(vars.iter().map(|(k, v)| (k.to_string(), v.clone())))
            .collect();
        let started = name.clone();
        let settings = tokio::task::spawn_blocking(move || {
            let vars: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            start_named(&started, &vars)
        })
        .await
        .unwrap();
        Region { stack: Stack::from_settings(&settings), name }
    }

    /// Stops the stack: its functions, state machine and stand-in are gone, as a Region that stopped.
    pub fn stop(&self) {
        let status = Command::new(root().join("tools/stack.sh")).args(["stop", &self.name]).status();
        assert!(status.is_ok_and(|s| s.success()), "could not stop stack {}", self.name);
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        let _ = Command::new(root().join("tools/stack.sh")).args(["stop", &self.name]).status();
    }
}

/// Starts stack `name` with `vars` set, stopped by a watchdog when this process ends; its settings.
fn start_named(name: &str, vars: &[(&str, &str)]) -> HashMap<String, String> {
    let script = root().join("tools/stack.sh");
    let out = Command::new(&script)
        .args(["start", name])
        .envs(vars.iter().copied())
        .stderr(Stdio::inherit())
        .output()
        .expect("run tools/stack.sh");
    assert!(out.status.success(), "could not start the local stack {name}");
    let watch =
        format!("while kill -0 {} 2>/dev/null; do sleep 1; done; {} stop {name}", std::process::id(), script.display());
    // It outlives this process to clean up after it; a thread reaps it should it end first.
    let mut watchdog =
        Command::new("sh").args(["-c", &watch]).stdin(Stdio::null()).stdout(Stdio::null()).spawn().expect("watchdog");
    std::thread::spawn(move || watchdog.wait());
    let file = String::from_utf8(out.stdout).unwrap();
    std::fs::read_to_string(file.trim())
        .expect("stack settings")
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Runs `cmd` with `input` on its stdin, its stderr passed through; returns what it wrote to stdout.
async fn piped(mut cmd: Command, input: String) -> std::process::Output {
    tokio::task::spawn_blocking(move || {
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .and_then(|mut c| {
                c.stdin.take().unwrap().write_all(input.as_bytes())?;
                c.wait_with_output()
            })
            .unwrap_or_else(|e| panic!("{cmd:?}: {e}"))
    })
    .await
    .unwrap()
}

/// The state machine runner this process shares: one `node tools/sfn-local.mjs --serve`, started on first use, runs
/// every execution the process asks for, side by side. A runner per execution spent about half a second of CPU
/// loading its modules each time, more than most executions take. When this process exits, the runner's stdin closes:
/// the executions under way run to their end, as Step Functions' would, and it exits.
struct Runner {
    stdin: Mutex<ChildStdin>,
    waiting: Arc<Mutex<Waiting>>,
    next_id: AtomicU64,
}

/// The executions asked for and not yet answered, by request id; `None` once the runner has ended.
type Waiting = Option<HashMap<u64, oneshot::Sender<Value>>>;

fn runner() -> &'static Runner {
    static RUNNER: OnceLock<Runner> = OnceLock::new();
    RUNNER.get_or_init(|| {
        let mut child = Command::new("node")
            .arg(root().join("tools/sfn-local.mjs"))
            .arg("--serve")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start node tools/sfn-local.mjs --serve");
        let stdin = Mutex::new(child.stdin.take().expect("the runner's stdin"));
        let stdout = child.stdout.take().expect("the runner's stdout");
        let waiting: Arc<Mutex<Waiting>> = Arc::new(Mutex::new(Some(HashMap::new())));
        let answers = waiting.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let reply: Value = serde_json::from_str(&line).unwrap_or_default();
                let Some(id) = reply["id"].as_u64() else {
                    eprintln!("sfn-local --serve printed a line that is not an answer: {line}");
                    break;
                };
                if let Some(waiter) = answers.lock().unwrap().as_mut().and_then(|w| w.remove(&id)) {
                    let _ = waiter.send(reply);
                }
            }
            // The runner has ended (or cannot be understood): whatever it has not answered, it never will.
            answers.lock().unwrap().take();
            let _ = child.wait();
        });
        Runner { stdin, waiting, next_id: AtomicU64::new(1) }
    })
}

impl Runner {
    /// Runs one execution with `args` (`tools/sfn-local.mjs`'s options, `--input` left out); returns its record.
    async fn execute(&'static self, args: Vec<String>, input: &Value) -> Value {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (answer, answered) = oneshot::channel();
        let asked = self.waiting.lock().unwrap().as_mut().map(|waiting| waiting.insert(id, answer)).is_some();
        assert!(asked, "tools/sfn-local.mjs --serve has ended (its stderr is above)");
        let line = format!("{}\n", serde_json::json!({"id": id, "args": args, "input": input}));
        tokio::task::spawn_blocking(move || {
            let mut stdin = self.stdin.lock().unwrap();
            stdin.write_all(line.as_bytes()).and_then(|()| stdin.flush())
        })
        .await
        .unwrap()
        .expect("send a request to tools/sfn-local.mjs --serve");
        let reply = answered.await.expect("tools/sfn-local.mjs --serve ended before it answered (its stderr is above)");
        if let Some(error) = reply["error"].as_str() {
            panic!("sfn-local: {error}");
        }
        reply["record"].clone()
    }
}

/// How an execution of the state machine ended, as `tools/sfn-local.mjs` reports it.
#[derive(Debug, Clone)]
pub struct Execution {
    pub status: String,
    pub output: Value,
    pub error: Option<String>,
    pub cause: Option<String>,
    pub transitions: u64,
    /// How many times the execution entered each state, by name.
    pub state_entries: std::collections::BTreeMap<String, u64>,
    pub history_events: u64,
    pub task_calls: u64,
    /// Each function's invocations, their durations in ms.
    pub task_ms: std::collections::BTreeMap<String, Vec<u64>>,
    pub duration_ms: u64,
}

impl Execution {
    /// The cancellation a `TransactionCanceled` failure carries: the Lambda error's message, itself JSON
    /// (`TransactionId`, `Message`, `CancellationReasons`, `ParentCancellationReason`), checked by
    /// [`crate::assert_named_json`].
    pub fn cancellation(&self) -> Option<Value> {
        if self.error.as_deref() != Some("TransactionCanceled") {
            return None;
        }
        let cause: Value = serde_json::from_str(self.cause.as_deref()?).ok()?;
        let c: Value = serde_json::from_str(cause.get("errorMessage")?.as_str()?).ok()?;
        crate::assert_named_json(&c);
        Some(c)
    }
}

/// What one function's processes have used so far, from `/proc` (Linux).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ProcessUse {
    /// The largest peak resident set (`VmHWM`) of any of its processes, in KiB: what Lambda's "Max Memory Used" reports.
    pub peak_rss_kib: u64,
    /// User and system CPU time of all its processes, in ms.
    pub cpu_ms: u64,
    pub processes: usize,
}

/// One process's parent and CPU time in clock ticks (user and system), from `/proc/<pid>/stat`.
fn proc_stat(pid: u32) -> Option<(u32, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may hold spaces: the fields that follow come after the last ')'.
    let rest: Vec<&str> = stat[stat.rfind(')')? + 1..].split_whitespace().collect();
    let ppid = rest.get(1)?.parse().ok()?;
    let ticks = rest.get(11)?.parse::<u64>().ok()? + rest.get(12)?.parse::<u64>().ok()?;
    Some((ppid, ticks))
}

/// Each function's processes among `root`'s descendants, by binary name (`saga-lock`, ...).
pub fn function_use_under(root_pid: u32) -> std::collections::BTreeMap<String, ProcessUse> {
    let ticks_per_s: u64 = Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(100);
    let procs: Vec<(u32, u32, u64)> = std::fs::read_dir("/proc")
        .map(|d| d.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok()).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .filter_map(|pid| proc_stat(pid).map(|(ppid, ticks)| (pid, ppid, ticks)))
        .collect();
    let mut family = std::collections::BTreeSet::from([root_pid]);
    loop {
        let before = family.len();
        family.extend(
            procs.iter().filter(|(_, ppid, _)| family.contains(ppid)).map(|(pid, _, _)| *pid).collect::<Vec<_>>(),
        );
        if family.len() == before {
            break;
        }
    }
    let mut out: std::collections::BTreeMap<String, ProcessUse> = Default::default();
    for (pid, _, ticks) in procs.iter().filter(|(pid, _, _)| *pid != root_pid && family.contains(pid)) {
        let Ok(exe) = std::fs::read_link(format!("/proc/{pid}/exe")) else { continue };
        let Some(name) = exe.file_name().and_then(|n| n.to_str()).filter(|n| n.starts_with("saga-")) else { continue };
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let hwm = status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .unwrap_or(0);
        let u = out.entry(name.to_string()).or_default();
        u.peak_rss_kib = u.peak_rss_kib.max(hwm);
        u.cpu_ms += ticks * 1000 / ticks_per_s;
        u.processes += 1;
    }
    out
}

/// A Lambda function error: its `errorType` and `errorMessage`.
#[derive(Debug, Clone, PartialEq)]
pub struct FunctionError {
    pub error_type: String,
    pub message: String,
}

impl Stack {
    /// The stack `tools/stack.sh` describes in `settings` (its settings file's lines).
    pub fn from_settings(settings: &HashMap<String, String>) -> Stack {
        Stack {
            dynamodb: settings["DYNAMODB_ENDPOINT"].clone(),
            lambda: settings["LAMBDA_ENDPOINT"].clone(),
            tx_table: settings["SAGA_TABLE"].clone(),
            fault_file: settings["SAGA_FAULT_FILE"].clone().into(),
            max_actions: settings["SAGA_MAX_ACTIONS"].parse().expect("SAGA_MAX_ACTIONS is a number"),
            sfn: settings["SFN_ENDPOINT"].clone(),
            dir: settings["STACK_DIR"].clone().into(),
            api: settings["API_URL"].clone(),
            moto: settings["MOTO_ENDPOINT"].clone(),
            dead_letter_queue: settings["DEAD_LETTER_QUEUE_URL"].clone(),
            end_events: settings["END_EVENTS_QUEUE_URL"].clone(),
            stand_in: settings.get("SAGA_DYNAMODB_STAND_IN").filter(|u| !u.is_empty()).cloned(),
        }
    }

    pub fn client(&self) -> Client {
        client_for(&self.dynamodb)
    }

    /// The CloudWatch EMF line the Release function wrote when it finished `tx_id` (`None` if it wrote none), and how
    /// many it wrote.
    pub fn metrics_of(&self, tx_id: &str) -> (Option<Value>, usize) {
        let log = std::fs::read_to_string(self.dir.join("lambda.log")).unwrap_or_default();
        let lines: Vec<Value> = log
            .lines()
            .filter(|l| l.contains("\"_aws\"") && l.contains(tx_id))
            .filter_map(|l| serde_json::from_str::<Value>(&l[l.find('{').unwrap_or(0)..]).ok())
            .filter(|v| v["TransactionId"] == tx_id)
            .collect();
        (lines.first().cloned(), lines.len())
    }

    /// Each function's processes behind the stack's `cargo lambda watch`, by binary name: peak memory and CPU time so
    /// far (`cargo lambda watch` keeps a function's process between invocations, as Lambda keeps an environment).
    pub fn function_use(&self) -> std::collections::BTreeMap<String, ProcessUse> {
        let pid = std::fs::read_to_string(self.dir.join("lambda.pid")).ok().and_then(|p| p.trim().parse().ok());
        pid.map(function_use_under).unwrap_or_default()
    }

    /// An SQS client for the stack's moto server, where the events function's dead-letter queue is.
    pub fn sqs_client(&self) -> aws_sdk_sqs::Client {
        use aws_sdk_sqs::config::{BehaviorVersion, Credentials, Region};
        let conf = aws_sdk_sqs::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .endpoint_url(&self.moto)
            .region(Region::new("us-east-1"))
            .credentials_provider(Credentials::new("local", "local", None, None, "tests"))
            .build();
        aws_sdk_sqs::Client::from_conf(conf)
    }

    /// The end events of the transactions `ids` (every one received for each, in order), read off the end-events queue
    /// within a minute. Every message read is taken off the queue: only this reads it.
    pub async fn end_events(&self, ids: &[String]) -> std::collections::BTreeMap<String, Vec<Value>> {
        let sqs = self.sqs_client();
        let mut found: std::collections::BTreeMap<String, Vec<Value>> = Default::default();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while std::time::Instant::now() < deadline && ids.iter().any(|id| !found.contains_key(id)) {
            let got = sqs
                .receive_message()
                .queue_url(&self.end_events)
                .max_number_of_messages(10)
                .wait_time_seconds(1)
                .send()
                .await
                .expect("ReceiveMessage");
            for m in got.messages() {
                let event: Value = serde_json::from_str(m.body().unwrap_or("null")).unwrap_or(Value::Null);
                if let Some(id) = event["detail"]["TransactionId"].as_str().filter(|id| ids.iter().any(|i| i == id)) {
                    found.entry(id.to_string()).or_default().push(event.clone());
                }
                let handle = m.receipt_handle().unwrap_or_default();
                sqs.delete_message().queue_url(&self.end_events).receipt_handle(handle).send().await.expect("delete");
            }
        }
        found
    }

    /// The message the events function's dead-letter queue holds for the event with id `event_id`, taken off it: its
    /// body (the event) and its string attributes; `None` when there is none. Other tests' messages are left.
    pub async fn dead_letter(&self, event_id: &str) -> Option<(Value, std::collections::BTreeMap<String, String>)> {
        let sqs = self.sqs_client();
        let queue = self.dead_letter_queue.as_str();
        let mut seen = std::collections::HashSet::new();
        loop {
            let got = sqs
                .receive_message()
                .queue_url(queue)
                .max_number_of_messages(10)
                .message_attribute_names("All")
                .send()
                .await
                .expect("ReceiveMessage");
            let fresh: Vec<_> =
                got.messages().iter().filter(|m| seen.insert(m.message_id().unwrap_or_default().to_string())).collect();
            if fresh.is_empty() {
                return None;
            }
            for m in fresh {
                let handle = m.receipt_handle().unwrap_or_default();
                let body: Value = serde_json::from_str(m.body().unwrap_or("null")).unwrap_or(Value::Null);
                if body["id"] != event_id {
                    // Back on the queue at once, for the test it belongs to.
                    sqs.change_message_visibility()
                        .queue_url(queue)
                        .receipt_handle(handle)
                        .visibility_timeout(0)
                        .send()
                        .await
                        .expect("ChangeMessageVisibility");
                    continue;
                }
                sqs.delete_message().queue_url(queue).receipt_handle(handle).send().await.expect("DeleteMessage");
                let attributes = m
                    .message_attributes()
                    .into_iter()
                    .flatten()
                    .filter_map(|(k, v)| Some((k.clone(), v.string_value()?.to_string())))
                    .collect();
                return Some((body, attributes));
            }
        }
    }

    /// A Step Functions client for the stack's endpoint, the one its functions start executions on.
    pub fn sfn_client(&self) -> aws_sdk_sfn::Client {
        crate::sfn_api::client_for(&self.sfn)
    }

    /// Waits (up to 2 minutes) for execution `arn` of the local Step Functions endpoint to end: its status, output,
    /// error and cause.
    pub async fn ended(&self, arn: &str) -> (String, String, String, String) {
        let sfn = self.sfn_client();
        for _ in 0..600 {
            let d = sfn.describe_execution().execution_arn(arn).send().await.unwrap();
            if d.status().as_str() != "RUNNING" {
                let text = |t: Option<&str>| t.unwrap_or("").to_string();
                return (d.status().as_str().to_string(), text(d.output()), text(d.error()), text(d.cause()));
            }
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
        panic!("{arn} still runs after 2 minutes");
    }

    /// The answer to `POST /transactions` once its transaction has ended: the answer itself when it says `Finished`
    /// (a request carried out in one call, or one that had ended), otherwise, once the execution it names has ended,
    /// what `GET /transactions/{id}` says. In MRSC mode no request is carried out in one call.
    pub async fn settled(&self, answer: &Value) -> Value {
        if answer["Finished"] == Value::Bool(true) {
            return answer.clone();
        }
        let arn =
            answer["ExecutionArn"].as_str().unwrap_or_else(|| panic!("a pending answer names its execution: {answer}"));
        self.ended(arn).await;
        let event = crate::api::event("GET", "/transactions/{id}", json!({ "id": answer["TransactionId"] }), None);
        let out = self.invoke("saga-status", &event).await.expect("the status function answers");
        serde_json::from_str(out["body"].as_str().unwrap()).unwrap()
    }

    /// Invokes a function through the local Lambda Invoke API, as `aws lambda invoke` or `sam local invoke` would.
    pub async fn invoke(&self, function: &str, payload: &Value) -> Result<Value, FunctionError> {
        let url = format!("{}/2015-03-31/functions/{function}/invocations", self.lambda);
        let mut curl = Command::new("curl");
        curl.args([
            "-s",
            "-X",
            "POST",
            "-H",
            "content-type: application/json",
            "--data-binary",
            "@-",
            "-w",
            "\n%{http_code}",
            &url,
        ]);
        let out = piped(curl, payload.to_string()).await;
        let text = String::from_utf8(out.stdout).unwrap();
        let (body, code) = text.rsplit_once('\n').expect("status code");
        let value: Value = serde_json::from_str(body).unwrap_or_else(|_| panic!("{function} returned {code}: {body}"));
        match code {
            "200" if value.get("errorType").is_none() => Ok(value),
            "200" | "500" => Err(FunctionError {
                error_type: value["errorType"].as_str().unwrap_or_default().to_string(),
                message: value["errorMessage"].as_str().unwrap_or_default().to_string(),
            }),
            other => panic!("{function} returned HTTP {other}: {body}"),
        }
    }

    /// Runs one execution of the state machine to its end, Wait states and retries shortened.
    pub async fn execute(&self, input: &Value) -> Execution {
        self.run(input, true, false).await
    }

    /// Runs one execution; `fast` shortens Wait states and retry pauses to 200 ms, `progress` prints a line per Task.
    pub async fn run(&self, input: &Value, fast: bool, progress: bool) -> Execution {
        self.run_named(input, fast, progress, None).await
    }

    /// [`Stack::execute`] with the execution named `name` (see [`Stack::inject_fault_for`]).
    pub async fn execute_named(&self, input: &Value, name: &str) -> Execution {
        self.run_named(input, true, false, Some(name)).await
    }

    async fn run_named(&self, input: &Value, fast: bool, progress: bool, name: Option<&str>) -> Execution {
        let mut args: Vec<String> = ["--lambda-endpoint", &self.lambda].map(String::from).to_vec();
        if let Some(name) = name {
            args.extend(["--name".to_string(), name.to_string()]);
        }
        if fast {
            args.extend(["--wait-ms", "200", "--retry-ms", "200"].map(String::from));
        }
        if !progress {
            args.push("--quiet".into());
        }
        let v = runner().execute(args, input).await;
        let n = |k: &str| v[k].as_u64().unwrap_or(0);
        let s = |k: &str| v[k].as_str().map(String::from);
        let ex = Execution {
            status: s("status").unwrap_or_default(),
            output: v["output"].clone(),
            error: s("error"),
            cause: s("cause"),
            transitions: n("transitions"),
            state_entries: serde_json::from_value(v["stateEntries"].clone()).unwrap_or_default(),
            history_events: n("historyEvents"),
            task_calls: n("taskCalls"),
            task_ms: serde_json::from_value(v["taskMs"].clone()).unwrap_or_default(),
            duration_ms: n("durationMs"),
        };
        // Every execution that ends cancelled must say which action (or the parent) and why.
        if ex.error.as_deref() == Some("TransactionCanceled") {
            assert!(
                ex.cancellation().is_some(),
                "a TransactionCanceled execution whose cause is not a cancellation: {ex:?}"
            );
        }
        ex
    }

    /// Makes the next call of `phase` for transaction `tx_id` (or, for Begin given a request, for the execution of
    /// that name) die after `writes` DynamoDB writes (debug builds of the functions only). Returns the fault's file, which the call renames to `<file>.taken` when it takes it.
    pub fn inject_fault_for(&self, tx_id: &str, phase: &str, writes: u64) -> PathBuf {
        let path = PathBuf::from(format!("{}.{tx_id}", self.fault_file.display()));
        std::fs::write(&path, format!("{phase} {writes}")).unwrap();
        path
    }

    /// [`Stack::inject_fault_for`], and the call's first lock write past the `writes`-th is held and sent once the
    /// transaction has finished: a write of a Lambda that timed out, landing after someone else ended its transaction.
    pub fn inject_late_fault_for(&self, tx_id: &str, phase: &str, writes: u64) -> PathBuf {
        let path = PathBuf::from(format!("{}.{tx_id}", self.fault_file.display()));
        std::fs::write(&path, format!("{phase} {writes} late")).unwrap();
        path
    }
}
