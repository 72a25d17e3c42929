#!/usr/bin/env bash
# Builds the SAM application as `sam deploy` ships it: every function a release build for arm64 (provided.al2023),
# through SAM's rust-cargolambda build method (cargo-lambda cross-compiles with zig). Offline apart from crates.io
# and PyPI; no Docker. Every function's package holds the one binary saga-functions (functions/all), which runs the
# function its Handler names; sam build makes one directory for each group of functions with the same build metadata.
# Prints the bootstrap's size at the end.
#   tools/sam-build.sh            (a cold build takes about 5 minutes on 2 cores)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
venv="$root/.local/venv"
[ -x "$venv/bin/python3" ] || python3 -m venv "$venv"
[ -x "$venv/bin/sam" ] || "$venv/bin/pip" install -q aws-sam-cli
# cargo-lambda brings ziglang; it finds zig only when the venv's python3 comes first on PATH.
[ -x "$venv/bin/cargo-lambda" ] || "$venv/bin/pip" install -q cargo-lambda
rustup target list --installed | grep -q '^aarch64-unknown-linux-gnu$' || rustup target add aarch64-unknown-linux-gnu
export PATH="$venv/bin:$PATH" SAM_CLI_TELEMETRY=0 AWS_DEFAULT_REGION=${AWS_DEFAULT_REGION:-us-east-1}
# The README's command, as written: samconfig.toml turns on beta_features for SAM CLI releases in which
# rust-cargolambda is still a beta build method, so no release stops at a prompt.
sam build
echo
echo "bootstrap sizes (release, arm64):"
for f in .aws-sam/build/*/bootstrap; do
  printf '  %-20s %s bytes\n' "$(basename "$(dirname "$f")")" "$(stat -c %s "$f")"
done
