"""An interactive terminal: a shell on a PTY, keystrokes in, screen out, a window resize.

    EXEC_SERVER_URL=ws://127.0.0.1:8765 EXEC_SERVER_TOKEN=... python3 pty_session.py
"""
from __future__ import annotations

import asyncio

from exec_server import AsyncClient


async def main() -> None:
    async with AsyncClient() as client, client.session() as session:
        # +m: no job control, which a shell without a controlling process group would complain of.
        shell = await session.spawn(["sh", "-i", "+m"], tty=True, size=(80, 24), env={"PS1": "$ "})
        screen: list[str] = []
        reader = shell.output()  # one reader for the whole session: every chunk once, in order

        async def type_and_wait(keys: str, marker: str) -> None:
            await shell.write_stdin(keys)
            async for chunk in reader:
                screen.append(chunk.text)
                if marker in "".join(screen):
                    return

        await type_and_wait("stty size\r", "24 80\r\n")
        print("80x24 window: stty size says 24 80")
        await shell.resize(120, 40)
        await type_and_wait("stty size\r", "40 120\r\n")
        print("resized to 120x40: stty size says 40 120")
        await type_and_wait("echo $((6 * 7))\r", "42\r\n")
        print("echo $((6 * 7)) printed 42")
        await shell.write_stdin("exit 0\r")
        result = await shell.wait(timeout=10)
        print("shell exited with", result.exit_code)


if __name__ == "__main__":
    asyncio.run(main())
