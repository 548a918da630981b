#!/usr/bin/env bash
# The one test command (`npm test`): type-check, then every test file under node's test runner.
# Docker tests need an engine (scripts/start-dockerd.sh); under CI=true a missing one fails.
set -euo pipefail
cd "$(dirname "$0")/.."

npx tsc --noEmit -p .
npx tsc --noEmit -p web

mapfile -t files < <(find test -name '*.test.ts' | sort)
if [ "${#files[@]}" -eq 0 ]; then
  echo "test.sh: no test files found" >&2
  exit 1
fi
# --test-force-exit: a file whose tests all finished must not hang the run on a stray handle
# (such leaks are bugs to fix, as the docker exec-stream one was; this only keeps CI bounded).
# --test-timeout: a test without its own timeout fails after 3 minutes instead of waiting.
# setsid: the runner and its per-file processes form one group the watchdog can end whole.
# --test-reporter=tap: the same output on every Node version (Node 20 writes TAP when stdout is
# not a terminal, Node 24 its spec format), ending in the runner's `# tests / # pass / # fail`.
setsid node --import tsx --test --test-reporter=tap --test-timeout=180000 --test-force-exit "$@" "${files[@]}" &
runner=$!
trap 'kill -INT -- "-$runner" 2>/dev/null' INT TERM

# The suite takes about 5 minutes on 2 cores. A run still going after the limit is hung (an
# event loop blocked, a teardown that never returns): show what is running, then end it, so a
# hang is a failure with a clue instead of a CI job that times out silently.
limit="${EXEC_SERVER_TEST_LIMIT_SECONDS:-1800}"
(
  sleep "$limit" </dev/null >/dev/null 2>&1
  echo "test.sh: the suite is still running after ${limit} s; processes left:" >&2
  ps -eo pid,ppid,etime,args --forest >&2 || true
  kill -TERM -- "-$runner" 2>/dev/null
  sleep 20 </dev/null >/dev/null 2>&1
  kill -KILL -- "-$runner" 2>/dev/null
) &
watchdog=$!

set +e
wait "$runner"
rc=$?
kill "$watchdog" 2>/dev/null
wait "$watchdog" 2>/dev/null
exit "$rc"
