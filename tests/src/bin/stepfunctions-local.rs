//! A local Step Functions endpoint for the local stack: `StartExecution` runs `statemachine/transaction.asl.json`
//! (through `tools/sfn-local.mjs`, against the stack's Lambda functions) and `DescribeExecution` reports it, so that
//! clients that take an endpoint, such as `dynamo-saga submit`, work locally. Needs the stack's settings in the
//! environment; prints `AWS_ENDPOINT_URL_SFN=...` and `SAGA_STATE_MACHINE_ARN=...` (shell syntax), then serves until
//! stopped. `--port N` serves on local port N (the local stack gives its functions that endpoint before it starts).

use std::io::Write;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let port = match args.iter().position(|a| a == "--port") {
        Some(i) => args.get(i + 1).and_then(|p| p.parse().ok()).expect("--port takes a port number"),
        None => 0,
    };
    let url = harness::sfn_api::on_stack_at(port);
    println!("AWS_ENDPOINT_URL_SFN={url}\nSAGA_STATE_MACHINE_ARN={}", harness::sfn_api::STATE_MACHINE_ARN);
    std::io::stdout().flush().expect("stdout");
    loop {
        std::thread::park();
    }
}
