#!/usr/bin/env bash
# The one test command (`npm test`): type-check, then every test file under node's test runner,
# then the Python SDK's checks (scripts/test-python.sh). Docker tests need an engine
# (scripts/start-dockerd.sh); under CI=true a missing one fails.
set -euo pipefail
cd "$(dirname "$0")/.."

npx tsc --noEmit -p .
npx tsc --noEmit -p web

mapfile -t files < <(find test -name '*.test.ts' | sort)
if [ "${#files[@]}" -eq 0 ]; then
  echo "test.sh: no test files found" >&2
  exit 1
fi
# Arguments (e.g. --test-name-pattern) go to every runner. A file list given after `--` replaces
# the whole tree: `npm test -- -- test/unit/x.test.ts`.
args=()
# A run narrowed by arguments (a pattern, a file list) is of those node tests only.
whole=1
[ $# -gt 0 ] && whole=0
while [ $# -gt 0 ]; do
  if [ "$1" = "--" ]; then shift; files=("$@"); break; fi
  args+=("$1"); shift
done

# Two groups side by side: the files that use the Docker engine, one at a time (they contend
# for one engine and assert on its containers), and the files that do not (unit, docs, CLI,
# chart, local-only suites), one at a time. The engine group is the long one; the other runs
# in its shadow. EXEC_SERVER_TEST_SERIAL=1 keeps one group (as before, for a loaded machine).
engine=()
other=()
# Suites parameterised by backend alone (BACKENDS, and no test outside its loops): their docker
# cases run in the engine group and their local cases in the other, beside it
# (test/support/backends.ts, `backendSelected`).
split=()
for f in "${files[@]}"; do
  case "$f" in
    test/docker/* | test/docker-runsc/* | test/image/* | test/session-image/*) engine+=("$f") ;;
    test/unit/* | test/helm/*)
      # Unit and chart tests name docker only as data (a flag, a value, dockerode's types); one
      # that needs the engine says so by its import of the engine check or by BACKENDS.
      if grep -qE "BACKENDS|docker/engine\.ts|engineReady" "$f"; then
        engine+=("$f")
      else
        other+=("$f")
      fi
      ;;
    *)
      if grep -q BACKENDS "$f" && ! grep -qE '^(test|describe)\(' "$f"; then
        engine+=("$f")
        other+=("$f")
        split+=("$f")
      elif grep -qE "BACKENDS|docker/engine\.ts|dockerode|'docker'|\"docker\"|engineReady" "$f"; then
        engine+=("$f")
      else
        other+=("$f")
      fi
      ;;
  esac
done
if [ "${EXEC_SERVER_TEST_SERIAL:-0}" = "1" ]; then
  engine=("${files[@]}")
  other=()
  split=()
fi
export EXEC_SERVER_TEST_SPLIT="${split[*]}"

# --test-force-exit: a file whose tests all finished must not hang the run on a stray handle
# (such leaks are bugs to fix, as the docker exec-stream one was; this only keeps CI bounded).
# --test-timeout: a test without its own timeout fails after 3 minutes instead of waiting.
# --test-concurrency=1: one file at a time within a group.
# setsid: each runner and its per-file processes form one group the watchdog can end whole.
# --test-reporter=tap: the same output on every Node version, ending in the runner's
# `# tests / # pass / # fail` summary.
run_group() {
  setsid node --import tsx --test --test-reporter=tap --test-concurrency=1 \
    --test-timeout=180000 --test-force-exit "${args[@]}" "$@"
}

tmp="$(mktemp -d)"
# A runner given no files runs the whole tree: a group without files runs nothing instead.
if [ "${#engine[@]}" -gt 0 ]; then
  EXEC_SERVER_TEST_GROUP=engine run_group "${engine[@]}" &
else
  true &
fi
runner=$!
other_runner=""
if [ "${#other[@]}" -gt 0 ]; then
  EXEC_SERVER_TEST_GROUP=other run_group "${other[@]}" >"$tmp/other.tap" 2>&1 &
  other_runner=$!
fi
trap 'kill -INT -- "-$runner" 2>/dev/null; [ -n "$other_runner" ] && kill -INT -- "-$other_runner" 2>/dev/null' INT TERM

# A run still going after the limit is hung (an event loop blocked, a teardown that never
# returns): show what is running, then end it, so a hang is a failure with a clue instead of a
# CI job that times out silently.
limit="${EXEC_SERVER_TEST_LIMIT_SECONDS:-2400}"
(
  sleep "$limit" </dev/null >/dev/null 2>&1
  echo "test.sh: the suite is still running after ${limit} s; processes left:" >&2
  ps -eo pid,ppid,etime,args --forest >&2 || true
  kill -TERM -- "-$runner" 2>/dev/null
  [ -n "$other_runner" ] && kill -TERM -- "-$other_runner" 2>/dev/null
  sleep 20 </dev/null >/dev/null 2>&1
  kill -KILL -- "-$runner" 2>/dev/null
  [ -n "$other_runner" ] && kill -KILL -- "-$other_runner" 2>/dev/null
) &
watchdog=$!

set +e
wait "$runner"
rc=$?
orc=0
if [ -n "$other_runner" ]; then
  wait "$other_runner"
  orc=$?
  echo "# ---- the files that do not use the engine (${#other[@]}), run beside the others ----"
  cat "$tmp/other.tap"
fi
kill "$watchdog" 2>/dev/null
wait "$watchdog" 2>/dev/null
rm -rf "$tmp"

# The Python SDK (clients/python): mypy --strict, lint, pytest against real servers on both
# backends; after the node groups, as its docker tests share the engine. It needs Debian's
# python3-venv, -websockets, -pytest, -mypy, -pyflakes and pycodestyle (.ci/run installs them):
# without them it is reported as not run, and under CI=true that fails the run.
prc=0
pystate="not run (a narrowed run)"
if [ "$whole" -eq 1 ]; then
  if /usr/bin/python3 -c 'import ensurepip, websockets, pytest, mypy, pyflakes, pycodestyle' 2>/dev/null; then
    bash scripts/test-python.sh || prc=$?
    pystate="exit $prc"
  elif [ "${CI:-}" = "true" ]; then
    echo "test.sh: the Python SDK checks need python3 with venv, websockets, pytest, mypy, pyflakes and pycodestyle (required under CI=true)" >&2
    prc=1
    pystate="missing its Python packages (required under CI=true)"
  else
    pystate="NOT RUN: no python3 with venv, websockets, pytest, mypy, pyflakes and pycodestyle (bash .ci/run installs them)"
  fi
fi
echo "# ---- summary: engine group exit $rc (${#engine[@]} files), other group exit $orc (${#other[@]} files), Python SDK $pystate ----"
[ "$rc" -eq 0 ] && [ "$orc" -eq 0 ] && [ "$prc" -eq 0 ]
