#!/usr/bin/env bash
# The concurrency soak on DynamoDB Local (see tests/src/bank.rs). Defaults: 500 accounts, 8 workers x 10 transfers
# of 10-150 accounts each, 2 plain writers. Arguments: --accounts N --workers N --transfers N --min-k N --max-k N
# --plain N --seed N.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
command -v java >/dev/null || { apt-get update -qq && apt-get install -y -qq openjdk-17-jre-headless >/dev/null; }
tools/dynamodb-local.sh install
cargo build -q -p dynamo-saga-tests --bin soak
port=$(tools/free-port.sh)
export DYNAMODB_ENDPOINT=$(tools/dynamodb-local.sh start "$port")
trap 'tools/dynamodb-local.sh stop "$port"' EXIT
target/debug/soak "$@"
