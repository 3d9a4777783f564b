#!/usr/bin/env bash
# toolplane's MCP importer as the client of an MCP conformance suite scenario: serves with the
# scenario's MCP server imported as the service `conformance`, waits until the import is
# registered, and calls the tool the scenario expects a client to call, with the toolplane CLI.
#
# Run by tests/mcp_conformance.rs, through the suite, which appends the server's URL and sets
# MCP_CONFORMANCE_SCENARIO:
#
#     conformance client --command "bash mcp_conformance_client.sh TOOLPLANE" --scenario NAME
#
# Exits non-zero (and says why on stderr) when the server does not start, the import does not
# appear, or the call fails; the server it started is stopped on every exit.
set -euo pipefail

toolplane="$1"
url="$2"
scenario="${MCP_CONFORMANCE_SCENARIO:?the conformance suite sets it}"

work="$(mktemp -d)"
server_pid=
stop() {
  if [ -n "$server_pid" ]; then
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  echo "--- toolplane's log:" >&2
  cat "$work/log" >&2 2>/dev/null || true
  rm -rf "$work"
}
trap stop EXIT

cat >"$work/toolplane.toml" <<TOML
listen = "127.0.0.1:0"

[[mcp_imports]]
service = "conformance"
url = "$url"
TOML

# The OAuth scenarios hand the client its credentials in MCP_CONFORMANCE_CONTEXT (JSON): a
# client secret, or a private key (PEM) and the algorithm it signs with. toolplane reads the
# secret from the environment and the key from a file.
context() {
  python3 -c 'import json, os, sys; print(json.loads(os.environ["MCP_CONFORMANCE_CONTEXT"]).get(sys.argv[1], ""))' "$1"
}
case "$scenario" in
  auth/client-credentials-basic)
    CONFORMANCE_CLIENT_SECRET="$(context client_secret)"
    export CONFORMANCE_CLIENT_SECRET
    cat >>"$work/toolplane.toml" <<TOML

[mcp_imports.oauth_client_credentials]
client_id = "$(context client_id)"
client_secret_env = "CONFORMANCE_CLIENT_SECRET"
TOML
    ;;
  auth/client-credentials-jwt)
    context private_key_pem >"$work/client-key.pem"
    cat >>"$work/toolplane.toml" <<TOML

[mcp_imports.oauth_client_credentials]
client_id = "$(context client_id)"
private_key_file = "$work/client-key.pem"
signing_algorithm = "$(context signing_algorithm)"
TOML
    ;;
esac
"$toolplane" serve --config "$work/toolplane.toml" >"$work/log" 2>&1 &
server_pid=$!

# Polls COMMAND every 0.1 s, for at most 10 s.
eventually() {
  for _ in $(seq 100); do
    if "$@"; then return 0; fi
    sleep 0.1
  done
  echo "gave up waiting for: $*" >&2
  return 1
}

serving_address() {
  address="$(sed -n 's/.*toolplane serving address=\([0-9.:]*\).*/\1/p' "$work/log")"
  [ -n "$address" ]
}
eventually serving_address
export TOOLPLANE_ENDPOINT="http://$address"

imported() {
  "$toolplane" services --json 2>/dev/null | grep -q '"conformance"'
}
eventually imported

case "$scenario" in
  initialize) ;;
  tools_call)
    "$toolplane" invoke add_numbers --service conformance --input '{"a": 2, "b": 3}'
    ;;
  sse-retry)
    "$toolplane" invoke test_reconnection --service conformance --input '{}'
    ;;
  auth/client-credentials-basic | auth/client-credentials-jwt)
    "$toolplane" invoke test-tool --service conformance --input '{}'
    ;;
  *)
    echo "no client steps for scenario $scenario" >&2
    exit 1
    ;;
esac
