"""Approvals, the tool facade, preview ports, session tokens, snapshots and forks, hibernation, image pulls."""
from __future__ import annotations

import asyncio
import http.cookiejar
import json
import subprocess
import time
import urllib.request
from typing import Any

import pytest
from conftest import aio, require_gvisor
from server import REPO, Server, free_port
from shapes import assert_shape

from exec_server import (
    TOOL_DEFINITIONS, AsyncClient, AuthError, HibernationAnswer, ImagePull, InvalidArgumentError, NotFoundError,
    RejectedError, chat_completions_tools,
)


@aio
async def test_approvals_are_decided_by_the_callback(server: Server) -> None:
    asked: list[tuple[str, list[str]]] = []

    async def decide(request: dict[str, Any]) -> str:
        asked.append((request["purpose"], request["argv"]))
        return "approved" if request["argv"][0] == "echo" else "denied"

    client = AsyncClient(server.url, server.token)
    async with client.session(approval_policy="untrusted", on_approval=decide) as s:
        assert (await s.run(["echo", "allowed"])).stdout == "allowed\n"
        with pytest.raises(RejectedError) as err:
            await s.run(["rm", "-rf", "build"])
        assert err.value.code == "EXEC_ERR_REJECTED"
        assert asked == [("initial", ["echo", "allowed"]), ("initial", ["rm", "-rf", "build"])]


@aio
async def test_tool_calls_route_in_one_line(server: Server) -> None:
    assert [t["name"] for t in TOOL_DEFINITIONS] == ["exec_command", "write_stdin"]
    assert "cmd" in TOOL_DEFINITIONS[0]["parameters"]["required"]
    assert chat_completions_tools()[1]["function"]["name"] == "write_stdin"
    async with AsyncClient(server.url, server.token) as client, client.session() as s:
        out = await s.route_tool_call({"type": "function_call", "call_id": "c1", "name": "exec_command",
                                       "arguments": json.dumps({"cmd": "echo routed"})})
        assert out is not None and out["type"] == "function_call_output" and out["call_id"] == "c1"
        assert "routed" in out["output"]
        started = await s.exec_command("read x; echo \"got $x\"", tty=True, yield_time_ms=250)
        assert "session_id" in started
        chat_call = {"id": "c2", "function": {"name": "write_stdin",
                                              "arguments": {"session_id": started["session_id"], "chars": "it\n"}}}
        answer = await s.route_tool_call(chat_call)
        assert answer is not None and "got it" in answer["output"]
        assert await s.route_tool_call({"type": "message", "content": "hello"}) is None


@aio
async def test_http_only_approval_queue(local_server: Server) -> None:
    client = AsyncClient(local_server.url, local_server.token)
    tools = await client.create_http_session(approval_policy="untrusted")
    try:
        pending = await tools.exec_command("echo approved over http")
        assert pending["status"] == "approval_required"
        listed = await tools.list_approvals()
        assert [a["id"] for a in listed] == [pending["approval_id"]]
        done = await tools.decide_approval(pending["approval_id"], "approved")
        assert done["exit_code"] == 0 and "approved over http" in done["output"]
        call = {"type": "function_call", "call_id": "c9", "name": "exec_command",
                "arguments": json.dumps({"cmd": "echo second"})}
        asked = await tools.route_tool_call(call)
        assert asked is not None and asked["status"] == "approval_required" and asked["call_id"] == "c9"
        denied = await tools.decide_approval(asked["approval_id"], "denied")
        assert denied["type"] == "function_call_output" and denied["call_id"] == "c9"
    finally:
        await client.delete_session(tools.id)


def _get(url: str, token: str | None = None) -> str:
    """GET with a bearer token, or a browser's way (the signed path sets a cookie and redirects)."""
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))
    with opener.open(req, timeout=5) as res:
        return str(res.read().decode())


@aio
async def test_preview_url(server: Server) -> None:
    async with AsyncClient(server.url, server.token) as client, client.session(preview_ports=True) as s:
        root = (await s.info())["workdir"]
        await s.mkdir(f"{root}/www")
        await s.write_file(f"{root}/www/index.html", "<h1>preview works</h1>\n")
        port = 18_000 + free_port() % 1000
        await s.spawn(["busybox", "httpd", "-f", "-p", f"127.0.0.1:{port}", "-h", f"{root}/www"], check=False)
        preview = await s.expose_port(port)
        assert preview["url"].endswith(f"/ports/{port}/")
        page = ""
        for _ in range(100):
            try:
                page = await asyncio.to_thread(_get, preview["url"], server.token)
                break
            except OSError:
                await asyncio.sleep(0.1)
        assert page == "<h1>preview works</h1>\n"
        assert await asyncio.to_thread(_get, preview["signed_url"]) == page
        assert [p["port"] for p in await s.list_ports()] == [port]
        assert await s.close_port(port)


@aio
async def test_session_tokens(local_server: Server) -> None:
    server = local_server
    async with AsyncClient(server.url, server.token) as client, client.session() as s:
        with pytest.raises(InvalidArgumentError):
            await s.create_token(access="admin")
        read = await s.create_token(access="read", ttl_seconds=60)
        assert read["access"] == "read" and read["tokenId"] and read["token"] != server.token
        async with AsyncClient(server.url, read["token"]) as viewer:
            assert (await viewer.get_session(s.id))["sessionId"] == s.id
            with pytest.raises(AuthError, match="read token"):
                await viewer.http_session(s.id).exec_command("true")
            with pytest.raises(AuthError, match="needs a tenant token"):
                await viewer.list_sessions()
            await s.revoke_token(read["tokenId"])
            with pytest.raises(AuthError, match="revoked"):
                await viewer.get_session(s.id)
        full = await s.create_token()
        async with AsyncClient(server.url, full["token"]) as agent:
            done = await agent.http_session(s.id).exec_command("echo via-token")
        assert "via-token" in done["output"]


@aio
async def test_a_read_token_connects_and_its_refusals_keep_their_codes(local_server: Server) -> None:
    server = local_server
    async with AsyncClient(server.url, server.token) as client, client.session() as s:
        read = await s.create_token(access="read", ttl_seconds=60)
        viewer = await AsyncClient.connect(server.url, read["token"])  # a session token is accepted
        watched = await viewer.resume_session(s.id)
        with pytest.raises(AuthError) as refused:
            await watched.delete()
        assert refused.value.code == "EXEC_ERR_TOKEN_READ_ONLY"
        assert watched.connected  # a refused delete leaves the connection
        assert (await watched.info())["sessionId"] == s.id
        await s.revoke_token(read["tokenId"])
        with pytest.raises(AuthError) as revoked:  # the upgrade's refusal carries the server's code
            await viewer.resume_session(s.id)
        assert (revoked.value.code, revoked.value.status) == ("EXEC_ERR_TOKEN_REVOKED", 401)
        await viewer.close()


@aio
async def test_snapshot_and_fork(docker_server: Server) -> None:
    client = AsyncClient(docker_server.url, docker_server.token)
    async with client.session() as base:
        await base.run("echo prepared > /workspace/state.txt")
        async with await base.fork("py-prepared") as fork:
            assert (await fork.run("cat /workspace/state.txt")).stdout == "prepared\n"
    snaps = [x for x in await client.list_snapshots() if x.get("name") == "py-prepared"]
    assert len(snaps) == 1
    await client.delete_snapshot(snaps[0]["snapshotId"])
    assert all(x["snapshotId"] != snaps[0]["snapshotId"] for x in await client.list_snapshots())


@aio
async def test_a_session_token_manages_its_session_snapshots(docker_server: Server) -> None:
    client = AsyncClient(docker_server.url, docker_server.token)
    async with client.session() as s, client.session() as other:
        theirs = await other.snapshot("py-theirs")
        full = await s.create_token()
        read = await s.create_token(access="read")
        async with AsyncClient(docker_server.url, full["token"]) as agent:
            mine = await agent.resume_session(s.id)
            snap = await mine.snapshot("py-mine")
            assert [x["snapshotId"] for x in await mine.list_snapshots()] == [snap["snapshotId"]]
            with pytest.raises(NotFoundError):
                await mine.delete_snapshot(theirs["snapshotId"])
            async with AsyncClient(docker_server.url, read["token"]) as viewer:
                watched = await viewer.resume_session(s.id)
                assert len(await watched.list_snapshots()) == 1
                with pytest.raises(AuthError) as refused:
                    await watched.delete_snapshot(snap["snapshotId"])
                assert refused.value.code == "EXEC_ERR_TOKEN_READ_ONLY"
            await mine.delete_snapshot(snap["snapshotId"])
            assert await mine.list_snapshots() == []
            await mine.disconnect()
        await client.delete_snapshot(theirs["snapshotId"])


@aio
async def test_fork_many_with_memory(docker_server: Server) -> None:
    require_gvisor()
    client = AsyncClient(docker_server.url, docker_server.token)
    async with client.session(runtime="runsc") as base:
        shell = await base.spawn("sh", stdin="pipe", check=False)
        await shell.write_stdin("x=kept\n")
        forks = await base.fork_many(2, memory=True)
        try:
            assert len({(await f.info())["containerId"] for f in forks}) == 2
            for i, f in enumerate(forks):
                p = await f.attach(shell.process_id)
                await p.write_stdin(f"echo $x-{i}\n")
                await p.close_stdin()
                assert f"kept-{i}" in (await p.wait(30)).stdout
        finally:
            for f in forks:
                await f.delete()
            for snap in await client.list_snapshots():
                if snap.get("sessionId") == base.id:
                    await client.delete_snapshot(snap["snapshotId"])


@aio
async def test_hibernate_and_wake(docker_server: Server) -> None:
    require_gvisor()
    client = AsyncClient(docker_server.url, docker_server.token)
    async with client.session(runtime="runsc") as s:
        assert (await s.info())["runtime"] == "runsc"
        counter = await s.spawn("i=0; while true; do i=$((i+1)); echo $i; sleep 0.2; done", collect=False)
        await asyncio.sleep(0.5)
        hibernated = await s.hibernate()
        assert hibernated["hibernation"] == "hibernated"
        assert_shape(hibernated, HibernationAnswer)
        assert (await s.info())["hibernation"] == "hibernated"
        woken = await s.wake()
        assert woken["hibernation"] == "awake"
        assert_shape(woken, HibernationAnswer)
        seen: list[int] = []
        async for chunk in counter:
            seen += [int(n) for n in chunk.text.split()]
            if len(seen) > 5:
                break
        assert seen == list(range(seen[0], seen[0] + len(seen)))  # it went on where it was
        await counter.kill()


@aio
async def test_image_pull_progress(docker_server: Server) -> None:
    registry = subprocess.Popen(["node", "--import", "tsx", "test/support/registry-serve.ts"], cwd=REPO,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert registry.stdout is not None and registry.stdin is not None
    host = (await asyncio.to_thread(registry.stdout.readline)).strip()
    image = f"{host}/exec-test/py:t{int(time.time() * 1000)}"
    heard: list[dict[str, Any]] = []
    client = AsyncClient(docker_server.url, docker_server.token)
    try:
        async with client.session(image=image, on_image_pull=heard.append) as s:
            assert (await s.run("echo pulled")).stdout == "pulled\n"
        assert heard[0]["phase"] == "pulling" and heard[-1]["phase"] == "pulled"
        assert heard[-1]["currentBytes"] >= 2_000_000
        figures = [p["currentBytes"] for p in heard]
        assert figures == sorted(figures)
        missing: list[dict[str, Any]] = []
        with pytest.raises(NotFoundError) as err:
            await client.create_session(image=f"{host}/exec-test/absent:x", on_image_pull=missing.append)
        assert "manifest unknown" in err.value.message and missing[-1]["phase"] == "failed"
        assert_shape(heard + missing, list[ImagePull])
    finally:
        registry.stdin.close()
        registry.wait(30)
        subprocess.run(["docker", "rmi", "-f", image], capture_output=True)
