"""Opening a connection: a bounded wait, and every failure as ``ConnectionClosedError``."""
from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from conftest import aio
from server import free_port
from websockets.legacy.server import WebSocketServerProtocol, serve

from exec_server import AsyncClient, ConnectionClosedError, InvalidArgumentError


@asynccontextmanager
async def silent_tcp() -> AsyncIterator[str]:
    """A server that accepts connections and never answers (no WebSocket upgrade)."""
    held: list[asyncio.StreamWriter] = []
    server = await asyncio.start_server(lambda _r, w: held.append(w), "127.0.0.1", 0)
    try:
        yield f"ws://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        for w in held:
            w.close()
        server.close()
        await server.wait_closed()


@asynccontextmanager
async def silent_websocket() -> AsyncIterator[str]:
    """A WebSocket server that never answers ``initialize``."""
    async def never_answer(ws: WebSocketServerProtocol, path: str = "") -> None:
        await ws.wait_closed()
    server = await serve(never_answer, "127.0.0.1", 0)
    try:
        yield f"ws://127.0.0.1:{next(iter(server.sockets)).getsockname()[1]}"
    finally:
        server.close()
        await server.wait_closed()


@aio
async def test_no_answer_to_the_upgrade_or_initialize_times_out() -> None:
    async with silent_tcp() as no_upgrade, silent_websocket() as no_initialize:
        for url in (no_upgrade, no_initialize):
            started = time.monotonic()
            with pytest.raises(ConnectionClosedError) as err:
                await asyncio.wait_for(AsyncClient(url, "t", connect_timeout=0.5).create_session(), 20)
            assert time.monotonic() - started < 5, url
            assert err.value.retryable and isinstance(err.value.__cause__, TimeoutError), repr(err.value.__cause__)


@aio
async def test_a_refused_connection_is_a_connection_error() -> None:
    client = AsyncClient(f"ws://127.0.0.1:{free_port()}", "t")  # nobody listens there
    with pytest.raises(ConnectionClosedError) as ws:
        await client.create_session()
    assert isinstance(ws.value.__cause__, ConnectionRefusedError) and ws.value.code == "EXEC_ERR_CONNECTION_CLOSED"
    with pytest.raises(ConnectionClosedError) as http:
        await client.list_sessions()
    assert isinstance(http.value.__cause__, ConnectionRefusedError)


def test_connect_timeout_is_checked() -> None:
    for bad in (0, -1, "5", True):
        with pytest.raises(InvalidArgumentError):
            AsyncClient("ws://127.0.0.1:1", "t", connect_timeout=bad)  # type: ignore[arg-type]
