/**
 * `exec-agent relayd` (native/exec-agent-relay.c) driven directly, as src/egress/native-relay.ts
 * drives it: its IPC channel, then for each connection the tunnel and the destination's socket.
 * On the tunnel a stand-in for the agent (python3, `socket.send_fds`) hands over what it claims is
 * its client's socket with the marker byte 'F'. A hostile agent may hand anything: a pipe, a unix
 * socket, a UDP socket. The relay takes a TCP socket and nothing else: any other ends that
 * connection (reported with zero bytes, the tunnel closed), and the relay lives on to serve the
 * next connection, a real one, end to end. A connection that lasts is reported as it goes.
 */
import assert from 'node:assert/strict';
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { once } from 'node:events';
import { join } from 'node:path';
import { type AddressInfo, connect, createServer, type Server, type Socket } from 'node:net';
import { test } from 'node:test';
import { promisify } from 'node:util';
import { RELAY_BINARY } from '../../src/egress/native-relay.ts';
import { tempDirFor } from '../support/temp-dir.ts';

/**
 * The agent's part: connects to the tunnel's unix socket (argv[1]) and hands over a descriptor of
 * the kind argv[2] names. `tcp N`: its client's accepted socket on 127.0.0.2, after which it plays
 * the command (sends `hello` N times, 150 ms apart, half-closes, prints what comes back). Otherwise it waits for the
 * relay to close the tunnel and prints how many bytes reached the descriptor's other end (a relay
 * that took it would have written the CONNECT answer there).
 */
const AGENT = `
import os, socket, sys, time
tun = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
tun.connect(sys.argv[1])
kind = sys.argv[2]
if kind == 'tcp':
    ls = socket.socket(); ls.bind(('127.0.0.2', 0)); ls.listen(1)
    cmd = socket.create_connection(ls.getsockname())
    acc, _ = ls.accept()
    socket.send_fds(tun, [b'F'], [acc.fileno()])
    acc.close()
    for i in range(int(sys.argv[3])):
        if i > 0: time.sleep(0.15)
        cmd.sendall(b'hello')
    cmd.shutdown(socket.SHUT_WR)
    got = b''
    while True:
        b = cmd.recv(65536)
        if not b: break
        got += b
    sys.stdout.write(got.decode('latin1'))
    sys.exit(0)
if kind == 'pipe':
    peer, w = os.pipe(); fd = w
elif kind == 'unix':
    a, b = socket.socketpair(); fd = a.fileno(); peer = b.fileno()
else:
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.bind(('127.0.0.2', 0)); fd = peer = u.fileno()
socket.send_fds(tun, [b'F'], [fd])
tun.settimeout(10)
while tun.recv(4096): pass
time.sleep(0.2)
os.set_blocking(peer, False)
try: n = len(os.read(peer, 65536))
except BlockingIOError: n = 0
print('closed, %d bytes written to it' % n)
`;

interface Report {
  relay: number;
  out: number;
  in: number;
  progress?: number;
}

/** The destination: reads to the end, answers `got N`; counts its connections. */
async function origin(): Promise<{ server: Server; port: number; connections: () => number }> {
  let n = 0;
  const server = createServer((s: Socket) => {
    n++;
    let got = 0;
    s.on('data', (d: Buffer) => {
      got += d.length;
    });
    s.on('end', () => s.end(`got ${got}\n`));
    s.on('error', () => undefined);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.2', r));
  return { server, port: (server.address() as AddressInfo).port, connections: () => n };
}

function send(relay: ChildProcess, message: object, socket: Socket): Promise<void> {
  // As native-relay.ts: a socket of no server, so Node does not track it in the child.
  (socket as unknown as { server: unknown }).server = null;
  return new Promise((resolve, reject) => relay.send(message, socket, (err) => (err ? reject(err) : resolve())));
}

test('relayd takes only a TCP socket from the tunnel (anything else ends that connection alone); reports progress', async (t) => {
  assert.ok(RELAY_BINARY, 'build/exec-agent is built (sh scripts/build-native.sh)');
  const dir = await tempDirFor(t, 'exec-server-relayd-');
  const o = await origin();
  t.after(() => o.server.close());
  // Paused: nothing of the tunnel is read here (the agent's descriptor must reach the relay).
  const tunnels = createServer({ pauseOnConnect: true });
  const path = join(dir, 'tunnel.sock');
  await new Promise<void>((r) => tunnels.listen(path, r));
  t.after(() => tunnels.close());

  const relay = spawn(RELAY_BINARY, ['relayd'], { stdio: ['ignore', 'ignore', 'inherit', 'ipc'], env: {} });
  t.after(() => {
    if (relay.exitCode === null) relay.kill('SIGKILL');
  });
  const reports: Report[] = [];
  relay.on('message', (m: Report) => reports.push(m));
  const early = 'HTTP/1.1 200 Connection Established\r\n\r\n';

  /** One connection: the agent's stand-in hands `kind`; what it printed, and the relay's report. */
  const connection = async (id: number, ...kind: string[]): Promise<{ printed: string; report: Report }> => {
    const accepted = once(tunnels, 'connection') as Promise<[Socket]>;
    const agent = promisify(execFile)('python3', ['-c', AGENT, path, ...kind], { timeout: 20_000 });
    const [tun] = await accepted;
    const up = connect({ host: '127.0.0.2', port: o.port });
    await once(up, 'connect');
    await send(relay, { relay: id, part: 'client', take: 1 }, tun);
    await send(relay, { relay: id, part: 'upstream', early: Buffer.from(early).toString('hex') }, up);
    tun.destroy();
    up.destroy();
    const { stdout } = await agent;
    for (let i = 0; i < 500 && !reports.some((r) => r.relay === id && r.progress === undefined); i++)
      await new Promise((r) => setTimeout(r, 10));
    const report = reports.find((r) => r.relay === id && r.progress === undefined);
    assert.ok(report, `connection ${id} (${kind}) is reported`);
    return { printed: stdout, report };
  };

  let id = 1;
  for (const kind of ['pipe', 'unix', 'udp']) {
    const { printed, report } = await connection(id++, kind);
    assert.equal(printed.trim(), 'closed, 0 bytes written to it', `${kind}: refused, and the tunnel closed`);
    assert.deepEqual({ out: report.out, in: report.in }, { out: 0, in: 0 }, `${kind}: nothing relayed`);
    assert.equal(relay.exitCode, null, `${kind}: the relay lives on`);
    assert.equal(relay.signalCode, null, `${kind}: the relay lives on`);
  }

  // The next connection hands a real TCP socket: relayed both ways, counted on the host.
  const { printed, report } = await connection(id, 'tcp', '1');
  assert.equal(printed, `${early}got 5\n`);
  assert.deepEqual({ out: report.out, in: report.in }, { out: 5, in: 'got 5\n'.length });
  assert.equal(relay.exitCode, null);

  // A connection that lasts (1.2 s): its totals are reported as it goes (each at least 500 ms
  // after the one before, or after it came), growing, then once more when it ends.
  const long = await connection(++id, 'tcp', '9');
  assert.equal(long.printed, `${early}got 45\n`);
  assert.deepEqual({ out: long.report.out, in: long.report.in }, { out: 45, in: 'got 45\n'.length });
  const progress = reports.filter((r) => r.relay === id && r.progress === 1);
  assert.ok(progress.length >= 1, 'reported as it went');
  for (const [k, r] of progress.entries()) {
    const before = progress[k - 1] ?? { out: 0, in: 0 };
    const grew = r.out + r.in > before.out + before.in && r.out >= before.out && r.in >= before.in;
    assert.ok(grew && r.out <= 45 && r.in <= 7, `growing totals, never past the end: ${JSON.stringify(progress)}`);
  }
  assert.equal(o.connections(), 5, 'each connection dialled its destination once');
  assert.equal(relay.exitCode, null);
});
