#!/usr/bin/env bash
# Runs every cargo-fuzz target in fuzz/ for a bounded time each
# (FUZZ_SECONDS, default 20), on the stable toolchain: RUSTC_BOOTSTRAP=1 lets
# cargo-fuzz pass the sanitizer flags it needs. Installs cargo-fuzz from
# crates.io when it is missing. Stops at the first crash; libFuzzer keeps the
# input under fuzz/artifacts/<target>/ (replay it with
# `RUSTC_BOOTSTRAP=1 cargo fuzz run <target> <file>` in fuzz/). A target with a
# dictionary in fuzz/dicts/<target>.dict gets it.
#
#   bash scripts/fuzz.sh                 every target
#   bash scripts/fuzz.sh mcp_stdio       one
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
if ! command -v cargo-fuzz >/dev/null 2>&1; then
  cargo install cargo-fuzz --locked --version 0.13.2
fi
export RUSTC_BOOTSTRAP=1
# Sanitizer builds of their own, beside (not inside) the main build.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/airlock/target}-fuzz"
seconds="${FUZZ_SECONDS:-20}"
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  mapfile -t targets < <(cargo fuzz list)
fi
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
for target in "${targets[@]}"; do
  echo "fuzz: $target for ${seconds}s"
  status=0
  dict=()
  if [ -f "dicts/$target.dict" ]; then dict=(-dict="dicts/$target.dict"); fi
  cargo fuzz run "$target" -- -max_total_time="$seconds" -rss_limit_mb=2048 -print_final_stats=1 \
    "${dict[@]}" >"$log" 2>&1 || status=$?
  grep -E '^(Done |stat::number_of_executed_units)' "$log" || true
  if [ "$status" -ne 0 ]; then
    tail -n 60 "$log" >&2
    echo "fuzz: $target failed (exit $status); inputs under fuzz/artifacts/$target/" >&2
    exit 1
  fi
done
echo "fuzz: ${#targets[@]} targets, ${seconds}s each, no failure"
