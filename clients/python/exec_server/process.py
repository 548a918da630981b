"""A running (or ended) process: ordered output, per-stream UTF-8, stdin, resize, signals.

Events are applied by ``seq``: after a resume, the gap read with ``process/read`` and the live
notifications never deliver a byte twice or skip one; what the server no longer retained is
counted in ``dropped_bytes``. Each stream has its own incremental UTF-8 decoder (a character
split across chunks is decoded whole), flushed when the process closes or output was lost;
``chunk.data`` keeps the raw bytes.
"""
from __future__ import annotations

import asyncio
import base64
import codecs
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

from ._generated import ERROR_REGISTRY
from ._validate import check_signal, check_size
from .errors import CommandExitError, HandleDisconnectedError, StdinClosedError, error_of
from .results import ExecResult, OutputChunk, StreamName, Terminal, terminal_of

Request = Callable[[str, dict[str, Any]], Awaitable[Any]]
SignalName = Literal["SIGINT", "SIGTERM", "SIGKILL", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "interrupt"]
"""The signals a client may send (``SIGNAL_NAMES``, src/protocol/signals.ts) and ``interrupt``."""
_STREAMS: tuple[StreamName, ...] = ("stdout", "stderr", "pty")


@dataclass
class _Exit:
    exit_code: int
    terminal: Terminal
    signal: str | None
    sandbox_denied: bool


_END = object()


def _held_size(chunk: OutputChunk) -> int:
    """The memory a kept chunk holds: its bytes and its decoded text (up to 4 bytes a character)."""
    return sys.getsizeof(chunk.data) + sys.getsizeof(chunk.text)


class Process:
    """Handle returned by ``Session.spawn``. ``async for chunk in proc`` yields every chunk."""

    def __init__(self, process_id: str, argv: tuple[str, ...], request: Request, *,
                 check: bool = True, collect: bool = True, after_seq: int = 0,
                 backlog_bytes: int = 64 * 1024 * 1024,
                 release: Callable[[Process], None] | None = None) -> None:
        """``release``: tells the session to stop routing this process's events here (``disconnect``)."""
        self.process_id = process_id
        self.argv = argv
        self._request = request
        self._check = check
        self._collect = collect
        self.last_seq = after_seq
        self._decoders = {s: codecs.getincrementaldecoder("utf-8")("replace") for s in _STREAMS}
        self._text: dict[StreamName, list[str]] = {s: [] for s in _STREAMS}
        self._bytes: dict[StreamName, list[bytes]] = {s: [] for s in _STREAMS}
        self._queues: list[tuple[asyncio.Queue[Any], StreamName | None]] = []
        # Output of each stream before its first iteration (a fast command can print before
        # spawn returns), up to backlog_bytes of memory in all, the oldest dropped first.
        self._backlog: list[OutputChunk] = []
        self._unclaimed: set[StreamName] = set(_STREAMS) if backlog_bytes > 0 else set()
        self._backlog_bytes = 0
        self._backlog_max = backlog_bytes
        self._received_bytes = 0  # output bytes applied, plus those counted dropped
        self._dropped_bytes = 0
        self._exit: _Exit | None = None
        self._result: ExecResult | None = None
        self._error: Exception | None = None
        self._done: asyncio.Future[ExecResult] = asyncio.get_running_loop().create_future()
        self._held: list[tuple[str, dict[str, Any]]] | None = None
        self._started = False
        self._release = release
        self._detached: HandleDisconnectedError | None = None

    @property
    def done(self) -> bool:
        return self._result is not None

    @property
    def result(self) -> ExecResult | None:
        return self._result

    @property
    def dropped_bytes(self) -> int:
        """Output lost so far: what the server no longer retained when a resume caught up."""
        return self._dropped_bytes

    def __aiter__(self) -> AsyncIterator[OutputChunk]:
        return self.output()

    async def output(self, stream: StreamName | None = None) -> AsyncIterator[OutputChunk]:
        """The chunks (of ``stream``, or all) in order, until the process closes.

        The first iteration of each stream starts from that stream's beginning (what arrived
        before it is kept, up to ``backlog_bytes`` of memory for all streams); a later one starts
        when it begins. Raises the failure (``ConnectionClosedError``) once the handle has failed,
        ``HandleDisconnectedError`` once it was disconnected.
        """
        queue: asyncio.Queue[Any] = asyncio.Queue()
        mine = self._unclaimed & ({stream} if stream is not None else set(_STREAMS))
        if mine:
            self._unclaimed -= mine
            kept: list[OutputChunk] = []
            for chunk in self._backlog:
                if chunk.stream in mine:
                    queue.put_nowait(chunk)
                    self._backlog_bytes -= _held_size(chunk)
                else:
                    kept.append(chunk)
            self._backlog = kept
        if self._result is not None:
            queue.put_nowait(_END)
        elif self._error is not None:
            queue.put_nowait(self._error)
        else:
            self._queues.append((queue, stream))
        try:
            while True:
                item = await queue.get()
                if item is _END:
                    return
                if isinstance(item, Exception):
                    raise item
                yield item
        finally:
            self._queues = [q for q in self._queues if q[0] is not queue]

    async def wait(self, timeout: float | None = None, *, check: bool | None = None) -> ExecResult:
        """The result once the process ended and its output closed.

        Raises ``CommandExitError`` on a non-zero exit when ``check`` (the spawn's default),
        ``TimeoutError`` after ``timeout`` seconds (the process keeps running),
        ``HandleDisconnectedError`` after ``disconnect()``.
        """
        if self._detached is not None:
            raise self._detached
        result = await asyncio.wait_for(asyncio.shield(self._done), timeout)
        if (self._check if check is None else check) and result.exit_code != 0:
            raise CommandExitError(result)
        return result

    def disconnect(self) -> None:
        """Stops listening without ending the process.

        No output or exit reaches this handle any more; its waits and iterations, pending and
        later, raise ``HandleDisconnectedError`` (an iteration first yields what it had
        received). ``write_stdin``, ``kill`` and the like still act on the process.
        ``Session.attach(process_id)`` listens to it again, from the start of the retained
        output, or after ``after_seq=handle.last_seq`` (what this handle received). A handle
        whose process already ended keeps its result.
        """
        if self._result is not None or self._detached is not None:
            return
        err = HandleDisconnectedError(self.process_id)
        self._detached = self._error = err
        self._held = None
        self._backlog, self._backlog_bytes, self._unclaimed = [], 0, set()
        self._text = {s: [] for s in _STREAMS}
        self._bytes = {s: [] for s in _STREAMS}
        if self._release is not None:
            self._release(self)  # at once: an attach that follows must not get this handle back
        if not self._done.done():
            self._done.set_exception(err)
            self._done.add_done_callback(lambda f: f.exception())  # retrieved, even if nobody waits
        for queue, _ in self._queues:
            queue.put_nowait(err)

    async def write_stdin(self, data: str | bytes) -> None:
        """Writes to stdin (keystrokes on a PTY).

        Input is never dropped silently: a closed stdin (after ``close_stdin``, after the process
        ended, or started without ``stdin="pipe"``) raises ``StdinClosedError``; a process the
        server does not know ``NotFoundError`` (``EXEC_ERR_PROCESS_NOT_FOUND``), one still waiting
        for its approval ``ConflictError`` (``EXEC_ERR_PROCESS_STARTING``).
        """
        raw = data.encode("utf-8") if isinstance(data, str) else bytes(data)
        answer = await self._request("process/write", {
            "processId": self.process_id, "chunk": base64.b64encode(raw).decode("ascii"),
            "writeId": str(uuid.uuid4())})
        match answer["status"]:
            case "accepted":
                return
            case "stdinClosed":
                raise StdinClosedError(self.process_id)
            case "starting":  # what the server answers the other process methods in this state
                code, message = "EXEC_ERR_PROCESS_STARTING", f"process id {self.process_id} is starting"
            case _:
                code, message = "EXEC_ERR_PROCESS_NOT_FOUND", f"unknown process id {self.process_id}"
        raise error_of(code, message, rpc_code=ERROR_REGISTRY[code][1])

    async def close_stdin(self) -> None:
        await self._request("process/closeStdin", {"processId": self.process_id})

    async def resize(self, cols: int, rows: int) -> None:
        check_size(cols, rows)
        await self._request("process/resize", {"processId": self.process_id, "cols": cols, "rows": rows})

    async def signal(self, signal: SignalName) -> None:
        """Sends ``signal`` (``SIGINT``... or ``interrupt``) to the process group."""
        check_signal(signal)
        await self._request("process/signal", {"processId": self.process_id, "signal": signal})

    async def kill(self, signal: SignalName | None = None) -> None:
        """No signal: terminate (SIGTERM, SIGKILL after the server's grace). Else that signal."""
        if signal is not None:
            await self.signal(signal)
        else:
            await self._request("process/terminate", {"processId": self.process_id})

    # ---- fed by the session -------------------------------------------------------------

    def _notify(self, method: str, params: dict[str, Any]) -> None:
        if self._held is not None:
            self._held.append((method, params))
        else:
            self._apply(method, params)

    def _apply(self, method: str, params: dict[str, Any]) -> None:
        if self._detached is not None:  # a read in flight, or a session that routes to it still
            return
        seq = params.get("seq")
        if isinstance(seq, int):
            if seq <= self.last_seq:
                return
            self.last_seq = seq
        if method == "process/output":
            data = params.get("data")
            raw = bytes(data) if data is not None else base64.b64decode(params.get("chunk") or "")
            self._received_bytes += len(raw)
            self._output(params.get("stream", "stdout"), int(seq or 0), raw)
        elif method == "process/exited":
            self._exit = _Exit(int(params.get("exitCode", -1)), terminal_of(params.get("terminal")),
                               params.get("signal"), params.get("sandboxDenied") is True)
        elif method == "process/closed":
            self._finish()

    def _output(self, stream: StreamName, seq: int, data: bytes) -> None:
        text = self._decoders[stream].decode(data)
        if self._collect:
            self._text[stream].append(text)
            self._bytes[stream].append(data)
        self._emit(OutputChunk(stream, seq, data, text))

    def _emit(self, chunk: OutputChunk) -> None:
        for queue, stream in self._queues:
            if stream is None or stream == chunk.stream:
                queue.put_nowait(chunk)
        if chunk.stream not in self._unclaimed:
            return
        self._backlog.append(chunk)
        self._backlog_bytes += _held_size(chunk)
        if self._backlog_bytes > self._backlog_max:
            drop = 0
            while self._backlog_bytes > self._backlog_max and drop < len(self._backlog) - 1:
                self._backlog_bytes -= _held_size(self._backlog[drop])
                drop += 1
            del self._backlog[:drop]

    def _flush_decoders(self) -> None:
        """Ends each stream's pending character (U+FFFD): at the close, or before a lost stretch."""
        for stream in _STREAMS:
            rest = self._decoders[stream].decode(b"", final=True)
            if rest:
                if self._collect:
                    self._text[stream].append(rest)
                self._emit(OutputChunk(stream, self.last_seq, b"", rest))

    def _finish(self) -> None:
        if self._result is not None or self._detached is not None:
            return
        self._flush_decoders()
        ex = self._exit or _Exit(-1, "lost", None, False)
        t, b = self._text, self._bytes
        self._result = ExecResult(
            self.process_id, self.argv, ex.exit_code, ex.terminal, ex.signal, ex.sandbox_denied,
            "".join(t["stdout"]), "".join(t["stderr"]), "".join(t["pty"]),
            b"".join(b["stdout"]), b"".join(b["stderr"]), b"".join(b["pty"]), self._dropped_bytes)
        self._text = {s: [] for s in _STREAMS}
        self._bytes = {s: [] for s in _STREAMS}
        for queue, _ in self._queues:
            queue.put_nowait(_END)
        if not self._done.done():
            self._done.set_result(self._result)

    def _fail(self, err: Exception) -> None:
        """No more events will come (the connection closed for good): waits and iterations raise ``err``."""
        if self._result is not None or self._done.done():
            return
        self._error = err
        self._done.set_exception(err)
        self._done.add_done_callback(lambda f: f.exception())  # retrieved, even if nobody waits
        for queue, _ in self._queues:
            queue.put_nowait(err)

    def _lost(self) -> None:
        """The server no longer knows the process: it ends ``lost`` with what arrived."""
        self._held = None
        self._finish()

    def _hold(self) -> None:
        """Live events wait while a resume or attach fills the gap."""
        if self._held is None:
            self._held = []

    def _count_dropped(self, read: dict[str, Any]) -> None:
        """Counts the output after ``last_seq`` that the server dropped before this read.

        The server reports all it ever dropped (``droppedBytes``); all of it up to ``last_seq``
        came here (or was counted), so the rest is this gap's loss.
        """
        first, dropped = read.get("firstRetainedSeq"), read.get("droppedBytes")
        if not isinstance(first, int) or not isinstance(dropped, int) or first <= self.last_seq + 1:
            return
        lost = dropped - self._received_bytes
        if lost > 0:
            self._flush_decoders()  # a character cut by the gap is not completed by later bytes
            self._received_bytes += lost
            self._dropped_bytes += lost

    async def _catch_up(self, request: Request | None = None) -> None:
        """Reads what came after ``last_seq`` with ``process/read``, then applies held events."""
        request = request or self._request
        self._hold()
        filled = False
        try:
            while True:
                r = await request("process/read", {
                    "processId": self.process_id, "afterSeq": self.last_seq,
                    "maxBytes": 4 * 1024 * 1024, "waitMs": 0})
                self._count_dropped(r)
                for c in r["chunks"]:
                    self._apply("process/output", c)
                if r["chunks"]:
                    continue
                if r.get("exited"):
                    self._exit = _Exit(r.get("exitCode") if r.get("exitCode") is not None else -1,
                                       terminal_of(r.get("terminal")), r.get("signal"),
                                       r.get("sandboxDenied") is True)
                if r.get("closed"):
                    self.last_seq = max(self.last_seq, int(r["nextSeq"]) - 1)
                    self._finish()
                break
            filled = True
        finally:
            # A read cut by another drop leaves the gap open: live events stay held until the
            # next resume has filled it, or a byte would be skipped.
            if filled:
                held, self._held = self._held or [], None
                for method, params in held:
                    self._apply(method, params)
