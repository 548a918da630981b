"""Fixtures: one real server per backend for the whole run (docker when an engine answers;
under CI=true a missing engine fails instead of skipping)."""
from __future__ import annotations

import asyncio
import functools
import os
import subprocess
import sys
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, TypeVar

import pytest

sys.path.insert(0, os.path.dirname(__file__))

from server import TEST_IMAGE, Server  # noqa: E402

T = TypeVar("T")
IN_CI = os.environ.get("CI") in ("true", "1")


def docker_ready() -> str | None:
    """Why docker tests cannot run, or None."""
    try:
        subprocess.run(["docker", "image", "inspect", TEST_IMAGE], check=True, capture_output=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as err:
        return f"no docker engine or test image {TEST_IMAGE}: {err}"
    return None


def gvisor_ready() -> bool:
    """Whether the engine has gVisor registered as ``runsc`` (scripts/start-dockerd.sh does it)."""
    try:
        out = subprocess.run(["docker", "info", "--format", "{{json .Runtimes}}"], capture_output=True,
                             text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return False
    return '"runsc"' in out


def require_gvisor() -> None:
    if not gvisor_ready():
        message = "the docker engine has no runsc runtime (gVisor): run scripts/start-dockerd.sh with runsc installed"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)


_servers: dict[str, Server] = {}


def server_for(backend: str) -> Server:
    if backend == "docker":
        reason = docker_ready()
        if reason is not None:
            if IN_CI:
                pytest.fail(reason)
            pytest.skip(reason)
    if backend not in _servers:
        flags = ["--allowed-runtimes", "runsc"] if backend == "docker" and gvisor_ready() else []
        _servers[backend] = Server(backend, flags)
    return _servers[backend]


@pytest.fixture(scope="session", params=["local", "docker"])
def server(request: pytest.FixtureRequest) -> Iterator[Server]:
    yield server_for(request.param)


@pytest.fixture(scope="session")
def local_server() -> Server:
    return server_for("local")


@pytest.fixture(scope="session")
def docker_server() -> Server:
    return server_for("docker")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    for s in _servers.values():
        s.stop()


def aio(fn: Callable[..., Coroutine[Any, Any, T]]) -> Callable[..., T]:
    """Runs an async test on a fresh event loop (no plugin needed)."""
    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> T:
        return asyncio.run(asyncio.wait_for(fn(*args, **kwargs), 120))
    return run
