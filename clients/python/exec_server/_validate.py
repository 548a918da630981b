"""Argument checks made before anything is sent (the server's own limits, src/protocol/)."""
from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from ._generated import SIGNAL_NAMES
from .errors import InvalidArgumentError

T = TypeVar("T")

_RUNTIME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
_LABEL = re.compile(r"^[A-Za-z0-9_.-]{1,63}$")
_SNAPSHOT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
APPROVAL_POLICIES = ("untrusted", "on-failure", "on-request", "never")
DECISIONS = ("approved", "approved-for-session", "denied", "abort")
SANDBOX_PERMISSIONS = ("use-default", "require-escalated")
START_APPROVALS = ("approved", "approved-for-session")


def fail(message: str) -> InvalidArgumentError:
    return InvalidArgumentError(message)


def argv_of(argv_or_cmd: str | Sequence[str]) -> list[str]:
    """A string is a shell command line (``sh -c``); a sequence is the argv as it is."""
    if isinstance(argv_or_cmd, str):
        if not argv_or_cmd.strip():
            raise fail("command must not be empty")
        return ["sh", "-c", argv_or_cmd]
    if isinstance(argv_or_cmd, (bytes, bytearray)) or not isinstance(argv_or_cmd, Sequence):
        raise fail(f"argv must be a string or a sequence of strings, not {type(argv_or_cmd).__name__}")
    argv = list(argv_or_cmd)
    if not argv:
        raise fail("argv must not be empty")
    for i, a in enumerate(argv):
        if not isinstance(a, str):
            raise fail(f"argv[{i}] must be a string, not {type(a).__name__}")
        if "\0" in a:
            raise fail(f"argv[{i}] contains a NUL byte")
    return argv


def check_path(path: object, what: str = "path") -> str:
    if not isinstance(path, str) or not (path.startswith("/") or path.startswith("file://")):
        raise fail(f"{what} must be an absolute path, not {path!r}")
    if "\0" in path:
        raise fail(f"{what} contains a NUL byte")
    return path


def check_env(env: object, what: str = "env") -> dict[str, str]:
    if not isinstance(env, Mapping):
        raise fail(f"{what} must be a mapping of strings")
    for k, v in env.items():
        if not isinstance(k, str) or not k or not isinstance(v, str):
            raise fail(f"{what}: {k!r} must map a non-empty string to a string")
    return dict(env)


def check_size(cols: object, rows: object) -> None:
    for name, v in (("cols", cols), ("rows", rows)):
        if not isinstance(v, int) or isinstance(v, bool) or not 1 <= v <= 1000:
            raise fail(f"{name} must be an integer in 1..1000, not {v!r}")


def check_signal(signal: object) -> None:
    if signal != "interrupt" and signal not in SIGNAL_NAMES:
        raise fail(f"signal must be one of {', '.join(SIGNAL_NAMES)} or interrupt, not {signal!r}")


def check_timeout(timeout: object) -> int | None:
    """Seconds (int or float) as the server's ``timeoutMs``."""
    if timeout is None:
        return None
    if not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or timeout <= 0:
        raise fail(f"timeout must be a positive number of seconds, not {timeout!r}")
    return max(1, round(timeout * 1000))


def check_snapshot_name(name: object) -> None:
    if name is not None and (not isinstance(name, str) or not _SNAPSHOT_NAME.match(name)):
        raise fail(f"snapshot name must match [A-Za-z0-9][A-Za-z0-9_.-]{{0,127}}, not {name!r}")


def _positive_int(v: object, minimum: int, what: str) -> None:
    if not isinstance(v, int) or isinstance(v, bool) or v < minimum:
        raise fail(f"{what} must be an integer >= {minimum}, not {v!r}")


def check_resources(limits: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in limits.items():
        if key in ("memory_mb", "memoryMb"):
            _positive_int(value, 16, "limits.memory_mb")
            out["memoryMb"] = value
        elif key in ("pids",):
            _positive_int(value, 8, "limits.pids")
            out["pids"] = value
        elif key in ("disk_mb", "diskMb"):
            _positive_int(value, 16, "limits.disk_mb")
            out["diskMb"] = value
        elif key == "cpus":
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
                raise fail(f"limits.cpus must be a positive number, not {value!r}")
            out["cpus"] = value
        else:
            raise fail(f"unknown limit {key!r} (memory_mb, cpus, pids, disk_mb)")
    return out


def check_labels(labels: Mapping[str, str]) -> dict[str, str]:
    for k, v in labels.items():
        if not isinstance(k, str) or not _LABEL.match(k) or not isinstance(v, str) or len(v) > 256:
            raise fail(f"label {k!r}: name [A-Za-z0-9_.-]{{1,63}} and a string of at most 256")
    return dict(labels)


def check_runtime(runtime: object) -> str:
    if not isinstance(runtime, str) or not _RUNTIME.match(runtime):
        raise fail(f"runtime must match [A-Za-z0-9][A-Za-z0-9_.-]*, not {runtime!r}")
    return runtime


def check_approval_policy(policy: object) -> object:
    if isinstance(policy, str) and policy in APPROVAL_POLICIES:
        return policy
    if isinstance(policy, Mapping) and set(policy) == {"granular"}:
        return dict(policy)
    raise fail(f"approval_policy must be one of {', '.join(APPROVAL_POLICIES)} or {{'granular': ...}}")


def check_choice(value: T, choices: tuple[str, ...], what: str) -> T:
    if value not in choices:
        raise fail(f"{what} must be one of {', '.join(choices)}, not {value!r}")
    return value


def check_port(port: object) -> int:
    if not isinstance(port, int) or isinstance(port, bool) or not 1 <= port <= 65535:
        raise fail(f"port must be an integer in 1..65535, not {port!r}")
    return port
