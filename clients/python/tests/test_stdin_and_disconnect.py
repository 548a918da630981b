"""Stdin is never dropped silently; a disconnected handle stops listening, attach listens again."""
from __future__ import annotations

import asyncio
from typing import Any

import pytest
from conftest import aio
from server import Server

from exec_server import (
    AsyncClient, Client, ConflictError, ConnectionClosedError, HandleDisconnectedError, NotFoundError, OutputChunk,
    Process, StdinClosedError,
)


@aio
async def test_writing_to_a_closed_stdin_raises(server: Server) -> None:
    async with AsyncClient(server.url, server.token) as client, client.session() as s:
        cat = await s.spawn(["cat"], stdin="pipe")
        await cat.write_stdin("kept\n")
        await cat.close_stdin()
        with pytest.raises(StdinClosedError) as closed:
            await cat.write_stdin("lost\n")
        assert (closed.value.code, closed.value.process_id) == ("EXEC_ERR_STDIN_CLOSED", cat.process_id)
        assert isinstance(closed.value, ConflictError) and not closed.value.retryable
        assert (await cat.wait()).stdout == "kept\n"
        with pytest.raises(StdinClosedError):  # after the end
            await cat.write_stdin("late\n")
        sleeper = await s.spawn(["sleep", "30"], check=False)  # started without stdin="pipe"
        with pytest.raises(StdinClosedError):
            await sleeper.write_stdin("nobody reads this\n")
        await sleeper.kill()


@aio
async def test_writing_to_an_unknown_or_starting_process_raises(server: Server) -> None:
    asked, decided = asyncio.Event(), asyncio.Event()

    async def decide(request: dict[str, Any]) -> str:
        asked.set()
        await decided.wait()
        return "approved"

    async with AsyncClient(server.url, server.token) as client, \
            client.session(approval_policy="untrusted", on_approval=decide) as s:
        with pytest.raises(NotFoundError) as unknown:
            await Process("no-such-process", (), s.request).write_stdin("x")
        assert unknown.value.code == "EXEC_ERR_PROCESS_NOT_FOUND" and unknown.value.rpc_code == -32600
        spawn = asyncio.create_task(s.spawn(["cat"], stdin="pipe", process_id="gated"))
        await asyncio.wait_for(asked.wait(), 30)
        with pytest.raises(ConflictError) as starting:  # still waiting for its approval
            await Process("gated", (), s.request).write_stdin("too early\n")
        assert starting.value.code == "EXEC_ERR_PROCESS_STARTING" and starting.value.retryable
        decided.set()
        cat = await spawn
        await cat.write_stdin("approved\n")
        await cat.close_stdin()
        assert (await cat.wait()).stdout == "approved\n"


@aio
async def test_input_given_to_a_command_that_ended_without_it_is_no_error(server: Server,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    async with AsyncClient(server.url, server.token) as client, client.session() as s:
        request = s.request
        answers: list[str] = []

        async def write_after_the_end(method: str, params: dict[str, Any] | None = None) -> Any:
            """Holds the write until the process has ended: its stdin is closed for sure."""
            if method == "process/write":
                assert params is not None
                while any(p["processId"] == params["processId"] and p["status"] in ("starting", "running")
                          for p in await s.list_processes()):
                    await asyncio.sleep(0.02)
            answer = await request(method, params)
            if method == "process/write":
                answers.append(answer["status"])
            return answer
        monkeypatch.setattr(s, "request", write_after_the_end)
        result = await s.run(["true"], stdin="never read\n")
        assert (result.exit_code, answers) == (0, ["stdinClosed"])


@aio
async def test_a_disconnected_handle_stops_listening_and_attach_listens_again(server: Server) -> None:
    async with AsyncClient(server.url, server.token) as client, client.session() as s:
        job = await s.spawn('echo started; read go; echo "finished $go"', stdin="pipe")
        with pytest.raises(TimeoutError):
            await job.wait(timeout=0.2)
        chunks = job.output()
        assert (await anext(chunks)).text == "started\n"

        async def next_chunk() -> OutputChunk:
            return await anext(chunks)
        waiting, reading = asyncio.create_task(job.wait()), asyncio.create_task(next_chunk())
        await asyncio.sleep(0.05)
        job.disconnect()
        seen = job.last_seq
        again = await s.attach(job.process_id, after_seq=seen)  # right away: a handle of its own
        assert again is not job
        with pytest.raises(HandleDisconnectedError) as detached:
            await waiting
        assert (detached.value.code, detached.value.process_id) == ("EXEC_ERR_HANDLE_DISCONNECTED", job.process_id)
        with pytest.raises(HandleDisconnectedError):
            await reading
        with pytest.raises(HandleDisconnectedError):  # later waits and iterations too
            await job.wait()
        with pytest.raises(HandleDisconnectedError):
            [c async for c in job.output("stderr")]
        await job.write_stdin("now\n")  # the old handle still acts on the process
        assert (await again.wait(timeout=30)).stdout == "finished now\n"
        assert (job.last_seq, job.done, job.result) == (seen, False, None)  # nothing more reached it
        assert (await (await s.attach(job.process_id)).wait()).stdout == "started\nfinished now\n"
        ended = await s.spawn(["echo", "whole"])
        result = await ended.wait()
        ended.disconnect()  # an ended handle keeps its result
        assert await ended.wait() is result and ended.done


@aio
async def test_disconnect_after_the_connection_failed_says_so(local_server: Server) -> None:
    client = AsyncClient(local_server.url, local_server.token)
    s = await client.create_session(auto_reconnect=False)
    sleeper = await s.spawn(["sleep", "30"], check=False)
    s._cut_connection()
    with pytest.raises(ConnectionClosedError):
        await sleeper.wait(timeout=30)
    sleeper.disconnect()  # the caller's own choice now explains every later wait and iteration
    with pytest.raises(HandleDisconnectedError):
        await sleeper.wait()
    with pytest.raises(HandleDisconnectedError):
        [c async for c in sleeper]
    again = await client.resume_session(s.id)
    await again.delete()


def test_sync_disconnect_and_attach(local_server: Server) -> None:
    with Client(local_server.url, local_server.token) as client, client.session() as s:
        job = s.spawn('read go; echo "finished $go"', stdin="pipe")
        job.disconnect()
        with pytest.raises(HandleDisconnectedError):
            job.wait()
        with pytest.raises(HandleDisconnectedError):
            list(job)
        again = s.attach(job.process_id, after_seq=job.last_seq)
        job.write_stdin("now\n")
        assert again.wait(timeout=30).stdout == "finished now\n"
        with pytest.raises(StdinClosedError):
            again.write_stdin("late\n")
