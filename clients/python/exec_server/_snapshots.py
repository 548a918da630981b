"""A session's snapshots and hibernation, as session methods (docs/snapshots.md); its forks,
which are sessions, are ``Session`` methods."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import _validate as v
from ._generated import HibernationAnswer, SnapshotInfo
from ._http import seg

if TYPE_CHECKING:
    from ._http import HttpApi

__all__ = ["SnapshotsMixin"]


class SnapshotsMixin:
    http: HttpApi
    id: str

    if TYPE_CHECKING:
        async def request(self, method: str, params: dict[str, Any] | None = None) -> Any: ...

    async def snapshot(self, name: str | None = None, *, memory: bool = False) -> SnapshotInfo:
        """Commits the session's filesystem to a snapshot (docker): ``{snapshotId, ...}``.

        With ``memory=True`` (gVisor sessions) also its memory: a live template, whose sessions
        start with its processes running.
        """
        v.check_snapshot_name(name)
        params: dict[str, Any] = {} if name is None else {"name": name}
        if memory:
            params["memory"] = True
        snap: SnapshotInfo = await self.request("session/snapshot", params)
        return snap

    async def list_snapshots(self) -> list[SnapshotInfo]:
        """The snapshots taken of this session (with a session token, the only ones it sees)."""
        answer = await self.http.request("GET", f"/v1/sessions/{seg(self.id)}/snapshots")
        snapshots: list[SnapshotInfo] = answer["snapshots"]
        return snapshots

    async def delete_snapshot(self, snapshot_id: str) -> None:
        """Deletes a snapshot taken of this session, by its ``snapshotId`` as listed."""
        if not isinstance(snapshot_id, str) or not snapshot_id:
            raise v.fail("snapshot_id must be a non-empty string")
        await self.http.request("DELETE", f"/v1/sessions/{seg(self.id)}/snapshots/{seg(snapshot_id)}")

    async def hibernate(self) -> HibernationAnswer:
        """Checkpoints and stops the container (docker, gVisor); the next call wakes it."""
        answer: HibernationAnswer = await self.request("session/hibernate")
        return answer

    async def wake(self) -> HibernationAnswer:
        answer: HibernationAnswer = await self.request("session/wake")
        return answer
