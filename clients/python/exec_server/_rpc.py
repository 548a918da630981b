"""A WebSocket JSON-RPC connection: request ids, notifications, server requests, binary output.

The reader task drains the socket as fast as frames come and hands each notification on
synchronously, so the server never sees this client as slow while a consumer of the output
takes its time (chunks wait in the process handle instead; see process.py).
"""
from __future__ import annotations

import asyncio
import itertools
import json
import logging
import struct
from collections.abc import Awaitable, Callable
from typing import Any

from websockets.datastructures import Headers
from websockets.exceptions import ConnectionClosed, InvalidStatusCode, WebSocketException
from websockets.legacy.client import WebSocketClientProtocol, connect

from .errors import ConnectionClosedError, ExecServerError, error_of, error_of_answer

NotificationHandler = Callable[[str, dict[str, Any]], None]
ServerRequestHandler = Callable[[str, dict[str, Any]], Awaitable[Any]]
CloseHandler = Callable[[int, str], None]

# docs/protocol.md, "Binary output frames": u8 kind, u8 stream, u16 id length, u64 seq (LE).
_BINARY_HEADER = struct.Struct("<BBHQ")
_STREAMS = ("stdout", "stderr", "pty")
MAX_MESSAGE_BYTES = 256 * 1024 * 1024
_REFUSAL_MAX_BYTES = 64 * 1024
log = logging.getLogger("exec_server")


def decode_binary_output(frame: bytes) -> dict[str, Any] | None:
    """The params of a binary ``process/output`` frame (``data`` as bytes), or None if it is not one."""
    if len(frame) < _BINARY_HEADER.size:
        return None
    kind, stream, id_len, seq = _BINARY_HEADER.unpack_from(frame, 0)
    id_end = _BINARY_HEADER.size + id_len
    if kind != 1 or stream >= len(_STREAMS) or id_end > len(frame):
        return None
    view = memoryview(frame)
    return {"processId": bytes(view[_BINARY_HEADER.size:id_end]).decode("utf-8"), "seq": seq,
            "stream": _STREAMS[stream], "data": view[id_end:]}


class _Protocol(WebSocketClientProtocol):
    """Reads the body of a refused upgrade: it carries the server's stable code (a revoked
    token, say), which the status alone does not tell."""

    async def read_http_response(self) -> tuple[int, Headers]:
        status, headers = await super().read_http_response()
        if status >= 400:
            raise error_of_answer(status, await self._body(headers), f"upgrade refused: HTTP {status}")
        return status, headers

    async def _body(self, headers: Headers) -> bytes:
        try:
            length = int(headers.get("Content-Length", "0"))
            if not 0 < length <= _REFUSAL_MAX_BYTES:
                return b""
            return await asyncio.wait_for(self.reader.readexactly(length), 5)
        except (ValueError, asyncio.IncompleteReadError, TimeoutError):
            return b""


class RpcConnection:
    """One socket; ``request`` returns the result or raises the server's error as an exception."""

    def __init__(self, ws: WebSocketClientProtocol,
                 on_server_request: ServerRequestHandler | None) -> None:
        self._ws = ws
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._on_server_request = on_server_request
        self.notification_handlers: list[NotificationHandler] = []
        self.close_handlers: list[CloseHandler] = []
        self.close_code: int | None = None
        self.binary_frames = 0  # process/output frames received as bytes (docs/protocol.md)
        self._tasks: set[asyncio.Task[None]] = set()
        self._reader = asyncio.create_task(self._read())

    @classmethod
    async def open(cls, url: str, token: str | None,
                   on_server_request: ServerRequestHandler | None = None,
                   open_timeout: float = 30.0) -> RpcConnection:
        """The open connection; a refused upgrade raises the server's error (``AuthError``...),
        any other failure (refused, reset, no answer in ``open_timeout``) ``ConnectionClosedError``."""
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        # websockets' stubs type the factory as taking an argument; it is called with keywords.
        protocol: Any = _Protocol
        try:
            ws = await connect(url, extra_headers=headers, max_size=MAX_MESSAGE_BYTES,
                               compression=None, ping_interval=None, max_queue=None,
                               open_timeout=open_timeout, close_timeout=1, read_limit=4 * 1024 * 1024,
                               write_limit=4 * 1024 * 1024, create_protocol=protocol)
        except InvalidStatusCode as err:
            raise error_of(None, f"upgrade refused: HTTP {err.status_code}",
                           status=err.status_code) from err
        except (OSError, WebSocketException) as err:  # TimeoutError is an OSError
            raise ConnectionClosedError(f"cannot connect to {url}: {err!r}") from err
        # 1 s above for a failed handshake's close (a silent peer answers none); 5 s once open.
        ws.close_timeout = 5
        return cls(ws, on_server_request)

    @property
    def open_(self) -> bool:
        return self.close_code is None and self._ws.open

    async def _read(self) -> None:
        code, reason = 1006, "connection lost"
        try:
            async for message in self._ws:
                try:
                    if isinstance(message, bytes):
                        self.binary_frames += 1
                        params = decode_binary_output(message)
                        if params is not None:
                            self._notify("process/output", params)
                    else:
                        self._dispatch_text(message)
                except Exception:  # a failing callback must not stop the reading
                    log.exception("exec-server: a message handler failed")
        except ConnectionClosed:
            pass
        finally:
            if self._ws.close_code is not None:
                code, reason = self._ws.close_code, self._ws.close_reason or ""
            self.close_code = code
            for fut in self._pending.values():
                if not fut.done():
                    fut.set_exception(ConnectionClosedError(f"connection closed ({code} {reason})", code))
            self._pending.clear()
            for handler in list(self.close_handlers):
                handler(code, reason)

    def _dispatch_text(self, text: str) -> None:
        try:
            msg = json.loads(text)
        except ValueError:
            return
        for m in msg if isinstance(msg, list) else [msg]:
            if isinstance(m, dict):
                self._dispatch(m)

    def _notify(self, method: str, params: dict[str, Any]) -> None:
        for handler in list(self.notification_handlers):
            handler(method, params)

    def _dispatch(self, m: dict[str, Any]) -> None:
        msg_id = m.get("id")
        method = m.get("method")
        if isinstance(method, str):
            params = m.get("params") or {}
            if msg_id is None:
                self._notify(method, params)
            else:
                task = asyncio.create_task(self._answer(msg_id, method, params))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
            return
        if not isinstance(msg_id, int):
            return
        fut = self._pending.pop(msg_id, None)
        if fut is None or fut.done():
            return
        error = m.get("error")
        if isinstance(error, dict):
            raw = error.get("data")
            data: dict[str, Any] = raw if isinstance(raw, dict) else {}
            code = data.get("code") if isinstance(data.get("code"), str) else None
            fut.set_exception(error_of(code, str(error.get("message", "error")),
                                       rpc_code=error.get("code"), data=data))
        else:
            fut.set_result(m.get("result"))

    async def _answer(self, msg_id: Any, method: str, params: dict[str, Any]) -> None:
        reply: dict[str, Any]
        try:
            if self._on_server_request is None:
                raise ExecServerError(f"no handler for {method}")
            reply = {"id": msg_id, "result": await self._on_server_request(method, params)}
        except Exception as err:  # any failure answers an error (the server counts it as denied)
            reply = {"id": msg_id, "error": {"code": -32603, "message": str(err)}}
        try:
            await self._ws.send(json.dumps(reply))
        except ConnectionClosed:
            pass

    async def request(self, method: str, params: dict[str, Any] | None = None) -> Any:
        if not self.open_:
            raise ConnectionClosedError("connection is not open", self.close_code)
        msg_id = next(self._ids)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[msg_id] = fut
        msg: dict[str, Any] = {"id": msg_id, "method": method}
        if params is not None:
            msg["params"] = params
        try:
            await self._ws.send(json.dumps(msg))
        except ConnectionClosed as err:
            self._pending.pop(msg_id, None)
            raise ConnectionClosedError(f"connection closed ({err.code})", err.code) from err
        return await fut

    async def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        await self._ws.send(json.dumps({"method": method, "params": params or {}}))

    async def close(self) -> None:
        """Closes the socket (at most 5 s for the server's half of the handshake)."""
        await self._ws.close()
        await asyncio.gather(self._reader, return_exceptions=True)

    def abort(self) -> None:
        """Cuts the connection without a close handshake (as a network failure would)."""
        if self._ws.transport is not None:
            self._ws.transport.abort()
