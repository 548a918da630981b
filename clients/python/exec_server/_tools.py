"""The tool facade (Codex unified exec over HTTP) as session methods.

``TOOL_DEFINITIONS`` (generated from the server's schemas) go to the model as its tools; each
tool call the model answers goes back with ``await session.route_tool_call(item)``, which
returns the ``function_call_output`` item to give the model (or None for an item that is not
a tool call).
"""
from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, TypeGuard

from ._generated import (TOOL_DEFINITIONS, ApprovalDecision, ApprovalRequired, ExecToolResult, FunctionCallOutput,
                         PendingApproval)
from ._http import seg
from .errors import InvalidArgumentError

if TYPE_CHECKING:
    from ._http import HttpApi

__all__ = ["TOOL_DEFINITIONS", "HttpSession", "ToolsMixin", "chat_completions_tools", "is_approval_required"]


def is_approval_required(answer: ExecToolResult | FunctionCallOutput | ApprovalRequired | None
                         ) -> TypeGuard[ApprovalRequired]:
    """Whether a tool answer waits for a person (``decide_approval``) rather than being the call's result."""
    return answer is not None and answer.get("status") == "approval_required"


# A dict: the definitions are JSON Schema for a model, free-form by nature.
def chat_completions_tools() -> list[dict[str, Any]]:
    """The same definitions in the Chat Completions shape (``{"type": "function", "function": ...}``)."""
    return [{"type": "function", "function": {k: d[k] for k in ("name", "description", "parameters")}}
            for d in TOOL_DEFINITIONS]


class ToolsMixin:
    http: HttpApi
    id: str

    def _path(self, tail: str) -> str:
        return f"/v1/sessions/{seg(self.id)}/{tail}"

    # ``self`` positional-only: next to ``**args``, mypy binds sync.py's ParamSpec wrapper only so.
    async def exec_command(self, /, cmd: str, **args: Any) -> ExecToolResult | ApprovalRequired:
        """``exec_command``: ``{output, exit_code | session_id, text, ...}`` (or ``approval_required``)."""
        if not isinstance(cmd, str) or not cmd:
            raise InvalidArgumentError("cmd must be a non-empty string")
        answer: ExecToolResult | ApprovalRequired = await self.http.request(
            "POST", self._path("exec_command"), {"cmd": cmd, **args})
        return answer

    async def write_stdin_tool(self, /, session_id: int, chars: str = "",
                               **args: Any) -> ExecToolResult | ApprovalRequired:
        """``write_stdin`` of the facade: writes to (or polls) the command ``session_id`` names."""
        if not isinstance(session_id, int) or isinstance(session_id, bool):
            raise InvalidArgumentError("session_id must be the integer exec_command answered")
        body = {"session_id": session_id, "chars": chars, **args}
        answer: ExecToolResult | ApprovalRequired = await self.http.request("POST", self._path("write_stdin"), body)
        return answer

    # ``item`` is a dict: a model's response item, free-form (whatever its SDK hands over).
    async def route_tool_call(self, item: dict[str, Any] | Any) -> FunctionCallOutput | ApprovalRequired | None:
        """Routes a model's tool-call item (a dict, or an SDK object with ``model_dump``/``to_dict``).

        Answers ``{"type": "function_call_output", "call_id", "output"}`` for the model, an
        ``approval_required`` answer when a person must decide first, or None when the item is
        not a tool call.
        """
        for attr in ("model_dump", "to_dict"):
            if not isinstance(item, dict) and hasattr(item, attr):
                item = getattr(item, attr)()
        if not isinstance(item, dict):
            raise InvalidArgumentError("a tool call item must be a dict")
        if item.get("type") is None and "function" in item:  # Chat Completions tool_call
            fn = item["function"]
            item = {"type": "function_call", "call_id": item.get("id"), "name": fn.get("name"),
                    "arguments": fn.get("arguments")}
        if isinstance(item.get("arguments"), dict):
            item = {**item, "arguments": json.dumps(item["arguments"])}
        answer: FunctionCallOutput | ApprovalRequired | None = await self.http.request(
            "POST", self._path("tool-calls"), item)
        return answer

    async def list_approvals(self) -> list[PendingApproval]:
        """Approvals waiting for a person (sessions without an attached WebSocket client)."""
        approvals: list[PendingApproval] = (await self.http.request("GET", self._path("approvals")))["approvals"]
        return approvals

    async def decide_approval(self, approval_id: str,
                              decision: ApprovalDecision) -> ExecToolResult | FunctionCallOutput | ApprovalRequired:
        """Decides a pending approval; answers the original call's result (``exec_command``,
        ``write_stdin_tool``), its ``function_call_output`` (``route_tool_call``), or the next approval."""
        path = self._path(f"approvals/{seg(approval_id)}")
        answer: ExecToolResult | FunctionCallOutput | ApprovalRequired = await self.http.request(
            "POST", path, {"decision": decision})
        return answer


class HttpSession(ToolsMixin):
    """The tool facade of a session by its id, over HTTP only (no WebSocket attached).

    With no client attached, an approval is not asked of a callback: the call answers
    ``{"status": "approval_required", "approval_id", ...}`` and ``decide_approval`` resumes it.
    """

    def __init__(self, http: HttpApi, session_id: str) -> None:
        self.http = http
        self.id = session_id
