#!/usr/bin/env bash
# The format check, and proof that it sees every Rust file the repository tracks.
#   tools/check-format.sh
#
#  1. cargo fmt --all --check      the workspace as rustfmt.toml and rust-toolchain.toml's rustfmt format it.
#  2. every file seen              rustfmt reaches a file only through a `mod` line it can read (not one inside a
#                                  macro) or a cargo target. On a copy of the tracked files, one misformatted line
#                                  is appended to every .rs file; the check must then fail and name each of them.
#                                  A file it does not name would pass CI however it was formatted.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

cargo fmt --all --check

copy=$(mktemp -d)
trap 'rm -rf "$copy"' EXIT
git ls-files -z | xargs -0 -I{} cp --parents {} "$copy"
git ls-files '*.rs' >"$copy/.expected"
while IFS= read -r f; do
  printf '\nfn misformatted_by_check_format( ) {   }\n' >>"$copy/$f"
done <"$copy/.expected"
if (cd "$copy" && cargo fmt --all --check >"$copy/.diff" 2>&1); then
  echo "check-format: cargo fmt --all --check passed on a copy with every .rs file misformatted" >&2
  exit 1
fi
grep -o '^Diff in [^ ]*\.rs' "$copy/.diff" | sed "s|^Diff in $copy/||" | sort -u >"$copy/.seen"
missed=$(sort "$copy/.expected" | comm -23 - "$copy/.seen")
if [ -n "$missed" ]; then
  echo "check-format: cargo fmt --all --check does not see these files (a misformatted line in them passes):" >&2
  echo "$missed" | sed 's/^/  /' >&2
  exit 1
fi
echo "check-format: cargo fmt sees all $(wc -l <"$copy/.expected") tracked .rs files, and fails on a misformatted line in each"
