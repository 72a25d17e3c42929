#!/usr/bin/env bash
# The local stack: DynamoDB Local and every Lambda function behind a local Lambda Invoke API (`cargo lambda watch`).
# Step Functions runs the real definition against it (tools/sfn-local.mjs, aws-local-stepfunctions); the API's routes
# and their IAM authorization as template.yaml deploys them are served by tools/apigw-local.py; SQS (the events
# dead-letter queue) and CloudFormation (a stack's outputs, for the CLI's --stack) by moto's server.
#   tools/stack.sh install       install what the stack needs (java, the DynamoDB Local jar, cargo-lambda, node packages)
#   tools/stack.sh build [BIN...]
#                                build the stack's binaries and, with them, the named binaries of the test crate
#   tools/stack.sh start NAME [OWNER_PID]
#                                start a stack; prints the file of its settings (KEY=VALUE lines, also valid shell).
#                                With OWNER_PID, the stack is stopped once that process has ended, however it ended
#                                (killed outright included), by a watchdog in a session of its own.
#   tools/stack.sh stop NAME     stop it
# The functions may write the tables Orders, Inventory (events/), shop (the demo) and t-* (tests), unless
# SAGA_ALLOWED_TABLES says otherwise; the callers' entitlements (SAGA_CALLER_ENTITLEMENTS, below) let every IAM user
# and every sender of source dynamo-saga write all of them, the role orders-service and the source dynamo-saga.orders
# only t-ent-orders-* (the entitlement tests), and nobody else anything; SAGA_MAX_ACTIONS (default 100000), SAGA_LEASE_SECONDS and
# SAGA_REVISIT_AFTER_SECONDS (default 3: a transaction that may have had writes in flight is visited again 3 s after
# it ends, not 7 minutes), SAGA_FAN_OUT and SAGA_SHARE_BATCHES (default 3 and 1: the Lock, Apply and Rollback functions
# run each step of a transaction of more than one batch in shares of one batch, by invoking themselves, three at a time)
# pass through too.
# As one Region of a multi-Region group: SAGA_STACK_DYNAMODB (a DynamoDB Local already running, which the stack then
# neither starts nor stops), SAGA_STACK_REGION (the functions' AWS_REGION, default us-east-1) and
# SAGA_MULTI_REGION_CONSISTENCY=strong (the functions in MRSC mode, each DynamoDB request of theirs through an MRSC
# stand-in, tools/ddb-proxy.mjs --mrsc, answering SAGA_STACK_CONFLICT of the writes, default 0.02, with
# ReplicatedWriteConflictException; its URL is the settings' SAGA_DYNAMODB_STAND_IN). SAGA_STACK_PROXY puts the
# functions' DynamoDB requests through tools/ddb-proxy.mjs with those options in any mode (lost answers that land late,
# connections dropped after an idle close: `--lose 0.02 --late-ms 15000 --idle-close-ms 3000`), the same
# SAGA_DYNAMODB_STAND_IN; SAGA_REVISIT_AFTER_SECONDS (default 3) and SAGA_IDLE_CONNECTION_SECONDS pass to the functions.
# SAGA_STACK_PROFILE=release runs the functions as optimised builds (target/release, without fault injection) instead
# of debug builds: the benchmark measures time and memory per call that way.
# A stack's settings: DYNAMODB_ENDPOINT, LAMBDA_ENDPOINT, SAGA_TABLE (the transactions table the functions use, which
# the stack creates when it is not there), SAGA_FAULT_FILE (debug builds: see functions/common), SAGA_MAX_ACTIONS, STACK_DIR, and
# SFN_ENDPOINT with SAGA_STATE_MACHINE_ARN: a Step Functions endpoint (target/debug/stepfunctions-local) whose
# StartExecution runs the real definition against this stack, which the functions (the API's POST /transactions, the
# sweeper) are given as theirs; API_URL, the API's base (POST API_URL/transactions), signed with an access key of
# STACK_DIR/identities.json (access key `local` is the IAM user arn:aws:iam::000000000000:user/local); MOTO_ENDPOINT;
# DEAD_LETTER_QUEUE_URL, the events function's queue there; END_EVENTS_QUEUE_URL, a queue there that a rule on
# moto's default bus fills with every end event the functions send (SAGA_END_EVENT_BUS, default `default`).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
venv="$root/.local/venv"
functions=(begin lock save apply commit complete rollback release sweeper stage status events)

install() {
  command -v curl >/dev/null || { apt-get update -qq && apt-get install -y -qq curl >/dev/null; }
  command -v java >/dev/null || { apt-get update -qq && apt-get install -y -qq openjdk-17-jre-headless >/dev/null; }
  tools/dynamodb-local.sh install
  [ -x "$venv/bin/python3" ] || python3 -m venv "$venv"
  [ -x "$venv/bin/cargo-lambda" ] || "$venv/bin/pip" install -q cargo-lambda
  # moto's server (SQS, CloudFormation) and the SAM transform tools/apigw-local.py reads the API from.
  "$venv/bin/python" -c 'import moto.server, samtranslator, yaml' 2>/dev/null \
    || "$venv/bin/pip" install -q 'moto[server]' aws-sam-translator pyyaml
  bash tools/sfn-local-install.sh
  # The Node client the tests run (docs/clients.md), at the versions of its lock file.
  [ -d clients/node/node_modules ] || (cd clients/node && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
}

port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# Sets the caller's `profile` to cargo's flags for SAGA_STACK_PROFILE.
set_profile() {
  case ${SAGA_STACK_PROFILE:-debug} in
    debug) profile=() ;;
    release) profile=(--release) ;;
    *) echo "stack: SAGA_STACK_PROFILE is debug or release, not ${SAGA_STACK_PROFILE}" >&2; exit 2 ;;
  esac
}

# Builds the stack's binaries, and the test crate's binaries named (a program that drives the stack, such as demo), in
# as few cargo calls as the profile allows, with the features `cargo test --workspace` gives the dependencies: the
# packages are the whole workspace's (`--workspace`, the binaries chosen by name), as they are for the `cargo run` of
# `cargo lambda watch` (the workspace's default members, which are every crate but the tests'), so one debug build of
# the SDK and the library serves the tests, this build and the watcher.
build() {
  local profile; set_profile
  local bins=() tests=(--bin stepfunctions-local --bin dynamo-saga)
  for f in "${functions[@]}"; do bins+=(--bin "saga-$f"); done
  for b in "$@"; do tests+=(--bin "$b"); done
  if [ ${#profile[@]} -eq 0 ]; then
    cargo build -q --workspace "${bins[@]}" "${tests[@]}"
  else
    cargo build -q "${profile[@]}" --workspace "${bins[@]}"
    cargo build -q --workspace "${tests[@]}"
  fi
}

start() {
  local name=$1 dir="$root/.local/stack/$1" owner=${2:-}
  install
  stop "$name"
  mkdir -p "$dir"
  rm -f "$dir/calls.jsonl"
  local ddb_port lambda_port ddb
  if [ -n "${SAGA_STACK_DYNAMODB:-}" ]; then
    ddb=$SAGA_STACK_DYNAMODB
  else
    ddb_port=$(tools/free-port.sh)
    ddb=$(tools/dynamodb-local.sh start "$ddb_port")
    echo "$ddb_port" >"$dir/dynamodb.port"
  fi
  local region=${SAGA_STACK_REGION:-us-east-1} mode=${SAGA_MULTI_REGION_CONSISTENCY:-none} functions_ddb=$ddb
  local proxy_args=()
  [ "$mode" = strong ] && proxy_args+=(--mrsc --conflict "${SAGA_STACK_CONFLICT:-0.02}")
  # shellcheck disable=SC2206 # the proxy's options, word by word
  [ -n "${SAGA_STACK_PROXY:-}" ] && proxy_args+=($SAGA_STACK_PROXY)
  if [ ${#proxy_args[@]} -gt 0 ]; then
    nohup node tools/ddb-proxy.mjs --target "$ddb" "${proxy_args[@]}" \
      >"$dir/stand-in.url" 2>"$dir/stand-in.log" &
    echo $! >"$dir/stand-in.pid"
    for _ in $(seq 1 100); do [ -s "$dir/stand-in.url" ] && break; sleep 0.1; done
    functions_ddb=$(head -n 1 "$dir/stand-in.url")
    [ -n "$functions_ddb" ] || { echo "stack: the DynamoDB stand-in did not start; see $dir/stand-in.log" >&2; exit 1; }
  fi
  lambda_port=$(tools/free-port.sh)
  local sfn_port; sfn_port=$(tools/free-port.sh)
  local moto_port; moto_port=$(tools/free-port.sh)
  nohup "$venv/bin/moto_server" -H 127.0.0.1 -p "$moto_port" >"$dir/moto.log" 2>&1 &
  echo $! >"$dir/moto.pid"
  for _ in $(seq 1 100); do port_busy "$moto_port" && break; sleep 0.1; done
  port_busy "$moto_port" || { echo "stack: moto's server did not start; see $dir/moto.log" >&2; exit 1; }
  # The events function's dead-letter queue; and each transaction's end event (SAGA_END_EVENT_BUS: the functions put
  # them on moto's default bus), which a rule there delivers to a queue of its own for the tests to read.
  local queues dlq end_events
  queues=$(AWS_ACCESS_KEY_ID=local AWS_SECRET_ACCESS_KEY=local "$venv/bin/python" -c '
import json, sys, boto3
sqs = boto3.client("sqs", endpoint_url=sys.argv[1], region_name=sys.argv[2])
events = boto3.client("events", endpoint_url=sys.argv[1], region_name=sys.argv[2])
dlq = sqs.create_queue(QueueName="saga-events-dead-letters")["QueueUrl"]
ended = sqs.create_queue(QueueName="saga-end-events")["QueueUrl"]
arn = sqs.get_queue_attributes(QueueUrl=ended, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
events.put_rule(Name="saga-end-events", EventPattern=json.dumps(
    {"source": ["dynamo-saga"], "detail-type": ["Transaction Ended"]}))
events.put_targets(Rule="saga-end-events", Targets=[{"Id": "queue", "Arn": arn}])
print(dlq, ended)' "http://127.0.0.1:$moto_port" "$region")
  read -r dlq end_events <<<"$queues"
  # What IAM knows of the access keys that sign requests to the local API: the tests' and the CLI's own key, and two
  # services' roles for the entitlement tests.
  cat >"$dir/identities.json" <<EOF
[{"AccessKeyId": "local", "SecretAccessKey": "local", "UserArn": "arn:aws:iam::000000000000:user/local",
  "Caller": "AIDALOCALUSER00000000", "AccountId": "000000000000"},
 {"AccessKeyId": "AKIAORDERSSERVICE000", "SecretAccessKey": "orders-secret",
  "UserArn": "arn:aws:sts::000000000000:assumed-role/orders-service/tests", "Caller": "AROAORDERSSERVICE0000:tests",
  "AccountId": "000000000000"},
 {"AccessKeyId": "AKIAPAYMENTSSERVICE0", "SecretAccessKey": "payments-secret",
  "UserArn": "arn:aws:sts::000000000000:assumed-role/payments-service/tests", "Caller": "AROAPAYMENTSSERVICE00:tests",
  "AccountId": "000000000000"}]
EOF
  local sfn_arn=arn:aws:states:$region:000000000000:stateMachine:dynamo-saga-local stand_in=""
  if [ ${#proxy_args[@]} -gt 0 ]; then stand_in=$functions_ddb; fi
  cat >"$dir/functions.env" <<EOF
AWS_REGION=$region
AWS_ACCESS_KEY_ID=local
AWS_SECRET_ACCESS_KEY=local
AWS_ENDPOINT_URL_DYNAMODB=$functions_ddb
SAGA_MULTI_REGION_CONSISTENCY=$mode
SAGA_TABLE=${SAGA_TABLE:-saga-transactions}
SAGA_ALLOWED_TABLES=${SAGA_ALLOWED_TABLES:-Orders,Inventory,shop,t-*}
SAGA_LEASE_SECONDS=${SAGA_LEASE_SECONDS:-30}
SAGA_MAX_ACTIONS=${SAGA_MAX_ACTIONS:-100000}
SAGA_REVISIT_AFTER_SECONDS=${SAGA_REVISIT_AFTER_SECONDS:-3}
SAGA_IDLE_CONNECTION_SECONDS=${SAGA_IDLE_CONNECTION_SECONDS:-20}
SAGA_FAN_OUT=${SAGA_FAN_OUT:-3}
SAGA_SHARE_BATCHES=${SAGA_SHARE_BATCHES:-1}
AWS_ENDPOINT_URL_LAMBDA=http://127.0.0.1:$lambda_port
SAGA_FAULT_FILE=$dir/fault
AWS_ENDPOINT_URL_SFN=http://127.0.0.1:$sfn_port
AWS_ENDPOINT_URL_SQS=http://127.0.0.1:$moto_port
AWS_ENDPOINT_URL_EVENTBRIDGE=http://127.0.0.1:$moto_port
SAGA_END_EVENT_BUS=${SAGA_END_EVENT_BUS-default}
SAGA_DEAD_LETTER_QUEUE_URL=$dlq
SAGA_CALLER_ENTITLEMENTS="${SAGA_CALLER_ENTITLEMENTS:-arn:aws:iam::*:user/*=*;event:*:dynamo-saga=*;arn:aws:iam::000000000000:role/orders-service=t-ent-orders-*,read:t-ent-ledger-*;event:000000000000:dynamo-saga.orders=t-ent-orders-*}"
SAGA_STATE_MACHINE_ARN=$sfn_arn
SAGA_METRICS_NAMESPACE=DynamoSaga/local
SAGA_CALL_LOG=$dir/calls.jsonl
RUST_LOG=${RUST_LOG:-warn}
EOF
  # The binaries are built first, by the same cargo the tests use, so the watcher finds them up to date.
  build
  # The transactions table the functions use, as the template creates it (`dynamo-saga create-table`; one that exists is
  # left as it is), without time to live: DynamoDB Local deletes a record the moment its retention passes.
  AWS_REGION=$region AWS_ACCESS_KEY_ID=local AWS_SECRET_ACCESS_KEY=local AWS_ENDPOINT_URL_DYNAMODB=$ddb \
    target/debug/dynamo-saga --table "${SAGA_TABLE:-saga-transactions}" create-table --no-ttl >/dev/null
  local profile; set_profile
  # The watcher runs each function instance as CARGO says: tools/run-built.sh executes the binary just built, where
  # `cargo run` would first check the whole workspace again.
  SAGA_CARGO=$(command -v cargo) CARGO=$root/tools/run-built.sh \
    PATH="$venv/bin:$PATH" nohup "$venv/bin/cargo-lambda" lambda watch --ignore-changes -q "${profile[@]}" \
    --invoke-address 127.0.0.1 --invoke-port "$lambda_port" --concurrency 32 --env-file "$dir/functions.env" \
    >"$dir/lambda.log" 2>&1 &
  echo $! >"$dir/lambda.pid"
  local endpoint="http://127.0.0.1:$lambda_port"
  for _ in $(seq 1 600); do
    port_busy "$lambda_port" && break
    kill -0 "$(cat "$dir/lambda.pid")" 2>/dev/null || { cat "$dir/lambda.log" >&2; exit 1; }
    sleep 0.5
  done
  port_busy "$lambda_port" || { echo "stack: the Lambda endpoint did not start; see $dir/lambda.log" >&2; exit 1; }
  # Every function answers once it is built and running: an unknown transaction is a TransactionNotFound error.
  for f in "${functions[@]}"; do
    case $f in sweeper | stage | status | events) continue ;; esac
    for _ in $(seq 1 600); do
      if curl -s -o /dev/null -X POST "$endpoint/2015-03-31/functions/saga-$f/invocations" \
        -d '{"TransactionId": "00000000000000000000000000"}' -w '%{http_code}' | grep -q '^[25]00$'; then
        break
      fi
      sleep 0.5
    done
  done
  local api_port; api_port=$(tools/free-port.sh)
  nohup "$venv/bin/python" tools/apigw-local.py --lambda "$endpoint" --identities "$dir/identities.json" \
    --port "$api_port" >"$dir/api.log" 2>&1 &
  echo $! >"$dir/api.pid"
  for _ in $(seq 1 300); do port_busy "$api_port" && break; sleep 0.1; done
  port_busy "$api_port" || { echo "stack: the local API did not start; see $dir/api.log" >&2; exit 1; }
  cat >"$dir/settings" <<EOF
STACK_DIR=$dir
API_URL=$(head -n 1 "$dir/api.log")
DYNAMODB_ENDPOINT=$ddb
LAMBDA_ENDPOINT=$endpoint
SAGA_TABLE=${SAGA_TABLE:-saga-transactions}
SAGA_FAULT_FILE=$dir/fault
SAGA_MAX_ACTIONS=${SAGA_MAX_ACTIONS:-100000}
SAGA_REVISIT_AFTER_SECONDS=${SAGA_REVISIT_AFTER_SECONDS:-3}
SFN_ENDPOINT=http://127.0.0.1:$sfn_port
SAGA_STATE_MACHINE_ARN=$sfn_arn
SAGA_CALL_LOG=$dir/calls.jsonl
MOTO_ENDPOINT=http://127.0.0.1:$moto_port
DEAD_LETTER_QUEUE_URL=$dlq
END_EVENTS_QUEUE_URL=$end_events
SAGA_DYNAMODB_STAND_IN=$stand_in
EOF
  (set -a; . "$dir/settings"; set +a
    exec nohup target/debug/stepfunctions-local --port "$sfn_port" >"$dir/sfn.log" 2>&1) &
  echo $! >"$dir/sfn.pid"
  for _ in $(seq 1 100); do port_busy "$sfn_port" && break; sleep 0.1; done
  port_busy "$sfn_port" || { echo "stack: the Step Functions endpoint did not start; see $dir/sfn.log" >&2; exit 1; }

  if [ -n "$owner" ]; then
    setsid nohup sh -c "while kill -0 $owner 2>/dev/null; do sleep 2; done; exec \"$root/tools/stack.sh\" stop \"$name\"" \
      </dev/null >/dev/null 2>&1 &
    echo $! >"$dir/watchdog.pid"
  fi
  echo "$dir/settings"
}

stop() {
  local dir="$root/.local/stack/$1"
  if [ -f "$dir/watchdog.pid" ]; then
    local w; w=$(cat "$dir/watchdog.pid")
    rm -f "$dir/watchdog.pid"
    [ "$w" != "$$" ] && kill "$w" 2>/dev/null || true
  fi
  if [ -f "$dir/lambda.pid" ]; then
    local pid; pid=$(cat "$dir/lambda.pid")
    pkill -P "$pid" 2>/dev/null || true
    kill "$pid" 2>/dev/null || true
    rm -f "$dir/lambda.pid"
  fi
  local p
  for p in sfn api moto stand-in; do
    if [ -f "$dir/$p.pid" ]; then
      kill "$(cat "$dir/$p.pid")" 2>/dev/null || true
      rm -f "$dir/$p.pid"
    fi
  done
  if [ -f "$dir/dynamodb.port" ]; then
    tools/dynamodb-local.sh stop "$(cat "$dir/dynamodb.port")"
    rm -f "$dir/dynamodb.port"
  fi
  return 0
}

case "${1:-}" in
  install) install ;;
  build) shift; build "$@" ;;
  start) start "${2:?name}" "${3:-}" ;;
  stop) stop "${2:?name}" ;;
  *) echo "usage: $0 install | build [BIN...] | start NAME [OWNER_PID] | stop NAME" >&2; exit 2 ;;
esac
