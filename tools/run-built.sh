#!/usr/bin/env bash
# The cargo `cargo lambda watch` runs for a local stack (tools/stack.sh gives it as CARGO, which the watcher starts
# each function instance with): `run ... --bin NAME [--release] [-- ARGS]` executes the binary NAME that the stack's
# start has just built (target/debug/NAME, or target/release/NAME; CARGO_TARGET_DIR's when set) with ARGS, in place of
# this process, as `cargo run` would once it had found it up to date. Anything else, or a binary not there, goes to
# cargo itself (SAGA_CARGO, default `cargo`). The watcher starts an instance for every concurrent invocation a function
# has not an idle one for, and again after one exits: hundreds in a test run, each of which `cargo run` began by
# checking the whole workspace (about 0.2 CPU seconds and half a second of waiting on a busy machine).
set -euo pipefail
if [ "${1:-}" = run ]; then
  bin="" profile=debug program_args=() given=("$@")
  shift
  while [ $# -gt 0 ]; do
    case $1 in
      --bin) bin=${2:-}; shift ;;
      --release) profile=release ;;
      --) shift; program_args=("$@"); break ;;
    esac
    shift
  done
  root=$(cd "$(dirname "$0")/.." && pwd)
  exe=${CARGO_TARGET_DIR:-$root/target}/$profile/$bin
  if [ -n "$bin" ] && [ -x "$exe" ]; then
    exec "$exe" "${program_args[@]}"
  fi
  set -- "${given[@]}"
fi
exec "${SAGA_CARGO:-cargo}" "$@"
