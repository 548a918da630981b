"""A session's snapshots and hibernation, as session methods (docs/snapshots.md); its forks,
which are sessions, are ``Session`` methods."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import _validate as v

__all__ = ["SnapshotsMixin"]


class SnapshotsMixin:
    if TYPE_CHECKING:
        async def request(self, method: str, params: dict[str, Any] | None = None) -> Any: ...

    async def snapshot(self, name: str | None = None, *, memory: bool = False) -> dict[str, Any]:
        """Commits the session's filesystem to a snapshot (docker): ``{snapshotId, ...}``.

        With ``memory=True`` (gVisor sessions) also its memory: a live template, whose sessions
        start with its processes running.
        """
        v.check_snapshot_name(name)
        params: dict[str, Any] = {} if name is None else {"name": name}
        if memory:
            params["memory"] = True
        return dict(await self.request("session/snapshot", params))

    async def hibernate(self) -> dict[str, Any]:
        """Checkpoints and stops the container (docker, gVisor); the next call wakes it."""
        return dict(await self.request("session/hibernate"))

    async def wake(self) -> dict[str, Any]:
        return dict(await self.request("session/wake"))
