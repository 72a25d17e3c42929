//! `dynamo-saga`: submit a transaction and follow it, read a transaction's status, read an item at an isolation
//! level, read any number of items as one snapshot, run the sweeper once. AWS settings come from the standard chain (profile, region, credentials, and
//! `AWS_ENDPOINT_URL_<SERVICE>` for local endpoints).
//!
//! dynamo-saga's settings come from a deployed stack (`--stack NAME` or `SAGA_STACK`: its outputs and parameters,
//! [`stack`]), through which the CLI is a client of the stack's API ([`api`]) and needs only what an API caller needs;
//! or from the `SAGA_*` variables the functions use (`SAGA_TABLE`, `SAGA_ALLOWED_TABLES`, ...) and
//! `SAGA_STATE_MACHINE_ARN`. `--in-process` runs a transaction's phases in this process, with the caller's own
//! access to the tables.
//!
//! Exit codes: 0 done (committed), 1 the transaction rolled back, 2 bad arguments or a rejected request,
//! 3 no such transaction, 4 any other failure.

mod api;
mod commands;
mod context;
mod failure;
mod output;
mod stack;

use std::io::Write;

use clap::{CommandFactory, Parser, Subcommand};
use clap_complete::Shell;

use commands::{audit, create_table, get, read, resume, status, submit, sweep};
use context::{missing_table_hint, Ctx, Failure};
use dynamo_saga::constants::ENV_TX_TABLE;

/// Submit a transaction and follow it, read its status, read items (one at an isolation level, or any number as one
/// snapshot), or sweep.
#[derive(Debug, Parser)]
#[command(name = "dynamo-saga", version, about, long_about = None, after_help = EXIT_CODES)]
struct Cli {
    /// Print JSON on stdout instead of text (and no progress on stderr).
    #[arg(long, global = true)]
    json: bool,
    /// The deployed dynamo-saga stack whose outputs and parameters give every setting (default: SAGA_STACK). Through
    /// it, submit, status, resume and read go through the stack's API and sweep runs the stack's sweeper, unless
    /// --in-process.
    #[arg(long, global = true, value_name = "NAME", env = "SAGA_STACK", conflicts_with = "table")]
    stack: Option<String>,
    /// The transactions table, without a stack (default: SAGA_TABLE; the other SAGA_* settings still apply).
    #[arg(long, global = true, value_name = "NAME")]
    table: Option<String>,
    /// Log what the library does on stderr (-v: info, -vv: debug); RUST_LOG, when set, chooses instead.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,
    #[command(subcommand)]
    command: Command,
}

const EXIT_CODES: &str =
    "Exit codes: 0 done, 1 rolled back, 2 bad arguments or request, 3 no such transaction, 4 other failure.";

#[derive(Debug, Subcommand)]
enum Command {
    Submit(submit::Args),
    Status(status::Args),
    Get(get::Args),
    Read(read::Args),
    Resume(resume::Args),
    Sweep(sweep::Args),
    Audit(audit::Args),
    CreateTable(create_table::Args),
    /// Print a completion script for a shell.
    Completions {
        /// bash, elvish, fish, powershell or zsh.
        shell: Shell,
    },
}

async fn run(cli: Cli) -> Result<i32, Failure> {
    // A completion script needs no AWS configuration, nor the stack SAGA_STACK may name.
    if let Command::Completions { shell } = cli.command {
        clap_complete::generate(shell, &mut Cli::command(), "dynamo-saga", &mut std::io::stdout());
        return Ok(0);
    }
    let sdk = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
    let stack = match cli.stack.as_deref().filter(|s| !s.is_empty()) {
        Some(name) => Some(stack::Stack::describe(name, &sdk).await?),
        None => None,
    };
    let ctx = Ctx { json: cli.json, table: cli.table, stack, sdk };
    match &cli.command {
        Command::Submit(args) => submit::exec(&ctx, args).await,
        Command::Status(args) => status::exec(&ctx, args).await,
        Command::Get(args) => get::exec(&ctx, args).await,
        Command::Read(args) => read::exec(&ctx, args).await,
        Command::Resume(args) => resume::exec(&ctx, args).await,
        Command::Sweep(args) => sweep::exec(&ctx, args).await,
        Command::Audit(args) => audit::exec(&ctx, args).await,
        Command::CreateTable(args) => create_table::exec(&ctx, args).await,
        Command::Completions { .. } => unreachable!("answered above"),
    }
}

#[tokio::main]
async fn main() {
    // Usage errors exit 2, --help and --version 0, as clap has it.
    let cli = Cli::parse();
    if cli.verbose > 0 || std::env::var_os("RUST_LOG").is_some() {
        let level = if cli.verbose > 1 { "debug" } else { "info" };
        let filter = tracing_subscriber::EnvFilter::try_from_default_env()
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(format!("dynamo_saga={level},warn")));
        tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).init();
    }
    let tx_table = cli.table.clone().or_else(|| std::env::var(ENV_TX_TABLE).ok());
    let code = match run(cli).await {
        Ok(code) => code,
        Err(Failure(code, text)) => {
            eprintln!("dynamo-saga: {text}");
            if let Some(table) = tx_table.filter(|_| text.contains("ResourceNotFoundException")) {
                eprintln!("{}", missing_table_hint(&table));
            }
            code
        }
    };
    let _ = std::io::stdout().flush();
    std::process::exit(code);
}

#[cfg(test)]
mod tests;
