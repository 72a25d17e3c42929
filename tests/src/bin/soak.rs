//! The concurrency soak: `tools/soak.sh [--accounts N] [--workers N] [--transfers N] [--min-k N] [--max-k N]
//! [--plain N] [--seed N]` runs `harness::bank` on DynamoDB Local with the sizes given and checks every invariant.

use harness::bank::{check, run, seed, Params};
use harness::Env;

fn arg(args: &[String], name: &str, default: u64) -> u64 {
    match args.iter().position(|a| a == name) {
        Some(i) => args.get(i + 1).and_then(|v| v.parse().ok()).unwrap_or_else(|| {
            eprintln!("soak: {name} needs a whole number");
            std::process::exit(2)
        }),
        None => default,
    }
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let known = ["--accounts", "--workers", "--transfers", "--min-k", "--max-k", "--plain", "--seed"];
    if let Some(bad) = args.iter().step_by(2).find(|a| !known.contains(&a.as_str())) {
        eprintln!("soak: unknown argument {bad:?}; expected {}", known.join(", "));
        std::process::exit(2);
    }
    let p = Params {
        driver: harness::bank::Driver::Library,
        accounts: arg(&args, "--accounts", 500) as usize,
        workers: arg(&args, "--workers", 8) as usize,
        transfers_per_worker: arg(&args, "--transfers", 10) as usize,
        min_k: arg(&args, "--min-k", 10) as usize,
        max_k: arg(&args, "--max-k", 150) as usize,
        plain_writers: arg(&args, "--plain", 2) as usize,
        deadline_seconds: 600,
        seed: arg(&args, "--seed", 1),
    };
    if p.min_k < 1 || p.min_k > p.max_k || p.max_k > p.accounts {
        eprintln!("soak: need 1 <= --min-k <= --max-k <= --accounts");
        std::process::exit(2);
    }
    let env = Env::new("soak").await;
    seed(&env, &p).await;
    println!("soak: {p:?}");
    let outcome = run(&env, &p).await;
    println!("soak: {}", check(&env, &p, &outcome).await.0);
}
