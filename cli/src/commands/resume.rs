//! `dynamo-saga resume`: carry an open transaction on to its end.

use dynamo_saga::start::{self, Started};
use dynamo_saga::status;
use dynamo_saga::{Coordinator, TxError};

use crate::context::{Ctx, Failure};
use crate::output::{print_json, print_status};

/// Carry an open transaction on to its end: through a stack's API (--stack or SAGA_STACK), in a new execution of a
/// state machine (--state-machine or SAGA_STATE_MACHINE_ARN), or in this process (--in-process); one of them is
/// required. After ApplyRejected, mend what `status` shows as refused first.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The transaction id.
    pub id: String,
    /// Start a new execution of this state machine and return (without a stack: SAGA_STATE_MACHINE_ARN).
    #[arg(long, value_name = "ARN", conflicts_with = "in_process")]
    pub state_machine: Option<String>,
    /// Drive it in this process, with your own access to the tables, even when a stack or state machine is set.
    #[arg(long)]
    pub in_process: bool,
}

pub async fn exec(ctx: &Ctx, Args { id, state_machine, in_process }: &Args) -> Result<i32, Failure> {
    let (state_machine_arn, in_process) = (state_machine.as_deref(), *in_process);
    status::check_id(id)?;
    let resumed: Option<Started> = if let Some(api) = ctx.api(in_process || state_machine_arn.is_some())? {
        Some(api.call("POST", &format!("/{id}/resume"), None).await?)
    } else if !in_process {
        let sm = ctx.required_state_machine(state_machine_arn, "resume").await?;
        Some(start::resume(&ctx.store().await?, Some(&sm), id).await?)
    } else {
        None
    };
    if let Some(resumed) = resumed {
        if ctx.json {
            print_json(&serde_json::to_value(&resumed).expect("resumed"));
        } else {
            match &resumed.execution_arn {
                Some(arn) => println!("transaction {id}: {}, resumed by execution {arn}", resumed.state.as_str()),
                None => println!("transaction {id}: {}, finished: nothing to resume", resumed.state.as_str()),
            }
        }
        return Ok(0);
    }
    let store = ctx.store().await?;
    let outcome = Coordinator::new(store.clone()).drive(id).await;
    let s = status::status(&store, id).await?;
    print_status(ctx.json, &s);
    match outcome {
        Ok(_) => Ok(0),
        Err(TxError::Canceled(_) | TxError::Aborted(_)) => Ok(1),
        Err(e) => Err(e.into()),
    }
}
