#!/usr/bin/env bash
# Run the MCP conformance suite (@modelcontextprotocol/conformance) in *server*
# mode against a streamable-HTTP MCP server, and print one line per scenario.
#
# Usage: scripts/mcp-conformance.sh [options] URL [OUTDIR]
#
#   URL      the server's MCP endpoint, e.g. http://127.0.0.1:3001/mcp
#            (use localhost / 127.0.0.1 / [::1]: the dns-rebinding-protection
#            scenario fails outright on any other host name)
#   OUTDIR   where results go (default: a fresh mktemp dir, printed at the end):
#              OUTDIR/checks/server-<scenario>-<timestamp>/checks.json
#                                       the suite's own per-scenario results: a JSON
#                                       array of checks {id, name, description,
#                                       status: SUCCESS|FAILURE|WARNING|INFO,
#                                       errorMessage?, details?, specReferences}
#              OUTDIR/conformance.log   the suite's stdout+stderr
#              OUTDIR/summary.txt       the lines printed below
#              OUTDIR/summary.json      [{scenario, status, detail, passed, failed, warnings}]
#            OUTDIR/checks is emptied at the start of each run.
#
# Output (stdout), one line per scenario, then a total:
#   SCENARIO: pass (detail)   no FAILURE check and at least one SUCCESS check
#   SCENARIO: fail (detail)   a FAILURE check (detail = its error), or no result at all
#   SCENARIO: skip (detail)   only WARNING/INFO checks: the suite could not test it
#                             (e.g. server-sse-* without an Mcp-Session-Id)
#   passed N/M
# A pass whose tool result had isError:true is marked "suspect" in its detail:
# tools-call-simple-text passes on a server that answers an unknown tool with an
# isError result, so such a pass proves nothing (and tools-call-error passes
# there too: it is marked suspect when its error text says "not found").
#
# Options:
#   --require a,b,c   exit 1 unless every named scenario passed (names as printed)
#   --only a,b,c      run only these scenarios (one suite process per scenario)
#   --suite S         all (default: every server scenario, pending ones too),
#                     active (the suite's default: all but json-schema-2020-12 and
#                     server-sse-polling) or pending
#   --spec-version V  only scenarios for this spec version (e.g. 2025-06-18, 2025-11-25)
#   --timeout SECS    kill the suite after SECS (default 600); scenarios without a
#                     result then count as fail
#   --list            print the server scenario names and exit
#   -h, --help
#
# Exit status: 0 when the suite ran (whatever the scenarios gave), 1 when a
# --require'd scenario did not pass, 2 on a usage or setup error (no Node 22, no
# suite installed, suite timed out before writing any result).
#
# Needs Node >= 22 (the suite's bundle imports fs.globSync and fails to load on
# Node 20). Found, in this order:
#   $AIRLOCK_NODE22                                   explicit binary (any path)
#   $AIRLOCK_TOOLS/node_modules/node/bin/node         the `node` npm package (22.x), as
#                                                     installed by scripts/mcp-test-env.sh
#   $AIRLOCK_TOOLS/node_modules/node/node_modules/node-linux-*/bin/node   same binary
#   `node` on PATH, if it is >= 22
# The suite: $AIRLOCK_CONFORMANCE, else
#   $AIRLOCK_TOOLS/node_modules/@modelcontextprotocol/conformance/dist/index.js
# AIRLOCK_TOOLS defaults to $HOME/.cache/airlock/tools. To use a scratch install
# (`npm i --prefix /tmp/conf @modelcontextprotocol/conformance node@22`), run with
# AIRLOCK_TOOLS=/tmp/conf.
#
# The suite takes about 2 s against a local server; it needs no network beyond
# URL and no browser. Each scenario opens its own session with the TypeScript
# SDK client (initialize; notifications/initialized, answered 202; then a GET
# for the standalone SSE stream, where 405 is fine) and never DELETEs it: one
# run leaves ~35 sessions open on the server.
set -euo pipefail

prog="mcp-conformance"
log() { printf '%s: %s\n' "$prog" "$*" >&2; }
die() { log "error: $*"; exit 2; }
usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"; }

require="" only="" suite="all" spec="" timeout_s=600 list=0
args=()
while (($#)); do
    case "$1" in
        --require) [[ $# -ge 2 ]] || die "--require needs a value"; require="$2"; shift 2 ;;
        --require=*) require="${1#*=}"; shift ;;
        --only) [[ $# -ge 2 ]] || die "--only needs a value"; only="$2"; shift 2 ;;
        --only=*) only="${1#*=}"; shift ;;
        --suite) [[ $# -ge 2 ]] || die "--suite needs a value"; suite="$2"; shift 2 ;;
        --suite=*) suite="${1#*=}"; shift ;;
        --spec-version) [[ $# -ge 2 ]] || die "--spec-version needs a value"; spec="$2"; shift 2 ;;
        --spec-version=*) spec="${1#*=}"; shift ;;
        --timeout) [[ $# -ge 2 ]] || die "--timeout needs a value"; timeout_s="$2"; shift 2 ;;
        --timeout=*) timeout_s="${1#*=}"; shift ;;
        --list) list=1; shift ;;
        -h|--help) usage; exit 0 ;;
        --) shift; args+=("$@"); break ;;
        -*) die "unknown option $1 (see --help)" ;;
        *) args+=("$1"); shift ;;
    esac
done
case "$suite" in all|active|pending) ;; *) die "--suite must be all, active or pending" ;; esac
[[ "$timeout_s" =~ ^[0-9]+$ ]] || die "--timeout must be a number of seconds"

# ------------------------------------------------------------ tools
tools="${AIRLOCK_TOOLS:-$HOME/.cache/airlock/tools}"
node_major() { "$1" -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0; }
find_node() {
    local c
    if [[ -n "${AIRLOCK_NODE22:-}" ]]; then
        [[ -x "$AIRLOCK_NODE22" ]] || die "AIRLOCK_NODE22=$AIRLOCK_NODE22 is not executable"
        printf '%s\n' "$AIRLOCK_NODE22"; return
    fi
    for c in "$tools/node_modules/node/bin/node" "$tools"/node_modules/node/node_modules/node-linux-*/bin/node \
             "$(command -v node 2>/dev/null || true)"; do
        [[ -n "$c" && -x "$c" ]] || continue
        if (( $(node_major "$c") >= 22 )); then printf '%s\n' "$c"; return; fi
    done
    die "no Node >= 22 found: run scripts/mcp-test-env.sh (installs the node@22 package into $tools), or set AIRLOCK_NODE22 / AIRLOCK_TOOLS"
}
node="$(find_node)"
(( $(node_major "$node") >= 22 )) || die "$node is $("$node" --version 2>/dev/null || echo '?'); the suite needs Node >= 22"
suite_js="${AIRLOCK_CONFORMANCE:-$tools/node_modules/@modelcontextprotocol/conformance/dist/index.js}"
[[ -f "$suite_js" ]] || die "conformance suite not found at $suite_js: run scripts/mcp-test-env.sh, or set AIRLOCK_CONFORMANCE / AIRLOCK_TOOLS"

# Scenario names, from the suite itself (`list --server` prints "  - name [versions]").
list_scenarios() {
    local a=(list --server)
    [[ -n "$spec" ]] && a+=(--spec-version "$spec")
    CI=true "$node" "$suite_js" "${a[@]}" </dev/null 2>/dev/null | sed -n 's/^  - \([^ ]*\).*/\1/p'
}
mapfile -t known < <(list_scenarios)
((${#known[@]})) || die "the suite listed no server scenarios ($node $suite_js list --server)"
if ((list)); then printf '%s\n' "${known[@]}"; exit 0; fi

((${#args[@]} >= 1 && ${#args[@]} <= 2)) || { usage >&2; exit 2; }
url="${args[0]}"
[[ "$url" =~ ^https?:// ]] || die "URL must start with http:// or https:// (got $url)"
if ((${#args[@]} == 2)); then outdir="${args[1]}"; mkdir -p "$outdir"; else outdir="$(mktemp -d "${TMPDIR:-/tmp}/mcp-conformance.XXXXXX")"; fi
outdir="$(cd "$outdir" && pwd)"
checks="$outdir/checks"
rm -rf "$checks"; mkdir -p "$checks"

split_csv() { tr ',' '\n' <<<"$1" | sed 's/^[[:space:]]*//;s/[[:space:]]*$//' | sed '/^$/d'; }
is_known() { local s; for s in "${known[@]}"; do [[ "$s" == "$1" ]] && return 0; done; return 1; }

# Which scenarios this run expects results for.
if [[ -n "$only" ]]; then
    mapfile -t expected < <(split_csv "$only")
    for s in "${expected[@]}"; do is_known "$s" || die "unknown scenario '$s' (see --list)"; done
elif [[ "$suite" == all ]]; then
    expected=("${known[@]}")
else
    expected=()  # active/pending: taken from the suite's own "Running ..." lines below
fi
if [[ -n "$require" ]]; then
    while IFS= read -r s; do is_known "$s" || die "--require: unknown scenario '$s' (see --list)"; done < <(split_csv "$require")
fi

# ------------------------------------------------------------ run
log "node $("$node" --version) $node; suite $("$node" "$suite_js" --version 2>/dev/null </dev/null || echo '?')"
log "running against $url (results in $outdir)"
rawlog="$outdir/conformance.log"
: >"$rawlog"
start=$(date +%s.%N)
run_suite() {  # args after `server --url URL -o DIR`
    local rc=0
    CI=true NO_COLOR=1 timeout --kill-after=10 "$timeout_s" \
        "$node" "$suite_js" server --url "$url" -o "$checks" "$@" </dev/null >>"$rawlog" 2>&1 || rc=$?
    # The suite exits 1 when any check failed; 124/137 mean our timeout hit.
    if ((rc == 124 || rc == 137)); then log "suite timed out after ${timeout_s}s"; fi
    if ((rc > 1 && rc != 124 && rc != 137)); then log "suite exited $rc (see $rawlog)"; fi
    return 0
}
if [[ -n "$only" ]]; then
    for s in "${expected[@]}"; do
        printf '\n=== %s ===\n' "$s" >>"$rawlog"
        run_suite --scenario "$s"
    done
else
    a=(--suite "$suite")
    [[ -n "$spec" ]] && a+=(--spec-version "$spec")
    run_suite "${a[@]}"
    if ((${#expected[@]} == 0)) || [[ -n "$spec" ]]; then
        mapfile -t expected < <(sed -n "s/^=== Running scenario: \(.*\) ===$/\1/p" "$rawlog")
    fi
fi
elapsed=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN{printf "%.1f", e-s}')
if ((${#expected[@]} == 0)); then
    tail -n 20 "$rawlog" >&2 || true
    die "the suite ran no scenario (see $rawlog)"
fi

# ------------------------------------------------------------ summarise
# Reads every checks.json under $checks and prints the per-scenario lines.
# (Node, not jq: the Node 22 binary is here anyway.)
# shellcheck disable=SC2016  # JavaScript, not shell
summary_js='
const fs = require("fs"), path = require("path");
const [dir, outJson, ...expected] = process.argv.slice(1);
const byScenario = new Map();
for (const d of fs.readdirSync(dir)) {
  const m = /^server-(.+)-\d{4}-\d\d-\d\dT[\d-]+Z$/.exec(d);
  if (!m) continue;
  const f = path.join(dir, d, "checks.json");
  if (!fs.existsSync(f)) continue;  // the suite makes the dir first: no file = it never finished
  let checks;
  try { checks = JSON.parse(fs.readFileSync(f, "utf8")); }
  catch (e) { checks = [{ id: "checks.json", status: "FAILURE", errorMessage: "unreadable: " + e.message }]; }
  byScenario.set(m[1], (byScenario.get(m[1]) || []).concat(checks));
}
const clip = (s, n = 160) => { s = String(s).replace(/\s+/g, " ").trim(); return s.length > n ? s.slice(0, n - 1) + "…" : s; };
const rows = [];
for (const name of expected) {
  const checks = byScenario.get(name);
  if (!checks) { rows.push({ scenario: name, status: "fail", detail: "no result (suite crashed or timed out)", passed: 0, failed: 0, warnings: 0 }); continue; }
  const n = (st) => checks.filter((c) => c.status === st).length;
  const passed = n("SUCCESS"), failed = n("FAILURE"), warnings = n("WARNING");
  let status, detail;
  if (failed) {
    const f = checks.find((c) => c.status === "FAILURE");
    status = "fail";
    detail = (failed > 1 ? `${failed} checks failed; ` : "") + clip(`${f.id || f.name}: ${f.errorMessage || f.description || "failed"}`);
  } else if (passed) {
    status = "pass";
    detail = `${passed} check${passed > 1 ? "s" : ""} ok` + (warnings ? `, ${warnings} warning${warnings > 1 ? "s" : ""}` : "");
    const r = checks.map((c) => c.details && c.details.result).find((r) => r && r.isError === true);
    if (r) {
      const t = (r.content || []).map((c) => c.text).filter(Boolean).join(" ");
      if (name !== "tools-call-error" || /not found|unknown tool/i.test(t))
        detail += "; suspect: tool result isError: " + clip(t, 100);
    }
  } else {
    const w = checks.find((c) => c.status === "WARNING") || checks[0];
    status = "skip";
    detail = w ? clip(w.errorMessage || (w.details && w.details.message) || w.description || "no checks") : "no checks";
  }
  rows.push({ scenario: name, status, detail, passed, failed, warnings });
}
fs.writeFileSync(outJson, JSON.stringify(rows, null, 2) + "\n");
for (const r of rows) console.log(`${r.scenario}: ${r.status} (${r.detail})`);
console.log(`passed ${rows.filter((r) => r.status === "pass").length}/${rows.length}`);
'
"$node" -e "$summary_js" "$checks" "$outdir/summary.json" "${expected[@]}" | tee "$outdir/summary.txt"
log "done in ${elapsed}s; results in $outdir"
if grep -q '^server-initialize: fail' "$outdir/summary.txt"; then
    log "note: server-initialize failed, so every scenario did; is $url up? (see $rawlog)"
fi

# ------------------------------------------------------------ --require
if [[ -n "$require" ]]; then
    missing=()
    while IFS= read -r s; do
        grep -qxF "$s: pass" <(sed 's/ (.*$//' "$outdir/summary.txt") || missing+=("$s")
    done < <(split_csv "$require")
    if ((${#missing[@]})); then
        log "required scenario(s) did not pass: ${missing[*]}"
        exit 1
    fi
    log "all required scenarios passed"
fi
exit 0
