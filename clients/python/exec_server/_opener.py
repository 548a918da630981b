"""What a session needs of the client that opened it, as a protocol ``AsyncClient`` satisfies.

Its own module so that ``session`` depends on this narrow interface, not on ``client`` (which
makes sessions): no import circle, type-only ones included.
"""
from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol, TypeVar

from ._http import HttpApi

S = TypeVar("S", covariant=True)


class SessionOpener(Protocol[S]):
    """The server's address, the token and client name a connection presents, how long opening
    it may take, the HTTP API, and new sessions (of type ``S``) for forks."""

    @property
    def ws_url(self) -> str: ...
    @property
    def token(self) -> str | None: ...
    @property
    def client_name(self) -> str: ...
    @property
    def connect_timeout(self) -> float: ...
    @property
    def http(self) -> HttpApi: ...
    @property
    def create_session(self) -> Callable[..., Awaitable[S]]: ...
    @property
    def resume_session(self) -> Callable[..., Awaitable[S]]: ...
