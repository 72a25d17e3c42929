#!/usr/bin/env bash
# The main job: starts the local stack (DynamoDB Local, the Lambda functions, the state machine runner), runs seed
# 003's shop (a 200-unit order that commits, then a conflicting one that rolls back) and stops what it started.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
command -v cargo >/dev/null || { echo "demo: a Rust toolchain (cargo) is required: https://rustup.rs" >&2; exit 1; }
echo "Installing and building (first run: several minutes)..." >&2
bash tools/stack.sh install
# With the stack's binaries, in one cargo call: built alone, the demo would compile the SDK a second time.
bash tools/stack.sh build demo
name="demo-$$"
trap 'tools/stack.sh stop "$name"' EXIT
settings=$(tools/stack.sh start "$name" $$)
set -a; . "$settings"; set +a
target/debug/demo
