"""``AsyncClient``: one server and token; opens sessions (each its own WebSocket) and calls REST.

    async with AsyncClient() as client:          # EXEC_SERVER_URL, EXEC_SERVER_TOKEN
        async with client.session() as session:  # deleted at the end
            result = await session.run("echo hi")
"""
from __future__ import annotations

import functools
import os
from collections.abc import Awaitable, Callable, Generator, Mapping
from typing import Any, Concatenate, ParamSpec, TypeVar

from . import _validate as v
from ._generated import MAX_SESSION_BATCH, ImagePull, SessionInfo, SnapshotInfo
from ._http import HttpApi, seg, ws_url_of
from ._spec import ApprovalPolicy, Limits, session_spec
from ._tools import HttpSession
from .errors import AuthError
from .session import ApprovalCallback, ImagePullCallback, Session

DEFAULT_URL = "ws://127.0.0.1:8765"
C = TypeVar("C")
P = ParamSpec("P")


def _opening(create: Callable[Concatenate[C, P], Awaitable[Session]]) -> Callable[Concatenate[C, P], _Opening]:
    """``session(...)``: the keywords of ``create_session``, as an awaitable or an ``async with``."""
    @functools.wraps(create)
    def session(self: C, /, *args: P.args, **kwargs: P.kwargs) -> _Opening:
        return _Opening(lambda: create(self, *args, **kwargs))
    session.__name__ = "session"
    session.__qualname__ = f"{create.__qualname__.rpartition('.')[0]}.session"
    session.__doc__ = ("``create_session`` as an awaitable, or an ``async with`` that deletes the session "
                       f"at the end.\n\n{create.__doc__ or ''}")
    return session


class AsyncClient:
    """One server and token; without them ``EXEC_SERVER_URL`` and ``EXEC_SERVER_TOKEN`` (else
    ``CODEX_EXEC_SERVER_CONNECTION_TOKEN``), as the CLI reads them.

    ``connect_timeout`` (seconds) bounds opening a session's connection, the WebSocket upgrade
    and ``initialize`` together: past it ``ConnectionClosedError``, as for a refused connection.
    """

    def __init__(self, url: str | None = None, token: str | None = None, *,
                 client_name: str = "exec-server-python", connect_timeout: float = 30.0) -> None:
        url = url or os.environ.get("EXEC_SERVER_URL") or DEFAULT_URL
        if not isinstance(url, str) or "://" not in url:
            raise v.fail(f"url must be ws(s):// or http(s)://, not {url!r}")
        if isinstance(connect_timeout, bool) or not isinstance(connect_timeout, (int, float)) \
                or not connect_timeout > 0:
            raise v.fail("connect_timeout must be a positive number of seconds")
        self.connect_timeout = float(connect_timeout)
        self.ws_url = ws_url_of(url)
        self.token = token if token is not None else (
            os.environ.get("EXEC_SERVER_TOKEN") or os.environ.get("CODEX_EXEC_SERVER_CONNECTION_TOKEN") or None)
        self.client_name = client_name
        self.http = HttpApi(url, self.token)
        self._sessions: list[Session] = []

    @classmethod
    async def connect(cls, url: str | None = None, token: str | None = None, *,
                      client_name: str = "exec-server-python", connect_timeout: float = 30.0) -> AsyncClient:
        """A client whose server answered and accepted the token (``AuthError`` if not).

        A session token (``Session.create_token``) is accepted too: the server names it valid but
        scoped to its session (``EXEC_ERR_TOKEN_SCOPE``) where a tenant token lists sessions.
        """
        client = cls(url, token, client_name=client_name, connect_timeout=connect_timeout)
        try:
            await client.list_sessions()
        except AuthError as err:
            if err.code != "EXEC_ERR_TOKEN_SCOPE":
                raise
        return client

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Disconnects every session this client opened (they go on on the server)."""
        for s in self._sessions:
            if s.connected:
                await s.disconnect()
        self._sessions.clear()

    async def create_session(self, *, image: str | None = None, runtime: str | None = None,
                             env: Mapping[str, str] | None = None, limits: Limits | None = None,
                             snapshot: str | None = None, workdir: str | None = None,
                             labels: Mapping[str, str] | None = None, sandbox: Mapping[str, Any] | None = None,
                             approval_policy: ApprovalPolicy | None = None, strict_auto_review: bool | None = None,
                             preview_ports: bool | None = None, allow_network: list[str] | None = None,
                             deny_read: list[str] | None = None, idle_timeout: int | None = None,
                             max_lifetime: int | None = None, spec: Mapping[str, Any] | None = None,
                             on_approval: ApprovalCallback | None = None,
                             on_image_pull: ImagePullCallback | None = None,
                             auto_reconnect: bool = True) -> Session:
        """A new session (docs/protocol.md, "Session spec"); ``limits``: memory_mb, cpus, pids, disk_mb.

        ``on_approval(request)`` answers ``approved``, ``approved-for-session``, ``denied`` or
        ``abort`` (may be async; without it every approval is denied). ``on_image_pull(pull)``
        hears the progress of an image pull the creation waits for. ``allow_network``: the
        destinations the session's egress proxy lets through (``network.allow``: ``*``, ``host``,
        ``host:port``, ``*.domain[:port]``, ``ip[:port]``, ``cidr[:port]``); without it, no network.
        ``strict_auto_review``: every command the policy asks about is asked, an ``approval`` hint
        or an earlier ``approved-for-session`` notwithstanding. ``spec``: a raw (camelCase) spec
        that the keywords given overlay.
        """
        body = session_spec(image=image, runtime=runtime, env=env, limits=limits, snapshot=snapshot,
                            workdir=workdir, labels=labels, sandbox=sandbox, approval_policy=approval_policy,
                            strict_auto_review=strict_auto_review, preview_ports=preview_ports,
                            allow_network=allow_network, deny_read=deny_read, idle_timeout=idle_timeout,
                            max_lifetime=max_lifetime, spec=spec)
        session = Session(self, on_approval, on_image_pull, auto_reconnect)
        await session._open(None, body)
        self._sessions.append(session)
        return session

    # The keywords of create_session, by construction (a ParamSpec keeps their types for mypy).
    session = _opening(create_session)

    async def create_http_session(self, *, image: str | None = None, runtime: str | None = None,
                                  env: Mapping[str, str] | None = None, limits: Limits | None = None,
                                  snapshot: str | None = None, workdir: str | None = None,
                                  labels: Mapping[str, str] | None = None,
                                  sandbox: Mapping[str, Any] | None = None,
                                  approval_policy: ApprovalPolicy | None = None,
                                  strict_auto_review: bool | None = None, preview_ports: bool | None = None,
                                  allow_network: list[str] | None = None,
                                  deny_read: list[str] | None = None, idle_timeout: int | None = None,
                                  max_lifetime: int | None = None,
                                  spec: Mapping[str, Any] | None = None) -> HttpSession:
        """A session created over HTTP (``POST /v1/sessions``; the spec keywords of
        ``create_session``), used through the tool facade only."""
        body = session_spec(image=image, runtime=runtime, env=env, limits=limits, snapshot=snapshot,
                            workdir=workdir, labels=labels, sandbox=sandbox, approval_policy=approval_policy,
                            strict_auto_review=strict_auto_review, preview_ports=preview_ports,
                            allow_network=allow_network, deny_read=deny_read, idle_timeout=idle_timeout,
                            max_lifetime=max_lifetime, spec=spec)
        info = await self.http.request("POST", "/v1/sessions", body)
        return HttpSession(self.http, info["sessionId"])

    def http_session(self, session_id: str) -> HttpSession:
        """The tool facade of an existing session, over HTTP only."""
        if not isinstance(session_id, str) or not session_id:
            raise v.fail("session_id must be a non-empty string")
        return HttpSession(self.http, session_id)

    async def resume_session(self, session_id: str, *, on_approval: ApprovalCallback | None = None,
                             auto_reconnect: bool = True) -> Session:
        """Attaches to a live session (its previous connection is closed by the server)."""
        if not isinstance(session_id, str) or not session_id:
            raise v.fail("session_id must be a non-empty string")
        session = Session(self, on_approval, None, auto_reconnect)
        await session._open(session_id, None)
        self._sessions.append(session)
        return session

    async def create_sessions(self, count: int, *, image: str | None = None, runtime: str | None = None,
                              env: Mapping[str, str] | None = None, limits: Limits | None = None,
                              snapshot: str | None = None, workdir: str | None = None,
                              labels: Mapping[str, str] | None = None, sandbox: Mapping[str, Any] | None = None,
                              approval_policy: ApprovalPolicy | None = None,
                              strict_auto_review: bool | None = None, preview_ports: bool | None = None,
                              allow_network: list[str] | None = None,
                              deny_read: list[str] | None = None, idle_timeout: int | None = None,
                              max_lifetime: int | None = None,
                              spec: Mapping[str, Any] | None = None) -> list[SessionInfo]:
        """``count`` sessions of one spec at once (``POST /v1/sessions?count=N``; best-of-N, rollouts),
        as their infos: all of them, or an error with none left behind. The spec keywords are
        those of ``create_session``; attach with ``resume_session(info["sessionId"])`` or
        ``http_session(...)``."""
        if not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= MAX_SESSION_BATCH:
            raise v.fail(f"count must be an integer from 1 to {MAX_SESSION_BATCH}")
        body = session_spec(image=image, runtime=runtime, env=env, limits=limits, snapshot=snapshot,
                            workdir=workdir, labels=labels, sandbox=sandbox, approval_policy=approval_policy,
                            strict_auto_review=strict_auto_review, preview_ports=preview_ports,
                            allow_network=allow_network, deny_read=deny_read, idle_timeout=idle_timeout,
                            max_lifetime=max_lifetime, spec=spec)
        answer = await self.http.request("POST", f"/v1/sessions?count={count}", body)
        sessions: list[SessionInfo] = answer["sessions"]
        return sessions

    async def list_sessions(self) -> list[SessionInfo]:
        sessions: list[SessionInfo] = (await self.http.request("GET", "/v1/sessions"))["sessions"]
        return sessions

    async def get_session(self, session_id: str) -> SessionInfo:
        info: SessionInfo = await self.http.request("GET", f"/v1/sessions/{seg(session_id)}")
        return info

    async def delete_session(self, session_id: str) -> None:
        await self.http.request("DELETE", f"/v1/sessions/{seg(session_id)}")

    async def list_snapshots(self) -> list[SnapshotInfo]:
        snapshots: list[SnapshotInfo] = (await self.http.request("GET", "/v1/snapshots"))["snapshots"]
        return snapshots

    async def delete_snapshot(self, snapshot_id: str) -> None:
        await self.http.request("DELETE", f"/v1/snapshots/{seg(snapshot_id)}")

    async def image_pulls(self) -> list[ImagePull]:
        """Image pulls in flight that this tenant's session creations wait for."""
        pulls: list[ImagePull] = (await self.http.request("GET", "/v1/images/pulls"))["pulls"]
        return pulls


class _Opening:
    """``await client.session()`` gives the session; ``async with`` also deletes it after."""

    def __init__(self, open_: Callable[[], Awaitable[Session]]) -> None:
        self._open = open_
        self._session: Session | None = None

    def __await__(self) -> Generator[Any, None, Session]:
        return self._open().__await__()

    async def __aenter__(self) -> Session:
        self._session = await self._open()
        return self._session

    async def __aexit__(self, *exc: object) -> None:
        if self._session is not None:
            await self._session.delete()
