"""Processes: run, spawn, streaming and UTF-8, stdin, PTY, signals, timeouts, big output."""
from __future__ import annotations

import asyncio
import hashlib
import os
import sys
import time

import pytest
from conftest import aio
from server import Server

from exec_server import AsyncClient, CommandExitError, ConflictError
from exec_server.results import StreamName


@aio
async def test_run_output_and_exit(server: Server) -> None:
    async with AsyncClient(server.url, server.token) as client, client.session() as s:
        r = await s.run(["sh", "-c", "echo hello; echo warning >&2"])
        assert (r.exit_code, r.stdout, r.stderr, r.terminal) == (0, "hello\n", "warning\n", "exited")
        assert r.stdout_bytes == b"hello\n"
        assert (await s.run("echo $((6*7))")).stdout == "42\n"
        with pytest.raises(CommandExitError) as info:
            await s.run("echo broken >&2; exit 3")
        assert info.value.exit_code == 3 and info.value.result.stderr == "broken\n"
        assert (await s.run("exit 2", check=False)).exit_code == 2
        assert (await s.run(["env"], env={"GREETING": "hi"})).stdout.count("GREETING=hi") == 1
        assert (await s.run("pwd", cwd="/tmp")).stdout == "/tmp\n"


@aio
async def test_stream_chunks_decode_utf8_across_boundaries(server: Server) -> None:
    async with AsyncClient(server.url, server.token) as client, client.session() as s:
        # é (c3 a9) and 😀 (f0 9f 98 80) split across writes, so across chunks; the output ends inside
        # a character (c3): the decoder's flush at the end gives U+FFFD.
        cmd = r"printf 'a\303'; sleep 0.3; printf '\251b\360\237'; sleep 0.3; printf '\230\200'; " \
              r"printf 'err\n' >&2; sleep 0.2; printf '\303'"
        proc = await s.spawn(cmd)
        chunks = [c async for c in proc]
        out = [c for c in chunks if c.stream == "stdout"]
        assert len(out) >= 3, out
        assert "".join(c.text for c in out) == "aé" + "b😀" + "\ufffd"
        assert b"".join(c.data for c in out) == b"a\xc3\xa9b\xf0\x9f\x98\x80\xc3"
        assert out[-1].data == b"" and out[-1].text == "\ufffd"  # the flush
        assert [c.text for c in chunks if c.stream == "stderr"] == ["err\n"]
        assert [c.seq for c in chunks if c.data] == sorted(c.seq for c in chunks if c.data)
        result = await proc.wait()
        assert result.stdout == "aéb😀\ufffd" and result.stderr == "err\n"
        # A stream of its own, from the start, after the fact.
        assert "".join([c.text async for c in proc.output("stderr")]) == ""


@aio
async def test_stdin_pipe_and_given(server: Server) -> None:
    async with AsyncClient(server.url, server.token) as client, client.session() as s:
        assert (await s.run(["tr", "a-z", "A-Z"], stdin="given at once\n")).stdout == "GIVEN AT ONCE\n"
        counter = await s.spawn("n=0; while read line; do n=$((n+1)); done; echo \"$n lines\"", stdin="pipe")
        await counter.write_stdin("one\n")
        await counter.write_stdin(b"two\n")
        await counter.close_stdin()
        assert (await counter.wait()).stdout == "2 lines\n"


@aio
async def test_pty_with_resize(server: Server) -> None:
    async with AsyncClient(server.url, server.token) as client, client.session() as s:
        term = await s.spawn("stty size; read answer; stty size; echo \"answer=$answer\"", tty=True, size=(80, 24))
        screen, answered = "", False
        async for chunk in term:
            assert chunk.stream == "pty"
            screen += chunk.text
            if "24 80" in screen and not answered:
                await term.resize(120, 40)
                await term.write_stdin("yes\r")
                answered = True
        result = await term.wait()
        assert result.pty == "24 80\r\nyes\r\n40 120\r\nanswer=yes\r\n"
        assert result.output == result.pty


@aio
async def test_signals_kill_and_timeouts(server: Server) -> None:
    async with AsyncClient(server.url, server.token) as client, client.session() as s:
        sleeper = await s.spawn(["sleep", "30"], check=False)
        with pytest.raises(TimeoutError):
            await sleeper.wait(timeout=0.3)  # the wait gives up, the process goes on
        assert not sleeper.done
        await sleeper.signal("SIGINT")
        r = await sleeper.wait()
        assert (r.terminal, r.signal, r.exit_code) == ("signaled", "SIGINT", 130)
        other = await s.spawn(["sleep", "30"], check=False)
        await other.kill()
        assert (await other.wait()).terminal == "terminated"
        timed = await s.run(["sleep", "30"], timeout=0.5, check=False)
        assert (timed.terminal, timed.exit_code) == ("timed-out", 124)


@aio
async def test_32mb_output_arrives_whole_to_a_slow_reader(server: Server) -> None:
    size = 32 * 1024 * 1024
    async with AsyncClient(server.url, server.token) as client, client.session() as s:
        proc = await s.spawn(f"head -c {size} /dev/urandom > /tmp/big && cat /tmp/big", collect=False)
        digest = hashlib.sha256()
        received = 0
        async for chunk in proc.output("stdout"):
            digest.update(chunk.data)
            received += len(chunk.data)
            if received < 8 * 1024 * 1024:
                await asyncio.sleep(0.005)  # slow for the first 8 MB: far behind the server
        await proc.wait()
        assert received == size
        check = await s.run("sha256sum /tmp/big")
        assert check.stdout.split()[0] == digest.hexdigest()


@aio
async def test_a_refused_duplicate_id_leaves_the_running_handle(server: Server) -> None:
    async with AsyncClient(server.url, server.token) as client, client.session() as s:
        first = await s.spawn("read go; echo done", stdin="pipe", process_id="dup")
        with pytest.raises(ConflictError) as dup:
            await s.spawn(["true"], process_id="dup")
        assert dup.value.code == "EXEC_ERR_PROCESS_EXISTS"
        await first.write_stdin("\n")
        assert (await first.wait(timeout=20)).stdout == "done\n"


@aio
async def test_each_stream_iteration_gets_its_own_early_output(server: Server) -> None:
    async with AsyncClient(server.url, server.token) as client, client.session() as s:
        proc = await s.spawn("echo out1; echo err1 >&2; read go; echo out2; echo err2 >&2", stdin="pipe")
        while proc.last_seq < 2:  # both early lines arrived, before any iteration
            await asyncio.sleep(0.01)

        async def take(stream: StreamName) -> str:
            return "".join([c.text async for c in proc.output(stream)])
        out = asyncio.create_task(take("stdout"))
        err = asyncio.create_task(take("stderr"))
        await proc.write_stdin("\n")
        assert (await out, await err) == ("out1\nout2\n", "err1\nerr2\n")
        assert [c.text async for c in proc] == []  # every stream's early output was taken


@aio
async def test_the_backlog_bound_counts_text_and_bytes(server: Server) -> None:
    bound = 1024 * 1024
    async with AsyncClient(server.url, server.token) as client, client.session() as s:
        proc = await s.spawn("yes 'aé€😀' | head -c 4000000", collect=False, backlog_bytes=bound)
        await proc.wait()
        kept = [c async for c in proc]
        held = sum(sys.getsizeof(c.data) + sys.getsizeof(c.text) for c in kept)
        assert kept and held <= bound, held
        assert sum(len(c.data) for c in kept) > bound // 4  # the newest output, not a few chunks


def _wait_for_file(path: str, timeout: float = 30) -> None:
    """Blocks (the event loop too, as a stalled client would) until ``path`` exists."""
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        assert time.monotonic() < deadline, f"{path} did not appear"
        time.sleep(0.02)


@aio
async def test_output_lost_during_a_drop_is_counted(local_server: Server) -> None:
    # More than the server retains (1 MiB) comes while the connection is down and nobody reads.
    size = 3_000_000
    async with AsyncClient(local_server.url, local_server.token) as client, client.session() as s:
        root = (await s.info())["workdir"]
        proc = await s.spawn(f"echo first; read go; head -c {size} /dev/zero | tr '\\0' a; echo END; touch done",
                             stdin="pipe", cwd=root)
        while proc.last_seq < 1:
            await asyncio.sleep(0.01)
        await proc.write_stdin("\n")
        s._cut_connection()
        _wait_for_file(os.path.join(root, "done"))
        result = await proc.wait()
        assert result.stdout.startswith("first\n") and result.stdout.endswith("aEND\n")
        assert 0 < result.dropped_bytes == proc.dropped_bytes
        assert len(result.stdout_bytes) + result.dropped_bytes == len("first\n") + size + len("END\n")


@aio
async def test_output_lost_before_an_attach_is_counted(server: Server) -> None:
    size = 3_000_000
    client = AsyncClient(server.url, server.token)
    first = await client.create_session()
    root = (await first.info())["workdir"]
    await first.spawn(f"head -c {size} /dev/zero | tr '\\0' a; touch done", process_id="big", cwd=root)
    await first.disconnect()
    again = await client.resume_session(first.id)
    await again.run("while [ ! -e done ]; do sleep 0.05; done", cwd=root)
    result = await (await again.attach("big")).wait()
    assert result.dropped_bytes > 0 and len(result.stdout_bytes) + result.dropped_bytes == size
    # Nothing lost when every byte arrived.
    assert (await again.run("echo whole")).dropped_bytes == 0
    await again.delete()
