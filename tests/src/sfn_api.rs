//! Local stand-ins for the Step Functions API (AWS JSON 1.0 over HTTP, `X-Amz-Target: AWSStepFunctions.<Operation>`),
//! for clients that take an endpoint (`AWS_ENDPOINT_URL_SFN`): the CLI and the sweeper.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A Step Functions client for the endpoint at `url`.
pub fn client_for(url: &str) -> aws_sdk_sfn::Client {
    use aws_sdk_sfn::config::{BehaviorVersion, Credentials, Region};
    let conf = aws_sdk_sfn::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .endpoint_url(url)
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new("local", "local", None, None, "tests"))
        .build();
    aws_sdk_sfn::Client::from_conf(conf)
}

/// The state machine ARN [`on_stack`] answers to.
pub const STATE_MACHINE_ARN: &str = "arn:aws:states:us-east-1:000000000000:stateMachine:dynamo-saga-local";

/// Serves AWS JSON 1.0 requests on a free local port: `handler(operation, body)` answers each. Returns the endpoint.
pub async fn serve<F, Fut>(handler: F) -> String
where
    F: Fn(String, Value) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Value> + Send,
{
    serve_on(0, handler).await
}

/// [`serve`] on a given local port (0: a free one).
pub async fn serve_on<F, Fut>(port: u16, handler: F) -> String
where
    F: Fn(String, Value) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Value> + Send,
{
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        loop {
            let Ok((mut sock, _)) = listener.accept().await else { return };
            let handler = handler.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    let Ok(n) = sock.read(&mut chunk).await else { return };
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    let text = String::from_utf8_lossy(&buf).to_string();
                    let Some(end) = text.find("\r\n\r\n") else { continue };
                    let head = text[..end].to_ascii_lowercase();
                    let len: usize = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length:").map(|v| v.trim().parse().unwrap()))
                        .unwrap_or(0);
                    if buf.len() < end + 4 + len {
                        continue;
                    }
                    let body: Value = serde_json::from_slice(&buf[end + 4..end + 4 + len]).unwrap_or(Value::Null);
                    buf.drain(..end + 4 + len);
                    let op = head
                        .lines()
                        .find_map(|l| {
                            l.strip_prefix("x-amz-target:")
                                .map(|v| v.trim().trim_start_matches("awsstepfunctions.").to_string())
                        })
                        .unwrap_or_default();
                    let reply = handler(op, body).await;
                    // An answer with `__type` is an error, which AWS JSON APIs send with a 400.
                    let status = if reply.get("__type").is_some() { "400 Bad Request" } else { "200 OK" };
                    let reply = reply.to_string();
                    let resp = format!("HTTP/1.1 {status}\r\ncontent-type: application/x-amz-json-1.0\r\ncontent-length: {}\r\n\r\n{reply}", reply.len());
                    if sock.write_all(resp.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    url
}

/// A Step Functions endpoint whose `StartExecution` runs the real state machine on the local stack
/// ([`crate::stack::Stack::execute`]) in the background, and whose `DescribeExecution` reports it. It runs on a
/// thread of its own for the rest of the process, so it outlives the test (and the runtime) that asked for it.
pub fn on_stack() -> String {
    on_stack_at(0)
}

/// [`on_stack`] on a given local port (0: a free one).
pub fn on_stack_at(port: u16) -> String {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
        rt.block_on(async {
            tx.send(serve_stack(port).await).expect("send the endpoint");
            std::future::pending::<()>().await
        })
    });
    rx.recv().expect("the local Step Functions endpoint")
}

/// [`on_stack`]'s server. Operation names arrive lowercased.
async fn serve_stack(port: u16) -> String {
    let runs: Arc<Mutex<HashMap<String, Value>>> = Arc::default();
    serve_on(port, move |op, body| {
        let runs = runs.clone();
        async move {
            match op.as_str() {
                "startexecution" => {
                    let name = body["name"].as_str().map(String::from).unwrap_or_else(|| ulid_like(&runs));
                    let arn = format!("arn:aws:states:us-east-1:000000000000:execution:dynamo-saga-local:{name}");
                    let input: Value = serde_json::from_str(body["input"].as_str().unwrap_or("{}")).unwrap_or(Value::Null);
                    // Names are unique, as in a Standard workflow: the same name and input while the execution runs
                    // is the same execution, anything else an error.
                    if let Some(seen) = runs.lock().unwrap().get(&arn) {
                        if seen["status"] == "RUNNING" && seen["input"].as_str() == Some(input.to_string().as_str()) {
                            return json!({"executionArn": arn, "startDate": 1.7e9});
                        }
                        return json!({"__type": "ExecutionAlreadyExists", "message": format!("Execution Already Exists: '{arn}'")});
                    }
                    runs.lock().unwrap().insert(arn.clone(), json!({"status": "RUNNING", "input": input.to_string()}));
                    let (runs, key) = (runs.clone(), arn.clone());
                    tokio::spawn(async move {
                        let ex = crate::stack::stack().await.execute(&input).await;
                        let mut done = json!({"status": ex.status, "input": input.to_string()});
                        if let Some(e) = ex.error {
                            done["error"] = json!(e);
                        }
                        if let Some(c) = ex.cause {
                            done["cause"] = json!(c);
                        }
                        if !ex.output.is_null() {
                            done["output"] = json!(ex.output.to_string());
                        }
                        runs.lock().unwrap().insert(key, done);
                    });
                    json!({"executionArn": arn, "startDate": 1.7e9})
                }
                "listexecutions" => {
                    let executions: Vec<Value> = runs
                        .lock()
                        .unwrap()
                        .iter()
                        .map(|(arn, run)| json!({"executionArn": arn, "stateMachineArn": STATE_MACHINE_ARN,
                            "name": arn.rsplit(':').next(), "status": run["status"], "startDate": 1.7e9}))
                        .collect();
                    json!({ "executions": executions })
                }
                "describeexecution" => {
                    let arn = body["executionArn"].as_str().unwrap_or("").to_string();
                    let mut out = runs.lock().unwrap().get(&arn).cloned().unwrap_or(json!({"status": "FAILED", "error": "ExecutionDoesNotExist"}));
                    out["executionArn"] = json!(arn);
                    out["stateMachineArn"] = json!(STATE_MACHINE_ARN);
                    out["startDate"] = json!(1.7e9);
                    out
                }
                other => json!({"__type": "UnknownOperationException", "message": format!("{other} is not served here")}),
            }
        }
    })
    .await
}

fn ulid_like(runs: &Mutex<HashMap<String, Value>>) -> String {
    format!("run-{}", runs.lock().unwrap().len())
}
