"""A session's files, as session methods: whole files over the WebSocket (``fs/*``), streams
over HTTP (upload, download; docs/filesystem.md)."""
from __future__ import annotations

import base64
from typing import IO, TYPE_CHECKING, Any

from . import _validate as v
from ._generated import DirectoryEntry, FileMetadata
from ._http import Progress, Source

if TYPE_CHECKING:
    from ._http import HttpApi

__all__ = ["FilesMixin"]


class FilesMixin:
    http: HttpApi
    id: str

    if TYPE_CHECKING:
        async def request(self, method: str, params: dict[str, Any] | None = None) -> Any: ...

    async def read_file(self, path: str) -> bytes:
        """A whole file in one message (up to the server's fs/readFile maximum, 64 MiB)."""
        r = await self.request("fs/readFile", {"path": v.check_path(path)})
        return base64.b64decode(r["dataBase64"])

    async def write_file(self, path: str, data: str | bytes) -> None:
        raw = data.encode("utf-8") if isinstance(data, str) else bytes(data)
        await self.request("fs/writeFile", {"path": v.check_path(path),
                                            "dataBase64": base64.b64encode(raw).decode("ascii")})

    async def list_dir(self, path: str) -> list[DirectoryEntry]:
        """Entries ``{fileName, isDirectory, isFile}``."""
        answer = await self.request("fs/readDirectory", {"path": v.check_path(path)})
        entries: list[DirectoryEntry] = answer["entries"]
        return entries

    async def stat(self, path: str) -> FileMetadata:
        meta: FileMetadata = await self.request("fs/getMetadata", {"path": v.check_path(path)})
        return meta

    async def mkdir(self, path: str, *, parents: bool = True) -> None:
        await self.request("fs/createDirectory", {"path": v.check_path(path), "recursive": parents})

    async def remove(self, path: str, *, recursive: bool = False, force: bool = False) -> None:
        await self.request("fs/remove", {"path": v.check_path(path), "recursive": recursive, "force": force})

    async def upload(self, path: str, source: Source, *, progress: Progress | None = None,
                     chunk_size: int = 1024 * 1024) -> int:
        """Streams bytes, a local file (path or file object) or an iterable of bytes into ``path``."""
        v.check_path(path)
        if chunk_size <= 0:
            raise v.fail("chunk_size must be positive")
        answer = await self.http.upload(self.id, path, source, progress=progress, chunk_size=chunk_size)
        return int(answer["bytesWritten"])

    async def download(self, path: str, dest: str | IO[bytes] | None = None, *, offset: int = 0,
                       progress: Progress | None = None, chunk_size: int = 1024 * 1024) -> bytes | int:
        """The file's bytes, or with ``dest`` (a local path or file object) the count written to it."""
        v.check_path(path)
        if isinstance(dest, str):
            with open(dest, "wb") as f:
                n, _ = await self.http.download(self.id, path, f, offset=offset, progress=progress,
                                                chunk_size=chunk_size)
            return n
        n, data = await self.http.download(self.id, path, dest, offset=offset, progress=progress,
                                           chunk_size=chunk_size)
        return data if data is not None else n
