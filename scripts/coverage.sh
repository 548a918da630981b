#!/usr/bin/env bash
# `npm run coverage`: the same suite as `npm test` (scripts/test.sh, same arguments: a file list
# after `--` replaces the tree), with Node's built-in V8 coverage, then one report of the lines
# of src/: one figure and the per-file table.
#
# Why in two steps: the test files start servers (`node --import tsx src/main.ts`) and the
# suite runs two runners side by side, so no single runner sees every process. Every process
# inherits NODE_V8_COVERAGE and writes its raw coverage into one directory; then one runner
# with --experimental-test-coverage runs scripts/coverage-merge.test.mjs, which copies those
# files into the runner's own coverage directory, and Node merges and maps them (source maps
# on, so lines are the TypeScript's). A process that dies by SIGKILL writes nothing: its lines
# count as uncovered. Files of src/ that no process loaded are listed at 0 % and counted.
set -euo pipefail
cd "$(dirname "$0")/.."

dir="${EXEC_SERVER_COVERAGE_DIR:-coverage/raw}"
rm -rf "$dir"
mkdir -p "$dir"
dir="$(cd "$dir" && pwd)"

set +e
NODE_V8_COVERAGE="$dir" NODE_OPTIONS="${NODE_OPTIONS:+$NODE_OPTIONS }--enable-source-maps" bash scripts/test.sh "$@"
rc=$?
set -e

echo "# ---- coverage of src/ ($(find "$dir" -name 'coverage-*.json' | wc -l) process reports) ----"
EXEC_SERVER_COVERAGE_DIR="$dir" node --enable-source-maps --test --experimental-test-coverage \
  --test-coverage-include='src/**' --test-reporter=./scripts/coverage-report.mjs \
  --test-reporter-destination=stdout scripts/coverage-merge.test.mjs
exit "$rc"
