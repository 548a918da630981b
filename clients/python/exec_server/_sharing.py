"""What a session hands to others, as session methods: preview URLs for its ports, and tokens
that open this session only (for a browser, a sub-agent or a viewer; docs/protocol.md)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, get_args

from . import _validate as v
from ._generated import PreviewAnswer, SessionToken, TokenAccess
from ._http import seg

if TYPE_CHECKING:
    from ._http import HttpApi

__all__ = ["ExposedPreview", "SharingMixin"]

TOKEN_ACCESS: tuple[TokenAccess, ...] = get_args(TokenAccess)


class ExposedPreview(PreviewAnswer):
    """What ``expose_port`` answers: the server's preview, and its URLs on the SDK's server address."""

    url: str  # ``path`` on the server: a client with the token opens it
    signed_url: str  # ``signedPath`` on the server: a browser opens it, until ``expiresAt``


class SharingMixin:
    http: HttpApi
    id: str

    if TYPE_CHECKING:
        async def request(self, method: str, params: dict[str, Any] | None = None) -> Any: ...

    async def expose_port(self, port: int, *, ttl_seconds: int | None = None) -> ExposedPreview:
        """A preview URL for a TCP port of the session (needs ``preview_ports=True``).

        The answer adds ``url`` (bearer token) and ``signed_url`` (for a browser) to the
        server's ``{port, path, signedPath, expiresAt, ...}``.
        """
        params: dict[str, Any] = {"port": v.check_port(port)}
        if ttl_seconds is not None:
            params["ttlSeconds"] = ttl_seconds
        # The server's answer, to which the two URLs are added below.
        preview: ExposedPreview = await self.request("session/exposePort", params)
        preview["url"] = self.http.base_url + preview["path"]
        preview["signed_url"] = self.http.base_url + preview["signedPath"]
        return preview

    async def close_port(self, port: int) -> bool:
        return bool((await self.request("session/closePort", {"port": v.check_port(port)}))["closed"])

    async def list_ports(self) -> list[PreviewAnswer]:
        """The exposed ports, as the server has them (``path`` and ``signedPath``, no URLs)."""
        ports: list[PreviewAnswer] = (await self.http.request("GET", f"/v1/sessions/{seg(self.id)}/ports"))["ports"]
        return ports

    async def create_token(self, *, access: TokenAccess = "full", ttl_seconds: int | None = None) -> SessionToken:
        """A token that opens this session only: ``{token, tokenId, access, expiresAt}``.

        ``access="read"`` attaches, replays output and reads files, but starts, writes and
        changes nothing. Use it as the token of another client (``AsyncClient(url, token)``);
        it opens no other session and cannot list or create sessions. Needs the tenant token
        (a session token cannot mint tokens); ``ttl_seconds`` is bounded by the server.
        """
        if access not in TOKEN_ACCESS:
            raise v.fail(f"access must be one of {', '.join(TOKEN_ACCESS)}")
        body: dict[str, Any] = {"access": access}
        if ttl_seconds is not None:
            if not isinstance(ttl_seconds, int) or isinstance(ttl_seconds, bool) or ttl_seconds < 1:
                raise v.fail("ttl_seconds must be a positive integer")
            body["ttlSeconds"] = ttl_seconds
        token: SessionToken = await self.http.request("POST", f"/v1/sessions/{seg(self.id)}/tokens", body)
        return token

    async def revoke_token(self, token_id: str) -> None:
        """Ends a token ``create_token`` made, on every replica and after a restart."""
        if not isinstance(token_id, str) or not token_id:
            raise v.fail("token_id must be a non-empty string")
        await self.http.request("DELETE", f"/v1/sessions/{seg(self.id)}/tokens/{seg(token_id)}")
