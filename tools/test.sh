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
trap 'tools/stack.sh stop "$name"' EXIT
settings=$(tools/stack.sh start "$name")
set -a; . "$settings"; set +a
cargo test --workspace -- --test-threads 4
