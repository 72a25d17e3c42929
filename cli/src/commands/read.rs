//! `dynamo-saga read`: read any number of items as one snapshot, `TransactGetItems`'s request and answer.

use dynamo_saga::snapshot;
use serde_json::Value;

use crate::commands::submit::read_request;
use crate::context::{Ctx, Failure};
use crate::output::print_json;

/// Read any number of items as one snapshot, every item as committed at one instant: TransactGetItems JSON in,
/// {"Responses": [...]} out. Through a stack's API (--stack or SAGA_STACK), else in this process with your own access
/// to the tables.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// TransactGetItems JSON, {"TransactItems": [{"Get": {...}}, ...]} (`-` reads stdin).
    pub file: String,
    /// Read in this process, with your own access to the tables, even when a stack is set.
    #[arg(long)]
    pub in_process: bool,
}

pub async fn exec(ctx: &Ctx, Args { file, in_process }: &Args) -> Result<i32, Failure> {
    let request = read_request(file)?;
    let answer: Value = match ctx.api(*in_process)? {
        Some(api) => api.call("POST", "/reads", Some(&request)).await?,
        None => snapshot::transact_get_items(&ctx.store().await?, &request).await?.to_json(),
    };
    if ctx.json {
        print_json(&answer);
    } else {
        print_json(&serde_json::json!({"Responses": answer["Responses"]}));
        eprintln!("{}", summary(&answer));
    }
    Ok(0)
}

/// What the read took, for stderr: items found, passes, read units.
fn summary(answer: &Value) -> String {
    let responses = answer["Responses"].as_array().map_or(&[][..], Vec::as_slice);
    let found = responses.iter().filter(|r| r.get("Item").is_some()).count();
    format!(
        "{found} of {} items found, read in {} passes, {} read units",
        responses.len(),
        answer["Passes"].as_u64().unwrap_or(0),
        answer["ReadUnits"].as_f64().unwrap_or(0.0)
    )
}
