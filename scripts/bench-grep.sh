#!/usr/bin/env bash
# Side-by-side benchmark of airlock's grep against ripgrep (DESIGN §12: grep
# over a large source tree within 1.25x ripgrep's time, same results).
#
# Usage: scripts/bench-grep.sh [runs]
#
# - Builds a source tree in $AIRLOCK_GREP_TREE (default /tmp/airlock-grep-tree)
#   when it is absent: the crate sources in the local cargo registry, the C
#   headers in /usr/include and the Python standard library, copied as they are
#   (so the tree has .gitignore files, hidden files, symlinks and binary .pyc
#   files, as real trees do).
# - For each pattern, times `rg --no-heading -n` and the airlock runner
#   (crates/airlock-fs/benches/grep_vs_rg.rs) as whole processes, with the tree
#   as their working directory and their output written to a file, warm cache,
#   alternating, [runs] times each (default 7); prints the medians and the
#   ratio airlock / rg.
# - Checks that both found the same set of `path:line:text` lines (compared
#   after decoding both as UTF-8 with replacement characters, as airlock
#   returns text).
#
# rg gets the flags that give it airlock's walk: --no-require-git (airlock
# honours .gitignore without a .git directory), --no-ignore-parent and
# --no-ignore-global (airlock reads no ignore file outside the workspace),
# --binary (airlock reports binary files with matches as rg --binary does), and
# --no-config.
#
# Needs: cargo, rg, python3. Exit status 1 when a result differs.

set -euo pipefail

runs="${1:-7}"
repo="$(cd "$(dirname "$0")/.." && pwd)"
tree="${AIRLOCK_GREP_TREE:-/tmp/airlock-grep-tree}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

command -v rg >/dev/null || { echo "rg (ripgrep) is not installed" >&2; exit 2; }
command -v python3 >/dev/null || { echo "python3 is needed" >&2; exit 2; }

if [ ! -d "$tree" ]; then
    echo "building the tree in $tree ..." >&2
    mkdir -p "$tree.partial"
    registry="${CARGO_HOME:-$HOME/.cargo}/registry/src"
    [ -d "$registry" ] && cp -a "$registry" "$tree.partial/crates"
    [ -d /usr/include ] && cp -a /usr/include "$tree.partial/include"
    for python in /usr/lib/python3 /usr/lib/python3.*; do
        [ -d "$python" ] && cp -a "$python" "$tree.partial/$(basename "$python")"
    done
    mv "$tree.partial" "$tree"
fi
files=$(find "$tree" -type f | wc -l)
size=$(du -sh "$tree" | cut -f1)
echo "tree: $tree, $size, $files files"

echo "building the airlock runner ..." >&2
runner=$(cd "$repo" && cargo bench -p airlock-fs --bench grep_vs_rg --no-run --message-format=json 2>/dev/null |
    python3 -c '
import json, sys
for line in sys.stdin:
    message = json.loads(line)
    if message.get("reason") == "compiler-artifact" and message["target"]["name"] == "grep_vs_rg" and message.get("executable"):
        print(message["executable"])
')
[ -x "$runner" ] || { echo "could not build the runner" >&2; exit 2; }

now() { date +%s%N; }

# run_rg OUT CASE PATTERN / run_airlock OUT CASE PATTERN
run_rg() {
    local flags=(--no-heading -n --no-config --no-require-git --no-ignore-parent --no-ignore-global --binary)
    [ "$2" = 1 ] && flags+=(-i)
    # Without a path and with stdin not a terminal, rg would search stdin.
    (cd "$tree" && rg "${flags[@]}" -e "$3" >"$1" </dev/null || [ $? = 1 ])
}
run_airlock() {
    (cd "$tree" && AIRLOCK_GREP_TREE=. AIRLOCK_GREP_CASE_INSENSITIVE="$2" AIRLOCK_GREP_PATTERN="$3" \
        "$runner" >"$1" 2>"$work/airlock.err" </dev/null)
}

median() { python3 -c 'import statistics, sys; print(statistics.median(float(x) for x in sys.argv[1:]))' "$@"; }

status=0
printf '%-32s %10s %12s %12s %7s  %s\n' "pattern" "lines" "rg ms" "airlock ms" "ratio" "same lines"
while IFS='|' read -r name case_insensitive pattern; do
    # Warm the page cache and the directory caches for both.
    run_rg "$work/rg.out" "$case_insensitive" "$pattern"
    run_airlock "$work/airlock.out" "$case_insensitive" "$pattern"
    rg_times=() airlock_times=()
    for _ in $(seq "$runs"); do
        start=$(now); run_rg "$work/rg.out" "$case_insensitive" "$pattern"; end=$(now)
        rg_times+=("$(( (end - start) / 1000 ))")
        start=$(now); run_airlock "$work/airlock.out" "$case_insensitive" "$pattern"; end=$(now)
        airlock_times+=("$(( (end - start) / 1000 ))")
    done
    rg_ms=$(python3 -c "print(round($(median "${rg_times[@]}") / 1000, 1))")
    airlock_ms=$(python3 -c "print(round($(median "${airlock_times[@]}") / 1000, 1))")
    ratio=$(python3 -c "print(f'{$airlock_ms / $rg_ms:.2f}')")
    same=$(python3 - "$work/rg.out" "$work/airlock.out" <<'PY'
import sys
def lines(path):
    with open(path, "rb") as file:
        return sorted(file.read().decode("utf-8", "replace").splitlines())
rg, airlock = lines(sys.argv[1]), lines(sys.argv[2])
if rg == airlock:
    print(f"yes ({len(rg)})")
else:
    only_rg = sorted(set(rg) - set(airlock))
    only_airlock = sorted(set(airlock) - set(rg))
    print(f"NO: {len(rg)} vs {len(airlock)} lines; only rg: {only_rg[:3]}; only airlock: {only_airlock[:3]}")
PY
)
    lines=$(wc -l <"$work/rg.out")
    printf '%-32s %10s %12s %12s %7s  %s\n' "$name" "$lines" "$rg_ms" "$airlock_ms" "$ratio" "$same"
    case "$same" in yes*) ;; *) status=1 ;; esac
done <<'PATTERNS'
literal `unsafe`|0|unsafe
literal, rare `SIGSEGV`|0|SIGSEGV
regex `fn \w+\(&mut self`|0|fn \w+\(&mut self
regex `[A-Z][a-z]+Error\b`|0|[A-Z][a-z]+Error\b
case-insensitive `-i copyright`|1|copyright
PATTERNS
echo "medians of $runs runs each (whole processes, warm cache, $(nproc) cores)"
exit "$status"
