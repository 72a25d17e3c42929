//! `dynamo-saga get`: read one item at an isolation level.

use std::str::FromStr;

use dynamo_saga::read::{self, Isolation};
use dynamo_saga::value::{item_from_json, item_to_json};
use serde_json::Value;

use crate::context::{Ctx, Failure};
use crate::output::print_json;

/// Read one item (committed by default).
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The item's table (its own name: `--table` names the transactions table).
    #[arg(value_name = "TABLE")]
    pub item_table: String,
    /// The item's key as DynamoDB JSON, e.g. '{"pk": {"S": "a"}}'.
    pub key: String,
    /// committed, uncommitted or read-lock.
    #[arg(long, default_value = "committed", value_parser = Isolation::from_str)]
    pub isolation: Isolation,
}

pub async fn exec(ctx: &Ctx, Args { item_table: table, key, isolation }: &Args) -> Result<i32, Failure> {
    let bad_key = |m: String| Failure(2, m);
    let key: Value = serde_json::from_str(key).map_err(|e| bad_key(format!("KEY is not valid JSON: {e}")))?;
    let key = item_from_json(&key).map_err(|e| bad_key(format!("KEY is not DynamoDB JSON: {e}")))?;
    let item = read::get_item(&ctx.store().await?, table, key, *isolation).await?;
    match (item, ctx.json) {
        (Some(i), _) => print_json(&item_to_json(&i)),
        (None, json) => {
            if json {
                println!("null");
            } else {
                eprintln!("no item");
            }
            return Ok(3);
        }
    }
    Ok(0)
}
