//! `dynamo-saga audit`: find, and with `--clear` remove, what ended transactions left on tables.

use std::io::IsTerminal;

use crate::context::{Ctx, Failure};
use crate::output::print_json;

/// Find what transactions that have ended left on tables (locks, items created only to hold one), by reading every
/// item of each table; with --clear, remove each with a conditional write on that very lock.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The tables to read, whole (each costs a scan of the table: half a read unit per 4 KB).
    #[arg(required = true, value_name = "TABLE")]
    pub tables: Vec<String>,
    /// Remove what was found (a lock of a transaction still running is never touched).
    #[arg(long)]
    pub clear: bool,
}

/// Exit 0 when nothing was found (or everything found was cleared), 1 when traces are left.
pub async fn exec(ctx: &Ctx, Args { tables, clear }: &Args) -> Result<i32, Failure> {
    let (json, clear) = (ctx.json, *clear);
    let store = ctx.store().await?;
    let mut left = 0;
    let mut reports = Vec::new();
    for table in tables {
        let shown = !json && std::io::stderr().is_terminal();
        let report = dynamo_saga::audit::audit_table(&store, table, clear, |p| {
            if shown {
                eprint!("\r{}: {} items read", p.table_name, p.scanned);
            }
        })
        .await?;
        if shown {
            eprintln!();
        }
        left += report.traces.iter().filter(|t| !t.cleared).count();
        if !json {
            println!(
                "{}: {} items read ({:.1} read units), {} locked by transactions under way, {} left by ended ones{}",
                report.table_name,
                report.scanned,
                report.read_units,
                report.in_progress,
                report.traces.len(),
                if clear {
                    format!(", {} cleared", report.traces.iter().filter(|t| t.cleared).count())
                } else {
                    String::new()
                }
            );
            for t in &report.traces {
                println!(
                    "  {} of {} ({}){}: {}{}",
                    t.key,
                    t.transaction_id,
                    t.transaction_state,
                    if t.transient { ", an item created only to hold the lock" } else { "" },
                    t.attributes.join(", "),
                    if t.cleared { "  [cleared]" } else { "" }
                );
            }
        }
        reports.push(report);
    }
    if json {
        print_json(&serde_json::to_value(&reports).expect("reports"));
    }
    Ok(if left == 0 { 0 } else { 1 })
}
