"""Sessions: create with a spec, list, resume, delete; resume after a cut connection."""
from __future__ import annotations

import asyncio

import pytest
from conftest import aio
from server import Server

from exec_server import (
    AsyncClient,
    ConnectionClosedError,
    ExecServerError,
    InvalidArgumentError,
    NotFoundError,
    UnsupportedError,
)


@aio
async def test_create_list_resume_delete(server: Server) -> None:
    client = AsyncClient(server.url, server.token)
    first = await client.create_session(env={"GREETING": "hi"}, labels={"task": "docs"},
                                        limits={"memory_mb": 512, "pids": 256})
    await first.spawn("echo \"$GREETING from the first connection\"; sleep 0.5; echo later",
                      process_id="greeter")
    await first.disconnect()

    again = await client.resume_session(first.id)
    assert again.id == first.id
    replay = await again.attach("greeter")
    assert (await replay.wait()).stdout == "hi from the first connection\nlater\n"
    mine = [x for x in await client.list_sessions() if x["sessionId"] == again.id]
    assert len(mine) == 1 and mine[0]["labels"] == {"task": "docs"} and mine[0]["status"] == "alive"
    assert (await client.get_session(again.id))["sessionId"] == again.id
    await again.delete()
    assert all(x["sessionId"] != again.id for x in await client.list_sessions())
    with pytest.raises(NotFoundError) as err:
        await client.get_session(again.id)
    assert err.value.code == "EXEC_ERR_SESSION_NOT_FOUND" and err.value.status == 404
    with pytest.raises(NotFoundError):
        await client.resume_session(again.id)


@aio
async def test_resume_after_the_connection_is_cut_mid_stream(server: Server) -> None:
    async with AsyncClient(server.url, server.token) as client, client.session() as s:
        lines = 3000
        proc = await s.spawn(f"i=0; while [ $i -lt {lines} ]; do i=$((i+1)); echo \"line $i\"; "
                             "[ $((i % 100)) -eq 0 ] && sleep 0.05; done", collect=True)
        got: list[str] = []
        cut = 0
        async for chunk in proc:
            got.append(chunk.text)
            text = "".join(got)
            if cut < 3 and text.count("\n") > (cut + 1) * 600:
                cut += 1
                s._cut_connection()  # as a network failure: no close handshake
        result = await proc.wait()
        expected = "".join(f"line {i}\n" for i in range(1, lines + 1))
        assert "".join(got) == expected
        assert result.stdout == expected
        assert cut == 3 and s.disconnects == 3 and s.connected
        assert (await s.run("echo still here")).stdout == "still here\n"


@aio
async def test_requests_wait_for_a_resume(local_server: Server) -> None:
    async with AsyncClient(local_server.url, local_server.token) as client, client.session() as s:
        s._cut_connection()
        await asyncio.sleep(0)  # the reader sees the cut
        for _ in range(50):
            if s._reconnecting is not None or s.connected:
                break
            await asyncio.sleep(0.01)
        assert (await s.run("echo after")).stdout == "after\n"


@aio
async def test_an_evicted_connection_fails_its_waits(local_server: Server) -> None:
    client = AsyncClient(local_server.url, local_server.token)
    first = await client.create_session()
    sleeper = await first.spawn(["sleep", "30"], process_id="sleeper")
    second = await client.resume_session(first.id)  # the server closes the first with 4000
    with pytest.raises(ConnectionClosedError) as err:
        await sleeper.wait(timeout=10)
    assert err.value.close_code == 4000 and not err.value.retryable
    assert not first.connected
    again = await second.attach("sleeper")
    await again.kill()
    assert (await again.wait()).terminal == "terminated"
    await second.delete()


@aio
async def test_batch_create_all_or_none(server: Server) -> None:
    client = AsyncClient(server.url, server.token)
    infos = await client.create_sessions(3, labels={"run": "best-of-3"})
    assert len({i["sessionId"] for i in infos}) == 3
    listed = {x["sessionId"] for x in await client.list_sessions()}
    assert all(i["sessionId"] in listed and i["labels"] == {"run": "best-of-3"} for i in infos)
    s = await client.resume_session(infos[0]["sessionId"])
    assert (await s.run("echo one")).stdout == "one\n"
    await s.disconnect()
    for i in infos:
        await client.delete_session(i["sessionId"])
    from exec_server import InvalidArgumentError
    with pytest.raises(InvalidArgumentError):
        await client.create_sessions(0)


@aio
async def test_allow_network_reaches_the_spec(local_server: Server) -> None:
    async with AsyncClient(local_server.url, local_server.token) as client:
        with pytest.raises(InvalidArgumentError):
            await client.create_session(allow_network="example.com")  # type: ignore[arg-type]
        with pytest.raises(ExecServerError) as bad:
            await client.create_session(allow_network=["10.0.0.0/40"])
        assert bad.value.code == "EXEC_ERR_INVALID_PARAMS" and "network.allow[0]" in str(bad.value)
        # Unsandboxed commands on the local backend would have the host's network: refused.
        with pytest.raises(UnsupportedError):
            await client.create_session(allow_network=["example.com:443"], sandbox={"type": "danger-full-access"})
        async with client.session(allow_network=["example.com:443"]) as s:
            assert (await s.run("echo $HTTPS_PROXY")).stdout == "http://127.0.0.1:3128\n"


@aio
async def test_reconnect_after_disconnect_resumes_drops_again(local_server: Server) -> None:
    async with AsyncClient(local_server.url, local_server.token) as client, client.session() as s:
        await s.disconnect()
        await s.reconnect()
        proc = await s.spawn("read go; echo after-drop", stdin="pipe")
        s._cut_connection()
        while s.disconnects < 2:  # the reader saw the cut (disconnect() was the first)
            await asyncio.sleep(0.01)
        await proc.write_stdin("\n")  # waits for the automatic resume
        assert (await proc.wait(timeout=20)).stdout == "after-drop\n"
        assert s.connected


@aio
async def test_an_iteration_started_after_a_failure_raises_it(local_server: Server) -> None:
    client = AsyncClient(local_server.url, local_server.token)
    first = await client.create_session()
    sleeper = await first.spawn(["sleep", "30"], process_id="sleeper")
    second = await client.resume_session(first.id)  # the server closes the first with 4000
    with pytest.raises(ConnectionClosedError):
        await sleeper.wait(timeout=10)

    async def late() -> list[str]:
        return [c.text async for c in sleeper]
    with pytest.raises(ConnectionClosedError) as err:
        await asyncio.wait_for(late(), 5)
    assert err.value.close_code == 4000
    await second.delete()
