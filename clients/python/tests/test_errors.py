"""Errors: one class per family with the server's codes; bad arguments fail before sending."""
from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest
from conftest import aio
from server import REPO, Server

from exec_server import (AsyncClient, AuthError, ConflictError, InvalidArgumentError, NotFoundError,
                         RejectedError, UnsupportedError, errors)
from exec_server._generated import ERROR_REGISTRY, RETRYABLE


def test_codes_match_the_server_registry() -> None:
    """The generated registry is the one in src/errors.ts, and every code has its family."""
    check = subprocess.run(["node", "--import", "tsx", "scripts/gen-python-sdk.ts", "--check"], cwd=REPO,
                           capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stderr
    dump = subprocess.run(["node", "--import", "tsx", "-e",
                           "import('./src/errors.ts').then(m => console.log(JSON.stringify(m.ERROR_REGISTRY)))"],
                          cwd=REPO, capture_output=True, text=True, timeout=60, check=True)
    server = {k: tuple(v) for k, v in json.loads(dump.stdout).items()}
    assert server == ERROR_REGISTRY
    assert set(errors.FAMILIES) == set(server)
    assert RETRYABLE <= set(server)
    e = errors.error_of("EXEC_ERR_BUSY", "busy")
    assert isinstance(e, errors.LimitError) and e.retryable and e.status == 429
    assert not errors.error_of("EXEC_ERR_REJECTED", "no").retryable


@aio
async def test_bad_arguments_fail_before_anything_is_sent(local_server: Server,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    async with AsyncClient(local_server.url, local_server.token) as client, client.session() as s:
        sent: list[str] = []
        conn = s._conn
        assert conn is not None
        original = conn.request

        async def spy(method: str, params: dict[str, Any] | None = None) -> Any:
            sent.append(method)
            return await original(method, params)
        monkeypatch.setattr(conn, "request", spy)
        bad: list[Any] = [
            s.spawn([]), s.spawn(""), s.spawn(["echo", 3]), s.spawn(b"echo"),  # type: ignore[list-item, arg-type]
            s.spawn(["ls"], cwd="relative"), s.spawn(["ls"], env={"A": 1}),  # type: ignore[dict-item]
            s.spawn(["ls"], size=(0, 24)), s.spawn(["ls"], timeout=-1), s.read_file("notes.txt"),
            s.snapshot("bad name!"), s.snapshot(".hidden"), s.expose_port(70000), s.upload("rel", b"x"),
            client.create_session(limits={"memory_mb": 1}), client.create_session(runtime="-x"),
            client.create_session(labels={"bad label": "x"}),
            client.create_session(approval_policy="sometimes"),  # type: ignore[arg-type]
            s.spawn(["ls"], sandbox_permissions="always"),  # type: ignore[arg-type]
            s.spawn(["ls"], approval="maybe"),  # type: ignore[arg-type]
            client.resume_session(""),
        ]
        for coro in bad:
            with pytest.raises(InvalidArgumentError) as err:
                await coro
            assert err.value.code == "EXEC_ERR_INVALID_PARAMS" and isinstance(err.value, ValueError)
        proc = await s.spawn(["sleep", "5"], check=False)
        for call in (proc.signal("SIGFOO"), proc.resize(0, 0)):  # type: ignore[arg-type]
            with pytest.raises(InvalidArgumentError):
                await call
        await proc.kill()
        assert sent == ["process/start", "process/terminate"]
        with pytest.raises(InvalidArgumentError):
            AsyncClient("localhost:8765")


@aio
async def test_server_errors_are_typed(server: Server) -> None:
    async with AsyncClient(server.url, server.token) as client, client.session() as s:
        with pytest.raises(NotFoundError) as nf:
            await s.attach("no-such-process")
        assert nf.value.code == "EXEC_ERR_PROCESS_NOT_FOUND" and nf.value.rpc_code == -32600
        await s.spawn(["true"], process_id="twice")
        with pytest.raises(ConflictError) as dup:
            await s.spawn(["true"], process_id="twice")
        assert dup.value.code == "EXEC_ERR_PROCESS_EXISTS" and not dup.value.retryable
        with pytest.raises(NotFoundError) as nosession:
            await client.get_session("no-such-session")
        assert (nosession.value.status, nosession.value.code) == (404, "EXEC_ERR_SESSION_NOT_FOUND")
        if server.backend == "docker":
            with pytest.raises(UnsupportedError) as unsupported:
                await s.hibernate()  # runc cannot checkpoint
            assert unsupported.value.code == "EXEC_ERR_UNSUPPORTED"
        else:
            with pytest.raises(RejectedError):
                await s.read_file("/etc/shadow")
    with pytest.raises(AuthError) as auth:
        await AsyncClient.connect(server.url, "wrong-token")
    assert auth.value.code == "EXEC_ERR_UNAUTHORIZED" and auth.value.status == 401
    with pytest.raises(AuthError):
        await AsyncClient(server.url, "wrong-token").create_session()
