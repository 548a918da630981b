/**
 * Preview ports on the local backend: a TCP connection to a port on the loopback that the
 * session's commands see. Commands with network (or without a sandbox) share the host's
 * loopback: a plain connection. A sandbox without network has its own network namespace; the
 * session's kept-warm sandbox (warm-sandbox.ts) is the same namespace for every command of the
 * same sandbox, so a relay (this Node binary) started in that sandbox reaches the port.
 * Without kept-warm sandboxes each command has a namespace of its own, which nothing else can
 * reach: that is refused with the reason.
 */
import { connect } from 'node:net';
import type { Duplex } from 'node:stream';
import { execError } from '../../errors.ts';
import { processStream, type Spawner } from '../process-stream.ts';
import type { ResolvedSandbox } from '../types.ts';

const RELAY_JS = [
  "const s = require('node:net').connect(Number(process.argv[1]), '127.0.0.1');",
  "s.on('error', (e) => { process.stderr.write(e.message); process.exit(1); });",
  's.pipe(process.stdout);',
  'process.stdin.pipe(s);',
].join('\n');

/** A connection to 127.0.0.1:`port` in this namespace; refused ports are a clear error. */
export function tcpConnect(port: number): Promise<Duplex> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1');
    socket.once('connect', () => {
      socket.removeAllListeners('error');
      resolve(socket);
    });
    socket.once('error', (err) =>
      reject(
        execError('EXEC_ERR_BACKEND', `nothing accepts connections on port ${port} in the session: ${err.message}`),
      ),
    );
  });
}

/** What reaching a local session's port needs: how to spawn in its sandbox, and whether it has one. */
export interface LocalPortTarget {
  readonly spawn: Spawner;
  readonly workdir: string;
  /** Whether restricted commands run in bubblewrap here (else they share the host's network). */
  readonly bubblewrap: boolean;
  /** Whether the session keeps its sandboxes warm (one network namespace per sandbox). */
  readonly warm: boolean;
}

/** A connection to `port` on the loopback the session's commands see. */
export async function connectLocalPort(
  target: LocalPortTarget,
  port: number,
  sandbox: ResolvedSandbox,
): Promise<Duplex> {
  const ownNamespace = sandbox.kind === 'restricted' && !sandbox.network && target.bubblewrap;
  if (!ownNamespace) return tcpConnect(port);
  if (!target.warm) {
    throw execError(
      'EXEC_ERR_UNSUPPORTED',
      'the session has no network and its sandboxed commands each get their own network namespace (kept-warm sandboxes need root and build/sandbox-join): grant the session networkAccess to preview its ports',
    );
  }
  return processStream(target.spawn, {
    argv: [process.execPath, '-e', RELAY_JS, String(port)],
    cwd: target.workdir,
    env: { PATH: process.env['PATH'] ?? '/usr/bin:/bin' },
    mode: 'pipe',
    size: { cols: 80, rows: 24 },
    sandbox,
  });
}
