//! What the commands print: a transaction's status as text or JSON, and its progress followed to its end (a bar on
//! a terminal, a line a change otherwise, nothing with `--json`).

use std::io::IsTerminal;
use std::time::Duration;

use dynamo_saga::phase;
use dynamo_saga::status::{self, Status};
use dynamo_saga::{Store, TxError};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::Value;

use crate::api::Api;
use crate::failure::Failure;

/// Where a transaction's status is read: the stack's API, or the transactions table itself.
pub enum Reader<'a> {
    Api(&'a Api),
    Table(&'a Store),
}

impl Reader<'_> {
    pub async fn status(&self, id: &str) -> Result<Status, TxError> {
        match self {
            Reader::Api(api) => api.call("GET", &format!("/{id}"), None).await,
            Reader::Table(store) => status::status(store, id).await,
        }
    }

    /// How long to wait between two reads while following: the API counts each request against its throttling.
    fn pause(&self) -> Duration {
        match self {
            Reader::Api(_) => Duration::from_secs(1),
            Reader::Table(_) => Duration::from_millis(250),
        }
    }
}

pub fn print_json(v: &Value) {
    println!("{}", serde_json::to_string_pretty(v).expect("JSON"));
}

/// The phase a status is in, and its batches done.
fn phase_progress(s: &Status) -> (&'static str, usize) {
    match s.next {
        phase::resume::Step::Lock(_) => ("Lock", s.progress.locked),
        phase::resume::Step::Save(_) => ("Save", s.progress.saved),
        phase::resume::Step::Apply(_) => ("Apply", s.progress.applied),
        phase::resume::Step::Commit => ("Commit", s.batches),
        phase::resume::Step::Complete(_) => ("Complete", s.progress.completed),
        phase::resume::Step::Rollback(_) => ("Rollback", s.progress.restored),
        phase::resume::Step::Retry => ("Retry", s.batches),
        phase::resume::Step::Release => ("Release", s.batches),
        phase::resume::Step::Finished => ("Finished", s.batches),
    }
}

/// One line for a status: `Apply  ######....  6/11 batches  1000 actions  PENDING  4.2 s`.
fn progress_line(s: &Status) -> String {
    let (phase, done) = phase_progress(s);
    let width = 20;
    let filled = (done * width).checked_div(s.batches).unwrap_or(width);
    format!(
        "{phase:<9} [{}{}] {done}/{} batches  {} actions  {}  {:.1} s",
        "#".repeat(filled),
        ".".repeat(width - filled),
        s.batches,
        s.actions,
        s.state.as_str(),
        s.elapsed_ms as f64 / 1000.0
    )
}

/// The progress line of `s` when its phase, its count of batches or its state differs from the one shown last.
fn changed_line(last: &mut String, s: &Status) -> Option<String> {
    let (phase, done) = phase_progress(s);
    let shown = format!("{phase} {done}/{} {}", s.batches, s.state.as_str());
    (shown != std::mem::replace(last, shown.clone())).then(|| progress_line(s))
}

pub fn print_status(json: bool, s: &Status) {
    if json {
        print_json(&serde_json::to_value(s).expect("status"));
        return;
    }
    println!("transaction {}: {}{}", s.transaction_id, s.state.as_str(), if s.finished { ", finished" } else { "" });
    println!("  {}", progress_line(s));
    if s.direct {
        println!("  carried out in one TransactWriteItems call, with no locks (its capacity is not in the header)");
    } else {
        println!(
            "  locked {}, saved {}, applied {}, completed {}, restored {} of {} batches",
            s.progress.locked,
            s.progress.saved,
            s.progress.applied,
            s.progress.completed,
            s.progress.restored,
            s.batches
        );
    }
    println!(
        "  DynamoDB: {} calls, {:.1} write units, {:.1} read units (as reported)",
        s.usage.calls, s.usage.write_units, s.usage.read_units
    );
    println!("  attempt {}, waited {:.1} s for other transactions' locks", s.attempt, s.waited_ms as f64 / 1000.0);
    for a in &s.attempts {
        println!(
            "  attempt {}: rolled back after {:.1} s (waited {:.1} s){}: {}",
            a.attempt,
            a.ended_at_ms.saturating_sub(a.started_at_ms) as f64 / 1000.0,
            a.waited_ms as f64 / 1000.0,
            a.rolled_back_by.as_deref().map(|b| format!(" by {b}")).unwrap_or_default(),
            a.reason
        );
    }
    if let Some(arn) = &s.execution_arn {
        println!("  execution {arn}");
    }
    if let Some(r) = &s.refused {
        println!("  DynamoDB refused to apply {} (batch {}): {}", r.action, r.batch, r.message);
        println!("  the item stays locked: mend what DynamoDB refuses, then `dynamo-saga resume {}`", s.transaction_id);
    }
    if let Some(c) = &s.cancellation {
        println!("  {}", c.message);
        if let Some(p) = &c.parent_cancellation_reason {
            println!("  Parent: {}{}", p.code, p.message.as_deref().map(|m| format!(" ({m})")).unwrap_or_default());
        }
        let failed: Vec<_> = c.failed().collect();
        for (i, r) in failed.iter().take(10) {
            println!(
                "  TransactItems[{i}]: {}{}",
                r.code,
                r.message.as_deref().map(|m| format!(" ({m})")).unwrap_or_default()
            );
        }
        if failed.len() > 10 {
            println!("  ... {} failing actions in all (--json lists every one)", failed.len());
        }
    }
}

/// How progress is shown on stderr: a bar on a terminal, a line per phase change otherwise, nothing with `--json`.
enum Progress {
    Bar(ProgressBar),
    Lines(String),
    Quiet,
}

impl Progress {
    fn new(json: bool) -> Progress {
        if json {
            return Progress::Quiet;
        }
        if !std::io::stderr().is_terminal() {
            return Progress::Lines(String::new());
        }
        let style = ProgressStyle::with_template("{prefix:9} [{bar:20}] {pos}/{len} batches  {msg}")
            .expect("a fixed, valid template")
            .progress_chars("#>.");
        Progress::Bar(ProgressBar::new(0).with_style(style))
    }

    fn show(&mut self, s: &Status) {
        match self {
            Progress::Bar(bar) => {
                let (phase, done) = phase_progress(s);
                bar.set_length(s.batches as u64);
                bar.set_position(done as u64);
                bar.set_prefix(phase);
                bar.set_message(format!(
                    "{} actions  {}  {:.1} s",
                    s.actions,
                    s.state.as_str(),
                    s.elapsed_ms as f64 / 1000.0
                ));
            }
            Progress::Lines(last) => {
                if let Some(line) = changed_line(last, s) {
                    eprintln!("{line}");
                }
            }
            Progress::Quiet => {}
        }
    }

    fn done(&self) {
        if let Progress::Bar(bar) = self {
            bar.finish();
        }
    }
}

/// Follows a transaction until it finishes (or `stopped` says the driver stopped), showing its progress.
pub async fn follow(
    reader: &Reader<'_>,
    id: &str,
    json: bool,
    mut stopped: impl FnMut() -> Option<String>,
) -> Result<Status, Failure> {
    let mut progress = Progress::new(json);
    loop {
        let s = reader.status(id).await?;
        progress.show(&s);
        if s.finished {
            progress.done();
            return Ok(s);
        }
        if let Some(why) = stopped() {
            progress.done();
            return Err(Failure(
                4,
                format!("{why}; transaction {id} is {} and not finished (the sweeper finishes it)", s.state.as_str()),
            ));
        }
        tokio::time::sleep(reader.pause()).await;
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn status(step: Value, locked: usize, state: &str, elapsed_ms: u64) -> Status {
        serde_json::from_value(json!({
            "Actions": 250, "Attempt": 1, "Batches": 3, "CreatedAtMs": 1, "DeadlineMs": 2, "ElapsedMs": elapsed_ms,
            "Finished": false, "Next": step, "Protocol": 2, "State": state, "TransactionId": "01M8G54TWV946XJ72F77K8XZVD",
            "UpdatedAtMs": 1, "WaitedMs": 0,
            "Progress": {"Applied": 0, "Completed": 0, "Locked": locked, "Restored": 0, "Saved": 0},
            "Usage": {"Calls": 0, "ReadUnits": 0.0, "WriteUnits": 0.0, "Writes": 0},
        }))
        .unwrap()
    }

    /// Without a terminal, a line is printed each time the phase, its count or the state changes, and only then:
    /// "Lock" and "Save" are padded like the others, so their counts show too.
    #[test]
    fn a_progress_line_each_time_the_phase_or_its_count_changes() {
        let mut last = String::new();
        let lock = |n: usize, ms: u64| status(json!({"Step": "Lock", "Batch": n}), n, "PENDING", ms);
        let shown: Vec<Option<String>> = [
            lock(0, 0),
            lock(0, 100),
            lock(1, 200),
            lock(2, 300),
            lock(2, 400),
            status(json!({"Step": "Rollback", "Batch": 0}), 2, "ROLLED_BACK", 500),
        ]
        .iter()
        .map(|s| changed_line(&mut last, s))
        .collect();
        let counts: Vec<Option<&str>> =
            shown.iter().map(|l| l.as_deref().map(|l| l.split(']').nth(1).unwrap().trim())).collect();
        assert_eq!(
            counts,
            [
                Some("0/3 batches  250 actions  PENDING  0.0 s"),
                None,
                Some("1/3 batches  250 actions  PENDING  0.2 s"),
                Some("2/3 batches  250 actions  PENDING  0.3 s"),
                None,
                Some("0/3 batches  250 actions  ROLLED_BACK  0.5 s"),
            ]
        );
    }
}
