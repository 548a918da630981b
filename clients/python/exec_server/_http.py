"""The HTTP half: REST calls and streamed file transfer, on the standard library.

``http.client`` blocks, so each call runs in a worker thread (``asyncio.to_thread``); a
transfer streams in ``chunk_size`` pieces with a progress callback after each, and nothing is
held whole in memory unless the caller asks for bytes.
"""
from __future__ import annotations

import asyncio
import http.client
import json
import os
import ssl
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import IO, Any, Union
from urllib.parse import quote, urlencode, urlsplit

from ._generated import UploadResult
from .errors import BackendError, ConnectionClosedError, error_of, error_of_answer

Progress = Callable[[int, "int | None"], None]
"""Called with (bytes done, total bytes or None) after each chunk."""
Source = Union[bytes, bytearray, memoryview, str, "os.PathLike[str]", IO[bytes], Iterable[bytes]]
CHUNK = 1024 * 1024


def http_base_of(url: str) -> str:
    """``ws://h:p/...`` -> ``http://h:p`` (wss -> https); http(s) URLs keep their scheme."""
    u = urlsplit(url)
    scheme = "https" if u.scheme in ("wss", "https") else "http"
    return f"{scheme}://{u.netloc}"


def ws_url_of(url: str) -> str:
    """``http://h:p/...`` -> ``ws://h:p/`` (https -> wss); ws(s) URLs are kept."""
    u = urlsplit(url)
    if u.scheme in ("ws", "wss"):
        return url
    if u.scheme not in ("http", "https"):
        raise error_of("EXEC_ERR_INVALID_PARAMS", f"url must be ws://, wss://, http:// or https://, not {url!r}")
    return f"{'wss' if u.scheme == 'https' else 'ws'}://{u.netloc}/"


def seg(value: str) -> str:
    return quote(value, safe="")


class HttpApi:
    """REST calls of one server and token; an error answer raises the code's exception class."""

    def __init__(self, url: str, token: str | None = None, timeout: float = 600.0) -> None:
        self.base_url = http_base_of(url)
        self._token = token
        self._timeout = timeout
        u = urlsplit(self.base_url)
        self._https = u.scheme == "https"
        self._netloc = u.netloc

    def _connection(self) -> http.client.HTTPConnection:
        if self._https:
            return http.client.HTTPSConnection(self._netloc, timeout=self._timeout,
                                               context=ssl.create_default_context())
        return http.client.HTTPConnection(self._netloc, timeout=self._timeout)

    def _headers(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        headers = {"Authorization": f"Bearer {self._token}"} if self._token else {}
        headers.update(extra or {})
        return headers

    @staticmethod
    def _raise_for(res: http.client.HTTPResponse, text: bytes) -> None:
        raise error_of_answer(res.status, text, f"HTTP {res.status}")

    @contextmanager
    def _network(self, local_failure: Callable[[], bool] = lambda: False) -> Iterator[None]:
        """Socket and protocol failures (refused, reset, timed out) as ``ConnectionClosedError``;
        ``local_failure()`` tells one that came from the caller's own file instead."""
        try:
            yield
        except (OSError, http.client.HTTPException) as err:
            if local_failure():
                raise
            raise ConnectionClosedError(f"HTTP connection to {self.base_url} failed: {err!r}") from err

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        conn = self._connection()
        try:
            payload = None if body is None else json.dumps(body).encode("utf-8")
            headers = self._headers({"Content-Type": "application/json"} if payload is not None else None)
            with self._network():
                conn.request(method, path, body=payload, headers=headers)
                res = conn.getresponse()
                text = res.read()
            if res.status >= 400:
                self._raise_for(res, text)
            return json.loads(text) if text else None
        finally:
            conn.close()

    async def request(self, method: str, path: str, body: Any = None) -> Any:
        """One JSON request; ``None`` for an empty answer (204)."""
        return await asyncio.to_thread(self._call, method, path, body)

    # ---- streamed files --------------------------------------------------------------

    def _upload(self, path: str, source: Source, progress: Progress | None, chunk_size: int,
                session_id: str) -> UploadResult:
        size, chunks = _chunks_of(source, chunk_size)
        done = 0
        source_failed = False

        def body() -> Iterator[bytes]:
            nonlocal done, source_failed
            pieces = iter(chunks)
            while True:
                try:
                    piece = next(pieces, None)
                except BaseException:
                    source_failed = True
                    raise
                if piece is None:
                    return
                yield piece
                done += len(piece)
                if progress is not None:
                    progress(done, size)

        headers = self._headers({"Content-Type": "application/octet-stream"})
        if size is not None:
            headers["Content-Length"] = str(size)
        conn = self._connection()
        try:
            with self._network(lambda: source_failed):
                conn.request("PUT", f"/v1/sessions/{seg(session_id)}/files/content?{urlencode({'path': path})}",
                             body=body(), headers=headers, encode_chunked=size is None)
                res = conn.getresponse()
                text = res.read()
            if res.status >= 400:
                self._raise_for(res, text)
            answer: UploadResult = json.loads(text)
            return answer
        finally:
            conn.close()

    async def upload(self, session_id: str, path: str, source: Source, *,
                     progress: Progress | None = None, chunk_size: int = CHUNK) -> UploadResult:
        return await asyncio.to_thread(self._upload, path, source, progress, chunk_size, session_id)

    def _download(self, session_id: str, path: str, dest: IO[bytes] | None, offset: int,
                  progress: Progress | None, chunk_size: int) -> tuple[int, bytes | None]:
        query = {"path": path, **({"offset": str(offset)} if offset else {})}
        conn = self._connection()
        kept: list[bytes] = []
        try:
            with self._network():
                conn.request("GET", f"/v1/sessions/{seg(session_id)}/files/content?{urlencode(query)}",
                             headers=self._headers())
                res = conn.getresponse()
                if res.status >= 400:
                    self._raise_for(res, res.read())
            length = res.getheader("content-length")
            total = int(length) if length is not None else None
            done = 0
            while True:
                with self._network():  # not around dest.write: a full disk is no connection failure
                    piece = res.read(chunk_size)
                if not piece:
                    break
                if dest is None:
                    kept.append(piece)
                else:
                    dest.write(piece)
                done += len(piece)
                if progress is not None:
                    progress(done, total)
            if total is not None and done != total:
                raise BackendError(f"download of {path} ended after {done} of {total} bytes", "EXEC_ERR_BACKEND")
            return done, (b"".join(kept) if dest is None else None)
        finally:
            conn.close()

    async def download(self, session_id: str, path: str, dest: IO[bytes] | None = None, *,
                       offset: int = 0, progress: Progress | None = None,
                       chunk_size: int = CHUNK) -> tuple[int, bytes | None]:
        return await asyncio.to_thread(self._download, session_id, path, dest, offset, progress, chunk_size)


def _chunks_of(source: Source, chunk_size: int) -> tuple[int | None, Iterable[bytes]]:
    """The size (when known) and the pieces of an upload's source."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        view = memoryview(source)
        return len(view), (bytes(view[i:i + chunk_size]) for i in range(0, len(view), chunk_size))
    if isinstance(source, (str, os.PathLike)):
        return os.path.getsize(source), _read_file(os.fspath(source), chunk_size)
    if hasattr(source, "read"):
        f: IO[bytes] = source  # type: ignore[assignment]
        size: int | None = None
        try:
            size = os.fstat(f.fileno()).st_size - f.tell()
        except (OSError, AttributeError, ValueError):
            size = None
        return size, iter(lambda: f.read(chunk_size), b"")
    return None, (bytes(p) for p in source if p)


def _read_file(path: str, chunk_size: int) -> Iterator[bytes]:
    with open(path, "rb") as f:
        while piece := f.read(chunk_size):
            yield piece
