"""Processes: run, spawn, streaming and UTF-8, stdin, PTY, signals, timeouts, big output."""
from __future__ import annotations

import asyncio
import hashlib

import pytest
from conftest import aio
from server import Server

from exec_server import AsyncClient, CommandExitError


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
        assert await counter.write_stdin("one\n") == "accepted"
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
