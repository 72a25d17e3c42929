//! The `dynamo-saga` command against the local stack: `submit` through the real state machine (behind a local
//! Step Functions endpoint) and in-process, `status`, `resume`, `get` at each isolation level, `sweep`, and bad
//! arguments, each with its exit code.

use std::process::Output;

use harness::sfn_api::STATE_MACHINE_ARN;
use harness::stack::stack;
use harness::{nv, sv, Env};
use serde_json::{json, Value};

static SFN: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// Runs the command with the stack's settings (`table`: the transactions table) and a local Step Functions endpoint.
async fn cli(table: &str, args: &[&str], stdin: Option<String>) -> Output {
    cli_with(table, args, stdin, &[]).await
}

/// [`cli`] with some variables changed: a variable given `None` is removed.
async fn cli_with(table: &str, args: &[&str], stdin: Option<String>, vars: &[(&str, Option<&str>)]) -> Output {
    let st = stack().await;
    let sfn = SFN.get_or_init(harness::sfn_api::on_stack).clone();
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_dynamo-saga"));
    cmd.args(args)
        .env("AWS_REGION", "us-east-1")
        .env("AWS_ACCESS_KEY_ID", "local")
        .env("AWS_SECRET_ACCESS_KEY", "local")
        .env("AWS_ENDPOINT_URL_DYNAMODB", &st.dynamodb)
        .env("AWS_ENDPOINT_URL_SFN", sfn)
        .env("SAGA_TABLE", table)
        .env("SAGA_ALLOWED_TABLES", "t-*")
        .env_remove("SAGA_STATE_MACHINE_ARN");
    for (k, v) in vars {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
    tokio::task::spawn_blocking(move || {
        use std::io::Write;
        use std::process::Stdio;
        let mut child =
            cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("run dynamo-saga");
        let input = stdin.unwrap_or_default();
        child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
        child.wait_with_output().unwrap()
    })
    .await
    .unwrap()
}

fn stdout_json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|_| {
        panic!("stdout is not JSON: {}\nstderr: {}", String::from_utf8_lossy(&out.stdout), stderr(out))
    })
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).to_string()
}

fn updates(env: &Env, keys: &[String]) -> Value {
    json!({"TransactItems": keys.iter().map(|k| json!({"Update": {"TableName": env.a, "Key": {"pk": sv(k)},
        "UpdateExpression": "SET v = v + :one", "ConditionExpression": "v = :zero",
        "ExpressionAttributeValues": {":one": nv(1), ":zero": nv(0)}}})).collect::<Vec<_>>()})
}

async fn seed(env: &Env, keys: &[String]) {
    harness::put_all(&env.client, &env.a, keys.iter().map(|k| json!({"pk": sv(k), "v": nv(0)}))).await;
}

#[tokio::test]
async fn submit_follows_the_state_machine_then_status_and_get_report_the_result() {
    let env = Env::on_stack("clisubmit").await;
    let st = stack().await;
    let keys: Vec<String> = (0..250).map(|i| format!("c{i:03}")).collect();
    seed(&env, &keys).await;
    let file = std::env::temp_dir().join(format!("dynamo-saga-cli-{}.json", std::process::id()));
    std::fs::write(&file, updates(&env, &keys).to_string()).unwrap();
    let out =
        cli(&st.tx_table, &["--json", "submit", file.to_str().unwrap(), "--state-machine", STATE_MACHINE_ARN], None)
            .await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let s = stdout_json(&out);
    assert_eq!(
        (s["State"].as_str(), s["Finished"].as_bool(), s["Batches"].as_u64()),
        (Some("COMMITTED"), Some(true), Some(3)),
        "{s}"
    );
    assert!(s["ExecutionArn"].as_str().is_some_and(|a| a.contains(":execution:")), "{s}");
    // With --json, nothing but the result: no progress on stderr.
    let progress = stderr(&out);
    assert!(!progress.contains("batches"), "{progress}");
    assert_eq!(env.get(&env.a, json!({"pk": sv("c249")})).await.unwrap()["v"], nv(1));

    let id = s["TransactionId"].as_str().unwrap();
    let out = cli(&st.tx_table, &["status", id], None).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(&format!("transaction {id}: COMMITTED, finished")) && text.contains("completed 3"), "{text}");

    for isolation in ["committed", "uncommitted", "read-lock"] {
        let out = cli(&st.tx_table, &["get", &env.a, r#"{"pk": {"S": "c007"}}"#, "--isolation", isolation], None).await;
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        assert_eq!(stdout_json(&out), json!({"pk": sv("c007"), "v": nv(1)}));
    }
    let out = cli(&st.tx_table, &["get", &env.a, r#"{"pk": {"S": "nothing"}}"#], None).await;
    assert_eq!((out.status.code(), stderr(&out).trim()), (Some(3), "no item"));
    // In text, progress goes to stderr, a line each time the phase or its count changes (stderr is not a terminal
    // here). The same request again meets its own condition (v = 0) and rolls back.
    let out = cli(&st.tx_table, &["submit", file.to_str().unwrap(), "--state-machine", STATE_MACHINE_ARN], None).await;
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let progress = stderr(&out);
    assert!(progress.contains("Lock") && progress.contains("Finished") && progress.contains("batches"), "{progress}");
    let out = cli(&st.tx_table, &["--json", "get", &env.a, r#"{"pk": {"S": "nothing"}}"#], None).await;
    assert_eq!((out.status.code(), stdout_json(&out)), (Some(3), Value::Null), "the same exit code as without --json");
    let _ = std::fs::remove_file(file);
}

#[tokio::test]
async fn submit_reports_a_rollback_with_its_reasons_and_runs_in_process_from_stdin() {
    let env = Env::on_stack("clirb").await;
    let st = stack().await;
    let keys: Vec<String> = (0..3).map(|i| format!("r{i}")).collect();
    seed(&env, &keys).await;
    env.put(&env.a, json!({"pk": sv("r1"), "v": nv(5)})).await;
    let body = updates(&env, &keys).to_string();
    let out =
        cli(&st.tx_table, &["--json", "submit", "-", "--state-machine", STATE_MACHINE_ARN], Some(body.clone())).await;
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let s = stdout_json(&out);
    assert_eq!(s["State"], "ROLLED_BACK", "{s}");
    let codes: Vec<&str> = s["Cancellation"]["CancellationReasons"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["Code"].as_str().unwrap())
        .collect();
    assert_eq!(codes, ["None", "ConditionalCheckFailed", "None"]);
    // Text output names the failing action.
    let out = cli(&st.tx_table, &["submit", "-", "--in-process"], Some(body)).await;
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("TransactItems[1]: ConditionalCheckFailed"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    // In-process, committing.
    env.put(&env.a, json!({"pk": sv("r1"), "v": nv(0)})).await;
    let out =
        cli(&st.tx_table, &["--json", "submit", "-", "--in-process"], Some(updates(&env, &keys).to_string())).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout_json(&out)["State"], "COMMITTED");
}

/// `read` in this process: `TransactGetItems` JSON in, every item as one snapshot out (an absent item an empty
/// response), in request order; a bad request is refused naming the item.
#[tokio::test]
async fn read_answers_a_snapshot_in_request_order() {
    let env = Env::on_stack("cliread").await;
    let st = stack().await;
    env.put(&env.a, json!({"pk": sv("s1"), "v": nv(1)})).await;
    env.put(&env.a, json!({"pk": sv("s3"), "v": nv(3)})).await;
    let get = |k: &str| json!({"Get": {"TableName": env.a, "Key": {"pk": sv(k)}}});
    let body = json!({"TransactItems": [get("s3"), get("s2"), get("s1")]}).to_string();
    let out = cli(&st.tx_table, &["--json", "read", "-", "--in-process"], Some(body)).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let s = stdout_json(&out);
    assert_eq!(
        s["Responses"],
        json!([{"Item": {"pk": sv("s3"), "v": nv(3)}}, {}, {"Item": {"pk": sv("s1"), "v": nv(1)}}]),
        "{s}"
    );
    let bad = json!({"TransactItems": [get("s1"), get("s1")]}).to_string();
    let out = cli(&st.tx_table, &["read", "-", "--in-process"], Some(bad)).await;
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("TransactItems[1]"), "{}", stderr(&out));
}

#[tokio::test]
async fn sweep_finishes_an_abandoned_transaction() {
    // Its own transactions table, so the sweep touches nothing of the tests running beside it.
    let env = Env::on_stack_alone("clisweep").await;
    let keys = vec!["s0".to_string()];
    seed(&env, &keys).await;
    let begun = dynamo_saga::phase::begin::begin(&env.store, &updates(&env, &keys)).await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    // Without --older-than, SAGA_SWEEP_AFTER_SECONDS says when a transaction is abandoned, as for the sweeper function.
    let vars = |after| [("SAGA_SWEEP_AFTER_SECONDS", Some(after)), ("SAGA_SWEEP_MAX", Some("10"))];
    let out = cli_with(&env.tx_table, &["--json", "sweep", "--in-process"], None, &vars("3600")).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout_json(&out)["Finished"], json!([]), "not still for an hour yet");
    let out = cli_with(&env.tx_table, &["sweep", "--in-process"], None, &[("SAGA_SWEEP_MAX", Some("ten"))]).await;
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("SAGA_SWEEP_MAX=\"ten\" is not a whole number"), "{}", stderr(&out));
    let out = cli_with(&env.tx_table, &["--json", "sweep", "--in-process"], None, &vars("1")).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let report = stdout_json(&out);
    assert_eq!(report["Finished"][0]["TransactionId"], begun.transaction_id, "{report}");
    let out = cli(&env.tx_table, &["--json", "sweep", "--older-than", "1", "--in-process"], None).await;
    assert_eq!((out.status.code(), &stdout_json(&out)["Finished"]), (Some(0), &json!([])), "nothing left to finish");
    let out = cli(&env.tx_table, &["--json", "status", &begun.transaction_id], None).await;
    assert_eq!(stdout_json(&out)["State"], "ROLLED_BACK");
    env.assert_clean().await;
}

#[tokio::test]
async fn bad_arguments_and_requests_get_clear_errors_and_exit_codes() {
    let st = stack().await;
    let t = st.tx_table.as_str();
    let bad = std::env::temp_dir().join(format!("dynamo-saga-cli-bad-{}.json", std::process::id()));
    std::fs::write(&bad, "{\"TransactItems\": [").unwrap();
    let bad = bad.to_str().unwrap().to_string();
    let cases: Vec<(Vec<&str>, Option<String>, i32, &str)> = vec![
        (vec![], None, 2, "Usage: dynamo-saga"),
        (vec!["launch"], None, 2, "unrecognized subcommand 'launch'"),
        (vec!["submit"], None, 2, "<FILE>"),
        (vec!["submit", "/nonexistent/request.json"], None, 2, "No such file"),
        (vec!["submit", &bad], None, 2, "is not valid JSON"),
        (vec!["submit", "-"], Some("[1, 2]".into()), 2, "JSON object"),
        (vec!["submit", "-", "--in-process"], Some("{\"TransactItems\": []}".into()), 2, "ValidationError"),
        (
            vec!["submit", "-", "--state-machine", STATE_MACHINE_ARN],
            Some("{\"TransactItems\": [{\"Put\": {}}]}".into()),
            2,
            "ValidationError",
        ),
        (vec!["submit", "x.json", "--isolation", "committed"], None, 2, "unexpected argument '--isolation'"),
        (vec!["status"], None, 2, "<ID>"),
        (vec!["status", "not-an-id"], None, 2, "not a transaction id"),
        (vec!["status", "01JDQ5A7K2M9P4R6T8V1W3X5Z7"], None, 3, "TransactionNotFound"),
        (vec!["get", "t-x"], None, 2, "<KEY>"),
        (vec!["get", "t-x", "{\"pk\": 1}"], None, 2, "not DynamoDB JSON"),
        (
            vec!["get", "t-no-such-table", "{\"pk\": {\"S\": \"a\"}}"],
            None,
            2,
            "table \"t-no-such-table\" does not exist",
        ),
        (
            vec!["get", "t-x", "{\"pk\": {\"S\": \"a\"}}", "--isolation", "dirty"],
            None,
            2,
            "committed, uncommitted or read-lock",
        ),
        (vec!["sweep", "--older-than", "soon"], None, 2, "invalid value 'soon' for '--older-than <SECONDS>'"),
        // No silent fallback to this process: a command that would run a transaction says what to pass.
        (
            vec!["submit", "-"],
            Some("{\"TransactItems\": []}".into()),
            2,
            "submit needs a stack (--stack NAME, or SAGA_STACK), a state machine",
        ),
        (
            vec!["sweep"],
            None,
            2,
            "sweep needs a stack (--stack NAME, or SAGA_STACK), a state machine (--state-machine ARN, or \
             SAGA_STATE_MACHINE_ARN) or --in-process",
        ),
        (vec!["resume", "01JDQ5A7K2M9P4R6T8V1W3X5Z7"], None, 2, "resume needs a stack"),
        (vec!["sweep", "--in-process", "--state-machine", "arn:x"], None, 2, "cannot be used with"),
        (vec!["--table"], None, 2, "a value is required for '--table <NAME>'"),
    ];
    for (args, stdin, code, needle) in cases {
        let out = cli(t, &args, stdin).await;
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err:?} should mention {needle:?}");
    }
    let out = cli(t, &["--help"], None).await;
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stdout).contains("Usage: dynamo-saga"));
    // Every subcommand has its own help, and the binary its version and shell completions.
    for (args, needle) in [
        (vec!["get", "--help"], "--isolation <ISOLATION>"),
        (vec!["submit", "--help"], "--state-machine <ARN>"),
        (vec!["sweep", "--help"], "--older-than <SECONDS>"),
        (vec!["--version"], env!("CARGO_PKG_VERSION")),
        (vec!["completions", "bash"], "complete -F"),
    ] {
        let out = cli(t, &args, None).await;
        assert_eq!(out.status.code(), Some(0), "{args:?}");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains(needle), "{args:?}: {text} should mention {needle:?}");
    }
}

/// `--table` names the transactions table in place of `SAGA_TABLE` and nothing else: the other `SAGA_*` settings
/// still hold (a table outside `SAGA_ALLOWED_TABLES` is refused), a bad one is an error, without either table the
/// command says how to name one, and a table that does not exist is named.
#[tokio::test]
async fn table_flag_keeps_the_other_settings() {
    let env = Env::on_stack("clitable").await;
    let t = stack().await.tx_table.clone();
    let keys: Vec<String> = (0..3).map(|i| format!("tf{i}")).collect();
    seed(&env, &keys).await;
    let outside = json!({"TransactItems": [{"Put": {"TableName": "elsewhere", "Item": {"pk": sv("x")}}}]}).to_string();
    let out =
        cli_with("", &["--table", &t, "submit", "-", "--in-process"], Some(outside), &[("SAGA_TABLE", None)]).await;
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("not in the allowed tables"), "{}", stderr(&out));

    let out = cli_with(
        "",
        &["--table", &t, "submit", "-", "--in-process"],
        Some("{}".into()),
        &[("SAGA_TABLE", None), ("SAGA_IN_FLIGHT", Some("many"))],
    )
    .await;
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("SAGA_IN_FLIGHT") && stderr(&out).contains("whole number"), "{}", stderr(&out));

    let out = cli_with("", &["status", "01JDQ5A7K2M9P4R6T8V1W3X5Z7"], None, &[("SAGA_TABLE", None)]).await;
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("SAGA_TABLE is not set (or pass --stack or --table)"), "{}", stderr(&out));

    // A transactions table that is not there is named in the error, with where its name came from.
    for args in [&["status", "01JDQ5A7K2M9P4R6T8V1W3X5Z7"][..], &["submit", "-", "--in-process"]] {
        let args = [&["--table", "t-no-such-transactions"][..], args].concat();
        let out = cli_with("", &args, Some(updates(&env, &keys).to_string()), &[("SAGA_TABLE", None)]).await;
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(4), "{args:?}: {err}");
        assert!(err.contains("ResourceNotFoundException"), "{args:?}: {err}");
        assert!(err.contains("transactions table \"t-no-such-transactions\" (SAGA_TABLE"), "{args:?}: {err}");
    }

    let out = cli_with(
        "",
        &["--json", "--table", &t, "submit", "-", "--in-process"],
        Some(updates(&env, &keys).to_string()),
        &[("SAGA_TABLE", None)],
    )
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    for k in &keys {
        assert_eq!(env.get(&env.a, json!({"pk": sv(k)})).await.unwrap()["v"], nv(1), "{k} committed through --table");
    }
}

/// `status` shows a transaction's attempts: an attempt rolled back by an older transaction (wound-wait) is followed
/// by another, and the status says which transaction rolled back which attempt, why, and how long each waited.
#[tokio::test]
async fn status_shows_the_attempts_and_who_rolled_back_each() {
    use dynamo_saga::phase::{begin::begin, lock::lock, rollback::rollback};
    use dynamo_saga::records::{self, Decision};
    use dynamo_saga::store::Meter;
    let env = Env::on_stack_alone("cliattempts").await;
    let keys = vec!["w0".to_string()];
    seed(&env, &keys).await;
    let add = json!({"TransactItems": [{"Update": {"TableName": env.a, "Key": {"pk": sv("w0")}, "UpdateExpression": "ADD v :one",
        "ExpressionAttributeValues": {":one": nv(1)}}}]});
    let older = begin(&env.store, &add).await.unwrap().transaction_id;
    let younger = begin(&env.store, &add).await.unwrap().transaction_id;
    lock(&env.store, &younger, 0).await.unwrap();
    // The older one needs w0: it rolls the younger attempt back (what `Coordinator::resolve` does) and releases it.
    let d = Decision::wound(&older, Some(0), "w0");
    records::decide_rollback(&env.store, &Meter::default(), &younger, Some(0), &d).await.unwrap();
    rollback(&env.store, &younger, 0, None).await.unwrap();
    let coord = dynamo_saga::Coordinator::new(env.store.clone());
    coord.drive(&older).await.unwrap();
    coord.drive(&younger).await.expect("the second attempt commits");

    let out = cli(&env.tx_table, &["status", &younger], None).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(text.contains("attempt 2,"), "{text}");
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("attempt 1:"))
        .unwrap_or_else(|| panic!("no line for attempt 1: {text}"));
    assert!(line.contains(&format!("by {older}")) && line.contains("w0"), "{line}");
    let out = cli(&env.tx_table, &["--json", "status", &younger], None).await;
    let s = stdout_json(&out);
    assert_eq!((s["State"].as_str(), s["Attempt"].as_u64()), (Some("COMMITTED"), Some(2)), "{s}");
    assert_eq!(s["Attempts"][0]["RolledBackBy"].as_str(), Some(older.as_str()), "{s}");
    assert_eq!(env.get(&env.a, json!({"pk": sv("w0")})).await.unwrap()["v"], nv(2));
    env.assert_clean().await;
}

#[tokio::test]
async fn resume_carries_an_open_transaction_on_in_process_and_through_the_state_machine() {
    let env = Env::on_stack("cliresume").await;
    let keys: Vec<String> = ["r0", "r1", "r2", "r3"].map(String::from).to_vec();
    seed(&env, &keys).await;
    let a = dynamo_saga::phase::begin::begin(&env.store, &updates(&env, &keys[..2])).await.unwrap().transaction_id;
    let b = dynamo_saga::phase::begin::begin(&env.store, &updates(&env, &keys[2..])).await.unwrap().transaction_id;

    // In this process: driven to its end, its status printed.
    let out = cli(&env.tx_table, &["--json", "resume", &a, "--in-process"], None).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let s = stdout_json(&out);
    assert_eq!((s["State"].as_str(), s["Finished"].as_bool()), (Some("COMMITTED"), Some(true)), "{s}");
    // Finished: nothing to resume, no execution started.
    let out = cli(&env.tx_table, &["--json", "resume", &a, "--state-machine", STATE_MACHINE_ARN], None).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout_json(&out).get("ExecutionArn"), None);

    // Through the state machine: a new execution, named for resuming, which commits it.
    let out = cli(&env.tx_table, &["--json", "resume", &b, "--state-machine", STATE_MACHINE_ARN], None).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let arn = stdout_json(&out)["ExecutionArn"].as_str().unwrap().to_string();
    assert!(arn.contains(&format!(":resume-{b}-")), "{arn}");
    let mut s = Value::Null;
    for _ in 0..300 {
        s = stdout_json(&cli(&env.tx_table, &["--json", "status", &b], None).await);
        if s["Finished"] == true {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    assert_eq!((s["State"].as_str(), s["Finished"].as_bool()), (Some("COMMITTED"), Some(true)), "{s}");
    for k in &keys {
        assert_eq!(env.get(&env.a, json!({"pk": sv(k)})).await.unwrap()["v"], nv(1), "{k}");
    }

    let unknown = cli(&env.tx_table, &["resume", "01JDQ4W5Z3ZC4V8Y9B7Q2X1N6M", "--in-process"], None).await;
    assert_eq!(unknown.status.code(), Some(3), "{}", stderr(&unknown));
    let bad = cli(&env.tx_table, &["resume", "not-an-id"], None).await;
    assert_eq!(bad.status.code(), Some(2), "{}", stderr(&bad));
    env.assert_clean().await;
}

/// `submit --in-process` through a proxy that holds two lock writes without answering (one to an item that did not
/// exist, one to an item that did): the command's attempt timeout gives up on them, it locks both items with new
/// writes, and the transaction commits or rolls back. The held writes are delivered after that end. `sweep` before the
/// bound leaves them; after it, it visits the transaction again and clears what they left: every item as the
/// transaction left it, byte for byte.
#[tokio::test]
async fn writes_held_past_the_end_of_an_in_process_submit_are_cleared_by_sweep_after_the_bound() {
    for commit in [true, false] {
        let env = Env::on_stack_alone(if commit { "clilatec" } else { "clilater" }).await;
        let tag = if commit { "hc" } else { "hr" };
        let present: Vec<String> = (0..60).map(|i| format!("{tag}-p{i:02}")).collect();
        let absent: Vec<String> = (0..60).map(|i| format!("{tag}-a{i:02}")).collect();
        seed(&env, &present).await;
        let mut actions: Vec<Value> = present
            .iter()
            .map(|k| {
                json!({"Update": {"TableName": env.a, "Key": {"pk": sv(k)}, "UpdateExpression": "SET v = v + :one",
                "ExpressionAttributeValues": {":one": nv(1)}}})
            })
            .collect();
        actions.extend(absent.iter().map(|k| {
            json!({"Put": {"TableName": env.a, "Item": {"pk": sv(k), "v": nv(1)},
                "ConditionExpression": "attribute_not_exists(pk)"}})
        }));
        if !commit {
            // An item whose condition fails: the transaction rolls back.
            let refused = format!("{tag}-zz");
            seed(&env, std::slice::from_ref(&refused)).await;
            actions.push(json!({"ConditionCheck": {"TableName": env.a, "Key": {"pk": sv(&refused)},
                "ConditionExpression": "v = :seven", "ExpressionAttributeValues": {":seven": nv(7)}}}));
        }
        let before = env.scan(&env.a).await;
        let proxy = harness::proxy::Proxy::start(0, 0.0).await;
        proxy.hold_silently(&[&format!("\"{}\"", absent[30]), ":_sagaNow"], 1).await;
        proxy.hold_silently(&[&format!("\"{}\"", present[30]), ":_sagaNow"], 1).await;
        let file = std::env::temp_dir().join(format!("dynamo-saga-cli-held-{tag}-{}.json", std::process::id()));
        std::fs::write(&file, json!({"TransactItems": actions}).to_string()).unwrap();
        let vars = [
            ("AWS_ENDPOINT_URL_DYNAMODB", Some(proxy.url.as_str())),
            ("SAGA_ATTEMPT_TIMEOUT_SECONDS", Some("1")),
            ("SAGA_REVISIT_AFTER_SECONDS", Some("3")),
        ];
        let out =
            cli_with(&env.tx_table, &["--json", "submit", file.to_str().unwrap(), "--in-process"], None, &vars).await;
        let _ = std::fs::remove_file(&file);
        assert_eq!(out.status.code(), Some(if commit { 0 } else { 1 }), "{}", stderr(&out));
        let s = stdout_json(&out);
        let id = s["TransactionId"].as_str().unwrap().to_string();
        assert_eq!(proxy.stats().await["held"], 2, "both lock writes were held");
        assert!(s["Revisit"]["DueAtMs"].as_u64().is_some(), "status shows the visit to come: {s}");

        // Delivered after the end. On the rollback path both land: an item nobody wrote, and a lock on an item. A write
        // the machine answered after the attempt timeout, on a busy machine, is one more the command gave up on: it
        // may land too, and the sweep clears every lock that did.
        let released = proxy.release().await;
        let locked: Vec<String> = env
            .scan(&env.a)
            .await
            .into_values()
            .filter(|v| v.get("_sagaLock").is_some())
            .map(|v| v["pk"]["S"].as_str().expect("a key").to_string())
            .collect();
        let landed = locked.len();
        if !commit {
            let held = [&absent[30], &present[30]].map(|k| locked.contains(k));
            assert_eq!(
                (released["statuses"].clone(), held),
                (json!([200, 200]), [true, true]),
                "{released} {locked:?}"
            );
        }
        let direct = [("SAGA_REVISIT_AFTER_SECONDS", Some("3"))];
        let out =
            cli_with(&env.tx_table, &["--json", "sweep", "--older-than", "0", "--in-process"], None, &direct).await;
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        assert_eq!(stdout_json(&out)["Revisited"], json!([]), "not before the bound");
        tokio::time::sleep(std::time::Duration::from_secs(3)).await;
        let out = cli_with(&env.tx_table, &["sweep", "--older-than", "0", "--in-process"], None, &direct).await;
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let named = if commit { 120 } else { 121 };
        assert!(text.contains(&format!("visited again: {id} ({landed} of {named} items cleared)")), "{text}");

        let after = env.scan(&env.a).await;
        if commit {
            assert_eq!(after.len(), 120);
            assert!(after.values().all(|v| v["v"] == nv(1) && v.as_object().unwrap().len() == 2), "{after:?}");
        } else {
            assert_eq!(after, before, "every item as it was, byte for byte, and no item that did not exist");
        }
        env.assert_clean().await;
        let out = cli_with(&env.tx_table, &["--json", "status", &id], None, &direct).await;
        let revisit = stdout_json(&out)["Revisit"].clone();
        assert!(revisit["RevisitedAtMs"].as_u64().is_some() && revisit["Cleared"] == json!(landed), "{revisit}");
    }
}

/// `audit` reads a whole table and reports what transactions that ended left (a lock of one whose records are gone, a
/// lock and an item created to hold one of a rolled-back one), leaves a lock of a transaction under way alone, and
/// with `--clear` removes the others, each with a write conditioned on that very lock.
#[tokio::test]
async fn audit_reports_what_ended_transactions_left_and_clears_it_on_request() {
    let env = Env::on_stack_alone("cliaudit").await;
    let keys: Vec<String> = (0..30).map(|i| format!("au{i:02}")).collect();
    seed(&env, &keys).await;
    let clean = env.scan(&env.a).await;
    // A transaction under way holds au00..au04.
    let running = updates(&env, &keys[..5]);
    let begun = dynamo_saga::phase::begin::begin(&env.store, &running).await.unwrap().transaction_id;
    dynamo_saga::Coordinator::new(env.store.clone()).drive_locks(&begun).await.unwrap();
    // Left by ended transactions: a lock whose transaction's records expired, an item that holds only a lock.
    let gone = "01JAAAAAAAAAAAAAAAAAAAAAAA";
    env.put(&env.a, json!({"pk": sv("au10"), "v": nv(0), "_sagaLock": sv(gone), "_sagaLockedAt": nv(5)})).await;
    env.put(
        &env.a,
        json!({"pk": sv("au99"), "_sagaLock": sv(gone), "_sagaLockedAt": nv(5), "_sagaTransient": {"BOOL": true}}),
    )
    .await;

    let out = cli(&env.tx_table, &["--json", "audit", &env.a], None).await;
    assert_eq!(out.status.code(), Some(1), "traces left: {}", stderr(&out));
    let report = stdout_json(&out);
    let t = &report[0];
    assert_eq!((t["Scanned"].as_u64(), t["InProgress"].as_u64()), (Some(31), Some(5)), "{t}");
    let found: Vec<(String, bool, String)> = t["Traces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| {
            (
                x["Key"]["pk"]["S"].as_str().unwrap().to_string(),
                x["Transient"] == json!(true),
                x["TransactionState"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let mut found = found;
    found.sort();
    assert_eq!(found, vec![("au10".into(), false, "EXPIRED".into()), ("au99".into(), true, "EXPIRED".into())]);

    let out = cli(&env.tx_table, &["audit", &env.a, "--clear"], None).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(text.contains("5 locked by transactions under way, 2 left by ended ones, 2 cleared"), "{text}");
    // The transaction under way keeps its locks and commits; nothing else is left.
    dynamo_saga::Coordinator::new(env.store.clone()).drive(&begun).await.unwrap();
    let after = env.scan(&env.a).await;
    for (k, v) in &clean {
        let moved = keys[..5].iter().any(|x| k.contains(&format!("\"{x}\"")));
        assert_eq!(after[k]["v"], if moved { nv(1) } else { nv(0) }, "{k}: {v}");
    }
    assert_eq!(after.len(), clean.len(), "the item that held only a lock is gone");
    env.assert_clean().await;
    let out = cli(&env.tx_table, &["audit", &env.a], None).await;
    assert_eq!(out.status.code(), Some(0), "nothing left: {}", String::from_utf8_lossy(&out.stdout));
}

/// A stack in moto's CloudFormation whose outputs and parameters are the local stack's, named as template.yaml names
/// them: what `dynamo-saga --stack NAME` reads. Returns its name.
async fn local_stack(name: &str) -> String {
    use aws_sdk_cloudformation::config::{BehaviorVersion, Credentials, Region};
    use aws_sdk_cloudformation::types::Parameter;
    let st = stack().await;
    let stack_name = format!("{name}-{}", std::process::id());
    let outputs = [
        ("ApiUrl", format!("{}/transactions", st.api)),
        ("StateMachineArn", STATE_MACHINE_ARN.to_string()),
        ("TransactionsTableName", st.tx_table.clone()),
        ("SweeperFunctionArn", "arn:aws:lambda:us-east-1:000000000000:function:saga-sweeper".to_string()),
    ];
    let parameters = [
        ("AllowedTables", "t-*"),
        ("BatchSize", "100"),
        ("InFlightLimit", "64"),
        ("LeaseSeconds", "30"),
        ("WorkflowType", "STANDARD"),
    ];
    // Every name the CLI reads is one the real template gives.
    let template_text = std::fs::read_to_string(harness::root().join("template.yaml")).unwrap();
    let (params_part, rest) = template_text.split_once("\nResources:").unwrap();
    let outputs_part = rest.split_once("\nOutputs:").unwrap().1;
    for (k, _) in &outputs {
        assert!(outputs_part.contains(&format!("\n  {k}:")), "template.yaml has no output {k}");
    }
    for (k, _) in &parameters {
        assert!(params_part.contains(&format!("\n  {k}:")), "template.yaml has no parameter {k}");
    }
    // Parameters of type String: moto gives a CommaDelimitedList back in Python's notation, where CloudFormation gives
    // the list as it was passed (Orders,Inventory).
    let mut body = String::from("Parameters:\n");
    for (k, _) in &parameters {
        body.push_str(&format!("  {k}:\n    Type: String\n"));
    }
    body.push_str("Resources:\n  Handle:\n    Type: AWS::CloudFormation::WaitConditionHandle\nOutputs:\n");
    for (k, v) in &outputs {
        body.push_str(&format!("  {k}:\n    Value: {}\n", serde_json::to_string(v).unwrap()));
    }
    let conf = aws_sdk_cloudformation::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .endpoint_url(&st.moto)
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new("local", "local", None, None, "tests"))
        .build();
    let cfn = aws_sdk_cloudformation::Client::from_conf(conf);
    let mut create = cfn.create_stack().stack_name(&stack_name).template_body(body);
    for (k, v) in parameters {
        create = create.parameters(Parameter::builder().parameter_key(k).parameter_value(v).build());
    }
    create.send().await.expect("CreateStack on moto's server");
    stack_name
}

/// Runs the command as a client of a stack (`--stack` through `SAGA_STACK`), signing as `key` (an access key of the
/// local API's), with no DynamoDB or Step Functions endpoint it could reach: through a stack it needs neither.
async fn cli_as(stack_name: &str, key: (&str, &str), args: &[&str], stdin: Option<String>) -> Output {
    let st = stack().await;
    let dead = "http://127.0.0.1:9";
    let vars = [
        ("SAGA_STACK", Some(stack_name)),
        ("AWS_ACCESS_KEY_ID", Some(key.0)),
        ("AWS_SECRET_ACCESS_KEY", Some(key.1)),
        ("AWS_ENDPOINT_URL_CLOUDFORMATION", Some(st.moto.as_str())),
        ("AWS_ENDPOINT_URL_LAMBDA", Some(st.lambda.as_str())),
        ("AWS_ENDPOINT_URL_DYNAMODB", Some(dead)),
        ("AWS_ENDPOINT_URL_SFN", Some(dead)),
        ("SAGA_TABLE", None),
        ("SAGA_ALLOWED_TABLES", None),
    ];
    cli_with("unused", args, stdin, &vars).await
}

/// `--stack NAME` (here `SAGA_STACK`): the CLI reads the stack's outputs and parameters from CloudFormation and is a
/// client of its API, signing with its own credentials. `submit` of 2 actions (carried out in one call, but in MRSC
/// mode) and of 250 (staged through the API, run by the state machine), `status` and `resume` through the API work
/// with DynamoDB and Step Functions out of the CLI's reach; a caller the stack's entitlements do not name is refused
/// (exit 2, naming the table); `sweep` runs the stack's sweeper function; `get` reads with the stack's settings and
/// the CLI's own access; a stack that does not exist is an error that says so.
#[tokio::test]
async fn with_a_stack_the_cli_is_a_client_of_its_api() {
    let env = Env::on_stack("clistack").await;
    let name = local_stack("cli").await;
    let local = ("local", "local");
    let keys: Vec<String> = (0..250).map(|i| format!("s{i:03}")).collect();
    seed(&env, &keys).await;

    let small = updates(&env, &keys[..2]).to_string();
    let out = cli_as(&name, local, &["--json", "submit", "-"], Some(small)).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let s = stdout_json(&out);
    // Carried out in one call, but in MRSC mode, which has no such call, by an execution the CLI waits for.
    let direct = harness::one_call().then_some(true);
    assert_eq!(
        (s["State"].as_str(), s["Finished"].as_bool(), s["Direct"].as_bool()),
        (Some("COMMITTED"), Some(true), direct),
        "{s}"
    );

    let rest = updates(&env, &keys[2..]).to_string();
    let out = cli_as(&name, local, &["submit", "-"], Some(rest)).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(text.contains("COMMITTED, finished"), "{text}");
    let id = text.split_whitespace().nth(1).unwrap().trim_end_matches(':').to_string();
    assert_eq!(env.get(&env.a, json!({"pk": sv("s249")})).await.unwrap()["v"], nv(1));

    let out = cli_as(&name, local, &["--json", "status", &id], None).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!((stdout_json(&out)["Actions"].as_u64(), stdout_json(&out)["Batches"].as_u64()), (Some(248), Some(3)));
    let out = cli_as(&name, local, &["--json", "resume", &id], None).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout_json(&out).get("ExecutionArn"), None, "finished: nothing to resume");
    let out = cli_as(&name, local, &["status", "01JDQ5A7K2M9P4R6T8V1W3X5Z7"], None).await;
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));

    // A caller the stack's entitlements do not name.
    let payments = ("AKIAPAYMENTSSERVICE0", "payments-secret");
    let out = cli_as(&name, payments, &["submit", "-"], Some(updates(&env, &keys[..1]).to_string())).await;
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("AccessDenied") && err.contains(&format!("table {}", env.a)), "{err}");
    // Credentials the API does not take: refused by API Gateway itself.
    let out = cli_as(&name, ("local", "wrong"), &["status", &id], None).await;
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("signature"), "{}", stderr(&out));

    // get reads the table itself (the stack gives the transactions table); sweep runs the stack's sweeper.
    let st = stack().await;
    let out = cli_with(
        "unused",
        &["--stack", &name, "get", &env.a, r#"{"pk": {"S": "s007"}}"#],
        None,
        &[("AWS_ENDPOINT_URL_CLOUDFORMATION", Some(st.moto.as_str())), ("SAGA_TABLE", None)],
    )
    .await;
    assert_eq!(
        (out.status.code(), stdout_json(&out)),
        (Some(0), json!({"pk": sv("s007"), "v": nv(1)})),
        "{}",
        stderr(&out)
    );
    let out = cli_as(&name, local, &["--json", "sweep", "--older-than", "3600"], None).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout_json(&out)["Examined"].is_u64(), "the sweeper's report: {}", String::from_utf8_lossy(&out.stdout));

    let out = cli_as("no-such-stack", local, &["status", &id], None).await;
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("no-such-stack does not exist"), "{}", stderr(&out));
    env.assert_clean().await;
}

/// The command run in-process against `vars`' DynamoDB endpoint alone (no stack): `table` the transactions table.
async fn in_process(table: &str, args: &[&str], stdin: Option<String>, vars: &[(&str, &str)]) -> Output {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_dynamo-saga"));
    cmd.args(args)
        .env("AWS_REGION", "us-east-1")
        .env("AWS_ACCESS_KEY_ID", "local")
        .env("AWS_SECRET_ACCESS_KEY", "local")
        .env("SAGA_TABLE", table)
        .env("SAGA_ALLOWED_TABLES", "t-*")
        .env_remove("SAGA_STATE_MACHINE_ARN")
        .env_remove("SAGA_STACK")
        .envs(vars.iter().copied());
    tokio::task::spawn_blocking(move || {
        use std::io::Write;
        use std::process::Stdio;
        let mut child =
            cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("run dynamo-saga");
        child.stdin.take().unwrap().write_all(stdin.unwrap_or_default().as_bytes()).unwrap();
        child.wait_with_output().unwrap()
    })
    .await
    .unwrap()
}

/// In-process on multi-Region strongly consistent tables (`SAGA_MULTI_REGION_CONSISTENCY=strong`), through an MRSC
/// stand-in that refuses transactional calls and answers a tenth of the writes with
/// `ReplicatedWriteConflictException`: `submit` commits 150 updates, each applied once, and `status` reads the end;
/// without the setting the CLI refuses the MRSC tables (exit code 2), having written nothing.
#[tokio::test]
async fn submit_on_mrsc_tables_sends_no_transactional_call() {
    let env = Env::new("climrsc").await;
    let keys: Vec<String> = (0..150).map(|i| format!("m{i:03}")).collect();
    harness::put_all(&env.client, &env.a, keys.iter().map(|k| json!({"pk": sv(k), "n": nv(0)}))).await;
    let actions: Vec<Value> = keys
        .iter()
        .map(|k| {
            json!({"Update": {"TableName": env.a, "Key": {"pk": sv(k)}, "UpdateExpression": "ADD n :one",
            "ExpressionAttributeValues": {":one": nv(1)}}})
        })
        .collect();
    let body = json!({"TransactItems": actions}).to_string();
    let proxy = harness::proxy::Proxy::start_args(&["--mrsc", "--conflict", "0.1"]).await;
    let through = [("AWS_ENDPOINT_URL_DYNAMODB", proxy.url.as_str())];
    let before = env.scan(&env.a).await;
    let out = in_process(&env.tx_table, &["--json", "submit", "-", "--in-process"], Some(body.clone()), &through).await;
    assert_eq!(out.status.code(), Some(2), "refused without the setting: {}", stderr(&out));
    assert!(stderr(&out).contains("SAGA_MULTI_REGION_CONSISTENCY=strong"), "{}", stderr(&out));
    assert_eq!(env.scan(&env.a).await, before, "nothing written");
    let strong = [through[0], ("SAGA_MULTI_REGION_CONSISTENCY", "strong")];
    let out = in_process(&env.tx_table, &["--json", "submit", "-", "--in-process"], Some(body), &strong).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let id = stdout_json(&out)["TransactionId"].as_str().unwrap().to_string();
    let out = in_process(&env.tx_table, &["--json", "status", &id], None, &strong).await;
    assert_eq!(stdout_json(&out)["State"], "COMMITTED", "{}", stderr(&out));
    for item in env.scan(&env.a).await.values() {
        assert_eq!(item["n"], nv(1), "{item}");
    }
    let stats = proxy.stats().await;
    assert_eq!(stats["refusedTransactions"], 0, "{stats}");
    assert!(stats["conflicts"].as_u64().unwrap() > 0, "{stats}");
    env.assert_clean().await;
}
