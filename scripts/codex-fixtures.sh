#!/usr/bin/env bash
# Regenerates the expected workspaces of the apply_patch fixtures named codex-* in
# crates/airlock-cli/tests/fixtures/apply_patch/ with OpenAI Codex's own apply_patch,
# so that airlock's V4A results are checked byte for byte against Codex's. Each case
# has input/ (the files before; may be absent) and patch.txt; this rewrites
# expected/ with the files Codex leaves and reports its exit code (a case Codex
# refuses needs a hand-written expected.json). Not part of the test run: the Codex
# binary is a 167 MB download.
#
#   CODEX=/path/to/codex bash scripts/codex-fixtures.sh
#
# Without CODEX it installs @openai/codex (CODEX_VERSION, default the version the
# fixtures came from: 0.169.0) from npm into a temporary directory.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
fixtures="$root/crates/airlock-cli/tests/fixtures/apply_patch"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
if [ -z "${CODEX:-}" ]; then
  npm install --silent --prefix "$work/npm" "@openai/codex@${CODEX_VERSION:-0.169.0}"
  CODEX="$work/npm/node_modules/.bin/codex"
fi
"$CODEX" --version
for case in "$fixtures"/codex-*/; do
  ws="$work/ws"
  rm -rf "$ws" && mkdir -p "$ws"
  if [ -d "$case/input" ]; then cp -a "$case/input/." "$ws/"; fi
  status=0
  # An empty home: apply_patch needs no login and no network.
  (cd "$ws" && HOME="$work/home" CODEX_HOME="$work/home" \
    "$CODEX" --codex-run-as-apply-patch "$(cat "$case/patch.txt")" >/dev/null 2>&1) || status=$?
  rm -rf "$case/expected"
  mkdir -p "$case/expected"
  cp -a "$ws/." "$case/expected/"
  echo "$(basename "$case"): exit $status"
done
