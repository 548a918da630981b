"""A session over its own WebSocket: processes, files, snapshots, hibernation, ports, tools.

A dropped connection is resumed (``auto_reconnect``, on by default): the session's processes
kept running on the server, and every open handle reads what it missed after its last seq
with ``process/read`` while live events wait, so each byte arrives once, in order.
"""
from __future__ import annotations

import asyncio
import contextlib
import inspect
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, Literal, cast

from . import _validate as v
from ._files import FilesMixin
from ._generated import ApprovalRequest, ImagePull, InitializeResult, ProcessSummary, SessionInfo
from ._http import seg
from ._opener import SessionOpener
from ._rpc import RpcConnection
from ._sharing import SharingMixin
from ._snapshots import SnapshotsMixin
from ._spec import ApprovalCallback, ApprovalPolicy, ImagePullCallback, Limits
from ._tools import ToolsMixin
from .errors import ConnectionClosedError, NotFoundError, StdinClosedError, error_of
from .process import Process
from .results import ExecResult

__all__ = ["ApprovalCallback", "ImagePullCallback", "SandboxPermissions", "Session", "StartApproval", "Stdin"]

Stdin = str | bytes | Literal["pipe"] | None
SandboxPermissions = Literal["use-default", "require-escalated"]
"""``require-escalated``: the command asks to run outside the sandbox (an approval, by the policy)."""
StartApproval = Literal["approved", "approved-for-session"]
"""A start approved beforehand (not under ``strict_auto_review``)."""
# Close code of a server draining for a rollout (``server/draining``, docs/protocol.md).
DRAIN_CLOSE_CODE = 1012


class Session(ToolsMixin, SharingMixin, FilesMixin, SnapshotsMixin):
    """One session; ``async with`` deletes it at the end (``disconnect()`` keeps it)."""

    def __init__(self, client: SessionOpener[Session], on_approval: ApprovalCallback | None,
                 on_image_pull: ImagePullCallback | None, auto_reconnect: bool) -> None:
        self.client = client
        self.http = client.http
        self.id = ""
        # What ``initialize`` answered on the current connection (set by ``_open``, before any use).
        self.init_result: InitializeResult = cast(InitializeResult, {})
        self._on_approval = on_approval
        self._on_image_pull = on_image_pull
        self._auto_reconnect = auto_reconnect
        self._conn: RpcConnection | None = None
        self._processes: dict[str, Process] = {}
        self._closing = False
        self._reconnecting: asyncio.Task[None] | None = None
        self._drain_retry: float | None = None
        self.disconnects = 0
        self.drains = 0

    # ---- connection ------------------------------------------------------------------

    async def _open(self, resume_id: str | None, spec: dict[str, Any] | None) -> None:
        """A new connection, initialized; no answer in ``connect_timeout`` (the upgrade and
        ``initialize`` together) raises ``ConnectionClosedError``."""
        params: dict[str, Any] = {"clientName": self.client.client_name, "binaryOutput": True}
        if resume_id is not None:
            params["resumeSessionId"] = resume_id
        elif spec:
            params["session"] = spec
        limit = self.client.connect_timeout
        try:
            async with asyncio.timeout(limit):
                conn, init = await self._connect(params, limit)
        except TimeoutError as err:
            raise ConnectionClosedError(f"{self.client.ws_url} did not answer in {limit} s") from err
        old, self._conn = self._conn, conn
        self.init_result, self.id = init, init["sessionId"]
        conn.close_handlers.append(lambda code, reason: self._on_close(conn, code))
        if old is not None and old.open_:
            await old.close()

    async def _connect(self, params: dict[str, Any], limit: float) -> tuple[RpcConnection, InitializeResult]:
        conn = await RpcConnection.open(self.client.ws_url, self.client.token, self._server_request, limit)
        conn.notification_handlers.append(self._route)
        try:
            init: InitializeResult = await conn.request("initialize", params)
            await conn.notify("initialized", {})
        except asyncio.CancelledError:
            conn.abort()  # out of time: a server that did not answer initialize would not answer a close
            raise
        except BaseException:
            await conn.close()
            raise
        return conn, init

    async def _server_request(self, method: str, params: dict[str, Any]) -> Any:
        if method != "approval/request":
            raise ValueError(f"unsupported server request {method}")
        decision: Any = "denied"
        if self._on_approval is not None:
            decision = self._on_approval(cast(ApprovalRequest, params))  # the server's approval/request params
            if inspect.isawaitable(decision):
                decision = await decision
        return {"decision": decision if decision in v.DECISIONS else "denied"}

    def _route(self, method: str, params: dict[str, Any]) -> None:
        if method == "server/draining":  # a rollout: the close (1012) that follows is resumed
            self.drains += 1
            self._drain_retry = max(float(params.get("retryAfterMs", 500)) / 1000, 0.1)
            return
        if method == "session/imagePull":
            if self._on_image_pull is not None:
                self._on_image_pull(cast(ImagePull, params))  # the server's session/imagePull params
            return
        pid = params.get("processId")
        handle = self._processes.get(pid) if isinstance(pid, str) else None
        if handle is not None:
            handle._notify(method, params)

    def _on_close(self, conn: RpcConnection, code: int) -> None:
        if conn is not self._conn:
            return
        self.disconnects += 1
        drained = code == DRAIN_CLOSE_CODE or self._drain_retry is not None
        retry, self._drain_retry = self._drain_retry, None
        if not self._closing and drained:
            # The server drains for a rollout: the next one may take about a minute to answer.
            if self._reconnecting is None:
                self._reconnecting = asyncio.create_task(self._retry_reconnect(60, retry or 0.5, 2.0))
        elif not self._closing and self._auto_reconnect and code != 4000:
            if self._reconnecting is None:
                self._reconnecting = asyncio.create_task(self._retry_reconnect())
        else:
            self._give_up(code)

    def _give_up(self, code: int | None) -> None:
        """The connection is gone for good: open handles fail instead of waiting forever."""
        why = "evicted: another connection resumed the session, or it was deleted" if code == 4000 \
            else "the session's connection is closed"
        for handle in list(self._processes.values()):
            handle._fail(ConnectionClosedError(f"{why} ({code})", code))
        self._processes.clear()

    async def _retry_reconnect(self, attempts: int = 10, delay: float = 0.2, max_delay: float = 60.0) -> None:
        try:
            for i in range(attempts):
                if self._closing:
                    return
                await asyncio.sleep(min(delay * (i + 1), max_delay) if i else 0.05)
                try:
                    await self._reconnect_once()
                    return
                except Exception:
                    continue
            self._give_up(self._conn.close_code if self._conn is not None else None)
        finally:
            self._reconnecting = None

    async def _reconnect_once(self) -> None:
        handles = [h for h in self._processes.values() if h._started]
        for h in handles:
            h._hold()
        await self._open(self.id, None)
        results = await asyncio.gather(*(h._catch_up(self._direct) for h in handles), return_exceptions=True)
        for h, r in zip(handles, results):
            if isinstance(r, NotFoundError):  # pruned or gone with its backend: it ends `lost`
                h._lost()
            elif isinstance(r, BaseException):
                raise r

    async def reconnect(self) -> None:
        """Resumes the session on a new connection; open handles fill their gaps.

        After ``disconnect()`` this also turns ``auto_reconnect`` (if asked for) back on.
        """
        self._closing = False
        await self._reconnect_once()

    @property
    def connected(self) -> bool:
        return self._conn is not None and self._conn.open_

    async def request(self, method: str, params: dict[str, Any] | None = None) -> Any:
        """Any JSON-RPC method of the session (waits for a resume in progress).

        Its answer is untyped, as the method is any (a newer server's too); the methods above
        give the typed answers (``SessionInfo``, ``FileMetadata``...)."""
        conn = self._conn
        if conn is not None and not conn.open_ and self._auto_reconnect and not self._closing \
                and conn.close_code != 4000 and self._reconnecting is None:
            # Dead before its reader noticed: resume now rather than fail the call.
            self._reconnecting = asyncio.create_task(self._retry_reconnect())
        task = self._reconnecting
        if task is not None and not task.done():
            await asyncio.shield(task)
        if self._conn is None:
            raise ConnectionClosedError("session is not connected")
        return await self._conn.request(method, params or {})

    async def _direct(self, method: str, params: dict[str, Any]) -> Any:
        """A request on the current connection, not waiting for a resume (the resume's own)."""
        if self._conn is None:
            raise ConnectionClosedError("session is not connected")
        return await self._conn.request(method, params)

    async def disconnect(self) -> None:
        """Closes the connection; the session and its processes go on on the server."""
        self._closing = True
        if self._conn is not None:
            await self._conn.close()

    async def delete(self) -> None:
        """Deletes the session (its processes are killed) and closes the connection.

        A refused delete (a read token, say) raises and leaves the connection as it was.
        """
        closing, self._closing = self._closing, True  # the server's close that follows is no drop
        try:
            await self.http.request("DELETE", f"/v1/sessions/{seg(self.id)}")
        except BaseException:
            self._closing = closing
            raise
        if self._conn is not None:
            await self._conn.close()

    async def __aenter__(self) -> Session:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.delete()

    # ---- processes -------------------------------------------------------------------

    async def spawn(self, argv_or_cmd: str | Sequence[str], *, cwd: str | None = None,
                    env: dict[str, str] | None = None, stdin: Stdin = None, tty: bool = False,
                    size: tuple[int, int] | None = None, timeout: float | None = None,
                    check: bool = True, collect: bool = True, process_id: str | None = None,
                    sandbox_permissions: SandboxPermissions | None = None, approval: StartApproval | None = None,
                    backlog_bytes: int = 64 * 1024 * 1024) -> Process:
        """Starts a process and returns its handle at once (a string runs under ``sh -c``).

        ``sandbox_permissions="require-escalated"`` asks to run it outside the sandbox (the
        session's approval policy decides, docs/protocol.md); ``approval`` says it is approved
        already.

        ``backlog_bytes``: the memory that output may take while it waits for the first
        iteration of its stream (``Process.output``). A ``process_id`` of an open handle of this
        session raises ``ConflictError`` (``EXEC_ERR_PROCESS_EXISTS``) before anything is sent.
        """
        argv = v.argv_of(argv_or_cmd)
        params: dict[str, Any] = {"argv": argv, "tty": bool(tty),
                                  "pipeStdin": not tty and stdin is not None}
        if cwd is not None:
            params["cwd"] = v.check_path(cwd, "cwd")
        if env is not None:
            params["env"] = v.check_env(env)
        if size is not None:
            v.check_size(*size)
            params["size"] = {"cols": size[0], "rows": size[1]}
        if (ms := v.check_timeout(timeout)) is not None:
            params["timeoutMs"] = ms
        if sandbox_permissions is not None:
            params["sandboxPermissions"] = v.check_choice(sandbox_permissions, v.SANDBOX_PERMISSIONS,
                                                          "sandbox_permissions")
        if approval is not None:
            params["approval"] = v.check_choice(approval, v.START_APPROVALS, "approval")
        if stdin is not None and stdin != "pipe" and not isinstance(stdin, (str, bytes)):
            raise v.fail("stdin must be str, bytes or 'pipe'")
        pid = process_id or f"py-{uuid.uuid4()}"
        if pid in self._processes:
            # The server would refuse it too; asking it would displace the live handle's events.
            raise error_of("EXEC_ERR_PROCESS_EXISTS", f"process id {pid!r} is in use by a handle of this session")
        params["processId"] = pid
        handle = Process(pid, tuple(argv), self.request, check=check, collect=collect,
                         backlog_bytes=backlog_bytes, release=self._forget)
        self._processes[pid] = handle  # before the start: no early output is missed
        try:
            await self.request("process/start", params)
        except BaseException:
            self._forget(handle)
            raise
        handle._started = True
        handle._done.add_done_callback(lambda _: self._forget(handle))
        if stdin is not None and stdin != "pipe":
            # A command may end without reading its input (`true`): as in a shell pipe, no error.
            with contextlib.suppress(StdinClosedError):
                await handle.write_stdin(stdin)
            if not tty:
                await handle.close_stdin()
        return handle

    async def run(self, argv_or_cmd: str | Sequence[str], *, cwd: str | None = None,
                  env: dict[str, str] | None = None, stdin: str | bytes | None = None,
                  tty: bool = False, size: tuple[int, int] | None = None,
                  timeout: float | None = None, check: bool = True,
                  sandbox_permissions: SandboxPermissions | None = None,
                  approval: StartApproval | None = None) -> ExecResult:
        """Runs a command to its end: its output and exit (``CommandExitError`` if non-zero and ``check``).

        ``timeout`` (seconds) is enforced by the server: the command is killed and ends
        ``timed-out`` with exit code 124.
        """
        proc = await self.spawn(argv_or_cmd, cwd=cwd, env=env, stdin=stdin, tty=tty, size=size,
                                timeout=timeout, check=check, sandbox_permissions=sandbox_permissions,
                                approval=approval, backlog_bytes=0)
        return await proc.wait()

    async def attach(self, process_id: str, *, after_seq: int = 0, check: bool = False,
                     collect: bool = True) -> Process:
        """A handle on an existing process, replaying retained output after ``after_seq``: one
        started on another connection, or whose handle was ``disconnect()``ed (its ``last_seq``
        as ``after_seq`` skips what it received). An open handle of the process is returned as is.

        Output the server no longer retains is counted in ``dropped_bytes`` (with ``after_seq``,
        what it dropped before that seq too: the SDK cannot tell those bytes apart).
        """
        if process_id in self._processes:
            return self._processes[process_id]
        handle = Process(process_id, (), self.request, check=check, collect=collect, after_seq=after_seq,
                         release=self._forget)
        handle._started = True
        handle._hold()
        self._processes[process_id] = handle
        try:
            await handle._catch_up()
        except BaseException:
            self._forget(handle)
            raise
        if not handle.done:
            handle._done.add_done_callback(lambda _: self._forget(handle))
        else:
            self._forget(handle)
        return handle

    def _forget(self, handle: Process) -> None:
        """Stops routing events to ``handle``, and only to it (never a newer handle of its id)."""
        if self._processes.get(handle.process_id) is handle:
            del self._processes[handle.process_id]

    async def list_processes(self) -> list[ProcessSummary]:
        processes: list[ProcessSummary] = (await self.request("process/list"))["processes"]
        return processes

    async def info(self) -> SessionInfo:
        """``session/info``: backend, sandbox, workdir, status, usage..."""
        info: SessionInfo = await self.request("session/info")
        return info

    async def terminate_all(self) -> int:
        return int((await self.request("session/terminateAll"))["terminated"])

    # ---- forks --------------------------------------------------------------------------

    async def fork(self, name: str | None = None, *, image: str | None = None, runtime: str | None = None,
                   env: Mapping[str, str] | None = None, limits: Limits | None = None,
                   workdir: str | None = None, labels: Mapping[str, str] | None = None,
                   sandbox: Mapping[str, Any] | None = None, approval_policy: ApprovalPolicy | None = None,
                   strict_auto_review: bool | None = None, preview_ports: bool | None = None,
                   allow_network: list[str] | None = None, deny_read: list[str] | None = None,
                   idle_timeout: int | None = None, max_lifetime: int | None = None,
                   spec: Mapping[str, Any] | None = None,
                   on_approval: ApprovalCallback | None = None,
                   on_image_pull: ImagePullCallback | None = None,
                   auto_reconnect: bool = True) -> Session:
        """A new session started from a snapshot of this one (its files, not its processes); the
        keywords of ``create_session`` but ``snapshot``, which is this one's."""
        snap = await self.snapshot(name)
        return await self.client.create_session(
            snapshot=snap["snapshotId"], image=image, runtime=runtime, env=env, limits=limits, workdir=workdir,
            labels=labels, sandbox=sandbox, approval_policy=approval_policy,
            strict_auto_review=strict_auto_review, preview_ports=preview_ports, allow_network=allow_network,
            deny_read=deny_read, idle_timeout=idle_timeout, max_lifetime=max_lifetime, spec=spec,
            on_approval=on_approval, on_image_pull=on_image_pull, auto_reconnect=auto_reconnect)

    async def fork_many(self, count: int = 1, *, memory: bool = False, name: str | None = None) -> list[Session]:
        """``count`` forks made by the server (1 to 16), each attached; with ``memory=True``
        (gVisor) every running process goes on in each, under the same process ids."""
        if not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= 16:
            raise v.fail("count must be an integer from 1 to 16")
        v.check_snapshot_name(name)
        params: dict[str, Any] = {"count": count, "memory": bool(memory)}
        if name is not None:
            params["name"] = name
        answer = await self.request("session/fork", params)
        return [await self.client.resume_session(str(s["sessionId"])) for s in answer["sessions"]]

    def _cut_connection(self) -> None:
        """Cuts the socket without a close handshake, as a network failure would (tests)."""
        if self._conn is not None:
            self._conn.abort()
