#!/usr/bin/env bash
# Runs every test: unit tests, the runner's own tests, and the integration and end-to-end tests against one local
# stack (DynamoDB Local, the Lambda functions behind cargo lambda watch) started for the whole run.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
command -v curl >/dev/null || { apt-get update -qq && apt-get install -y -qq curl >/dev/null; }
tools/stack.sh install
node --test tools/sfn-local.test.mjs
name="test-$$"
# The figures the tests prove (crash scenarios, bad inputs, transfers), collected from every test binary.
export SAGA_REPORT="$root/.local/report-$name.txt"
rm -f "$SAGA_REPORT"
trap 'tools/stack.sh stop "$name"; rm -f "$SAGA_REPORT"' EXIT
# The stack's limit on actions (tests/src/stack.rs TEST_MAX_ACTIONS): above the 10,000-action test, and low enough that
# a request over it still fits a Lambda payload.
# The stack is also stopped if this script is killed outright (its watchdog waits for this process).
settings=$(SAGA_MAX_ACTIONS=12000 tools/stack.sh start "$name" $$)
set -a; . "$settings"; set +a
cargo test --workspace -- --test-threads 4
echo
echo "Measured by this run (docs/guarantees.md quotes these):"
sort "$SAGA_REPORT" | sed 's/^/  /'
