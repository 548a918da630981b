"""exec-server's Python SDK: run commands in sessions over WebSocket JSON-RPC and HTTP.

Async first (``AsyncClient``, ``Session``, ``Process``) with a synchronous ``Client`` over it.
The same concepts as the TypeScript SDK (docs/sdk.md); see docs/python-sdk.md.
"""
from ._generated import TOOL_DEFINITIONS
from ._http import http_base_of, ws_url_of
from ._spec import ApprovalPolicy, Limits
from ._tools import HttpSession, chat_completions_tools
from .client import AsyncClient
from .errors import (
    AuthError,
    BackendError,
    CommandExitError,
    ConflictError,
    ConnectionClosedError,
    ExecServerError,
    HandleDisconnectedError,
    InvalidArgumentError,
    InvalidRequestError,
    LimitError,
    NotFoundError,
    RejectedError,
    StdinClosedError,
    UnsupportedError,
)
from .process import Process, SignalName
from .results import ExecResult, OutputChunk, StreamName, Terminal
from .session import SandboxPermissions, Session, StartApproval
from .sync import Client, SyncHttpSession, SyncProcess, SyncSession

__version__ = "0.1.0"

__all__ = [
    "ApprovalPolicy", "AsyncClient", "AuthError", "BackendError", "Client", "CommandExitError", "ConflictError",
    "ConnectionClosedError", "ExecResult", "ExecServerError", "HandleDisconnectedError", "HttpSession",
    "InvalidArgumentError", "InvalidRequestError", "LimitError", "Limits", "NotFoundError", "OutputChunk", "Process",
    "RejectedError", "SandboxPermissions", "Session", "SignalName", "StartApproval", "StdinClosedError",
    "StreamName", "SyncHttpSession", "SyncProcess", "SyncSession", "TOOL_DEFINITIONS", "Terminal",
    "UnsupportedError", "chat_completions_tools", "http_base_of", "ws_url_of",
]
