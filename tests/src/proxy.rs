//! `tools/ddb-proxy.mjs` in front of this run's DynamoDB Local: a network delay added to every request, a share of
//! the writes answered with DynamoDB's throttling errors, and writes held back to be delivered late. Stopped when
//! dropped.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use serde_json::Value;

/// A running proxy and its base URL.
pub struct Proxy {
    child: Child,
    pub url: String,
}

impl Proxy {
    /// A proxy that holds every request `delay_ms` before passing it on, and answers a share `throttle` (0 to 1) of
    /// the writes with `ProvisionedThroughputExceededException` (seeded, so a run's throttled writes repeat).
    pub async fn start(delay_ms: u64, throttle: f64) -> Proxy {
        Self::start_args(&["--delay-ms", &delay_ms.to_string(), "--throttle", &throttle.to_string()]).await
    }

    /// A proxy started with `args` (those of `tools/ddb-proxy.mjs`, seeded with 7 unless they give a seed), which
    /// ends with this process however it ends.
    pub async fn start_args(args: &[&str]) -> Proxy {
        let target = crate::endpoint().await;
        let script = crate::root().join("tools/ddb-proxy.mjs");
        let seed: &[&str] = if args.contains(&"--seed") { &[] } else { &["--seed", "7"] };
        let mut child = Command::new("node")
            .arg(script)
            .args(["--target", &target, "--parent-pid", &std::process::id().to_string()])
            .args(args)
            .args(seed)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("node runs tools/ddb-proxy.mjs");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut line).expect("the proxy prints its URL");
        Proxy { child, url: line.trim().to_string() }
    }

    /// `{"requests", "writes", "throttled", "held", "released", "lost", "landedLate", "idleDropped", ...}` so far.
    pub async fn stats(&self) -> Value {
        stats_of(&self.url).await
    }

    /// The proxy's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Holds the next `count` writes whose request body contains every text of `texts`: each is answered at once
    /// with `InternalServerError` and delivered to DynamoDB only at [`Proxy::release`].
    pub async fn hold(&self, texts: &[&str], count: usize) {
        self.control("POST", "hold", Some(serde_json::json!({"match": texts, "count": count}))).await;
    }

    /// [`Proxy::hold`], but each held write gets no answer at all: its sender's attempt timeout ends the wait.
    pub async fn hold_silently(&self, texts: &[&str], count: usize) {
        self.control("POST", "hold", Some(serde_json::json!({"match": texts, "count": count, "silent": true}))).await;
    }

    /// Delivers every held write to DynamoDB: `{"released", "statuses", "answers"}` once DynamoDB has answered them.
    pub async fn release(&self) -> Value {
        self.control("POST", "release", None).await
    }

    async fn control(&self, method: &str, what: &str, body: Option<Value>) -> Value {
        control(&self.url, method, what, body)
    }
}

/// The stats of the proxy at `url` (one a stack started for its functions: [`crate::stack::Stack::stand_in`]).
pub async fn stats_of(url: &str) -> Value {
    control(url, "GET", "stats", None)
}

/// Makes the proxy at `url` lose the answers of a share `lose` of the writes, each delivered to DynamoDB up to
/// `late_ms` later (`tools/ddb-proxy.mjs --lose --late-ms`).
pub async fn lose_answers(url: &str, lose: f64, late_ms: u64) -> Value {
    control(url, "POST", "set", Some(serde_json::json!({"lose": lose, "lateMs": late_ms})))
}

fn control(url: &str, method: &str, what: &str, body: Option<Value>) -> Value {
    let mut curl = Command::new("curl");
    curl.args(["-s", "-X", method, &format!("{url}/__proxy/{what}")]);
    if let Some(b) = body {
        curl.args(["-H", "content-type: application/json", "-d", &b.to_string()]);
    }
    let out = curl.output().expect("curl");
    serde_json::from_slice(&out.stdout).expect("the proxy's answer")
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
