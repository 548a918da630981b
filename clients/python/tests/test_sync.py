"""The synchronous API mirrors the async one: the same methods with the same parameters."""
from __future__ import annotations

import inspect
from typing import Any

import pytest
from server import Server

from exec_server import (
    AsyncClient, Client, HttpSession, NotFoundError, Process, RejectedError, Session, SyncHttpSession,
    SyncProcess, SyncSession,
)

TWINS: list[tuple[type, type]] = [
    (AsyncClient, Client), (Session, SyncSession), (Process, SyncProcess), (HttpSession, SyncHttpSession)]


def _public(cls: type) -> dict[str, Any]:
    """Public methods and properties, as the class defines them (not bound, not called)."""
    found = {name: inspect.getattr_static(cls, name) for name in dir(cls) if not name.startswith("_")}
    return {name: attr for name, attr in found.items()
            if inspect.isfunction(attr) or isinstance(attr, (property, classmethod, staticmethod))}


def _parameters(cls: type, name: str) -> list[inspect.Parameter]:
    return list(inspect.signature(getattr(cls, name)).parameters.values())


def test_every_async_method_has_a_sync_twin_with_the_same_parameters() -> None:
    wrong: list[str] = []
    for async_cls, sync_cls in TWINS:
        sync_members = _public(sync_cls)
        for name, attr in _public(async_cls).items():
            where = f"{sync_cls.__name__}.{name}"
            twin = sync_members.get(name)
            if twin is None:
                wrong.append(f"{where} is missing")
            elif isinstance(attr, property) != isinstance(twin, property):
                wrong.append(f"{where}: a property on one side only")
            elif not isinstance(attr, property) and _parameters(async_cls, name) != _parameters(sync_cls, name):
                wrong.append(f"{where}{inspect.signature(getattr(sync_cls, name))} differs from "
                             f"{async_cls.__name__}.{name}{inspect.signature(getattr(async_cls, name))}")
    if _parameters(AsyncClient, "__init__") != _parameters(Client, "__init__"):
        wrong.append("Client() takes other parameters than AsyncClient()")
    assert wrong == []


def test_sync_methods_block_and_answer_sync_objects(local_server: Server) -> None:
    url, token = local_server.url, local_server.token
    with Client.connect(url, token, connect_timeout=10) as client, client.session(labels={"k": "v"}) as s:
        root = s.info()["workdir"]
        s.mkdir(f"{root}/a/b")
        assert s.upload(f"{root}/a/b/f.txt", b"0123456789", chunk_size=3) == 10
        assert s.download(f"{root}/a/b/f.txt", offset=4, chunk_size=2) == b"456789"
        assert s.stat(f"{root}/a/b/f.txt")["isFile"] is True
        s.remove(f"{root}/a", recursive=True)
        with pytest.raises(NotFoundError):
            s.stat(f"{root}/a")
        assert s.request("session/info")["sessionId"] == s.id
        sleeper = s.spawn(["sleep", "30"], check=False)
        assert isinstance(sleeper, SyncProcess) and not sleeper.done and sleeper.result is None
        sleeper.kill("SIGKILL")
        assert sleeper.wait().terminal == "signaled" and sleeper.dropped_bytes == 0
        assert sleeper.result is not None and sleeper.result.signal == "SIGKILL"
        s.spawn(["sleep", "30"], check=False)
        assert s.terminate_all() == 1
        assert s.list_ports() == []
        s.disconnect()
        assert not s.connected
        s.reconnect()
        assert s.connected and s.run("echo back").stdout == "back\n"
        assert isinstance(client.image_pulls(), list)


def test_sync_http_sessions_and_batches(local_server: Server) -> None:
    with Client(local_server.url, local_server.token) as client:
        infos = client.create_sessions(2, approval_policy="never", labels={"batch": "sync"})
        assert [client.get_session(i["sessionId"])["approvalPolicy"] for i in infos] == ["never", "never"]
        for i in infos:
            client.delete_session(i["sessionId"])
        tools = client.create_http_session(approval_policy="untrusted")
        try:
            assert isinstance(tools, SyncHttpSession)
            pending = tools.exec_command("echo over http")
            assert pending["status"] == "approval_required"
            again = client.http_session(tools.id)
            assert [a["id"] for a in again.list_approvals()] == [pending["approval_id"]]
            done = again.decide_approval(pending["approval_id"], "approved")
            assert done["exit_code"] == 0 and "over http" in done["output"]
        finally:
            client.delete_session(tools.id)
        with client.session(approval_policy="never") as s, pytest.raises(RejectedError):
            s.run(["true"], sandbox_permissions="require-escalated")
