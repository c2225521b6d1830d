#!/usr/bin/env bash
# Property-based tests of airlock's HTTP approval API with schemathesis
# (PyPI), driven by the API's own description at GET /openapi.json: no
# request may get a 5xx, and every answer must match the description (its
# status code, content type and schema; a 405 for an undocumented method;
# the 401 when the token is left out).
#
#   bash scripts/schemathesis.sh [AIRLOCK_BIN]
#
# It installs schemathesis (tests/schemathesis/requirements.txt, every
# version pinned) into $AIRLOCK_TOOLS/schemathesis-venv, reinstalling only
# when that file changes (a sha256 stamp next to the install; flock against
# concurrent installs). Then it starts `airlock serve --http 127.0.0.1:0` in
# a temporary workspace with a token for each role and a webhook receiver
# (for signed links), seeds approvals (pending, approved, denied, one that
# only an admin may decide) and with them audit records, and runs three
# passes over every documented operation:
#
#   admin      the admin token (which holds every role); signed links that
#              are valid; events streaming while a background agent makes
#              and an approver denies approvals;
#   agent      an agent token: its own calls and results, 403 elsewhere;
#   anonymous  no token: 401 everywhere but the description and links.
#
# Safe with CI=true and without stdin. Exits non-zero on any failure; the
# last line is a one-line summary.
#
# Environment:
#   AIRLOCK_BIN          the airlock binary when no argument is given (default
#                        ${CARGO_TARGET_DIR:-target}/release/airlock)
#   AIRLOCK_TOOLS        install prefix (default $HOME/.cache/airlock/tools)
#   AIRLOCK_BASE_PYTHON  interpreter used to create the venv (default python3, >= 3.10)
#   AIRLOCK_FORCE=1      reinstall schemathesis even if the stamp matches
#   SCHEMATHESIS_EXAMPLES  most test cases per operation in the admin pass
#                        (default 200; the other two passes use a fifth of it)
#   SCHEMATHESIS_SEED    random seed (default: a fixed one, so that runs repeat;
#                        `random` for a new one each run)
#   SCHEMATHESIS_CHECKS  schemathesis checks to run (default: see `checks=` below)
#   SCHEMATHESIS_REPORT  a directory: a JUnit report and a HAR of each pass go there
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
requirements="$repo/tests/schemathesis/requirements.txt"
tools="${AIRLOCK_TOOLS:-$HOME/.cache/airlock/tools}"
python="${AIRLOCK_BASE_PYTHON:-python3}"
force="${AIRLOCK_FORCE:-0}"
bin="${1:-${AIRLOCK_BIN:-${CARGO_TARGET_DIR:-$repo/target}/release/airlock}}"
examples="${SCHEMATHESIS_EXAMPLES:-200}"
seed="${SCHEMATHESIS_SEED:-20240611}"
report_dir="${SCHEMATHESIS_REPORT:-}"
# Every check that applies here but `positive_data_acceptance`: that one
# wants any schema-valid request accepted, and the description cannot say
# what the server rightly refuses with 400 (a tool's arguments, which only
# the tool's own schema describes; `content` with a denial; a filter that is
# not key=value).
checks="${SCHEMATHESIS_CHECKS:-not_a_server_error,status_code_conformance,content_type_conformance,response_headers_conformance,response_schema_conformance,negative_data_rejection,missing_required_header,unsupported_method,ignored_auth}"

log() { printf 'schemathesis: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

[[ -f "$requirements" ]] || die "missing $requirements"
[[ -x "$bin" ]] || die "no airlock binary at $bin (cargo build --release -p airlock-cli, or pass its path)"
bin="$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")"
command -v "$python" >/dev/null || die "no $python on PATH (set AIRLOCK_BASE_PYTHON)"
[[ "$examples" =~ ^[1-9][0-9]*$ ]] || die "SCHEMATHESIS_EXAMPLES must be a positive integer, not $examples"
if [[ -n "$report_dir" ]]; then
    mkdir -p "$report_dir"
    report_dir="$(cd "$report_dir" && pwd)"
fi
started=$SECONDS

# ---------------------------------------------------------------- install
mkdir -p "$tools"
tools="$(cd "$tools" && pwd)"
venv="$tools/schemathesis-venv"
py_version="$("$python" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])')" \
    || die "$python does not run"
[[ "$(printf '%s\n' "$py_version" 3.10.0 | sort -V | head -n1)" == 3.10.0 ]] \
    || die "$python is $py_version; schemathesis needs Python >= 3.10"
want="$({ cat "$requirements"; printf 'python=%s\n' "$py_version"; } | sha256sum | cut -d' ' -f1)"
(
    # One installer at a time per prefix (the lock goes with this subshell).
    if command -v flock >/dev/null; then
        exec 9>"$tools/.schemathesis-install.lock"
        flock 9
    fi
    have="$(cat "$venv/.airlock-stamp" 2>/dev/null || true)"
    if [[ "$force" != 1 && "$want" == "$have" && -x "$venv/bin/schemathesis" ]]; then
        log "venv up to date ($venv)"
    else
        log "installing schemathesis into $venv (python $py_version)"
        rm -rf "$venv"
        "$python" -m venv "$venv"
        PIP_NO_INPUT=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
            "$venv/bin/python" -m pip install --quiet --no-input -r "$requirements" </dev/null >&2
        "$venv/bin/schemathesis" --version >&2
        printf '%s\n' "$want" >"$venv/.airlock-stamp"
    fi
)
py="$venv/bin/python"
st="$venv/bin/schemathesis"

# ---------------------------------------------------------------- server
work="$(mktemp -d "${TMPDIR:-/tmp}/airlock-schemathesis.XXXXXX")"
# Background processes this script started: killed by pid on exit.
pids=()
# shellcheck disable=SC2317  # called by the trap
cleanup() {
    local pid
    for pid in "${pids[@]}"; do
        kill "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

AGENT=agent-token-1
APPROVER=approver-token-1
ADMIN=admin-token-1
sha() { printf '%s' "$1" | sha256sum | cut -d' ' -f1; }

# wait_for FILE WHAT PID: until FILE exists (30 s), while PID lives.
wait_for() {
    local _
    for _ in $(seq 1 300); do
        [[ -s "$1" ]] && return 0
        kill -0 "$3" 2>/dev/null || die "$2 exited"
        sleep 0.1
    done
    die "$2 did not start in 30 s"
}

# Webhooks: each POST body, one per line. Their signed links are the only
# way to a link that checks out.
"$py" - "$work/hooks.jsonl" "$work/hooks.port" <<'PY' &
import http.server, os, sys
out, port_file = sys.argv[1:3]

class Hook(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        with open(out, "ab") as f:
            f.write(body.replace(b"\n", b" ") + b"\n")
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args):
        pass

server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hook)
with open(port_file + ".tmp", "w") as f:
    f.write(str(server.server_address[1]))
os.rename(port_file + ".tmp", port_file)
server.serve_forever()
PY
pids+=($!)
wait_for "$work/hooks.port" "the webhook receiver" "${pids[-1]}"

ws="$work/ws"
mkdir -p "$ws/docs"
printf 'hello\n' >"$ws/a.txt"
printf '# notes\n\nline two\n' >"$ws/docs/notes.md"
cat >"$ws/airlock.yaml" <<EOF
auth:
  tokens:
    - {name: claude, sha256: "$(sha "$AGENT")", roles: [agent], user: u1}
    - {name: phone, sha256: "$(sha "$APPROVER")", roles: [approver], user: u1}
    - {name: root, sha256: "$(sha "$ADMIN")", roles: [admin], user: boss}
security:
  hitl:
    approval_mode: defer
    rules:
      - tools: [write_file]
        conditions: [{param: path, equals: docs/critical.md}]
        risk: critical
notify:
  webhooks:
    - url: http://127.0.0.1:$(cat "$work/hooks.port")/hook
EOF

(cd "$ws" && exec env AIRLOCK_USER=schemathesis "$bin" serve --http 127.0.0.1:0 \
    </dev/null >"$work/serve.out" 2>"$work/serve.err") &
pids+=($!)
server_pid=$!
addr=""
for _ in $(seq 1 300); do
    line="$(grep -m1 '^airlock: serving MCP at http://' "$work/serve.err" 2>/dev/null || true)"
    if [[ -n "$line" ]]; then
        addr="${line#airlock: serving MCP at http://}"
        addr="${addr%/mcp}"
        break
    fi
    kill -0 "$server_pid" 2>/dev/null || { cat "$work/serve.err" >&2; die "airlock serve exited"; }
    sleep 0.1
done
[[ -n "$addr" ]] || { cat "$work/serve.err" >&2; die "airlock serve did not report its address in 30 s"; }
base="http://$addr"
log "airlock serving at $base (workspace $ws)"

# Seeds approvals in each state (and with them audit records); writes their
# ids, one a line, and a signed link pair as TOML parameters.
"$py" - "$base" "$AGENT" "$APPROVER" "$ADMIN" "$work" <<'PY' >&2 || die "seeding failed"
import json, sys, time
import requests

base, agent, approver, admin, work = sys.argv[1:6]

def auth(token):
    return {"Authorization": f"Bearer {token}"}

def write(path, session="seed"):
    r = requests.post(f"{base}/v1/tools/call", headers=auth(agent), timeout=30, json={
        "tool": "write_file", "session": session,
        "arguments": {"path": path, "content": f"draft of {path}\n"}})
    assert r.status_code == 202 and r.json().get("approval_id"), (path, r.status_code, r.text)
    return r.json()["approval_id"]

def decide(id, decision, token=approver):
    r = requests.post(f"{base}/hitl/decide/{id}", headers=auth(token), timeout=30,
                      json={"decision": decision, "reason": "seed"})
    assert r.status_code == 200, (id, r.status_code, r.text)

def until(what, probe, seconds=20):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = probe()
        if found:
            return found
        time.sleep(0.1)
    sys.exit(f"seeding: no {what} after {seconds} s")

until("GET /openapi.json answering 200", lambda: requests.get(f"{base}/openapi.json", timeout=5).ok)
r = requests.post(f"{base}/v1/tools/call", headers=auth(agent), timeout=30,
                  json={"tool": "read_file", "arguments": {"path": "a.txt"}})
assert r.status_code == 200, (r.status_code, r.text)

ids = [write(f"docs/new-{n}.md") for n in range(6)]
decide(ids[0], "approve")
decide(ids[1], "deny")
ids.append(write("docs/critical.md"))  # decided only by an admin, with a reason
# For the signed links, kept out of the id dictionary: the first one's
# approve link is opened (200: a page, it decides nothing), the second one's
# deny link confirmed (200, then 409). schemathesis may still pick their ids
# out of answers and decide them: the links then answer 409 as well.
opened, confirmed = write("docs/opened.md"), write("docs/confirmed.md")

def links_of(id):
    try:
        hooks = [json.loads(line) for line in open(f"{work}/hooks.jsonl")]
    except FileNotFoundError:
        return None
    for hook in hooks:
        if hook.get("approval", {}).get("id") == id and hook.get("links"):
            return hook["links"]

with open(f"{work}/ids", "w") as out:
    out.write("".join(f"{id}\n" for id in ids))
with open(f"{work}/links.toml", "w") as out:
    for method, id, decision in [("GET", opened, "approve"), ("POST", confirmed, "deny")]:
        link = until(f"webhook with the links of {id}", lambda: links_of(id))[decision]
        query = dict(pair.split("=", 1) for pair in link.split("?", 1)[1].split("&"))
        # include-name: two include keys (path, method) would match either.
        out.write(f'\n[[operations]]\ninclude-name = "{method} /hitl/link/{{id}}/{{decision}}"\n'
                  f'parameters = {{ "path.id" = "{id}", "path.decision" = "{decision}", '
                  f'"query.exp" = "{query["exp"]}", "query.sig" = "{query["sig"]}" }}\n')
print(f"seeded: a read and {len(ids) + 2} approvals: 1 approved, 1 denied, {len(ids) - 2} pending "
      "(1 of them critical), 2 pending with signed links")
PY

# Configuration of all passes. Most generated ids are unknown (404): half
# of them are the seeded ones instead, so that approvals are also shown,
# decided (409 once decided) and their results read. Half the submitted
# calls name a real tool, so that they get past the tool lookup into the
# tool's own checks.
{
    printf '[dictionaries.approvals]\nvalues = ['
    sep=""
    while read -r id; do printf '%s"%s"' "$sep" "$id"; sep=", "; done <"$work/ids"
    printf ']\n\n'
    cat <<'TOML'
[dictionaries.tools]
values = ["read_file", "write_file", "edit_file", "apply_patch", "delete_file", "move_file",
          "grep", "glob", "list_dir", "stat", "exists", "proposal_status"]

[parameters]
"path.id" = { dictionary = "approvals", probability = 0.5 }
"body.tool" = { dictionary = "tools", probability = 0.5 }

# No crash cache (for `st replay`): the workspace goes at the end.
[cache]
enabled = false

# The event stream never ends by itself: schemathesis reads it for up to
# the request timeout or until it has this many events, then checks each
# event against the description.
[[operations]]
include-path = "/hitl/events"
request-timeout = 3
max-stream-events = 2
TOML
} >"$work/base.toml"
# The admin pass also opens and confirms valid signed links (the other
# passes try made-up ones).
cat "$work/base.toml" "$work/links.toml" >"$work/admin.toml"

# ---------------------------------------------------------------- passes
common=(
    --checks "$checks"
    # MCP (JSON-RPC sessions, tested by scripts/mcp-*.sh) is not in the
    # description; should it ever be, it stays out of this test.
    --exclude-path-regex '^/mcp'
    --workers 2
    --request-timeout 10
    --generation-database none
    --suppress-health-check all
    --no-color
)
if [[ "$seed" != random ]]; then
    common+=(--seed "$seed")
fi
# The warnings shown: schemathesis' default set but those expected here
# (link pages are HTML, which it has no deserializer to check against their
# string schema; the /mcp filter matches nothing; most generated decisions
# and calls are refused with 400 for reasons a schema cannot say, see
# `checks=`) and, in the agent and anonymous passes, the 401/403 answers
# they mean to get.
shown_refused=missing_test_data,base_url_mismatch,unused_openapi_auth,unsupported_regex,method_not_allowed,constants_extraction,unresolvable_reference,rate_limited,dictionary_mismatch,timeout_units
shown_admin="$shown_refused,missing_auth"

summary=()
failed=0
# run NAME CONFIG EXAMPLES WARNINGS ARGS...: one schemathesis pass.
run() {
    local name="$1" config="$2" n="$3" warnings="$4"
    shift 4
    local report=()
    if [[ -n "$report_dir" ]]; then
        # shellcheck disable=SC2054  # `junit,har` is one argument
        report=(--report junit,har --report-junit-path "$report_dir/$name.xml"
            --report-har-path "$report_dir/$name.har")
    fi
    log "pass $name: up to $n examples per operation"
    local out="$work/$name.log" status=0
    (cd "$work" && exec "$st" --config-file "$config" run "$base/openapi.json" "${common[@]}" \
        --max-examples "$n" --warnings "$warnings" "${report[@]}" "$@" \
        </dev/null >"$out" 2>&1) || status=$?
    cat "$out"
    # The count under "Test cases:", e.g. "  337 generated, 335 passed, 2 failed".
    local cases
    cases="$(grep -A1 -E '^Test cases:' "$out" | tail -n1 | sed -E 's/^ +//')"
    summary+=("$name: ${cases:-no test cases} (exit $status)")
    [[ "$status" == 0 ]] || failed=1
}

# While the admin pass runs, an agent keeps submitting writes that an
# approver denies a moment later, so that the event stream has `created` and
# `decided` events to check (bounded: at most 300 rounds, about 3 minutes).
"$py" - "$base" "$AGENT" "$APPROVER" <<'PY' &
import sys, time
import requests

base, agent, approver = sys.argv[1:4]
for n in range(300):
    try:
        r = requests.post(f"{base}/v1/tools/call", headers={"Authorization": f"Bearer {agent}"},
                          timeout=10, json={"tool": "write_file", "session": "ticker",
                                            "arguments": {"path": f"docs/tick-{n}.md", "content": "tick\n"}})
        time.sleep(0.3)
        id = r.json().get("approval_id") if r.status_code == 202 else None
        if id:
            requests.post(f"{base}/hitl/decide/{id}", headers={"Authorization": f"Bearer {approver}"},
                          timeout=10, json={"decision": "deny", "reason": "tick"})
    except requests.RequestException:
        pass
    time.sleep(0.3)
PY
ticker=$!
pids+=("$ticker")
run admin "$work/admin.toml" "$examples" "$shown_admin" -H "Authorization: Bearer $ADMIN"
kill "$ticker" 2>/dev/null || true

few=$(( examples / 5 > 0 ? examples / 5 : 1 ))
run agent "$work/base.toml" "$few" "$shown_refused" -H "Authorization: Bearer $AGENT"
run anonymous "$work/base.toml" "$few" "$shown_refused"

if ! kill -0 "$server_pid" 2>/dev/null; then
    log "airlock serve died during the run:"
    cat "$work/serve.err" >&2
    failed=1
fi

result=passed
[[ "$failed" == 0 ]] || result=FAILED
joined="$(printf '%s; ' "${summary[@]}")"
printf 'schemathesis %s in %ss: %s\n' "$result" "$((SECONDS - started))" "${joined%; }"
exit "$failed"
