//! `dynamo-saga resume`: carry an open transaction on to its end.

use dynamo_saga::start::{self, Started};
use dynamo_saga::status;
use dynamo_saga::{Coordinator, TxError};

use crate::context::{Ctx, Failure};
use crate::output::{print_json, print_status};

/// Carry an open transaction on to its end: in this process, or in a new execution of the state machine when one
/// is given (or SAGA_STATE_MACHINE_ARN is set). After ApplyRejected, mend what `status` shows as refused first.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The transaction id.
    pub id: String,
    /// Start a new execution of this state machine (default: SAGA_STATE_MACHINE_ARN) and return.
    #[arg(long, value_name = "ARN", conflicts_with = "in_process")]
    pub state_machine: Option<String>,
    /// Drive it in this process even when a state machine is set.
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
