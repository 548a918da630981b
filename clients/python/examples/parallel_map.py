"""A parallel map over 16 sessions: one command each, all at once with ``asyncio.gather``.

    EXEC_SERVER_URL=ws://127.0.0.1:8765 EXEC_SERVER_TOKEN=... python3 parallel_map.py
"""
from __future__ import annotations

import asyncio

from exec_server import AsyncClient


async def square(client: AsyncClient, n: int) -> int:
    async with client.session(labels={"job": "parallel-map"}) as session:
        result = await session.run(f"echo $(({n} * {n}))")
        return int(result.stdout)


async def main() -> None:
    async with AsyncClient() as client:
        squares = await asyncio.gather(*(square(client, n) for n in range(16)))
        print(squares)
        print("sum", sum(squares))


if __name__ == "__main__":
    asyncio.run(main())
