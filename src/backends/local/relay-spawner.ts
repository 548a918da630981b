/**
 * A local session's relay spawner (build/relay-spawner, native/relay-spawner.c): one small process
 * per session that starts the session's relays, so a command does not cost a `fork()` of the
 * whole server. Node starts every child that way, on the event loop, and the copy of the server's
 * page tables grows with its memory: 2-3 ms per command at 150 MB on a 2-vCPU machine, most of a
 * `true` round trip (docs/benchmarks.md, "The local backend's round trip"). The spawner's own
 * fork costs a fraction of a millisecond.
 *
 * Node cannot hand descriptors to a process that is not its child, nor make socket pairs, so the
 * relay's stdio and control socket are connections the spawner makes to a private Unix socket of
 * ours (private-listener.ts), each announced by a random token: the command sees
 * Unix sockets on its stdio, as it does when Node spawns it (libuv's pipes are socket pairs).
 * A relay started here behaves as a `ChildProcess` for pipe-process.ts and keepers.ts: pid,
 * stdio, `exit`, `kill`.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { EventEmitter } from 'node:events';
import { existsSync } from 'node:fs';
import type net from 'node:net';
import { constants } from 'node:os';
import { Duplex } from 'node:stream';
import { fileURLToPath } from 'node:url';
import { PrivateListener, type TokenClaims } from './private-listener.ts';

const SPAWNER = fileURLToPath(new URL('../../../build/relay-spawner', import.meta.url));
const TOKEN_HEX = 32;
const HANDSHAKE_MS = 5_000;
const errnoNames = new Map(Object.entries(constants.errno).map(([name, n]) => [n, name]));
const signalNames = new Map(Object.entries(constants.signals).map(([name, n]) => [n, name as NodeJS.Signals]));

/**
 * `socket`, or a stand-in when it has ended already: Node emits `end` on a paused socket as soon
 * as it reads the end of the stream with nothing buffered. A relay whose command is done before
 * the spawner's reply and all its sockets are in (a busy loop, a loaded machine) would hand out a
 * stdout that ended before its reader listens, which then waited for the pipe grace (250 ms,
 * pipe-process.ts): past the early-exit window, so a sandbox denial went unclassified. The
 * stand-in ends once it is read, as a child's pipe that saw its end would; nothing is lost (the
 * end comes only with nothing left to read).
 */
function unlessEnded(socket: net.Socket): Duplex {
  if (!socket.readableEnded) return socket;
  socket.destroy();
  return new Duplex({
    allowHalfOpen: false,
    read() {
      this.push(null);
    },
    write(_chunk, _encoding, done) {
      done();
    },
  });
}

/** A relay the spawner started, shaped as much of a `ChildProcess` as its users read. */
export class SpawnedRelay extends EventEmitter {
  pid?: number | undefined;
  exitCode: number | null = null;
  signalCode: NodeJS.Signals | null = null;
  readonly stdio: [net.Socket | null, Duplex, Duplex, Duplex];

  constructor(stdio: [net.Socket | null, Duplex, Duplex, Duplex]) {
    super();
    this.stdio = stdio;
  }

  get stdin(): net.Socket | null {
    return this.stdio[0];
  }
  get stdout(): Duplex {
    return this.stdio[1];
  }
  get stderr(): Duplex {
    return this.stdio[2];
  }

  kill(signal: NodeJS.Signals = 'SIGTERM'): boolean {
    if (this.pid === undefined || this.exitCode !== null || this.signalCode !== null) return false;
    try {
      process.kill(this.pid, signal);
      return true;
    } catch {
      return false;
    }
  }

  /** The spawner reaped it. */
  ended(code: number | null, signal: NodeJS.Signals | null): void {
    if (this.exitCode !== null || this.signalCode !== null) return;
    this.exitCode = code;
    this.signalCode = signal;
    this.emit('exit', code, signal);
  }
}

interface Pending {
  resolve: (pid: number) => void;
  reject: (err: Error) => void;
}

/** A session's relay spawner (build/relay-spawner): forks its relays so that the server does not fork itself. */
export class RelaySpawner {
  readonly #listener: PrivateListener;
  readonly #child: ChildProcess;
  readonly #waiting: TokenClaims;
  readonly #pending = new Map<number, Pending>();
  readonly #relays = new Map<number, SpawnedRelay>();
  /** Exits of relays whose `spawn` has not returned yet (its sockets still on their way). */
  readonly #early = new Map<number, [number | null, NodeJS.Signals | null]>();
  #nextId = 1;
  #dead: string | undefined;

  private constructor(listener: PrivateListener, waiting: TokenClaims, child: ChildProcess) {
    this.#listener = listener;
    this.#waiting = waiting;
    this.#child = child;
    let lines = '';
    child.stdout?.setEncoding('utf8').on('data', (s: string) => {
      lines += s;
      for (let nl = lines.indexOf('\n'); nl >= 0; nl = lines.indexOf('\n')) {
        this.#line(lines.slice(0, nl).split(' '));
        lines = lines.slice(nl + 1);
      }
    });
    child.once('exit', (code, signal) => this.#die(`the relay spawner ended (${signal ?? `exit code ${code}`})`));
    child.stdin?.on('error', () => undefined);
  }

  /** A spawner for one session, or undefined when build/relay-spawner is missing or cannot start. */
  static async start(): Promise<RelaySpawner | undefined> {
    if (!existsSync(SPAWNER)) return undefined;
    const waiting: TokenClaims = new Map();
    const listener = await PrivateListener.open('exec-server-spawn-', waiting, TOKEN_HEX, HANDSHAKE_MS).catch(
      () => undefined,
    );
    if (!listener) return undefined;
    listener.unref();
    const child = spawn(SPAWNER, [listener.path], { stdio: ['pipe', 'pipe', 'inherit'] });
    child.unref();
    (child.stdout as net.Socket | null)?.unref?.();
    (child.stdin as net.Socket | null)?.unref?.();
    return new RelaySpawner(listener, waiting, child);
  }

  get alive(): boolean {
    return this.#dead === undefined;
  }

  /**
   * Starts `file args` as `spawn(file, args, { cwd, env, detached: true, stdio: [stdin ? 'pipe' :
   * 'ignore', 'pipe', 'pipe', 'pipe'] })` would. Rejects with the errno's code (`ENOENT`...)
   * when it cannot start.
   */
  async spawn(file: string, args: readonly string[], o: { cwd: string; env: Record<string, string>; stdin: boolean }) {
    if (this.#dead !== undefined) throw new Error(this.#dead);
    const tokens = [o.stdin, true, true, true].map((on) => (on ? randomBytes(TOKEN_HEX / 2).toString('hex') : ''));
    const sockets = tokens.map((t) => (t === '' ? Promise.resolve(null) : this.#accept(t)));
    const id = this.#nextId++;
    const pidP = new Promise<number>((resolve, reject) => this.#pending.set(id, { resolve, reject }));
    const env = Object.entries(o.env).map(([k, v]) => `${k}=${v}`);
    const fields = [String(id), o.cwd, ...tokens, String(args.length + 1), file, ...args, String(env.length), ...env];
    const body = Buffer.from(`${fields.join('\0')}\0`);
    const head = Buffer.alloc(4);
    head.writeUInt32LE(body.length);
    this.#child.stdin?.write(Buffer.concat([head, body]));
    let pid: number;
    try {
      pid = await pidP;
    } catch (err) {
      for (const t of tokens) this.#waiting.delete(t);
      for (const s of sockets)
        void s.then(
          (x) => x?.destroy(),
          () => undefined,
        );
      throw err;
    }
    let stdio: Array<net.Socket | null>;
    try {
      stdio = await Promise.all(sockets);
    } catch (err) {
      // It runs without its streams: it must not run at all.
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        // gone already
      }
      throw Object.assign(err as Error, { code: 'EIO' });
    }
    const [stdin = null, ...out] = stdio;
    const [stdout, stderr, control] = out.map((x) => unlessEnded(x as net.Socket)) as [Duplex, Duplex, Duplex];
    // Paused since their token: flowing again from the next tick, when the caller listens (its
    // listeners attach in the microtasks that follow this return).
    for (const x of [stdin, stdout, stderr, control]) x?.resume();
    const relay = new SpawnedRelay([stdin, stdout, stderr, control]);
    relay.pid = pid;
    const early = this.#early.get(pid);
    this.#early.delete(pid);
    // Reaped while its sockets were on their way: told once the caller listens (right after).
    if (early) setImmediate(() => relay.ended(...early));
    else if (this.#dead === undefined) this.#relays.set(pid, relay);
    else control.once('close', () => relay.ended(null, null));
    return relay;
  }

  #accept(token: string): Promise<net.Socket> {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.#waiting.delete(token);
        // Never leaves: without an errno code the caller starts the relay itself (pipe-process.ts).
        reject(new Error('the relay spawner did not connect in time'));
      }, HANDSHAKE_MS);
      this.#waiting.set(token, (s, rest) => {
        clearTimeout(timer);
        if (rest.length > 0) s.unshift(rest);
        resolve(s);
      });
    });
  }

  #line([word, a = '', b = '', c = '']: string[]): void {
    if (word === 'spawned' || word === 'failed') {
      const p = this.#pending.get(Number(a));
      this.#pending.delete(Number(a));
      if (word === 'spawned') p?.resolve(Number(b));
      else {
        const code = errnoNames.get(Number(b)) ?? 'EIO';
        // Errno-shaped, as a failed spawn(2): the caller makes it the registry's start error.
        p?.reject(Object.assign(new Error(`spawn ${code}`), { code, errno: -Number(b) }));
      }
    } else if (word === 'exit') {
      const pid = Number(a);
      const signo = Number(c);
      const signal = signo >= 0 ? (signalNames.get(signo) ?? 'SIGKILL') : null;
      const code = signal === null ? Number(b) : null;
      const relay = this.#relays.get(pid);
      this.#relays.delete(pid);
      if (relay) relay.ended(code, signal);
      else this.#early.set(pid, [code, signal]);
    }
  }

  #die(why: string): void {
    if (this.#dead !== undefined) return;
    this.#dead = why;
    // Never leaves: without an errno code the caller starts the relay itself (pipe-process.ts).
    for (const p of this.#pending.values()) p.reject(new Error(why));
    this.#pending.clear();
    // Its relays are no longer its children: their control socket closing is their end.
    for (const relay of this.#relays.values()) relay.stdio[3].once('close', () => relay.ended(null, null));
    this.#relays.clear();
  }

  /** Ends the spawner (its relays run on: the session's keepers end them). */
  async close(): Promise<void> {
    this.#child.stdin?.end();
    await this.#listener.close();
  }
}
