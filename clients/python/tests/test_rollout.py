"""A rollout: the server drains (``server/draining``, close code 1012) and the session resumes by itself
on the next server at the same address, output whole and the real exit code."""
from __future__ import annotations

import os
import subprocess

import pytest
from conftest import IN_CI, aio, docker_ready
from server import Server

from exec_server import AsyncClient

LINES = 100
SCRIPT = f"i=0; while [ $i -lt {LINES} ]; do echo line-$i; i=$((i+1)); sleep 0.05; done; exit 7"


@aio
async def test_sigterm_drains_and_the_session_resumes_on_the_next_server() -> None:
    reason = docker_ready()
    if reason is not None:
        if IN_CI:
            pytest.fail(reason)
        pytest.skip(reason)
    first = Server("docker", ["--shutdown-sessions", "keep"])
    second: Server | None = None
    try:
        client = AsyncClient(first.url, first.token)
        s = await client.create_session(sandbox={"type": "danger-full-access"}, auto_reconnect=False)
        proc = await s.spawn(SCRIPT, collect=True)
        got: list[str] = []
        async for chunk in proc:
            got.append(chunk.text)
            if second is None and "".join(got).count("\n") >= 10:
                first.stop()  # SIGTERM: the server drains and keeps the session
                second = Server("docker", ["--shutdown-sessions", "keep"], succeeds=first)
        result = await proc.wait(check=False)
        expected = "".join(f"line-{i}\n" for i in range(LINES))
        assert "".join(got) == expected and result.stdout == expected
        assert result.exit_code == 7
        # Told to go (server/draining, 1012), resumed although auto_reconnect is off.
        assert s.drains == 1 and s.disconnects == 1 and s.connected
        await s.delete()
    finally:
        if second is not None:
            second.stop()
        elif first.proc.poll() is None:
            first.stop()
        # The servers keep their sessions on SIGTERM: what a failed run left goes here.
        label = f"label=exec-server.instance=pytest-{os.getpid()}-{first.port}"
        left = subprocess.run(["docker", "ps", "-aq", "--filter", label], capture_output=True, text=True).stdout.split()
        if left:
            subprocess.run(["docker", "rm", "-f", *left], capture_output=True)
