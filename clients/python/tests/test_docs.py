"""docs/python-sdk.md: every ```python block, run against a real server, prints the ```text under it."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from conftest import server_for
from server import REPO

DOC = REPO / "docs" / "python-sdk.md"
BLOCK = re.compile(r"(<!-- python-example: docker -->\n)?```python\n(.*?)```\n\n```text\n(.*?)```", re.S)
EXAMPLES = [(m.group(2), m.group(3), "docker" if m.group(1) else "local") for m in BLOCK.finditer(DOC.read_text())]


def test_readme_quick_start() -> None:
    code = re.search(r"```python\n(.*?)```", (REPO / "README.md").read_text(), re.S)
    assert code is not None
    server = server_for("local")
    env = {**os.environ, "EXEC_SERVER_URL": server.url, "EXEC_SERVER_TOKEN": server.token}
    run = subprocess.run([sys.executable, "-c", code.group(1)], env=env, capture_output=True, text=True, timeout=60)
    assert (run.returncode, run.stdout) == (0, "0 hello\n\n"), run.stderr


def test_every_python_block_has_its_output() -> None:
    assert len(EXAMPLES) == DOC.read_text().count("```python") >= 8


@pytest.mark.parametrize("code,expected,backend", EXAMPLES, ids=[f"example{i}" for i in range(len(EXAMPLES))])
def test_doc_example(code: str, expected: str, backend: str) -> None:
    server = server_for(backend)
    env = {**os.environ, "EXEC_SERVER_URL": server.url, "EXEC_SERVER_TOKEN": server.token}
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=90)
    assert run.returncode == 0, run.stderr
    assert run.stdout == expected
