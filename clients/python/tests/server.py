"""A real exec-server for the tests: ``node bin/exec-server.js serve`` from the checkout."""
from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
TEST_IMAGE = os.environ.get("EXEC_SERVER_TEST_IMAGE", "exec-server-test:latest")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Server:
    """One server process on 127.0.0.1 with a token; ``stop()`` ends it and removes its workspaces."""

    def __init__(self, backend: str = "local", flags: list[str] | None = None,
                 succeeds: Server | None = None) -> None:
        """``succeeds``: the next server at that server's address, token and instance id (a rollout)."""
        self.backend = backend
        self.token: str = succeeds.token if succeeds else secrets.token_hex(16)
        self.port: int = succeeds.port if succeeds else free_port()
        self.url = f"ws://127.0.0.1:{self.port}"
        self.http_url = f"http://127.0.0.1:{self.port}"
        self.workspaces = tempfile.mkdtemp(prefix="exec-server-pytest-")
        self.log = open(Path(self.workspaces).with_suffix(".log"), "wb")
        args = [shutil.which("node") or "node", str(REPO / "bin" / "exec-server.js"), "serve",
                "--listen", self.url, "--backend", backend, "--workspace-root", self.workspaces,
                "--token", self.token, "--terminate-grace-ms", "500", "--log-level", "info",
                "--log-format", "json", *(flags or [])]
        if backend == "docker":
            args += ["--image", TEST_IMAGE, "--instance-id", f"pytest-{os.getpid()}-{self.port}"]
        self.proc = subprocess.Popen(args, cwd=REPO, stdout=self.log, stderr=subprocess.STDOUT)
        self._wait_ready()

    def _wait_ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}: {self.read_log()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{self.http_url}/healthz", timeout=1) as res:
                    if res.status == 200:
                        return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError(f"server did not answer in {timeout} s: {self.read_log()[-2000:]}")

    def read_log(self) -> str:
        self.log.flush()
        return Path(self.log.name).read_text(errors="replace")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
        shutil.rmtree(self.workspaces, ignore_errors=True)
        Path(self.log.name).unlink(missing_ok=True)
