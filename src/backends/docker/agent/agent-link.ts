/**
 * Agent links (docs/docker-backend.md, "Agent links"; docs/security-agent-link.md). Through an
 * attached exec, every byte a command prints is copied by the engine's shim and by the engine
 * itself before the server reads it; on a two-core host those copies cap a stream. Where the
 * server and the engine share a filesystem, the server instead LISTENS on a unix socket of its
 * own for each container and the exec agent inside connects out to it.
 *
 * Why this direction: a socket the agent made inside the container is on a path the container
 * can rewrite (root in a `danger-full-access` session can put a symlink there, to another
 * session's socket), and a server that opens it follows it into another tenant's container.
 * Here the server opens nothing the container can write: it creates the socket in a directory
 * of its own (0700) and the engine mounts that directory READ-ONLY into the container (root in a
 * container without CAP_SYS_ADMIN cannot remount it or mount over it). The connecting agent
 * proves which container it serves with a secret made for that container at provision (kept in
 * a file beside the mounted directory, never inside it); a connection without it is refused.
 *
 * Layout: `root/<instance>/<container dir>/secret` (0600) and `.../s/agent.sock`, `s` mounted
 * at LINK_MOUNT.
 */
import { randomBytes, timingSafeEqual } from 'node:crypto';
import { constants } from 'node:fs';
import { lstat, mkdir, open, rm, unlink } from 'node:fs/promises';
import { createServer, type Server, type Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { dirname, join } from 'node:path';
import { LINK_MOUNT } from '../container/container-config.ts';
import type { DockerLogger } from '../options.ts';
import { execError } from '../../../errors.ts';

/** What the agent sends first on a link: this magic, then the 32-byte secret. */
export const LINK_MAGIC = Buffer.from('EXAGLNK1');
/** What the agent sends first on an egress tunnel (one connection per proxy client), then the secret. */
export const TUNNEL_MAGIC = Buffer.from('EXAGTUN1');
/** The same, from an agent that can hand its client's socket over (src/egress/native-relay.ts). */
export const TUNNEL_PASS_MAGIC = Buffer.from('EXAGTUN2');
const SECRET_BYTES = 32;
const GREETING_BYTES = LINK_MAGIC.length + SECRET_BYTES;
/** A connection must present its greeting within this. */
const GREETING_TIMEOUT_MS = 5_000;
/** Connections still to present their greeting, per link (bounded: a container can only waste its own). */
const MAX_PENDING = 32;
/** Name of the server's socket in a container's link directory. */
export const LINK_SOCKET = 'agent.sock';
/** The subdirectory of a link directory that is mounted into the container. */
export const LINK_SUBDIR = 's';

/** The agent's socket inside the container (the read-only mount). */
export const LINK_IN_CONTAINER = `${LINK_MOUNT}/${LINK_SOCKET}`;

/**
 * The server's listener for one container's agent. Connections that present the container's
 * secret are handed to `next()` (the newest wins); every other one is closed and logged.
 */
export class AgentLink {
  /** The server's private directory of this container (holds the secret and `s/`). */
  readonly dir: string;
  /** The directory bind-mounted read-only into the container. */
  readonly mountSource: string;
  readonly #secret: Buffer;
  readonly #log: DockerLogger;
  readonly #server: Server;
  #ready: Socket | undefined;
  #waiter: ((s: Socket | undefined) => void) | undefined;
  #pending = 0;
  #closed = false;
  /** Connections refused for a wrong or missing secret (for tests and logs). */
  refused = 0;
  /**
   * Where verified egress tunnels go (docs/architecture.md, "Egress"): the session's proxy.
   * Unset: tunnels are closed (a session without `network.allow`).
   */
  onTunnel: ((s: Duplex, offersSocket: boolean) => void) | undefined;

  private constructor(dir: string, secret: Buffer, log: DockerLogger) {
    this.dir = dir;
    this.mountSource = join(dir, LINK_SUBDIR);
    this.#secret = secret;
    this.#log = log;
    this.#server = createServer((s) => this.#greet(s));
    this.#server.on('error', (err) => log.warn({ err: err.message, dir }, 'agent link listener failed'));
  }

  /** The secret as the agent reads it (hex), on the stdin of `exec-agent start`. */
  get secretHex(): string {
    return this.#secret.toString('hex');
  }

  /** A new link: private directory, secret file, listening socket. */
  static async create(dir: string, log: DockerLogger): Promise<AgentLink> {
    await mkdir(dir, { mode: 0o700 });
    await mkdir(join(dir, LINK_SUBDIR), { mode: 0o700 });
    const secret = randomBytes(SECRET_BYTES);
    const fh = await open(join(dir, 'secret'), 'wx', 0o600);
    try {
      await fh.writeFile(secret.toString('hex'));
    } finally {
      await fh.close();
    }
    const link = new AgentLink(dir, secret, log);
    await link.#listen();
    return link;
  }

  /**
   * The link of a re-adopted container (server restart), listening again at the same path so
   * its agent finds it. `dir` comes from the engine's inspect, and must be one of ours: a
   * directory of this server's uid, closed to others, whose secret is a regular file of ours.
   */
  static async reopen(dir: string, log: DockerLogger): Promise<AgentLink> {
    const uid = process.getuid?.();
    for (const [path, kind] of [
      [dir, 'dir'],
      [join(dir, LINK_SUBDIR), 'dir'],
      [join(dir, 'secret'), 'file'],
    ] as const) {
      const st = await lstat(path);
      const isKind = kind === 'dir' ? st.isDirectory() : st.isFile();
      if (!isKind || (uid !== undefined && st.uid !== uid) || (st.mode & 0o077) !== 0)
        throw execError(
          'EXEC_ERR_CONFIG',
          `${path} is not the server's private ${kind === 'dir' ? 'directory' : 'file'}`,
        );
    }
    // O_NOFOLLOW: checked above, and never a link at the moment it is read either.
    const fh = await open(join(dir, 'secret'), constants.O_RDONLY | constants.O_NOFOLLOW);
    const hex = (await fh.readFile('utf8').finally(() => fh.close())).trim();
    if (!/^[0-9a-f]{64}$/.test(hex)) throw execError('EXEC_ERR_CONFIG', `${dir}/secret is not a link secret`);
    const link = new AgentLink(dir, Buffer.from(hex, 'hex'), log);
    // The previous server's socket is left behind in our own directory: replaced.
    await unlink(join(dir, LINK_SUBDIR, LINK_SOCKET)).catch(() => undefined);
    await link.#listen();
    return link;
  }

  /** A verified connection the agent made on its own (after a break, to a restarted server), if any. */
  take(): Socket | undefined {
    const ready = this.#ready;
    this.#ready = undefined;
    return ready !== undefined && !ready.destroyed ? ready : undefined;
  }

  /** Whoever waits in `next()` gets undefined now (its caller gave up). */
  cancel(): void {
    const w = this.#waiter;
    this.#waiter = undefined;
    w?.(undefined);
  }

  /**
   * The next verified connection from this container's agent: one already waiting, else the
   * first within `timeoutMs`; undefined when none came. One waiter at a time.
   */
  next(timeoutMs: number): Promise<Socket | undefined> {
    const ready = this.take();
    if (ready !== undefined) return Promise.resolve(ready);
    this.cancel();
    if (this.#closed) return Promise.resolve(undefined);
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.#waiter = undefined;
        resolve(undefined);
      }, timeoutMs);
      this.#waiter = (s) => {
        clearTimeout(timer);
        resolve(s);
      };
    });
  }

  /** Stops listening and removes the socket (the directory goes with the container). */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#server.close();
    this.#ready?.destroy();
    this.#ready = undefined;
    this.cancel();
  }

  #listen(): Promise<void> {
    return new Promise((resolve, reject) => {
      this.#server.once('error', reject);
      this.#server.listen(join(this.mountSource, LINK_SOCKET), () => {
        this.#server.off('error', reject);
        // Only the server's own links: nothing about them keeps the process alive.
        this.#server.unref();
        resolve();
      });
    });
  }

  /** Reads the greeting; a connection with this container's secret is handed on, others closed. */
  #greet(s: Socket): void {
    if (this.#closed || this.#pending >= MAX_PENDING) {
      s.destroy();
      return;
    }
    this.#pending++;
    s.unref();
    let got = Buffer.alloc(0);
    let finished = false;
    let tunnel = false;
    let offersSocket = false;
    const done = (ok: boolean, why?: string): void => {
      if (finished) return;
      finished = true;
      this.#pending--;
      clearTimeout(timer);
      s.removeListener('data', onData);
      if (!ok) {
        this.refused++;
        this.#log.warn({ dir: this.dir, reason: why }, 'agent link refused a connection');
        s.destroy();
        return;
      }
      const rest = got.subarray(GREETING_BYTES);
      s.pause();
      if (rest.length > 0) s.unshift(rest);
      if (!tunnel) this.#accept(s);
      else if (this.onTunnel) {
        // A command that half-closes its connection (sent everything, still reading) must not
        // lose the answer: the tunnel's end is passed on, never turned into a close.
        s.allowHalfOpen = true;
        this.onTunnel(s, offersSocket);
      } else s.destroy();
    };
    const timer = setTimeout(() => done(false, 'no greeting in time'), GREETING_TIMEOUT_MS);
    const onData = (d: Buffer): void => {
      got = Buffer.concat([got, d]);
      if (got.length < GREETING_BYTES) return;
      const magic = got.subarray(0, LINK_MAGIC.length);
      const secret = got.subarray(LINK_MAGIC.length, GREETING_BYTES);
      offersSocket = magic.equals(TUNNEL_PASS_MAGIC);
      tunnel = offersSocket || magic.equals(TUNNEL_MAGIC);
      if (!tunnel && !magic.equals(LINK_MAGIC)) done(false, 'not an agent greeting');
      else if (!timingSafeEqual(secret, this.#secret)) done(false, "the secret is not this container's");
      else done(true);
    };
    s.on('data', onData);
    s.on('error', () => undefined);
    s.once('close', () => {
      if (got.length < GREETING_BYTES) done(false, 'closed before its greeting');
    });
  }

  #accept(s: Socket): void {
    if (this.#closed) {
      s.destroy();
      return;
    }
    const w = this.#waiter;
    if (w) {
      this.#waiter = undefined;
      w(s);
      return;
    }
    // Nobody waits (the agent came back on its own): kept for the next use, the newest wins.
    this.#ready?.destroy();
    this.#ready = s;
  }
}

/** The container directory of a link mount's source (`<dir>/s`). */
export function linkDirOf(mountSource: string): string {
  return dirname(mountSource);
}

/** Removes a link's directory (the container is gone). */
export function removeLinkDir(dir: string): Promise<void> {
  return rm(dir, { recursive: true, force: true });
}
