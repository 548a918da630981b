#!/usr/bin/env bash
# The Python SDK's checks (`npm test` runs them after the node tests): a venv on Debian's Python with
# its packages (python3-websockets, python3-pytest, python3-mypy, and python3-setuptools with
# python3-wheel to build the package without isolation; no package index needed), the
# SDK installed from the checkout, mypy --strict, pyflakes and pycodestyle, then pytest against
# real servers on the local and the docker backend. Under CI=true a missing engine fails.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=/usr/bin/python3
if [ -n "${EXEC_SERVER_PY_VENV:-}" ]; then
  VENV="$EXEC_SERVER_PY_VENV"
else
  VENV="$(mktemp -d /tmp/exec-server-pyvenv.XXXXXX)"
  trap 'rm -rf "$VENV"' EXIT
fi
"$PY" -m venv --system-site-packages "$VENV"
"$VENV/bin/pip" install --quiet --no-deps --no-build-isolation --no-index ./clients/python
# Only the installed copy: the tests must not import the checkout's sources by accident.
cd clients/python/tests

echo "test-python: mypy --strict"
"$VENV/bin/python" -m mypy --strict --no-incremental -p exec_server
"$VENV/bin/python" -m mypy --strict --no-incremental ../examples ../../../bench/python_sdk.py ../../../bench/bare-relay.py ../../../bench/bare-pty.py
echo "test-python: pyflakes, pycodestyle"
"$VENV/bin/python" -m pyflakes ../exec_server ../examples . ../../../bench/python_sdk.py ../../../bench/bare-relay.py ../../../bench/bare-pty.py
"$VENV/bin/python" -m pycodestyle --max-line-length=120 --exclude=_generated.py ../exec_server ../examples . \
  ../../../bench/python_sdk.py ../../../bench/bare-relay.py ../../../bench/bare-pty.py

echo "test-python: pytest (exec_server from $("$VENV/bin/python" -c 'import exec_server; print(exec_server.__file__)'))"
"$VENV/bin/python" -m pytest -p no:cacheprovider -ra --durations=5 "$@" .
