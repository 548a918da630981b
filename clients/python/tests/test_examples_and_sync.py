"""The examples end to end, the synchronous Client, and the environment variables."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from server import Server

from exec_server import AsyncClient, Client, CommandExitError

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
EXPECTED = {
    "agent_loop": "[c1] 3 words.txt\n[c2] Output:\n[c3] hello agent\nThe command greeted: agent\n",
    "pty_session": "80x24 window: stty size says 24 80\nresized to 120x40: stty size says 40 120\n"
                   "echo $((6 * 7)) printed 42\nshell exited with 0\n",
    "parallel_map": "[0, 1, 4, 9, 16, 25, 36, 49, 64, 81, 100, 121, 144, 169, 196, 225]\nsum 1240\n",
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_example(local_server: Server, name: str) -> None:
    env = {**os.environ, "EXEC_SERVER_URL": local_server.url, "EXEC_SERVER_TOKEN": local_server.token}
    run = subprocess.run([sys.executable, str(EXAMPLES / f"{name}.py")], env=env, capture_output=True,
                         text=True, timeout=90)
    assert run.returncode == 0, run.stderr
    assert run.stdout == EXPECTED[name]


def test_sync_client(server: Server) -> None:
    with Client(server.url, server.token) as client, client.session(env={"N": "3"}) as s:
        assert s.run("echo $N").stdout == "3\n"
        with pytest.raises(CommandExitError):
            s.run("exit 4")
        proc = s.spawn("for i in 1 2 3; do echo $i; sleep 0.05; done")
        assert "".join(chunk.text for chunk in proc) == "1\n2\n3\n"
        assert proc.wait().exit_code == 0
        cat = s.spawn(["cat"], stdin="pipe")
        cat.write_stdin("piped\n")
        cat.close_stdin()
        assert cat.wait().stdout == "piped\n"
        root = s.info()["workdir"]
        assert s.upload(f"{root}/f.txt", b"sync bytes") == 10
        assert s.download(f"{root}/f.txt") == b"sync bytes"
        assert any(x["sessionId"] == s.id for x in client.list_sessions())


def test_environment_variables(local_server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EXEC_SERVER_URL", local_server.http_url)
    monkeypatch.setenv("EXEC_SERVER_TOKEN", local_server.token)
    client = AsyncClient()
    assert client.ws_url == local_server.url + "/" and client.token == local_server.token
    with Client() as sync:
        assert isinstance(sync.list_sessions(), list)
    monkeypatch.delenv("EXEC_SERVER_TOKEN")
    monkeypatch.setenv("CODEX_EXEC_SERVER_CONNECTION_TOKEN", local_server.token)
    assert AsyncClient().token == local_server.token
    monkeypatch.delenv("EXEC_SERVER_URL")
    assert AsyncClient().ws_url == "ws://127.0.0.1:8765"
