"""A minimal agent loop: the model calls exec_command and write_stdin, the SDK routes each call.

The model is a scripted stand-in (so the example runs anywhere); replace ``ScriptedModel.respond``
with a call to your model's API, giving it ``TOOL_DEFINITIONS`` as its tools. Everything else
stays: each tool call the model answers goes to ``session.route_tool_call`` in one line, and
its ``function_call_output`` goes back into the conversation.

    EXEC_SERVER_URL=ws://127.0.0.1:8765 EXEC_SERVER_TOKEN=... python3 agent_loop.py
"""
from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from typing import Any

from exec_server import TOOL_DEFINITIONS, AsyncClient, is_approval_required


class ScriptedModel:
    """Answers like a Responses-API model would: tool calls first, then a message."""

    def __init__(self) -> None:
        self.turn = 0

    def respond(self, conversation: list[Mapping[str, Any]], tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
        self.turn += 1
        assert {t["name"] for t in tools} == {"exec_command", "write_stdin"}
        if self.turn == 1:
            cmd = "printf 'alpha\\nbeta\\ngamma\\n' > words.txt; wc -l words.txt"
            return [call("c1", "exec_command", {"cmd": cmd})]
        if self.turn == 2:  # an interactive command: it waits for input, so the answer has a session_id
            return [call("c2", "exec_command", {"cmd": "read name; echo \"hello $name\"", "tty": True,
                                                "yield_time_ms": 500})]
        if self.turn == 3:
            session_id = int(conversation[-1]["output"].split("session ID ")[1].split()[0])
            return [call("c3", "write_stdin", {"session_id": session_id, "chars": "agent\n"})]
        last = conversation[-1]["output"]
        return [{"type": "message", "content": f"The command greeted: {last.split('hello ')[1].split()[0]}"}]


def call(call_id: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"type": "function_call", "call_id": call_id, "name": name, "arguments": json.dumps(args)}


async def main() -> None:
    model = ScriptedModel()
    conversation: list[Mapping[str, Any]] = [{"role": "user", "content": "Count the words, then greet me."}]
    async with AsyncClient() as client, client.session() as session:
        while True:
            items = model.respond(conversation, TOOL_DEFINITIONS)
            conversation += items
            outputs: list[Mapping[str, Any]] = []
            for item in items:
                out = await session.route_tool_call(item)
                if is_approval_required(out):  # a session with an approval policy: a person decides first
                    raise SystemExit(f"needs approval: {out['approval']['argv']}")
                if out is not None:
                    outputs.append(out)
            for output in outputs:
                print(f"[{output['call_id']}] {output['output'].strip().splitlines()[-1]}")
            if not outputs:
                print(items[-1]["content"])
                return
            conversation += outputs


if __name__ == "__main__":
    asyncio.run(main())
