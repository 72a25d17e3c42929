#!/usr/bin/env bash
# Installs aws-local-stepfunctions (what tools/sfn-local.mjs runs the state machine with) into .local/sfn, once (a prefix of its own,
# so installs of other tools cannot prune it).
#   tools/sfn-local-install.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
node_dir="$root/.local/sfn"
pkg=aws-local-stepfunctions
version=3.0.0

installed=$(node -p "require('$node_dir/node_modules/$pkg/package.json').version" 2>/dev/null || true)
[ "$installed" = "$version" ] && exit 0
command -v npm >/dev/null || { echo "sfn-local-install: npm is required" >&2; exit 1; }
echo "sfn-local-install: installing $pkg@$version into .local/sfn" >&2
mkdir -p "$node_dir"
npm install --prefix "$node_dir" --no-audit --no-fund --silent "$pkg@$version" >/dev/null
