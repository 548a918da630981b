"""``Client``: the async SDK for scripts and notebooks, on an event loop in a background thread.

Every method blocks until the async one it wraps has finished; names and parameters are the
same (``Client.session()`` is a ``with`` block, ``for chunk in proc`` iterates the output).
Most methods are made from their async twin by ``_blocking``, so they cannot drift apart: a
ParamSpec carries the parameters' types to mypy, ``functools.wraps`` their signature to
``inspect`` and ``help()``.
"""
from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Awaitable, Callable, Iterator
from typing import Concatenate, ParamSpec, Protocol, TypeVar

from ._tools import HttpSession, ToolsMixin
from .client import AsyncClient
from .process import Process
from .results import ExecResult, OutputChunk, StreamName
from .session import Session

__all__ = ["Client", "SyncHttpSession", "SyncProcess", "SyncSession"]

T = TypeVar("T")
R = TypeVar("R")
A = TypeVar("A")
A_co = TypeVar("A_co", covariant=True)
P = ParamSpec("P")


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


class _Wrapper(Protocol[A_co]):
    """A synchronous object: the async one it wraps, and the loop that runs it."""

    @property
    def aio(self) -> A_co: ...
    @property
    def _loop(self) -> _Loop: ...


def _blocking_as(method: Callable[Concatenate[A, P], Awaitable[T]],
                 convert: Callable[[_Loop, T], R]) -> Callable[Concatenate[_Wrapper[A], P], R]:
    """The synchronous twin of an async ``method``: same parameters, its answer ``convert``ed."""
    @functools.wraps(method)
    def call(self: _Wrapper[A], /, *args: P.args, **kwargs: P.kwargs) -> R:
        return convert(self._loop, self._loop.run(method(self.aio, *args, **kwargs)))
    return call


def _blocking(method: Callable[Concatenate[A, P], Awaitable[T]]) -> Callable[Concatenate[_Wrapper[A], P], T]:
    """The synchronous twin of an async ``method``: same parameters, same answer."""
    @functools.wraps(method)
    def call(self: _Wrapper[A], /, *args: P.args, **kwargs: P.kwargs) -> T:
        return self._loop.run(method(self.aio, *args, **kwargs))
    return call


def _on_loop(method: Callable[Concatenate[A, P], T]) -> Callable[Concatenate[_Wrapper[A], P], T]:
    """The synchronous twin of a plain ``method``: called on the loop's thread, as the objects
    it changes (futures, queues) belong to that loop."""
    @functools.wraps(method)
    def call(self: _Wrapper[A], /, *args: P.args, **kwargs: P.kwargs) -> T:
        async def on_loop() -> T:
            return method(self.aio, *args, **kwargs)
        return self._loop.run(on_loop())
    return call


def _sync_session(loop: _Loop, session: Session) -> SyncSession:
    return SyncSession(loop, session)


def _sync_sessions(loop: _Loop, sessions: list[Session]) -> list[SyncSession]:
    return [SyncSession(loop, s) for s in sessions]


def _sync_http_session(loop: _Loop, session: HttpSession) -> SyncHttpSession:
    return SyncHttpSession(loop, session)


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

    @property
    def result(self) -> ExecResult | None:
        return self.aio.result

    @property
    def dropped_bytes(self) -> int:
        return self.aio.dropped_bytes

    @property
    def last_seq(self) -> int:
        """Seq of the last event applied: ``attach(process_id, after_seq=...)`` after ``disconnect()``."""
        return self.aio.last_seq

    wait = _blocking(Process.wait)
    disconnect = _on_loop(Process.disconnect)
    write_stdin = _blocking(Process.write_stdin)
    close_stdin = _blocking(Process.close_stdin)
    resize = _blocking(Process.resize)
    signal = _blocking(Process.signal)
    kill = _blocking(Process.kill)


class _SyncTools:
    """The tool facade, of a session or of an ``HttpSession``."""

    exec_command = _blocking(ToolsMixin.exec_command)
    write_stdin_tool = _blocking(ToolsMixin.write_stdin_tool)
    route_tool_call = _blocking(ToolsMixin.route_tool_call)
    list_approvals = _blocking(ToolsMixin.list_approvals)
    decide_approval = _blocking(ToolsMixin.decide_approval)


class SyncHttpSession(_SyncTools):
    """``HttpSession``, synchronous: the tool facade of a session over HTTP only."""

    def __init__(self, loop: _Loop, session: HttpSession) -> None:
        self._loop, self.aio = loop, session
        self.id = session.id


class SyncSession(_SyncTools):
    def __init__(self, loop: _Loop, session: Session) -> None:
        self._loop, self.aio = loop, session
        self.id = session.id

    def __enter__(self) -> SyncSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.delete()

    @property
    def connected(self) -> bool:
        return self.aio.connected

    spawn = _blocking_as(Session.spawn, SyncProcess)
    run = _blocking(Session.run)
    attach = _blocking_as(Session.attach, SyncProcess)
    list_processes = _blocking(Session.list_processes)
    terminate_all = _blocking(Session.terminate_all)
    info = _blocking(Session.info)
    request = _blocking(Session.request)
    reconnect = _blocking(Session.reconnect)
    disconnect = _blocking(Session.disconnect)
    delete = _blocking(Session.delete)

    read_file = _blocking(Session.read_file)
    write_file = _blocking(Session.write_file)
    list_dir = _blocking(Session.list_dir)
    stat = _blocking(Session.stat)
    mkdir = _blocking(Session.mkdir)
    remove = _blocking(Session.remove)
    upload = _blocking(Session.upload)
    download = _blocking(Session.download)

    snapshot = _blocking(Session.snapshot)
    list_snapshots = _blocking(Session.list_snapshots)
    delete_snapshot = _blocking(Session.delete_snapshot)
    fork = _blocking_as(Session.fork, _sync_session)
    fork_many = _blocking_as(Session.fork_many, _sync_sessions)
    hibernate = _blocking(Session.hibernate)
    wake = _blocking(Session.wake)

    expose_port = _blocking(Session.expose_port)
    close_port = _blocking(Session.close_port)
    list_ports = _blocking(Session.list_ports)
    create_token = _blocking(Session.create_token)
    revoke_token = _blocking(Session.revoke_token)


class Client:
    """Synchronous client: ``with Client() as c, c.session() as s: print(s.run("echo hi").stdout)``."""

    def __init__(self, url: str | None = None, token: str | None = None, *,
                 client_name: str = "exec-server-python", connect_timeout: float = 30.0) -> None:
        self.aio = AsyncClient(url, token, client_name=client_name, connect_timeout=connect_timeout)
        self._loop = _Loop()

    @classmethod
    def connect(cls, url: str | None = None, token: str | None = None, *,
                client_name: str = "exec-server-python", connect_timeout: float = 30.0) -> Client:
        """A client whose server answered and accepted the token (see ``AsyncClient.connect``)."""
        client = cls(url, token, client_name=client_name, connect_timeout=connect_timeout)
        try:
            client.aio = client._loop.run(AsyncClient.connect(url, token, client_name=client_name,
                                                              connect_timeout=connect_timeout))
        except BaseException:
            client.close()
            raise
        return client

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

    def http_session(self, session_id: str) -> SyncHttpSession:
        """The tool facade of an existing session, over HTTP only."""
        return SyncHttpSession(self._loop, self.aio.http_session(session_id))

    create_session = _blocking_as(AsyncClient.create_session, _sync_session)
    # A new session; as a ``with`` block it is deleted at the end.
    session = _blocking_as(AsyncClient.session, _sync_session)
    resume_session = _blocking_as(AsyncClient.resume_session, _sync_session)
    create_sessions = _blocking(AsyncClient.create_sessions)
    create_http_session = _blocking_as(AsyncClient.create_http_session, _sync_http_session)
    list_sessions = _blocking(AsyncClient.list_sessions)
    get_session = _blocking(AsyncClient.get_session)
    delete_session = _blocking(AsyncClient.delete_session)
    list_snapshots = _blocking(AsyncClient.list_snapshots)
    delete_snapshot = _blocking(AsyncClient.delete_snapshot)
    image_pulls = _blocking(AsyncClient.image_pulls)
