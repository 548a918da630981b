"""What mypy --strict says of code using the SDK: right calls pass, every wrong one is flagged."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import exec_server

GOOD = '''
from exec_server import (AsyncClient, Client, ExecResult, ImagePull, SessionInfo, SyncHttpSession, SyncProcess,
                         SyncSession, Terminal, is_approval_required)


def heard(pull: ImagePull) -> None:
    print(pull["phase"], pull["currentBytes"] + 1, pull.get("error"))


async def amain(client: AsyncClient) -> Terminal:
    async with client.session(image="python:3.12", limits={"pids": 64}, strict_auto_review=True,
                              on_image_pull=heard) as s:
        p = await s.spawn("true", sandbox_permissions="require-escalated", approval="approved-for-session")
        await p.kill("SIGKILL")
        await p.signal("interrupt")
        infos: list[SessionInfo] = await client.create_sessions(2, approval_policy="never")
        print(infos, await client.create_http_session(approval_policy={"granular": {"sandboxApproval": True}}))
        size: float = (await s.stat("/x"))["size"]
        names: list[str] = [e["fileName"] for e in await s.list_dir("/")]
        usage = (await s.info()).get("usage")
        memory: int | None = usage["memoryBytes"] if usage is not None else None
        token_id: str = (await s.create_token(access="read"))["tokenId"]
        url: str = (await s.expose_port(3000))["signed_url"]
        answer = await s.exec_command("ls")
        if is_approval_required(answer):
            print(answer["approval"]["argv"], await s.decide_approval(answer["approval_id"], "approved"))
        print(size, names, memory, token_id, url, (await s.snapshot())["snapshotId"])
        return (await p.wait()).terminal


def smain(c: Client, r: ExecResult) -> Terminal:
    with c.session(image="x", approval_policy="on-request", allow_network=["example.com"]) as s:
        s.run("true", timeout=5, sandbox_permissions="use-default", approval="approved")
        p: SyncProcess = s.spawn("true", check=False)
        p.kill("SIGTERM")
        s.upload("/x", b"", chunk_size=1)
        data: bytes | int = s.download("/x", offset=1, chunk_size=2)
        n: int = s.terminate_all()
        forked: SyncSession = s.fork("n", labels={"k": "v"})
        forks: list[SyncSession] = s.fork_many(2)
        tools: SyncHttpSession = c.create_http_session(approval_policy="untrusted")
        print(data, n, forked, forks, tools.exec_command("ls"), c.http_session("id").list_approvals())
        return p.wait().terminal if r.terminal == "exited" else r.terminal
'''

BAD = '''
from exec_server import AsyncClient, Client


async def amain(client: AsyncClient) -> None:
    async with client.session(imag="python:3.12") as s:  # E
        await client.create_sessions(2, approvalPolicy="never")  # E
        await client.create_http_session(approval_policy="sometimes")  # E
        p = await s.spawn("true", sandbox_permissions="escalated")  # E
        await s.run("true", approval="denied")  # E
        await p.kill("SIGSTOP")  # E
        await s.fork(snapshot="other")  # E
        await client.create_session(limits={"pid": 8})  # E
        (await s.stat("/x"))["sise"]  # E
        name: int = (await s.info())["sessionId"]  # E
        await s.create_token(access="admin")  # E
        [p["pid"] for p in await s.list_processes()]  # E
        (await s.hibernate())["state"]  # E
        await s.decide_approval("a1", "maybe")  # E


def smain(c: Client) -> None:
    with c.session(imag="x") as s:  # E
        s.run("true", timout=5)  # E
        s.spawn("true", chek=False)  # E
        s.upload("/x", b"", chunksize=1)  # E
        c.create_sessions(2, approvalPolicy="never")  # E
        s.spawn("true").kill("SIGSTOP")  # E
        c.http_session("id").exec_command(5)  # E
        finished: bool = s.spawn("true").wait().terminal == "finished"  # E
        print(finished)
'''


def test_mypy_passes_right_calls_and_flags_wrong_ones(tmp_path: Path) -> None:
    # The package mypy checks against is the one imported here (installed or the checkout's).
    (tmp_path / "exec_server").symlink_to(Path(exec_server.__file__).parent, target_is_directory=True)
    (tmp_path / "good.py").write_text(GOOD)
    (tmp_path / "bad.py").write_text(BAD)
    run = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--cache-dir",
                          str(tmp_path / ".cache"), "good.py", "bad.py"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=300)
    errors = re.findall(r"^(\w+)\.py:(\d+): error", run.stdout, re.M)
    assert [line for file, line in errors if file != "bad"] == [], run.stdout
    expected = [str(i) for i, text in enumerate(BAD.splitlines(), 1) if text.endswith("# E")]
    assert sorted({line for _, line in errors}, key=int) == expected, run.stdout
