"""Exceptions: every server error carries its stable ``EXEC_ERR_*`` code.

One class per family of codes, so ``except NotFoundError`` catches a missing session,
process, approval or file alike, and ``err.code`` tells which. ``retryable`` says whether
the same call may succeed later unchanged (the server was busy, going down, or the engine
was unreachable). The codes are the server's registry (``_generated.ERROR_REGISTRY``, made
from src/errors.ts); ``FAMILIES`` must name each of them, which a test checks.
"""
from __future__ import annotations

import json
from typing import Any

from ._generated import ERROR_REGISTRY, RETRYABLE
from .results import ExecResult


class ExecServerError(Exception):
    """An error with a stable code (the server's, or the SDK's own for arguments)."""

    code: str
    retryable: bool
    status: int | None
    rpc_code: int | None
    data: dict[str, Any]  # the error's details: free-form, each code has its own (or none)

    def __init__(self, message: str, code: str = "EXEC_ERR_INTERNAL", *,
                 status: int | None = None, rpc_code: int | None = None,
                 data: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.retryable = code in RETRYABLE
        self.status = status
        self.rpc_code = rpc_code
        self.data = data or {}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.code}: {self.message})"


class InvalidRequestError(ExecServerError):
    """The request was malformed or out of order (bad params, unknown method...)."""


class InvalidArgumentError(InvalidRequestError, ValueError):
    """A bad argument caught by the SDK before anything was sent."""

    def __init__(self, message: str) -> None:
        super().__init__(message, "EXEC_ERR_INVALID_PARAMS")


class AuthError(ExecServerError):
    """The token is missing or wrong, or the caller's Origin may not use this server."""


class NotFoundError(ExecServerError):
    """A session, process, approval, file or image that does not exist."""


class ConflictError(ExecServerError):
    """The target is in a state that refuses the call (process id taken, still starting, stdin
    closed, session dead)."""


class StdinClosedError(ConflictError):
    """``write_stdin`` found the process's stdin closed: after ``close_stdin``, after the process
    ended, or on a process started without ``stdin="pipe"``. The input was not written. The
    code is the SDK's own (the server answers the write with the status ``stdinClosed``)."""

    def __init__(self, process_id: str) -> None:
        super().__init__(f"stdin of process {process_id} is closed: the input was not written",
                         "EXEC_ERR_STDIN_CLOSED")
        self.process_id = process_id


class LimitError(ExecServerError):
    """A quota or size limit was reached (sessions, processes, bytes, disk, busy)."""


class RejectedError(ExecServerError):
    """Refused by policy: an approval was denied or a path is off limits."""


class UnsupportedError(ExecServerError):
    """This server, backend or runtime cannot do that."""


class BackendError(ExecServerError):
    """The server or its backend failed (engine down, filesystem error, internal)."""


class ConnectionClosedError(ExecServerError):
    """The connection failed: the server could not be reached or did not answer in time, or the
    WebSocket closed while a call waited for its answer (the original error is ``__cause__``)."""

    def __init__(self, message: str, close_code: int | None = None) -> None:
        super().__init__(message, "EXEC_ERR_CONNECTION_CLOSED")
        self.close_code = close_code
        self.retryable = close_code != 4000


class HandleDisconnectedError(ExecServerError):
    """A wait or an iteration on a handle that ``Process.disconnect()`` detached from its process:
    nothing reaches the handle any more while the process runs on; ``Session.attach`` listens
    to it again. The SDK's own code, as for ``ConnectionClosedError``."""

    def __init__(self, process_id: str) -> None:
        super().__init__(f"handle of process {process_id} was disconnected (the process runs on; attach to it again)",
                         "EXEC_ERR_HANDLE_DISCONNECTED")
        self.process_id = process_id


class CommandExitError(ExecServerError):
    """``wait()`` or ``run()`` on a command that did not exit with 0 (unless ``check=False``)."""

    def __init__(self, result: ExecResult) -> None:
        how = (f"exit code {result.exit_code}" if result.terminal == "exited"
               else f"{result.terminal} ({result.signal or ''}), code {result.exit_code}")
        super().__init__(f"command {' '.join(result.argv)!r} failed: {how}", "EXEC_ERR_COMMAND_FAILED")
        self.result = result

    @property
    def exit_code(self) -> int:
        return self.result.exit_code


FAMILIES: dict[str, type[ExecServerError]] = {
    "EXEC_ERR_PARSE": InvalidRequestError,
    "EXEC_ERR_INVALID_REQUEST": InvalidRequestError,
    "EXEC_ERR_METHOD_NOT_FOUND": InvalidRequestError,
    "EXEC_ERR_INVALID_PARAMS": InvalidRequestError,
    "EXEC_ERR_NOT_INITIALIZED": InvalidRequestError,
    "EXEC_ERR_ALREADY_INITIALIZED": InvalidRequestError,
    "EXEC_ERR_TOOL_PAYLOAD": InvalidRequestError,
    "EXEC_ERR_UNAUTHORIZED": AuthError,
    "EXEC_ERR_ORIGIN_FORBIDDEN": AuthError,
    "EXEC_ERR_SESSION_NOT_FOUND": NotFoundError,
    "EXEC_ERR_PROCESS_NOT_FOUND": NotFoundError,
    "EXEC_ERR_APPROVAL_NOT_FOUND": NotFoundError,
    "EXEC_ERR_SNAPSHOT_IN_USE": ConflictError,
    "EXEC_ERR_NOT_FOUND": NotFoundError,
    "EXEC_ERR_SESSION_DEAD": ConflictError,
    "EXEC_ERR_PROCESS_EXISTS": ConflictError,
    "EXEC_ERR_PROCESS_STARTING": ConflictError,
    "EXEC_ERR_SESSION_LIMIT": LimitError,
    "EXEC_ERR_PROCESS_LIMIT": LimitError,
    "EXEC_ERR_TOO_LARGE": LimitError,
    "EXEC_ERR_BUSY": LimitError,
    "EXEC_ERR_DISK_LIMIT": LimitError,
    "EXEC_ERR_SNAPSHOT_LIMIT": LimitError,
    "EXEC_ERR_TOKEN_LIMIT": LimitError,
    "EXEC_ERR_REJECTED": RejectedError,
    "EXEC_ERR_FS_DENIED": RejectedError,
    "EXEC_ERR_SANDBOX_TYPE_FORBIDDEN": RejectedError,
    "EXEC_ERR_HOST_DIR_FORBIDDEN": RejectedError,
    "EXEC_ERR_UNSUPPORTED": UnsupportedError,
    "EXEC_ERR_FS": BackendError,
    "EXEC_ERR_BACKEND_UNAVAILABLE": BackendError,
    "EXEC_ERR_BACKEND": BackendError,
    "EXEC_ERR_SHUTTING_DOWN": BackendError,
    "EXEC_ERR_CONFIG": BackendError,
    "EXEC_ERR_INSTANCE_IN_USE": BackendError,
    "EXEC_ERR_TOKEN_SCOPE": AuthError,
    "EXEC_ERR_TOKEN_READ_ONLY": AuthError,
    "EXEC_ERR_TOKEN_EXPIRED": AuthError,
    "EXEC_ERR_TOKEN_REVOKED": AuthError,
    "EXEC_ERR_SPAWN_FAILED": InvalidRequestError,
    "EXEC_ERR_INTERNAL": BackendError,
}


def error_of(code: str | None, message: str, *, status: int | None = None,
             rpc_code: int | None = None, data: dict[str, Any] | None = None) -> ExecServerError:
    """The exception for a server error answer (an unknown code gets the base class)."""
    if code is None:
        code = _code_of_http_status(status) if status is not None else "EXEC_ERR_INTERNAL"
    cls = FAMILIES.get(code, ExecServerError)
    if status is None and code in ERROR_REGISTRY:
        status = ERROR_REGISTRY[code][0]
    return cls(message, code, status=status, rpc_code=rpc_code, data=data)


def error_of_answer(status: int, text: bytes, fallback: str) -> ExecServerError:
    """The exception for an HTTP error answer: the code and message of its JSON body, else
    what the status tells (a proxy's page carries no code)."""
    try:
        body = json.loads(text) if text else {}
    except ValueError:
        body = {"message": text.decode("utf-8", "replace")}
    if not isinstance(body, dict):
        body = {}
    code = body.get("code") if isinstance(body.get("code"), str) else None
    message = body.get("message") if isinstance(body.get("message"), str) else fallback
    return error_of(code, message, status=status, data=body)


def _code_of_http_status(status: int) -> str:
    """The code of an answer that carried none (a proxy in between), as the server maps it."""
    return {401: "EXEC_ERR_UNAUTHORIZED", 404: "EXEC_ERR_NOT_FOUND", 413: "EXEC_ERR_TOO_LARGE",
            429: "EXEC_ERR_BUSY"}.get(status, "EXEC_ERR_INTERNAL" if status >= 500 else "EXEC_ERR_INVALID_REQUEST")
