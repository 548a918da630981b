"""The Python SDK's half of bench/python-sdk.ts: round trips of `true` and a pipe stream.

    python3 bench/python_sdk.py URL TOKEN rt RUNS      -> {"ms": [...]}
    python3 bench/python_sdk.py URL TOKEN pipe BYTES   -> {"seconds": s, "bytes": n}
"""
from __future__ import annotations

import asyncio
import json
import sys
import time

from exec_server import AsyncClient


async def main(url: str, token: str, case: str, n: int) -> None:
    async with AsyncClient(url, token) as client, client.session(sandbox={"type": "danger-full-access"}) as s:
        if case == "rt":
            for _ in range(20):
                await s.run(["true"])
            ms = []
            for _ in range(n):
                t = time.perf_counter()
                await s.run(["true"])
                ms.append((time.perf_counter() - t) * 1000)
            print(json.dumps({"ms": ms}))
            return
        t = time.perf_counter()
        proc = await s.spawn(f"read go; exec head -c {n} /dev/zero", collect=False, stdin="pipe")
        await proc.write_stdin("go\n")
        got = 0
        async for chunk in proc:
            got += len(chunk.data)
        await proc.wait()
        print(json.dumps({"seconds": time.perf_counter() - t, "bytes": got}))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])))
