#!/usr/bin/env bash
# Thin wrapper over the MCP Inspector CLI (`mcp-inspector --cli`, package
# @modelcontextprotocol/inspector) for headless use in tests and CI: lists the
# tools of, or calls one tool on, an MCP server given as a stdio command or an
# http(s) URL, and prints the server's result as JSON on stdout.
#
# Usage:
#   scripts/mcp-inspector.sh [-e K=V]... [-q] list  -- TARGET...
#   scripts/mcp-inspector.sh [-e K=V]... [-q] call TOOL [k=v ...] -- TARGET...
#   scripts/mcp-inspector.sh [-e K=V]... [-q] call-json TOOL '{"k": <json>}' -- TARGET...
#   scripts/mcp-inspector.sh raw INSPECTOR-CLI-ARGS...     (passed as they are, after --cli)
#
#   TARGET   a stdio server command and its arguments (anything: they never reach
#            the inspector's option parser, see below), or one http(s):// URL
#            (a path ending in /mcp is streamable HTTP, /sse is the old SSE transport)
#   call     k=v values are strings that the inspector converts from the tool's
#            inputSchema (fetched with tools/list first): number/integer -> Number,
#            boolean -> "true"/anything else, object/array -> JSON.parse (the string
#            is kept when it does not parse); a key the schema lacks stays a string
#   call-json  arguments passed verbatim (inspector v2 --tool-args-json; on v1 each
#            top-level value is sent as k=<JSON> and converted as above)
#   -e K=V   extra environment for the stdio server (repeatable)
#   -q       v2 only: no status lines and no server stderr, errors still on stderr
#
# Output: on success the JSON-RPC `result` object, pretty-printed, e.g.
#   list -> {"tools": [{"name", "description", "inputSchema", ...}, ...]}
#   call -> {"content": [{"type": "text", "text": "..."}], "structuredContent"?: {...}, "isError"?: true}
# Exit status (the inspector v2's own map; v1 is brought in line here):
#   0 ok; 5 the tool returned isError:true or does not exist; 1 usage error,
#   JSON-RPC error, server failed to start or closed; 3 auth needed; 4 URL
#   unreachable; 124 our timeout. Errors go to stderr (v2: {"error":{"code","message"}}).
#
# Environment:
#   AIRLOCK_TOOLS      (default $HOME/.cache/airlock/tools; scripts/mcp-test-env.sh installs here)
#   AIRLOCK_NODE22     Node >= 22 binary (default $AIRLOCK_TOOLS/node_modules/node/bin/node;
#                      inspector 2.x needs >= 22.19)
#   AIRLOCK_INSPECTOR  inspector entry point (default: the v2 launcher
#                      $AIRLOCK_TOOLS/node_modules/@modelcontextprotocol/inspector/clients/launcher/build/index.js,
#                      else v1's .../inspector/cli/build/cli.js)
#   AIRLOCK_INSPECTOR_TIMEOUT  seconds before the whole call is killed (default 120)
#
# Why a wrapper at all:
#  - The inspector's own parser eats server arguments that look like its options
#    (--config, --server, -e, --method, --tool-arg, ...), and in v1 a `--tool-arg`
#    list swallows a target that follows it even after `--`. Here the stdio TARGET
#    is written to a small shim script and only the shim's path is passed.
#  - Inspector v2 starts a stdio server with a bare environment (HOME, LOGNAME,
#    PATH, SHELL, TERM, USER and -e values only); v1 passed everything. The shim
#    restores the caller's whole environment (plus -e), in the caller's directory,
#    so `RUST_LOG=debug scripts/mcp-inspector.sh list -- airlock ...` works.
#  - It runs with CI=true and stdin from /dev/null: the CLI needs no browser, no
#    TTY and no network for a stdio target (checked in an empty network namespace).
set -euo pipefail

prog="mcp-inspector"
log() { printf '%s: %s\n' "$prog" "$*" >&2; }
die() { log "error: $*"; exit 1; }
usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"; }

tools="${AIRLOCK_TOOLS:-$HOME/.cache/airlock/tools}"
node="${AIRLOCK_NODE22:-$tools/node_modules/node/bin/node}"
[[ -x "$node" ]] || die "no Node 22 at $node: run scripts/mcp-test-env.sh, or set AIRLOCK_NODE22 / AIRLOCK_TOOLS"
insp="${AIRLOCK_INSPECTOR:-}"
if [[ -z "$insp" ]]; then
    base="$tools/node_modules/@modelcontextprotocol/inspector"
    for c in "$base/clients/launcher/build/index.js" "$base/cli/build/cli.js"; do
        [[ -f "$c" ]] && { insp="$c"; break; }
    done
    [[ -n "$insp" ]] || die "inspector not found under $base: run scripts/mcp-test-env.sh, or set AIRLOCK_INSPECTOR / AIRLOCK_TOOLS"
fi
ver="$("$node" -e 'let d=require("path").dirname(process.argv[1]);for(;;){try{const p=require(d+"/package.json");if(p.name==="@modelcontextprotocol/inspector"){console.log(p.version);break}}catch{}const u=require("path").dirname(d);if(u===d){console.log("0");break}d=u}' "$insp")"
major="${ver%%.*}"
timeout_s="${AIRLOCK_INSPECTOR_TIMEOUT:-120}"

# Run the inspector: Node 22 first on PATH (v1 re-spawns `node` from PATH), no stdin.
inspector() {
    PATH="$(dirname "$node"):$PATH" CI=true timeout --kill-after=5 "$timeout_s" "$node" "$insp" --cli "$@" </dev/null
}

envs=() quiet=0
while (($#)); do
    case "$1" in
        -e) [[ $# -ge 2 && "$2" == *=* ]] || die "-e needs K=V"; envs+=("$2"); shift 2 ;;
        -q|--quiet) quiet=1; shift ;;
        -h|--help) usage; exit 0 ;;
        *) break ;;
    esac
done
(($#)) || { usage >&2; exit 1; }
action="$1"; shift
if [[ "$action" == raw ]]; then
    rc=0; inspector "$@" || rc=$?; exit "$rc"
fi

# Split ACTION-ARGS -- TARGET...
pre=()
while (($#)) && [[ "$1" != -- ]]; do pre+=("$1"); shift; done
[[ "${1:-}" == -- ]] || die "missing -- TARGET (a stdio command or an http(s) URL)"
shift
(($#)) || die "empty TARGET after --"
target=("$@")

method_args=()
json_args=""
case "$action" in
    list|tools/list)
        ((${#pre[@]} == 0)) || die "list takes no arguments before --"
        method_args=(--method tools/list) ;;
    call|tools/call)
        ((${#pre[@]} >= 1)) || die "call needs a TOOL name"
        method_args=(--method tools/call --tool-name "${pre[0]}")
        for kv in "${pre[@]:1}"; do
            [[ "$kv" == *=?* ]] || die "tool argument '$kv' is not k=v (an empty value is refused by the inspector)"
            method_args+=(--tool-arg "$kv")
        done ;;
    call-json)
        ((${#pre[@]} == 2)) || die "call-json needs TOOL and one JSON object"
        json_args="${pre[1]}"
        "$node" -e 'const v=JSON.parse(process.argv[1]);if(v===null||typeof v!=="object"||Array.isArray(v))process.exit(1)' "$json_args" \
            || die "call-json: '$json_args' is not a JSON object"
        method_args=(--method tools/call --tool-name "${pre[0]}")
        if ((major >= 2)); then
            method_args+=(--tool-args-json "$json_args")
        else
            mapfile -t kvs < <("$node" -e 'for(const[k,v]of Object.entries(JSON.parse(process.argv[1])))console.log(k+"="+(typeof v==="string"?v:JSON.stringify(v)))' "$json_args")
            for kv in "${kvs[@]}"; do method_args+=(--tool-arg "$kv"); done
        fi ;;
    *) die "unknown action '$action' (list, call, call-json, raw)" ;;
esac

opts=()
((quiet)) && ((major >= 2)) && opts+=(-q)
tmp="$(mktemp -d "${TMPDIR:-/tmp}/mcp-inspector.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

if ((${#target[@]} == 1)) && [[ "${target[0]}" =~ ^https?:// ]]; then
    ((${#envs[@]} == 0)) || die "-e applies to stdio servers only"
    tgt=("${target[0]}")
else
    # The shim: caller's environment (+ -e), caller's cwd, then exec the command.
    shim="$tmp/server.sh"
    {
        printf '#!/usr/bin/env bash\n'
        while IFS= read -r -d '' kv; do
            k="${kv%%=*}"
            [[ "$k" =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]] || continue
            case "$k" in SHELLOPTS|BASHOPTS|BASH_*|_) continue ;; esac
            printf 'export %s=%q\n' "$k" "${kv#*=}"
        done < <(env -0)
        for kv in ${envs[@]+"${envs[@]}"}; do printf 'export %s=%q\n' "${kv%%=*}" "${kv#*=}"; done
        printf 'cd %q || exit 127\n' "$PWD"
        printf 'exec'; printf ' %q' "${target[@]}"; printf '\n'
    } >"$shim"
    chmod +x "$shim"
    tgt=("$shim")
fi

# Target first, then the method options: the order both v1 and v2 parse right.
rc=0
inspector ${opts[@]+"${opts[@]}"} "${tgt[@]}" "${method_args[@]}" >"$tmp/out" 2>"$tmp/err" || rc=$?
cat "$tmp/err" >&2  # v1 prints each error twice plus "Failed with exit code: 1"
cat "$tmp/out"
if ((rc == 124 || rc == 137)); then log "timed out after ${timeout_s}s"; exit 124; fi
if ((rc == 0 && major < 2)) && [[ "${method_args[1]}" == tools/call ]]; then
    # v1 exits 0 on isError:true; v2 exits 5. Same contract for both.
    "$node" -e 'const r=JSON.parse(require("fs").readFileSync(process.argv[1],"utf8"));process.exit(r&&r.isError===true?5:0)' "$tmp/out" || rc=$?
fi
exit "$rc"
