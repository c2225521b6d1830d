#!/usr/bin/env bash
# The MCP conformance suite's server scenarios against our conformance target
# (tests/mcp/conformance-server.mjs) alone, then through `airlock wrap --http
# ADDR --url URL` in front of it; prints both figures and fails if a scenario
# that passes against the server alone does not pass through airlock.
#
# Usage: scripts/mcp-gateway-conformance.sh AIRLOCK [OUTDIR]
#
#   AIRLOCK  the airlock binary
#   OUTDIR   where logs and results go (default: a fresh mktemp dir)
#
# The wrapped server's tools run without a human here (a rule makes them and
# its sampling low risk): the suite has nobody to approve, and what is tested
# is that the protocol passes, not the gate.
#
# Needs what scripts/mcp-conformance.sh needs (Node >= 22, the suite), and
# the SDK and express under $AIRLOCK_TOOLS/node_modules (scripts/mcp-test-env.sh).
# Exit status: 0 when every scenario passing alone passes through airlock,
# 1 when one does not, 2 on a setup error.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
repo="$(dirname "$here")"
die() { echo "mcp-gateway-conformance: $*" >&2; exit 2; }

airlock="${1:-}"
[[ -n "$airlock" && -x "$airlock" ]] || die "usage: $0 AIRLOCK [OUTDIR]"
airlock="$(cd "$(dirname "$airlock")" && pwd)/$(basename "$airlock")"
out="${2:-$(mktemp -d)}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
tools="${AIRLOCK_TOOLS:-$HOME/.cache/airlock/tools}"
node="${AIRLOCK_NODE22:-$tools/node_modules/node/bin/node}"
[[ -x "$node" ]] || die "no Node 22 at $node: run scripts/mcp-test-env.sh, or set AIRLOCK_NODE22"

pids=()
cleanup() {
    local pid
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
}
trap cleanup EXIT

# Waits for a line matching the sed expression $2 in log $1 and prints what
# it captures (within 30 s).
wait_for() {
    local log="$1" expr="$2" found="" i
    for ((i = 0; i < 300; i++)); do
        found="$(sed -n "$expr" "$log" | head -n 1)"
        [[ -n "$found" ]] && { printf '%s\n' "$found"; return; }
        sleep 0.1
    done
    die "nothing in $log matched $expr: $(tail -n 5 "$log")"
}

# The server, alone (its log made first, so waiting on it never races the
# redirection).
: >"$out/server.log"
: >"$out/airlock.log"
AIRLOCK_TOOLS="$tools" "$node" "$repo/tests/mcp/conformance-server.mjs" http 0 \
    2>"$out/server.log" >/dev/null &
pids+=("$!")
server_url="$(wait_for "$out/server.log" 's/^listening on \(http:[^ ]*\)$/\1/p')"

# airlock in front of it, in a workspace of its own.
ws="$out/workspace"
mkdir -p "$ws"
cat >"$ws/airlock.yaml" <<'YAML'
security:
  hitl:
    rules:
      - {tools: ["conf__*", "sampling:conf"], risk: low}
YAML
(cd "$ws" && exec "$airlock" wrap --http 127.0.0.1:0 --name conf --url "$server_url") \
    2>"$out/airlock.log" >/dev/null &
pids+=("$!")
airlock_url="http://$(wait_for "$out/airlock.log" 's/^airlock: serving MCP at http:\/\/\([^ ]*\)$/\1/p')"

bash "$here/mcp-conformance.sh" "$server_url" "$out/alone" >"$out/alone.txt" 2>"$out/alone.err" \
    || die "the suite did not run against the server: $(tail -n 3 "$out/alone.err")"
bash "$here/mcp-conformance.sh" "$airlock_url" "$out/through" >"$out/through.txt" 2>"$out/through.err" \
    || die "the suite did not run through airlock: $(tail -n 3 "$out/through.err")"

alone_total="$(grep '^passed ' "$out/alone.txt")"
through_total="$(grep '^passed ' "$out/through.txt")"
echo "conformance, server alone:   $alone_total"
echo "conformance, through airlock: $through_total"
lost=0
while IFS= read -r line; do
    scenario="${line%%: *}"
    through="$(grep "^$scenario: " "$out/through.txt" || true)"
    if [[ "$line" == *": pass ("* && "$through" != *": pass ("* ]]; then
        echo "  lost through airlock: ${through:-$scenario: no result}"
        lost=$((lost + 1))
    fi
done < <(grep -E '^[a-z0-9-]+: (pass|fail|skip)' "$out/alone.txt")
if ((lost > 0)); then
    echo "mcp-gateway-conformance: $lost scenario(s) pass against the server alone but not through airlock (logs in $out)"
    exit 1
fi
echo "mcp-gateway-conformance: every scenario that passes alone passes through airlock (logs in $out)"
