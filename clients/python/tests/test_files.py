"""Files: whole reads and writes over JSON-RPC, listing, streamed 64 MB up and down."""
from __future__ import annotations

import hashlib
import io
import os

import pytest
from conftest import aio
from server import Server

from exec_server import AsyncClient, NotFoundError


@aio
async def test_read_write_list_stat_remove(server: Server) -> None:
    async with AsyncClient(server.url, server.token) as client, client.session() as s:
        root = (await s.info())["workdir"]
        await s.mkdir(f"{root}/out/deep")
        await s.write_file(f"{root}/out/notes.txt", "first line\nsecond line\n")
        assert await s.read_file(f"{root}/out/notes.txt") == b"first line\nsecond line\n"
        names = sorted(e["fileName"] for e in await s.list_dir(f"{root}/out"))
        assert names == ["deep", "notes.txt"]
        st = await s.stat(f"{root}/out/notes.txt")
        assert st["isFile"] and st["size"] == 23
        assert (await s.run("wc -l out/notes.txt", cwd=root)).stdout.split()[0] == "2"
        await s.remove(f"{root}/out", recursive=True)
        with pytest.raises(NotFoundError) as err:
            await s.read_file(f"{root}/out/notes.txt")
        assert err.value.code == "EXEC_ERR_NOT_FOUND"


@aio
async def test_64mb_up_and_down_with_checksum(server: Server, tmp_path: object) -> None:
    size = 64 * 1024 * 1024
    data = os.urandom(size)
    digest = hashlib.sha256(data).hexdigest()
    async with AsyncClient(server.url, server.token) as client, client.session() as s:
        root = (await s.info())["workdir"]
        ups: list[tuple[int, int | None]] = []
        written = await s.upload(f"{root}/big.bin", data, progress=lambda done, total: ups.append((done, total)))
        assert written == size
        assert len(ups) == 64 and ups[-1] == (size, size) and all(a[0] < b[0] for a, b in zip(ups, ups[1:]))
        assert (await s.run(f"sha256sum {root}/big.bin")).stdout.split()[0] == digest

        downs: list[int] = []
        sink = io.BytesIO()
        got = await s.download(f"{root}/big.bin", sink, progress=lambda done, total: downs.append(done))
        assert got == size and downs[-1] == size and len(downs) > 1
        assert hashlib.sha256(sink.getvalue()).hexdigest() == digest
        # From an iterable of unknown length (chunked encoding), and back as bytes from an offset.
        parts = (data[i:i + 5_000_000] for i in range(0, 20_000_000, 5_000_000))
        assert await s.upload(f"{root}/part.bin", parts) == 20_000_000
        tail = await s.download(f"{root}/part.bin", offset=19_999_000)
        assert tail == data[19_999_000:20_000_000]
        with pytest.raises(NotFoundError):
            await s.download(f"{root}/missing.bin")
