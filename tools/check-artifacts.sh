#!/usr/bin/env bash
# Builds the application as `sam deploy` ships it (tools/sam-build.sh: release, arm64, every function through one
# shared target directory) and checks each function's artifact (tools/check_artifacts.py): its package under 5 MB,
# and its bootstrap started against a stand-in for the Lambda Runtime API, answering its events/ file on DynamoDB
# Local, with its init time printed. arm64 binaries run under qemu-user on x86_64 hosts (installed here when missing).
#   tools/check-artifacts.sh [--no-build]      --no-build checks the .aws-sam/build of an earlier sam build
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
if [ "${1:-}" = "--no-build" ]; then shift; else bash tools/sam-build.sh; fi
if [ "$(uname -m)" != aarch64 ] && { ! command -v qemu-aarch64 >/dev/null || [ ! -d /usr/aarch64-linux-gnu ]; }; then
  echo "check-artifacts: installing qemu-user and the arm64 C library (Debian packages)"
  apt-get install -y -qq qemu-user libc6-arm64-cross >/dev/null 2>&1 \
    || { apt-get update -qq && apt-get install -y -qq qemu-user libc6-arm64-cross >/dev/null; }
fi
tools/dynamodb-local.sh install
port=$(tools/free-port.sh)
trap 'tools/dynamodb-local.sh stop "$port"' EXIT
endpoint=$(tools/dynamodb-local.sh start "$port")
# Stopped even if this script is killed outright: a watchdog in its own session waits for this process.
setsid nohup sh -c "while kill -0 $$ 2>/dev/null; do sleep 2; done; exec \"$root/tools/dynamodb-local.sh\" stop $port" \
  </dev/null >/dev/null 2>&1 &
mkdir -p .local
.local/venv/bin/python tools/check_artifacts.py --dynamodb "$endpoint" --json .local/artifacts.json "$@"
