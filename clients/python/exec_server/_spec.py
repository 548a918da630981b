"""The session spec (docs/protocol.md, "Session spec") from the SDK's snake_case keywords.

One builder for every way a session is made, so that each takes the same keywords: over the
WebSocket (``create_session``, ``session``, ``fork``) and over HTTP (``create_sessions``,
``create_http_session``).
"""
from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Literal, TypedDict

from . import _validate as v
from ._generated import ApprovalRequest, ImagePull

__all__ = ["ApprovalCallback", "ApprovalPolicy", "ImagePullCallback", "Limits", "session_spec"]

ApprovalCallback = Callable[[ApprovalRequest], str | Awaitable[str]]
"""Decides an ``approval/request``: ``approved``, ``approved-for-session``, ``denied`` or ``abort``."""
ImagePullCallback = Callable[[ImagePull], None]
"""Hears each ``session/imagePull`` of the pull a session's creation waits for."""

ApprovalPolicy = Literal["untrusted", "on-failure", "on-request", "never"] | Mapping[str, Mapping[str, bool]]
"""A named policy, or ``{"granular": {"sandboxApproval": bool}}``."""


class Limits(TypedDict, total=False):
    """The session's resources (``resources`` of the spec)."""

    memory_mb: int
    cpus: float
    pids: int
    disk_mb: int


def session_spec(*, image: str | None, runtime: str | None, env: Mapping[str, str] | None,
                 limits: Limits | None, snapshot: str | None, workdir: str | None,
                 labels: Mapping[str, str] | None, sandbox: Mapping[str, Any] | None,
                 approval_policy: ApprovalPolicy | None, strict_auto_review: bool | None,
                 preview_ports: bool | None, allow_network: list[str] | None,
                 deny_read: list[str] | None, idle_timeout: int | None, max_lifetime: int | None,
                 spec: Mapping[str, Any] | None) -> dict[str, Any]:
    """The wire spec: ``spec`` (a raw one, camelCase) overlaid with the keywords given."""
    body: dict[str, Any] = dict(spec or {})
    if image is not None:
        if not isinstance(image, str) or not image:
            raise v.fail("image must be a non-empty string")
        body["image"] = image
    if runtime is not None:
        body["runtime"] = v.check_runtime(runtime)
    if env is not None:
        body["env"] = v.check_env(env)
    if limits is not None:
        body["resources"] = v.check_resources(limits)
    if snapshot is not None:
        body["snapshot"] = snapshot
    if workdir is not None:
        body["workdir"] = v.check_path(workdir, "workdir")
    if labels is not None:
        body["labels"] = v.check_labels(labels)
    if sandbox is not None:
        body["sandbox"] = dict(sandbox)
    if approval_policy is not None:
        body["approvalPolicy"] = v.check_approval_policy(approval_policy)
    if strict_auto_review is not None:
        body["strictAutoReview"] = bool(strict_auto_review)
    if preview_ports is not None:
        body["previewPorts"] = bool(preview_ports)
    if allow_network is not None:
        if isinstance(allow_network, str) or not all(isinstance(e, str) and e for e in allow_network):
            raise v.fail("allow_network must be a list of non-empty strings")
        body["network"] = {"allow": list(allow_network)}
    if deny_read is not None:
        if isinstance(deny_read, str):
            raise v.fail("deny_read must be a list of absolute paths")
        body["denyRead"] = [v.check_path(p, "deny_read") for p in deny_read]
    for key, value in (("idleTimeoutSeconds", idle_timeout), ("maxLifetimeSeconds", max_lifetime)):
        if value is not None:
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise v.fail(f"{key} must be a positive integer of seconds")
            body[key] = value
    return body
