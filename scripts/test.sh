#!/usr/bin/env bash
# The whole test suite, on a fresh machine too: installs the real MCP clients
# and servers and playwright-core, which the tests drive
# (scripts/mcp-test-env.sh, idempotent and quick once installed), then runs
# every crate's tests. Needs ripgrep, chromium and postgresql from Debian
# (.ci/run installs them). Extra arguments go to `cargo test`. A plain `cargo test`
# works with Rust alone: it skips the tests whose peers are missing and says
# which on stderr.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v rg >/dev/null 2>&1; then
  echo "test.sh: the grep tests need ripgrep (apt-get install ripgrep)" >&2
  exit 2
fi
if [ ! -x "${AIRLOCK_CHROMIUM:-/usr/bin/chromium}" ]; then
  echo "test.sh: the web UI tests need Debian's chromium (apt-get install chromium)" >&2
  exit 2
fi
if ! ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1 && [ -z "${AIRLOCK_PG_BIN:-}" ]; then
  echo "test.sh: the shared store's tests need PostgreSQL (apt-get install postgresql)" >&2
  exit 2
fi
bash scripts/mcp-test-env.sh >/dev/null
# Every test runs here: one whose peer (Python, Node, Chromium, ripgrep,
# PostgreSQL) is missing fails instead of being skipped as in a plain
# `cargo test`.
export AIRLOCK_TEST_PEERS=1
cargo test --workspace --locked "$@"
