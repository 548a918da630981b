"""``Client``: the async SDK for scripts and notebooks, on an event loop in a background thread.

Every method blocks until the async one it wraps has finished; names and arguments are the
same (``Client.session()`` is a ``with`` block, ``for chunk in proc`` iterates the output).
"""
from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Iterator, Sequence
from typing import IO, Any, TypeVar

from ._http import Progress, Source
from .client import AsyncClient
from .process import Process
from .results import ExecResult, OutputChunk, StreamName
from .session import Session, Stdin

T = TypeVar("T")


class _Loop:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="exec-server-sdk", daemon=True)
        self.thread.start()

    def run(self, aw: Awaitable[T], timeout: float | None = None) -> T:
        async def call() -> T:
            return await aw
        return asyncio.run_coroutine_threadsafe(call(), self.loop).result(timeout)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


class SyncProcess:
    def __init__(self, loop: _Loop, proc: Process) -> None:
        self._loop, self.aio = loop, proc
        self.process_id = proc.process_id

    def __iter__(self) -> Iterator[OutputChunk]:
        return self.output()

    def output(self, stream: StreamName | None = None) -> Iterator[OutputChunk]:
        agen = self.aio.output(stream)
        while True:
            try:
                yield self._loop.run(agen.__anext__())
            except StopAsyncIteration:
                return

    @property
    def done(self) -> bool:
        return self.aio.done

    def wait(self, timeout: float | None = None, *, check: bool | None = None) -> ExecResult:
        return self._loop.run(self.aio.wait(timeout, check=check))

    def write_stdin(self, data: str | bytes) -> str:
        return self._loop.run(self.aio.write_stdin(data))

    def close_stdin(self) -> None:
        self._loop.run(self.aio.close_stdin())

    def resize(self, cols: int, rows: int) -> None:
        self._loop.run(self.aio.resize(cols, rows))

    def signal(self, signal: str) -> None:
        self._loop.run(self.aio.signal(signal))

    def kill(self, signal: str | None = None) -> None:
        self._loop.run(self.aio.kill(signal))


class SyncSession:
    def __init__(self, loop: _Loop, session: Session) -> None:
        self._loop, self.aio = loop, session
        self.id = session.id

    def __enter__(self) -> SyncSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.delete()

    def run(self, argv_or_cmd: str | Sequence[str], **kw: Any) -> ExecResult:
        return self._loop.run(self.aio.run(argv_or_cmd, **kw))

    def spawn(self, argv_or_cmd: str | Sequence[str], *, stdin: Stdin = None, **kw: Any) -> SyncProcess:
        return SyncProcess(self._loop, self._loop.run(self.aio.spawn(argv_or_cmd, stdin=stdin, **kw)))

    def attach(self, process_id: str, **kw: Any) -> SyncProcess:
        return SyncProcess(self._loop, self._loop.run(self.aio.attach(process_id, **kw)))

    def info(self) -> dict[str, Any]:
        return self._loop.run(self.aio.info())

    def list_processes(self) -> list[dict[str, Any]]:
        return self._loop.run(self.aio.list_processes())

    def read_file(self, path: str) -> bytes:
        return self._loop.run(self.aio.read_file(path))

    def write_file(self, path: str, data: str | bytes) -> None:
        self._loop.run(self.aio.write_file(path, data))

    def list_dir(self, path: str) -> list[dict[str, Any]]:
        return self._loop.run(self.aio.list_dir(path))

    def upload(self, path: str, source: Source, *, progress: Progress | None = None) -> int:
        return self._loop.run(self.aio.upload(path, source, progress=progress))

    def download(self, path: str, dest: str | IO[bytes] | None = None, *,
                 progress: Progress | None = None) -> bytes | int:
        return self._loop.run(self.aio.download(path, dest, progress=progress))

    def snapshot(self, name: str | None = None, *, memory: bool = False) -> dict[str, Any]:
        return self._loop.run(self.aio.snapshot(name, memory=memory))

    def fork(self, name: str | None = None, **create: Any) -> SyncSession:
        return SyncSession(self._loop, self._loop.run(self.aio.fork(name, **create)))

    def fork_many(self, count: int = 1, *, memory: bool = False, name: str | None = None) -> list[SyncSession]:
        return [SyncSession(self._loop, s) for s in self._loop.run(self.aio.fork_many(count, memory=memory, name=name))]

    def hibernate(self) -> dict[str, Any]:
        return self._loop.run(self.aio.hibernate())

    def wake(self) -> dict[str, Any]:
        return self._loop.run(self.aio.wake())

    def expose_port(self, port: int, *, ttl_seconds: int | None = None) -> dict[str, Any]:
        return self._loop.run(self.aio.expose_port(port, ttl_seconds=ttl_seconds))

    def create_token(self, *, access: str = "full", ttl_seconds: int | None = None) -> dict[str, Any]:
        return self._loop.run(self.aio.create_token(access=access, ttl_seconds=ttl_seconds))

    def revoke_token(self, token_id: str) -> None:
        self._loop.run(self.aio.revoke_token(token_id))

    def exec_command(self, cmd: str, **args: Any) -> dict[str, Any]:
        return self._loop.run(self.aio.exec_command(cmd, **args))

    def route_tool_call(self, item: Any) -> dict[str, Any] | None:
        return self._loop.run(self.aio.route_tool_call(item))

    def disconnect(self) -> None:
        self._loop.run(self.aio.disconnect())

    def delete(self) -> None:
        self._loop.run(self.aio.delete())


class Client:
    """Synchronous client: ``with Client() as c, c.session() as s: print(s.run("echo hi").stdout)``."""

    def __init__(self, url: str | None = None, token: str | None = None, **kw: Any) -> None:
        self.aio = AsyncClient(url, token, **kw)
        self._loop = _Loop()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Disconnects the sessions this client opened and stops its loop thread."""
        try:
            self._loop.run(self.aio.close(), timeout=30)
        finally:
            self._loop.stop()

    def create_session(self, **kw: Any) -> SyncSession:
        return SyncSession(self._loop, self._loop.run(self.aio.create_session(**kw)))

    def session(self, **kw: Any) -> SyncSession:
        """A new session; as a ``with`` block it is deleted at the end."""
        return self.create_session(**kw)

    def resume_session(self, session_id: str, **kw: Any) -> SyncSession:
        return SyncSession(self._loop, self._loop.run(self.aio.resume_session(session_id, **kw)))

    def create_sessions(self, count: int, **spec: Any) -> list[dict[str, Any]]:
        """``count`` sessions of one spec at once, as their infos (see ``AsyncClient.create_sessions``)."""
        return self._loop.run(self.aio.create_sessions(count, **spec))

    def list_sessions(self) -> list[dict[str, Any]]:
        return self._loop.run(self.aio.list_sessions())

    def get_session(self, session_id: str) -> dict[str, Any]:
        return self._loop.run(self.aio.get_session(session_id))

    def delete_session(self, session_id: str) -> None:
        self._loop.run(self.aio.delete_session(session_id))

    def list_snapshots(self) -> list[dict[str, Any]]:
        return self._loop.run(self.aio.list_snapshots())

    def delete_snapshot(self, snapshot_id: str) -> None:
        self._loop.run(self.aio.delete_snapshot(snapshot_id))
