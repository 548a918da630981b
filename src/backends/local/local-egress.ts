/**
 * Egress on the local backend (docs/architecture.md, "Egress"): a sandboxed command runs in its
 * bubblewrap sandbox's own network namespace, with nothing but loopback. It is started through
 * `exec-agent egress-wrap` (native/exec-agent-egress.c), which listens on 127.0.0.1:PORT there
 * and tunnels each client to a unix socket the server listens on: in the session's private
 * /tmp (the sandbox sees it at /tmp), greeted with a secret made for the session, which the
 * wrapper takes from its environment and removes before the command runs. Unix sockets cross
 * network namespaces; the sandbox's mounts decide who may reach one, and the secret who is heard.
 */
import { randomBytes, timingSafeEqual } from 'node:crypto';
import { existsSync } from 'node:fs';
import { chown, unlink } from 'node:fs/promises';
import { createServer, type Server, type Socket } from 'node:net';
import { join } from 'node:path';
import type { Duplex } from 'node:stream';
import { fileURLToPath } from 'node:url';
import { execError } from '../../errors.ts';
import { readHead } from './socket-head.ts';

const TUNNEL_MAGIC = Buffer.from('EXAGTUN1');
const SOCKET_NAME = '.exec-server-egress.sock';
const GREETING_MS = 5_000;
/** The static agent binary of this build, which carries the wrapper. */
const WRAPPER = fileURLToPath(new URL('../../../build/exec-agent', import.meta.url));

/** A local session's egress: the unix socket its wrapped commands tunnel to, and how to start them. */
export class LocalEgress {
  readonly #server: Server;
  readonly #secret = randomBytes(32);
  readonly #port: number;

  private constructor(port: number, accept: (conn: Duplex) => void) {
    this.#port = port;
    this.#server = createServer({ allowHalfOpen: true }, (s) => this.#greet(s, accept));
    this.#server.on('error', () => undefined);
  }

  /** Listens in `privateTmp` (the session's /tmp), owned by the sandbox user when there is one. */
  static async start(
    port: number,
    privateTmp: string,
    user: { uid: number; gid: number } | undefined,
    accept: (conn: Duplex) => void,
  ): Promise<LocalEgress> {
    if (!existsSync(WRAPPER))
      throw execError('EXEC_ERR_UNSUPPORTED', `${WRAPPER} is missing (native helpers not built)`);
    const egress = new LocalEgress(port, accept);
    const path = join(privateTmp, SOCKET_NAME);
    await unlink(path).catch(() => undefined);
    await new Promise<void>((resolve, reject) => {
      egress.#server.once('error', reject);
      egress.#server.listen(path, () => resolve());
    });
    egress.#server.unref();
    if (user) await chown(path, user.uid, user.gid);
    return egress;
  }

  /** `argv` started through the wrapper, which serves the proxy in the sandbox's namespace. */
  wrap(argv: readonly string[]): string[] {
    return [WRAPPER, 'egress-wrap', String(this.#port), `/tmp/${SOCKET_NAME}`, '--', ...argv];
  }

  /** The wrapper's environment: the command's, plus the secret (removed before the command runs). */
  environment(env: Readonly<Record<string, string>>): Record<string, string> {
    return { ...env, EXEC_SERVER_EGRESS_SECRET: this.#secret.toString('hex') };
  }

  close(): void {
    this.#server.close();
  }

  #greet(s: Socket, accept: (conn: Duplex) => void): void {
    s.on('error', () => undefined);
    readHead(s, TUNNEL_MAGIC.length + this.#secret.length, GREETING_MS, (head, rest) => {
      const ok =
        head.subarray(0, TUNNEL_MAGIC.length).equals(TUNNEL_MAGIC) &&
        timingSafeEqual(head.subarray(TUNNEL_MAGIC.length), this.#secret);
      if (!ok) {
        s.destroy();
        return;
      }
      if (rest.length > 0) s.unshift(rest);
      accept(s);
    });
  }
}
