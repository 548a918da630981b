/**
 * Preview ports on the docker backend: a TCP connection to a port on the container's loopback,
 * carried by a relay command run in the container through the engine (`spawn`, unsandboxed).
 * It needs no route from the server to the container, so it works with `NetworkMode: none`,
 * with a remote engine and with the engine's iptables off; the container still reaches nothing.
 * The relay is what the image has: `nc`, `socat`, or bash's `/dev/tcp`.
 */
import type { Duplex } from 'node:stream';
import { processStream, type Spawner } from '../../process-stream.ts';

const RELAY_SCRIPT = [
  'p="$1"',
  'if command -v nc >/dev/null 2>&1; then exec nc 127.0.0.1 "$p"; fi',
  'if command -v socat >/dev/null 2>&1; then exec socat - "TCP:127.0.0.1:$p"; fi',
  // bash cannot half-close the socket; a client that ends its side first waits for the server.
  `if command -v bash >/dev/null 2>&1; then exec bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 1; cat <&3 & cat >&3; wait' relay "$p"; fi`,
  'echo "the session image has no nc, socat or bash to reach port $p" >&2',
  'exit 127',
].join('\n');

/** A connection to `port` on the container's loopback, through a relay command run in the container. */
export function connectContainerPort(spawn: Spawner, workdir: string, port: number): Promise<Duplex> {
  return processStream(spawn, {
    argv: ['/bin/sh', '-c', RELAY_SCRIPT, 'exec-server-port-relay', String(port)],
    cwd: workdir,
    env: { PATH: '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' },
    mode: 'pipe',
    size: { cols: 80, rows: 24 },
    sandbox: { kind: 'unrestricted' },
  });
}
