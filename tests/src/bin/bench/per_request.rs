//! CPU per DynamoDB request: the CLI's `submit --in-process` of N updates beside the bare SDK program (`bare`), which
//! sends the same two single-item writes per update through the SDK and does nothing else. Both are separate processes
//! of the benchmark's own build profile, run one after the other on the same items, through a proxy that counts their
//! requests (`tools/ddb-proxy.mjs`, no delay), each process's CPU time (user and system) taken from the kernel when it
//! exits. Where the machine has more than one core, both run on the first core (`taskset`) and DynamoDB Local and
//! the proxy on the others, so the client's CPU is its own.

use std::path::PathBuf;
use std::process::Command;

use harness::cpu::{dynamodb_local_pid, run_measured};
use harness::Env;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One size: medians over the runs.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CpuRow {
    pub actions: usize,
    pub runs: usize,
    /// Process CPU (ms) per DynamoDB request the proxy saw, median over the runs.
    pub saga_ms_per_request: f64,
    pub bare_ms_per_request: f64,
    /// The median of each run's dynamo-saga / bare CPU per request.
    pub ratio: f64,
    pub ratios: Vec<f64>,
    /// Process CPU (ms) per update, and requests per update.
    pub saga_ms_per_update: f64,
    pub bare_ms_per_update: f64,
    pub saga_requests_per_update: f64,
    pub bare_requests_per_update: f64,
    /// The client processes ran on a core of their own.
    pub pinned: bool,
}

/// The binary `name` of this build profile, beside the benchmark's own.
fn sibling(name: &str) -> PathBuf {
    let me = std::env::current_exe().expect("the benchmark's path");
    let path = me.with_file_name(name);
    assert!(path.exists(), "{} is missing: tools/bench.sh builds it", path.display());
    path
}

/// Whether `taskset` is there to pin processes with.
fn taskset() -> bool {
    Command::new("taskset").arg("--version").output().is_ok_and(|o| o.status.success())
}

/// Moves every thread of `pid` to `cores` (a `taskset` list such as `1-3`).
fn pin(pid: u32, cores: &str) {
    let ok = Command::new("taskset").args(["-a", "-p", "-c", cores, &pid.to_string()]).output();
    assert!(ok.is_ok_and(|o| o.status.success()), "taskset could not move process {pid} to cores {cores}");
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    if v.len() % 2 == 1 {
        v[mid]
    } else {
        (v[mid - 1] + v[mid]) / 2.0
    }
}

/// `runs` runs of each way at each size of `sizes`, on items of `bytes` bytes.
pub async fn measure(sizes: &[usize], bytes: usize, runs: usize) -> Vec<CpuRow> {
    let (cli, bare) = (sibling("dynamo-saga"), sibling("bare"));
    let proxy = harness::proxy::Proxy::start(0, 0.0).await;
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let dynamodb = dynamodb_local_pid(&harness::endpoint().await);
    let pinned = cores > 1 && taskset() && dynamodb.is_some();
    let others = format!("1-{}", cores - 1);
    if pinned {
        pin(proxy.pid(), &others);
        pin(dynamodb.expect("pinned only when known"), &others);
    }
    let requests = || async { proxy.stats().await["requests"].as_u64().expect("the proxy counts requests") };
    let mut out = Vec::new();
    for &n in sizes {
        let env = Env::new(&format!("bench-cpu-{n}")).await;
        let body = super::prepare(&env, super::Kind::Update, n, "cpu", bytes).await;
        let file = harness::root().join(format!(".local/bench-cpu-{n}.json"));
        std::fs::write(&file, body.to_string()).expect("write the request");
        let command = |program: &PathBuf| {
            let mut c = if pinned {
                let mut c = Command::new("taskset");
                c.args(["-c", "0"]).arg(program);
                c
            } else {
                Command::new(program)
            };
            // Nothing of the benchmark's environment (the local stack's settings): the defaults, as a user's shell.
            c.env_clear()
                .env("PATH", std::env::var_os("PATH").unwrap_or_default())
                .env("AWS_ENDPOINT_URL_DYNAMODB", &proxy.url)
                .env("AWS_REGION", "us-east-1")
                .env("AWS_ACCESS_KEY_ID", "local")
                .env("AWS_SECRET_ACCESS_KEY", "local")
                .env("SAGA_TABLE", &env.store.cfg.tx_table)
                .env("SAGA_ALLOWED_TABLES", &env.a);
            c
        };
        let (mut saga, mut plain, mut saga_requests, mut bare_requests) = (vec![], vec![], vec![], vec![]);
        // One run of each first, unmeasured, so that both start from the same warm DynamoDB Local and page cache.
        for run in 0..=runs {
            let before = requests().await;
            let mut c = command(&cli);
            c.args(["--json", "submit"]).arg(&file).arg("--in-process");
            let (printed, saga_ms) = tokio::task::spawn_blocking(move || run_measured(c)).await.expect("the CLI");
            let answer: Value = serde_json::from_str(&printed).unwrap_or_else(|e| panic!("{e}: {printed}"));
            assert_eq!(answer["State"], "COMMITTED", "{n} updates by the CLI: {answer}");
            let sent = requests().await - before;
            let before = requests().await;
            let mut c = command(&bare);
            c.arg(&env.a).arg("cpu").arg(n.to_string());
            let (_, bare_ms) = tokio::task::spawn_blocking(move || run_measured(c)).await.expect("bare");
            let bare_sent = requests().await - before;
            assert_eq!(bare_sent, 2 * n as u64, "the bare program sends two writes an update");
            if run > 0 {
                saga.push(saga_ms);
                plain.push(bare_ms);
                saga_requests.push(sent as f64);
                bare_requests.push(bare_sent as f64);
            }
        }
        let per_request = |ms: &[f64], sent: &[f64]| ms.iter().zip(sent).map(|(m, r)| m / r).collect::<Vec<_>>();
        let (s, b) = (per_request(&saga, &saga_requests), per_request(&plain, &bare_requests));
        let ratios: Vec<f64> = s.iter().zip(&b).map(|(s, b)| s / b).collect();
        let row = CpuRow {
            actions: n,
            runs,
            saga_ms_per_request: median(s),
            bare_ms_per_request: median(b),
            ratio: median(ratios.clone()),
            ratios,
            saga_ms_per_update: median(saga) / n as f64,
            bare_ms_per_update: median(plain) / n as f64,
            saga_requests_per_update: median(saga_requests) / n as f64,
            bare_requests_per_update: median(bare_requests) / n as f64,
            pinned,
        };
        eprintln!(
            "CPU per request {n:>6} updates: dynamo-saga {:.3} ms, bare SDK {:.3} ms, {:.2}x (runs {:?}); {:.2} requests an update",
            row.saga_ms_per_request,
            row.bare_ms_per_request,
            row.ratio,
            row.ratios.iter().map(|r| (r * 100.0).round() / 100.0).collect::<Vec<_>>(),
            row.saga_requests_per_update
        );
        out.push(row);
        let _ = std::fs::remove_file(&file);
    }
    if pinned {
        let all = format!("0-{}", cores - 1);
        pin(dynamodb.expect("pinned"), &all);
    }
    out
}

/// The section of `benchmarks.md`.
pub fn markdown(rows: &[CpuRow]) -> String {
    let mut md = String::from(
        "## CPU per request\n\nWhat binds a large transaction in a Region is the client's CPU: every lock and apply is a \
         single-item request, and each costs the sender the SDK's signing, serialising and parsing. `dynamo-saga --json \
         submit --in-process` of N updates of existing items (the CLI, this benchmark's build profile) beside `bare` \
         (`tests/src/bin/bare.rs`): the same SDK and profile sending, for each update, a lock-shaped `UpdateItem` \
         (two attributes set, conditioned, the old item returned) and an apply-shaped one (the update and the unlock), \
         256 in flight, and nothing else. Each is a process of its own; its CPU time (user and system) is the kernel's \
         accounting of it, and its requests are counted by `tools/ddb-proxy.mjs` in front of DynamoDB Local. One run of \
         each to warm up, then the median of the runs after it",
    );
    if rows.first().is_some_and(|r| r.pinned) {
        md.push_str(
            "; both clients on the first core, DynamoDB Local and the proxy on the others (`taskset`), so a client's \
             CPU time is its own",
        );
    }
    md.push_str(
        ".\n\n| actions | runs | dynamo-saga: CPU per request (ms) | bare SDK: CPU per request (ms) | dynamo-saga / bare \
         | each run | dynamo-saga: CPU per update (ms) | bare: CPU per update (ms) | dynamo-saga: requests per update | \
         bare: requests per update |\n| ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: |\n",
    );
    for r in rows {
        md.push_str(&format!(
            "| {} | {} | {:.3} | {:.3} | {:.2}x | {} | {:.3} | {:.3} | {:.2} | {:.2} |\n",
            r.actions,
            r.runs,
            r.saga_ms_per_request,
            r.bare_ms_per_request,
            r.ratio,
            r.ratios.iter().map(|x| format!("{x:.2}")).collect::<Vec<_>>().join(", "),
            r.saga_ms_per_update,
            r.bare_ms_per_update,
            r.saga_requests_per_update,
            r.bare_requests_per_update
        ));
    }
    md.push('\n');
    md
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_median_of_an_even_count_is_the_mean_of_the_middle_two() {
        assert_eq!(super::median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(super::median(vec![4.0, 1.0, 3.0, 2.0]), 2.5);
    }
}
