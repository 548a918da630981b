/**
 * Helpers of bench/docker-agent.ts's round-trip case: the floor probe a command's round trip is
 * measured against, and the random order the sides run in.
 */
import type { Duplex } from 'node:stream';
import type Docker from 'dockerode';

/**
 * The floor: a shell in the raw container, attached once, fed `true; echo N` over its stdin and
 * read until `N` comes back. No server, no per-command engine call: what a command costs inside
 * the container plus one stream each way.
 */
export async function floorProbe(c: Docker.Container): Promise<{ run: () => Promise<void>; close: () => void }> {
  const exec = await c.exec({ Cmd: ['/bin/sh'], AttachStdin: true, AttachStdout: true, AttachStderr: true });
  const socket = (await exec.start({ hijack: true, stdin: true })) as unknown as Duplex;
  let seen = '';
  let want = '';
  let wake: (() => void) | undefined;
  socket.on('data', (d: Buffer) => {
    seen += d.toString('latin1');
    if (want !== '' && seen.includes(want)) wake?.();
  });
  let n = 0;
  return {
    run: () =>
      new Promise<void>((resolve) => {
        want = `<${++n}>`;
        seen = '';
        wake = resolve;
        socket.write(`/bin/true; echo '${want}'\n`);
      }),
    close: () => socket.destroy(),
  };
}

/** `xs` in a random order. */
export const shuffled = <T>(xs: readonly T[]): T[] =>
  xs
    .map((x) => [Math.random(), x] as const)
    .sort((a, b) => a[0] - b[0])
    .map(([, x]) => x);
