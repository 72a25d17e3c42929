//! `dynamo-saga create-table`: the transactions table, as the template creates it.

use dynamo_saga::constants::ENV_TX_TABLE;
use dynamo_saga::tables::{create_transactions_table, Created};
use serde_json::json;

use crate::context::{Ctx, Failure};
use crate::output::print_json;

/// Create the transactions table (--table or SAGA_TABLE) as the template does: keys, the open-transactions index,
/// on-demand billing and time to live. A table of that name that exists is left as it is.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Leave time to live off (DynamoDB Local deletes an expired record at once, DynamoDB within days).
    #[arg(long)]
    pub no_ttl: bool,
}

pub async fn exec(ctx: &Ctx, Args { no_ttl }: &Args) -> Result<i32, Failure> {
    let table = ctx
        .var(ENV_TX_TABLE)
        .filter(|t| !t.trim().is_empty())
        .ok_or_else(|| Failure(2, format!("create-table needs the table's name: --table NAME, or {ENV_TX_TABLE}")))?;
    let client = aws_sdk_dynamodb::Client::new(&ctx.sdk);
    let created = create_transactions_table(&client, &table, !no_ttl).await?;
    let state = match created {
        Created::Created => "created",
        Created::Existed => "existed",
    };
    if ctx.json {
        print_json(&json!({ "TableName": table, "State": state }));
    } else {
        println!("transactions table {table}: {state}");
    }
    Ok(0)
}
