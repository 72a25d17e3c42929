//! `dynamo-saga status`: a transaction's state, progress by phase, reasons of a rollback, capacity, timings.

use dynamo_saga::status;

use crate::context::{Ctx, Failure};
use crate::output::{print_status, Reader};

/// State, progress by phase, reasons of a rollback, capacity, timings.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The transaction id.
    pub id: String,
}

pub async fn exec(ctx: &Ctx, Args { id }: &Args) -> Result<i32, Failure> {
    let s = match ctx.api(false)? {
        Some(api) => Reader::Api(&api).status(id).await?,
        None => status::status(&ctx.store().await?, id).await?,
    };
    print_status(ctx.json, &s);
    Ok(0)
}
