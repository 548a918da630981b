"""The generated wire types (``_generated.py``, from src/protocol/) against what a real server
answers: each answer has exactly the keys its ``TypedDict`` declares, required ones all there,
and values of the declared types."""
from __future__ import annotations

import asyncio
import json

from conftest import aio
from server import Server, free_port
from shapes import assert_shape, problems

from exec_server import (
    ApprovalRequest, ApprovalRequired, AsyncClient, DirectoryEntry, ExecToolResult, ExposedPreview, FileMetadata,
    FunctionCallOutput, ImagePull, InitializeResult, PendingApproval, PreviewAnswer, ProcessSummary, SessionInfo,
    SessionToken, SnapshotInfo, is_approval_required,
)
from exec_server._generated import UploadResult


def test_the_check_finds_a_missing_an_extra_and_a_mistyped_key() -> None:
    entry = {"fileName": "a", "isDirectory": False, "isFile": True}
    assert problems(entry, DirectoryEntry) == []
    assert problems({k: v for k, v in entry.items() if k != "isFile"}, DirectoryEntry) == [
        "answer: DirectoryEntry requires 'isFile', the answer has none"]
    assert problems({**entry, "mode": 420}, DirectoryEntry) == ["answer: 'mode' is not a key of DirectoryEntry"]
    assert problems({**entry, "isFile": 1}, DirectoryEntry) == ["answer.isFile: 1 is not a bool"]
    token = {"token": "t", "tokenId": "i", "access": "admin", "expiresAt": "x"}
    assert problems(token, SessionToken)[0].startswith("answer.access: 'admin' is not one of ('full', 'read')")
    assert DirectoryEntry.__required_keys__ == {"fileName", "isDirectory", "isFile"}
    assert "host" in PreviewAnswer.__optional_keys__ and "usage" in SessionInfo.__optional_keys__


@aio
async def test_session_files_processes_ports_and_tokens(server: Server) -> None:
    async with AsyncClient(server.url, server.token) as client, client.session(preview_ports=True) as s:
        assert_shape(s.init_result, InitializeResult)
        info = await s.info()
        assert_shape(info, SessionInfo)
        root = info["workdir"]
        await s.mkdir(f"{root}/www")
        await s.write_file(f"{root}/www/index.html", "<h1>typed</h1>\n")
        assert_shape(await s.stat(f"{root}/www/index.html"), FileMetadata)
        assert_shape(await s.stat(f"{root}/www"), FileMetadata)
        listed = await s.list_dir(f"{root}/www")
        assert [e["fileName"] for e in listed] == ["index.html"]
        assert_shape(listed, list[DirectoryEntry])
        assert_shape(await s.http.upload(s.id, f"{root}/up.bin", b"12345"), UploadResult)

        port = 18_000 + free_port() % 1000
        await s.spawn(["busybox", "httpd", "-f", "-p", f"127.0.0.1:{port}", "-h", f"{root}/www"], check=False)
        await s.run("true")
        processes = await s.list_processes()
        assert len(processes) == 2
        assert_shape(processes, list[ProcessSummary])
        assert_shape(await s.expose_port(port, ttl_seconds=60), ExposedPreview)
        ports = await s.list_ports()
        assert [p["port"] for p in ports] == [port]
        assert_shape(ports, list[PreviewAnswer])
        assert_shape(await s.info(), SessionInfo)  # now with a port and processes

        assert_shape(await s.create_token(access="read", ttl_seconds=60), SessionToken)
        assert_shape(await client.get_session(s.id), SessionInfo)
        assert_shape(await client.list_sessions(), list[SessionInfo])
        assert_shape(await client.image_pulls(), list[ImagePull])

        done = await s.exec_command("echo typed")
        assert not is_approval_required(done) and "exit_code" in done
        assert_shape(done, ExecToolResult)
        running = await s.exec_command("read x; echo \"got $x\"", tty=True, yield_time_ms=250)
        assert "session_id" in running and "exit_code" not in running
        assert_shape(running, ExecToolResult)
        out = await s.route_tool_call({"type": "function_call", "call_id": "c1", "name": "exec_command",
                                       "arguments": json.dumps({"cmd": "echo routed"})})
        assert out is not None and not is_approval_required(out)
        assert_shape(out, FunctionCallOutput)


@aio
async def test_approvals_batches_and_egress(local_server: Server) -> None:
    asked: list[ApprovalRequest] = []

    def decide(request: ApprovalRequest) -> str:
        asked.append(request)
        return "approved"

    client = AsyncClient(local_server.url, local_server.token)
    async with client.session(approval_policy="untrusted", on_approval=decide,
                              allow_network=["example.com"]) as s:
        await s.run(["echo", "asked"])
        assert len(asked) == 1
        assert_shape(asked[0], ApprovalRequest)
        info = await s.info()
        assert "egress" in info
        assert_shape(info, SessionInfo)

    tools = await client.create_http_session(approval_policy="untrusted")
    try:
        pending = await tools.exec_command("echo approved over http")
        assert is_approval_required(pending)
        assert_shape(pending, ApprovalRequired)
        assert_shape(await tools.list_approvals(), list[PendingApproval])
        assert_shape(await tools.decide_approval(pending["approval_id"], "approved"), ExecToolResult)
        asked_call = await tools.route_tool_call({"type": "function_call", "call_id": "c9", "name": "exec_command",
                                                  "arguments": json.dumps({"cmd": "echo second"})})
        assert is_approval_required(asked_call)
        assert_shape(asked_call, ApprovalRequired)
        assert_shape(await tools.decide_approval(asked_call["approval_id"], "denied"), FunctionCallOutput)
    finally:
        await client.delete_session(tools.id)

    made = await client.create_sessions(2, labels={"batch": "typed"})
    try:
        assert len(made) == 2
        assert_shape(made, list[SessionInfo])
    finally:
        await asyncio.gather(*(client.delete_session(m["sessionId"]) for m in made))


@aio
async def test_snapshots(docker_server: Server) -> None:
    client = AsyncClient(docker_server.url, docker_server.token)
    async with client.session() as s:
        snap = await s.snapshot("py-typed")
        try:
            assert_shape(snap, SnapshotInfo)
            listed = [x for x in await client.list_snapshots() if x["snapshotId"] == snap["snapshotId"]]
            assert len(listed) == 1
            assert_shape(listed, list[SnapshotInfo])
        finally:
            await client.delete_snapshot(snap["snapshotId"])
