#!/usr/bin/env bash
# Runs every test: unit tests, and the integration tests against one Amazon DynamoDB Local for the whole run.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
command -v java >/dev/null || { apt-get update -qq && apt-get install -y -qq openjdk-17-jre-headless; }
tools/dynamodb-local.sh install
port=$(tools/free-port.sh)
export DYNAMODB_ENDPOINT=$(tools/dynamodb-local.sh start "$port")
trap 'tools/dynamodb-local.sh stop "$port"' EXIT
cargo test --workspace -- --test-threads 4
