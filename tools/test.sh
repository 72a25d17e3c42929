#!/usr/bin/env bash
# Runs every test: unit tests, the runner's own tests, and the integration and end-to-end tests against one local
# stack (DynamoDB Local, the Lambda functions behind cargo lambda watch) started for the whole run; then the
# permission simulation over every AWS call the run made (tools/iam-sim.sh, docs/iam.md).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
# When the run the report (.local/test-report.md) names began: .ci/run sets it, and SAGA_RUN_NAME, for the whole CI run.
started=${SAGA_RUN_STARTED:-$(date +%s)}
# Each step's wall time, for the report: .ci/run's file when it runs this, else this run's own.
export SAGA_STEP_TIMES=${SAGA_STEP_TIMES:-$root/.local/step-times.tsv}
mkdir -p "$root/.local"
[ -n "${SAGA_RUN_STARTED:-}" ] || : >"$SAGA_STEP_TIMES"
. tools/steps.sh
# And the CPU time of each kind of process during each step: .ci/run's samples, else this run's own.
sample_cpu "$root/.local"
command -v curl >/dev/null || { apt-get update -qq && apt-get install -y -qq curl >/dev/null; }
# The local stack's tools (npm, PyPI, a JRE) are installed, and the Step Functions runner tested, in the background
# beside the tests' build, which uses no tool of theirs; the run waits for both before the stack starts. So are the
# packages of the release build .ci/run ran before this script (SAGA_RELEASE_BUILD_STATUS names the file its exit
# status went to): each function's package and bootstrap checked, for the report.
install_log=$root/.local/install.log
install_status=$root/.local/install.status
echo 1 >"$install_status"
(
  export SAGA_STEP_BESIDE="build: tests, debug, and clippy"
  status=0
  step "local stack: install" tools/stack.sh install \
    && step "Step Functions runner's tests" node --test tools/sfn-local.test.mjs || status=1
  if [ -n "${SAGA_RELEASE_BUILD_STATUS:-}" ]; then
    if [ "$(cat "$SAGA_RELEASE_BUILD_STATUS")" != 0 ]; then
      tail -n 50 .local/release-build.log
      echo "test: the release build for sam deploy failed (.local/release-build.log)"
      status=1
    else
      step "release packages (checked)" bash tools/check-artifacts.sh --no-build || status=1
    fi
  fi
  echo "$status" >"$install_status"
) >"$install_log" 2>&1 &
install_lane=$!
name="test-$$"
# The figures the tests prove (crash scenarios, bad inputs, transfers), collected from every test binary.
export SAGA_REPORT="$root/.local/report-$name.txt"
rm -f "$SAGA_REPORT"
trap 'tools/stack.sh stop "$name"; tools/stack.sh stop "$name-mrsc"; rm -f "$SAGA_REPORT"' EXIT
# The stack's limit on actions (tests/src/stack.rs TEST_MAX_ACTIONS): above the 10,000-action test, and low enough that
# a request over it still fits a Lambda payload.
# The stack is also stopped if this script is killed outright (its watchdog waits for this process).
# The tests are built first, so the stack's functions are built with the dependencies' features the tests give them,
# in the same build.
# Clippy lints the workspace's crates as this build compiles them (clippy-driver as the workspace's compiler wrapper,
# `cargo clippy`'s own mechanism): any clippy warning fails the build, and no second build checks the dependencies
# again. Every later build of this run (the local stack's functions, the suites) has the same environment, so it
# reuses this one.
RUSTC_WORKSPACE_WRAPPER=$(rustup which clippy-driver)
CLIPPY_ARGS=-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__
export RUSTC_WORKSPACE_WRAPPER CLIPPY_ARGS
build_status=0
step "build: tests, debug, and clippy" cargo test --workspace --no-run || build_status=$?
install_ok=0
joined "$install_lane" "beside the build: the local stack's install, the runner's tests, the release packages" \
  "$install_log" "$install_status" \
  || install_ok=1
[ "$build_status" = 0 ] || { echo "test: the tests' build failed" >&2; exit "$build_status"; }
[ "$install_ok" = 0 ] || exit 1
settings=$(step "local stack: start" env SAGA_MAX_ACTIONS=12000 tools/stack.sh start "$name" $$)
set -a; . "$settings"; set +a
# The differential, reads and crash suites again as on multi-Region strongly consistent tables
# (docs/deploy.md, "Several Regions"): each store configured for them and sending through the MRSC stand-in (tools/ddb-proxy.mjs
# --mrsc), which refuses transactional calls and answers a share of the writes with ReplicatedWriteConflictException.
# The crash matrix and the reads suites count the writes of a clean run and stop before each, so their stand-in answers
# no conflicts (a write sent again is one more write: the count would not hold from one run to the next).
# Then the suites of the state machine, the API, the events function, the sweeper and the CLI's stack again on a stack
# in MRSC mode (MultiRegionConsistency STRONG): its functions send through an MRSC stand-in of their own, which answers
# 2% of their writes with ReplicatedWriteConflictException, onto a DynamoDB Local of its own.
# All of this runs in the background beside the suites, on tables and a stack of its own: the suites leave part of the
# 2 cores idle (waits for leases, bounds and executions, and reads one at a time), which it fills. Its output follows
# the suites'.
mrsc_log=$root/.local/mrsc.log
mrsc_status=$root/.local/mrsc.status
mrsc_settings_path=$root/.local/mrsc-settings.path
echo 1 >"$mrsc_status"
: >"$mrsc_settings_path"
(
  export SAGA_STEP_BESIDE=suites SAGA_TEST_MULTI_REGION=strong
  status=0
  step "MRSC mode: parity" cargo test --workspace --test parity -- --test-threads 4 || status=$?
  step "MRSC mode: crash, reads, snapshot reads" env SAGA_TEST_CONFLICT=0 \
    cargo test --workspace --test crash --test reads --test snapshot -- --test-threads 4 || status=$?
  mrsc_settings=$(step "MRSC mode: local stack start" env SAGA_MULTI_REGION_CONSISTENCY=strong SAGA_MAX_ACTIONS=12000 \
    tools/stack.sh start "$name-mrsc" $$) || status=1
  echo "$mrsc_settings" >"$mrsc_settings_path"
  if [ -n "$mrsc_settings" ]; then
    (set -a; . "$mrsc_settings"; set +a
      step "MRSC mode: stack suites" \
        cargo test --workspace --test e2e --test events --test sweeper --test cli -- --test-threads 4) || status=$?
  fi
  echo "$status" >"$mrsc_status"
) >"$mrsc_log" 2>&1 &
mrsc_lane=$!
# The suites are every test `cargo test --workspace` runs, tests/snapshot.rs first: its read at each of a 1,000-update
# transaction's 2,037 stops is a read and a write one after the other, about one core for minutes. Run first, that
# overlaps the MRSC lane's busiest suites; in cargo's order (by name) it came last and ran alone, the lane done, with a
# core idle. Then the other targets of the workspace (cargo metadata), and the doc tests.
other_tests() {
  cargo metadata --no-deps --format-version 1 | python3 -c '
import json, sys
for p in json.load(sys.stdin)["packages"]:
    for t in p["targets"]:
        if t["kind"] == ["test"] and t["name"] != "snapshot":
            print("--test", t["name"])'
}
suites() {
  local others
  others=$(other_tests) || return
  [ -n "$others" ] || { echo "test: cargo metadata listed no test target" >&2; return 1; }
  cargo test --workspace --test snapshot -- --test-threads 4 || return
  # shellcheck disable=SC2086
  cargo test --workspace --lib --bins $others -- --test-threads 4 || return
  cargo test --workspace --doc -- --test-threads 4
}
suites_status=0
step "suites" suites || suites_status=$?
mrsc_ok=0
joined "$mrsc_lane" "MRSC mode (beside the suites)" "$mrsc_log" "$mrsc_status" || mrsc_ok=1
[ "$suites_status" = 0 ] || { echo "test: the suites failed" >&2; exit "$suites_status"; }
[ "$mrsc_ok" = 0 ] || exit 1
mrsc_settings=$(cat "$mrsc_settings_path")
# The contention suite in MRSC mode runs after the suites, alone: its queue test serves twenty waiters in ticket order
# with a lease of 2 s, and a waiter starved of CPU by the suites beside it let its lease lapse and lost its place.
step "MRSC mode: contention" env SAGA_TEST_MULTI_REGION=strong cargo test --workspace --test contention -- --test-threads 4
mrsc_dir=$(sed -n 's/^STACK_DIR=//p' "$mrsc_settings")
# The permission simulation (docs/iam.md) over every AWS call this run made: the functions', the state machine
# runner's and the CLI's (the stack's SAGA_CALL_LOG), with the calls that never run locally. A denied call, or a held
# permission nothing used that docs/iam.md does not justify, fails the run. The log and the report stay in .local/iam.
mkdir -p .local/iam
if [ -f "$STACK_DIR/calls.jsonl" ]; then cp "$STACK_DIR/calls.jsonl" .local/iam/calls.jsonl; else : >.local/iam/calls.jsonl; fi
if [ -f "$mrsc_dir/calls.jsonl" ]; then cp "$mrsc_dir/calls.jsonl" .local/iam/calls-mrsc.jsonl; else : >.local/iam/calls-mrsc.jsonl; fi
iam_args=(--log .local/iam/calls.jsonl --strong-log .local/iam/calls-mrsc.jsonl --local-tx-table "$SAGA_TABLE"
  --json .local/iam/report.json)
if ! grep -q '"principal": *"saga-' .local/iam/calls.jsonl; then
  # Functions built without the call log record nothing: only denials can be judged then.
  echo "test: WARNING: the call log holds no function's calls; the simulation checks denials only" >&2
  iam_args+=(--denials-only)
fi
echo
echo "Measured by this run (docs/guarantees.md quotes these):"
LC_ALL=C sort "$SAGA_REPORT" | sed 's/^/  /'
echo
echo "Permission simulation (tools/iam-sim.sh) over $(wc -l <.local/iam/calls.jsonl) logged calls, and" \
  "$(wc -l <.local/iam/calls-mrsc.jsonl) of the stack in MRSC mode:"
step "permission simulation" bash -o pipefail -c 'tools/iam-sim.sh "$@" | tee .local/iam/simulation.txt' sh "${iam_args[@]}"
# The report of this run: the figures above under a first line naming the commit, the UTC date and the wall time, with
# the release packages when tools/check-artifacts.sh last ran on this commit. docs/testing.md says how it is published
# as docs/test-report.md, which the docs quote.
python3 tools/check_figures.py write-report --out .local/test-report.md --lines "$SAGA_REPORT" \
  --commit "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)" --date "$(date -u +%F)" \
  --seconds $(($(date +%s) - started)) --name "${SAGA_RUN_NAME:-tools/test.sh}" \
  --iam-log .local/iam/calls.jsonl --iam-output .local/iam/simulation.txt --artifacts .local/artifacts.json \
  --steps "$SAGA_STEP_TIMES" --cpu-samples "$SAGA_CPU_SAMPLES" --step-windows "$SAGA_STEP_WINDOWS"
echo
echo "The report of this run: .local/test-report.md (python3 tools/check_figures.py publish-report .local/test-report.md)"
