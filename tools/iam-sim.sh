#!/usr/bin/env bash
# The permission simulation: every AWS call a principal of the deployed stack makes, evaluated against the IAM
# policies template.yaml deploys by a real IAM policy evaluator (docs/iam.md says how, and what callers need).
#
#   tools/iam-sim.sh [--log FILE ...] [--strong-log FILE ...] [--local-tx-table NAME ...] [--json FILE] [--denials-only]
#                    evaluate a call log (default: the sample tools/iam/sample-calls.jsonl, and for MRSC mode
#                    tools/iam/sample-calls-strong.jsonl) in every configuration of tools/iam/resolve.py, the
#                    --strong-log calls (stacks in MRSC mode) in its MRSC configurations only; exit 1 on any denied
#                    call or any unused permission docs/iam.md does not justify (with --denials-only, on denials
#                    alone); tools/test.sh runs it on the suites' logs
#   tools/iam-sim.sh --self-test
#                    the sample log passes on template.yaml, and each defect the simulation was built to find is caught
#                    on a copy of the template that has it (the old ARN form of the caller's tables, Rollback without
#                    DeleteItem, the API invoking with the caller's credentials, the sweeper without DescribeExecution,
#                    the sweeper without Scan on an MRSC transactions table, the state machine allowed only the
#                    functions' unqualified ARNs where it invokes their versions, a
#                    function denied its own log group, the events function without its dead-letter queue, the events
#                    rule matching source dynamo-saga alone, an unused permission without a justification, Express
#                    with SweepAfterSeconds of 300 or less)
#
# Needs no AWS account, credentials or network beyond PyPI and npm. Installs once into .local/ (git-ignored):
# aws-sam-translator into the venv .local/venv (tools/check-template.sh puts aws-sam-cli, which holds it, there too),
# and the evaluator, pinned by tools/iam/package-lock.json, into .local/iam-sim. A run takes a few seconds.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
venv="$root/.local/venv"
node_dir="$root/.local/iam-sim"

install() {
  # The translator reads templates with PyYAML, which it does not list among its requirements (aws-sam-cli brings it).
  if ! { [ -x "$venv/bin/python" ] && "$venv/bin/python" -c 'import samtranslator, yaml' 2>/dev/null; }; then
    echo "iam-sim: installing aws-sam-translator into .local/venv" >&2
    command -v python3 >/dev/null || { echo "iam-sim: python3 is required" >&2; exit 2; }
    [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check aws-sam-translator pyyaml
  fi
  # The lock file pins every package and its integrity hash; a changed lock file reinstalls.
  if ! cmp -s tools/iam/package-lock.json "$node_dir/package-lock.json" || [ ! -d "$node_dir/node_modules/@cloud-copilot/iam-simulate" ]; then
    echo "iam-sim: installing @cloud-copilot/iam-simulate (tools/iam/package-lock.json) into .local/iam-sim" >&2
    command -v npm >/dev/null || { echo "iam-sim: npm is required" >&2; exit 2; }
    rm -rf "$node_dir"
    mkdir -p "$node_dir"
    cp tools/iam/package.json tools/iam/package-lock.json "$node_dir/"
    (cd "$node_dir" && npm ci --no-audit --no-fund --silent >/dev/null)
  fi
}

resolve() { "$venv/bin/python" tools/iam/resolve.py "$@"; }
simulate() { node tools/iam/sim.mjs "$@"; }

self_test() {
  local tmp failed=0 out
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' RETURN
  local sample=tools/iam/sample-calls.jsonl strong=tools/iam/sample-calls-strong.jsonl
  echo "== the sample call log on template.yaml: every call allowed, every unused permission justified"
  resolve >"$tmp/resolved.json"
  simulate --resolved "$tmp/resolved.json" --log "$sample" --strong-log "$strong" --quiet || { echo "FAILED: template.yaml" >&2; failed=1; }

  # Each known defect, on a copy of the template that has it, must be reported as a denial naming it.
  expect() {
    local mutation=$1; shift
    resolve --mutate "$mutation" >"$tmp/$mutation.json"
    local args=()
    for text in "$@"; do args+=(--expect-denied "$text"); done
    if out=$(simulate --resolved "$tmp/$mutation.json" --log "$sample" --strong-log "$strong" "${args[@]}"); then
      echo "self-test: $mutation: caught: $(grep -m1 -F "$1" <<<"$out" | cut -c1-200)"
    else
      echo "$out" | tail -5
      echo "FAILED: self-test: the simulation missed $mutation" >&2
      failed=1
    fi
  }
  echo
  echo "== each defect, on a copy of the template that has it"
  expect old-arn-form \
    'DENIED saga-lock dynamodb:UpdateItem arn:aws:dynamodb:eu-west-1:123456789012:table/t-e2e-41-0-a' \
    'DENIED saga-begin dynamodb:DescribeTable arn:aws:dynamodb:eu-west-1:123456789012:table/t-e2e-41-0-a' \
    '(Region does not match)'
  expect rollback-without-delete \
    'DENIED saga-rollback dynamodb:DeleteItem arn:aws:dynamodb:eu-west-1:123456789012:table/dynamo-saga-TransactionsTable-SAMPLE'
  expect api-caller-credentials \
    'DENIED caller-api lambda:InvokeFunction arn:aws:lambda:eu-west-1:123456789012:function:dynamo-saga-StageFunction-SAMPLE' \
    'DENIED caller-api lambda:InvokeFunction arn:aws:lambda:eu-west-1:123456789012:function:dynamo-saga-StatusFunction-SAMPLE'
  expect sweeper-without-describe \
    'DENIED saga-sweeper states:DescribeExecution arn:aws:states:eu-west-1:123456789012:execution:dynamo-saga-transaction:'
  expect sweeper-without-expiry-scan \
    'DENIED saga-sweeper dynamodb:Scan arn:aws:dynamodb:eu-west-1:123456789012:table/dynamo-saga-transactions'
  expect invoke-unqualified-only \
    'DENIED state-machine lambda:InvokeFunction arn:aws:lambda:eu-west-1:123456789012:function:dynamo-saga-LockFunction-SAMPLE:1'
  expect logs-to-another-group \
    'DENIED saga-lock logs:PutLogEvents arn:aws:logs:eu-west-1:123456789012:log-group:/aws/lambda/dynamo-saga-lock:log-stream:'
  expect events-without-dead-letter-queue \
    'DENIED saga-events sqs:SendMessage arn:aws:sqs:eu-west-1:123456789012:dynamo-saga-EventsDeadLetterQueue-SAMPLE'
  expect events-source-exact \
    'NOT MATCHED rule EventsFunctionTransactWriteItems' 'does not match an event of source dynamo-saga.orders'

  # A permission nothing uses and docs/iam.md does not justify fails the run.
  sed '/^| `saga-save` | `TransactionRecords` | `dynamodb:BatchWriteItem`/d' docs/iam.md >"$tmp/iam.md"
  if out=$(simulate --resolved "$tmp/resolved.json" --log "$sample" --strong-log "$strong" --docs "$tmp/iam.md"); then
    echo "FAILED: self-test: an unjustified unused permission passed" >&2
    failed=1
  elif grep -q 'UNJUSTIFIED saga-save | TransactionRecords | dynamodb:BatchWriteItem' <<<"$out"; then
    echo "self-test: an unused permission without a justification: caught: $(grep -m1 UNJUSTIFIED <<<"$out" | sed 's/^ *//')"
  else
    echo "$out" | tail -5
    echo "FAILED: self-test: the unjustified permission was not named" >&2
    failed=1
  fi

  echo
  echo "== the template's Rules"
  resolve --check-rules || failed=1
  return $failed
}

install
case "${1:-}" in
  --self-test)
    self_test
    ;;
  *)
    logs=()
    strong_logs=()
    rest=()
    while [ $# -gt 0 ]; do
      case $1 in
        --log) logs+=(--log "$2"); shift 2 ;;
        --strong-log) strong_logs+=(--strong-log "$2"); shift 2 ;;
        --local-tx-table | --json) rest+=("$1" "$2"); shift 2 ;;
        --denials-only) rest+=("$1"); shift ;;
        *) echo "usage: $0 [--log FILE ...] [--strong-log FILE ...] [--local-tx-table NAME ...] [--json FILE] [--denials-only] | --self-test" >&2; exit 2 ;;
      esac
    done
    if [ ${#logs[@]} -eq 0 ] && [ ${#strong_logs[@]} -eq 0 ]; then
      logs=(--log tools/iam/sample-calls.jsonl)
      strong_logs=(--strong-log tools/iam/sample-calls-strong.jsonl)
    fi
    tmp=$(mktemp)
    trap 'rm -f "$tmp"' EXIT
    resolve >"$tmp"
    simulate --resolved "$tmp" "${logs[@]}" ${strong_logs[@]+"${strong_logs[@]}"} "${rest[@]}"
    ;;
esac
