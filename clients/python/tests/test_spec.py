"""Session spec keywords and spawn options: the same for every way to make a session, and
everything the server's protocol and the TypeScript SDK's ``ExecOptions`` have."""
from __future__ import annotations

import inspect
import json
import re
import subprocess
from collections.abc import Callable
from typing import Any, get_args

import pytest
from conftest import aio
from server import REPO, Server

from exec_server import (
    ApprovalPolicy, AsyncClient, RejectedError, SandboxPermissions, Session, SignalName, StartApproval, Terminal,
)

PROTOCOL = """
import('./src/protocol/index.ts').then((m) => console.log(JSON.stringify({
  spec: Object.keys(m.SessionSpecSchema.properties), terminal: m.TerminalStatusSchema,
  signals: m.SIGNAL_NAMES, approvalPolicy: m.ApprovalPolicySchema,
  sandboxPermissions: m.ProcessStartParams.properties.sandboxPermissions,
  approval: m.ProcessStartParams.properties.approval,
})));
"""
# Spec fields whose keyword is not their snake_case name.
RENAMED = {"resources": "limits", "network": "allow_network", "idleTimeoutSeconds": "idle_timeout",
           "maxLifetimeSeconds": "max_lifetime", "timeoutMs": "timeout"}
CALLBACKS = ["on_approval", "on_image_pull", "auto_reconnect"]


@pytest.fixture(scope="module")
def protocol() -> dict[str, Any]:
    run = subprocess.run(["node", "--import", "tsx", "-e", PROTOCOL], cwd=REPO, capture_output=True, text=True,
                         timeout=60, check=True)
    answer: dict[str, Any] = json.loads(run.stdout)
    return answer


def _consts(schema: Any) -> set[str]:
    """The string constants of a JSON schema's unions."""
    if isinstance(schema, dict):
        found = {schema["const"]} if isinstance(schema.get("const"), str) else set()
        return found.union(*(_consts(s) for s in schema.get("anyOf", [])))
    return set()


def _keyword(field: str) -> str:
    return RENAMED.get(field) or re.sub(r"[A-Z]", lambda m: "_" + m.group().lower(), field)


def _keywords(fn: Callable[..., Any]) -> list[inspect.Parameter]:
    return [p for p in inspect.signature(fn).parameters.values() if p.kind is inspect.Parameter.KEYWORD_ONLY]


def test_the_literal_types_are_the_protocols(protocol: dict[str, Any]) -> None:
    assert set(get_args(Terminal)) == _consts(protocol["terminal"])
    assert set(get_args(SignalName)) == {*protocol["signals"], "interrupt"}
    assert set(get_args(SandboxPermissions)) == _consts(protocol["sandboxPermissions"])
    assert set(get_args(StartApproval)) == _consts(protocol["approval"])
    assert set(get_args(get_args(ApprovalPolicy)[0])) == _consts(protocol["approvalPolicy"])


def test_every_spec_field_is_a_keyword_of_every_way_to_make_a_session(protocol: dict[str, Any]) -> None:
    spec = _keywords(AsyncClient.create_http_session)
    assert sorted(_keyword(f) for f in protocol["spec"]) == sorted(p.name for p in spec if p.name != "spec")
    assert _keywords(AsyncClient.create_sessions) == spec
    assert [p.name for p in _keywords(AsyncClient.create_session)] == [p.name for p in spec] + CALLBACKS
    assert _keywords(AsyncClient.create_session)[:len(spec)] == spec
    assert inspect.signature(AsyncClient.session) == inspect.signature(AsyncClient.create_session)
    assert _keywords(Session.fork) == [p for p in _keywords(AsyncClient.create_session) if p.name != "snapshot"]


def test_spawn_has_every_exec_option_of_the_typescript_sdk() -> None:
    client_ts = (REPO / "src" / "client" / "client.ts").read_text()
    block = re.search(r"export interface ExecOptions \{(.*?)\n\}", client_ts, re.S)
    assert block is not None
    options = re.findall(r"^  readonly (\w+)\??:", block.group(1), re.M)
    assert "sandboxPermissions" in options
    spawn = inspect.signature(Session.spawn).parameters
    assert [o for o in options if _keyword(o) not in spawn] == []


@aio
async def test_sandbox_permissions_ask_to_leave_the_sandbox(local_server: Server) -> None:
    asked: list[str] = []

    def deny(request: dict[str, Any]) -> str:
        asked.append(request["reason"])
        return "denied"

    client = AsyncClient(local_server.url, local_server.token)
    async with client.session(approval_policy="never", on_approval=deny) as s:
        assert (await s.run(["true"], sandbox_permissions="use-default")).exit_code == 0
        with pytest.raises(RejectedError, match="escalated permissions"):
            await s.spawn(["true"], sandbox_permissions="require-escalated")
    async with client.session(approval_policy="on-request", on_approval=deny) as s:
        with pytest.raises(RejectedError):
            await s.run(["true"], sandbox_permissions="require-escalated")
    assert asked == ["command asks to run without the sandbox"]


@aio
async def test_strict_auto_review_asks_despite_an_approval_hint(local_server: Server) -> None:
    asked: list[list[str]] = []

    def deny(request: dict[str, Any]) -> str:
        asked.append(request["argv"])
        return "denied"

    client = AsyncClient(local_server.url, local_server.token)
    async with client.session(approval_policy="untrusted", on_approval=deny) as s:
        assert (await s.run(["echo", "hinted"], approval="approved")).stdout == "hinted\n"
    assert asked == []
    async with client.session(approval_policy="untrusted", strict_auto_review=True, on_approval=deny) as s:
        with pytest.raises(RejectedError):
            await s.run(["echo", "hinted"], approval="approved")
    assert asked == [["echo", "hinted"]]


@aio
async def test_batch_and_http_creates_take_the_same_keywords(local_server: Server) -> None:
    client = AsyncClient(local_server.url, local_server.token)
    infos = await client.create_sessions(2, approval_policy="never", labels={"run": "kw"}, idle_timeout=600,
                                         limits={"pids": 64}, strict_auto_review=True)
    tools = await client.create_http_session(approval_policy="untrusted", labels={"run": "kw"})
    made = [i["sessionId"] for i in infos] + [tools.id]
    try:
        answers = [await client.get_session(i) for i in made]
        assert [(a["approvalPolicy"], a["labels"]) for a in answers] == [
            ("never", {"run": "kw"}), ("never", {"run": "kw"}), ("untrusted", {"run": "kw"})]
        assert (await tools.exec_command("true"))["status"] == "approval_required"
    finally:
        for i in made:
            await client.delete_session(i)
