#!/usr/bin/env bash
# The benchmark: dynamo-saga against native, chunked and the Java library's protocol on DynamoDB Local, the state machine on the
# local stack, and the functions' init time. Writes docs/benchmarks.md, docs/benchmarks.json and docs/benchmarks.svg.
# Not part of the test run.
#   bash tools/bench.sh [--lambda] [--sizes 10,100,1000,10000] [--kinds update,insert,delete,check]
#                       [--item-bytes 940] [--java-library-max N] [--out DIR]
# --lambda first builds the functions' binary for Lambda (release, arm64, target/lambda/saga-functions/bootstrap.zip),
# so the package size is reported too; a cold build takes about 5 minutes on 2 cores. --functions-only measures the functions again (init time,
# zip sizes) and rewrites the report with the other figures of the last run, from docs/benchmarks.json;
# --contention-only does the same for the contention section (native with client retries, dynamo-saga in-process and
# through the state machine, on the same transfers), --reads-only for committed reads before apply, --revisit-only for
# the visit for late writes, --cpu-only for CPU per request (the CLI's submit --in-process beside tests/src/bin/bare.rs,
# --cpu-runs runs each, default 9) and the model with CPU, --small-only for the orchestration of small requests (the
# API and events functions, 10 updates), --mrsc-only for MRSC mode beside the single-Region protocol, --lost-only for
# lost answers through the state machine (a stack of its own, the template's RevisitAfterSeconds), --snapshot-only for
# snapshot reads beside TransactGetItems, BatchGetItem and read locks, and under writes; --largest-only does the same
# for the largest transaction the template allows (--largest-actions, default 100,000 updates), staged through the API function and run through the
# state machine on a stack of optimised function builds (SAGA_STACK_PROFILE=release), with each function's call times,
# CPU time and peak memory; --seal-only stages and seals the largest request the API function takes (--seal-actions,
# default 100,000 inserts of --item-bytes bytes), on the same kind of stack, for tools/check_api_timeout.py. A full run
# ends with the largest transaction; it takes about 8 minutes after the build.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
lambda=0
section_only=0
only=0
largest_only=0
largest_args=()
largest_n=100000
args=()
while [ $# -gt 0 ]; do
  case $1 in
    --lambda) lambda=1 ;;
    --functions-only) only=1; args+=("$1") ;;
    --contention-only | --reads-only | --revisit-only | --cpu-only | --small-only | --mrsc-only | --lost-only | --snapshot-only) args+=("$1"); section_only=1 ;;
    --cpu-runs) args+=("$1" "${2:?--cpu-runs needs a number}"); shift ;;
    --largest-only) largest_only=1 ;;
    --seal-only) largest_only=1; largest_args+=("--seal-only") ;;
    --seal-actions) largest_n=${2:?--seal-actions needs a number}; largest_args+=("$1" "$2"); shift ;;
    --largest-actions) largest_n=${2:?--largest-actions needs a number}; largest_args+=("$1" "$2"); shift ;;
    --out | --item-bytes) largest_args+=("$1" "${2:?$1 needs a value}"); args+=("$1" "$2"); shift ;;
    *) args+=("$1") ;;
  esac
  shift
done
bash tools/stack.sh install
# The stacks run the Lock, Apply and Rollback functions fanned out as a deployed stack does: the template's default
# PhaseFanOut, shares of the default 20 batches (tools/stack.sh's own defaults are the test suites').
fan_out=$(awk '/^  PhaseFanOut:/ {p = 1} p && /Default:/ {print $2; exit}' template.yaml)
export SAGA_FAN_OUT=${fan_out:?template.yaml has no PhaseFanOut default} SAGA_SHARE_BATCHES=20
if [ "$lambda" = 1 ]; then
  venv="$root/.local/venv"
  rustup target list --installed | grep -q '^aarch64-unknown-linux-gnu$' || rustup target add aarch64-unknown-linux-gnu
  # cargo-lambda finds zig (pip's ziglang, which it brings) only when the venv's python3 comes first on PATH.
  # The one binary every function's package holds (template.yaml's Handler names the function it runs).
  PATH="$venv/bin:$PATH" cargo lambda build --release --arm64 --output-format zip -p saga-functions
fi
echo "Building the benchmark (optimised; the first build takes several minutes)..." >&2
# The CLI and the bare SDK program too: CPU per request runs them as processes of the same profile.
cargo build -q --profile bench-run -p dynamo-saga-tests --bin bench --bin bare -p dynamo-saga-cli
if [ "$only" = 1 ]; then
  # The init times are of the debug builds the local stack runs.
  cargo build -q $(for f in functions/*/src/main.rs; do n=$(basename "$(dirname "$(dirname "$f")")"); [ "$n" = all ] || printf -- '-p saga-%s ' "$n"; done)
  exec target/bench-run/bench "${args[@]}"
fi
# The largest transaction, on a stack of its own whose functions are optimised builds: the peak memory of each
# function's process is then that run's alone, and its call times are not a debug build's.
largest_name="bench-largest-$$"
largest() {
  trap 'tools/stack.sh stop "$largest_name"' EXIT
  local settings
  settings=$(SAGA_STACK_PROFILE=release SAGA_MAX_ACTIONS=$((largest_n > 100000 ? largest_n : 100000)) tools/stack.sh start "$largest_name" $$)
  local mode=--largest-only
  [[ " ${largest_args[*]} " == *" --seal-only "* ]] && mode=
  (set -a; . "$settings"; set +a; exec target/bench-run/bench $mode "${largest_args[@]}")
  tools/stack.sh stop "$largest_name"
}
if [ "$largest_only" = 1 ]; then
  largest
  exit 0
fi
name="bench-$$"
trap 'tools/stack.sh stop "$name"' EXIT
# Its functions log as deployed functions do (template.yaml's RUST_LOG): the all-in rows count their log lines.
rust_log=$(awk '/^ *RUST_LOG:/ {print $2; exit}' template.yaml)
settings=$(RUST_LOG=${rust_log:?template.yaml sets no RUST_LOG} tools/stack.sh start "$name" $$)
(set -a; . "$settings"; set +a; exec target/bench-run/bench "${args[@]}")
tools/stack.sh stop "$name"
[ "$section_only" = 1 ] || largest
