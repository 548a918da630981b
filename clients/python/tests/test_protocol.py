"""The wire: binary output frames as the server encodes them, and that sessions get them."""
from __future__ import annotations

import json
import subprocess

from conftest import aio
from server import REPO, Server

from exec_server import AsyncClient
from exec_server._rpc import decode_binary_output

ENCODE = """
import('./src/protocol/binary-output.ts').then((m) => {
  const out = [];
  for (const [processId, seq, stream, hex] of JSON.parse(process.argv[1])) {
    const data = Buffer.from(hex, 'hex');
    const frame = Buffer.alloc(m.binaryOutputBytes(processId, data.length));
    m.encodeBinaryOutput(frame, { processId, seq, stream, data });
    out.push(frame.toString('hex'));
  }
  console.log(JSON.stringify(out));
});
"""


def test_frames_encoded_by_the_server_decode() -> None:
    cases = [("p-1", 1, "stdout", "68690a"), ("процесс", 2**40 + 7, "stderr", ""), ("x", 3, "pty", "00ff" * 100)]
    run = subprocess.run(["node", "--import", "tsx", "-e", ENCODE, json.dumps(cases)], cwd=REPO,
                         capture_output=True, text=True, timeout=60, check=True)
    for (pid, seq, stream, hex_data), frame in zip(cases, json.loads(run.stdout)):
        decoded = decode_binary_output(bytes.fromhex(frame))
        assert decoded is not None
        assert (decoded["processId"], decoded["seq"], decoded["stream"]) == (pid, seq, stream)
        assert bytes(decoded["data"]) == bytes.fromhex(hex_data)
    assert decode_binary_output(b"\x01\x00") is None  # too short
    assert decode_binary_output(bytes.fromhex(json.loads(run.stdout)[0])[:13]) is None  # cut in its id
    assert decode_binary_output(b"\x02" + bytes.fromhex(json.loads(run.stdout)[0])[1:]) is None  # other kind


@aio
async def test_output_arrives_as_binary_frames(server: Server) -> None:
    async with AsyncClient(server.url, server.token) as client, client.session() as s:
        assert s.init_result["capabilities"].get("binaryOutput") is True
        before = s._conn.binary_frames if s._conn else 0
        assert (await s.run(["sh", "-c", "printf 'x%.0s' $(seq 1000)"])).stdout == "x" * 1000
        assert s._conn is not None and s._conn.binary_frames > before
