/**
 * A Unix socket of the server's own whose connections are claimed by a token they send first.
 * Node can neither make socket pairs nor hand a descriptor to a process that is not its child;
 * a connection to such a socket, in a directory only this process's user can enter, stands in
 * for both (output-channels.ts: a child's output end; relay-spawner.ts: a relay's stdio).
 */
import { mkdtemp, rm } from 'node:fs/promises';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { readHead } from './socket-head.ts';

/** Who waits for the connection that greets with a token (the token's bytes as latin1). */
export type TokenClaims = Map<string, (socket: net.Socket, rest: Buffer) => void>;

/** The server's private unix socket; each connection is handed to whoever claimed the token it sends. */
export class PrivateListener {
  readonly path: string;
  readonly #dir: string;
  readonly #server: net.Server;

  private constructor(dir: string, path: string, server: net.Server) {
    this.#dir = dir;
    this.path = path;
    this.#server = server;
  }

  /**
   * Listens in a new directory (mkdtemp: mode 0700). Each connection's first `tokenBytes` go to
   * the claim registered under them, which is removed; a connection nobody claims, or that is
   * silent for `handshakeMs`, is dropped. Rejects when Unix sockets cannot be used here.
   */
  static async open(prefix: string, claims: TokenClaims, tokenBytes: number, handshakeMs: number) {
    const dir = await mkdtemp(join(tmpdir(), prefix));
    const path = join(dir, 's');
    const server = net.createServer({ pauseOnConnect: true, allowHalfOpen: true });
    try {
      await new Promise<void>((resolve, reject) => server.once('error', reject).listen(path, resolve));
    } catch (err) {
      await rm(dir, { recursive: true, force: true });
      throw err;
    }
    server.on('connection', (socket) => {
      socket.on('error', () => socket.destroy());
      readHead(socket, tokenBytes, handshakeMs, (head, rest) => {
        const key = head.toString('latin1');
        const claim = claims.get(key);
        claims.delete(key);
        if (claim) claim(socket, rest);
        else socket.destroy();
      });
      socket.resume();
    });
    return new PrivateListener(dir, path, server);
  }

  /** Lets the process exit while it listens (the spawner's listener outlives no session). */
  unref(): void {
    this.#server.unref();
  }

  /**
   * Stops listening and removes the directory. Connections already claimed live on (a relay's
   * stdio outlives its spawner), so this does not wait for them as `server.close`'s callback would.
   */
  async close(): Promise<void> {
    this.#server.close();
    await rm(this.#dir, { recursive: true, force: true }).catch(() => undefined);
  }
}
