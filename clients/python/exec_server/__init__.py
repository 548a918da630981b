"""exec-server's Python SDK: run commands in sessions over WebSocket JSON-RPC and HTTP.

Async first (``AsyncClient``, ``Session``, ``Process``) with a synchronous ``Client`` over it.
The same concepts as the TypeScript SDK (docs/sdk.md); see docs/python-sdk.md.
"""
from ._generated import (
    TOOL_DEFINITIONS,
    ApprovalDecision,
    ApprovalPurpose,
    ApprovalRequest,
    ApprovalRequired,
    DirectoryEntry,
    EgressInfo,
    EnvironmentInfo,
    ExecToolResult,
    ExposedPort,
    FileMetadata,
    FunctionCallOutput,
    HibernationAnswer,
    HibernationState,
    ImagePull,
    InitializeResult,
    PendingApproval,
    PreviewAnswer,
    ProcessSummary,
    ResourceUsage,
    SandboxPolicy,
    SessionInfo,
    SessionToken,
    SnapshotInfo,
    TokenAccess,
)
from ._http import http_base_of, ws_url_of
from ._sharing import ExposedPreview
from ._spec import ApprovalCallback, ApprovalPolicy, ImagePullCallback, Limits
from ._tools import HttpSession, chat_completions_tools, is_approval_required
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
    "ApprovalCallback", "ApprovalDecision", "ApprovalPolicy", "ApprovalPurpose", "ApprovalRequest",
    "ApprovalRequired", "AsyncClient", "AuthError", "BackendError", "Client", "CommandExitError", "ConflictError",
    "ConnectionClosedError", "DirectoryEntry", "EgressInfo", "EnvironmentInfo", "ExecResult", "ExecServerError",
    "ExecToolResult", "ExposedPort", "ExposedPreview", "FileMetadata", "FunctionCallOutput",
    "HandleDisconnectedError", "HibernationAnswer", "HibernationState", "HttpSession", "ImagePull",
    "ImagePullCallback", "InitializeResult", "InvalidArgumentError", "InvalidRequestError", "LimitError", "Limits",
    "NotFoundError", "OutputChunk", "PendingApproval", "PreviewAnswer", "Process", "ProcessSummary",
    "RejectedError", "ResourceUsage", "SandboxPermissions", "SandboxPolicy", "Session", "SessionInfo",
    "SessionToken", "SignalName", "SnapshotInfo", "StartApproval", "StdinClosedError", "StreamName",
    "SyncHttpSession", "SyncProcess", "SyncSession", "TOOL_DEFINITIONS", "Terminal", "TokenAccess",
    "UnsupportedError", "chat_completions_tools", "http_base_of", "is_approval_required", "ws_url_of",
]
