//! `tools/ddb-proxy.mjs` in front of this run's DynamoDB Local: a network delay added to every request, and a share
//! of the writes answered with DynamoDB's throttling errors. Stopped when dropped.

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
        let target = crate::endpoint().await;
        let script = crate::root().join("tools/ddb-proxy.mjs");
        let mut child = Command::new("node")
            .arg(script)
            .args(["--target", &target, "--delay-ms", &delay_ms.to_string()])
            .args(["--throttle", &throttle.to_string(), "--seed", "7"])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("node runs tools/ddb-proxy.mjs");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut line).expect("the proxy prints its URL");
        Proxy { child, url: line.trim().to_string() }
    }

    /// `{"requests", "writes", "throttled"}` so far.
    pub async fn stats(&self) -> Value {
        let out = Command::new("curl").args(["-s", &format!("{}/__proxy/stats", self.url)]).output().expect("curl");
        serde_json::from_slice(&out.stdout).expect("the proxy's stats")
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
